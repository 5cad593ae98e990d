/*
 * server/serve.h — `sluice serve`: the server's whole lifecycle in one call
 * (server/serve.c), which cli/main.c dispatches to.
 */
#ifndef SL_SERVE_H
#define SL_SERVE_H

/* sluice serve [-c CONFIG.lua] [--data DIR] [--listen HOST:PORT] … (argv[0]
 * is "serve"): runs until SIGTERM/SIGINT. Returns the process exit status:
 * 0 a clean stop, 1 a failure (said on stderr or in the log), 2 a usage
 * error. */
int sl_serve_main(int argc, char **argv);

#endif
