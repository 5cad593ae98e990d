/*
 * connectors/source_http_rules.c — GET /v1/rules (the rule runner's cursors,
 * lag and counts) and POST /v1/patterns/test (EventBridge's TestEventPattern:
 * try a pattern on an event without a config).
 */
#include "connectors/source_http_internal.h"
#include "core/json.h"
#include "rules/pattern.h"

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
        return sl__http_error(r, 400, "InvalidRequest",
                              "want {\"pattern\": …, \"event\": …}");
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
        res = sl__http_error(r, 400, "InvalidPattern", "%s",
                             err.msg[0] ? err.msg : sl_strerror(rc));
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
