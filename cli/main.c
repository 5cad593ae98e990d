/*
 * cli/main.c — the sluice binary: dispatches to the subcommands.
 */
#include "cli/cli.h"
#include "core/base/httpc.h"
#include "server/serve.h"

#include <stdio.h>
#include <string.h>

#define SLUICE_VERSION "0.1.0"

static void usage(FILE *f)
{
    fputs("usage: sluice COMMAND [ARGS]\n"
          "\n"
          "commands:\n"
          "  serve [--data DIR] [--listen HOST:PORT]  run the server (see serve --help)\n"
          "  check CONFIG.lua           check a config file; FILE:LINE: message per mistake\n"
          "  test CONFIG.lua TESTS.lua  run rule tests: feed events to rules, check the output\n"
          "  schema infer SET           print JSON Schemas inferred from a set's events\n"
          "  schedule list -c CONFIG    the config's schedules and their next fire times\n"
          "  put SET [FILE]             publish NDJSON events over HTTP\n"
          "  tail SET [--follow]        print a set's events as NDJSON\n"
          "  redrive DLQSET --to SET    move a dead-letter set's events back to SET\n"
          "  lane list|drop LANE        the server's lanes; stop a lane's routes and cursors\n"
          "  databus --listen unix:PATH --upstream URL  the local Databus agent (docs/agent.md)\n"
          "  replay RULE --from TIME    deliver a rule's events of a time window again\n"
          "  status [--server URL]      a report of a running server: sets, rules, lanes\n"
          "  key new [NAME]             make an API key: a token and its server.api_keys entry\n"
          "  key hash < TOKEN_FILE      print the server.api_keys hash of an existing token\n"
          "  demo [DIR]                 append, read back and verify a sample event set\n"
          "  log append PARTITION_DIR   append stdin lines as records, print the last offset\n"
          "  log dump PARTITION_DIR     print batches and records\n"
          "  log verify PARTITION_DIR   check every batch, record and index; exit 1 if damaged\n"
          "  log recover PARTITION_DIR  cut a damaged tail and rebuild the indexes\n"
          "  version                    print the version\n"
          "\n"
          "Run `sluice log --help` for the log tools' options. Commands that talk to a server\n"
          "take --api-key TOKEN (or SLUICE_API_KEY) and --cacert FILE (or SLUICE_CA_FILE).\n",
          f);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    /* The commands that talk to a server share --api-key and --cacert. */
    static const char *const clients[] = {"put",    "tail",   "redrive", "lane",
                                          "status", "replay", "schema"};
    for (size_t i = 0; i < sizeof clients / sizeof *clients; i++) {
        if (strcmp(cmd, clients[i]) == 0) {
            int sub_argc = argc - 1;
            int rc = sl_httpc_take_flags(&sub_argc, argv + 1);
            if (rc)
                return rc;
            argc = sub_argc + 1;
        }
    }
    if (strcmp(cmd, "key") == 0)
        return sl_cli_key_main(argc - 1, argv + 1);
    if (strcmp(cmd, "log") == 0)
        return sl_cli_log_main(argc - 1, argv + 1);
    if (strcmp(cmd, "serve") == 0)
        return sl_serve_main(argc - 1, argv + 1);
    if (strcmp(cmd, "check") == 0)
        return sl_cli_check_main(argc - 1, argv + 1);
    if (strcmp(cmd, "test") == 0)
        return sl_cli_test_main(argc - 1, argv + 1);
    if (strcmp(cmd, "put") == 0)
        return sl_cli_put_main(argc - 1, argv + 1);
    if (strcmp(cmd, "tail") == 0)
        return sl_cli_tail_main(argc - 1, argv + 1);
    if (strcmp(cmd, "redrive") == 0)
        return sl_cli_redrive_main(argc - 1, argv + 1);
    if (strcmp(cmd, "lane") == 0)
        return sl_cli_lane_main(argc - 1, argv + 1);
    if (strcmp(cmd, "status") == 0)
        return sl_cli_status_main(argc - 1, argv + 1);
    if (strcmp(cmd, "replay") == 0)
        return sl_cli_replay_main(argc - 1, argv + 1);
    if (strcmp(cmd, "schema") == 0)
        return sl_cli_schema_main(argc - 1, argv + 1);
    if (strcmp(cmd, "demo") == 0)
        return sl_cli_demo_main(argc - 1, argv + 1);
    if (strcmp(cmd, "schedule") == 0)
        return sl_cli_schedule_main(argc - 1, argv + 1);
    if (strcmp(cmd, "databus") == 0)
        return sl_cli_databus_main(argc - 1, argv + 1);
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("sluice %s\n", SLUICE_VERSION);
        return 0;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "sluice: unknown command \"%s\"\n\n", cmd);
    usage(stderr);
    return 2;
}
