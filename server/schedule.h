/*
 * server/schedule.h — schedules: events made on a clock (cron, rate, at:
 * core/base/cron.h) and published into a set, exactly once per tick when
 * nothing crashes, at least once with the same id when something does
 * (docs/schedules.md).
 *
 * One scheduler per server, with one thread that sleeps until the next
 * tick (a condition variable on CLOCK_MONOTONIC, woken by set/poke/stop,
 * and at least every SL_SCHEDULER_RECHECK_MS so a jump of the wall clock
 * is noticed). Its state is DATA/schedules/state.json, written whole
 * (temp file, fsync, rename, fsync of the folder): per schedule the tick
 * it has fired up to ("after"), the last one fired, and a pending one.
 * Each tick goes: pending = T on disk → fire (the callback returns 0 once
 * the event is durably stored) → last = T on disk. After a crash between
 * the two writes the pending tick is fired again, with the same event id
 * (derived from the schedule's name and the tick), so a consumer that
 * dedupes by id sees it once.
 *
 * Missed ticks: a tick is missed when it came due while the scheduler was
 * not watching the schedule (the server was down: ticks at or before the
 * moment it began watching) or when it is more than SL_SCHEDULER_LATE_MS
 * late (a suspended machine, a clock jump, a fire that kept failing). Of
 * the missed ticks of a schedule only the latest catch_up fire (oldest
 * first); 0 fires none, 1 (the default) the latest. A schedule the state
 * file does not know yet fires nothing from the past: its first tick is
 * the first one after it was set (so an `at` already past never fires).
 * A schedule whose expression or time zone changes keeps its last tick and
 * fires the new expression's ticks from the change on; one that is
 * disabled fires nothing and, enabled again, does not catch up on the time
 * it was disabled. A schedule that goes away keeps its state in the file
 * for SL_SCHEDULER_KEEP_MS (it may come back with the next reload or API
 * call), then it is forgotten.
 *
 * A failed fire (a missing set, back-pressure, a full disk) is logged and
 * retried with doubling back-off (retry_initial_ms … retry_max_ms), never
 * dropped; the schedule's later ticks wait behind it.
 */
#ifndef SL_SCHEDULE_H
#define SL_SCHEDULE_H

#include "core/base/buf.h"
#include "core/base/cron.h"
#include "core/base/err.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A schedule as the config (schedule "NAME" { … }) or the API declares it.
 * Every string is owned by whoever built the struct (the config:
 * sl_schedule_decl_free()); the scheduler copies what it is given. */
typedef struct sl_schedule_decl {
    char *name; /* 1-128 of A-Z a-z 0-9 . _ - (as a set name) */
    int line;   /* of the config block; 0 elsewhere */
    /* Exactly one of the three, without "cron(…)": "0 3 * * ? *",
     * "5 minutes", "2026-12-24T18:00:00". */
    char *cron, *rate, *at;
    char *timezone;   /* a tz database name; NULL: UTC */
    char *set;        /* where the events go */
    char *event_json; /* the CloudEvent template: a JSON object with type and source
                         (strings), and data, subject, datacontenttype, dataschema,
                         extensions as wanted; never id, time or specversion */
    int catch_up;     /* missed ticks fired after downtime: 0 none, 1 the latest (default) */
    bool enabled;     /* false: fires nothing (default true) */
    bool api;         /* declared by the EventBridge API's chunk (server/config.h) */
} sl_schedule_decl;

#define SL_SCHEDULE_CATCH_UP_DEFAULT 1
#define SL_SCHEDULE_CATCH_UP_MAX 10000
/* The most schedules one scheduler holds (config and API together). */
#define SL_SCHEDULER_MAX 100000
/* A tick this late (ms) counts as missed. */
#define SL_SCHEDULER_LATE_MS 60000
/* The thread looks at the wall clock at least this often (ms). */
#define SL_SCHEDULER_RECHECK_MS 5000
/* How long the state of a schedule that went away is kept (ms): 7 days. */
#define SL_SCHEDULER_KEEP_MS (7LL * 86400 * 1000)
/* Next fire times sl_scheduler_list() gives at most. */
#define SL_SCHEDULE_NEXT_MAX 100

/* A decl with the defaults (catch_up 1, enabled) and nothing set. */
void sl_schedule_decl_init(sl_schedule_decl *d);

/* Frees d's strings (not d). */
void sl_schedule_decl_free(sl_schedule_decl *d);

/* The kind and text of d's expression (the one of cron, rate, at that is
 * set; NULL when none or several are). */
const char *sl_schedule_decl_expr(const sl_schedule_decl *d, sl_sched_kind *kind);

/* Checks d completely (name, exactly one expression that parses in its
 * zone, the set's name, catch_up, the event template as a CloudEvent).
 * Returns 0 and, when out is not NULL, the parsed schedule in *out (free
 * with sl_sched_free()); or SL_EINVAL (or the zone's SL_ENOENT, …) with
 * err ("cron \"61 * * * ? *\": minutes: 61 is outside 0-59") and, when key
 * is not NULL, *key naming the key at fault ("cron", "event", "set", …,
 * or "" for the block). */
int sl_schedule_compile(const sl_schedule_decl *d, sl_sched **out, const char **key, sl_error *err);

/* The event id of schedule name's tick: a UUID-shaped string (version 8,
 * RFC 9562's custom version) made of SHA-256("sluice-schedule", name,
 * tick_ms), so a tick fired again has the same id. */
void sl_schedule_event_id(const char *name, int64_t tick_ms, char out[37]);

/* Appends the event of tick_ms to out: specversion "1.0", the id above,
 * the template's members, and time (the tick, RFC 3339 UTC), as compact
 * JSON with its keys sorted at every depth (so the same tick is the same
 * bytes in every process). Returns 0,
 * SL_EINVAL with err when event_json is not a JSON object, SL_ENOMEM. */
int sl_schedule_event(const char *name, const char *event_json, int64_t tick_ms, sl_buf *out,
                      sl_error *err);

/* Publishes one event to set: returns 0 once it is durably stored, or an
 * SL_E… code with err (the scheduler retries). Called from the scheduler's
 * thread, one call at a time. */
typedef int sl_schedule_fire_fn(void *ctx, const char *set, const char *event_json, size_t len,
                                sl_error *err);

/* The wall clock in milliseconds since the epoch (tests pass a fake one). */
typedef int64_t sl_schedule_now_fn(void *ctx);

typedef struct sl_scheduler_options {
    const char *data_dir;      /* the state lives in DATA/schedules/ (required) */
    sl_schedule_fire_fn *fire; /* required */
    sl_schedule_now_fn *now;   /* NULL: sl_clock_now_ms() */
    void *ctx;                 /* passed to fire and now */
    int64_t retry_initial_ms;  /* back-off after a failed fire; 0: 1000 */
    int64_t retry_max_ms;      /* 0: 60000 */
} sl_scheduler_options;

typedef struct sl_scheduler sl_scheduler;

/* Creates a scheduler (no thread yet) and reads its state file, creating
 * DATA/schedules when missing. A state file that cannot be read is moved
 * aside (state.json.bad) with an error logged, and the scheduler starts
 * without state. Returns 0 with *out, or an SL_E… code with err (nothing
 * left behind). */
int sl_scheduler_init(const sl_scheduler_options *o, sl_scheduler **out, sl_error *err);

/* Replaces the schedules of owner ("config" for the config file, "api" for
 * the EventBridge API, …) with d[0..n), leaving other owners' alone. Every
 * decl is checked first (sl_schedule_compile()); names must be unique in
 * d and not held by another owner. A schedule that stays keeps its state.
 * Safe from any thread, before or after start, but not from inside fire.
 * Returns 0; or SL_EINVAL / SL_EEXIST (a name another owner holds) /
 * SL_ELIMIT (over SL_SCHEDULER_MAX) / SL_ENOMEM with err naming the
 * schedule, and nothing changed. */
int sl_scheduler_set(sl_scheduler *s, const char *owner, const sl_schedule_decl *d, size_t n,
                     sl_error *err);

/* Starts the thread: ticks fire from now on (a pending tick found in the
 * state file at once). Returns 0 or SL_EIO/SL_ENOMEM with err. */
int sl_scheduler_start(sl_scheduler *s, sl_error *err);

/* Makes the thread look at the clock now and returns once it has fired
 * everything due (or scheduled a retry): for tests with a fake clock. A
 * no-op before start and after stop; never call it from fire. */
void sl_scheduler_poke(sl_scheduler *s);

/* What sl_scheduler_list() tells of one schedule (owned by the array). */
typedef struct sl_schedule_info {
    char *name, *owner;
    char *expression; /* "cron(0 3 * * ? *)" */
    char *timezone;   /* "UTC" when none was given */
    char *set;
    bool enabled;
    int catch_up;
    int64_t last_ms;                       /* the last tick fired; -1: none yet */
    int64_t pending_ms;                    /* a tick being fired or retried; -1: none */
    int64_t next_ms[SL_SCHEDULE_NEXT_MAX]; /* the next ticks (pending first, if any) */
    size_t nnext;
    int failures; /* failed fires of the pending tick in a row */
    char *error;  /* the last failure's message, or NULL */
} sl_schedule_info;

/* The schedules in force (every owner), by name, each with up to k
 * (<= SL_SCHEDULE_NEXT_MAX) next fire times. Returns 0 with *out (free
 * with sl_schedule_info_free()) and *n, or SL_ENOMEM. */
int sl_scheduler_list(sl_scheduler *s, size_t k, sl_schedule_info **out, size_t *n);

void sl_schedule_info_free(sl_schedule_info *v, size_t n);

/* The same as one JSON object, {"schedules":[{"name":…,"owner":…,
 * "expression":…,"timezone":…,"set":…,"enabled":…,"catch_up":…,
 * "next":["2026-…Z",…],"last":"…"|null,"pending":"…"|null,"failures":N,
 * "error":"…"|null}]}, appended to out (for an HTTP view). Returns 0 or
 * SL_ENOMEM. */
int sl_scheduler_list_json(sl_scheduler *s, size_t k, sl_buf *out);

/* Stops the thread, after the fire in progress (if any) returns, and
 * writes the state. NULL and a scheduler never started are fine. */
void sl_scheduler_stop(sl_scheduler *s);

/* Stops it if needed and frees it. NULL is ignored. */
void sl_scheduler_free(sl_scheduler *s);

/* ---- the state file, read without a scheduler (`sluice schedule list`) ---- */

typedef struct sl_schedule_state {
    char *name;
    char *fingerprint; /* the expression and zone the ticks belong to */
    bool enabled;
    int64_t after_ms;   /* ticks up to here are done */
    int64_t last_ms;    /* -1: none */
    int64_t pending_ms; /* -1: none */
    int64_t gone_ms;    /* when it stopped being declared; -1: declared */
} sl_schedule_state;

/* Reads DATA/schedules/state.json. Returns 0 with *out (free with
 * sl_schedule_state_free()) and *n (0 and NULL when there is no file), or
 * SL_ECORRUPT / SL_EIO / SL_ENOMEM with err. */
int sl_schedule_state_load(const char *data_dir, sl_schedule_state **out, size_t *n, sl_error *err);

void sl_schedule_state_free(sl_schedule_state *v, size_t n);

/* ---- the server's fire callback (server/schedule_fire.c) ------------------ */

struct sl_sets;
struct sl_databus;
struct sl_set;
struct sl_event;

/* What sl_schedule_fire_databus() needs; ctx of the scheduler. */
typedef struct sl_schedule_fire_env {
    struct sl_sets *sets;
    struct sl_databus *bus;
    /* The schemas and lanes check of ingest (sl_http_hooks.validate); may be
     * NULL. */
    int (*validate)(void *ctx, const struct sl_set *set, const struct sl_event *ev, sl_error *err);
    void *validate_ctx;
    /* Set it (before sl_scheduler_stop()) when the server stops: a fire
     * still waiting for its fsync (a failing disk) gives up
     * SL_SCHEDULE_FIRE_GRACE_MS later, and its tick stays pending (fired
     * again, with the same id, at the next start). */
    _Atomic bool stopping;
} sl_schedule_fire_env;

#define SL_SCHEDULE_FIRE_GRACE_MS 5000

/* An sl_schedule_fire_fn (ctx: an sl_schedule_fire_env): checks the event
 * as HTTP ingest would (CloudEvent, size, schema, lane), publishes it to
 * the set (declared on first use when missing, as target.set does) with
 * ack durable, and waits for the fdatasync. SL_EFULL and disk errors come
 * back for the scheduler to retry; a refused event SL_EINVAL. */
int sl_schedule_fire_databus(void *ctx, const char *set, const char *event_json, size_t len,
                             sl_error *err);

#endif
