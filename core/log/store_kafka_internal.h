/*
 * core/log/store_kafka_internal.h — what store_kafka.c (the topic, the
 * producer, outcomes, watermarks) and store_kafka_read.c (readers) share.
 * Not for use outside those two files.
 */
#ifndef SL_STORE_KAFKA_INTERNAL_H
#define SL_STORE_KAFKA_INTERNAL_H

#include "core/log/store_kafka.h"

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdatomic.h>

/* The outcome of one sequence number. */
enum {
    KS_PENDING = 0, /* produced, no delivery report yet */
    KS_STORED,      /* offset known */
    KS_FAILED,      /* code says why (durable sets) */
    KS_RETRYING,    /* failed for a buffer set: on the retry list, not a failure */
};

typedef struct kentry {
    int64_t offset;
    int32_t code;
    int32_t state;
} kentry;

typedef struct kpart {
    struct sl_kstore_topic *t;
    int32_t p;
    /* Outcomes of seqs [lo, hi) in a ring (cap a power of two, lo at head);
     * dur: every seq below has an outcome; rel: the owner released below. */
    pthread_mutex_t mu;
    kentry *ring;
    size_t cap, head;
    int64_t lo, hi, dur, rel;
    size_t nfailed; /* KS_FAILED entries in [lo, hi): outcome() skips its scan at 0 */
    char fail_msg[256];
    /* on_durable: nmu serialises the calls (so seq_end never goes back) and
     * the partition store's close against them. */
    pthread_mutex_t nmu;
    int64_t reported;
    atomic_bool dirty; /* a delivery report came: the poller calls on_durable */
    atomic_bool open;  /* a partition store is open on it */
    /* on_data: dmu orders the librdkafka threads' calls against close. */
    pthread_mutex_t dmu;
    bool data_open;
    /* The writer's scratch (one append at a time per partition). */
    sl_batch_reader br;
    sl_record *recs;
    size_t recs_cap;
    /* Watermarks: cached, never asked for on a caller's thread. */
    atomic_int_fast64_t wm_lo, wm_hi;
    atomic_int_fast64_t delivered_end; /* last delivered offset + 1 */
    bool shared_busy;                  /* the topic's reader handle reads it (t->rmu) */
} kpart;

typedef struct kretry kretry;

struct sl_kstore_topic {
    atomic_int refs;
    char *set, *topic;
    int32_t nparts, actual;
    bool durable;
    uint64_t max_inflight;
    int delivery_timeout_ms;
    sl_store_durable_fn *on_durable;
    sl_store_data_fn *on_data;
    void *ctx;
    /* The producer; replaced after a fatal error (by the poll thread, with
     * pl write-held; appends produce with it read-held). */
    pthread_rwlock_t pl;
    rd_kafka_t *prod;
    rd_kafka_topic_t *prod_rkt;
    rd_kafka_conf_t *prod_conf; /* template of a replacement */
    atomic_bool fatal;          /* a fatal error: the poll thread replaces prod */
    atomic_bool replacing;      /* reports of purged records are the fatal error's */
    int64_t replace_at_ms;      /* a failed replacement is tried again from then */
    rd_kafka_t *cons;           /* the shared reader handle, also for queries */
    rd_kafka_conf_t *cons_conf; /* template of the private reader handles */
    pthread_t poller, wm;
    bool poller_on, wm_on;
    atomic_bool stop;
    atomic_bool closing; /* the last reference went: failures are not retried */
    pthread_mutex_t smu; /* with scond: the threads' sleeps, cut short by close */
    pthread_cond_t scond;
    pthread_mutex_t rmu; /* the kpart.shared_busy flags */
    /* Buffer sets: records failed for good, produced again every second. */
    pthread_mutex_t qmu;
    kretry *retry_head, *retry_tail; /* produced again oldest first */
    uint64_t retry_bytes;            /* on the list and produced again, not delivered */
    atomic_uint_fast64_t lost, lost_logged;
    int64_t lost_log_ms;
    atomic_int_fast64_t err_log_ms;
    atomic_uint_fast64_t produced, delivered, failed, retried, inflight_bytes, inflight_records;
    atomic_uint_fast64_t fetched_records, fetched_bytes;
    kpart parts[];
};

/* Takes a reference on t (readers hold one). */
void sl__kstore_ref(struct sl_kstore_topic *t);
/* Drops one; the last frees t. */
void sl__kstore_unref(struct sl_kstore_topic *t);

/* Raises partition kp's cached high watermark to hi (and low to lo, when
 * lo >= 0). */
void sl__kstore_watermarks(kpart *kp, int64_t lo, int64_t hi);

/* The store table's reader entries (store_kafka_read.c). */
int sl__kstore_reader_open(void *impl, int64_t offset, const char *lane, void **reader,
                           sl_error *err);
int sl__kstore_reader_next(void *reader, sl_record *rec, sl_error *err);
int64_t sl__kstore_reader_position(void *reader);
void sl__kstore_reader_close(void *reader);

#endif
