/*
 * cli/cli_key.c — `sluice key new [NAME]`: makes an API key (a random
 * token, printed once) and the server.api_keys entry holding its SHA-256;
 * `sluice key hash`: the entry's hash of an existing token read from stdin.
 * See docs/security.md.
 */
#include "core/bus/auth.h"
#include "cli/cli.h"
#include "core/base/httpc.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>

static const char key_usage[] =
    "usage: sluice key new [NAME] [--publish SETS] [--read SETS] [--admin] [--metrics]\n"
    "       sluice key hash < TOKEN_FILE\n"
    "  new   prints a new random token (shown once; sluice stores only its SHA-256) and the\n"
    "        entry to add to server { api_keys = { … } }. SETS: comma-separated set names\n"
    "        or globs (\"orders,audit.*\"); without --publish/--read/--admin/--metrics the\n"
    "        entry gets publish and read on every set (\"*\"): narrow it\n"
    "  hash  prints the SHA-256 of the token on stdin's first line (for a token made\n"
    "        elsewhere, which must carry at least 128 random bits)\n";

static const sl_cli_usage k_usage = {"key new", key_usage, false};

/* Prints "{ "a", "b" }" for the comma-separated list s; false when an item
 * is not a set pattern. */
static bool print_list(FILE *f, const char *s)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", s);
    fputs("{ ", f);
    int n = 0;
    char *save = NULL;
    for (char *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        while (*p == ' ')
            p++;
        if (!sl_auth_pattern_valid(p))
            return false;
        fprintf(f, "%s\"%s\"", n++ ? ", " : "", p);
    }
    fputs(" }", f);
    return n > 0;
}

static int key_new(int argc, char **argv)
{
    const char *name = "key", *publish = NULL, *read = NULL;
    bool admin = false, metrics = false, named = false;
    for (int i = 2; i < argc; i++) {
        const char *v = NULL;
        bool missing = false;
        if (sl_httpc_opt(argc, argv, &i, "--publish", &v, &missing) && !missing) {
            publish = v;
        } else if (sl_httpc_opt(argc, argv, &i, "--read", &v, &missing) && !missing) {
            read = v;
        } else if (strcmp(argv[i], "--admin") == 0) {
            admin = true;
        } else if (strcmp(argv[i], "--metrics") == 0) {
            metrics = true;
        } else if (argv[i][0] != '-' && !named) {
            name = argv[i];
            named = true;
        } else {
            return sl_cli_usage_error(&k_usage, "unexpected argument \"%s\"", argv[i]);
        }
    }
    if (!sl_auth_name_valid(name)) {
        fprintf(stderr, "sluice key new: \"%s\" is not a key name ([A-Za-z0-9._-]{1,64})\n", name);
        return 2;
    }
    if (!publish && !read && !admin && !metrics)
        publish = read = "*";
    char tok[SL_AUTH_TOKEN_LEN + 1], hex[SL_AUTH_HEX_LEN + 1];
    sl_error err = {0};
    if (sl_auth_new_token(tok, &err)) {
        fprintf(stderr, "sluice key new: %s\n", err.msg);
        return 1;
    }
    sl_auth_hash_hex(tok, strlen(tok), hex);
    /* The entry first, in a buffer: a bad --publish list fails before the
     * token is shown. */
    char *entry = NULL;
    size_t elen = 0;
    FILE *f = open_memstream(&entry, &elen);
    if (!f) {
        fprintf(stderr, "sluice key new: out of memory\n");
        return 1;
    }
    bool ok = true;
    fprintf(f, "%s = { sha256 = \"%s\"", name, hex);
    if (publish) {
        fputs(", publish = ", f);
        ok = ok && print_list(f, publish);
    }
    if (read) {
        fputs(", read = ", f);
        ok = ok && print_list(f, read);
    }
    if (admin)
        fputs(", admin = true", f);
    if (metrics)
        fputs(", metrics = true", f);
    fputs(" },\n", f);
    fclose(f);
    if (!ok) {
        fprintf(stderr, "sluice key new: --publish/--read want comma-separated set names or "
                        "globs of [A-Za-z0-9._-*]\n");
        free(entry);
        return 2;
    }
    printf("token: %s\n"
           "# Give the token to the client (sluice --api-key or SLUICE_API_KEY; HTTP\n"
           "# Authorization: Bearer TOKEN). It is shown only now: sluice keeps only its SHA-256.\n"
           "# Add this entry to server { api_keys = { … } }, then reload (kill -HUP) or restart:\n"
           "%s",
           tok, entry);
    OPENSSL_cleanse(tok, sizeof tok);
    free(entry);
    return fflush(stdout) == 0 ? 0 : 1;
}

static int key_hash(void)
{
    char line[1024];
    if (!fgets(line, sizeof line, stdin)) {
        fprintf(stderr, "sluice key hash: no token on stdin\n");
        return 2;
    }
    size_t n = strcspn(line, "\r\n");
    line[n] = '\0';
    if (n < 16) {
        fprintf(stderr,
                "sluice key hash: a token of %zu characters is too short to be safe with "
                "an unsalted hash (use `sluice key new`)\n",
                n);
        return 2;
    }
    char hex[SL_AUTH_HEX_LEN + 1];
    sl_auth_hash_hex(line, n, hex);
    OPENSSL_cleanse(line, sizeof line);
    printf("%s\n", hex);
    return 0;
}

int sl_cli_key_main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "new") == 0)
        return key_new(argc, argv);
    if (argc == 2 && strcmp(argv[1], "hash") == 0)
        return key_hash();
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(key_usage, stdout);
        return 0;
    }
    fputs(key_usage, stderr);
    return 2;
}
