/*
 * kafka/kafka_internal.h — what the files of kafka/ share: the listener's
 * state, one request in flight (sl_kreq), the handler contract and the
 * per-module lifecycle. Not for use outside kafka/.
 *
 * The handler contract. The listener reads a whole frame, parses its header
 * and calls the API's handler on an I/O thread with r->body positioned at the
 * request body. A handler:
 *   - writes the response *body* with r->w (the listener writes the size and
 *     the response header in front of it) and returns SL_KREQ_DONE;
 *   - or keeps r for later and returns SL_KREQ_PENDING, having set r->resume
 *     (and r->cancel, r->cleanup as needed). Whatever completes the work
 *     calls sl_kreq_post(r) (any thread, exactly once per pending period);
 *     the listener then calls r->resume(r) on the connection's thread, which
 *     returns one of the same three codes (PENDING again: wait again);
 *   - or returns SL_KREQ_CLOSE: the request is malformed beyond answering
 *     (or the protocol says to close: an unsupported version), having logged
 *     why with sl__kafka_log_once(); the connection is closed.
 * Responses go out in request order whatever order handlers finish in.
 *
 * If the connection closes while r is pending, the listener calls
 * r->cancel(r) on the connection's thread: true means nothing will post r any
 * more and it is freed at once; false means a post is still coming, and r is
 * freed when it arrives (resume is not called then). r->cleanup(r), if set,
 * runs exactly once just before r is freed, whatever happened.
 */
#ifndef SL_KAFKA_INTERNAL_H
#define SL_KAFKA_INTERNAL_H

#include "kafka/kafka.h"
#include "kafka/kproto.h"

#include "core/base/lane_name.h"
#include "core/bus/auth.h"
#include "core/log/log.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define SL_KAFKA_NODE_ID 0
#define SL_KAFKA_CLIENT_ID_MAX 255
#define SL_KAFKA_CLUSTER_ID "sluice" /* Metadata v2+ cluster_id */

enum { SL_KREQ_DONE = 0, SL_KREQ_PENDING = 1, SL_KREQ_CLOSE = 2 };

typedef struct sl_kreq sl_kreq;
typedef int sl_kapi_fn(sl_kreq *r);

/* A part of the response sent from a file (zero copy). */
typedef struct sl_kfile {
    size_t at;          /* inserted at this byte of out (before out.data[at]) */
    sl_log_slice slice; /* owned; released when sent or freed */
} sl_kfile;

struct sl_kreq {
    sl_kafka *k;
    void *conn;     /* the listener's connection (klisten.c) */
    sl_kp_header h; /* key, version, correlation id; client_id points into in */
    char client_id[SL_KAFKA_CLIENT_ID_MAX + 1]; /* h.client_id, NUL-terminated ("" for null) */
    char peer[64];                              /* "ADDR:PORT" of the client */
    /* The SASL principal (NULL when auth is off); its table stays valid
     * until sl_kafka_stop(). */
    const sl_auth_key *key;
    uint8_t *in; /* the whole frame after its size: header + body; owned */
    size_t in_len;
    sl_kr body;  /* positioned at the body */
    sl_buf out;  /* the response body */
    sl_kw w;     /* writer on out */
    sl_kfile *files; /* zero-copy parts, in order of at */
    size_t nfiles, files_cap;
    sl_kapi_fn *resume;
    bool (*cancel)(sl_kreq *r);
    void (*cleanup)(sl_kreq *r);
    void *state; /* the handler's */
    int64_t t0_ns;
    /* No response goes out (Produce with acks=0: the client expects none);
     * set by the handler before it returns DONE. */
    bool silent;
    struct sl_kdetach *detach; /* tests: no connection (kreq.c) */
    sl_kreq *next;      /* the listener's: its connection's queue */
    sl_kreq *next_post; /* the listener's: its thread's posted list */
    int state_code;     /* the listener's: what the handler returned last */
};

/* A connection's SASL state (klisten.c keeps it, kapi.c drives it, on the
 * connection's thread). NULL for a request without a connection. */
typedef struct sl_kconn_auth {
    bool handshaken;          /* SaslHandshake chose PLAIN */
    bool authenticated;       /* SaslAuthenticate passed (v0 handshakes' bare tokens are
                               * not supported: clients use v1 when offered) */
    const sl_auth_key *key;   /* the principal once authenticated */
} sl_kconn_auth;
sl_kconn_auth *sl__klisten_auth(void *conn);

/* Runs the handler of r's API (kapi.c): checks the key and version against
 * the table, the SASL gate, then calls it. Returns its SL_KREQ_ code. */
int sl__kapi_dispatch(sl_kreq *r);


/* A request over frame[0..len) (a whole frame after its size), taking
 * ownership of frame (malloc'ed; freed even on failure) for connection conn
 * from peer: header parsed, body positioned, r->w on r->out. NULL when out of
 * memory or the header is malformed (*bad_header tells which). */
sl_kreq *sl__kreq_new(sl_kafka *k, void *conn, const char *peer, uint8_t *frame, size_t len,
                      bool *bad_header);


/* Appends the stored bytes of *slice to the response at its current end
 * (the caller has written the int32 size in front of them): sent with
 * sendfile. Takes ownership of the slice (released even on error). Returns
 * 0 or SL_ENOMEM (the response is then dropped: w.oom is set). */
int sl_kreq_add_file(sl_kreq *r, sl_log_slice *slice);

/* Bytes of the response so far, file parts included. */
size_t sl_kreq_size(const sl_kreq *r);

/* Wakes a pending request: its resume runs soon on the connection's thread.
 * Thread-safe, cheap (an eventfd write), callable with locks held. */
void sl_kreq_post(sl_kreq *r);

/* Logs msg (printf-style) at warn level once per (peer, reason) kind every
 * minute, so a client that keeps sending garbage cannot flood the log. */
void sl__kafka_log_once(const sl_kreq *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Whether r's principal has right on set (always true with auth off). */
bool sl__kafka_allowed(const sl_kreq *r, sl_auth_right right, const char *set);

typedef struct sl_kafka_stats {
    _Atomic uint64_t accepted, closed, open; /* connections */
    _Atomic uint64_t requests[SL_KAPI_MAX + 1];
    _Atomic uint64_t bad_frames; /* connections closed for a malformed or unsupported frame */
    _Atomic uint64_t bytes_in, bytes_out, sendfile_bytes;
    _Atomic uint64_t produced_records, produce_errors, fetched_bytes, duplicates;
} sl_kafka_stats;

struct sl_klisten; /* klisten.c */
struct sl_kidem;   /* kproduce.c */
struct sl_kcoord;  /* kcoord.c */

struct sl_kafka {
    sl_kafka_options o; /* strings point into the copies below */
    char host[256], adv_host[256], data_dir[4096], tls_cert[4096], tls_key[4096];
    uint16_t port, adv_port; /* bound and advertised */
    sl_kafka_hooks hooks;
    sl_sets *sets;
    sl_databus *bus;
    sl_waits *waits;
    _Atomic(const sl_auth *) auth;
    struct sl_klisten *l;
    struct sl_kidem *idem;
    struct sl_kcoord *coord;
    /* The listener's side of sl_kreq_post() for a request of conn (set by
     * klisten.c before the first request; a hook rather than a call so the
     * handlers' unit tests link without the listener). */
    void (*post)(void *conn, sl_kreq *r);
    sl_kafka_stats stats;
    _Atomic bool stopping;
    bool stopped; /* sl_kafka_stop() ran */
};

/* The sets' names as topics: a set is found (and, when create and the
 * server's auto_create allow it, auto-created, charged to r's key or peer)
 * for a topic name. Returns 0 with *out, or the Kafka error code to answer
 * (UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION for a bad name,
 * TOPIC_AUTHORIZATION_FAILED, POLICY_VIOLATION over max_auto_sets, and for a
 * Kafka-backed set INVALID_TOPIC_EXCEPTION, logged once with the reason). */
int16_t sl__kafka_topic(sl_kreq *r, sl_kstr topic, bool create, sl_set **out);

/* mkdir -p dir (0755). Returns 0 or an SL_E… code with err. */
int sl__kafka_mkdirs(const char *dir, sl_error *err);

/* Module lifecycles, run by sl_kafka_start()/sl_kafka_stop() in this order
 * (stop in reverse). Each open returns 0 or an SL_E… code with err and leaves
 * nothing behind on error. */
int sl__kidem_open(sl_kafka *k, sl_error *err); /* DATA/kafka/producers */
void sl__kidem_close(sl_kafka *k);              /* saves the state */
int sl__kcoord_open(sl_kafka *k, sl_error *err); /* DATA/kafka/groups/, its timer thread */
void sl__kcoord_stop(sl_kafka *k);               /* answers parked joins, stops the timer */
void sl__kcoord_close(sl_kafka *k);
int sl__kgroups_json(sl_kafka *k, sl_buf *out); /* sl_kafka_groups_json() */
int sl__klisten_start(sl_kafka *k, sl_error *err);
void sl__klisten_stop(sl_kafka *k);  /* closes connections, joins the threads */
void sl__klisten_free(sl_kafka *k);  /* after the modules that post: late posts, memory */

/* The handlers (kapi.c's table names each with its versions and rights). */
int sl__kafka_api_versions(sl_kreq *r);      /* kapi.c */
int sl__kafka_sasl_handshake(sl_kreq *r);    /* kapi.c */
int sl__kafka_sasl_authenticate(sl_kreq *r); /* kapi.c */
int sl__kafka_metadata(sl_kreq *r);          /* kmeta.c */
int sl__kafka_create_topics(sl_kreq *r);     /* kmeta.c */
int sl__kafka_delete_topics(sl_kreq *r);     /* kmeta.c */
int sl__kafka_produce(sl_kreq *r);           /* kproduce.c */
int sl__kafka_init_producer_id(sl_kreq *r);  /* kproduce.c */
int sl__kafka_fetch(sl_kreq *r);             /* kfetch.c */
int sl__kafka_list_offsets(sl_kreq *r);      /* kfetch.c */
int sl__kafka_find_coordinator(sl_kreq *r);  /* kcoord.c */
int sl__kafka_join_group(sl_kreq *r);        /* kcoord.c */
int sl__kafka_sync_group(sl_kreq *r);        /* kcoord.c */
int sl__kafka_heartbeat(sl_kreq *r);         /* kcoord.c */
int sl__kafka_leave_group(sl_kreq *r);       /* kcoord.c */
int sl__kafka_offset_commit(sl_kreq *r);     /* kcoord.c */
int sl__kafka_offset_fetch(sl_kreq *r);      /* kcoord.c */
int sl__kafka_describe_groups(sl_kreq *r);   /* kcoord.c */
int sl__kafka_list_groups(sl_kreq *r);       /* kcoord.c */

/* Test support (tests/unit): a request over in[0..len) (a whole frame
 * after its size; copied, header parsed, body positioned) for k, attached to
 * no connection (peer "test"); NULL when out of memory or the header is
 * malformed. sl_kreq_post() on it only records the post; sl__kreq_wait()
 * waits up to ms for one and then runs resume on the calling thread,
 * returning its code, or -1 on timeout. sl__kreq_free() runs cleanup and
 * releases file parts. */
sl_kreq *sl__kreq_new_detached(sl_kafka *k, const void *in, size_t len);
int sl__kreq_wait(sl_kreq *r, int64_t ms);
void sl__kreq_free(sl_kreq *r);

#endif
