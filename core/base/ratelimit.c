/*
 * core/base/ratelimit.c — per-client token buckets (see core/base/ratelimit.h): an
 * open-addressing hash table of buckets behind one mutex. A request costs a
 * hash and a few arithmetic operations; contention is on a lock held for
 * well under a microsecond.
 */
#include "core/base/ratelimit.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define CLIENT_MAX 80 /* "key:" + 64, or "ip:" + an IPv6 address */

typedef struct bucket {
    bool used;
    char client[CLIENT_MAX];
    double tokens;
    int64_t last_ns;
} bucket;

struct sl_ratelimit {
    pthread_mutex_t lock;
    double rate, burst;
    size_t cap; /* slots, a power of two, twice max_clients */
    size_t max, n;
    bucket *v;
    int64_t swept_ns;
};

sl_ratelimit *sl_ratelimit_new(double rate, double burst, size_t max_clients)
{
    if (!(rate > 0))
        return NULL;
    sl_ratelimit *rl = calloc(1, sizeof *rl);
    if (!rl)
        return NULL;
    rl->rate = rate;
    rl->burst = burst > 0 ? burst : rate;
    if (rl->burst < 1)
        rl->burst = 1;
    rl->max = max_clients ? max_clients : 65536;
    rl->cap = 16;
    while (rl->cap < rl->max * 2)
        rl->cap *= 2;
    if (!(rl->v = calloc(rl->cap, sizeof *rl->v))) {
        free(rl);
        return NULL;
    }
    pthread_mutex_init(&rl->lock, NULL);
    return rl;
}

void sl_ratelimit_free(sl_ratelimit *rl)
{
    if (!rl)
        return;
    pthread_mutex_destroy(&rl->lock);
    free(rl->v);
    free(rl);
}

static uint64_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static void refill(const sl_ratelimit *rl, bucket *b, int64_t now_ns)
{
    if (now_ns > b->last_ns) {
        b->tokens += (double)(now_ns - b->last_ns) / 1e9 * rl->rate;
        if (b->tokens > rl->burst)
            b->tokens = rl->burst;
        b->last_ns = now_ns;
    }
}

/* Forgets every full bucket (such a client is indistinguishable from a new
 * one) by rebuilding the table without them: open addressing cannot just
 * clear a slot in the middle of a probe chain. */
static void sweep(sl_ratelimit *rl, int64_t now_ns)
{
    size_t keep = 0;
    for (size_t i = 0; i < rl->cap; i++) {
        if (rl->v[i].used) {
            refill(rl, &rl->v[i], now_ns);
            keep += rl->v[i].tokens < rl->burst;
        }
    }
    if (keep == rl->n)
        return;
    bucket *old = malloc(keep * sizeof *old + 1);
    if (!old)
        return; /* nothing changed; the next sweep tries again */
    size_t k = 0;
    for (size_t i = 0; i < rl->cap; i++)
        if (rl->v[i].used && rl->v[i].tokens < rl->burst)
            old[k++] = rl->v[i];
    memset(rl->v, 0, rl->cap * sizeof *rl->v);
    for (size_t i = 0; i < k; i++) {
        size_t j = hash(old[i].client) & (rl->cap - 1);
        while (rl->v[j].used)
            j = (j + 1) & (rl->cap - 1);
        rl->v[j] = old[i];
    }
    rl->n = k;
    free(old);
}

int64_t sl_ratelimit_take(sl_ratelimit *rl, const char *client, double n, int64_t now_ns)
{
    if (n < 1)
        n = 1;
    pthread_mutex_lock(&rl->lock);
    /* Sweep once per refill period of a whole bucket, and when the table is
     * full, but then at most once a second: a sweep scans every slot under
     * the lock, and a flood of new clients must not make each call do it. */
    if ((rl->n >= rl->max && now_ns - rl->swept_ns >= 1000000000) ||
        now_ns - rl->swept_ns > (int64_t)(rl->burst / rl->rate * 1e9) + 1000000000) {
        sweep(rl, now_ns);
        rl->swept_ns = now_ns;
    }
    size_t j = hash(client) & (rl->cap - 1);
    bucket *b = NULL;
    while (rl->v[j].used) {
        if (strncmp(rl->v[j].client, client, CLIENT_MAX - 1) == 0) {
            b = &rl->v[j];
            break;
        }
        j = (j + 1) & (rl->cap - 1);
    }
    if (!b) {
        if (rl->n >= rl->max) { /* too many clients at once: wait for the next sweep */
            int64_t wait_ms = (rl->swept_ns + 1000000000 - now_ns) / 1000000 + 1;
            pthread_mutex_unlock(&rl->lock);
            return wait_ms > 0 ? wait_ms : 1;
        }
        b = &rl->v[j];
        b->used = true;
        strncpy(b->client, client, CLIENT_MAX - 1);
        b->client[CLIENT_MAX - 1] = '\0';
        b->tokens = rl->burst;
        b->last_ns = now_ns;
        rl->n++;
    }
    refill(rl, b, now_ns);
    double need = n < rl->burst ? n : rl->burst;
    int64_t wait_ms = 0;
    if (b->tokens >= need) {
        b->tokens -= n;
    } else {
        wait_ms = (int64_t)((need - b->tokens) / rl->rate * 1000.0) + 1;
    }
    pthread_mutex_unlock(&rl->lock);
    return wait_ms;
}

size_t sl_ratelimit_clients(sl_ratelimit *rl)
{
    pthread_mutex_lock(&rl->lock);
    size_t n = rl->n;
    pthread_mutex_unlock(&rl->lock);
    return n;
}
