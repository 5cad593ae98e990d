/*
 * cli/cli_check.c — `sluice check FILE.lua`: load and check a config
 * without starting anything; `--keys` prints the key reference.
 */
#include "cli/cli.h"
#include "server/config.h"

#include <stdio.h>
#include <string.h>

int sl_cli_check_main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--keys") == 0) {
        sl_buf b = SL_BUF_INIT;
        int rc = sl_config_keys_markdown(&b);
        if (!rc)
            fwrite(b.data, 1, b.len, stdout);
        sl_buf_free(&b);
        return rc ? 1 : 0;
    }
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: sluice check CONFIG.lua   check a config; exit 1 with FILE:LINE: "
                        "message for each mistake\n"
                        "       sluice check --keys       print every config key (Markdown)\n");
        return 2;
    }
    sl_config *cfg = NULL;
    sl_buf diag = SL_BUF_INIT;
    int rc = sl_config_load(argv[1], &cfg, &diag);
    if (rc) {
        fwrite(diag.data, 1, diag.len, stderr);
        if (!diag.len)
            fprintf(stderr, "%s: %s\n", argv[1], sl_strerror(rc));
    } else {
        printf("%s: ok (%zu sets, %zu rules, %zu sources)\n", argv[1], cfg->nsets, cfg->nrules,
               cfg->nsources);
    }
    sl_buf_free(&diag);
    sl_config_free(cfg);
    return rc ? 1 : 0;
}
