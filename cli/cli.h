/*
 * cli/cli.h — the subcommands of the sluice binary, one entry point each.
 * Each returns the process exit status: 0 ok, 1 failure, 2 usage error.
 */
#ifndef SL_CLI_H
#define SL_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "core/base/json.h"

/* The exit status of a usage error (a wrong option, argument or value). */
#define SL_CLI_USAGE 2

/* What a subcommand prints with a usage error. */
typedef struct sl_cli_usage {
    const char *cmd;  /* "lane": the message starts "sluice lane: " */
    const char *text; /* the usage text (ending in a newline), or NULL */
    bool blank_line;  /* a blank line between the message and the text */
} sl_cli_usage;

/* Prints "sluice CMD: MESSAGE" and a newline to stderr, MESSAGE formatted
 * from fmt as printf() does, then u->text. Returns SL_CLI_USAGE, for
 * `return sl_cli_usage_error(…);`. */
int sl_cli_usage_error(const sl_cli_usage *u, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Checks a command's event set argument. A missing or invalid name is a
 * usage error, printed with u. Returns 0, or SL_CLI_USAGE. */
int sl_cli_set_arg(const sl_cli_usage *u, const char *set);

/* The integer member key of a server answer's object, or 0 when it is
 * absent or not an integer (what the tables print). */
int64_t sl_cli_member_i64(const sl_json_tok *obj, const char *key);

/* sluice log append|dump|verify|recover … (argv[0] is "log"). */
int sl_cli_log_main(int argc, char **argv);

/* sluice demo [DIR]: writes, reads back and verifies a small event set. */
int sl_cli_demo_main(int argc, char **argv);

/* sluice put SET [FILE] …: publish NDJSON over HTTP. */
int sl_cli_put_main(int argc, char **argv);

/* sluice tail SET …: print events as NDJSON. */
int sl_cli_tail_main(int argc, char **argv);

/* sluice schema infer SET …: print the schemas of a set's event types. */
int sl_cli_schema_main(int argc, char **argv);

/* sluice redrive DLQSET --to SET [--max N]: move dead-lettered events back
 * into a set through the running server (core/bus/redrive.h). */
int sl_cli_redrive_main(int argc, char **argv);

/* sluice lane list|drop LANE: a running server's lanes (docs/lanes.md). */
int sl_cli_lane_main(int argc, char **argv);

/* sluice replay RULE --from TIME [--to TIME]: deliver a window of a rule's
 * events again through the running server, following its progress. */
int sl_cli_replay_main(int argc, char **argv);

/* sluice status [--server URL] [--interval S]: a report of a running server's
 * sets (with rates), rules, lanes and sources, from its JSON API. */
int sl_cli_status_main(int argc, char **argv);

/* `sluice key new [NAME]` / `sluice key hash` (cli/cli_key.c): API keys
 * for server.api_keys (docs/security.md). */
int sl_cli_key_main(int argc, char **argv);

/* sluice check CONFIG.lua: check a config file without starting anything. */
int sl_cli_check_main(int argc, char **argv);

/* sluice test CONFIG.lua TESTS.lua (cli/cli_ruletest.c): feed test events
 * into rules and check what their targets would receive, without starting
 * anything (docs/testing.md). */
int sl_cli_test_main(int argc, char **argv);

/* sluice schedule list -c CONFIG.lua (cli/cli_schedule.c): the config's
 * schedules, their next fire times and the last tick fired
 * (docs/schedules.md). */
int sl_cli_schedule_main(int argc, char **argv);

/* sluice databus --listen … --upstream URL: the local agent (agent/agent.h). */
int sl_cli_databus_main(int argc, char **argv);

#endif
