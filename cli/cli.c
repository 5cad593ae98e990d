/*
 * cli/cli.c — what the subcommands share: the one way a usage error is
 * printed and the exit status it gives, the event set argument's check, and
 * reading integers from the server's answers.
 */
#include "cli/cli.h"
#include "core/bus/set.h"

#include <stdarg.h>
#include <stdio.h>

int sl_cli_usage_error(const sl_cli_usage *u, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "sluice %s: ", u->cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs(u->blank_line ? "\n\n" : "\n", stderr);
    if (u->text)
        fputs(u->text, stderr);
    return SL_CLI_USAGE;
}

int sl_cli_set_arg(const sl_cli_usage *u, const char *set)
{
    if (!set)
        return sl_cli_usage_error(u, "missing the event set name");
    if (!sl_set_name_valid(set))
        return sl_cli_usage_error(u, "invalid set name \"%s\" (want [A-Za-z0-9._-]{1,128})", set);
    return 0;
}

int64_t sl_cli_member_i64(const sl_json_tok *obj, const char *key)
{
    sl_json_tok v;
    int64_t n = 0;
    if (sl_json_get(obj, key, &v))
        sl_json_i64(&v, &n);
    return n;
}
