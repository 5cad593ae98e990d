/*
 * connectors/target_kafka.c — target.kafka: records produced to an external
 * Kafka cluster with librdkafka (docs/targets.md, issue 5 §3).
 *
 * One idempotent producer (acks=all, max.in.flight ≤ 5) per instance, and
 * one thread that polls it, so delivery reports arrive in that thread. Each
 * record carries a pointer to its slot in its deliver() call's bookkeeping;
 * a payload is completed 0 only on a successful delivery report, and the
 * bookkeeping is freed with its last payload. deliver() builds the records
 * in the caller's thread (CloudEvents Kafka protocol binding: binary mode
 * ce_* headers, structured JSON, or the payload alone; key and topic
 * templates), completes at once what it must refuse, and returns.
 *
 * Failures: what no retry can fix (a record larger than message.max.bytes,
 * a timestamp the broker refuses, an invalid topic name, a template
 * attribute the event lacks, a payload that is not a CloudEvent where one is
 * needed) completes SL_EINVAL; all else (timeouts, brokers down, an unknown
 * topic, a full queue) completes retryable, so the runner delivers again and
 * nothing is dropped. A record that was never handed to librdkafka (held
 * behind an earlier one of an ordered call, no producer) completes
 * SL_EDEFERRED, and after cancel() whatever is not a real delivery outcome
 * completes SL_ESHUTDOWN: neither uses up one of the rule's attempts. After
 * an idempotent-producer fatal error the next deliver() makes a new producer.
 *
 * Every call with records in librdkafka is on a list, so that a producer
 * destroyed with reports still missing (which a purge should rule out)
 * completes them itself, exactly once, rather than leaving a rule worker
 * waiting forever.
 *
 * Locking: rklock is read-held while producing and write-held to replace
 * the producer; the counters are atomics; the log rate limit and health
 * text have one mutex, the list of calls another.
 */
#include "core/bus/ce_binding.h"
#include "core/base/kafka_conf.h"
#include "core/base/clock.h"
#include "connectors/target_kafka.h"
#include "core/bus/event.h"
#include "core/base/slog.h"

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define CANCEL_GRACE_MS 2000    /* cancel(): records in flight get this long, then are purged */
#define QUEUE_FULL_WAIT_MS 5000 /* produce() on a full queue is tried again this long */
#define LOG_INTERVAL_MS 1000    /* at most one librdkafka log line per second per instance */
#define TOPIC_MAX 249           /* Kafka's longest topic name */
#define PURGE_LIMIT_MS 30000    /* drain(): reports missing this long after a purge are given up */
#define PROBE_INTERVAL_MS 3000  /* brokers down and idle: ask for metadata this often */
#define SPARE_CALLS 4 /* completed calls' bookkeeping kept for the next ones */
#define COPY_MAX_BYTES                                                                             \
    1000000 /* message.copy.max.bytes: librdkafka's message.max.bytes default                      \
             */

typedef struct kafka_target kafka_target;
typedef struct kcall kcall;

/* The opaque of one record: payload i of call. queued: handed to
 * librdkafka, its delivery report not served yet. ts_ms: the record's
 * timestamp (the event's time), -1 for "now" (librdkafka does not report it
 * for a failed record). */
typedef struct kslot {
    kcall *call;
    size_t i;
    atomic_bool queued;
    int64_t ts_ms;
} kslot;

/* One deliver() call. refs: payloads not completed, plus one held by
 * deliver() while it produces. On t's list of calls (prev, next; guarded by
 * t->clock) from its start to its last completion. */
struct kcall {
    kafka_target *t;
    sl_deliver_done_fn *done;
    void *ctx;
    atomic_size_t refs;
    size_t n, cap; /* payloads; slots allocated */
    kcall *prev, *next;
    sl_event ev; /* deliver()'s scratch for parsing payloads (kept with a spare call) */
    kslot slot[];
};

struct kafka_target {
    const sl_target_kafka_conf *cfg;
    bool ordered; /* the rule's `ordered` */
    char *rule;
    char **hname, **hvalue; /* the config's record headers */
    size_t nheaders;
    bool topic_templ, key_templ;
    bool topic_ok; /* a fixed topic's name is valid (checked once, at open) */
    pthread_rwlock_t rklock; /* read: producing; write: replacing rk */
    rd_kafka_t *rk;          /* NULL after a failed re-creation */
    rd_kafka_topic_t *rkt;   /* a fixed topic's handle in rk (NULL: a template, or none) */
    pthread_t poller;
    bool polling;
    atomic_bool poll_stop;
    atomic_bool stopping;      /* cancel()/close(): new payloads complete SL_ESHUTDOWN */
    atomic_bool hurry;         /* cancel(): purge what is left after the grace */
    atomic_bool fatal;         /* a fatal error: the next deliver() makes a new producer */
    atomic_bool no_producer;   /* making a new one failed: the next deliver() tries again */
    atomic_size_t outstanding; /* records produced, not reported */
    atomic_bool abandoned;     /* drain() completed the rest itself: ignore late reports */
    pthread_mutex_t clock;     /* guards calls */
    kcall *calls;              /* every call not completed yet */
    kcall *spare[SPARE_CALLS]; /* completed calls kept for reuse (guarded by clock) */
    /* health: GET /v1/rules */
    atomic_bool brokers_down;
    pthread_mutex_t mlock; /* guards health_msg, down_msg and the log rate limit */
    char health_msg[256];  /* a fatal error, or why there is no producer */
    char down_msg[256];    /* while brokers_down */
    int64_t log_at_ms;
    unsigned log_dropped;
    int64_t refresh_at_ms; /* last metadata look-up for an unknown topic (guarded by mlock) */
};

/* ---- logging ------------------------------------------------------------------ */

/* One line on stderr, at most one per LOG_INTERVAL_MS per instance (a broker
 * outage makes librdkafka repeat itself for every connection attempt). */
static void log_line(kafka_target *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_line(kafka_target *t, const char *fmt, ...)
{
    int64_t now = sl_clock_mono_ms();
    pthread_mutex_lock(&t->mlock);
    if (t->log_at_ms && now - t->log_at_ms < LOG_INTERVAL_MS) {
        t->log_dropped++;
        pthread_mutex_unlock(&t->mlock);
        return;
    }
    unsigned dropped = t->log_dropped;
    t->log_dropped = 0;
    t->log_at_ms = now;
    pthread_mutex_unlock(&t->mlock);
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (dropped)
        sl_slog(SL_SLOG_WARN, "target.kafka", "rule %s: target.kafka: %s (%u more lines left out)",
                t->rule, msg, dropped);
    else
        sl_slog(SL_SLOG_WARN, "target.kafka", "rule %s: target.kafka: %s", t->rule, msg);
}

/* librdkafka's log: warnings and worse only (syslog levels: 4 is warning). */
static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    kafka_target *t = rd_kafka_opaque(rk);
    if (t && level <= 4)
        log_line(t, "%s: %s", fac, buf);
}

/* ---- completion ------------------------------------------------------------------ */

static void call_link(kcall *c)
{
    kafka_target *t = c->t;
    pthread_mutex_lock(&t->clock);
    c->prev = NULL;
    c->next = t->calls;
    if (t->calls)
        t->calls->prev = c;
    t->calls = c;
    pthread_mutex_unlock(&t->clock);
}

/* Caller holds t->clock. */
static void call_unlink(kcall *c)
{
    kafka_target *t = c->t;
    if (c->prev)
        c->prev->next = c->next;
    else
        t->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
}

/* A call's bookkeeping, with room for n slots: a spare one when one is big
 * enough, else new. A rule turn's call of thousands of records is over
 * 64 KiB, and freeing a chunk that large makes malloc consolidate its
 * arena's free lists: once per turn, in the poll thread, it cost more than
 * the rest of the delivery reports. NULL when out of memory. */
static kcall *call_get(kafka_target *t, size_t n)
{
    kcall *c = NULL;
    pthread_mutex_lock(&t->clock);
    for (size_t i = 0; i < SPARE_CALLS && !c; i++)
        if (t->spare[i] && t->spare[i]->cap >= n) {
            c = t->spare[i];
            t->spare[i] = NULL;
        }
    pthread_mutex_unlock(&t->clock);
    if (!c && (c = malloc(sizeof *c + n * sizeof *c->slot)))
        c->cap = n;
    return c;
}

/* Unlinks a completed call and keeps it as a spare, or frees it. Caller
 * holds t->clock. */
static void call_release(kcall *c)
{
    kafka_target *t = c->t;
    call_unlink(c);
    size_t at = SPARE_CALLS;
    for (size_t i = 0; i < SPARE_CALLS; i++)
        if (!t->spare[i] || t->spare[i]->cap < c->cap) {
            at = i;
            break;
        }
    if (at == SPARE_CALLS) {
        free(c);
        return;
    }
    free(t->spare[at]); /* a smaller one, or NULL */
    t->spare[at] = c;
}

static void call_unref(kcall *c)
{
    if (atomic_fetch_sub(&c->refs, 1) == 1) {
        pthread_mutex_lock(&c->t->clock);
        call_release(c);
        pthread_mutex_unlock(&c->t->clock);
    }
}

static void complete(kcall *c, size_t i, int status, const char *reason)
{
    c->done(c->ctx, i, status, status ? reason : NULL);
    call_unref(c);
}

/* A record timestamp (ms since the epoch) as RFC 3339 UTC text. */
static void format_ts(int64_t ms, char *out, size_t len)
{
    time_t secs = (time_t)(ms / 1000);
    struct tm tm;
    if (ms < 0 || !gmtime_r(&secs, &tm)) {
        snprintf(out, len, "%lld ms", (long long)ms);
        return;
    }
    snprintf(out, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}

/* Maps a librdkafka error for a record to topic (timestamp ts_ms, -1 when
 * not known) to a completion status, with the reason in why. */
static int map_error(kafka_target *t, rd_kafka_resp_err_t err, const char *topic, int64_t ts_ms,
                     char *why, size_t len)
{
    const char *es = rd_kafka_err2str(err);
    char ts[64];
    switch (err) {
    case RD_KAFKA_RESP_ERR_NO_ERROR:
        return 0;
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
        snprintf(why, len,
                 "target.kafka: topic %s: %s (the record is larger than message.max.bytes or the "
                 "broker's limit; it is not retried)",
                 topic, es);
        return SL_EINVAL;
    case RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP:
        /* The event's time is outside the broker's
         * log.message.timestamp.difference.max.ms: every retry would be refused too. */
        format_ts(ts_ms, ts, sizeof ts);
        snprintf(why, len,
                 "target.kafka: topic %s: %s (the record's timestamp %s, the event's time, is "
                 "outside what the broker accepts; not retried)",
                 topic, es, ts_ms >= 0 ? ts : "(not known)");
        return SL_EINVAL;
    case RD_KAFKA_RESP_ERR_UNSUPPORTED_FOR_MESSAGE_FORMAT:
    case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
        snprintf(why, len,
                 "target.kafka: topic %s: %s (the broker refuses the record; not "
                 "retried)",
                 topic, es);
        return SL_EINVAL;
    case RD_KAFKA_RESP_ERR__PURGE_QUEUE:
    case RD_KAFKA_RESP_ERR__PURGE_INFLIGHT:
        if (atomic_load(&t->stopping)) {
            snprintf(why, len, "target.kafka: shutting down");
            return SL_ESHUTDOWN;
        }
        if (err == RD_KAFKA_RESP_ERR__PURGE_QUEUE) { /* never sent: no attempt used */
            snprintf(why, len,
                     "target.kafka: topic %s: not sent: %s (the producer is being "
                     "replaced)",
                     topic, es);
            return SL_EDEFERRED;
        }
        snprintf(why, len, "target.kafka: topic %s: %s (retried)", topic, es);
        return SL_EIO;
    case RD_KAFKA_RESP_ERR__MSG_TIMED_OUT:
    case RD_KAFKA_RESP_ERR__TIMED_OUT:
        snprintf(why, len,
                 "target.kafka: topic %s: %s (not acknowledged within message.timeout.ms%s; "
                 "retried)",
                 topic, es, atomic_load(&t->brokers_down) ? ", all brokers are down" : "");
        return SL_ETIMEDOUT;
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
    case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
        snprintf(why, len, "target.kafka: topic %s: %s (retried: the topic may yet be created)",
                 topic, es);
        return SL_EIO;
    case RD_KAFKA_RESP_ERR__FATAL: {
        char fe[256] = "";
        atomic_store(&t->fatal, true);
        if (atomic_load(&t->stopping)) { /* not re-created: not the record's fault */
            snprintf(why, len, "target.kafka: shutting down (after a fatal producer error)");
            return SL_ESHUTDOWN;
        }
        if (t->rk)
            rd_kafka_fatal_error(t->rk, fe, sizeof fe);
        snprintf(why, len,
                 "target.kafka: topic %s: fatal producer error: %s (retried with a "
                 "new producer)",
                 topic, fe[0] ? fe : es);
        return SL_EIO;
    }
    default:
        snprintf(why, len, "target.kafka: topic %s: %s (retried)", topic, es);
        return SL_EIO;
    }
}

/* Delivery report (the poll thread, or a thread flushing). */
static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    kafka_target *t = opaque;
    kslot *s = m->_private;
    /* abandoned: drain() completed every record itself and s may be freed. */
    if (!s || atomic_load(&t->abandoned))
        return;
    char why[SL_ERROR_MAX];
    int status =
        map_error(t, m->err, m->rkt ? rd_kafka_topic_name(m->rkt) : "?", s->ts_ms, why, sizeof why);
    /* Read first: a store for every record would pull the line holding the
     * flags the producing threads read into this thread each time. */
    if (!status && atomic_load_explicit(&t->brokers_down, memory_order_relaxed))
        atomic_store(&t->brokers_down, false);
    atomic_store(&s->queued, false);
    atomic_fetch_sub(&t->outstanding, 1);
    complete(s->call, s->i, status, why);
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    kafka_target *t = opaque;
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char fe[256] = "";
        rd_kafka_fatal_error(rk, fe, sizeof fe);
        pthread_mutex_lock(&t->mlock);
        snprintf(t->health_msg, sizeof t->health_msg, "fatal producer error: %s", fe);
        pthread_mutex_unlock(&t->mlock);
        atomic_store(&t->fatal, true);
        /* Not rate-limited: it happens once per producer. */
        sl_slog(SL_SLOG_ERROR, "target.kafka",
                "rule %s: target.kafka: fatal producer error: %s; the next "
                "delivery makes a new producer",
                t->rule, fe);
        return;
    }
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) {
        pthread_mutex_lock(&t->mlock);
        snprintf(t->down_msg, sizeof t->down_msg, "all brokers are down (%s)", reason);
        pthread_mutex_unlock(&t->mlock);
        atomic_store(&t->brokers_down, true);
    }
    log_line(t, "%s: %s", rd_kafka_err2str(err), reason);
}

/* ---- the producer ------------------------------------------------------------------ */

/* Applies one "name=value" property line. Returns 0, or SL_EINVAL with err. */
static int apply_property(rd_kafka_conf_t *conf, const char *line, sl_error *err)
{
    return sl_kafka_conf_line(conf, line, NULL, NULL, err);
}

/* librdkafka copies a payload into its request buffer only up to
 * message.copy.max.bytes and otherwise points at it; a purge of requests in
 * flight reports their records while a buffer may still point at the
 * payload, which the runner may free by then. So every payload is copied:
 * message.copy.max.bytes is raised to message.max.bytes, unless the
 * properties set it. Returns 0, or SL_EINVAL with err. */
static int raise_copy_max(rd_kafka_conf_t *conf, const sl_target_kafka_conf *cfg, sl_error *err)
{
    char v[32];
    size_t len = sizeof v;
    if (sl_kafka_property(cfg->properties, cfg->nproperties, "message.copy.max.bytes") ||
        rd_kafka_conf_get(conf, "message.max.bytes", v, &len) != RD_KAFKA_CONF_OK)
        return 0;
    long long max = atoll(v);
    return max > COPY_MAX_BYTES ? sl_kafka_conf_set(conf, "message.copy.max.bytes", v, err) : 0;
}

/* Fills conf from cfg: sluice's defaults first, then compression and the
 * timeout, then the properties, which win. Returns 0, or SL_EINVAL with err
 * quoting librdkafka. */
static int apply_config(rd_kafka_conf_t *conf, const sl_target_kafka_conf *cfg, sl_error *err)
{
    char num[32];
    int rc = sl_kafka_conf_set(conf, "enable.idempotence", "true", err);
    if (!rc)
        rc = sl_kafka_conf_set(conf, "acks", "all", err);
    if (!rc) /* idempotence keeps order across retries with at most 5 in flight */
        rc = sl_kafka_conf_set(conf, "max.in.flight.requests.per.connection", "5", err);
    if (!rc)
        rc = sl_kafka_conf_set(conf, "linger.ms", "5", err);
    if (!rc) /* a key's partition is the one Java producers (and sluice's Databus) pick;
              * librdkafka's default, consistent_random, hashes with CRC32 */
        rc = sl_kafka_conf_set(conf, "partitioner", "murmur2_random", err);
    if (!rc) { /* see raise_copy_max() */
        snprintf(num, sizeof num, "%d", COPY_MAX_BYTES);
        rc = sl_kafka_conf_set(conf, "message.copy.max.bytes", num, err);
    }
    if (!rc)
        rc = sl_kafka_conf_set(conf, "compression.type",
                               cfg->compression ? cfg->compression : "zstd", err);
    snprintf(num, sizeof num, "%lld", (long long)cfg->timeout_ms);
    if (!rc && cfg->timeout_ms > 0)
        rc = sl_kafka_conf_set(conf, "message.timeout.ms", num, err);
    if (!rc && cfg->brokers)
        rc = sl_kafka_conf_set(conf, "bootstrap.servers", cfg->brokers, err);
    for (size_t i = 0; !rc && i < cfg->nproperties; i++)
        rc = apply_property(conf, cfg->properties[i], err);
    if (!rc)
        rc = raise_copy_max(conf, cfg, err);
    return rc;
}

static rd_kafka_t *make_producer(kafka_target *t, sl_error *err)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (!conf) {
        sl_error_set(err, SL_ENOMEM, "target.kafka: out of memory");
        return NULL;
    }
    char id[200];
    snprintf(id, sizeof id, "sluice-%s", t->rule);
    sl_error e = {0};
    if (sl_kafka_conf_set(conf, "client.id", id, &e) || apply_config(conf, t->cfg, &e)) {
        sl_error_set(err, e.code, "target.kafka: %s", e.msg);
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_conf_set_opaque(conf, t);
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_error_cb(conf, on_error);
    rd_kafka_conf_set_log_cb(conf, on_log);
    rd_kafka_t *rk = sl_kafka_new(RD_KAFKA_PRODUCER, conf, t->cfg->properties, t->cfg->nproperties,
                                  "target.kafka", err);
    if (!rk)
        return NULL;
    /* A fixed topic is made known now: librdkafka then asks for its
     * metadata at once, where a topic first named by a produce call waits
     * for the next scan (a second), which a rule catching up would pay. The
     * handle is kept for producing: naming the topic instead makes
     * librdkafka look it up under its write lock for every record. */
    t->rkt = t->topic_templ ? NULL : rd_kafka_topic_new(rk, t->cfg->topic, NULL);
    return rk;
}

/* Destroys rk and the fixed topic's handle. */
static void free_producer(kafka_target *t, rd_kafka_t *rk)
{
    if (t->rkt)
        rd_kafka_topic_destroy(t->rkt);
    t->rkt = NULL;
    rd_kafka_destroy(rk);
}

/* librdkafka says when every broker is down, but not when one is back: while
 * it is down and nothing is outstanding (a delivery report says so too),
 * ask for the cluster's metadata; an answer means a broker is up. */
static void probe_brokers(kafka_target *t)
{
    const struct rd_kafka_metadata *md = NULL;
    if (rd_kafka_metadata(t->rk, 0, NULL, &md, 1000) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return;
    rd_kafka_metadata_destroy(md);
    atomic_store(&t->brokers_down, false);
}

/* The poll thread: serves delivery reports and errors; after cancel() it
 * purges, on every turn, what did not finish within the grace (a deliver()
 * already past its stopping check may queue a record after a purge). */
static void *poll_thread(void *arg)
{
    kafka_target *t = arg;
    int64_t deadline = -1, probe_at = sl_clock_mono_ms();
    while (!atomic_load(&t->poll_stop)) {
        rd_kafka_poll(t->rk, 50);
        int64_t now = sl_clock_mono_ms();
        if (atomic_load(&t->hurry)) {
            if (deadline < 0)
                deadline = now + CANCEL_GRACE_MS;
            if (now >= deadline && atomic_load(&t->outstanding) > 0)
                rd_kafka_purge(t->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        } else if (atomic_load(&t->brokers_down) && atomic_load(&t->outstanding) == 0 &&
                   now - probe_at >= PROBE_INTERVAL_MS) {
            probe_at = now;
            probe_brokers(t);
        }
    }
    return NULL;
}

static int start_polling(kafka_target *t)
{
    atomic_store(&t->poll_stop, false);
    t->polling = pthread_create(&t->poller, NULL, poll_thread, t) == 0;
    return t->polling ? 0 : SL_ENOMEM;
}

static void stop_polling(kafka_target *t)
{
    if (!t->polling)
        return;
    atomic_store(&t->poll_stop, true);
    pthread_join(t->poller, NULL);
    t->polling = false;
}

/* Completes every record still in librdkafka with SL_ESHUTDOWN, exactly
 * once: on_delivery() ignores whatever report comes later (abandoned, until
 * the producer is destroyed). Caller holds rklock for writing, with the poll
 * thread stopped, so no report is being served. */
static void abandon(kafka_target *t)
{
    atomic_store(&t->abandoned, true);
    pthread_mutex_lock(&t->clock);
    for (kcall *c = t->calls, *next; c; c = next) {
        next = c->next;
        size_t k = 0;
        for (size_t i = 0; i < c->n; i++)
            if (atomic_exchange(&c->slot[i].queued, false)) {
                c->done(c->ctx, i, SL_ESHUTDOWN,
                        "target.kafka: shutting down (no delivery report after a purge)");
                k++;
            }
        atomic_fetch_sub(&t->outstanding, k);
        if (k && atomic_fetch_sub(&c->refs, k) == k)
            call_release(c);
    }
    pthread_mutex_unlock(&t->clock);
}

/* Serves delivery reports in this thread until none is outstanding or
 * limit_ms passed; then purges and serves the purged ones (a purge reports
 * every record it removes). Should reports still be missing after
 * PURGE_LIMIT_MS, abandon() completes them, so that the producer can be
 * destroyed without leaving a payload uncompleted. Caller holds rklock for
 * writing, with the poll thread stopped. */
static void drain(kafka_target *t, int64_t limit_ms)
{
    int64_t end = sl_clock_mono_ms() + limit_ms;
    while (atomic_load(&t->outstanding) && sl_clock_mono_ms() < end)
        rd_kafka_poll(t->rk, 20);
    int64_t purge_at = 0;
    for (end = sl_clock_mono_ms() + PURGE_LIMIT_MS; atomic_load(&t->outstanding) && sl_clock_mono_ms() < end;) {
        if (sl_clock_mono_ms() >= purge_at) {
            rd_kafka_purge(t->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
            purge_at = sl_clock_mono_ms() + 1000;
        }
        rd_kafka_poll(t->rk, 20);
    }
    size_t left = atomic_load(&t->outstanding);
    if (left) {
        log_line(t,
                 "%zu record(s) without a delivery report %d s after a purge; completed as "
                 "shutting down",
                 left, PURGE_LIMIT_MS / 1000);
        abandon(t);
    }
}

/* Destroys the producer after drain(); late reports are served no more. */
static void destroy_producer(kafka_target *t)
{
    free_producer(t, t->rk);
    t->rk = NULL;
    atomic_store(&t->abandoned, false);
}

/* After a fatal error: completes what the old producer held (retryable) and
 * makes a new one. Caller holds rklock for writing. */
static void recreate(kafka_target *t)
{
    if (!atomic_load(&t->fatal) && t->rk)
        return;
    if (t->rk) {
        stop_polling(t);
        drain(t, 0);
        destroy_producer(t);
    }
    sl_error err = {0};
    t->rk = make_producer(t, &err);
    if (!t->rk || start_polling(t)) {
        const char *why = t->rk ? "cannot start its thread" : err.msg;
        log_line(t, "cannot make a new producer: %s", why);
        pthread_mutex_lock(&t->mlock);
        snprintf(t->health_msg, sizeof t->health_msg, "cannot make a new producer: %s", why);
        pthread_mutex_unlock(&t->mlock);
        if (t->rk)
            free_producer(t, t->rk);
        t->rk = NULL;
        atomic_store(&t->no_producer, true);
        return;
    }
    atomic_store(&t->no_producer, false);
    sl_slog(SL_SLOG_INFO, "target.kafka",
            "rule %s: target.kafka: made a new producer after a fatal error", t->rule);
    atomic_store(&t->fatal, false);
    atomic_store(&t->brokers_down, false); /* the new one says so again if they are */
    pthread_mutex_lock(&t->mlock);
    t->health_msg[0] = '\0';
    pthread_mutex_unlock(&t->mlock);
}

/* ---- records (caller's thread) -------------------------------------------------- */

static bool topic_name_ok(const char *s, size_t len)
{
    if (!len || len > TOPIC_MAX || (len == 1 && s[0] == '.') ||
        (len == 2 && s[0] == '.' && s[1] == '.'))
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* A token's text for a header or key: a string's contents, else the raw
 * JSON (numbers, booleans). Points into the payload when the string has no
 * escape, which is the rule for stored events; else *own holds a decoded
 * copy the caller frees. Returns 0 or SL_ENOMEM. */
static int tok_text(const sl_json_tok *tok, char **own, const char **v, size_t *vlen)
{
    *own = NULL;
    if (tok->type != SL_JSON_STRING) {
        *v = tok->p;
        *vlen = tok->len;
        return 0;
    }
    if (tok->len >= 2 && !memchr(tok->p, '\\', tok->len)) {
        *v = tok->p + 1;
        *vlen = tok->len - 2;
        return 0;
    }
    if (!(*own = sl_ce_attr_text(tok, vlen)))
        return SL_ENOMEM;
    *v = *own;
    return 0;
}

static bool tok_present(const sl_json_tok *tok)
{
    return tok->type != SL_JSON_NONE && tok->type != SL_JSON_NULL;
}

/* Adds header ce_NAME with the text of tok. Returns 0 or SL_ENOMEM. */
static int ce_header(rd_kafka_headers_t *hdrs, const char *name, size_t nlen,
                     const sl_json_tok *tok)
{
    char hn[SL_EVENT_NAME_MAX + 4] = "ce_";
    if (nlen > SL_EVENT_NAME_MAX)
        nlen = SL_EVENT_NAME_MAX;
    memcpy(hn + 3, name, nlen);
    char *own;
    const char *v;
    size_t vl;
    if (tok_text(tok, &own, &v, &vl))
        return SL_ENOMEM;
    int rc = rd_kafka_header_add(hdrs, hn, (ssize_t)nlen + 3, v, (ssize_t)vl) ? SL_ENOMEM : 0;
    free(own);
    return rc;
}

/* Binary mode's ce_* headers: every attribute but datacontenttype (the
 * content-type header), in the order of sl_ce_binary_attrs() (the standard
 * attributes, then the extensions in input order). The same result, without
 * its look-up of each attribute by name: this runs for every record. */
static int ce_headers(const sl_event *ev, rd_kafka_headers_t *hdrs)
{
#define STD(f) {#f, sizeof #f - 1, offsetof(sl_event, f)}
    static const struct {
        const char *name;
        size_t len, off;
    } std[] = {STD(specversion), STD(id),         STD(source),
               STD(type),        STD(time),       STD(subject),
               STD(dataschema),  {"lane", 4, offsetof(sl_event, lane_attr)},
               STD(partitionkey)};
#undef STD
    for (size_t i = 0; i < sizeof std / sizeof *std; i++) {
        const sl_json_tok *tok = (const sl_json_tok *)((const char *)ev + std[i].off);
        if (tok_present(tok) && ce_header(hdrs, std[i].name, std[i].len, tok))
            return SL_ENOMEM;
    }
    for (size_t i = 0; i < ev->n_ext; i++)
        if (tok_present(&ev->ext[i].value) &&
            ce_header(hdrs, ev->ext[i].name, ev->ext[i].name_len, &ev->ext[i].value))
            return SL_ENOMEM;
    return 0;
}

/* The read-back members as sl_event_decorate() writes them, at the end of
 * the object: `,"sluiceset":"SET","sluicepartition":P,"sluiceoffset":O}`.
 * Fills the three values (pointing into the object) and returns true when
 * the object ends exactly so, with no escape in SET; false sends the caller
 * the slow way. Every payload of a rule without a transform ends so, and
 * walking its members instead costs as much as the rest of the record. */
static bool decorated_tail(const sl_json_tok *obj, const char *v[3], size_t vl[3])
{
    static const char *const lead[3] = {",\"sluiceset\":\"", "\",\"sluicepartition\":",
                                        ",\"sluiceoffset\":"};
    const char *p = obj->p, *end = obj->p + obj->len;
    if (obj->len < 64 || end[-1] != '}')
        return false;
    /* SET is a set name (a few dozen bytes at most); look back far enough. */
    const char *from = obj->len > 400 ? end - 400 : p, *at = NULL;
    for (const char *q = from; (q = memmem(q, (size_t)(end - q), lead[0], 14)); q++)
        at = q;
    if (!at)
        return false;
    const char *c = at + 14;
    const char *close = memchr(c, '"', (size_t)(end - c));
    if (!close || memchr(c, '\\', (size_t)(close - c)))
        return false;
    v[0] = c;
    vl[0] = (size_t)(close - c);
    c = close;
    for (int k = 1; k < 3; k++) {
        size_t ll = strlen(lead[k]);
        if ((size_t)(end - c) < ll || memcmp(c, lead[k], ll))
            return false;
        c += ll;
        const char *d = c;
        while (c < end && *c >= '0' && *c <= '9')
            c++;
        if (c == d)
            return false;
        v[k] = d;
        vl[k] = (size_t)(c - d);
    }
    return c == end - 1;
}

/* Binary mode: the read-back members (sluiceset, sluicepartition,
 * sluiceoffset, which the event parser sets aside) as ce_sluiceset, … headers,
 * so that both modes carry the same attributes: structured mode sends them
 * in the JSON (docs/targets.md). A payload without them (a transform's
 * output) gets none. Returns 0 or SL_ENOMEM. */
static int sluice_headers(const sl_event *ev, rd_kafka_headers_t *hdrs)
{
    static const char *const names[] = {"sluiceset", "sluicepartition", "sluiceoffset"};
    static const char *const hnames[] = {"ce_sluiceset", "ce_sluicepartition", "ce_sluiceoffset"};
    const char *tv[3];
    size_t tl[3];
    if (decorated_tail(&ev->object, tv, tl)) {
        for (int k = 0; k < 3; k++)
            if (rd_kafka_header_add(hdrs, hnames[k], (ssize_t)strlen(hnames[k]), tv[k],
                                    (ssize_t)tl[k]))
                return SL_ENOMEM;
        return 0;
    }
    if (!memmem(ev->object.p, ev->object.len, "\"sluice", 7))
        return 0;
    sl_json_iter it;
    sl_json_tok k, v;
    sl_json_iter_init(&it, &ev->object);
    while (sl_json_iter_member(&it, &k, &v)) {
        for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
            size_t nl = strlen(names[i]);
            if (k.len != nl + 2 || memcmp(k.p + 1, names[i], nl) != 0)
                continue;
            if (v.type != SL_JSON_STRING && v.type != SL_JSON_NUMBER)
                break;
            if (ce_header(hdrs, names[i], nl, &v))
                return SL_ENOMEM;
            break;
        }
    }
    return 0;
}

/* One record, built from payload d. */
typedef struct record {
    const char *topic; /* the fixed topic, or own_topic */
    char *own_topic;   /* a template's expansion */
    const char *key;   /* into the payload, or own_key */
    char *own_key;
    size_t key_len;
    const char *value;
    size_t value_len;
    sl_buf own; /* the value when it is not the payload itself (then copied) */
    rd_kafka_headers_t *hdrs;
    int64_t ts_ms; /* 0: now */
} record;

static void record_free(record *r)
{
    free(r->own_topic);
    free(r->own_key);
    sl_buf_free(&r->own);
    if (r->hdrs)
        rd_kafka_headers_destroy(r->hdrs);
    memset(r, 0, sizeof *r);
}

/* The record's topic: the fixed one, or the template's expansion, checked.
 * Returns 0, SL_EINVAL with why, or SL_ENOMEM. */
static int record_topic(kafka_target *t, const sl_event *pev, record *r, char *why, size_t len)
{
    const sl_target_kafka_conf *cfg = t->cfg;
    if (!t->topic_templ) {
        r->topic = cfg->topic;
        if (t->topic_ok)
            return 0;
        snprintf(why, len,
                 "target.kafka: \"%s\" is not a valid topic name (1 to 249 of a-z A-Z 0-9 . _ -)",
                 cfg->topic);
        return SL_EINVAL;
    }
    const char *miss = NULL;
    size_t mlen = 0, tlen = 0;
    int rc = sl_ce_expand(cfg->topic, pev, NULL, &r->own_topic, &tlen, &miss, &mlen);
    if (rc == SL_EINVAL) {
        snprintf(why, len,
                 "target.kafka: the topic template %s needs the attribute \"%.*s\", which the "
                 "payload does not have",
                 cfg->topic, (int)mlen, miss);
        return rc;
    }
    if (rc)
        return rc;
    r->topic = r->own_topic;
    if (!topic_name_ok(r->topic, tlen)) {
        snprintf(why, len,
                 "target.kafka: \"%s\" is not a valid topic name (1 to 249 of a-z A-Z 0-9 . _ -)",
                 r->topic);
        return SL_EINVAL;
    }
    return 0;
}

/* Builds the record for payload d (ev: scratch space for its parse).
 * Returns 0, SL_EINVAL with why (permanent), or SL_ENOMEM. */
static int build_record(kafka_target *t, const sl_delivery *d, sl_event *ev, record *r, char *why,
                        size_t len)
{
    const sl_target_kafka_conf *cfg = t->cfg;
    sl_error e = {0};
    sl_event_limits lim = {.max_bytes = d->len + 1};
    bool parsed = sl_event_parse(d->data, d->len, &lim, ev, &e) == SL_EVENT_OK;
    if (!parsed && (cfg->body != SL_HTTP_BODY_DATA || t->topic_templ || t->key_templ)) {
        snprintf(why, len, "target.kafka: %s needs a CloudEvent payload: %s",
                 cfg->body == SL_HTTP_BODY_BINARY       ? "body = \"binary\""
                 : cfg->body == SL_HTTP_BODY_STRUCTURED ? "body = \"structured\""
                                                        : "a topic or key template",
                 e.msg);
        return SL_EINVAL;
    }
    const sl_event *pev = parsed ? ev : NULL;
    int rc = record_topic(t, pev, r, why, len);
    if (rc)
        return rc;
    if (cfg->key) {
        const char *miss = NULL;
        size_t mlen = 0;
        rc = sl_ce_expand(cfg->key, pev, NULL, &r->own_key, &r->key_len, &miss, &mlen);
        if (rc == SL_EINVAL)
            snprintf(why, len,
                     "target.kafka: the key template %s needs the attribute \"%.*s\", which the "
                     "payload does not have",
                     cfg->key, (int)mlen, miss);
        if (rc)
            return rc;
        r->key = r->own_key;
    } else if (pev) {
        const sl_json_tok *tok = tok_present(&pev->partitionkey) ? &pev->partitionkey
                                 : tok_present(&pev->subject)    ? &pev->subject
                                                                 : NULL;
        if (tok && tok_text(tok, &r->own_key, &r->key, &r->key_len))
            return SL_ENOMEM;
    }
    if (pev && pev->has_time)
        r->ts_ms = pev->time_ms;
    /* Room for every header binary mode adds (content-type, 9 attributes,
     * the 3 read-back members, lane) without the list growing. */
    if (!(r->hdrs = rd_kafka_headers_new(16 + (pev ? pev->n_ext : 0) + t->nheaders)))
        return SL_ENOMEM;
    for (size_t i = 0; i < t->nheaders; i++)
        rd_kafka_header_add(r->hdrs, t->hname[i], -1, t->hvalue[i], -1);
    if (d->lane && d->lane[0])
        rd_kafka_header_add(r->hdrs, "lane", 4, d->lane, -1);
    switch (cfg->body) {
    case SL_HTTP_BODY_BINARY: {
        /* The content type as text for sl_ce_binary_data*(): on the stack
         * when it is short and has no escape (always, in practice). */
        char ctbuf[256], *ctype = NULL, *ct_own = NULL;
        const sl_json_tok *ctt = &pev->datacontenttype;
        if (tok_present(ctt)) {
            if (ctt->type == SL_JSON_STRING && ctt->len >= 2 && ctt->len - 2 < sizeof ctbuf &&
                !memchr(ctt->p, '\\', ctt->len)) {
                memcpy(ctbuf, ctt->p + 1, ctt->len - 2);
                ctbuf[ctt->len - 2] = '\0';
                ctype = ctbuf;
            } else {
                bool oom = false;
                if (!(ctype = ct_own = sl_ce_content_type(pev, &oom)) && oom)
                    return SL_ENOMEM;
            }
        }
        /* No datacontenttype: JSON data is application/json (JSON format §3.1). */
        const char *ct = ctype ? ctype
                         : pev->data.type != SL_JSON_NONE && pev->data_base64.type == SL_JSON_NONE
                             ? "application/json"
                             : NULL;
        if (ct)
            rd_kafka_header_add(r->hdrs, "content-type", 12, ct, -1);
        rc = ce_headers(pev, r->hdrs);
        if (!rc)
            rc = sluice_headers(pev, r->hdrs);
        bool as_is = sl_ce_binary_data_is_json(pev, ctype);
        if (!rc && !as_is)
            rc = sl_ce_binary_data(pev, ctype, &r->own);
        free(ct_own);
        if (rc)
            return rc;
        if (as_is && pev->data.type != SL_JSON_NONE) {
            r->value = pev->data.p; /* inside the payload: no copy */
            r->value_len = pev->data.len;
        } else if (!as_is) {
            r->value = (const char *)r->own.data;
            r->value_len = r->own.len;
        }
        break;
    }
    case SL_HTTP_BODY_STRUCTURED:
        rd_kafka_header_add(r->hdrs, "content-type", 12, "application/cloudevents+json", -1);
        r->value = d->data;
        r->value_len = d->len;
        break;
    case SL_HTTP_BODY_DATA:
        r->value = d->data;
        r->value_len = d->len;
        break;
    }
    return 0;
}

/* How long produce() waits out a full queue: a while, never longer than a
 * record may take. */
static int64_t queue_wait_ms(const kafka_target *t)
{
    int64_t to = t->cfg->timeout_ms;
    return to > 0 && to < QUEUE_FULL_WAIT_MS ? to : QUEUE_FULL_WAIT_MS;
}

/* Produces r as payload i of c; librdkafka's queue full is waited out for a
 * while, once per call (*full says it was: later records of the call do not
 * wait again). Returns RD_KAFKA_RESP_ERR_NO_ERROR when the record was queued
 * (r->hdrs then belongs to librdkafka). Caller holds rklock for reading. */
static rd_kafka_resp_err_t produce(kafka_target *t, kcall *c, size_t i, record *r, bool *full)
{
    int64_t end = *full ? 0 : -1;
    /* The payload's bytes are valid only until every payload of this call
     * completed (the connector contract), and this record's delivery report
     * is one of those completions, so librdkafka's message may point into
     * them without a copy: the message is not used after its report. A value
     * of our own (r->own) is freed when deliver() returns: copied. What a
     * request buffer might still reference after a purge is covered by
     * message.copy.max.bytes (raise_copy_max()). */
    int flags = r->value == (const char *)r->own.data ? RD_KAFKA_MSG_F_COPY : 0;
    for (;;) {
        atomic_fetch_add(&t->outstanding, 1);
        atomic_fetch_add(&c->refs, 1);
        c->slot[i].ts_ms = r->ts_ms ? r->ts_ms : -1;
        atomic_store(&c->slot[i].queued, true); /* before: its report may come at once */
        rd_kafka_vu_t vu[7] = {
            {.vtype = RD_KAFKA_VTYPE_MSGFLAGS, .u.i = flags},
            {.vtype = RD_KAFKA_VTYPE_VALUE, .u.mem = {(void *)r->value, r->value_len}},
            {.vtype = RD_KAFKA_VTYPE_KEY, .u.mem = {(void *)r->key, r->key ? r->key_len : 0}},
            {.vtype = RD_KAFKA_VTYPE_HEADERS, .u.headers = r->hdrs},
            {.vtype = RD_KAFKA_VTYPE_TIMESTAMP, .u.i64 = r->ts_ms},
            {.vtype = RD_KAFKA_VTYPE_OPAQUE, .u.ptr = &c->slot[i]},
        };
        if (t->rkt && r->topic == t->cfg->topic)
            vu[6] = (rd_kafka_vu_t){.vtype = RD_KAFKA_VTYPE_RKT, .u.rkt = t->rkt};
        else
            vu[6] = (rd_kafka_vu_t){.vtype = RD_KAFKA_VTYPE_TOPIC, .u.cstr = r->topic};
        rd_kafka_error_t *kerr = rd_kafka_produceva(t->rk, vu, 7);
        rd_kafka_resp_err_t err = kerr ? rd_kafka_error_code(kerr) : RD_KAFKA_RESP_ERR_NO_ERROR;
        if (kerr)
            rd_kafka_error_destroy(kerr);
        if (!err) {
            r->hdrs = NULL;
            return err;
        }
        atomic_store(&c->slot[i].queued, false);
        atomic_fetch_sub(&t->outstanding, 1);
        atomic_fetch_sub(&c->refs, 1); /* deliver() still holds its own */
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL || atomic_load(&t->stopping))
            return err;
        int64_t now = sl_clock_mono_ms();
        if (end < 0)
            end = now + queue_wait_ms(t);
        if (now >= end) {
            *full = true;
            return err;
        }
        rd_kafka_poll(t->rk, 10); /* delivery reports make room */
    }
}

/* produce() said the topic does not exist: librdkafka believes that until
 * its next periodic metadata refresh (minutes), so ask the cluster now, at
 * most once a second, and a topic created meanwhile is found at the rule's
 * next retry. Caller holds rklock for reading. */
static void refresh_topic(kafka_target *t, const char *topic)
{
    int64_t now = sl_clock_mono_ms();
    pthread_mutex_lock(&t->mlock);
    bool due = now - t->refresh_at_ms >= 1000;
    if (due)
        t->refresh_at_ms = now;
    pthread_mutex_unlock(&t->mlock);
    rd_kafka_topic_t *rkt = due ? rd_kafka_topic_new(t->rk, topic, NULL) : NULL;
    if (!rkt)
        return;
    const struct rd_kafka_metadata *md = NULL;
    if (rd_kafka_metadata(t->rk, 0, rkt, &md, 1000) == RD_KAFKA_RESP_ERR_NO_ERROR)
        rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
}

static void kafka_deliver(void *impl, const sl_delivery *d, size_t n, sl_deliver_done_fn *done,
                          void *ctx)
{
    kafka_target *t = impl;
    kcall *c = call_get(t, n);
    if (!c) {
        for (size_t i = 0; i < n; i++)
            done(ctx, i, SL_ENOMEM, "target.kafka: out of memory");
        return;
    }
    c->t = t;
    c->done = done;
    c->ctx = ctx;
    c->n = n;
    atomic_init(&c->refs, 1);
    for (size_t i = 0; i < n; i++) {
        c->slot[i].call = c;
        c->slot[i].i = i;
        atomic_init(&c->slot[i].queued, false);
    }
    call_link(c);
    if (atomic_load(&t->fatal) || atomic_load(&t->no_producer)) {
        pthread_rwlock_wrlock(&t->rklock);
        if (!atomic_load(&t->stopping))
            recreate(t);
        pthread_rwlock_unlock(&t->rklock);
    }
    pthread_rwlock_rdlock(&t->rklock);
    char why[SL_ERROR_MAX], held[SL_ERROR_MAX];
    bool hold = false; /* ordered: a record could not be queued, so the rest wait too */
    bool full = false;
    for (size_t i = 0; i < n; i++) {
        if (atomic_load(&t->stopping)) {
            atomic_fetch_add(&c->refs, 1);
            complete(c, i, SL_ESHUTDOWN, "target.kafka: shutting down");
            continue;
        }
        if (hold) { /* never produced: uses up no attempt */
            atomic_fetch_add(&c->refs, 1);
            complete(c, i, SL_EDEFERRED, held);
            continue;
        }
        if (!t->rk) {
            atomic_fetch_add(&c->refs, 1);
            complete(c, i, SL_EDEFERRED,
                     "target.kafka: not sent: no producer (making one failed; the next "
                     "delivery tries again)");
            continue;
        }
        record r = {0};
        int rc = build_record(t, &d[i], &c->ev, &r, why, sizeof why);
        if (rc == SL_ENOMEM)
            snprintf(why, sizeof why, "target.kafka: out of memory");
        if (!rc) {
            rd_kafka_resp_err_t err = produce(t, c, i, &r, &full);
            if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL && atomic_load(&t->stopping)) {
                snprintf(why, sizeof why, "target.kafka: shutting down");
                rc = SL_ESHUTDOWN;
            } else if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                snprintf(why, sizeof why,
                         "target.kafka: topic %s: %s (for %d ms: queue.buffering.max.messages/"
                         "kbytes reached; retried)",
                         r.topic, rd_kafka_err2str(err), (int)queue_wait_ms(t));
                rc = SL_EIO;
            } else if (err) {
                rc = map_error(t, err, r.topic, r.ts_ms ? r.ts_ms : -1, why, sizeof why);
                if (err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC)
                    refresh_topic(t, r.topic);
            }
        }
        record_free(&r);
        if (rc) {
            atomic_fetch_add(&c->refs, 1);
            complete(c, i, rc, why);
        }
        if (rc && rc != SL_EINVAL && rc != SL_ESHUTDOWN && t->ordered) {
            /* Queuing the later records would put them ahead of this one. */
            hold = true;
            snprintf(held, sizeof held,
                     "target.kafka: not sent: an earlier record of its batch could not be "
                     "queued (%s)",
                     why);
        }
    }
    pthread_rwlock_unlock(&t->rklock);
    call_unref(c);
}

/* ---- lifecycle ------------------------------------------------------------------- */

static void free_target(kafka_target *t)
{
    for (size_t i = 0; i < SPARE_CALLS; i++)
        free(t->spare[i]);
    for (size_t i = 0; i < t->nheaders; i++) {
        free(t->hname[i]);
        free(t->hvalue[i]);
    }
    free(t->hname);
    free(t->hvalue);
    free(t->rule);
    pthread_mutex_destroy(&t->clock);
    pthread_mutex_destroy(&t->mlock);
    pthread_rwlock_destroy(&t->rklock);
    free(t);
}

/* Splits "Name: value" header lines. Returns 0, SL_EINVAL with err, or SL_ENOMEM. */
static int parse_headers(kafka_target *t, const sl_target_kafka_conf *cfg, sl_error *err)
{
    if (!cfg->nheaders)
        return 0;
    t->hname = calloc(cfg->nheaders, sizeof *t->hname);
    t->hvalue = calloc(cfg->nheaders, sizeof *t->hvalue);
    if (!t->hname || !t->hvalue)
        return sl_error_set(err, SL_ENOMEM, "target.kafka: out of memory");
    for (size_t i = 0; i < cfg->nheaders; i++) {
        const char *line = cfg->headers[i], *colon = strchr(line, ':');
        if (!colon || colon == line)
            return sl_error_set(err, SL_EINVAL, "target.kafka: header \"%s\": want Name: value",
                                line);
        const char *v = colon + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        t->hname[i] = strndup(line, (size_t)(colon - line));
        t->hvalue[i] = strdup(v);
        t->nheaders++;
        if (!t->hname[i] || !t->hvalue[i])
            return sl_error_set(err, SL_ENOMEM, "target.kafka: out of memory");
    }
    return 0;
}

static int kafka_open(const sl_target_config *tc, const sl_target_env *env, void **impl,
                      sl_error *err)
{
    const sl_target_kafka_conf *cfg = tc->conf;
    if (!cfg->brokers || !cfg->topic)
        return sl_error_set(err, SL_EINVAL, "target.kafka needs brokers and a topic");
    kafka_target *t = calloc(1, sizeof *t);
    if (!t)
        return sl_error_set(err, SL_ENOMEM, "target.kafka: out of memory");
    pthread_mutex_init(&t->mlock, NULL);
    pthread_mutex_init(&t->clock, NULL);
    pthread_rwlock_init(&t->rklock, NULL);
    t->cfg = cfg;
    t->ordered = tc->ordered;
    t->topic_templ = sl_ce_has_placeholder(cfg->topic);
    t->key_templ = cfg->key && sl_ce_has_placeholder(cfg->key);
    t->topic_ok = !t->topic_templ && topic_name_ok(cfg->topic, strlen(cfg->topic));
    int rc = (t->rule = strdup(env && env->rule ? env->rule : "?")) ? 0 : SL_ENOMEM;
    if (rc)
        sl_error_set(err, rc, "target.kafka: out of memory");
    if (!rc)
        rc = parse_headers(t, cfg, err);
    if (!rc && !(t->rk = make_producer(t, err)))
        rc = err && err->code ? err->code : SL_EINVAL;
    if (!rc && start_polling(t)) {
        rc = sl_error_set(err, SL_ENOMEM, "target.kafka: cannot start its thread");
        free_producer(t, t->rk);
    }
    if (rc) {
        free_target(t);
        return rc;
    }
    *impl = t;
    return 0;
}

static void kafka_cancel(void *impl)
{
    kafka_target *t = impl;
    atomic_store(&t->stopping, true);
    atomic_store(&t->hurry, true); /* the poll thread purges after the grace */
}

static void kafka_close(void *impl)
{
    kafka_target *t = impl;
    if (!t)
        return;
    atomic_store(&t->stopping, true);
    pthread_rwlock_wrlock(&t->rklock); /* no deliver() is producing */
    stop_polling(t);
    if (t->rk) {
        /* The runner waits for its completions before close(), so normally
         * nothing is outstanding; else records get their timeout (or the
         * cancel grace), then are purged. */
        drain(t, atomic_load(&t->hurry) ? CANCEL_GRACE_MS : t->cfg->timeout_ms + 1000);
        rd_kafka_flush(t->rk, 1000);
        destroy_producer(t);
    }
    pthread_rwlock_unlock(&t->rklock);
    free_target(t);
}

/* Every problem at once, so that one `sluice check` run shows them all. */
static int kafka_check(const sl_target_config *tc, sl_error *err)
{
    const sl_target_kafka_conf *cfg = tc->conf;
    sl_buf b = SL_BUF_INIT;
    sl_error e = {0};
    char m[SL_ERROR_MAX];
    if (cfg->topic && sl_ce_template_check(cfg->topic, &e)) {
        snprintf(m, sizeof m, "topic: %s", e.msg);
        sl_kafka_problem(&b, m);
    } else if (cfg->topic && !sl_ce_has_placeholder(cfg->topic) &&
               !topic_name_ok(cfg->topic, strlen(cfg->topic))) {
        snprintf(m, sizeof m,
                 "topic \"%s\" is not a valid topic name (1 to 249 of a-z A-Z 0-9 . _ -)",
                 cfg->topic);
        sl_kafka_problem(&b, m);
    }
    if (cfg->key && sl_ce_template_check(cfg->key, &e)) {
        snprintf(m, sizeof m, "key: %s", e.msg);
        sl_kafka_problem(&b, m);
    }
    for (size_t i = 0; i < cfg->nheaders; i++) {
        const char *colon = strchr(cfg->headers[i], ':');
        if (!colon || colon == cfg->headers[i]) {
            snprintf(m, sizeof m, "header \"%s\": want Name: value", cfg->headers[i]);
            sl_kafka_problem(&b, m);
        }
    }
    /* librdkafka's own checks, on a scratch configuration: the settings
     * sluice makes, then each property alone. Conflicts between properties
     * (max.in.flight.requests.per.connection or acks against
     * enable.idempotence) are found only by rd_kafka_new(): when every
     * setting was taken, a producer is made (without brokers: it connects to
     * nothing, and its log is silenced) and destroyed. */
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    bool oom = !conf;
    if (conf) {
        size_t before = b.len;
        sl_target_kafka_conf base = *cfg;
        base.nproperties = 0;
        base.brokers = NULL;
        if (apply_config(conf, &base, &e))
            sl_kafka_problem(&b, e.msg);
        for (size_t i = 0; i < cfg->nproperties; i++)
            if (apply_property(conf, cfg->properties[i], &e))
                sl_kafka_problem(&b, e.msg);
        if (b.len == before && raise_copy_max(conf, cfg, &e))
            sl_kafka_problem(&b, e.msg);
        if (b.len == before) {
            /* check()'s producer says nothing: what matters is rd_kafka_new()'s error. */
            rd_kafka_conf_set_log_cb(conf, sl_kafka_quiet_log);
            rd_kafka_t *rk =
                sl_kafka_new(RD_KAFKA_PRODUCER, conf, cfg->properties, cfg->nproperties, NULL, &e);
            conf = NULL; /* the producer's, or destroyed */
            if (rk)
                rd_kafka_destroy(rk);
            else
                sl_kafka_problem(&b, e.msg);
        }
        if (conf)
            rd_kafka_conf_destroy(conf);
    }
    return sl_kafka_problems_end(&b, oom, err);
}

static int kafka_health(void *impl, char *msg, size_t len)
{
    kafka_target *t = impl;
    bool broken = atomic_load(&t->fatal) || atomic_load(&t->no_producer);
    if (!broken && !atomic_load(&t->brokers_down))
        return 0;
    pthread_mutex_lock(&t->mlock);
    const char *m = broken ? t->health_msg : t->down_msg;
    snprintf(msg, len, "%s", m[0] ? m : broken ? "no producer" : "all brokers are down");
    pthread_mutex_unlock(&t->mlock);
    return 1;
}

static const sl_conf_key kafka_keys[] = {
    {"brokers", SL_KEY_STRING, SL_CONF_FIELD(sl_target_kafka_conf, brokers), 0, 0, "required",
     "bootstrap servers, `\"host:9092,host2:9092\"`"},
    {"topic", SL_KEY_STRING, SL_CONF_FIELD(sl_target_kafka_conf, topic), 0, 0, "required",
     "the topic; `{attribute}` is replaced by the event's attribute, e.g. `\"orders-{type}\"` "
     "(an event without the attribute is refused, permanently)"},
    {"key", SL_KEY_STRING, SL_CONF_FIELD(sl_target_kafka_conf, key), 0, 0,
     "partitionkey, else subject",
     "the record key, a template like `topic` (an event without the attribute is refused, "
     "permanently)"},
    {"body", SL_KEY_BODY, SL_CONF_FIELD(sl_target_kafka_conf, body), 0, 0, "\"binary\"",
     "\"binary\": data as the value, attributes as `ce_*` headers; \"structured\": the "
     "CloudEvent as JSON; \"data\": the payload alone (CloudEvents Kafka binding)"},
    {"compression", SL_KEY_STRING, SL_CONF_FIELD(sl_target_kafka_conf, compression), 0, 0,
     "\"zstd\"", "`compression.type`: none, gzip, snappy, lz4 or zstd"},
    {"headers", SL_KEY_HEADERS, SL_CONF_FIELD(sl_target_kafka_conf, headers), 0, 0, "none",
     "`{ [\"name\"] = \"value\" }` record headers added to every record"},
    {"timeout", SL_KEY_DURATION, SL_CONF_FIELD(sl_target_kafka_conf, timeout_ms), 1, INT32_MAX,
     "\"30s\"", "`message.timeout.ms`: a record not acknowledged by then is retried by the rule"},
    {"properties", SL_KEY_PROPS, SL_CONF_FIELD(sl_target_kafka_conf, properties), 0, 0, "none",
     "any librdkafka producer property, e.g. `{ [\"linger.ms\"] = 5, [\"security.protocol\"] "
     "= \"sasl_ssl\" }` (set last: they win over the keys above)"},
};

static const sl_target_kafka_conf kafka_defaults = {
    .body = SL_HTTP_BODY_BINARY,
    .timeout_ms = 30000,
};

static void kafka_check_conf(const sl_target_config *tc, const sl_conf_check *chk)
{
    const sl_target_kafka_conf *c = tc->conf;
    if (!c->brokers || !c->topic)
        chk->problem(chk->ctx, NULL, "target.kafka needs brokers and a topic");
}

const sl_target_ops sl_target_kafka_ops = {
    .abi_version = SL_CONNECTOR_ABI_VERSION,
    .name = "kafka",
    .open = kafka_open,
    .deliver = kafka_deliver,
    .close = kafka_close,
    .cancel = kafka_cancel,
    .check = kafka_check,
    .health = kafka_health,
    /* Each call waits for its delivery reports (linger.ms and the acks):
     * bigger calls share that wait among more records. */
    .batch_hint = 4096,
    .conf_keys = kafka_keys,
    .nconf_keys = sizeof kafka_keys / sizeof *kafka_keys,
    .conf_size = sizeof(sl_target_kafka_conf),
    .conf_defaults = &kafka_defaults,
    .doc = "produce events to a topic of an external Kafka cluster (idempotent, acks=all; "
           "delivered on librdkafka's delivery report)",
    .check_conf = kafka_check_conf,
};
