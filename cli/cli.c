/*
 * cli/cli.c — what the subcommands share: the one way a usage error is
 * printed and the exit status it gives.
 */
#include "cli/cli.h"

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
