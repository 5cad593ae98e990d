/*
 * kafka/kreq.c — one request in flight (kafka_internal.h): allocation, the
 * response's zero-copy file parts, posting a parked request, the shared
 * topic look-up and the once-a-minute log of a misbehaving client.
 */
#include "kafka/kafka_internal.h"

#include "core/base/clock.h"
#include "core/base/slog.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A request with no connection (tests): posts are recorded here. */
struct sl_kdetach {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool posted;
};

sl_kreq *sl__kreq_new(sl_kafka *k, void *conn, const char *peer, uint8_t *frame, size_t len,
                      bool *bad_header)
{
    *bad_header = false;
    sl_kreq *r = calloc(1, sizeof *r);
    if (!r) {
        free(frame);
        return NULL;
    }
    r->k = k;
    r->conn = conn;
    r->in = frame;
    r->in_len = len;
    snprintf(r->peer, sizeof r->peer, "%s", peer ? peer : "?");
    sl_kr_init(&r->body, frame, len);
    if (!sl_kp_header_read(&r->body, &r->h)) {
        *bad_header = true;
        free(frame);
        free(r);
        return NULL;
    }
    /* A client id with a NUL or longer than we keep is kept cut: it only
     * names the client in logs and selects lanes. */
    if (r->h.client_id.p) {
        size_t n = (size_t)r->h.client_id.len;
        if (n > SL_KAFKA_CLIENT_ID_MAX)
            n = SL_KAFKA_CLIENT_ID_MAX;
        memcpy(r->client_id, r->h.client_id.p, n);
        r->client_id[n] = '\0';
    }
    sl_kw_init(&r->w, &r->out);
    r->t0_ns = sl_clock_mono_ns();
    return r;
}

void sl__kreq_free(sl_kreq *r)
{
    if (!r)
        return;
    if (r->cleanup)
        r->cleanup(r);
    for (size_t i = 0; i < r->nfiles; i++)
        sl_log_slice_release(&r->files[i].slice);
    free(r->files);
    sl_buf_free(&r->out);
    free(r->in);
    if (r->detach) {
        pthread_mutex_destroy(&r->detach->mu);
        pthread_cond_destroy(&r->detach->cv);
        free(r->detach);
    }
    free(r);
}

int sl_kreq_add_file(sl_kreq *r, sl_log_slice *slice)
{
    if (r->w.oom || (r->nfiles == r->files_cap && SL_GROW(r->files, r->files_cap, 8) != 0)) {
        sl_log_slice_release(slice);
        r->w.oom = true;
        return SL_ENOMEM;
    }
    r->files[r->nfiles].at = r->out.len;
    r->files[r->nfiles].slice = *slice;
    r->nfiles++;
    memset(slice, 0, sizeof *slice);
    slice->fd = -1;
    return 0;
}

size_t sl_kreq_size(const sl_kreq *r)
{
    size_t n = r->out.len;
    for (size_t i = 0; i < r->nfiles; i++)
        n += (size_t)r->files[i].slice.len;
    return n;
}

void sl_kreq_post(sl_kreq *r)
{
    if (r->detach) {
        pthread_mutex_lock(&r->detach->mu);
        r->detach->posted = true;
        pthread_cond_broadcast(&r->detach->cv);
        pthread_mutex_unlock(&r->detach->mu);
        return;
    }
    r->k->post(r->conn, r);
}

sl_kreq *sl__kreq_new_detached(sl_kafka *k, const void *in, size_t len)
{
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy)
        return NULL;
    memcpy(copy, in, len);
    bool bad;
    sl_kreq *r = sl__kreq_new(k, NULL, "test", copy, len, &bad);
    if (!r)
        return NULL;
    r->detach = calloc(1, sizeof *r->detach);
    if (!r->detach) {
        sl__kreq_free(r);
        return NULL;
    }
    pthread_mutex_init(&r->detach->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->detach->cv, &ca);
    pthread_condattr_destroy(&ca);
    return r;
}

int sl__kreq_wait(sl_kreq *r, int64_t ms)
{
    if (!r->detach)
        return -1;
    struct timespec dl = sl_clock_mono_deadline(ms);
    pthread_mutex_lock(&r->detach->mu);
    while (!r->detach->posted)
        if (pthread_cond_timedwait(&r->detach->cv, &r->detach->mu, &dl) != 0)
            break;
    bool posted = r->detach->posted;
    r->detach->posted = false;
    pthread_mutex_unlock(&r->detach->mu);
    if (!posted || !r->resume)
        return -1;
    return r->resume(r);
}

/* ---- logging once --------------------------------------------------------- */

/* (peer address, message format) pairs logged in the last minute. A small
 * fixed table: a collision only means one more or one fewer line. */
#define LOG_SLOTS 256
static struct {
    uint64_t hash;
    int64_t at_ms;
} log_slots[LOG_SLOTS];
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

static uint64_t fnv(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

void sl__kafka_log_once(const sl_kreq *r, const char *fmt, ...)
{
    /* The peer's address without its port: a client that reconnects to
     * send the same garbage is the same client. */
    const char *colon = strrchr(r->peer, ':');
    size_t plen = colon ? (size_t)(colon - r->peer) : strlen(r->peer);
    uint64_t h = fnv(fnv(1469598103934665603ull, r->peer, plen), fmt, strlen(fmt));
    int64_t now = sl_clock_mono_ms();
    pthread_mutex_lock(&log_mu);
    size_t i = h % LOG_SLOTS;
    bool quiet = log_slots[i].hash == h && now - log_slots[i].at_ms < 60000;
    if (!quiet) {
        log_slots[i].hash = h;
        log_slots[i].at_ms = now;
    }
    pthread_mutex_unlock(&log_mu);
    if (quiet)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char api[16];
    sl_slog(SL_SLOG_WARN, "kafka", "client %s (%s, %s v%d): %s (repeats of this are quiet for a minute)",
            r->peer, r->client_id[0] ? r->client_id : "no client id",
            sl_kp_api_name(r->h.key, api), r->h.version, msg);
}

/* ---- rights and topics ---------------------------------------------------- */

bool sl__kafka_allowed(const sl_kreq *r, sl_auth_right right, const char *set)
{
    if (!r->key)
        return atomic_load(&r->k->auth) == NULL;
    return sl_auth_allows(r->key, right, set);
}

int16_t sl__kafka_topic(sl_kreq *r, sl_kstr topic, bool create, sl_set **out)
{
    *out = NULL;
    char name[SL_SET_NAME_MAX + 1];
    if (!sl_kstr_copy(topic, name, sizeof name) || !sl_set_name_valid(name))
        return SL_KERR_INVALID_TOPIC_EXCEPTION;
    sl_error err = {0};
    sl_set *set = NULL;
    int rc = sl_sets_get(r->k->sets, name, false, &set, &err);
    if (rc == SL_ENOENT && create && sl_sets_auto_creates(r->k->sets)) {
        /* Creating stores nothing yet, so it takes the right to publish
         * there: a reader cannot make sets by asking for them. */
        if (!sl__kafka_allowed(r, SL_AUTH_PUBLISH, name))
            return SL_KERR_TOPIC_AUTHORIZATION_FAILED;
        char client[SL_SET_CLIENT_MAX + 1];
        if (r->key) {
            snprintf(client, sizeof client, "key:%s", sl_auth_key_name(r->key));
        } else {
            const char *colon = strrchr(r->peer, ':');
            int plen = colon ? (int)(colon - r->peer) : (int)strlen(r->peer);
            snprintf(client, sizeof client, "ip:%.*s", plen, r->peer);
        }
        rc = sl_sets_create_auto(r->k->sets, name, client, &set, &err);
        if (rc == SL_ELIMIT) {
            sl__kafka_log_once(r, "topic \"%s\" not auto-created: %s", name, err.msg);
            return SL_KERR_POLICY_VIOLATION;
        }
        if (rc == 0)
            sl_slog(SL_SLOG_INFO, "kafka", "set \"%s\" auto-created for Kafka client %s", name,
                    r->peer);
    }
    if (rc == SL_ENOENT)
        return SL_KERR_UNKNOWN_TOPIC_OR_PARTITION;
    if (rc == SL_EINVAL)
        return SL_KERR_INVALID_TOPIC_EXCEPTION;
    if (rc) {
        sl__kafka_log_once(r, "topic \"%s\": %s", name, err.msg);
        return SL_KERR_UNKNOWN_SERVER_ERROR;
    }
    if (atomic_load(&set->deleted))
        return SL_KERR_UNKNOWN_TOPIC_OR_PARTITION;
    if (sl_set_remote(set)) {
        sl__kafka_log_once(r,
                           "topic \"%s\" is a Kafka-backed set: its records live on its Kafka "
                           "cluster; connect to that cluster instead (docs/kafka-protocol.md)",
                           name);
        return SL_KERR_INVALID_TOPIC_EXCEPTION;
    }
    *out = set;
    return SL_KERR_NONE;
}

int sl__kafka_mkdirs(const char *dir, sl_error *err)
{
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s", dir) >= (int)sizeof tmp)
        return sl_error_set(err, SL_EINVAL, "path too long: %s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0755) && errno != EEXIST)
            return sl_error_errno(err, errno, "mkdir %s", tmp);
        *p = '/';
    }
    if (mkdir(tmp, 0755) && errno != EEXIST)
        return sl_error_errno(err, errno, "mkdir %s", tmp);
    return 0;
}
