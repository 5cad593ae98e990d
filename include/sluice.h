/*
 * include/sluice.h — libsluice, the C client library of the sluice event bus.
 *
 * An application opens one client per destination and sends CloudEvents (JSON
 * objects) to sets from any number of threads. Sending never blocks: the event
 * is copied into the client's queue and a background I/O thread (one per
 * client) batches and writes it. Each event is reported exactly once to the
 * delivery callback, when it is stored (acknowledged) or has failed for good.
 *
 * Two transports, chosen by the address given to sl_client_open():
 *
 *   unix:/path/to.sock, /path/to.sock, tcp:HOST:PORT
 *       the local Databus agent (`sluice databus`). Events are written as
 *       NDJSON lines {"set":S,"event":E[,"lane":L]}, pipelined; the agent
 *       answers one ack line per input line, in order, once the event is
 *       stored upstream or spooled (which may take over 10 s when upstream
 *       hangs). When the connection drops or stalls (see timeout_ms), the
 *       client reconnects (with back-off) and writes again every event not
 *       yet acknowledged. A slow agent, or one that stops reading
 *       (back-pressure), is waited for, not reconnected to.
 *   http://HOST:PORT, https://HOST:PORT
 *       a sluice server directly. Events are batched per (set, lane) for
 *       linger_ms or until batch_bytes, and POSTed as application/x-ndjson to
 *       /v1/sets/{set}/events, one request in flight per (set, lane) so the
 *       order per set is kept. 408, 429, 5xx, connection errors and timeouts
 *       are retried with back-off; 413 splits the batch; other whole-request
 *       errors fail the batch's events; the server's per-entry results fail
 *       only the entries it refused.
 *
 * Delivery is at-least-once: an event whose acknowledgement was lost (the
 * connection dropped after the server stored it, a request timed out) is sent
 * again, so the bus may store it twice. Give events stable `id`s so consumers
 * can drop duplicates. Retries go on until the event is acknowledged, refused,
 * or the client is closed: an unreachable bus shows as a queue that stops
 * draining (sl_client_flush() timing out, then SL_CLIENT_EFULL).
 *
 * Threads: every function may be called from any thread at the same time,
 * except sl_client_close(), which must be the last call on a client. Delivery
 * callbacks run on the client's I/O thread, one at a time, with no lock of
 * the library held: keep them short (the I/O thread sends nothing meanwhile).
 * sl_client_send() is fine from a callback. sl_client_flush() there returns
 * SL_CLIENT_EINVAL at once, and sl_client_close() must never be called there:
 * both wait for the I/O thread, which would wait for itself.
 *
 * Only sl_client_* names are exported; the library links libcurl and
 * pthreads. Build with `pkg-config --cflags --libs sluice`.
 */
#ifndef SLUICE_H
#define SLUICE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SL_CLIENT_API __attribute__((visibility("default")))
#else
#define SL_CLIENT_API
#endif

/* Error codes: 0 is success, every code is negative. XX(name, value, text). */
#define SL_CLIENT_ERRNO_MAP(XX)                                                                    \
    XX(EINVAL, -1, "invalid argument")                                                             \
    XX(EFULL, -2, "queue full: too many bytes sent but not yet acknowledged")                      \
    XX(ETIMEDOUT, -3, "timed out")                                                                 \
    XX(ESHUTDOWN, -4, "client closed before the event was acknowledged")                           \
    XX(ENOMEM, -5, "out of memory")                                                                \
    XX(EREJECTED, -6, "refused by the server or agent")                                            \
    XX(EPROTO, -7, "unexpected answer from the server or agent")

enum {
#define SL_CLIENT_XX(name, value, text) SL_CLIENT_##name = value,
    SL_CLIENT_ERRNO_MAP(SL_CLIENT_XX)
#undef SL_CLIENT_XX
};

typedef struct sl_client sl_client;

/* Called once per event sent, on the I/O thread. msg_id is what
 * sl_client_send() returned. status is 0 when the event is stored
 * (acknowledged); error and message are NULL then. Otherwise status is
 * SL_CLIENT_EREJECTED (the server or agent refused it: error is its code, e.g.
 * "MissingAttribute", message its explanation), SL_CLIENT_EPROTO (an answer
 * that could not be understood), SL_CLIENT_ENOMEM (the I/O thread ran out of
 * memory) or SL_CLIENT_ESHUTDOWN (the client was closed first); error is then
 * never NULL (the code's name, "EPROTO", "ESHUTDOWN", when there is no server
 * code) and message never NULL. Both strings are valid during the call only. */
typedef void sl_client_delivery_fn(void *opaque, uint64_t msg_id, int status, const char *error,
                                   const char *message);

/* Options of sl_client_open_opts(). Zero every field (`= {0}`) and set the
 * ones wanted: a zero or NULL field takes its default. */
typedef struct sl_client_options {
    sl_client_delivery_fn *on_delivery; /* NULL: results are only counted by flush */
    void *opaque;                       /* passed to on_delivery */
    size_t queue_bytes; /* bound on the bytes of events sent and not yet acknowledged
                           (their JSON plus about 100 bytes each); default 64 MiB;
                           sl_client_send() returns SL_CLIENT_EFULL past it */
    int linger_ms;      /* how long a batch waits for more events; default 5; < 0: 0 */
    size_t batch_bytes; /* a batch is sent once this big; default 1 MiB */
    const char *lane;   /* default lane of sl_client_send(..., NULL); NULL: the
                           SLUICE_LANE environment variable, else none; "": none,
                           whatever SLUICE_LANE says. Over HTTP, none is the base
                           lane. Over the agent, none means the line carries no
                           lane, so the agent's own lane (its --lane or
                           SLUICE_LANE) applies: the base lane only when the
                           agent has none */
    int timeout_ms;     /* default 10000. Bounds how long sl_client_close()
                           flushes, and per transport:
                           HTTP: the connect timeout and the whole-request
                           timeout of each POST (a request past it is retried);
                           agent: the connect timeout. An agent connection is
                           given up (and its unacknowledged events written
                           again on a new one) only when lines await answers,
                           everything is written, and nothing was read from
                           the socket nor taken by the agent for
                           max(timeout_ms, 60000) ms; never while the agent is
                           merely slow to answer or not reading (a full socket
                           is back-pressure) */
} sl_client_options;

/* Opens a client to url_or_socket (see the transports above) with the default
 * options and no delivery callback. Returns the client, or NULL when the
 * address is invalid, SLUICE_LANE is not a valid lane, or memory or a thread
 * could not be had. Nothing is connected yet: the I/O thread connects on the
 * first event. Release with sl_client_close(). */
SL_CLIENT_API sl_client *sl_client_open(const char *url_or_socket);

/* Same with options (o may be NULL: the defaults; it is only read during the
 * call, o->lane included). On error returns NULL and, when err is not NULL,
 * writes a NUL-terminated reason into err (errlen bytes at most). */
SL_CLIENT_API sl_client *sl_client_open_opts(const char *url_or_socket, const sl_client_options *o,
                                             char *err, size_t errlen);

/* Queues one event for set. json is one JSON object (a CloudEvent; the server
 * validates it), copied: the caller keeps ownership. Line breaks between its
 * tokens are allowed (they become spaces). lane: NULL sends on the client's
 * default lane (options.lane / SLUICE_LANE), else a lane name [a-z0-9-]{1,32},
 * or "" for no lane: over HTTP the base lane; over the agent the line carries
 * no lane, so the agent's lane applies (the base lane only when the agent has
 * none; a client cannot override an agent's lane, and a named lane that
 * differs from it is refused with "LaneConflict"). Never blocks on the
 * network.
 *
 * Returns the message id (> 0, increasing per client) that the delivery
 * callback will get, or SL_CLIENT_EINVAL (bad set name: not
 * [A-Za-z0-9._-]{1,128} or begins with "."; bad lane; json not an object; NULL
 * arguments), SL_CLIENT_EFULL (queue_bytes reached: flush or retry later; an
 * event bigger than queue_bytes always gets it), SL_CLIENT_ENOMEM, or SL_CLIENT_ESHUTDOWN
 * (sl_client_close() has begun). Nothing is queued and no callback comes when it returns an error.
 */
SL_CLIENT_API int64_t sl_client_send(sl_client *c, const char *set, const char *json,
                                     const char *lane);

/* Waits until every event sent (by any thread) before the call has been
 * acknowledged or has failed, and its callback has returned; batches waiting
 * for linger_ms are sent at once. timeout_ms < 0 waits without limit.
 *
 * Returns 0 when all of them were stored, the number of them that failed (> 0)
 * otherwise, or SL_CLIENT_ETIMEDOUT when some are still pending after
 * timeout_ms. A failure is counted by one flush only: the first one that
 * completes after it and covers it (so two flushes in a row return N, then 0).
 * Called from a delivery callback, returns SL_CLIENT_EINVAL at once (it would
 * wait for that callback to return). */
SL_CLIENT_API int sl_client_flush(sl_client *c, int timeout_ms);

/* Flushes (for at most options.timeout_ms), then stops the I/O thread: events
 * still pending get their callback with SL_CLIENT_ESHUTDOWN (on the I/O
 * thread, before this returns), then the client is freed. An event failed so
 * may still have been stored, when it was in flight: its answer is just not
 * awaited any more. Sends racing with
 * it return SL_CLIENT_ESHUTDOWN. c may be NULL. Must be the last call on c;
 * never call it from a delivery callback. */
SL_CLIENT_API void sl_client_close(sl_client *c);

/* A static text for a code of this library ("unknown error" for others). */
SL_CLIENT_API const char *sl_client_strerror(int code);

#ifdef __cplusplus
}
#endif

#endif
