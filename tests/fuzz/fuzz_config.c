/*
 * tests/fuzz/fuzz_config.c — the Lua config loader (server/config.c
 * sl_config_load): the input is written as sluice.lua in a scratch
 * directory and loaded, as `sluice check` and `sluice serve -c` do. The
 * sandbox's memory cap and instruction budget must stop every hostile
 * config: a load that runs into libFuzzer's -timeout is a finding. Inputs
 * naming server.plugin_dir are skipped (the loader would dlopen() what is
 * there).
 */
#include "core/base/buf.h"
#include "server/config.h"
#include "tests/fuzz/fuzzutil.h"

#include <stdio.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A config naming a plugin folder makes the loader dlopen() every .so
     * in it: not something to do with fuzzed folder names. */
    if (fz_find((const char *)data, (const char *)data + size, "plugin_dir", 10))
        return 0;
    char path[1024];
    snprintf(path, sizeof path, "%s/sluice.lua", fz_tmpdir());
    FZ_CHECK(fz_write_file(path, data, size) == 0, "write %s", path);
    sl_config *cfg = NULL;
    sl_buf diag = SL_BUF_INIT;
    int rc = sl_config_load(path, &cfg, &diag);
    FZ_CHECK(rc == 0 || rc == SL_EINVAL || rc == SL_ENOMEM, "load: %d", rc);
    if (rc == SL_EINVAL)
        FZ_CHECK(diag.len > 0, "refused without a message");
    if (rc == 0)
        sl_config_free(cfg);
    sl_buf_free(&diag);
    return 0;
}
