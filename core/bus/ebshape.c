/*
 * core/bus/ebshape.c — CloudEvent <-> EventBridge event (see ebshape.h).
 *
 * The CloudEvent side goes through sl_event_parse(), which validated the
 * event at ingest already and costs a scan; tokens are copied raw (a JSON
 * string stays a JSON string, escapes and all), so nothing is decoded on
 * the way except the time.
 */
#include "core/bus/ebshape.h"
#include "core/base/clock.h"
#include "core/base/json.h"
#include "core/bus/event.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static int put(sl_buf *b, const char *s)
{
    return sl_buf_append(b, s, strlen(s));
}

static int put_tok(sl_buf *b, const sl_json_tok *t)
{
    return sl_buf_append(b, t->p, t->len);
}

static const sl_event_ext *ext_of(const sl_event *ev, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < ev->n_ext; i++)
        if (ev->ext[i].name_len == n && memcmp(ev->ext[i].name, name, n) == 0)
            return &ev->ext[i];
    return NULL;
}

int sl_ebshape_resources_valid(const char *s, size_t len)
{
    sl_json_tok arr, el;
    if (sl_json_validate(s, len, 4, &arr, NULL) || arr.type != SL_JSON_ARRAY)
        return 0;
    sl_json_iter it;
    sl_json_iter_init(&it, &arr);
    while (sl_json_iter_elem(&it, &el))
        if (el.type != SL_JSON_STRING)
            return 0;
    return 1;
}

/* The Resources array kept in the awsresources extension (a JSON string
 * holding the array's text), decoded into out; [] when absent or not an
 * array of strings. */
static int put_resources(sl_buf *b, const sl_event *ev)
{
    const sl_event_ext *x = ext_of(ev, "awsresources");
    if (!x || x->value.type != SL_JSON_STRING || x->value.len < 2)
        return put(b, "[]");
    size_t cap = x->value.len, n = 0;
    char stack[512], *tmp = cap <= sizeof stack ? stack : malloc(cap);
    if (!tmp)
        return SL_ENOMEM;
    int rc = 0;
    if (sl_json_unescape(&x->value, tmp, cap, &n) == 0 && sl_ebshape_resources_valid(tmp, n))
        rc = sl_json_compact(tmp, n, b);
    else
        rc = put(b, "[]");
    if (tmp != stack)
        free(tmp);
    return rc;
}

/* A configured account or region as a JSON string. */
static int put_text(sl_buf *b, const sl_event *ev, const char *ext, const char *dflt)
{
    const sl_event_ext *x = ext_of(ev, ext);
    if (x && x->value.type == SL_JSON_STRING)
        return put_tok(b, &x->value);
    return sl_json_put_string(b, dflt, strlen(dflt));
}

int sl_ebshape_from_cloudevent(const char *ce, size_t len, const char *account,
                               const char *region, sl_buf *out, sl_error *err)
{
    sl_event ev;
    sl_event_limits lim = {.max_bytes = len + 1};
    if (sl_event_parse(ce, len, &lim, &ev, err) != SL_EVENT_OK)
        return err ? err->code ? err->code : SL_EINVAL : SL_EINVAL;
    size_t at = out->len;
    char t[SL_TIME_RFC3339_MAX] = "1970-01-01T00:00:00Z";
    if (ev.has_time && sl_time_format_rfc3339(ev.time_ms, t) == 24) {
        t[19] = 'Z'; /* EventBridge's times have no fraction */
        t[20] = '\0';
    }
    int rc = put(out, "{\"version\":\"0\",\"id\":");
    rc = rc ? rc : put_tok(out, &ev.id);
    rc = rc ? rc : put(out, ",\"detail-type\":");
    rc = rc ? rc : put_tok(out, &ev.type);
    rc = rc ? rc : put(out, ",\"source\":");
    rc = rc ? rc : put_tok(out, &ev.source);
    rc = rc ? rc : put(out, ",\"account\":");
    rc = rc ? rc : put_text(out, &ev, "awsaccount", account);
    rc = rc ? rc : put(out, ",\"time\":\"");
    rc = rc ? rc : put(out, t);
    rc = rc ? rc : put(out, "\",\"region\":");
    rc = rc ? rc : put_text(out, &ev, "awsregion", region);
    rc = rc ? rc : put(out, ",\"resources\":");
    rc = rc ? rc : put_resources(out, &ev);
    rc = rc ? rc : put(out, ",\"detail\":");
    if (!rc && ev.data.type != SL_JSON_NONE && ev.data.type != SL_JSON_NULL)
        rc = sl_json_compact(ev.data.p, ev.data.len, out);
    else if (!rc && ev.data_base64.type == SL_JSON_STRING) {
        rc = put(out, "{\"data_base64\":");
        rc = rc ? rc : put_tok(out, &ev.data_base64);
        rc = rc ? rc : put(out, "}");
    } else if (!rc)
        rc = put(out, "{}");
    rc = rc ? rc : put(out, "}");
    if (rc) {
        out->len = at;
        return sl_error_set(err, rc, "out of memory");
    }
    return 0;
}

int sl_ebshape_to_cloudevent(const char *eb, size_t len, sl_buf *out, sl_error *err)
{
    sl_json_tok obj, id, src, dt, tm, detail, acct, reg, res;
    if (sl_json_validate(eb, len, SL_EVENT_MAX_DEPTH_DEFAULT, &obj, err) ||
        obj.type != SL_JSON_OBJECT)
        return sl_error_set(err, SL_EINVAL, "not an EventBridge event: not a JSON object");
    if (!sl_json_get(&obj, "source", &src) || src.type != SL_JSON_STRING ||
        !sl_json_get(&obj, "detail-type", &dt) || dt.type != SL_JSON_STRING)
        return sl_error_set(err, SL_EINVAL,
                            "not an EventBridge event: source and detail-type must be strings");
    bool has_detail = sl_json_get(&obj, "detail", &detail);
    if (has_detail && detail.type != SL_JSON_OBJECT)
        return sl_error_set(err, SL_EINVAL, "not an EventBridge event: detail must be an object");
    size_t at = out->len;
    int rc = put(out, "{\"specversion\":\"1.0\",\"id\":");
    if (!rc && sl_json_get(&obj, "id", &id) && id.type == SL_JSON_STRING && id.len > 2) {
        rc = put_tok(out, &id);
    } else if (!rc) {
        char u[37];
        sl_event_uuid7(sl_clock_now_ms(), u);
        rc = sl_json_put_string(out, u, 36);
    }
    rc = rc ? rc : put(out, ",\"source\":");
    rc = rc ? rc : put_tok(out, &src);
    rc = rc ? rc : put(out, ",\"type\":");
    rc = rc ? rc : put_tok(out, &dt);
    if (!rc && sl_json_get(&obj, "time", &tm) && tm.type == SL_JSON_STRING) {
        rc = put(out, ",\"time\":");
        rc = rc ? rc : put_tok(out, &tm);
    }
    if (!rc && sl_json_get(&obj, "account", &acct) && acct.type == SL_JSON_STRING) {
        rc = put(out, ",\"awsaccount\":");
        rc = rc ? rc : put_tok(out, &acct);
    }
    if (!rc && sl_json_get(&obj, "region", &reg) && reg.type == SL_JSON_STRING) {
        rc = put(out, ",\"awsregion\":");
        rc = rc ? rc : put_tok(out, &reg);
    }
    if (!rc && sl_json_get(&obj, "resources", &res) && res.type == SL_JSON_ARRAY) {
        sl_buf txt = SL_BUF_INIT;
        rc = sl_json_compact(res.p, res.len, &txt);
        if (!rc && txt.len > 2) {
            rc = put(out, ",\"awsresources\":");
            rc = rc ? rc : sl_json_put_string(out, (const char *)txt.data, txt.len);
        }
        sl_buf_free(&txt);
    }
    rc = rc ? rc : put(out, ",\"datacontenttype\":\"application/json\",\"data\":");
    if (!rc && has_detail)
        rc = sl_json_compact(detail.p, detail.len, out);
    else if (!rc)
        rc = put(out, "{}");
    rc = rc ? rc : put(out, "}");
    if (rc) {
        out->len = at;
        return sl_error_set(err, rc, "out of memory");
    }
    return 0;
}
