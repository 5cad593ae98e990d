/*
 * agent/agent_internal.h — the Databus agent's state, shared by agent/agent.c
 * (event loop, sockets, lines, acks, reload) and agent/agent_fwd.c (batches,
 * upstream requests, spooling). Not part of any public interface.
 *
 * Ordering: a connection is given one of o.streams streams at accept, for
 * its whole life, and its lines of a (set, lane) go to the key (set, lane,
 * stream). Every sealed batch gets a sequence number from one counter; a key
 * keeps its sealed batches in that order, in memory or as spool files
 * (spooling one converts it in place and its file is named by the same
 * number), and only the oldest is ever sent. So order per (connection, set,
 * lane) holds across retries, spooling and draining, while the keys of
 * different streams send concurrently. Spool files found at start belong to
 * no live stream: they go, oldest first, to a key with stream -1, and no
 * other key of their (set, lane) sends before that key is empty; their
 * global sequence order keeps every earlier run's stream in order.
 */
#ifndef SL_AGENT_INTERNAL_H
#define SL_AGENT_INTERNAL_H

#include "agent/agent.h"
#include "core/base/buf.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Freed batches' buffers kept for the next batches, at most AG_POOL of them
 * and AG_POOL_BYTES of body capacity: with one batch filling and one in
 * flight per key, eight keys already use sixteen, and a fresh buffer costs a
 * page fault per 4 KiB written into it. */
#define AG_POOL 32
#define AG_POOL_BYTES (32u << 20)
#define AG_MAX_CONNS 1024 /* open client connections; more are refused */

/* One line's answer, waiting for the answers before it. */
enum { SLOT_PENDING = 0, SLOT_OK, SLOT_ERR };
typedef struct ag_slot {
    uint8_t state;
    char *err; /* SLOT_ERR: malloc'ed JSON members "\"error\":…,\"message\":…" */
} ag_slot;

/* A client connection. It outlives its socket while batches still hold
 * references to its lines (pending > 0): their answers are then dropped. */
typedef struct ag_conn {
    int fd;        /* -1 once closed */
    bool eof;      /* the client finished writing (or reading failed) */
    bool skipping; /* inside a line longer than max_line, already answered */
    bool held;     /* complete lines wait in rbuf until the answers are read */
    sl_buf rbuf;   /* unread input from rpos */
    size_t rpos;
    sl_buf wbuf; /* answers not yet written, from wpos */
    size_t wpos;
    uint64_t next_seq; /* number of the next input line (1-based) */
    uint64_t base_seq; /* number of slots[soff]: the first unanswered line */
    ag_slot *slots;
    size_t soff, nslots, scap;
    size_t pending; /* lines held by batches */
    int stream;     /* 0 .. o.streams-1, fixed at accept */
    struct ag_conn *next;
} ag_conn;

/* Where a line's answer goes. */
typedef struct ag_ref {
    ag_conn *c;
    uint64_t seq;
} ag_ref;

struct ag_key;

/* A batch of one (set, lane): NDJSON in memory with the lines it answers, or
 * (spooled) a spool file that was already acknowledged. */
typedef struct ag_batch {
    uint64_t seq; /* 0 while open */
    struct ag_key *k;
    sl_buf body;
    uint32_t count;
    ag_ref *refs;
    size_t rcap;
    bool spooled;
    uint64_t file_bytes; /* spooled: the file's size */
    int64_t first_ns;    /* when the first line came (linger) */
    struct ag_batch *next;
} ag_batch;

/* One (set, lane, stream): an ordered sequence of batches. */
typedef struct ag_key {
    char set[129];
    char lane[33];
    int stream;            /* -1: spool files left by an earlier run */
    ag_batch *open;        /* filling */
    ag_batch *head, *tail; /* sealed, oldest first; only head is ever sent */
    uint64_t mem_bytes;    /* bytes of memory batches, open included */
    size_t last_body;      /* body bytes of its last sealed batch (what to reserve) */
    bool inflight;         /* head is being sent */
    int attempt;           /* failed attempts of head in a row */
    int64_t retry_at_ns;
    int64_t down_since_ns; /* first failure of this key since its last final answer; 0: up */
    int64_t warn_ns;       /* last "batch failing for long" log line */
    int64_t used_ns;       /* last line added (idle keys are freed) */
    void *easy;            /* CURL *, kept for the key's next requests */
    struct curl_slist *hdrs;
    sl_buf resp;  /* answer of the request in flight */
    sl_buf fbody; /* a spooled head's body while it is sent */
    struct ag_key *next;
} ag_key;

typedef struct ag_listener {
    int fd;
    char unix_path[108]; /* unlinked at exit; "" for TCP */
    char name[300];
} ag_listener;

/* The config-set poll thread and what it found (agent/agent_conf.c). Every
 * field after the thread started is read and written under mu. */
#define AG_POLL_KEYS 8
typedef struct ag_poll {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool inited, running, stop;
    char set[129];
    int64_t every_ms;
    int wake_fd;                     /* the loop's self-pipe */
    char upstream[SL_AGENT_URL_MAX]; /* where to poll: follows the agent's upstream */
    char applied[64];                /* "partition/offset" of the newest event seen */
    bool have_new;                   /* kv holds settings the loop has not applied */
    char kv[AG_POLL_KEYS][2][SL_AGENT_URL_MAX];
    int nkv;
} ag_poll;

typedef struct sl_agent {
    sl_agent_opts o;
    void *multi; /* CURLM * */
    ag_listener ls[SL_AGENT_MAX_LISTEN];
    int nls;
    int sigfd[2]; /* self-pipe: the signal handlers write a byte */
    ag_conn *conns;
    ag_key *keys;
    ag_key *last_key; /* the key of the previous line: usually the next one's too */
    uint64_t next_batch_seq;
    unsigned next_stream;  /* round robin over o.streams at accept */
    uint64_t left_batches; /* batches in stream -1 keys: others of their (set, lane) wait */
    int64_t read_ns;       /* clock read once per socket read, for the lines it holds */
    uint64_t spool_bytes;
    uint64_t mem_total;
    int64_t down_since_ns; /* logged state: first failure since the last final answer of any
                              key; 0 when up. Spooling is decided per key (ag_key). */
    bool spooling;         /* logged state: spooling because upstream is down */
    size_t nconns;         /* connections in conns (AG_MAX_CONNS) */
    bool stopping;
    int64_t accept_pause_ns; /* listeners not polled before this (out of descriptors) */
    int64_t stop_deadline_ns;
    ag_poll poll;
    struct {
        sl_buf body;  /* len 0 */
        ag_ref *refs; /* rcap entries */
        size_t rcap;
    } pool[AG_POOL]; /* the buffers of freed batches, reused */
    int npool;
    size_t pool_bytes; /* body capacity in pool (AG_POOL_BYTES) */
    /* counters for the exit line */
    uint64_t n_ok, n_err, n_spooled_batches, n_drained_batches;
    /* log rate limit */
    int64_t log_window_ns;
    int log_count, log_dropped;
} sl_agent;

/* Logs one line to stderr ("sluice databus: …"), at most 20 per second. */
void sl__agent_log(sl_agent *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Answers line seq of c: ok, or the error code and message. */
void sl__agent_answer(sl_agent *a, ag_conn *c, uint64_t seq, const char *code, const char *msg);

/* Batches the event (JSON text) of one accepted line under (set, lane,
 * c->stream). */
int sl__agent_add(sl_agent *a, ag_conn *c, uint64_t seq, const char *set, const char *lane,
                  const char *ev, size_t len);

/* Runs timers (linger, retries, spooling) and starts requests; returns the
 * milliseconds until the next timer (at most max_ms). */
long sl__agent_tick(sl_agent *a, int64_t now, long max_ms);

/* Handles finished upstream transfers. */
void sl__agent_done(sl_agent *a);

/* Loads the spool files left by a previous run into their keys. */
int sl__agent_load_spool(sl_agent *a, sl_error *err);

/* Whether memory batches remain (shutdown waits for them). */
bool sl__agent_mem_left(sl_agent *a);

/* Shutdown: aborts the requests in flight and spools every memory batch. */
void sl__agent_spool_all(sl_agent *a);

/* Frees every key and batch (after sl__agent_spool_all). */
void sl__agent_free_keys(sl_agent *a);

/* The config-set poll thread: start (after the self-pipe exists), stop
 * (joins; safe when never started), apply what it found (loop thread), and
 * tell it the agent's upstream changed. */
int sl__agent_poll_start(sl_agent *a, sl_error *err);
void sl__agent_poll_stop(sl_agent *a);
void sl__agent_poll_apply(sl_agent *a);
void sl__agent_poll_upstream(sl_agent *a);

#endif
