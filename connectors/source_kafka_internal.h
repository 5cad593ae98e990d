/*
 * connectors/source_kafka_internal.h — what the files of source.kafka
 * share: the instance struct and the functions one file calls in another.
 * Not a public interface (see source_kafka.h).
 *
 *   source_kafka.c         the instance: open/close, the consumer and emit
 *                          threads, the chunk queue, commits, metrics
 *   source_kafka_group.c   the consumer and its group: configuration and
 *                          `sluice check`, librdkafka's callbacks, static
 *                          membership, the joining/running/failing state
 *   source_kafka_record.c  one record → one event (CloudEvents Kafka binding)
 */
#ifndef SL_SOURCE_KAFKA_INTERNAL_H
#define SL_SOURCE_KAFKA_INTERNAL_H

#include "connectors/source_kafka.h"
#include "core/base/buf.h"
#include "core/bus/connector.h"
#include "core/bus/event.h"

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* close() waits this long for an assignment (the librdkafka < 2.3.0 case:
 * see COOP_SAFE_VERSION in source_kafka_group.c). */
#define SETTLE_WAIT_MS 10000

typedef struct kchunk kchunk; /* events on their way to the emit thread (source_kafka.c) */

typedef struct kafka_source {
    const sl_source_config *cfg;
    const sl_source_kafka_conf *conf; /* cfg->conf */
    const sl_source_host *host;
    char *group;
    rd_kafka_t *rk;
    rd_kafka_queue_t *q; /* the consumer queue */
    pthread_t thread, emitter;
    bool started, emitting;
    atomic_bool stop;
    bool in_loop;   /* the consumer thread runs the loop: revocations are deferred to it */
    bool coop_risk; /* cooperative-sticky on a librdkafka < 2.3.0: close() waits (above) */
    atomic_bool assigned_once; /* an assignment came: the assignor has its state (it is made
                                * when the SyncGroup answer arrives, before the callback) */

    /* Consumer thread. */
    rd_kafka_topic_partition_list_t *revoking; /* revoked, to unassign after the commit */
    bool revoke_coop;
    char *type_json, *source_json; /* the configured type and source as JSON strings */
    size_t type_json_len, source_json_len;
    sl_event ev;                         /* scratch for structured records */
    sl_buf esc;                          /* scratch: escaped header values */
    sl_buf ctb;                          /* scratch: the content-type header, NUL-terminated */
    const char *why_code;                /* a record refused here: its status name … */
    char why[512];                       /* … and the reason */
    char lanebuf[SL_EVENT_LANE_MAX + 1]; /* scratch: the lane header, NUL-terminated */
    int64_t probe_at_ms;

    /* The chunk queue (qlock, qcond; qcond uses CLOCK_MONOTONIC). */
    pthread_mutex_t qlock;
    pthread_cond_t qcond;
    kchunk *qhead, *qtail, *qfree;
    size_t qn, nfree;
    bool c_done, e_done;      /* a thread has left its loop */
    uint64_t barriers, bdone; /* barriers sent, and passed by the emit thread */

    /* Emit thread. */
    rd_kafka_topic_partition_list_t *pend; /* next offset of every partition since the commit */
    size_t uncommitted;                    /* records (refused too) since the last commit */
    size_t pbytes;                         /* value bytes since the last flush */

    /* Counters (any thread). */
    atomic_uint_fast64_t records, bytes, refused, commit_failed;
    atomic_bool brokers_down, fatal;
    pthread_mutex_t mlock; /* health texts */
    char down_msg[256], fatal_msg[256];

    /* The group state (mlock): joining since open() and every revocation
     * that left nothing assigned, until the next assignment. */
    bool joining, join_warned;
    int64_t state_mono_ms, state_wall_ms;
    int64_t fail_wall_ms;  /* when brokers_down or fatal was last set */
    int session_ms;        /* session.timeout.ms in use, for messages */
    char instance_id[128]; /* group.instance.id, "" when none */

    /* Assignment copy and lag cache (alock). */
    pthread_mutex_t alock;
    rd_kafka_topic_partition_list_t *assigned;
    sl_buf lag_text;
    int64_t lag_at_ms;
} kafka_source;

/* ---- source_kafka_group.c ------------------------------------------------------- */

/* The consumer of k (k->cfg, k->host and k->group set): k->instance_id
 * loaded (or made, STATE_DIR/group-instance-id), sluice's settings and the
 * properties applied, k->session_ms and k->coop_risk set, the callbacks
 * installed (k is their opaque). Returns it, or NULL with err set (nothing
 * left to free). */
rd_kafka_t *sl__source_kafka_consumer(kafka_source *k, sl_error *err);

/* Enters (joining) or leaves the joining state; nparts: the assignment. */
void sl__source_kafka_set_joining(kafka_source *k, bool joining, int nparts);

/* Called from the consumer loop: one warning when joining outlasts its grace. */
void sl__source_kafka_join_check(kafka_source *k);

/* Applies a revocation (consumer thread): the partitions leave the assignment. */
void sl__source_kafka_unassign(kafka_source *k, rd_kafka_topic_partition_list_t *parts, bool coop);

/* The ops' health() and check(). */
int sl__source_kafka_health(void *impl, char *msg, size_t len);
int sl__source_kafka_check(const sl_source_config *cfg, sl_error *err);

/* ---- source_kafka_record.c ------------------------------------------------------ */

/* Record m → one event's JSON appended to out (consumer thread; uses k's
 * scratch buffers). Returns 0 with *lane the record's lane header to pass
 * on (in k->lanebuf, valid until the next call) or NULL; SL_ENOMEM (out may
 * hold part of it: the caller cuts it off and tries again); or another
 * code: refused, k->why_code (an sl_event_status name) and k->why say why. */
int sl__source_kafka_record(kafka_source *k, const rd_kafka_message_t *m, sl_buf *out,
                            const char **lane);

#endif
