/*
 * rules/runner_internal.h — what the files of the rule runner share (rules/runner.c and
 * runner_queue.c, runner_turn.c, runner_deliver.c, runner_dlq.c, runner_replay.c,
 * runner_report.c): its limits, the runner's structs and the sl__runner_ functions
 * one file defines and another calls. Not an interface: rules/runner.h is.
 */
#ifndef SL_RUNNER_INTERNAL_H
#define SL_RUNNER_INTERNAL_H

#include "rules/runner.h"

#include "core/bus/connector.h"
#include "core/bus/cursor.h"
#include "rules/evview.h"
#include "rules/pattern_set.h"
#include "rules/rule.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define BATCH_RECORDS 512         /* records per turn of one consumer, by default */
#define BATCH_RECORDS_MAX 8192    /* when its targets ask for more (batch_hint) */
#define BATCH_EVENT_BYTES 2048    /* bytes of events per record of the limit */
#define CURSOR_SYNC_NS 1000000000 /* fdatasync cursors at most once a second */
#define BACKOFF_MIN_MS 1000       /* read and cursor errors: 1 s doubling … */
#define BACKOFF_MAX_MS 30000      /* … up to 30 s */
#define POOL_MAX 4096             /* ordered = false: payloads set aside per partition */
#define RULE_BIT 63               /* in a dead mask: the evaluation itself failed */
#define REASON_MAX 1024           /* bytes of a reason kept in sluiceerror */
#define REPLAYS_KEPT 32           /* finished replays still shown */
#define REPLAYS_RUNNING_MAX 16    /* replays running at once */
#define SCAN_NS 20000000          /* periodic(): retry times and missed wake-ups */
#define SCAN_BUSY_NS 100000000    /* … at least this often when the queue is never empty */
#define WAIT_CHECK_NS 50000000    /* a worker waiting for a target looks around this often */

#define RUN_CHUNK 1024                /* runs per chunk of sl_runner.chunks */
#define RUN_CHUNKS 1024               /* at most RUN_CHUNK * RUN_CHUNKS runs per runner */
#define LANE_NAMES (2 * SL_LANES_MAX) /* distinct lanes one runner sums up */
#define RUN(r, i) ((r)->chunks[(i) / RUN_CHUNK][(i) % RUN_CHUNK])

#define SHARE_COMMIT_NS 1000000000 /* a shared reader's untouched members: cursor written once a second */
#define SHARE_SLOW_NS 250000000    /* a member whose delivery took longer leaves its shared reader … */
#define CURSOR_SYNCFS_MIN 32      /* more unsynced shared cursors than this: one syncfs() */
#define SHARE_LINGER_NS 10000000   /* a shared turn with few events per member waits this long … */
#define SHARE_LINGER_MEMBERS 8     /* … when it has at least this many members */
#define SHARE_REJOIN_NS 5000000000 /* … and may come back after this, doubled each time it … */
#define SHARE_REJOIN_MAX_NS 300000000000 /* … is slow again (up to 5 min) within that long */

typedef struct rule_run rule_run;
typedef struct replay replay;
typedef struct share share;
typedef struct roster roster;
typedef struct kset kset;

/* What a rule, or one replay of it, counts. */
typedef struct counters {
    _Atomic uint64_t read, matched, filtered, dropped, failed, delivered, retries, dead_lettered,
        discarded;
    _Atomic int64_t retrying; /* payloads in pools now */
} counters;

/* A payload (or an event whose evaluation failed) not resolved yet. */
typedef struct item {
    char *payload; /* NULL: the evaluation failed (dead has RULE_BIT) */
    size_t len;
    char *source; /* the source event (decorated JSON), NULL if not known */
    size_t source_len;
    char lane[SL_EVENT_LANE_MAX + 1];
    int64_t offset;        /* of the source event */
    uint64_t todo;         /* targets still to deliver to (bit t) */
    uint64_t dead;         /* targets that gave up: to the dead-letter set */
    uint32_t attempts;     /* deliveries that failed */
    uint32_t tries;        /* rounds, deferred ones too: drives the back-off */
    int64_t first_fail_ms; /* monotonic (sl_clock_mono_ms) */
    int64_t retry_at_ns;   /* 0: to be scheduled */
    char *reason;          /* the last failure */
} item;

typedef struct consumer {
    rule_run *rule;
    replay *rp; /* NULL: the rule's live consumer */
    counters *ctr;
    int32_t part;
    sl_cursor cur;             /* live consumers only */
    _Atomic int64_t committed; /* cur.offset (replay: progress), for the API threads */
    int64_t pos;               /* next offset to read (see sl__runner_set_pos) */
    _Atomic int64_t read_pos;  /* pos, for periodic()'s lag check */
    int64_t start;             /* replay: where it began */
    _Atomic int64_t end;       /* replay: stop before this offset */
    void *reader;              /* open between turns; NULL after a failure */
    item *pool;                /* owned by the worker running the consumer */
    size_t npool, pool_cap;
    _Atomic bool done; /* replay: reached its end with an empty pool */
    /* under the runner's lock */
    bool queued, running, again;
    bool hold;            /* run only at retry_at_ns (back-off, or a pool that blocks) */
    int64_t retry_at_ns;  /* 0: nothing timed */
    int backoff_ms;       /* read and cursor errors */
    int64_t lag_check_ns; /* lane runs: when periodic() last queued it for lag */
    struct consumer *next;
    /* Shared reading (runner_share.c), under the runner's lock */
    share *in;            /* the shared reader it is a member of; NULL: reads on its own */
    share *handle_of;     /* this consumer is the queue handle of that shared reader */
    bool join_wait;       /* asked to join while the reader ran: parked until it ends */
    int64_t rejoin_ns;    /* left for being slow: not back before this */
    int64_t slow_ns;      /* when it last left for being slow */
    unsigned slow_strikes; /* times in a row (see SHARE_REJOIN_MAX_NS) */
    int64_t commit_ns;    /* when its cursor was last written */
    unsigned share_flags; /* its shared reader's turn only */
    _Atomic bool cur_unsynced; /* a shared turn wrote its cursor: sl__runner_sync_cursors() */
    /* Kafka-backed sets (runner_kafka.c): no cursor file (cur.fd -1) */
    char *kkey;              /* its key in the cursor table */
    _Atomic int64_t kput;    /* the offset last put there (-1: none); written under ks->mu */
    _Atomic int64_t kput_ns; /* when */
    int64_t kpending;        /* assign: the position it starts at (under the runner's lock) */
    bool kfound;             /* … which came from the table */
    bool knew;               /* … which is where a new rule starts */
} consumer;

/* The runs of one set and lane that may share reads (every live run but
 * those with transform_batch), their patterns compiled together, and one
 * shared reader per partition. */
struct roster {
    roster *next;
    sl_set *set;
    char lane[SL_EVENT_LANE_MAX + 1];
    rule_run **runs;
    size_t nruns;
    sl_pattern_set *ps; /* over the runs that evaluate (eval_run maps its numbers) */
    uint32_t *eval_run; /* pattern number -> index in runs */
    share *shares;      /* [set->nparts] */
    int32_t nparts;
    kset *ks;           /* the set runs in its Kafka group; NULL: a local set */
    bool eventbridge;   /* its runs see events in EventBridge's shape (one shape a roster) */
};

/* One shared reader: reads a partition once for all its members, matches
 * each event once against all their patterns, and gives each member only
 * the events that match it. Members are at or ahead of pos (a member ahead
 * skips what it already had). */
struct share {
    roster *ro;
    int32_t part;
    consumer handle; /* what the queue runs (handle.handle_of == this) */
    int64_t pos;     /* next offset to read: moved by its turn only */
    int64_t linger_ns; /* waiting for more events until then (0: not waiting) */
    void *reader;
    size_t nmembers;
    consumer **pending; /* asked to join while it ran */
    size_t npending, pending_cap;
};

struct replay {
    replay *next;
    char id[24];
    rule_run *rule;
    int64_t from_ms, to_ms, started_ms;
    _Atomic int64_t finished_ms; /* 0 while running */
    consumer *cons;
    int32_t nparts;
    _Atomic int32_t remaining; /* partitions not done */
    counters ctr;
};

typedef struct target_inst {
    const sl_target_ops *ops;
    void *impl;
    char label[32]; /* "http", or "http#2" when the rule has several http targets */
} target_inst;

/* One (rule, lane) pair: the base rule (lane ""), or the rule for the events
 * of one lane (its override, the base rule as a fallback, or nothing but a
 * count: mode UNROUTED). Each has its own cursors, pools and counters, so a
 * broken test lane never holds production delivery; fallback runs share the
 * base run's target instances (like its partitions do). */
struct rule_run {
    size_t idx; /* the rule number the VMs evaluate (sl_ruleset_rule_at) */
    const sl_rule_config *rc;
    char lane[SL_EVENT_LANE_MAX + 1];
    char label[SL_EVENT_LANE_MAX + 160];      /* "billing", "billing (lane feature-x)" */
    char cursor_set[SL_EVENT_LANE_MAX + 160]; /* "orders", "orders/lanes/feature-x" */
    rule_run *base_run;                       /* lane runs: the base rule's run (targets, dlq) */
    int lane_idx;                             /* in sl_runner.lane_names, -1 if it did not fit */
    bool unrouted;        /* lane without override nor fallback: events are only counted */
    bool was_new;         /* its cursors were created at this start */
    bool borrowed;        /* targets and dlq are base_run's */
    _Atomic bool dropped; /* `sluice lane drop`: consumers stopped, never queued again */
    _Atomic uint64_t unrouted_n;
    sl_set *set;
    target_inst *targets;
    size_t ntargets;
    target_inst dlq; /* impl NULL: no dead-letter set */
    consumer *cons;
    int32_t nparts;
    counters ctr;
    size_t batch_records;     /* records per turn: what its targets want */
    roster *ro;               /* NULL: never shares reads (transform_batch, or not built yet) */
    kset *ks;                 /* a Kafka-backed set's ownership; NULL: a local set */
    _Atomic uint64_t wrapped; /* dead letters made for payloads that are not events */
    pthread_mutex_t err_lock;
    char last_error[SL_ERROR_MAX];
    int64_t last_log_ns[2]; /* see log_failure() */
    uint64_t unlogged[2];
};

/* One worker's reusable state. */
typedef struct worker {
    sl_runner *r;
    pthread_t thread;
    sl_rule_vm *vm;
    uint64_t rng;
    /* the events of a batch */
    sl_buf ev;        /* decorated events, back to back */
    sl_buf ebtmp;     /* a record's CloudEvent on its way to EventBridge's shape */
    size_t *ev_ends;  /* end of event i in ev */
    const char **evp; /* pointers into ev, for transform_batch */
    size_t *evl;
    int64_t *offs;                        /* offset of event i */
    char (*lanes)[SL_EVENT_LANE_MAX + 1]; /* lane of event i */
    size_t ev_cap;
    /* the payloads they made */
    sl_rule_out out;
    char (*out_lanes)[SL_EVENT_LANE_MAX + 1];
    int32_t *out_src; /* event index of payload i, -1 if not known (transform_batch) */
    size_t out_cap;
    /* a delivery round over n payloads */
    sl_delivery *dl, *sub;
    uint64_t *todo, *dead;
    bool *failed;
    size_t *map;    /* sub[j] is dl[map[j]] */
    int *st;        /* status of sub[j] */
    size_t *rsub;   /* reason of sub[j]: offset in reasons, SIZE_MAX none */
    size_t *reason; /* reason of payload i: offset in reasons, SIZE_MAX none */
    item **its;     /* retries: the item of payload i */
    size_t round_cap;
    sl_buf reasons;
    sl_buf dlq; /* dead letters being written */
    size_t *dlq_ends;
    size_t dlq_cap;
    /* shared reading */
    sl_evview pv;
    sl_pattern_set_scratch *scr;
    size_t scr_n;
    uint32_t *hits;
    uint64_t *pairs; /* (run index << 32 | event index) of a shared batch */
    size_t hits_cap, pairs_cap;
    consumer **mem;
    size_t mem_cap;
    /* completion of a delivery */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    size_t pending;
} worker;

struct sl_runner {
    sl_runner_options opts;
    /* Runs 0 … nbase-1 are the base rules (opts.rules.rules order), lane runs
     * follow, in chunks that never move (RUN()); runs are only freed with
     * the runner (a dropped lane's stay, idle), so readers load nruns and go
     * without the lock. */
    rule_run **chunks[RUN_CHUNKS];
    _Atomic size_t nruns;
    size_t nbase;
    /* Lane names of the runs (rule_run.lane_idx), for per-lane sums. */
    char (*lane_names)[SL_EVENT_LANE_MAX + 1];
    size_t nlane_names;
    pthread_mutex_t lanes_lock; /* adding and dropping lanes, one at a time */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    consumer *head, *tail;
    bool stopping;
    bool stopped;          /* sl_runner_stop() joined the workers (the owner's thread only) */
    int64_t retry_scan_ns; /* when periodic() last ran */
    worker *workers;
    unsigned nworkers;    /* slots holding a worker's resources (freed with the runner) */
    unsigned started;     /* workers 0..started-1 run (joined at stop) */
    unsigned max_workers; /* the pool's limit (workers' size) */
    unsigned waiting;     /* workers waiting for a target */
    bool growing;         /* maybe_grow() is building a worker */
    replay *replays;      /* newest first; under lock */
    roster *rosters;      /* under lock (added with lanes, freed with the runner) */
    _Atomic(kset *) ksets; /* Kafka-backed sets the runs read (added under lanes_lock) */
    pthread_cond_t kcond;  /* a turn of a Kafka-backed set ended (while kwaiters) */
    unsigned kwaiters;     /* under lock: revokes waiting for turns to end */
    _Atomic int64_t cursor_sync_ns; /* when sl__runner_sync_cursors() last ran */
    _Atomic bool cursor_syncing;
    unsigned replay_seq;
};

/* The partitions of a Kafka-backed set this router owns (runner_kafka.c).
 * A partition is K_NONE (not owned: nothing of it runs, nothing moves its
 * cursors), K_OWNED (its consumers are queued, turns put cursors in the
 * table), or K_DRAIN (being revoked: nothing new is queued, turns in
 * progress still move committed, only the revoke writes the table). */
enum { K_NONE, K_OWNED, K_DRAIN };

struct kset {
    kset *next;
    sl_set *set;
    int32_t nparts;
    _Atomic int *state;      /* [nparts] */
    bool *deferred;          /* [nparts], under the runner's lock: assigned while a late turn ran */
    pthread_mutex_t mu;      /* table writes against ownership changes */
    _Atomic(struct sl_kgroup *) group; /* for GET /v1/rules; NULL: not known */
    _Atomic int64_t put_log_ns;        /* last log line about a failed put */
};

/* Of the set a consumer (or a shared reader's handle) reads; NULL: local or a replay. */
static inline kset *sl__runner_kset_of(const consumer *c)
{
    return c->handle_of ? c->handle_of->ro->ks : c->rp ? NULL : c->rule->ks;
}

/* Whether c may be queued: always for local sets and replays. */
static inline bool sl__runner_kafka_owned(const consumer *c)
{
    kset *ks = sl__runner_kset_of(c);
    return !ks || atomic_load(&ks->state[c->part]) == K_OWNED;
}

/* Grows array p to cap elements; returns SL_ENOMEM from the calling
 * function when it cannot. */
#define GROW(p, cap)                                                                               \
    do {                                                                                           \
        void *g_ = realloc((p), (cap) * sizeof *(p));                                              \
        if (!g_)                                                                                   \
            return SL_ENOMEM;                                                                      \
        (p) = g_;                                                                                  \
    } while (0)

void sl__runner_push(sl_runner *r, consumer *c);
void sl__runner_rule_failure(rule_run *rr, int64_t offset, int32_t part, const char *why);
void sl__runner_rule_loss(rule_run *rr, int64_t offset, int32_t part, const char *why);
int sl__runner_grow_events(worker *w, size_t nev);

/* Appends record rec of set's partition part to w->ev as the rules of that
 * shape see it: the decorated CloudEvent (core/bus/record_event.h), or for
 * rules with shape = "eventbridge" its EventBridge shape
 * (core/bus/ebshape.h). Returns 0, or nonzero with w->ev unchanged. */
struct sl_record;
int sl__runner_event_json(worker *w, const struct sl_record *rec, const char *set, int32_t part,
                          bool eventbridge);
int sl__runner_tag_outputs(worker *w, size_t from, const char *lane, int32_t src);
int sl__runner_grow_round(worker *w, size_t n);
void sl__runner_free_item(item *it);
void sl__runner_on_done(void *ctx, size_t j, int status, const char *reason);
int sl__runner_init_worker(sl_runner *r, worker *w, sl_error *err);
void sl__runner_wait_targets(worker *w);
const char *sl__runner_reason_at(const worker *w, size_t off);
void sl__runner_round_deliver(worker *w, rule_run *rr, size_t n);
void sl__runner_note_retries(worker *w, consumer *c, size_t n, bool fresh);
void sl__runner_clean_reason(const char *in, char *out, size_t len);
void sl__runner_dead_letters(worker *w, consumer *c);
void sl__runner_settle(worker *w, consumer *c);
void sl__runner_retry_due(worker *w, consumer *c);
int sl__runner_keep_payload(worker *w, consumer *c, size_t i, int64_t now_ms);
int sl__runner_keep_failed_event(worker *w, consumer *c, size_t e, const char *why);
void sl__runner_set_pos(consumer *c, int64_t pos);
bool sl__runner_run_consumer(worker *w, consumer *c);
bool sl__runner_pool_blocks(const consumer *c);
int64_t sl__runner_safe_position(const consumer *c);

/* runner_share.c */
int sl__runner_rosters_build(sl_runner *r, size_t from_run, sl_error *err);
void sl__runner_rosters_free(sl_runner *r);
bool sl__runner_run_share(worker *w, share *sh);
void sl__runner_try_join(sl_runner *r, consumer *c);
void sl__runner_free_share_worker(worker *w);
void sl__runner_sync_cursors(sl_runner *r);
void sl__runner_share_reset(sl_runner *r, share *sh, bool rebuild);
void *sl__runner_worker_main(void *arg);

/* runner_kafka.c */
bool sl__runner_kafka_run(const sl_runner *r, const sl_set *set);
int sl__runner_kafka_open(sl_runner *r, rule_run *rr, sl_error *err);
void sl__runner_kafka_commit(sl_runner *r, consumer *c, int64_t safe);
void sl__runner_kafka_after_turn(sl_runner *r, consumer *c);
void sl__runner_kafka_stop(sl_runner *r);
void sl__runner_kafka_free(sl_runner *r);
bool sl__runner_kafka_shows(const rule_run *rr, int32_t p);
int sl__runner_kafka_rule_json(sl_runner *r, sl_buf *out, const rule_run *rr);
int sl__runner_kafka_part_json(sl_runner *r, sl_buf *out, const rule_run *rr, int32_t p);
void sl__runner_free_replay(replay *rp);
int sl__runner_counters_json(sl_buf *out, const counters *k);
void sl__runner_count_outcome(counters *k, sl_rule_outcome oc);

#endif
