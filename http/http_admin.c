/*
 * http/http_admin.c — the admin side of the HTTP API: GET /v1/rules (the
 * rule runner's cursors, lag and counts), POST /v1/rules/{rule}/replay and
 * GET /v1/rules/{rule}/replays, GET /v1/lanes and DELETE /v1/lanes/{lane},
 * GET /v1/sources (each source's counts and health) and
 * POST /v1/patterns/test (EventBridge's TestEventPattern: try a pattern on
 * an event without a config). Everything but the pattern test asks the
 * running config through the server's hooks (http/http.h).
 */
#include "http/http_internal.h"
#include "core/base/clock.h"
#include "core/base/json.h"
#include "rules/pattern.h"

#include <stdlib.h>
#include <string.h>

enum MHD_Result sl__http_rules(sl_http_req *r)
{
    sl_http *h = r->h;
    sl_buf b = SL_BUF_INIT;
    int rc = h->hooks.rules_json ? h->hooks.rules_json(h->hooks.ctx, &b)
                                 : sl_buf_append(&b, "{\"rules\":[]}\n", 13);
    if (rc) {
        sl_buf_free(&b);
        return sl__http_error(r, 500, "Internal", "listing the rules: %s", sl_strerror(rc));
    }
    return sl__http_reply(r, 200, &b, "application/json", 0);
}

enum MHD_Result sl__http_lanes(sl_http_req *r)
{
    sl_http *h = r->h;
    sl_buf b = SL_BUF_INIT;
    /* Without a config there is no registry: only the base lane, any lane
     * accepted. */
    int rc = h->hooks.lanes_json ? h->hooks.lanes_json(h->hooks.ctx, &b)
                                 : sl_buf_printf(&b, "{\"auto\":true,\"lanes\":[]}\n");
    if (rc) {
        sl_buf_free(&b);
        return sl__http_error(r, 500, "Internal", "listing the lanes: %s", sl_strerror(rc));
    }
    return sl__http_reply(r, 200, &b, "application/json", 0);
}

enum MHD_Result sl__http_lane_drop(sl_http_req *r, const char *lane)
{
    sl_http *h = r->h;
    if (!h->hooks.lane_drop)
        return sl__http_error(r, 404, "NoSuchLane",
                              "lane \"%.40s\": this server runs without a config, it has no "
                              "lanes to drop",
                              lane);
    sl_error err = {0};
    int rc = h->hooks.lane_drop(h->hooks.ctx, lane, &err);
    if (rc == SL_ENOENT)
        return sl__http_error(r, 404, "NoSuchLane", "%s", err.msg);
    if (rc == SL_EINVAL)
        return sl__http_error(r, 400, "InvalidLane", "%s", err.msg);
    if (rc)
        return sl__http_error(r, 500, "Internal", "%s", err.msg);
    sl_buf b = SL_BUF_INIT;
    if (sl_buf_printf(&b, "{\"dropped\":\"%s\"}\n", lane)) {
        sl_buf_free(&b);
        return sl__http_error(r, 500, "Internal", "out of memory");
    }
    return sl__http_reply(r, 200, &b, "application/json", 0);
}

enum MHD_Result sl__http_sources(sl_http_req *r)
{
    sl_http *h = r->h;
    sl_buf b = SL_BUF_INIT;
    int rc = h->hooks.sources_json ? h->hooks.sources_json(h->hooks.ctx, &b)
                                   : sl_buf_append(&b, "{\"sources\":[]}\n", 15);
    if (rc) {
        sl_buf_free(&b);
        return sl__http_error(r, 500, "Internal", "listing the sources: %s", sl_strerror(rc));
    }
    return sl__http_reply(r, 200, &b, "application/json", 0);
}

enum MHD_Result sl__http_groups(sl_http_req *r)
{
    sl_http *h = r->h;
    sl_buf b = SL_BUF_INIT;
    int rc = h->hooks.groups_json ? h->hooks.groups_json(h->hooks.kafka_ctx, &b)
                                  : sl_buf_append(&b, "{\"groups\":[]}", 13);
    if (!rc)
        rc = sl_buf_append(&b, "\n", 1);
    if (rc) {
        sl_buf_free(&b);
        return sl__http_error(r, 500, "Internal", "listing the groups: %s", sl_strerror(rc));
    }
    return sl__http_reply(r, 200, &b, "application/json", 0);
}

enum MHD_Result sl__http_schedules(sl_http_req *r)
{
    sl_http *h = r->h;
    sl_buf b = SL_BUF_INIT;
    int rc = h->hooks.schedules_json ? h->hooks.schedules_json(h->hooks.schedules_ctx, &b)
                                     : sl_buf_append(&b, "{\"schedules\":[]}", 16);
    if (!rc)
        rc = sl_buf_append(&b, "\n", 1);
    if (rc) {
        sl_buf_free(&b);
        return sl__http_error(r, 500, "Internal", "listing the schedules: %s", sl_strerror(rc));
    }
    return sl__http_reply(r, 200, &b, "application/json", 0);
}

/* A member given as JSON, or as a string holding JSON (EventBridge's API
 * takes both the pattern and the event as strings). */
static void member_text(const sl_json_tok *v, sl_buf *tmp, const char **p, size_t *len)
{
    if (v->type == SL_JSON_STRING && sl_buf_reserve(tmp, v->len) == 0) {
        sl_json_unescape(v, (char *)tmp->data, tmp->cap, len);
        *p = (const char *)tmp->data;
        return;
    }
    *p = v->p;
    *len = v->len;
}

enum MHD_Result sl__http_pattern_test(sl_http_req *r)
{
    sl_json_tok body, key, val, pat = {0}, ev = {0};
    sl_error err = {0};
    const char *p = r->body.data ? (const char *)r->body.data : "";
    if (sl_json_validate(p, r->body.len, 128, &body, &err))
        return sl__http_error(r, 400, "InvalidJson", "the body is not JSON: %s", err.msg);
    if (body.type != SL_JSON_OBJECT)
        return sl__http_error(r, 400, "InvalidRequest", "want {\"pattern\": …, \"event\": …}");
    sl_json_iter it;
    sl_json_iter_init(&it, &body);
    while (sl_json_iter_member(&it, &key, &val)) {
        if (key.len == 9 && memcmp(key.p, "\"pattern\"", 9) == 0)
            pat = val;
        else if (key.len == 7 && memcmp(key.p, "\"event\"", 7) == 0)
            ev = val;
    }
    if (pat.type == SL_JSON_NONE || ev.type == SL_JSON_NONE)
        return sl__http_error(r, 400, "InvalidRequest",
                              "want {\"pattern\": …, \"event\": …}; %s is missing",
                              pat.type == SL_JSON_NONE ? "pattern" : "event");
    sl_buf pt = SL_BUF_INIT, et = SL_BUF_INIT;
    const char *pp, *ep;
    size_t pl, el;
    member_text(&pat, &pt, &pp, &pl);
    member_text(&ev, &et, &ep, &el);
    sl_pattern *cp = NULL;
    bool matched = false;
    enum MHD_Result res;
    int rc = sl_pattern_compile(pp, pl, &cp, &err);
    if (rc) {
        res =
            sl__http_error(r, 400, "InvalidPattern", "%s", err.msg[0] ? err.msg : sl_strerror(rc));
    } else if ((rc = sl_pattern_match(cp, ep, el, &matched, &err))) {
        res = sl__http_error(r, 400, "InvalidEvent", "the event: %s",
                             err.msg[0] ? err.msg : sl_strerror(rc));
    } else {
        sl_buf b = SL_BUF_INIT;
        sl_buf_append(&b, matched ? "{\"match\":true}\n" : "{\"match\":false}\n",
                      matched ? 15 : 16);
        res = sl__http_reply(r, 200, &b, "application/json", 0);
    }
    sl_pattern_free(cp);
    sl_buf_free(&pt);
    sl_buf_free(&et);
    return res;
}

/* A time given as RFC 3339 or as milliseconds since the epoch. */
static int parse_time(const char *s, int64_t *ms)
{
    if (!s || !*s)
        return SL_EINVAL;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (!*end && v >= 0) {
        *ms = v;
        return 0;
    }
    return sl_time_parse_rfc3339(s, strlen(s), ms);
}

/* POST /v1/rules/{rule}/replay?from=TIME[&to=TIME], or the same as a JSON
 * body {"from": …, "to": …}. */
enum MHD_Result sl__http_replay(sl_http_req *r, const char *rule)
{
    sl_http *h = r->h;
    if (!h->hooks.replay)
        return sl__http_error(r, 404, "NotFound", "no rule named %s (the server runs no rules)",
                              rule);
    const char *from = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "from");
    const char *to = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "to");
    char fb[64] = "", tb[64] = "";
    if (r->body.len) {
        sl_json_tok body, key, val;
        sl_error err = {0};
        if (sl_json_validate((const char *)r->body.data, r->body.len, 8, &body, &err) ||
            body.type != SL_JSON_OBJECT)
            return sl__http_error(r, 400, "InvalidRequest",
                                  "want {\"from\": TIME, \"to\": TIME} (RFC 3339 or ms)");
        sl_json_iter it;
        sl_json_iter_init(&it, &body);
        while (sl_json_iter_member(&it, &key, &val)) {
            char *dst = key.len == 6 && memcmp(key.p, "\"from\"", 6) == 0 ? fb
                        : key.len == 4 && memcmp(key.p, "\"to\"", 4) == 0 ? tb
                                                                          : NULL;
            size_t n = 0;
            if (!dst)
                continue;
            if (val.type == SL_JSON_STRING)
                sl_json_unescape(&val, dst, 64, &n);
            else if (val.type == SL_JSON_NUMBER && val.len < 64)
                memcpy(dst, val.p, (n = val.len));
            dst[n < 64 ? n : 63] = '\0';
        }
        /* the query string wins, as for redrive */
        if (fb[0] && !from)
            from = fb;
        if (tb[0] && !to)
            to = tb;
    }
    int64_t from_ms, to_ms = 0;
    if (parse_time(from, &from_ms))
        return sl__http_error(r, 400, "InvalidRequest",
                              "from must be a time (RFC 3339, e.g. 2026-11-29T10:00:00Z, or "
                              "milliseconds since the epoch)%s",
                              from ? "" : "; it is missing");
    if (to && parse_time(to, &to_ms))
        return sl__http_error(r, 400, "InvalidRequest",
                              "to must be a time (RFC 3339 or milliseconds since the epoch)");
    sl_buf b = SL_BUF_INIT;
    sl_error err = {0};
    int rc = h->hooks.replay(h->hooks.ctx, rule, from_ms, to_ms, &b, &err);
    if (rc) {
        sl_buf_free(&b);
        unsigned st = rc == SL_ENOENT ? 404 : rc == SL_EINVAL ? 400 : rc == SL_EFULL ? 429 : 500;
        const char *code = st == 404   ? "NotFound"
                           : st == 400 ? "InvalidRequest"
                           : st == 429 ? "TooManyReplays"
                                       : "Internal";
        return sl__http_error(r, st, code, "%s", err.msg[0] ? err.msg : sl_strerror(rc));
    }
    sl_buf_append(&b, "\n", 1);
    return sl__http_reply(r, 202, &b, "application/json", 0);
}

/* GET /v1/rules/{rule}/replays */
enum MHD_Result sl__http_replays(sl_http_req *r, const char *rule)
{
    sl_http *h = r->h;
    sl_buf b = SL_BUF_INIT;
    int rc = h->hooks.replays_json ? h->hooks.replays_json(h->hooks.ctx, rule, &b)
                                   : sl_buf_append(&b, "{\"replays\":[]}\n", 15);
    if (rc) {
        sl_buf_free(&b);
        return sl__http_error(r, rc == SL_ENOENT ? 404 : 500,
                              rc == SL_ENOENT ? "NotFound" : "Internal", "%s",
                              rc == SL_ENOENT ? "no such rule" : sl_strerror(rc));
    }
    return sl__http_reply(r, 200, &b, "application/json", 0);
}
