/*
 * agent/agent.h — the Databus agent (`sluice databus`): a local process that
 * app processes write NDJSON lines to over a UNIX (or loopback TCP) socket.
 * It batches them per (set, lane, stream), stamps the lane, forwards the
 * batches to a sluice server over HTTP with retries, and spools batches to a
 * bounded local disk queue while the server is down, so that nothing it
 * acknowledged is lost. Each connection is tied to one of `streams` ordered
 * streams for its life, so its events of a (set, lane) stay in order.
 *
 * The wire protocol, acks and durability are described in docs/agent.md.
 * Everything runs on one thread: libcurl multi drives the upstream requests
 * and polls the listeners and client connections as extra descriptors.
 */
#ifndef SL_AGENT_H
#define SL_AGENT_H

#include "core/base/err.h"

#include <stddef.h>
#include <stdint.h>

#define SL_AGENT_MAX_LISTEN 8
#define SL_AGENT_URL_MAX 512
#define SL_AGENT_STREAMS_MAX 64

/* Everything the agent is told. Filled by sl_agent_opts_init() with the
 * defaults, then by the command line and the --config file. */
typedef struct sl_agent_opts {
    const char *listen[SL_AGENT_MAX_LISTEN]; /* "unix:PATH" or "HOST:PORT" (borrowed) */
    int nlisten;
    char upstream[SL_AGENT_URL_MAX]; /* "http://host:port", no trailing slash */
    char lane[33];                   /* "" = base */
    char spool_dir[4096];
    const char *config_path; /* key = value file re-read on SIGHUP; may be NULL */
    char config_set[129];    /* set polled for settings (never upstream); "" = none */
    int64_t config_poll_ms;  /* how often it is polled (10 s) */
    uint64_t spool_max;      /* bytes of spool files at most (256 MiB) */
    int64_t linger_ms;       /* a batch waits at most this long for more (5) */
    uint64_t batch_bytes;    /* a batch is sent once this big (1 MiB) */
    uint64_t max_line;       /* longest input line (1 MiB); longer → TooLarge */
    int64_t spool_after_ms;  /* spool a (set, lane, stream) failing this long (1000) */
    int streams;             /* ordered streams per (set, lane), 1..64 (4) */
    uint64_t key_max;        /* memory per (set, lane, stream) before spooling (16 MiB) */
    int64_t request_ms;      /* one upstream request at most this long (10 s) */
    int64_t shutdown_ms;     /* on SIGTERM, try upstream this long (5 s) */
} sl_agent_opts;

/* Fills o with the defaults: no listeners, no upstream, lane from
 * $SLUICE_LANE (when valid), spool dir $XDG_RUNTIME_DIR/sluice-databus or
 * /tmp/sluice-databus-UID. */
void sl_agent_opts_init(sl_agent_opts *o);

/* Sets one setting from its text: key upstream, lane, linger_ms,
 * batch_bytes, spool_max, spool_after_ms or streams. Returns 0, or SL_EINVAL with err
 * saying what is wrong (o unchanged then). */
int sl_agent_conf_set(sl_agent_opts *o, const char *key, const char *value, sl_error *err);

/* Reads the key = value file at path ('#' starts a comment) into o: keys
 * as sl_agent_conf_set() takes them. Returns 0, or SL_EINVAL /
 * an I/O code with err naming the file, line and key; o may then hold the
 * keys before the bad one, so callers reloading apply it to a copy. */
int sl_agent_conf_load(const char *path, sl_agent_opts *o, sl_error *err);

/* Normalizes and checks an upstream URL ("host:port" gets "http://", trailing
 * slashes are dropped) into out (SL_AGENT_URL_MAX bytes). Returns 0 or
 * SL_EINVAL with err set. */
int sl_agent_upstream_set(const char *url, char *out, sl_error *err);

/* Runs the agent until SIGTERM or SIGINT (installs handlers for those and
 * SIGHUP, ignores SIGPIPE). Returns 0 after a clean stop (every pending line
 * answered, unsent batches spooled), or a negative code with err set when it
 * could not start (a listener or the spool dir failed); nothing is left
 * behind then except what was already in the spool. */
int sl_agent_run(const sl_agent_opts *o, sl_error *err);

#endif
