/*
 * server/schedule_state.c — the parts of schedules that need no thread:
 * checking a declaration, the deterministic event id and the event of a
 * tick, and reading and writing DATA/schedules/state.json (jansson).
 */
#include "server/schedule_internal.h"

#include "core/base/clock.h"
#include "core/bus/event.h"
#include "core/bus/set.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The state file's version; a file of another is refused (moved aside). */
#define STATE_VERSION 1
/* Largest state file read: ~200 bytes a schedule, SL_SCHEDULER_MAX of them. */
#define STATE_FILE_MAX (64u << 20)

void sl_schedule_decl_init(sl_schedule_decl *d)
{
    memset(d, 0, sizeof *d);
    d->catch_up = SL_SCHEDULE_CATCH_UP_DEFAULT;
    d->enabled = true;
}

void sl_schedule_decl_free(sl_schedule_decl *d)
{
    if (!d)
        return;
    free(d->name);
    free(d->cron);
    free(d->rate);
    free(d->at);
    free(d->timezone);
    free(d->set);
    free(d->event_json);
}

const char *sl_schedule_decl_expr(const sl_schedule_decl *d, sl_sched_kind *kind)
{
    int n = (d->cron != NULL) + (d->rate != NULL) + (d->at != NULL);
    if (n != 1)
        return NULL;
    *kind = d->cron ? SL_SCHED_CRON : d->rate ? SL_SCHED_RATE : SL_SCHED_AT;
    return d->cron ? d->cron : d->rate ? d->rate : d->at;
}

void sl__schedule_fingerprint(const sl_sched *s, char out[SL__SCHEDULE_FP_MAX])
{
    snprintf(out, SL__SCHEDULE_FP_MAX, "%s %s", sl_sched_expression(s), sl_tz_name(sl_sched_tz(s)));
}

/* ---- the event ------------------------------------------------------------------ */

void sl_schedule_event_id(const char *name, int64_t tick_ms, char out[37])
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    char tick[24];
    int tl = snprintf(tick, sizeof tick, "%lld", (long long)tick_ms);
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    /* The NULs keep ("ab", "c…") and ("a", "bc…") apart. */
    bool ok = c && EVP_DigestInit_ex(c, EVP_sha256(), NULL) &&
              EVP_DigestUpdate(c, "sluice-schedule", 16) &&
              EVP_DigestUpdate(c, name, strlen(name) + 1) &&
              EVP_DigestUpdate(c, tick, (size_t)tl) && EVP_DigestFinal_ex(c, md, &mdlen);
    EVP_MD_CTX_free(c);
    if (!ok) /* libcrypto cannot hash: never happens with the built-in SHA-256 */
        memset(md, 0, sizeof md);
    md[6] = (unsigned char)((md[6] & 0x0f) | 0x80); /* version 8 */
    md[8] = (unsigned char)((md[8] & 0x3f) | 0x80); /* the RFC 9562 variant */
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            out[o++] = '-';
        out[o++] = hex[md[i] >> 4];
        out[o++] = hex[md[i] & 15];
    }
    out[o] = '\0';
}

int sl_schedule_event(const char *name, const char *event_json, int64_t tick_ms, sl_buf *out,
                      sl_error *err)
{
    json_error_t jerr;
    json_t *tmpl = json_loads(event_json ? event_json : "", JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(tmpl)) {
        json_decref(tmpl);
        return sl_error_set(err, SL_EINVAL, "event: not a JSON object%s%s", tmpl ? "" : ": ",
                            tmpl ? "" : jerr.text);
    }
    char id[37], when[SL_TIME_RFC3339_MAX];
    sl_schedule_event_id(name, tick_ms, id);
    sl_time_format_rfc3339(tick_ms, when);
    json_t *ev = json_object();
    int rc = ev ? 0 : SL_ENOMEM;
    if (!rc && (json_object_set_new(ev, "specversion", json_string("1.0")) ||
                json_object_set_new(ev, "id", json_string(id))))
        rc = SL_ENOMEM;
    const char *k;
    json_t *v;
    json_object_foreach(tmpl, k, v)
    {
        if (rc || !strcmp(k, "id") || !strcmp(k, "time") || !strcmp(k, "specversion"))
            continue;
        if (json_object_set(ev, k, v))
            rc = SL_ENOMEM;
    }
    if (!rc && json_object_set_new(ev, "time", json_string(when)))
        rc = SL_ENOMEM;
    /* Keys sorted, at every depth: the config's Lua tables come in an
     * order that may differ from one process to the next, and a tick fired
     * again after a restart must be the same bytes. */
    char *text = rc ? NULL : json_dumps(ev, JSON_COMPACT | JSON_SORT_KEYS);
    if (!rc && (!text || sl_buf_append(out, text, strlen(text))))
        rc = SL_ENOMEM;
    free(text);
    json_decref(ev);
    json_decref(tmpl);
    return rc ? sl_error_set(err, rc, "out of memory") : 0;
}

/* The template's own checks, then the event of a tick as ingest checks it. */
static int check_template(const sl_schedule_decl *d, sl_error *err)
{
    if (!d->event_json)
        return sl_error_set(err, SL_EINVAL,
                            "event is required: { type = \"…\", source = \"…\", data = … }");
    json_error_t jerr;
    json_t *t = json_loads(d->event_json, JSON_REJECT_DUPLICATES, &jerr);
    int rc = 0;
    if (!json_is_object(t)) {
        rc = sl_error_set(err, SL_EINVAL,
                          "event must be a table (a JSON object) of the "
                          "CloudEvent's attributes");
    } else {
        static const char *const made[] = {"id", "time", "specversion"};
        for (size_t i = 0; !rc && i < 3; i++)
            if (json_object_get(t, made[i]))
                rc = sl_error_set(err, SL_EINVAL,
                                  "event: %s is made by the scheduler (%s), leave it out", made[i],
                                  i == 0   ? "from the schedule's name and the tick"
                                  : i == 1 ? "the tick"
                                           : "\"1.0\"");
        static const char *const need[] = {"type", "source"};
        for (size_t i = 0; !rc && i < 2; i++) {
            json_t *v = json_object_get(t, need[i]);
            if (!json_is_string(v) || !json_string_length(v))
                rc = sl_error_set(err, SL_EINVAL, "event: %s is required (a non-empty string)",
                                  need[i]);
        }
    }
    json_decref(t);
    if (rc)
        return rc;
    sl_buf b = SL_BUF_INIT;
    sl_error e = {0};
    rc = sl_schedule_event(d->name ? d->name : "", d->event_json, 0, &b, &e);
    if (rc) {
        sl_buf_free(&b);
        return sl_error_set(err, rc, "%s", e.msg);
    }
    sl_event *ev = malloc(sizeof *ev);
    if (!ev) {
        sl_buf_free(&b);
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    }
    sl_event_status st = sl_event_parse((const char *)b.data, b.len, NULL, ev, &e);
    free(ev);
    sl_buf_free(&b);
    if (st != SL_EVENT_OK)
        return sl_error_set(err, SL_EINVAL, "event: %s", e.msg[0] ? e.msg : "not a CloudEvent");
    return 0;
}

int sl_schedule_compile(const sl_schedule_decl *d, sl_sched **out, const char **key, sl_error *err)
{
    const char *k = "";
    int rc = 0;
    sl_sched_kind kind = SL_SCHED_CRON;
    const char *expr = sl_schedule_decl_expr(d, &kind);
    sl_sched *s = NULL;
    sl_error e = {0};
    if (!d->name || !sl_set_name_valid(d->name)) {
        rc = sl_error_set(err, SL_EINVAL,
                          "a schedule name is 1-128 of A-Z a-z 0-9 . _ - , not beginning with .");
    } else if (!expr) {
        int n = (d->cron != NULL) + (d->rate != NULL) + (d->at != NULL);
        if (n)
            rc = sl_error_set(err, SL_EINVAL, "give only one of cron, rate and at");
        else
            rc = sl_error_set(err, SL_EINVAL,
                              "one of cron = \"0 3 * * ? *\", rate = \"5 minutes\" or at = "
                              "\"2026-12-24T18:00:00\" is required");
        k = n ? (d->at ? "at" : "rate") : "";
    } else if ((rc = sl_sched_new(kind, expr, d->timezone, &s, &e))) {
        /* A zone's mistake is the timezone key's, the rest the expression's. */
        k = strncmp(e.msg, "time zone", 9) == 0 ? "timezone" : sl_sched_kind_name(kind);
        sl_error_set(err, rc, "%s", e.msg);
    } else if (!d->set) {
        rc = sl_error_set(err, SL_EINVAL, "set is required (the event set the events go to)");
    } else if (!sl_set_name_valid(d->set)) {
        k = "set";
        rc = sl_error_set(err, SL_EINVAL,
                          "set \"%.128s\": a set name is 1-128 of A-Z a-z 0-9 . _ - , not "
                          "beginning with .",
                          d->set);
    } else if (d->catch_up < 0 || d->catch_up > SL_SCHEDULE_CATCH_UP_MAX) {
        k = "catch_up";
        rc = sl_error_set(err, SL_EINVAL, "catch_up = %d is out of range (0..%d)", d->catch_up,
                          SL_SCHEDULE_CATCH_UP_MAX);
    } else if ((rc = check_template(d, err))) {
        k = "event";
    }
    if (key)
        *key = k;
    if (rc || !out)
        sl_sched_free(s);
    else
        *out = s;
    return rc;
}

/* ---- the state file ---------------------------------------------------------------- */

void sl__schedule_state_path(const char *data_dir, bool file, char *path, size_t size)
{
    snprintf(path, size, "%s/schedules%s", data_dir, file ? "/state.json" : "");
}

void sl_schedule_state_free(sl_schedule_state *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) {
        free(v[i].name);
        free(v[i].fingerprint);
    }
    free(v);
}

static int64_t ms_or(json_t *o, const char *k, int64_t dflt)
{
    json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

int sl_schedule_state_load(const char *data_dir, sl_schedule_state **out, size_t *n, sl_error *err)
{
    char path[4096];
    sl__schedule_state_path(data_dir, true, path, sizeof path);
    *out = NULL;
    *n = 0;
    sl_buf b = SL_BUF_INIT;
    sl_error e = {0};
    int rc = sl_buf_read_file(&b, path, STATE_FILE_MAX, &e);
    if (rc == SL_ENOENT) {
        sl_buf_free(&b);
        return 0;
    }
    if (rc) {
        sl_buf_free(&b);
        return sl_error_set(err, rc, "%s", e.msg);
    }
    json_error_t jerr;
    json_t *root = json_loadb((const char *)b.data, b.len, 0, &jerr);
    sl_buf_free(&b);
    json_t *list = json_object_get(root, "schedules");
    if (!json_is_object(root) || ms_or(root, "version", 0) != STATE_VERSION ||
        !json_is_array(list)) {
        json_decref(root);
        return sl_error_set(err, SL_ECORRUPT, "%s: not a schedule state file (version %d)%s%s",
                            path, STATE_VERSION, root ? "" : ": ", root ? "" : jerr.text);
    }
    size_t cnt = json_array_size(list);
    sl_schedule_state *v = calloc(cnt ? cnt : 1, sizeof *v);
    if (!v) {
        json_decref(root);
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    }
    size_t got = 0;
    for (size_t i = 0; i < cnt; i++) {
        json_t *o = json_array_get(list, i);
        const char *name = json_string_value(json_object_get(o, "name"));
        const char *fp = json_string_value(json_object_get(o, "fingerprint"));
        if (!name || !fp || !json_is_integer(json_object_get(o, "after"))) {
            sl_schedule_state_free(v, got);
            json_decref(root);
            return sl_error_set(err, SL_ECORRUPT,
                                "%s: schedule %zu lacks name, fingerprint or "
                                "after",
                                path, i);
        }
        sl_schedule_state *st = &v[got];
        st->name = strdup(name);
        st->fingerprint = strdup(fp);
        if (!st->name || !st->fingerprint) {
            sl_schedule_state_free(v, got + 1);
            json_decref(root);
            return sl_error_set(err, SL_ENOMEM, "out of memory");
        }
        json_t *en = json_object_get(o, "enabled");
        st->enabled = !json_is_boolean(en) || json_is_true(en);
        st->after_ms = ms_or(o, "after", 0);
        st->last_ms = ms_or(o, "last", -1);
        st->pending_ms = ms_or(o, "pending", -1);
        st->gone_ms = ms_or(o, "gone", -1);
        got++;
    }
    json_decref(root);
    *out = v;
    *n = got;
    return 0;
}

static int put_ms(json_t *o, const char *k, int64_t v)
{
    return json_object_set_new(o, k, v < 0 ? json_null() : json_integer((json_int_t)v));
}

int sl__schedule_state_write(const char *data_dir, const sl_schedule_state *v, size_t n,
                             sl_error *err)
{
    json_t *root = json_object(), *list = json_array();
    int bad = !root || !list || json_object_set_new(root, "version", json_integer(STATE_VERSION)) ||
              json_object_set(root, "schedules", list);
    for (size_t i = 0; !bad && i < n; i++) {
        json_t *o = json_object();
        bad = !o || json_object_set_new(o, "name", json_string(v[i].name)) ||
              json_object_set_new(o, "fingerprint", json_string(v[i].fingerprint)) ||
              json_object_set_new(o, "enabled", json_boolean(v[i].enabled)) ||
              json_object_set_new(o, "after", json_integer((json_int_t)v[i].after_ms)) ||
              put_ms(o, "last", v[i].last_ms) || put_ms(o, "pending", v[i].pending_ms) ||
              put_ms(o, "gone", v[i].gone_ms) || json_array_append_new(list, o);
    }
    char *text = bad ? NULL : json_dumps(root, JSON_INDENT(1));
    json_decref(list);
    json_decref(root);
    if (!text)
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    char dir[4096], path[4096], tmp[4200];
    sl__schedule_state_path(data_dir, false, dir, sizeof dir);
    sl__schedule_state_path(data_dir, true, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int rc = 0;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    size_t len = strlen(text), off = 0;
    if (fd < 0)
        rc = sl_error_errno(err, errno, "%s", tmp);
    while (!rc && off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            rc = sl_error_errno(err, errno, "write %s", tmp);
        else
            off += (size_t)w;
    }
    if (!rc && (write(fd, "\n", 1) != 1 || fsync(fd) < 0))
        rc = sl_error_errno(err, errno, "write %s", tmp);
    if (fd >= 0 && close(fd) < 0 && !rc)
        rc = sl_error_errno(err, errno, "close %s", tmp);
    if (!rc && rename(tmp, path) < 0)
        rc = sl_error_errno(err, errno, "rename %s", tmp);
    if (rc)
        unlink(tmp);
    free(text);
    if (!rc) {
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0 || fsync(dfd) < 0)
            rc = sl_error_errno(err, errno, "fsync %s", dir);
        if (dfd >= 0)
            close(dfd);
    }
    return rc;
}
