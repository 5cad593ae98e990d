/*
 * connectors/source_kafka.c — source.kafka: the bridge in from an external
 * Kafka cluster, a librdkafka high-level consumer (docs/sources.md).
 *
 * Each record becomes one event (CloudEvents Kafka protocol binding): binary
 * mode when it has a ce_specversion header (ce_* headers → attributes,
 * content-type → datacontenttype, value → data, via sl_event_from_binary());
 * structured mode when content-type is application/cloudevents+json or the
 * value is a valid CloudEvent; otherwise the value is wrapped (configured
 * type and source, id TOPIC-PARTITION-OFFSET so that a record read again
 * makes the same event, the record time). A binary or structured event
 * without an id gets the same TOPIC-PARTITION-OFFSET id, for the same
 * reason. A `lane` header sets the lane; the key becomes partitionkey when
 * the event has none.
 *
 * Two threads, so that a backlog is read at Kafka's pace: the consumer
 * thread polls, converts records into event JSON in chunks and queues them;
 * the emit thread hands the events to the host, flushes, and after each
 * acknowledged flush stores and commits the offsets (at-least-once; a flush
 * ending with SL_ESHUTDOWN commits nothing; refused records are committed
 * with the rest). Rebalance callbacks run in the consumer thread; a
 * revocation is applied after a barrier through the queue: everything read
 * before it flushed and committed synchronously. health() and metrics()
 * read atomics and, under alock, a copy of the assignment.
 */
#include "connectors/source_kafka.h"

#include "core/clock.h"
#include "connectors/kafka_conf.h"
#include "core/connector.h"
#include "core/event.h"
#include "core/json.h"
#include "core/metrics.h"
#include "core/slog.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <regex.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define DEFAULT_TYPE "sluice.kafka.record"
#define BATCH_MSGS 1024                 /* records per consume call */
#define FLUSH_RECORDS 10000             /* flush after this many records … */
#define FLUSH_BYTES ((size_t)1 << 20)   /* … or this many bytes of values */
#define POLL_MS 100                     /* consume wait when nothing is pending */
#define CHUNK_RECORDS 2048              /* records per chunk handed to the emit thread … */
#define CHUNK_BYTES ((size_t)512 << 10) /* … or this many bytes of events */
#define QUEUE_CHUNKS 16                 /* chunks waiting at most */
#define LAG_INTERVAL_MS 1000            /* the lag is computed at most this often */
#define PROBE_INTERVAL_MS 3000          /* brokers down: ask for metadata this often */
#define MAX_CE_HEADERS SL_EVENT_MAX_MEMBERS
#define COMMIT_WAIT_MS 5000        /* a synchronous commit waits at most this long */
#define SETTLE_WAIT_MS 10000       /* close() waits this long for an assignment */
#define JOIN_GRACE_MS 10000        /* joining longer than this is unhealthy */
#define SESSION_TIMEOUT_MS "10000" /* sluice's default session.timeout.ms (librdkafka: 45000) */
#define INSTANCE_ID_FILE "group-instance-id"

/* librdkafka before 2.3.0 (issue #4312, fixed by its PR #4381) aborts the
 * process (`Assertion 'assignor_state' failed` in
 * rd_kafka_sticky_assignor_state_destroy) when a consumer is destroyed after
 * its group chose the cooperative-sticky assignor and before its first
 * assignment: the group's assignor is set when the JoinGroup answer arrives,
 * the sticky assignor's state only when a SyncGroup answer does, and
 * destroying the group handle destroyed that state without checking it.
 * The window is not short: it lasts as long as the group rebalances (a
 * member slow to rejoin holds it for up to max.poll.interval.ms; SyncGroup
 * errors make the member join again and again), and in 2.0.2 a JoinGroup
 * answer arriving while the consumer closes is still applied. No wait at
 * close can therefore make a stop or reload safe, so with such a librdkafka
 * sluice uses the eager assignors (range, roundrobin), which keep no state
 * and are immune; cooperative-sticky is used from 2.3.0 on. A
 * partition.assignment.strategy in properties still wins: with
 * cooperative-sticky on an old librdkafka, closing first waits (at most
 * SETTLE_WAIT_MS) for the first assignment, which covers the common case of
 * a stop right after the start (docs/sources.md). */
#define COOP_SAFE_VERSION 0x020300ff

/* One event made by the consumer thread, waiting in a chunk for the emit
 * thread: its JSON at arena[off, off + len), its lane (NUL-terminated) at
 * arena[lane_off] when has_lane; skip: refused already (only its offset
 * counts), with the status name code and the reason (NUL-terminated) at
 * arena[off], which the emit thread hands to host->refused(). */
typedef struct kitem {
    size_t off, len, lane_off;
    const char *code;
    bool has_lane, skip;
} kitem;

/* The next offset of one partition after a chunk's records. */
typedef struct ktp {
    char *topic;
    int32_t part;
    int64_t next;
} ktp;

/* Events handed from the consumer thread to the emit thread, in order.
 * barrier: the consumer waits until everything before it (this chunk
 * included) is flushed and committed (a revocation). */
typedef struct kchunk {
    struct kchunk *next;
    sl_buf arena;
    kitem *items;
    size_t n, cap;
    ktp *tps;
    size_t ntps, tcap;
    size_t vbytes; /* value bytes of its records */
    bool barrier;
} kchunk;

typedef struct kafka_source {
    const sl_source_config *cfg;
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
    sl_event ev;          /* scratch for structured records */
    sl_buf esc;           /* scratch: escaped header values */
    sl_buf ctb;           /* scratch: the content-type header, NUL-terminated */
    const char *why_code; /* a record refused here: its status name … */
    char why[512];        /* … and the reason */
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

static int64_t mono_ms(void)
{
    return sl_clock_mono_ns() / 1000000;
}

/* ---- configuration ------------------------------------------------------------ */

/* Properties sluice must own for its delivery guarantee. */
/* Whether the librdkafka in use (at run time, not the headers') can close
 * a cooperative-sticky consumer at any moment (above). */
static bool coop_safe(void)
{
    return rd_kafka_version() >= COOP_SAFE_VERSION;
}

static bool reserved(const char *name)
{
    return strcmp(name, "enable.auto.commit") == 0 || strcmp(name, "enable.auto.offset.store") == 0;
}

/* Applies one "name=value" property line. Returns 0, or SL_EINVAL with err. */
static int apply_property(rd_kafka_conf_t *conf, const char *line, sl_error *err)
{
    char name[256];
    const char *value = sl_kafka_property_name(line, name, sizeof name, err);
    if (!value)
        return SL_EINVAL;
    if (reserved(name))
        return sl_error_set(err, SL_EINVAL,
                            "property %s: sluice sets it (offsets are committed only after the "
                            "Databus acknowledged the events)",
                            name);
    return sl_kafka_conf_set(conf, name, value, err);
}

/* The value of property name in cfg's properties, or NULL. */
static const char *property(const sl_source_config *cfg, const char *name)
{
    char n[256];
    for (size_t i = 0; i < cfg->nproperties; i++) {
        const char *v = sl_kafka_property_name(cfg->properties[i], n, sizeof n, NULL);
        if (v && strcmp(n, name) == 0)
            return v;
    }
    return NULL;
}

/* Fills conf: sluice's settings, then the properties, which win.
 * instance_id: the default group.instance.id (NULL: none). */
static int apply_config(rd_kafka_conf_t *conf, const sl_source_config *cfg, const char *group,
                        const char *instance_id, sl_error *err)
{
    int rc = sl_kafka_conf_set(conf, "enable.auto.commit", "false", err);
    /* A member that died without leaving (kill -9, a lost host) holds its
     * partitions until its session times out: librdkafka's 45 s default
     * is long for a bridge (docs/sources.md weighs it). */
    if (!rc)
        rc = sl_kafka_conf_set(conf, "session.timeout.ms", SESSION_TIMEOUT_MS, err);
    /* Static membership: a restarted sluice is the same member, which
     * the coordinator gives its partitions back at once instead of waiting
     * for the old session. group.instance.id = "" in properties turns it off. */
    if (!rc && instance_id && instance_id[0] && !property(cfg, "group.instance.id"))
        rc = sl_kafka_conf_set(conf, "group.instance.id", instance_id, err);
    if (!rc)
        rc = sl_kafka_conf_set(conf, "enable.auto.offset.store", "false", err);
    if (!rc)
        rc = sl_kafka_conf_set(conf, "partition.assignment.strategy",
                               coop_safe() ? "cooperative-sticky" : "range,roundrobin", err);
    if (!rc)
        rc = sl_kafka_conf_set(conf, "auto.offset.reset",
                               cfg->from_beginning ? "earliest" : "latest", err);
    /* librdkafka's default (100000) makes its fetcher pause whenever the
     * one consumer queue all partitions feed holds that many records: a
     * source catching up on a backlog then stalls for 100 ms at a time
     * (measured: 0.4× kcat, against 0.95× with this). Memory stays bounded
     * by queued.max.messages.kbytes. */
    if (!rc)
        rc = sl_kafka_conf_set(conf, "queued.min.messages", "1000000", err);
    if (!rc && group)
        rc = sl_kafka_conf_set(conf, "group.id", group, err);
    if (!rc && cfg->brokers)
        rc = sl_kafka_conf_set(conf, "bootstrap.servers", cfg->brokers, err);
    for (size_t i = 0; !rc && i < cfg->nproperties; i++) {
        char n[256];
        const char *v = sl_kafka_property_name(cfg->properties[i], n, sizeof n, NULL);
        if (v && !v[0] && strcmp(n, "group.instance.id") == 0)
            continue; /* no static membership */
        rc = apply_property(conf, cfg->properties[i], err);
    }
    return rc;
}

static bool topic_name_ok(const char *s)
{
    size_t len = strlen(s);
    if (!len || len > 249 || strcmp(s, ".") == 0 || strcmp(s, "..") == 0)
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '_' || *p == '-'))
            return false;
    return true;
}

/* ---- callbacks (consumer thread, or librdkafka's for logs) --------------------- */

static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    kafka_source *k = rd_kafka_opaque(rk);
    if (k && level <= 4) /* warnings and worse */
        k->host->log(k->host->ctx, "source.kafka: %s: %s", fac, buf);
}

static void quiet_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk, (void)level, (void)fac, (void)buf;
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    kafka_source *k = opaque;
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char fe[200] = "";
        rd_kafka_fatal_error(rk, fe, sizeof fe);
        pthread_mutex_lock(&k->mlock);
        snprintf(k->fatal_msg, sizeof k->fatal_msg, "fatal consumer error: %s", fe);
        k->fail_wall_ms = sl_clock_now_ms();
        pthread_mutex_unlock(&k->mlock);
        atomic_store(&k->fatal, true);
    } else if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) {
        pthread_mutex_lock(&k->mlock);
        snprintf(k->down_msg, sizeof k->down_msg, "all brokers are down (%s)", reason);
        if (!atomic_load(&k->brokers_down))
            k->fail_wall_ms = sl_clock_now_ms();
        pthread_mutex_unlock(&k->mlock);
        atomic_store(&k->brokers_down, true);
    }
    k->host->log(k->host->ctx, "source.kafka: %s: %s", rd_kafka_err2str(err), reason);
}

static void on_commit(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                      rd_kafka_topic_partition_list_t *offsets, void *opaque)
{
    (void)rk, (void)offsets;
    kafka_source *k = opaque;
    if (err && err != RD_KAFKA_RESP_ERR__NO_OFFSET) {
        atomic_fetch_add(&k->commit_failed, 1);
        k->host->log(k->host->ctx,
                     "source.kafka: offset commit failed: %s (the records may be delivered "
                     "again)",
                     rd_kafka_err2str(err));
    }
}

/* ---- the group state ------------------------------------------------------------ */

static const char *src_name(const kafka_source *k)
{
    return k->host->name ? k->host->name : "kafka";
}

/* Enters (joining) or leaves the joining state, with one log line per
 * change: the wait for an assignment is the one a killed predecessor can
 * make long, and it should not pass in silence. nparts: the assignment. */
static void set_joining(kafka_source *k, bool joining, int nparts)
{
    int64_t now = mono_ms();
    pthread_mutex_lock(&k->mlock);
    bool changed = k->joining != joining;
    int64_t waited = now - k->state_mono_ms;
    if (changed) {
        k->joining = joining;
        k->join_warned = false;
        k->state_mono_ms = now;
        k->state_wall_ms = sl_clock_now_ms();
    }
    pthread_mutex_unlock(&k->mlock);
    if (!changed)
        return;
    if (joining)
        sl_slog(SL_SLOG_INFO, "sources",
                "source %s: joining consumer group %s: no partition is assigned until the "
                "group's rebalance ends%s%s",
                src_name(k), k->group, k->instance_id[0] ? "; group.instance.id " : "",
                k->instance_id);
    else
        sl_slog(SL_SLOG_INFO, "sources",
                "source %s: consumer group %s assigned %d partition(s) after %.1f s of joining",
                src_name(k), k->group, nparts, (double)waited / 1000.0);
}

/* Why the source is joining (caller holds mlock), into why[0..cap). */
static void join_reason(const kafka_source *k, int64_t now, char *why, size_t cap)
{
    snprintf(why, cap,
             "joining consumer group %s for %lld s: no partition assigned yet; a member that "
             "did not leave the group (killed, or its host lost) holds its partitions until "
             "its session times out (session.timeout.ms = %d)",
             k->group, (long long)((now - k->state_mono_ms) / 1000), k->session_ms);
}

/* Called from the consumer loop: one warning when joining outlasts the
 * grace, the moment health() turns false. */
static void join_check(kafka_source *k)
{
    int64_t now = mono_ms();
    char why[400];
    pthread_mutex_lock(&k->mlock);
    bool warn = k->joining && !k->join_warned && now - k->state_mono_ms >= JOIN_GRACE_MS;
    if (warn) {
        k->join_warned = true;
        join_reason(k, now, why, sizeof why);
    }
    pthread_mutex_unlock(&k->mlock);
    if (warn)
        sl_slog(SL_SLOG_WARN, "sources", "source %s: still %s", src_name(k), why);
}

/* Keeps k->assigned (what metrics() reports) in step. */
static void assignment_update(kafka_source *k, const rd_kafka_topic_partition_list_t *parts,
                              bool add)
{
    pthread_mutex_lock(&k->alock);
    if (!parts) {
        rd_kafka_topic_partition_list_destroy(k->assigned);
        k->assigned = rd_kafka_topic_partition_list_new(0);
    } else {
        for (int i = 0; i < parts->cnt; i++) {
            const rd_kafka_topic_partition_t *p = &parts->elems[i];
            if (add) {
                if (!rd_kafka_topic_partition_list_find(k->assigned, p->topic, p->partition))
                    rd_kafka_topic_partition_list_add(k->assigned, p->topic, p->partition);
            } else {
                rd_kafka_topic_partition_list_del(k->assigned, p->topic, p->partition);
            }
        }
    }
    k->lag_at_ms = 0; /* recompute */
    pthread_mutex_unlock(&k->alock);
}

static void log_rk_error(kafka_source *k, const char *what, rd_kafka_error_t *e)
{
    if (!e)
        return;
    k->host->log(k->host->ctx, "source.kafka: %s: %s", what, rd_kafka_error_string(e));
    rd_kafka_error_destroy(e);
}

/* Applies a revocation: the partitions leave the assignment. */
static void unassign(kafka_source *k, rd_kafka_topic_partition_list_t *parts, bool coop)
{
    if (coop)
        log_rk_error(k, "incremental unassign", rd_kafka_incremental_unassign(k->rk, parts));
    else
        rd_kafka_assign(k->rk, NULL);
    assignment_update(k, coop ? parts : NULL, false);
    pthread_mutex_lock(&k->alock);
    bool none = k->assigned->cnt == 0;
    pthread_mutex_unlock(&k->alock);
    if (none && !atomic_load(&k->stop))
        set_joining(k, true, 0);
}

static void on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque)
{
    kafka_source *k = opaque;
    bool coop = strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
    switch (err) {
    case RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
        if (coop)
            log_rk_error(k, "incremental assign", rd_kafka_incremental_assign(rk, parts));
        else
            rd_kafka_assign(rk, parts);
        assignment_update(k, parts, true);
        atomic_store(&k->assigned_once, true);
        pthread_mutex_lock(&k->alock);
        int nparts = k->assigned->cnt;
        pthread_mutex_unlock(&k->alock);
        set_joining(k, false, nparts); /* an empty assignment too: the group is joined */
        break;
    case RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS:
        if (k->in_loop) {
            /* Records of these partitions may have been polled already (in
             * the batch this call is serving): the loop emits them, flushes,
             * commits, then unassigns. rd_kafka_yield() ends the batch now. */
            if (!k->revoking)
                k->revoking = rd_kafka_topic_partition_list_new(parts->cnt);
            for (int i = 0; i < parts->cnt; i++)
                if (!rd_kafka_topic_partition_list_find(k->revoking, parts->elems[i].topic,
                                                        parts->elems[i].partition))
                    rd_kafka_topic_partition_list_add(k->revoking, parts->elems[i].topic,
                                                      parts->elems[i].partition);
            k->revoke_coop = coop;
            rd_kafka_yield(rk);
        } else {
            unassign(k, parts, coop); /* closing: everything flushed is committed */
        }
        break;
    default:
        k->host->log(k->host->ctx, "source.kafka: rebalance failed: %s", rd_kafka_err2str(err));
        rd_kafka_assign(rk, NULL);
        assignment_update(k, NULL, false);
        if (!atomic_load(&k->stop))
            set_joining(k, true, 0);
        break;
    }
}

/* ---- records ------------------------------------------------------------------- */

/* A header value for sl_event_from_binary(), which percent-decodes,
 * unquotes and trims spaces and tabs (the HTTP binding's rules): the Kafka
 * binding sends values as they are, so every '%' and '"' and the leading
 * and trailing spaces and tabs are percent-encoded first, into k->esc: the
 * attribute is then exactly the header's value. Sets *at to the value's
 * offset there and returns its length, or sets *at to (size_t)-1 when the
 * value needs no change. Returns (size_t)-1 out of memory. */
static size_t escape_value(kafka_source *k, const char *v, size_t len, size_t *at)
{
    *at = (size_t)-1;
    size_t lead = 0, trail = len;
    while (lead < len && (v[lead] == ' ' || v[lead] == '\t'))
        lead++;
    while (trail > lead && (v[trail - 1] == ' ' || v[trail - 1] == '\t'))
        trail--;
    if (lead == 0 && trail == len && !memchr(v, '%', len) && !memchr(v, '"', len))
        return len;
    *at = k->esc.len;
    for (size_t i = 0; i < len; i++) {
        int rc = v[i] == '%'                                ? sl_buf_append(&k->esc, "%25", 3)
                 : v[i] == '"'                              ? sl_buf_append(&k->esc, "%22", 3)
                 : (i < lead || i >= trail) && v[i] == ' '  ? sl_buf_append(&k->esc, "%20", 3)
                 : (i < lead || i >= trail) && v[i] == '\t' ? sl_buf_append(&k->esc, "%09", 3)
                                                            : sl_buf_append(&k->esc, &v[i], 1);
        if (rc)
            return (size_t)-1;
    }
    return k->esc.len - *at;
}

/* Whether [s, s + len) is a CloudEvents String: valid UTF-8 without the
 * code points the type refuses (U+0000–U+001F, U+007F–U+009F,
 * noncharacters), which the host would refuse the whole event for. */
static bool ce_string_ok(const char *s, size_t len)
{
    if (!sl_json_utf8_valid(s, len))
        return false;
    const unsigned char *p = (const unsigned char *)s, *e = p + len;
    while (p < e) {
        unsigned cp = *p;
        int n = cp < 0x80 ? 1 : cp >= 0xf0 ? 4 : cp >= 0xe0 ? 3 : 2;
        if (n > 1)
            cp &= 0x3fu >> (n - 1);
        for (int i = 1; i < n; i++)
            cp = cp << 6 | (p[i] & 0x3fu);
        p += n;
        if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || (cp >= 0xfdd0 && cp <= 0xfdef) ||
            (cp & 0xfffe) == 0xfffe)
            return false;
    }
    return true;
}

/* Refuses record m in the consumer thread: code (an sl_event_status name)
 * and the reason go with its item to the emit thread, which hands them to
 * host->refused(). Returns SL_EINVAL. */
static int refuse(kafka_source *k, const rd_kafka_message_t *m, const char *code, const char *fmt,
                  ...) __attribute__((format(printf, 4, 5)));
static int refuse(kafka_source *k, const rd_kafka_message_t *m, const char *code, const char *fmt,
                  ...)
{
    int n = snprintf(k->why, sizeof k->why,
                     "source.kafka: record %s/%d/%lld: ", rd_kafka_topic_name(m->rkt),
                     (int)m->partition, (long long)m->offset);
    if (n > 0 && (size_t)n < sizeof k->why) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(k->why + n, sizeof k->why - (size_t)n, fmt, ap);
        va_end(ap);
    }
    k->why_code = code;
    return SL_EINVAL;
}

/* The record headers sluice reads. */
typedef struct rec_headers {
    rd_kafka_headers_t *hdrs;
    bool binary;       /* a ce_specversion header */
    bool has_pkey;     /* a ce_partitionkey header */
    bool has_time;     /* a ce_time header */
    bool has_id;       /* a ce_id header */
    const char *ctype; /* content-type, NUL-terminated copy in k->ctb; NULL: none or unusable */
    const char *lane;  /* the lane header, NUL-terminated copy in lanebuf */
    char lanebuf[SL_EVENT_LANE_MAX + 1];
} rec_headers;

/* Reads m's headers into h. A content-type that is no CloudEvents String
 * (not UTF-8, control characters, NUL included) is left out: the default
 * applies, and the record is kept. A lane containing NUL, or longer than a
 * lane may be, is refused (SL_EINVAL, refuse()) rather than cut. Returns 0, SL_EINVAL or
 * SL_ENOMEM. */
static int read_headers(kafka_source *k, const rd_kafka_message_t *m, rec_headers *h)
{
    h->hdrs = NULL;
    h->binary = h->has_pkey = h->has_time = h->has_id = false;
    h->ctype = h->lane = NULL;
    if (rd_kafka_message_headers(m, &h->hdrs))
        return 0;
    const char *name;
    const void *val;
    size_t vl;
    for (size_t i = 0; !rd_kafka_header_get_all(h->hdrs, i, &name, &val, &vl); i++) {
        if (strncmp(name, "ce_", 3) == 0) {
            if (strcmp(name + 3, "specversion") == 0)
                h->binary = true;
            else if (strcmp(name + 3, "partitionkey") == 0)
                h->has_pkey = true;
            else if (strcmp(name + 3, "time") == 0)
                h->has_time = true;
            else if (strcmp(name + 3, "id") == 0)
                h->has_id = true;
        } else if (strcasecmp(name, "content-type") == 0 && val) {
            h->ctype = NULL;
            if (!ce_string_ok(val, vl))
                continue; /* left out: the default content type applies */
            k->ctb.len = 0;
            if (sl_buf_append(&k->ctb, val, vl) || sl_buf_append(&k->ctb, "", 1))
                return SL_ENOMEM;
            h->ctype = (const char *)k->ctb.data;
        } else if (strcasecmp(name, "lane") == 0) {
            if (val && memchr(val, '\0', vl))
                return refuse(k, m, "InvalidLane", "its lane header contains NUL");
            if (vl > SL_EVENT_LANE_MAX)
                return refuse(k, m, "InvalidLane",
                              "its lane header is %zu bytes long; a lane is at most %d", vl,
                              SL_EVENT_LANE_MAX);
            memcpy(h->lanebuf, val ? (const char *)val : "", vl);
            h->lanebuf[vl] = '\0';
            h->lane = h->lanebuf;
        }
    }
    return 0;
}

/* Whether the key can be partitionkey: a non-empty CloudEvents String (a
 * key with control characters, e.g. a Java IntegerSerializer's 00 00 00 2a,
 * would make the host refuse the whole event). */
static bool key_usable(const rd_kafka_message_t *m)
{
    return m->key && m->key_len && ce_string_ok(m->key, m->key_len);
}

/* The id of an event made from record m that has none of its own:
 * TOPIC-PARTITION-OFFSET, so that a record read again (after a crash, a
 * reset of the group's offsets) makes the same event and a consumer can
 * recognise the duplicate. A topic name needs no escaping. Returns the
 * length written to out (NUL-terminated). */
#define RECORD_ID_MAX (249 + 2 * 21 + 1)
static size_t record_id(const rd_kafka_message_t *m, char out[RECORD_ID_MAX])
{
    int n = snprintf(out, RECORD_ID_MAX, "%s-%d-%lld", rd_kafka_topic_name(m->rkt),
                     (int)m->partition, (long long)m->offset);
    return n > 0 && n < RECORD_ID_MAX ? (size_t)n : 0;
}

/* Binary mode: ce_* headers → a structured event appended to out. Returns
 * 0, SL_EINVAL (refuse(): the host never sees it), or SL_ENOMEM. */
static int conv_binary(kafka_source *k, const rd_kafka_message_t *m, const rec_headers *h,
                       sl_buf *out, sl_error *err)
{
    sl_event_header eh[MAX_CE_HEADERS + 3];
    size_t at[MAX_CE_HEADERS + 3];
    char names[MAX_CE_HEADERS][SL_EVENT_NAME_MAX + 4];
    size_t n = 0;
    int rc = 0;
    k->esc.len = 0;
    const char *name;
    const void *val;
    size_t vl;
    for (size_t i = 0; !rd_kafka_header_get_all(h->hdrs, i, &name, &val, &vl); i++) {
        if (strncmp(name, "ce_", 3) != 0 || !val)
            continue;
        size_t nl = strlen(name);
        if (n == MAX_CE_HEADERS || nl - 3 > SL_EVENT_NAME_MAX)
            return refuse(k, m, "InvalidEvent", "too many or too long ce_ headers");
        memcpy(names[n], "ce-", 3);
        memcpy(names[n] + 3, name + 3, nl - 3 + 1);
        eh[n].name = names[n];
        eh[n].name_len = nl;
        eh[n].value = val;
        if ((eh[n].value_len = escape_value(k, val, vl, &at[n])) == (size_t)-1)
            rc = SL_ENOMEM;
        n++;
    }
    if (!h->has_pkey && key_usable(m)) {
        eh[n].name = "ce-partitionkey";
        eh[n].name_len = 15;
        eh[n].value = m->key;
        if ((eh[n].value_len = escape_value(k, m->key, m->key_len, &at[n])) == (size_t)-1)
            rc = SL_ENOMEM;
        n++;
    }
    /* No ce_time: the record's timestamp, as for wrapped records (so that
     * a record read again makes the same event). */
    char ts[SL_TIME_RFC3339_MAX];
    int64_t ts_ms = rd_kafka_message_timestamp(m, NULL);
    size_t tsl = !h->has_time && ts_ms > 0 ? sl_time_format_rfc3339(ts_ms, ts) : 0;
    if (tsl) {
        eh[n].name = "ce-time";
        eh[n].name_len = 7;
        eh[n].value = ts;
        eh[n].value_len = tsl;
        at[n] = (size_t)-1;
        n++;
    }
    /* No ce_id: the record's coordinates, as for wrapped records. */
    char id[RECORD_ID_MAX];
    size_t idl = h->has_id ? 0 : record_id(m, id);
    if (idl) {
        eh[n].name = "ce-id";
        eh[n].name_len = 5;
        eh[n].value = id;
        eh[n].value_len = idl;
        at[n] = (size_t)-1;
        n++;
    }
    if (rc)
        return sl_error_set(err, rc, "source.kafka: out of memory");
    for (size_t i = 0; i < n; i++) /* k->esc is complete: its address is final */
        if (at[i] != (size_t)-1)
            eh[i].value = (const char *)k->esc.data + at[i];
    sl_event_limits lim = {.max_bytes = m->len + 1};
    sl_event_status st = sl_event_from_binary(eh, n, h->ctype, m->payload, m->len, &lim, out, err);
    if (st == SL_EVENT_NO_MEMORY)
        return sl_error_set(err, SL_ENOMEM, "source.kafka: out of memory");
    if (st != SL_EVENT_OK) /* this one never reaches the host */
        return refuse(k, m, sl_event_status_name(st), "%s",
                      err && err->msg[0] ? err->msg : sl_event_status_name(st));
    return 0;
}

/* Whether the object has an "id" member, null included (an "id": null is
 * an event without an id that the host refuses, not one to give ours: a
 * second "id" would be refused as a duplicate anyway). */
static bool has_id_member(const sl_json_tok *obj)
{
    sl_json_iter it;
    sl_json_tok key, val;
    sl_json_iter_init(&it, obj);
    while (sl_json_iter_member(&it, &key, &val))
        if (key.len == 4 && memcmp(key.p, "\"id\"", 4) == 0)
            return true;
    return false;
}

/* Structured mode: the value is the event, appended to out; the key
 * becomes partitionkey when the event has none, and an event without an id
 * gets the record's (record_id()) (k->ev parsed it, when parsed). Returns 0
 * or SL_ENOMEM. */
static int conv_structured(kafka_source *k, const rd_kafka_message_t *m, bool parsed, sl_buf *out)
{
    const char *v = m->payload;
    bool pkey = parsed && k->ev.partitionkey.type == SL_JSON_NONE && key_usable(m);
    bool noid = parsed && k->ev.id.type == SL_JSON_NONE && !has_id_member(&k->ev.object);
    if (!pkey && !noid)
        return sl_buf_append(out, v, m->len);
    size_t head = (size_t)(k->ev.object.p - v) + 1; /* up to and with '{' */
    int rc = sl_buf_append(out, v, head);
    /* SL_EINVAL cannot happen (key_usable, a topic name), but is kept apart from SL_ENOMEM */
    if (!rc && pkey)
        rc = sl_buf_append(out, "\"partitionkey\":", 15) ||
                     sl_json_put_string(out, m->key, m->key_len) || sl_buf_append(out, ",", 1)
                 ? SL_ENOMEM
                 : 0;
    if (!rc && noid) {
        char id[RECORD_ID_MAX];
        size_t idl = record_id(m, id);
        rc = sl_buf_append(out, "\"id\":", 5) || sl_json_put_string(out, id, idl) ||
                     sl_buf_append(out, ",", 1)
                 ? SL_ENOMEM
                 : 0;
    }
    if (!rc)
        rc = sl_buf_append(out, v + head, m->len - head) ? SL_ENOMEM : 0;
    return rc;
}

static bool is_ce_json(const char *ctype)
{
    return ctype && strncasecmp(ctype, "application/cloudevents+json", 28) == 0 &&
           (ctype[28] == '\0' || ctype[28] == ';' || ctype[28] == ' ');
}

/* A value that may be a structured CloudEvent: an object naming specversion. */
static bool looks_structured(const rd_kafka_message_t *m)
{
    const char *v = m->payload;
    size_t i = 0;
    while (i < m->len && (v[i] == ' ' || v[i] == '\t' || v[i] == '\n' || v[i] == '\r'))
        i++;
    return i < m->len && v[i] == '{' && memmem(v + i, m->len - i, "\"specversion\"", 13);
}

/* Appends the base64 (RFC 4648, padded) of d[0..len) with quotes. */
static int put_base64(sl_buf *b, const unsigned char *d, size_t len)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (sl_buf_reserve(b, 4 * ((len + 2) / 3) + 2))
        return SL_ENOMEM;
    char *o = (char *)b->data + b->len;
    *o++ = '"';
    size_t i = 0;
    for (; i + 3 <= len; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16 | (uint32_t)d[i + 1] << 8 | d[i + 2];
        *o++ = tab[v >> 18];
        *o++ = tab[(v >> 12) & 63];
        *o++ = tab[(v >> 6) & 63];
        *o++ = tab[v & 63];
    }
    if (i < len) {
        uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < len ? (uint32_t)d[i + 1] << 8 : 0);
        *o++ = tab[v >> 18];
        *o++ = tab[(v >> 12) & 63];
        *o++ = i + 1 < len ? tab[(v >> 6) & 63] : '=';
        *o++ = '=';
    }
    *o++ = '"';
    b->len = (size_t)(o - (char *)b->data);
    return 0;
}

/* Appends the decimal text of v. */
static int put_int(sl_buf *b, long long v)
{
    char t[24], *e = t + sizeof t, *p = e;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do
        *--p = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0)
        *--p = '-';
    return sl_buf_append(b, p, (size_t)(e - p));
}

#define PUT(lit) sl_buf_append(b, lit, sizeof lit - 1)

/* A record that is no CloudEvent, wrapped as one, appended to b: the same
 * event the host's emit_data() makes (type and source configured, id
 * TOPIC-PARTITION-OFFSET, the record time, the key as partitionkey; data
 * as JSON when the value parses, else as text when it is UTF-8, else
 * data_base64), built here without printf: it is the hot path of a bridge. */
static int build_wrapped(kafka_source *k, const rd_kafka_message_t *m, const rec_headers *h,
                         sl_buf *b)
{
    const char *topic = rd_kafka_topic_name(m->rkt);
    size_t tl = strlen(topic); /* a valid topic name: nothing to escape */
    const char *v = m->payload ? m->payload : "";
    sl_json_tok tok;
    bool json =
        m->len && sl_json_validate(v, m->len, SL_EVENT_MAX_DEPTH_DEFAULT - 1, &tok, NULL) == 0;
    bool text = !json && sl_json_utf8_valid(v, m->len);
    /* rc: SL_ENOMEM, or SL_EINVAL from sl_json_put_string() (a string that
     * is not UTF-8: the checks above exclude it; kept apart so that it can
     * never pass for a lack of memory, which is retried). */
    int rc = PUT("{\"specversion\":\"1.0\",\"id\":\"") || sl_buf_append(b, topic, tl) || PUT("-") ||
                     put_int(b, m->partition) || PUT("-") || put_int(b, m->offset) ||
                     PUT("\",\"source\":")
                 ? SL_ENOMEM
                 : 0;
    if (!rc && k->source_json)
        rc = sl_buf_append(b, k->source_json, k->source_json_len) ? SL_ENOMEM : 0;
    else if (!rc)
        rc = PUT("\"kafka://") || sl_buf_append(b, topic, tl) || PUT("\"") ? SL_ENOMEM : 0;
    if (!rc)
        rc = PUT(",\"type\":") || sl_buf_append(b, k->type_json, k->type_json_len) ||
                     PUT(",\"datacontenttype\":")
                 ? SL_ENOMEM
                 : 0;
    if (!rc && h->ctype)
        rc = sl_json_put_string(b, h->ctype, strlen(h->ctype));
    else if (!rc)
        rc = (json   ? PUT("\"application/json\"")
              : text ? PUT("\"text/plain\"")
                     : PUT("\"application/octet-stream\""))
                 ? SL_ENOMEM
                 : 0;
    int64_t ts = rd_kafka_message_timestamp(m, NULL);
    if (!rc && ts > 0) {
        char t[SL_TIME_RFC3339_MAX];
        size_t n = sl_time_format_rfc3339(ts, t);
        if (n)
            rc = PUT(",\"time\":\"") || sl_buf_append(b, t, n) || PUT("\"") ? SL_ENOMEM : 0;
    }
    if (!rc && key_usable(m)) {
        rc = PUT(",\"partitionkey\":") ? SL_ENOMEM : 0;
        if (!rc)
            rc = sl_json_put_string(b, m->key, m->key_len);
    }
    if (!rc && json)
        rc = PUT(",\"data\":") || sl_buf_append(b, v, m->len) ? SL_ENOMEM : 0;
    else if (!rc && text)
        rc = PUT(",\"data\":") ? SL_ENOMEM : sl_json_put_string(b, v, m->len);
    else if (!rc)
        rc = PUT(",\"data_base64\":") || put_base64(b, (const unsigned char *)v, m->len) ? SL_ENOMEM
                                                                                         : 0;
    if (!rc)
        rc = PUT("}") ? SL_ENOMEM : 0;
    return rc;
}

#undef PUT

/* One record → one event's JSON appended to out (h: its headers, read).
 * Returns 0, SL_EINVAL (refused: refuse()), or SL_ENOMEM. */
static int convert(kafka_source *k, const rd_kafka_message_t *m, const rec_headers *h, sl_buf *out)
{
    sl_error err = {0};
    if (h->binary)
        return conv_binary(k, m, h, out, &err);
    bool ce_ct = is_ce_json(h->ctype);
    if (m->payload && (ce_ct || looks_structured(m))) {
        /* An event without an id is one: it gets the record's. */
        sl_event_limits lim = {.max_bytes = m->len + 1, .generate_ids = true};
        bool parsed = sl_event_parse(m->payload, m->len, &lim, &k->ev, NULL) == SL_EVENT_OK;
        if (parsed || ce_ct) /* with the CloudEvents type, the host says what is wrong */
            return conv_structured(k, m, parsed, out);
        /* Not a CloudEvent after all: wrapped like any value. */
    }
    int rc = build_wrapped(k, m, h, out);
    if (rc == SL_EINVAL)
        return refuse(k, m, "InvalidEvent", "cannot be wrapped: a string is not valid UTF-8");
    return rc;
}

/* ---- the chunk queue ------------------------------------------------------------ */

/* An absolute CLOCK_MONOTONIC time ms from now. */
static struct timespec deadline(int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    return ts;
}

/* An empty chunk (recycled when possible), or NULL. */
static kchunk *chunk_get(kafka_source *k)
{
    pthread_mutex_lock(&k->qlock);
    kchunk *c = k->qfree;
    if (c) {
        k->qfree = c->next;
        k->nfree--;
    }
    pthread_mutex_unlock(&k->qlock);
    if (!c)
        c = calloc(1, sizeof *c);
    return c;
}

static void chunk_free(kchunk *c)
{
    for (size_t i = 0; i < c->ntps; i++)
        free(c->tps[i].topic);
    free(c->tps);
    free(c->items);
    sl_buf_free(&c->arena);
    free(c);
}

static void chunk_put(kafka_source *k, kchunk *c)
{
    for (size_t i = 0; i < c->ntps; i++)
        free(c->tps[i].topic);
    c->ntps = c->n = c->vbytes = c->arena.len = 0;
    c->barrier = false;
    pthread_mutex_lock(&k->qlock);
    bool keep = k->nfree < QUEUE_CHUNKS + 2;
    if (keep) {
        c->next = k->qfree;
        k->qfree = c;
        k->nfree++;
    }
    pthread_mutex_unlock(&k->qlock);
    if (!keep)
        chunk_free(c);
}

/* Hands c to the emit thread, waiting while the queue is full (the
 * Databus' back-pressure reaches the consumer here). Returns 0, or -1 when
 * the source stops first (c is dropped: its records are not committed). */
static int chunk_push(kafka_source *k, kchunk *c)
{
    pthread_mutex_lock(&k->qlock);
    while (k->qn >= QUEUE_CHUNKS && !atomic_load(&k->stop) && !k->e_done) {
        struct timespec ts = deadline(POLL_MS);
        pthread_cond_timedwait(&k->qcond, &k->qlock, &ts);
    }
    bool ok = !atomic_load(&k->stop) && !k->e_done;
    if (ok) {
        c->next = NULL;
        if (k->qtail)
            k->qtail->next = c;
        else
            k->qhead = c;
        k->qtail = c;
        k->qn++;
        pthread_cond_broadcast(&k->qcond);
    }
    pthread_mutex_unlock(&k->qlock);
    if (!ok)
        chunk_put(k, c);
    return ok ? 0 : -1;
}

/* The next chunk, waiting up to POLL_MS; NULL when there is none. *idle:
 * nothing else is queued. */
static kchunk *chunk_pop(kafka_source *k, bool *idle)
{
    pthread_mutex_lock(&k->qlock);
    if (!k->qhead && !atomic_load(&k->stop) && !k->c_done) {
        struct timespec ts = deadline(POLL_MS);
        pthread_cond_timedwait(&k->qcond, &k->qlock, &ts);
    }
    kchunk *c = k->qhead;
    if (c) {
        k->qhead = c->next;
        if (!k->qhead)
            k->qtail = NULL;
        k->qn--;
        pthread_cond_broadcast(&k->qcond);
    }
    *idle = !k->qhead;
    pthread_mutex_unlock(&k->qlock);
    return c;
}

/* ---- the consumer thread ---------------------------------------------------------- */

/* Records in c that m's partition is consumed up to m. */
static int chunk_track(kchunk *c, const rd_kafka_message_t *m)
{
    ktp *t = c->ntps ? &c->tps[c->ntps - 1] : NULL;
    const char *topic = rd_kafka_topic_name(m->rkt);
    if (!(t && t->part == m->partition && strcmp(t->topic, topic) == 0)) {
        t = NULL;
        for (size_t i = 0; i < c->ntps && !t; i++)
            if (c->tps[i].part == m->partition && strcmp(c->tps[i].topic, topic) == 0)
                t = &c->tps[i];
        if (t) { /* most recent last: the next look-up finds it first */
            ktp tmp = *t;
            *t = c->tps[c->ntps - 1];
            c->tps[c->ntps - 1] = tmp;
            t = &c->tps[c->ntps - 1];
        }
    }
    if (!t) {
        if (c->ntps == c->tcap) {
            size_t cap = c->tcap ? c->tcap * 2 : 8;
            ktp *v = realloc(c->tps, cap * sizeof *v);
            if (!v)
                return SL_ENOMEM;
            c->tps = v;
            c->tcap = cap;
        }
        t = &c->tps[c->ntps];
        if (!(t->topic = strdup(topic)))
            return SL_ENOMEM;
        t->part = m->partition;
        c->ntps++;
    }
    t->next = m->offset + 1;
    return 0;
}

/* With a lane configured, every event gets it (the host stamps it): a
 * record whose lane header names another lane is refused, as an event
 * naming another lane is. Returns 0 (h->lane cleared: the source's lane
 * applies), or SL_EINVAL (refuse()). */
static int lane_check(kafka_source *k, const rd_kafka_message_t *m, rec_headers *h)
{
    const char *lane = k->cfg->lane;
    if (!lane || !lane[0] || !h->lane)
        return 0;
    if (h->lane[0] && strcmp(h->lane, lane) != 0)
        return refuse(k, m, "LaneConflict",
                      "its lane header \"%s\" is not the source's lane \"%s\"",
                      sl_json_utf8_valid(h->lane, strlen(h->lane)) ? h->lane : "(not UTF-8)", lane);
    h->lane = NULL;
    return 0;
}

/* Converts m into an item of c (a refused record into a skipped item
 * carrying the reason). Returns 0, or SL_ESHUTDOWN when out of memory until
 * the source stops. Only SL_ENOMEM is retried: a record that cannot be
 * converted is refused, never retried. */
static int chunk_add(kafka_source *k, kchunk *c, const rd_kafka_message_t *m)
{
    for (;;) {
        int rc = 0;
        size_t mark = c->arena.len;
        if (c->n == c->cap) {
            size_t cap = c->cap ? c->cap * 2 : 256;
            kitem *v = realloc(c->items, cap * sizeof *v);
            if (v) {
                c->items = v;
                c->cap = cap;
            } else {
                rc = SL_ENOMEM;
            }
        }
        rec_headers h;
        k->why_code = NULL;
        if (!rc)
            rc = read_headers(k, m, &h);
        if (!rc)
            rc = lane_check(k, m, &h);
        if (!rc)
            rc = convert(k, m, &h, &c->arena);
        if (rc && rc != SL_ENOMEM) { /* refused */
            if (!k->why_code)
                refuse(k, m, "InvalidEvent", "cannot be converted (error %d)", rc);
            c->arena.len = mark;
            kitem *it = &c->items[c->n];
            it->off = mark;
            it->len = 0;
            it->skip = true;
            it->has_lane = false;
            it->code = k->why_code;
            rc = sl_buf_append(&c->arena, k->why, strlen(k->why) + 1) ? SL_ENOMEM : 0;
        } else if (!rc) {
            kitem *it = &c->items[c->n];
            it->off = mark;
            it->len = c->arena.len - mark;
            it->skip = false;
            it->code = NULL;
            it->has_lane = h.lane != NULL;
            if (it->has_lane) {
                it->lane_off = c->arena.len;
                rc = sl_buf_append(&c->arena, h.lane, strlen(h.lane) + 1) ? SL_ENOMEM : 0;
            }
        }
        if (!rc)
            rc = chunk_track(c, m);
        if (!rc) {
            c->n++;
            c->vbytes += m->len;
            return 0;
        }
        c->arena.len = mark; /* out of memory: wait, then try again */
        k->host->log(k->host->ctx, "source.kafka: out of memory; retrying");
        if (k->host->wait(k->host->ctx, 100))
            return SL_ESHUTDOWN;
    }
}

/* Waits until the emit thread passed a barrier sent now: everything
 * consumed before is flushed and committed. */
static void barrier(kafka_source *k)
{
    kchunk *c = chunk_get(k);
    if (!c)
        return; /* out of memory: the revocation goes on; at worst duplicates */
    c->barrier = true;
    pthread_mutex_lock(&k->qlock);
    uint64_t want = ++k->barriers;
    pthread_mutex_unlock(&k->qlock);
    if (chunk_push(k, c))
        return;
    pthread_mutex_lock(&k->qlock);
    while (k->bdone < want && !atomic_load(&k->stop) && !k->e_done) {
        struct timespec ts = deadline(POLL_MS);
        pthread_cond_timedwait(&k->qcond, &k->qlock, &ts);
    }
    pthread_mutex_unlock(&k->qlock);
}

/* Brokers reported down: librdkafka says when they are, not when one is
 * back; an idle consumer asks for metadata now and then. */
static void probe_brokers(kafka_source *k)
{
    int64_t now = mono_ms();
    if (!atomic_load(&k->brokers_down) || now - k->probe_at_ms < PROBE_INTERVAL_MS)
        return;
    k->probe_at_ms = now;
    const struct rd_kafka_metadata *md = NULL;
    if (rd_kafka_metadata(k->rk, 0, NULL, &md, 1000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_metadata_destroy(md);
        atomic_store(&k->brokers_down, false);
    }
}

static bool running(kafka_source *k)
{
    bool e_done;
    pthread_mutex_lock(&k->qlock);
    e_done = k->e_done;
    pthread_mutex_unlock(&k->qlock);
    return !e_done && !atomic_load(&k->stop) && !k->host->stopping(k->host->ctx);
}

/* The consumer thread: polls batches, converts every record into a chunk
 * and hands the chunk on; applies revocations once the emit thread
 * committed what came before. */
static void *consume_thread(void *arg)
{
    kafka_source *k = arg;
    rd_kafka_message_t *msgs[BATCH_MSGS];
    kchunk *c = NULL;
    bool down = false;
    while (!down && running(k)) {
        /* What is there now; when nothing is, wait for one record (a
         * batch call with a timeout would wait to fill the whole batch). */
        ssize_t n = rd_kafka_consume_batch_queue(k->q, 0, msgs, BATCH_MSGS);
        if (n == 0)
            n = rd_kafka_consume_batch_queue(k->q, POLL_MS, msgs, 1);
        for (ssize_t i = 0; i < n; i++) {
            rd_kafka_message_t *m = msgs[i];
            if (m->err) {
                if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                    k->host->log(k->host->ctx, "source.kafka: %s%s%s",
                                 m->rkt ? rd_kafka_topic_name(m->rkt) : "", m->rkt ? ": " : "",
                                 rd_kafka_message_errstr(m));
            } else if (!down) {
                atomic_store(&k->brokers_down, false);
                atomic_fetch_add(&k->records, 1);
                atomic_fetch_add(&k->bytes, m->len);
                while (!c && !down && !(c = chunk_get(k))) /* out of memory: wait */
                    down = k->host->wait(k->host->ctx, 100);
                if (!down && chunk_add(k, c, m))
                    down = true;
                if (!down && (c->n >= CHUNK_RECORDS || c->arena.len >= CHUNK_BYTES)) {
                    down = chunk_push(k, c) != 0; /* when stopping, c is dropped */
                    c = NULL;
                }
            }
            rd_kafka_message_destroy(m);
        }
        if (c && c->n && !down) {
            down = chunk_push(k, c) != 0;
            c = NULL;
        }
        if (down)
            break;
        if (k->revoking) {
            barrier(k);
            unassign(k, k->revoking, k->revoke_coop);
            rd_kafka_topic_partition_list_destroy(k->revoking);
            k->revoking = NULL;
        }
        if (n <= 0)
            probe_brokers(k);
        join_check(k);
    }
    if (c)
        chunk_put(k, c);
    /* Stopping: what was not acknowledged stays uncommitted. A revocation
     * still waiting is applied, so that closing does not wait for it. */
    k->in_loop = false;
    if (k->revoking) {
        unassign(k, k->revoking, k->revoke_coop);
        rd_kafka_topic_partition_list_destroy(k->revoking);
        k->revoking = NULL;
    }
    pthread_mutex_lock(&k->qlock);
    k->c_done = true;
    pthread_cond_broadcast(&k->qcond);
    pthread_mutex_unlock(&k->qlock);
    return NULL;
}

/* ---- the emit thread ---------------------------------------------------------------- */

/* Commits the stored offsets of the assignment synchronously, waiting at
 * most COMMIT_WAIT_MS; what (a few words) names it in messages. Not
 * attempted while every broker is known down (it would wait for nothing:
 * the records are read again, never lost) nor when the assignment was lost
 * (the commit would be refused). A commit with nothing stored
 * (RD_KAFKA_RESP_ERR__NO_OFFSET) is fine. */
static void commit_sync(kafka_source *k, const char *what)
{
    if (atomic_load(&k->brokers_down) || rd_kafka_assignment_lost(k->rk))
        return;
    rd_kafka_queue_t *q = rd_kafka_queue_new(k->rk);
    if (!q)
        return;
    rd_kafka_resp_err_t e = rd_kafka_commit_queue(k->rk, NULL, q, NULL, NULL);
    if (!e) {
        rd_kafka_event_t *ev = rd_kafka_queue_poll(q, COMMIT_WAIT_MS);
        e = !ev ? RD_KAFKA_RESP_ERR__TIMED_OUT : rd_kafka_event_error(ev);
        if (ev)
            rd_kafka_event_destroy(ev);
    }
    rd_kafka_queue_destroy(q);
    if (e && e != RD_KAFKA_RESP_ERR__NO_OFFSET && e != RD_KAFKA_RESP_ERR__STATE) {
        atomic_fetch_add(&k->commit_failed, 1);
        k->host->log(k->host->ctx,
                     "source.kafka: %s offset commit failed: %s (the records may be delivered "
                     "again)",
                     what, rd_kafka_err2str(e));
    }
}

/* Publishes what was emitted and, once the Databus acknowledged it, stores
 * and commits the offsets: asynchronously, or at a revocation barrier
 * (sync) synchronously and always, even with nothing new, since the last
 * asynchronous commit may have failed (common as a rebalance starts) and the
 * partitions would go to their next owner at the old offset. Returns 0, or
 * SL_ESHUTDOWN (nothing committed). */
static int flush_commit(kafka_source *k, bool sync)
{
    sl_error err = {0};
    int rc = k->host->flush(k->host->ctx, &err);
    while (rc == SL_ENOMEM) { /* the batch is kept: try again */
        k->host->log(k->host->ctx, "source.kafka: %s; retrying", err.msg);
        if (k->host->wait(k->host->ctx, 100))
            return SL_ESHUTDOWN;
        rc = k->host->flush(k->host->ctx, &err);
    }
    if (rc)
        return SL_ESHUTDOWN; /* not acknowledged, so not committed */
    k->pbytes = 0;
    if (!k->uncommitted && !sync)
        return 0;
    if (k->uncommitted) {
        /* A partition revoked meanwhile refuses its offset (its new owner
         * reads those records again: duplicates, never a loss). */
        (void)rd_kafka_offsets_store(k->rk, k->pend);
        rd_kafka_topic_partition_list_destroy(k->pend);
        k->pend = rd_kafka_topic_partition_list_new(16);
        k->uncommitted = 0;
    }
    /* Stored offsets are committed again by both calls. */
    if (sync)
        commit_sync(k, "revocation");
    else
        rd_kafka_commit(k->rk, NULL, 1);
    return 0;
}

/* Emits the events of c, then notes its offsets for the next commit.
 * Returns 0, or SL_ESHUTDOWN. */
static int emit_chunk(kafka_source *k, kchunk *c)
{
    const sl_source_host *host = k->host;
    for (size_t i = 0; i < c->n; i++) {
        const kitem *it = &c->items[i];
        if (it->skip) { /* refused by the consumer thread: the host counts it too */
            atomic_fetch_add(&k->refused, 1);
            if (host->refused)
                host->refused(host->ctx, it->code, (const char *)c->arena.data + it->off);
            continue;
        }
        for (;;) {
            sl_error err = {0};
            const char *base = (const char *)c->arena.data;
            int rc = host->emit_event(host->ctx, base + it->off, it->len,
                                      it->has_lane ? base + it->lane_off : NULL, &err);
            if (rc == SL_EINVAL)
                atomic_fetch_add(&k->refused, 1); /* the host counted and logged it */
            if (rc != SL_ENOMEM)
                break;
            /* Out of memory: publish what there is (this chunk's offsets
             * are not noted yet), then try again. */
            host->log(host->ctx, "source.kafka: out of memory; retrying");
            if (flush_commit(k, false) || host->wait(host->ctx, 100))
                return SL_ESHUTDOWN;
        }
    }
    for (size_t i = 0; i < c->ntps; i++) {
        rd_kafka_topic_partition_t *p =
            rd_kafka_topic_partition_list_find(k->pend, c->tps[i].topic, c->tps[i].part);
        if (!p)
            p = rd_kafka_topic_partition_list_add(k->pend, c->tps[i].topic, c->tps[i].part);
        if (p->offset < c->tps[i].next)
            p->offset = c->tps[i].next;
    }
    k->uncommitted += c->n;
    k->pbytes += c->vbytes;
    return 0;
}

/* The emit thread: hands the chunks' events to the host, flushes after
 * FLUSH_RECORDS / FLUSH_BYTES or when nothing more is queued, and commits
 * after each acknowledged flush. */
static void *emit_thread(void *arg)
{
    kafka_source *k = arg;
    for (;;) {
        bool idle = false;
        kchunk *c = chunk_pop(k, &idle);
        if (!c && (atomic_load(&k->stop) || k->host->stopping(k->host->ctx)))
            break;
        if (!c) {
            pthread_mutex_lock(&k->qlock);
            bool over = k->c_done && !k->qhead;
            pthread_mutex_unlock(&k->qlock);
            if (over)
                break;
        }
        bool bar = false;
        if (c) {
            int rc = emit_chunk(k, c);
            bar = c->barrier;
            chunk_put(k, c);
            if (rc)
                break;
        }
        if ((bar || (k->uncommitted &&
                     (idle || k->uncommitted >= FLUSH_RECORDS || k->pbytes >= FLUSH_BYTES))) &&
            flush_commit(k, bar))
            break;
        if (bar) {
            pthread_mutex_lock(&k->qlock);
            k->bdone++;
            pthread_cond_broadcast(&k->qcond);
            pthread_mutex_unlock(&k->qlock);
        }
    }
    pthread_mutex_lock(&k->qlock);
    k->e_done = true;
    pthread_cond_broadcast(&k->qcond);
    pthread_mutex_unlock(&k->qlock);
    return NULL;
}

/* ---- lifecycle ----------------------------------------------------------------- */

static void free_source(kafka_source *k)
{
    if (k->pend)
        rd_kafka_topic_partition_list_destroy(k->pend);
    if (k->assigned)
        rd_kafka_topic_partition_list_destroy(k->assigned);
    for (kchunk *c = k->qhead, *next; c; c = next) {
        next = c->next;
        chunk_free(c);
    }
    for (kchunk *c = k->qfree, *next; c; c = next) {
        next = c->next;
        chunk_free(c);
    }
    pthread_mutex_destroy(&k->qlock);
    pthread_cond_destroy(&k->qcond);
    sl_buf_free(&k->esc);
    sl_buf_free(&k->ctb);
    sl_buf_free(&k->lag_text);
    pthread_mutex_destroy(&k->mlock);
    pthread_mutex_destroy(&k->alock);
    free(k->group);
    free(k->type_json);
    free(k->source_json);
    free(k);
}

/* The source's group.instance.id into k->instance_id: the one kept in
 * STATE_DIR/group-instance-id, else a new "sluice-NAME-UUIDv7" written
 * there (tmp, fsync, rename). So it is stable for one data dir and differs
 * between data dirs (two servers of one group), as static membership
 * wants. Without a state dir, or when the file cannot be written, there is
 * none (logged): the source works without static membership. */
static void instance_id_load(kafka_source *k)
{
    k->instance_id[0] = '\0';
    const char *dir = k->host->state_dir;
    if (!dir || !dir[0])
        return;
    char path[4200], tmp[4210];
    snprintf(path, sizeof path, "%s/" INSTANCE_ID_FILE, dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(path, "re");
    if (f) {
        char line[sizeof k->instance_id];
        bool ok = fgets(line, sizeof line, f) != NULL;
        fclose(f);
        line[ok ? strcspn(line, "\r\n") : 0] = '\0';
        bool printable = ok && line[0];
        for (const char *p = line; printable && *p; p++)
            printable = *p > ' ' && *p < 0x7f;
        if (printable) {
            snprintf(k->instance_id, sizeof k->instance_id, "%s", line);
            return;
        }
        k->host->log(k->host->ctx, "source.kafka: %s holds no usable id: making a new one", path);
    }
    char uuid[37], id[sizeof k->instance_id];
    sl_event_uuid7(sl_clock_now_ms(), uuid);
    snprintf(id, sizeof id, "sluice-%.*s-%s", (int)(sizeof id - 45), src_name(k), uuid);
    for (char *p = id; *p; p++)
        if (*p <= ' ' || *p >= 0x7f)
            *p = '_';
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    size_t len = strlen(id);
    bool ok =
        fd >= 0 && write(fd, id, len) == (ssize_t)len && write(fd, "\n", 1) == 1 && fsync(fd) == 0;
    if (fd >= 0)
        close(fd);
    if (!ok || rename(tmp, path)) {
        k->host->log(k->host->ctx, "source.kafka: cannot write %s (%s): no static group membership",
                     path, strerror(errno));
        unlink(tmp);
        return;
    }
    snprintf(k->instance_id, sizeof k->instance_id, "%s", id);
}

static rd_kafka_t *make_consumer(kafka_source *k, sl_error *err)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (!conf) {
        sl_error_set(err, SL_ENOMEM, "source.kafka: out of memory");
        return NULL;
    }
    char id[300];
    snprintf(id, sizeof id, "sluice-source-%s", k->host->name ? k->host->name : "kafka");
    sl_error e = {0};
    if (sl_kafka_conf_set(conf, "client.id", id, &e) ||
        apply_config(conf, k->cfg, k->group, k->instance_id, &e)) {
        sl_error_set(err, e.code, "source.kafka: %s", e.msg);
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    if (!coop_safe()) {
        char strat[256];
        size_t sz = sizeof strat;
        if (rd_kafka_conf_get(conf, "partition.assignment.strategy", strat, &sz) ==
                RD_KAFKA_CONF_OK &&
            strstr(strat, "cooperative-sticky")) {
            k->coop_risk = true;
            k->host->log(k->host->ctx,
                         "source.kafka: librdkafka %s aborts when a cooperative-sticky "
                         "consumer closes before its first assignment (fixed in 2.3.0): a "
                         "stop or reload waits up to %d s for it; an eager "
                         "partition.assignment.strategy avoids this",
                         rd_kafka_version_str(), SETTLE_WAIT_MS / 1000);
        }
    }
    char v[256];
    size_t vsz = sizeof v;
    k->session_ms =
        rd_kafka_conf_get(conf, "session.timeout.ms", v, &vsz) == RD_KAFKA_CONF_OK ? atoi(v) : 0;
    vsz = sizeof v;
    if (rd_kafka_conf_get(conf, "group.instance.id", v, &vsz) == RD_KAFKA_CONF_OK)
        snprintf(k->instance_id, sizeof k->instance_id, "%s", v);
    else
        k->instance_id[0] = '\0';
    rd_kafka_conf_set_opaque(conf, k);
    rd_kafka_conf_set_rebalance_cb(conf, on_rebalance);
    rd_kafka_conf_set_offset_commit_cb(conf, on_commit);
    rd_kafka_conf_set_error_cb(conf, on_error);
    rd_kafka_conf_set_log_cb(conf, on_log);
    char es[512];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, es, sizeof es);
    if (!rk) {
        rd_kafka_conf_destroy(conf);
        sl_kafka_redact(es, k->cfg->properties, k->cfg->nproperties);
        sl_error_set(err, SL_EINVAL, "source.kafka: %s", es);
    }
    return rk;
}

static int subscribe(kafka_source *k, sl_error *err)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new((int)k->cfg->ntopics);
    for (size_t i = 0; i < k->cfg->ntopics; i++)
        rd_kafka_topic_partition_list_add(l, k->cfg->topics[i], RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t e = rd_kafka_subscribe(k->rk, l);
    rd_kafka_topic_partition_list_destroy(l);
    if (e)
        return sl_error_set(err, SL_EINVAL, "source.kafka: subscribe: %s", rd_kafka_err2str(e));
    return 0;
}

static void kafka_stop(void *impl)
{
    kafka_source *k = impl;
    pthread_mutex_lock(&k->qlock);
    atomic_store(&k->stop, true);
    pthread_cond_broadcast(&k->qcond);
    pthread_mutex_unlock(&k->qlock);
    if (k->rk)
        rd_kafka_yield(k->rk);
}

static int kafka_open(const sl_source_config *cfg, const sl_source_host *host, void **impl,
                      sl_error *err)
{
    if (!cfg->brokers || !cfg->ntopics)
        return sl_error_set(err, SL_EINVAL, "source.kafka needs brokers and topics");
    kafka_source *k = calloc(1, sizeof *k);
    if (!k)
        return sl_error_set(err, SL_ENOMEM, "source.kafka: out of memory");
    pthread_mutex_init(&k->mlock, NULL);
    pthread_mutex_init(&k->alock, NULL);
    pthread_mutex_init(&k->qlock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&k->qcond, &ca);
    pthread_condattr_destroy(&ca);
    k->cfg = cfg;
    k->host = host;
    k->pend = rd_kafka_topic_partition_list_new(16);
    k->assigned = rd_kafka_topic_partition_list_new(16);
    if (cfg->group)
        k->group = strdup(cfg->group);
    else if (asprintf(&k->group, "sluice-%s", host->name ? host->name : "kafka") < 0)
        k->group = NULL;
    int rc = 0;
    sl_buf jb = SL_BUF_INIT;
    const char *type = cfg->type ? cfg->type : DEFAULT_TYPE;
    if (sl_json_put_string(&jb, type, strlen(type)) == 0) {
        k->type_json = (char *)jb.data;
        k->type_json_len = jb.len;
    } else {
        rc = sl_error_set(err, SL_EINVAL, "source.kafka: type is not UTF-8");
    }
    jb = (sl_buf)SL_BUF_INIT;
    if (!rc && cfg->source) {
        if (sl_json_put_string(&jb, cfg->source, strlen(cfg->source)) == 0) {
            k->source_json = (char *)jb.data;
            k->source_json_len = jb.len;
        } else {
            rc = sl_error_set(err, SL_EINVAL, "source.kafka: source is not UTF-8");
        }
    }
    if (!rc && (!k->group || !k->pend || !k->assigned))
        rc = sl_error_set(err, SL_ENOMEM, "source.kafka: out of memory");
    if (!rc)
        instance_id_load(k);
    if (!rc && !(k->rk = make_consumer(k, err)))
        rc = err && err->code ? err->code : SL_EINVAL;
    if (!rc) {
        /* Consumer callbacks and messages come through one queue. */
        rd_kafka_poll_set_consumer(k->rk);
        k->q = rd_kafka_queue_get_consumer(k->rk);
        set_joining(k, true, 0); /* before the first callback can come */
        rc = subscribe(k, err);
    }
    if (!rc) {
        if (pthread_create(&k->emitter, NULL, emit_thread, k))
            rc = sl_error_set(err, SL_ENOMEM, "source.kafka: cannot start its threads");
        else
            k->emitting = true;
    }
    if (!rc) {
        k->in_loop = true;
        if (pthread_create(&k->thread, NULL, consume_thread, k)) {
            k->in_loop = false;
            rc = sl_error_set(err, SL_ENOMEM, "source.kafka: cannot start its threads");
        } else {
            k->started = true;
        }
    }
    if (rc) {
        if (k->emitting) {
            kafka_stop(k);
            pthread_join(k->emitter, NULL);
        }
        if (k->q)
            rd_kafka_queue_destroy(k->q);
        if (k->rk) {
            rd_kafka_consumer_close(k->rk);
            rd_kafka_destroy(k->rk);
        }
        free_source(k);
        return rc;
    }
    *impl = k;
    return 0;
}

/* Only with coop_risk (see SETTLE_WAIT_MS): before closing, polls the
 * consumer until its first assignment arrives (served by on_rebalance;
 * records polled meanwhile are dropped without storing their offsets: they
 * are read again), at most SETTLE_WAIT_MS, and not while every broker is
 * known down (no JoinGroup answer can come then). */
static void settle_group(kafka_source *k)
{
    if (!k->coop_risk || atomic_load(&k->assigned_once))
        return;
    rd_kafka_message_t *msgs[64];
    int64_t end = mono_ms() + SETTLE_WAIT_MS;
    while (!atomic_load(&k->assigned_once) && !atomic_load(&k->brokers_down) &&
           !atomic_load(&k->fatal) && mono_ms() < end) {
        ssize_t n = rd_kafka_consume_batch_queue(k->q, POLL_MS, msgs, 64);
        for (ssize_t i = 0; i < n; i++)
            rd_kafka_message_destroy(msgs[i]);
    }
    if (!atomic_load(&k->assigned_once) && !atomic_load(&k->brokers_down))
        k->host->log(k->host->ctx,
                     "source.kafka: closing before the group's first assignment "
                     "(librdkafka %s may abort here: see docs/sources.md)",
                     rd_kafka_version_str());
}

static void kafka_close(void *impl)
{
    kafka_source *k = impl;
    if (!k)
        return;
    kafka_stop(k);
    if (k->started)
        pthread_join(k->thread, NULL);
    if (k->emitting)
        pthread_join(k->emitter, NULL);
    /* Everything flushed was committed asynchronously: one synchronous
     * commit makes sure the last one is on the broker before we leave
     * (bounded, and skipped while every broker is down: a stop or reload
     * is not held for the session timeout). */
    commit_sync(k, "final");
    settle_group(k);
    rd_kafka_queue_destroy(k->q);
    rd_kafka_consumer_close(k->rk); /* leaves the group (its revocation is applied at once) */
    rd_kafka_destroy(k->rk);
    free_source(k);
}

const char *sl_source_kafka_state(void *impl, int64_t *since_ms, char *why, size_t cap)
{
    kafka_source *k = impl;
    bool fatal = atomic_load(&k->fatal), down = atomic_load(&k->brokers_down);
    const char *st;
    pthread_mutex_lock(&k->mlock);
    if (fatal || down) {
        const char *m = fatal ? k->fatal_msg : k->down_msg;
        snprintf(why, cap, "%s",
                 m[0]    ? m
                 : fatal ? "fatal consumer error"
                         : "all brokers are down");
        *since_ms = k->fail_wall_ms;
        st = "failing";
    } else if (k->joining) {
        join_reason(k, mono_ms(), why, cap);
        *since_ms = k->state_wall_ms;
        st = "joining";
    } else {
        why[0] = '\0';
        *since_ms = k->state_wall_ms;
        st = "running";
    }
    pthread_mutex_unlock(&k->mlock);
    return st;
}

/* Unhealthy: every broker down, a fatal error, or joining for longer than
 * JOIN_GRACE_MS (a rebalance takes a few seconds; a dead predecessor's
 * session much longer). */
static int kafka_health(void *impl, char *msg, size_t len)
{
    kafka_source *k = impl;
    int64_t since;
    const char *st = sl_source_kafka_state(k, &since, msg, len);
    if (strcmp(st, "failing") == 0)
        return 1;
    pthread_mutex_lock(&k->mlock);
    bool late = k->joining && mono_ms() - k->state_mono_ms >= JOIN_GRACE_MS;
    pthread_mutex_unlock(&k->mlock);
    if (!late)
        msg[0] = '\0';
    return late;
}

/* Rebuilds the lag lines (caller holds alock): high watermark − position of
 * every assigned partition whose both are known (librdkafka's cached
 * values: no request is made). */
static void lag_refresh(kafka_source *k)
{
    const char *name = k->host->name ? k->host->name : "";
    k->lag_text.len = 0;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_copy(k->assigned);
    if (!l)
        return;
    rd_kafka_position(k->rk, l);
    for (int i = 0; i < l->cnt; i++) {
        int64_t lo = -1, hi = -1;
        rd_kafka_topic_partition_t *p = &l->elems[i];
        if (rd_kafka_get_watermark_offsets(k->rk, p->topic, p->partition, &lo, &hi) || hi < 0)
            continue;
        int64_t pos = p->offset >= 0 ? p->offset : -1;
        if (pos < 0)
            continue;
        char pn[16];
        snprintf(pn, sizeof pn, "%d", (int)p->partition);
        sl_metrics_i64(&k->lag_text, "sluice_source_kafka_lag", hi > pos ? hi - pos : 0, "source",
                       name, "topic", p->topic, "partition", pn, NULL);
    }
    rd_kafka_topic_partition_list_destroy(l);
}

static size_t kafka_metrics(void *impl, char *out, size_t cap)
{
    static const char *const fam[][2] = {
        {"sluice_source_kafka_records_total", "Records read (refused ones too)."},
        {"sluice_source_kafka_bytes_total", "Bytes of record values read."},
        {"sluice_source_kafka_refused_total", "Records refused (not stored)."},
        {"sluice_source_kafka_commit_failures_total",
         "Offset commits the group coordinator refused (those records may be read again)."},
    };
    kafka_source *k = impl;
    sl_buf b = SL_BUF_INIT;
    const char *name = k->host->name ? k->host->name : "";
    uint64_t vals[] = {atomic_load(&k->records), atomic_load(&k->bytes), atomic_load(&k->refused),
                       atomic_load(&k->commit_failed)};
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
        sl_metrics_family(&b, fam[i][0], SL_METRIC_COUNTER, fam[i][1]);
        sl_metrics_u64(&b, fam[i][0], vals[i], "source", name, NULL);
    }
    pthread_mutex_lock(&k->alock);
    int64_t now = mono_ms();
    if (!k->lag_at_ms || now - k->lag_at_ms >= LAG_INTERVAL_MS) {
        lag_refresh(k);
        k->lag_at_ms = now;
    }
    sl_metrics_family(&b, "sluice_source_kafka_assigned_partitions", SL_METRIC_GAUGE,
                      "Partitions assigned to this member of the consumer group.");
    sl_metrics_i64(&b, "sluice_source_kafka_assigned_partitions", k->assigned->cnt, "source", name,
                   NULL);
    sl_metrics_family(&b, "sluice_source_kafka_lag", SL_METRIC_GAUGE,
                      "High watermark minus the consumer's position, per assigned partition.");
    if (k->lag_text.len)
        sl_buf_append(&b, k->lag_text.data, k->lag_text.len);
    pthread_mutex_unlock(&k->alock);
    return sl_metrics_copy(&b, out, cap);
}

/* ---- check --------------------------------------------------------------------- */

static void add_problem(sl_buf *b, const char *msg)
{
    if (b->len)
        sl_buf_append(b, "; ", 2);
    sl_buf_append(b, msg, strlen(msg));
}

/* Every problem at once, so that one `sluice check` run shows them all. */
static int kafka_check(const sl_source_config *cfg, sl_error *err)
{
    sl_buf b = SL_BUF_INIT;
    sl_error e = {0};
    char m[SL_ERROR_MAX];
    if (!cfg->brokers || !cfg->brokers[0])
        add_problem(&b, "brokers is required");
    if (!cfg->ntopics)
        add_problem(&b, "topics is required (names, or regexes starting with ^)");
    for (size_t i = 0; i < cfg->ntopics; i++) {
        const char *t = cfg->topics[i];
        if (t[0] == '^') {
            regex_t re;
            int rc = regcomp(&re, t, REG_EXTENDED | REG_NOSUB);
            if (rc) {
                char why[200];
                regerror(rc, &re, why, sizeof why);
                snprintf(m, sizeof m, "topics: regex \"%s\": %s", t, why);
                add_problem(&b, m);
            } else {
                regfree(&re);
            }
        } else if (!topic_name_ok(t)) {
            snprintf(m, sizeof m,
                     "topics: \"%s\" is not a valid topic name (1 to 249 of a-z A-Z 0-9 . _ -; "
                     "a regex starts with ^)",
                     t);
            add_problem(&b, m);
        }
    }
    /* librdkafka's own checks on a scratch configuration: sluice's settings,
     * then each property alone; then a consumer is made (connecting to
     * nothing, its log silenced) to find conflicts between them. */
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    bool oom = !conf;
    if (conf) {
        size_t before = b.len;
        sl_source_config base = *cfg;
        base.nproperties = 0;
        base.brokers = NULL;
        if (apply_config(conf, &base, cfg->group ? cfg->group : "sluice-check", NULL, &e))
            add_problem(&b, e.msg);
        for (size_t i = 0; i < cfg->nproperties; i++)
            if (apply_property(conf, cfg->properties[i], &e))
                add_problem(&b, e.msg);
        if (b.len == before) {
            char es[512];
            rd_kafka_conf_set_log_cb(conf, quiet_log);
            rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, es, sizeof es);
            if (rk) {
                rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
                conf = NULL;
            } else {
                sl_kafka_redact(es, cfg->properties, cfg->nproperties);
                add_problem(&b, es);
            }
        }
        if (conf)
            rd_kafka_conf_destroy(conf);
    }
    int rc = oom ? SL_ENOMEM : b.len ? SL_EINVAL : 0;
    if (rc == SL_ENOMEM)
        sl_error_set(err, rc, "out of memory");
    else if (rc)
        sl_error_set(err, rc, "%.*s", (int)b.len, (const char *)b.data);
    sl_buf_free(&b);
    return rc;
}

const sl_source_ops sl__source_kafka_ops = {
    .abi_version = SL_CONNECTOR_ABI_VERSION,
    .name = "kafka",
    .check = kafka_check,
    .open = kafka_open,
    .stop = kafka_stop,
    .close = kafka_close,
    .health = kafka_health,
    .metrics = kafka_metrics,
};
