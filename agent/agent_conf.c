/*
 * agent/agent_conf.c — the Databus agent's settings: defaults, the key = value
 * file re-read on SIGHUP, and the optional config set on the bus that a
 * helper thread polls (--config-set): the newest event of that set whose
 * data is an object of the same keys is applied by the event loop.
 *
 * The poll thread never touches the agent's state: it only fills a pending
 * list of key/value pairs under a mutex and wakes the loop through the
 * self-pipe; the loop applies them exactly like a reloaded file.
 */
#include "agent/agent_internal.h"
#include "core/base/lane_name.h"
#include "core/base/httpc.h"
#include "core/base/clock.h"
#include "core/base/json.h"
#include "core/base/parse.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void sl_agent_opts_init(sl_agent_opts *o)
{
    memset(o, 0, sizeof *o);
    const char *l = getenv("SLUICE_LANE");
    if (l && strlen(l) < sizeof o->lane && sl_lane_valid(l, strlen(l)))
        snprintf(o->lane, sizeof o->lane, "%s", l);
    const char *x = getenv("XDG_RUNTIME_DIR");
    if (x && x[0])
        snprintf(o->spool_dir, sizeof o->spool_dir, "%s/sluice-databus", x);
    else
        snprintf(o->spool_dir, sizeof o->spool_dir, "/tmp/sluice-databus-%u", (unsigned)getuid());
    o->spool_max = 256u << 20;
    o->linger_ms = 5;
    o->batch_bytes = 1u << 20;
    o->max_line = 1u << 20;
    o->spool_after_ms = 1000;
    o->streams = 1; /* order per set and lane, as the issue asks; more is opt-in */
    o->key_max = 16u << 20;
    o->request_ms = 10000;
    o->shutdown_ms = 5000;
    o->config_poll_ms = 10000;
}

int sl_agent_upstream_set(const char *url, char *out, sl_error *err)
{
    char tmp[SL_AGENT_URL_MAX];
    const char *pre = strstr(url, "://") ? "" : "http://";
    int n = snprintf(tmp, sizeof tmp, "%s%s", pre, url);
    if (n <= 0 || (size_t)n >= sizeof tmp)
        return sl_error_set(err, SL_EINVAL, "upstream \"%s\": empty or too long", url);
    while (n > 0 && tmp[n - 1] == '/')
        tmp[--n] = '\0';
    if (strncmp(tmp, "http://", 7) != 0 && strncmp(tmp, "https://", 8) != 0)
        return sl_error_set(err, SL_EINVAL, "upstream \"%s\": want http://HOST:PORT", url);
    if (strlen(tmp) <= strlen("https://"))
        return sl_error_set(err, SL_EINVAL, "upstream \"%s\": no host", url);
    memcpy(out, tmp, (size_t)n + 1);
    return 0;
}

int sl_agent_conf_set(sl_agent_opts *o, const char *k, const char *v, sl_error *err)
{
    uint64_t u;
    int64_t ms;
    if (strcmp(k, "upstream") == 0)
        return sl_agent_upstream_set(v, o->upstream, err);
    if (strcmp(k, "lane") == 0) {
        if (strlen(v) >= sizeof o->lane || !sl_lane_valid(v, strlen(v)))
            return sl_error_set(err, SL_EINVAL, "lane \"%s\": want \"\" or [a-z0-9-]{1,32}", v);
        snprintf(o->lane, sizeof o->lane, "%s", v);
        return 0;
    }
    if (strcmp(k, "linger_ms") == 0) {
        if (sl_parse_duration_ms(v, &ms) || ms < 0 || ms > 60000)
            return sl_error_set(err, SL_EINVAL, "linger_ms %s: want 0..60000", v);
        o->linger_ms = ms;
        return 0;
    }
    if (strcmp(k, "spool_after_ms") == 0) {
        if (sl_parse_duration_ms(v, &ms) || ms < 0)
            return sl_error_set(err, SL_EINVAL, "spool_after_ms %s: want a duration", v);
        o->spool_after_ms = ms;
        return 0;
    }
    if (strcmp(k, "batch_bytes") == 0) {
        if (sl_parse_bytes(v, &u) || u < 1 || u > (8u << 20))
            return sl_error_set(err, SL_EINVAL, "batch_bytes %s: want 1B..8MiB", v);
        o->batch_bytes = u;
        return 0;
    }
    if (strcmp(k, "spool_max") == 0) {
        if (sl_parse_bytes(v, &u))
            return sl_error_set(err, SL_EINVAL, "spool_max %s: want a size such as 256MiB", v);
        o->spool_max = u;
        return 0;
    }
    if (strcmp(k, "streams") == 0) {
        char *end;
        errno = 0;
        long n = strtol(v, &end, 10);
        if (errno || end == v || *end || n < 1 || n > SL_AGENT_STREAMS_MAX)
            return sl_error_set(err, SL_EINVAL, "streams %s: want 1..%d", v, SL_AGENT_STREAMS_MAX);
        o->streams = (int)n;
        return 0;
    }
    return sl_error_set(err, SL_EINVAL,
                        "unknown key \"%s\" (upstream, lane, linger_ms, batch_bytes, spool_max, "
                        "spool_after_ms, streams)",
                        k);
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
        s[--n] = '\0';
    if (n >= 2 && (s[0] == '"' || s[0] == '\'') && s[n - 1] == s[0]) {
        s[n - 1] = '\0';
        s++;
    }
    return s;
}

int sl_agent_conf_load(const char *path, sl_agent_opts *o, sl_error *err)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return sl_error_errno(err, errno, "config %s", path);
    char line[1024];
    int ln = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        ln++;
        char *h = strchr(line, '#');
        if (h)
            *h = '\0';
        char *s = trim(line);
        if (!*s)
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            rc = sl_error_set(err, SL_EINVAL, "%s:%d: want key = value", path, ln);
            break;
        }
        *eq = '\0';
        sl_error e = {0};
        if (sl_agent_conf_set(o, trim(s), trim(eq + 1), &e))
            rc = sl_error_set(err, SL_EINVAL, "%s:%d: %s", path, ln, e.msg);
    }
    fclose(f);
    return rc;
}

/* ---- the config set ----------------------------------------------------------------- */

#define POLL_TIMEOUT_MS 3000L

/* GET base + path into h; true on a 200 whose body is a JSON object (*top). */
static bool get_json(sl_httpc *h, const char *base, const char *path, sl_json_tok *top)
{
    char url[SL_AGENT_URL_MAX + 400], msg[256];
    snprintf(url, sizeof url, "%s%s", base, path);
    if (sl_httpc_request(h, base, "GET", url, NULL, NULL, NULL, 0, POLL_TIMEOUT_MS, msg,
                            sizeof msg) != SL_HTTPC_OK ||
        h->status != 200)
        return false;
    return sl_json_validate((const char *)h->body.data, h->body.len, 64, top, NULL) == 0 &&
           top->type == SL_JSON_OBJECT;
}

/* The newest base-lane event of the config set: for each partition its last
 * event, the one with the latest time wins (a config set normally has one
 * partition). Fills pending key/value pairs when it is new. */
static void poll_once(ag_poll *p, sl_httpc *h, const char *base)
{
    sl_json_tok top, parts, part, v;
    char path[512];
    snprintf(path, sizeof path, "/v1/sets/%s", p->set);
    if (!get_json(h, base, path, &top) || !sl_json_get(&top, "partition_info", &parts) ||
        parts.type != SL_JSON_ARRAY)
        return;
    /* Copy the partition list out: h's body is reused by the next GET. */
    int64_t ends[64];
    int np = 0;
    sl_json_iter it;
    sl_json_iter_init(&it, &parts);
    while (np < 64 && sl_json_iter_elem(&it, &part)) {
        int64_t e = 0;
        if (sl_json_get(&part, "end_offset", &v))
            sl_json_i64(&v, &e);
        ends[np++] = e;
    }
    int64_t best_t = INT64_MIN;
    char best_id[64] = "", best_kv[AG_POLL_KEYS][2][SL_AGENT_URL_MAX];
    int best_n = -1;
    for (int i = 0; i < np; i++) {
        if (ends[i] <= 0)
            continue;
        snprintf(path, sizeof path, "/v1/sets/%s/events?partition=%d&offset=%" PRId64 "&max=1",
                 p->set, i, ends[i] - 1);
        sl_json_tok evs, ev, data, key;
        if (!get_json(h, base, path, &top) || !sl_json_get(&top, "events", &evs) ||
            evs.type != SL_JSON_ARRAY)
            continue;
        sl_json_iter_init(&it, &evs);
        if (!sl_json_iter_elem(&it, &ev) || ev.type != SL_JSON_OBJECT)
            continue;
        char ts[64] = "";
        int64_t t = 0;
        if (sl_json_get(&ev, "time", &v))
            sl_httpc_json_str(&v, ts, sizeof ts);
        if (sl_time_parse_rfc3339(ts, strlen(ts), &t) != 0)
            t = 0;
        if (t < best_t || !sl_json_get(&ev, "data", &data) || data.type != SL_JSON_OBJECT)
            continue;
        best_t = t;
        snprintf(best_id, sizeof best_id, "%d/%" PRId64, i, ends[i] - 1);
        best_n = 0;
        sl_json_iter mi;
        sl_json_iter_init(&mi, &data);
        while (best_n < AG_POLL_KEYS && sl_json_iter_member(&mi, &key, &v)) {
            sl_httpc_json_str(&key, best_kv[best_n][0], SL_AGENT_URL_MAX);
            if (v.type == SL_JSON_STRING)
                sl_httpc_json_str(&v, best_kv[best_n][1], SL_AGENT_URL_MAX);
            else if (v.type == SL_JSON_NUMBER && v.len < SL_AGENT_URL_MAX)
                snprintf(best_kv[best_n][1], SL_AGENT_URL_MAX, "%.*s", (int)v.len, v.p);
            else
                snprintf(best_kv[best_n][1], SL_AGENT_URL_MAX, "(not a string or number)");
            best_n++;
        }
    }
    if (best_n < 0)
        return;
    pthread_mutex_lock(&p->mu);
    if (strcmp(best_id, p->applied) != 0) {
        snprintf(p->applied, sizeof p->applied, "%s", best_id);
        memcpy(p->kv, best_kv, sizeof best_kv);
        p->nkv = best_n;
        p->have_new = true;
        char c = 1;
        ssize_t r = write(p->wake_fd, &c, 1);
        (void)r;
    }
    pthread_mutex_unlock(&p->mu);
}

static void *poll_main(void *ud)
{
    ag_poll *p = ud;
    sl_httpc h;
    if (sl_httpc_init(&h, NULL) != 0)
        return NULL;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        char base[SL_AGENT_URL_MAX];
        snprintf(base, sizeof base, "%s", p->upstream);
        pthread_mutex_unlock(&p->mu);
        poll_once(p, &h, base);
        pthread_mutex_lock(&p->mu);
        if (p->stop)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t ns = ts.tv_nsec + (p->every_ms % 1000) * 1000000;
        ts.tv_sec += p->every_ms / 1000 + ns / 1000000000;
        ts.tv_nsec = ns % 1000000000;
        pthread_cond_timedwait(&p->cv, &p->mu, &ts);
    }
    pthread_mutex_unlock(&p->mu);
    sl_httpc_close(&h);
    return NULL;
}

int sl__agent_poll_start(sl_agent *a, sl_error *err)
{
    ag_poll *p = &a->poll;
    snprintf(p->set, sizeof p->set, "%s", a->o.config_set);
    snprintf(p->upstream, sizeof p->upstream, "%s", a->o.upstream);
    p->every_ms = a->o.config_poll_ms > 0 ? a->o.config_poll_ms : 10000;
    p->wake_fd = a->sigfd[1];
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->inited = true;
    if (pthread_create(&p->th, NULL, poll_main, p) != 0)
        return sl_error_set(err, SL_ENOMEM, "cannot start the config-set poll thread");
    p->running = true;
    return 0;
}

void sl__agent_poll_stop(sl_agent *a)
{
    ag_poll *p = &a->poll;
    if (!p->inited)
        return;
    if (p->running) {
        pthread_mutex_lock(&p->mu);
        p->stop = true;
        pthread_cond_signal(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->th, NULL);
        p->running = false;
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    p->inited = false;
}

void sl__agent_poll_apply(sl_agent *a)
{
    ag_poll *p = &a->poll;
    if (!p->running)
        return;
    pthread_mutex_lock(&p->mu);
    if (!p->have_new) {
        pthread_mutex_unlock(&p->mu);
        return;
    }
    p->have_new = false;
    sl_agent_opts n = a->o;
    sl_error err = {0};
    int rc = 0;
    bool upstream_refused = false;
    for (int i = 0; i < p->nkv && rc == 0; i++) {
        /* Whoever can publish to the config set must not be able to send
         * this host's events (and spool) somewhere else: the upstream comes
         * only from the command line or the local --config file. */
        if (strcmp(p->kv[i][0], "upstream") == 0) {
            upstream_refused = true;
            continue;
        }
        rc = sl_agent_conf_set(&n, p->kv[i][0], p->kv[i][1], &err);
    }
    char id[64];
    snprintf(id, sizeof id, "%s", p->applied);
    pthread_mutex_unlock(&p->mu);
    if (upstream_refused)
        sl__agent_log(a,
                      "config set %s: event %s: key \"upstream\" ignored (the upstream can only "
                      "be changed by --upstream or the --config file)",
                      a->o.config_set, id);
    if (rc) {
        sl__agent_log(a, "config set %s: event %s not applied, keeping the current settings: %s",
                      a->o.config_set, id, err.msg);
        return;
    }
    a->o = n;
    sl__agent_log(a,
                  "config set %s: applied event %s: upstream %s, lane \"%s\", linger_ms %" PRId64
                  ", batch_bytes %" PRIu64 ", spool_max %" PRIu64 ", streams %d",
                  a->o.config_set, id, n.upstream, n.lane, n.linger_ms, n.batch_bytes, n.spool_max,
                  n.streams);
}

void sl__agent_poll_upstream(sl_agent *a)
{
    ag_poll *p = &a->poll;
    if (!p->running)
        return;
    pthread_mutex_lock(&p->mu);
    snprintf(p->upstream, sizeof p->upstream, "%s", a->o.upstream);
    pthread_mutex_unlock(&p->mu);
}
