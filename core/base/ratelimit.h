/*
 * core/base/ratelimit.h — per-client token buckets for the HTTP API's `rate` and
 * `burst` server keys (docs/security.md). A client is a string: "key:NAME"
 * for a request made with an API key, "ip:ADDRESS" without keys.
 *
 * Each client's bucket holds up to `burst` tokens and refills at `rate`
 * tokens a second; an event costs one. A request of n events is admitted
 * when the bucket holds min(n, burst) tokens, and is then charged all n (the
 * bucket may go below zero): a batch larger than the burst passes once the
 * bucket is full, and its client waits for the debt after. Long-run
 * throughput per client is thus `rate`, whatever the batch sizes.
 *
 * Buckets of clients gone quiet are forgotten once full again, so the table
 * stays as small as the set of clients active in the last burst/rate
 * seconds (at most max_clients; past that, new clients are refused until
 * old ones are forgotten: a full table is swept at most once a second, and
 * a refused new client is told to wait until the next sweep).
 *
 * Thread safety: every function may be called from any thread (one mutex).
 */
#ifndef SL_RATELIMIT_H
#define SL_RATELIMIT_H

#include <stddef.h>
#include <stdint.h>

typedef struct sl_ratelimit sl_ratelimit;

/* A limiter of rate tokens a second with buckets of burst tokens (burst 0:
 * equal to rate), for up to max_clients clients at once (0: 65536).
 * Returns NULL when out of memory or rate <= 0. Free with
 * sl_ratelimit_free(). */
sl_ratelimit *sl_ratelimit_new(double rate, double burst, size_t max_clients);

/* NULL is ignored. */
void sl_ratelimit_free(sl_ratelimit *rl);

/* Charges n (>= 1) tokens to client at time now_ns (a monotonic clock).
 * Returns 0 when admitted (charged), else how many milliseconds to wait
 * before the same request would be admitted (nothing is charged then). */
int64_t sl_ratelimit_take(sl_ratelimit *rl, const char *client, double n, int64_t now_ns);

/* Number of clients with a bucket right now (for tests and metrics). */
size_t sl_ratelimit_clients(sl_ratelimit *rl);

#endif
