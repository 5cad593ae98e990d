/*
 * core/bus/lanes.h — the lanes a server knows (ARCHITECTURE.md §7, docs/lanes.md).
 *
 * A lane is "" (base) or [a-z0-9-]{1,32}. A lane is known when the config
 * declares it (`lane "x" { env = … }`) or, with `lanes.auto = true`, when an
 * event first names it: it is then registered as a `boe` lane (fallback to
 * the base rules) and remembered in DATA/lanes.state, so its rule cursors
 * come back after a restart. Every producer (HTTP ingest, webhooks, sources)
 * admits an event's lane here before publishing it; an unknown lane is
 * refused (UnknownLane), a dropped one too (LaneDropped).
 *
 * A new lane's rule consumers must exist before its first event is stored
 * (they start at the partitions' next offsets): sl_lanes_admit() calls the
 * `added` hook, synchronously, before it admits the first event of a lane
 * (an auto lane, or one a config declared since: during a reload the hook
 * waits for the new runner).
 * `sluice lane drop L` calls the `dropped` hook (the runner stops L's
 * consumers and deletes their cursors); an auto lane is then forgotten (it
 * comes back as a new lane if events name it again), a declared one stays
 * dropped (refused) until a config that no longer declares it is loaded.
 *
 * Lookups are a hash under a read lock; the first event of a new lane takes
 * the slow path once. No lock is held while a hook runs (hooks take the
 * router's locks: lanes never wait on a reload while holding theirs).
 * A full registry reuses the entries of forgotten lanes.
 */
#ifndef SL_LANES_H
#define SL_LANES_H

#include "core/base/buf.h"
#include "core/base/err.h"
#include "core/bus/event.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SL_LANES_MAX 4096 /* lanes a registry can hold, declared and auto */

/* lane "NAME" { env = "boe"|"ppe", fallback = "base"|"none" } (ARCHITECTURE.md §7). */
typedef enum sl_lane_env {
    SL_LANE_BOE, /* offline test lanes: many in parallel; fallback "base" by default */
    SL_LANE_PPE, /* pre-production: fallback "none" by default */
} sl_lane_env;

/* A lane declaration, as the config loader (server/config.h) makes it. */
typedef struct sl_lane_decl {
    char *name; /* [a-z0-9-]{1,32} */
    int line;   /* 0: declared implicitly (an override naming it under lanes.auto) */
    sl_lane_env env;
    bool fallback_base; /* events without an override go to the base rule (else nowhere) */
    char *description;
} sl_lane_decl;

typedef struct sl_lanes sl_lanes;

/* A lane as the runner needs it. */
typedef struct sl_lane_info {
    char name[SL_EVENT_LANE_MAX + 1];
    sl_lane_env env;
    bool fallback_base;
    bool auto_; /* registered by lanes.auto, not declared */
} sl_lane_info;

typedef struct sl_lanes_hooks {
    void *ctx;
    /* A lane is about to get its first event: create its consumers (those
     * that exist are kept). A failure refuses the event (and the lane is
     * tried again next time). */
    int (*added)(void *ctx, const sl_lane_info *lane, sl_error *err);
    /* A lane is being dropped: stop its consumers and delete their cursors. */
    void (*dropped)(void *ctx, const char *lane);
} sl_lanes_hooks;

/* Opens the registry of data_dir (reads DATA/lanes.state when present).
 * Returns 0 and *out, or an SL_E… code with err. */
int sl_lanes_open(const char *data_dir, sl_lanes **out, sl_error *err);

void sl_lanes_set_hooks(sl_lanes *l, const sl_lanes_hooks *hooks);

/* Takes a config's lane declarations (decls[0..n): env, fallback) and its
 * lanes.auto (auto_lanes): call it once the runner of that config runs.
 * Lanes only an override names (line 0) under lanes.auto are auto lanes. A
 * lane dropped while declared stays dropped until sl_lanes_commit() finds it
 * no longer declared. */
void sl_lanes_configure(sl_lanes *l, const sl_lane_decl *decls, size_t n, bool auto_lanes);

/* After a reload that stands (or the start): forgets the drop marks of lanes
 * the config no longer declares (a failed reload configures the old config
 * again, and its marks must survive that). */
void sl_lanes_commit(sl_lanes *l);

/* Whether lane is dropped (refused, its consumers gone). */
bool sl_lanes_dropped(sl_lanes *l, const char *lane);

/* Admits one event of lane (NUL-terminated, valid) and counts it. Returns
 * SL_EVENT_OK; SL_EVENT_UNKNOWN_LANE (not declared, no lanes.auto, too many
 * lanes, or the added hook failed) or SL_EVENT_LANE_DROPPED, with err. */
sl_event_status sl_lanes_admit(sl_lanes *l, const char *lane, sl_error *err);

/* Calls fn for every lane that can carry events now (declared and not
 * dropped, or auto), in registration order. */
void sl_lanes_each(sl_lanes *l, void (*fn)(void *ctx, const sl_lane_info *lane), void *ctx);

/* Whether lane is known and not dropped; *info gets it (may be NULL). */
bool sl_lanes_get(sl_lanes *l, const char *lane, sl_lane_info *info);

/* Drops lane (see above). Returns 0; SL_ENOENT when it is not known (or
 * already dropped); SL_EINVAL for the base lane or a bad name; with err. */
int sl_lanes_drop(sl_lanes *l, const char *lane, sl_error *err);

/* Events admitted for lane ("" = base) since start. */
uint64_t sl_lanes_events_in(sl_lanes *l, const char *lane);

/* Appends the lanes as JSON array members, each {"name","env","fallback",
 * "auto","declared","dropped","events_in"} followed by what extra(ctx,
 * name, out) appends inside the same object (may be NULL). */
int sl_lanes_json(sl_lanes *l, int (*extra)(void *ctx, const char *lane, sl_buf *out), void *ctx,
                  sl_buf *out);

/* Prometheus lines: sluice_lane_events_in_total{lane}. */
int sl_lanes_metrics(sl_lanes *l, sl_buf *out);

/* Whether lanes.auto is on. */
bool sl_lanes_auto(sl_lanes *l);

void sl_lanes_free(sl_lanes *l);

#endif
