/*
 * core/bus/record_event.c — a stored record as the event rules see
 * (record_event.h). The structured case, every record an ingest path other
 * than the Kafka listener stored, stays on the fast path (a splice into the
 * stored JSON); the Kafka client's other records are built with jansson,
 * which is fine at their rate and keeps the escaping right.
 */
#include "core/bus/record_event.h"

#include "core/base/base64.h"
#include "core/base/clock.h"
#include "core/base/varint.h"
#include "core/bus/event.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Walks rec's headers: calls fn for each until it returns false. */
typedef bool header_fn(const uint8_t *k, size_t klen, const uint8_t *v, size_t vlen, void *ctx);

static void each_header(const sl_record *rec, header_fn *fn, void *ctx)
{
    const uint8_t *p = rec->headers, *end = p ? p + rec->headers_len : NULL;
    for (int32_t i = 0; p && i < rec->header_count; i++) {
        int64_t kl, vl;
        size_t u = sl_varint_get(p, end, &kl);
        if (!u || kl < 0 || (size_t)kl > (size_t)(end - p - (ptrdiff_t)u))
            return;
        const uint8_t *k = p + u;
        p = k + kl;
        u = sl_varint_get(p, end, &vl);
        if (!u || vl < -1 || (vl > 0 && (size_t)vl > (size_t)(end - p - (ptrdiff_t)u)))
            return;
        const uint8_t *v = vl < 0 ? NULL : p + u;
        p += u + (vl > 0 ? vl : 0);
        if (!fn(k, (size_t)kl, v, vl < 0 ? 0 : (size_t)vl, ctx))
            return;
    }
}

typedef struct find_ctx {
    const char *name;
    size_t len;
    bool found;
    const uint8_t *v;
    size_t vlen;
} find_ctx;

static bool find_one(const uint8_t *k, size_t klen, const uint8_t *v, size_t vlen, void *ctx)
{
    find_ctx *f = ctx;
    if (klen != f->len || memcmp(k, f->name, klen) != 0)
        return true;
    f->found = true;
    f->v = v;
    f->vlen = vlen;
    return false;
}

bool sl_record_header(const sl_record *rec, const char *name, const uint8_t **v, size_t *vlen)
{
    find_ctx f = {name, strlen(name), false, NULL, 0};
    each_header(rec, find_one, &f);
    if (f.found) {
        *v = f.v;
        *vlen = f.vlen;
    }
    return f.found;
}

/* Whether a content-type value is application/cloudevents+json, parameters
 * (";charset=…") allowed. */
static bool is_ce_json(const uint8_t *v, size_t n)
{
    static const char ct[] = SL_BATCH_CE_HEADER_VALUE;
    size_t l = sizeof ct - 1;
    return v && n >= l && strncasecmp((const char *)v, ct, l) == 0 &&
           (n == l || v[l] == ';' || v[l] == ' ');
}

/* A value that starts as a JSON object naming specversion: a CloudEvent
 * stored before the content-type header existed. */
static bool looks_structured(const sl_record *rec)
{
    const uint8_t *p = rec->value, *end = p ? p + rec->value_len : NULL;
    while (p && p < end && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r'))
        p++;
    if (!p || p == end || *p != '{')
        return false;
    size_t n = (size_t)(end - p);
    return memmem(p, n < 4096 ? n : 4096, "\"specversion\"", 13) != NULL;
}

sl_record_kind sl_record_kind_of(const sl_record *rec)
{
    const uint8_t *v;
    size_t vl;
    if (sl_record_header(rec, "ce_specversion", &v, &vl))
        return SL_RECORD_BINARY;
    if (sl_record_header(rec, "content-type", &v, &vl))
        return is_ce_json(v, vl) ? SL_RECORD_STRUCTURED : SL_RECORD_PLAIN;
    return looks_structured(rec) ? SL_RECORD_STRUCTURED : SL_RECORD_PLAIN;
}

static bool is_json_type(const char *ct)
{
    if (!ct)
        return true; /* no content type: JSON if it parses */
    size_t n = strcspn(ct, ";");
    return (n == 16 && strncasecmp(ct, "application/json", 16) == 0) ||
           (n > 5 && strncasecmp(ct + n - 5, "+json", 5) == 0) ||
           (n == 9 && strncasecmp(ct, "text/json", 9) == 0);
}

/* Sets data (JSON when the type allows and it parses, else a string when
 * UTF-8, else data_base64) from the value. */
static int put_data(json_t *o, const uint8_t *v, size_t n, const char *ct)
{
    if (!v)
        return json_object_set_new(o, "data", json_null());
    if (is_json_type(ct)) {
        json_t *d = json_loadb((const char *)v, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        if (d)
            return json_object_set_new(o, "data", d);
    }
    json_t *s = json_stringn((const char *)v, n); /* NULL when not UTF-8 */
    if (s)
        return json_object_set_new(o, "data", s);
    sl_buf b = {0};
    int rc = sl_base64_append(&b, v, n, 0);
    if (!rc)
        rc = json_object_set_new(o, "data_base64", json_stringn((const char *)b.data, b.len));
    sl_buf_free(&b);
    return rc ? -1 : 0;
}

typedef struct bin_ctx {
    json_t *o;
    char ct[256];
    bool have_ct;
    int rc;
} bin_ctx;

static bool bin_header(const uint8_t *k, size_t klen, const uint8_t *v, size_t vlen, void *ctx)
{
    bin_ctx *b = ctx;
    if (klen > 3 && memcmp(k, "ce_", 3) == 0 && v) {
        char name[64];
        if (klen - 3 >= sizeof name)
            return true;
        memcpy(name, k + 3, klen - 3);
        name[klen - 3] = '\0';
        json_t *s = json_stringn((const char *)v, vlen);
        if (s && !json_object_get(b->o, name))
            b->rc |= json_object_set_new(b->o, name, s);
        else
            json_decref(s);
    } else if (klen == 12 && memcmp(k, "content-type", 12) == 0 && v && vlen < sizeof b->ct) {
        memcpy(b->ct, v, vlen);
        b->ct[vlen] = '\0';
        b->have_ct = true;
    }
    return true;
}

/* The event of a binary-mode or plain record, as stored JSON (no sluice*
 * members yet). */
static json_t *build(const sl_record *rec, sl_record_kind kind, const char *set,
                     int32_t partition, sl_error *err)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    int rc = 0;
    if (kind == SL_RECORD_BINARY) {
        bin_ctx b = {.o = o};
        each_header(rec, bin_header, &b);
        rc |= b.rc;
        static const char *const need[] = {"specversion", "id", "source", "type"};
        for (size_t i = 0; i < 4 && !rc; i++)
            if (!json_is_string(json_object_get(o, need[i]))) {
                json_decref(o);
                sl_error_set(err, SL_EINVAL, "binary-mode record lacks header ce_%s", need[i]);
                return NULL;
            }
        if (b.have_ct)
            rc |= json_object_set_new(o, "datacontenttype", json_string(b.ct));
        rc |= put_data(o, rec->value, rec->value_len, b.have_ct ? b.ct : NULL);
    } else {
        char id[300], src[300], ts[SL_TIME_RFC3339_MAX];
        snprintf(id, sizeof id, "%s-%d-%lld", set, partition, (long long)rec->offset);
        snprintf(src, sizeof src, "kafka://sluice/%s", set);
        rc |= json_object_set_new(o, "specversion", json_string("1.0"));
        rc |= json_object_set_new(o, "id", json_string(id));
        rc |= json_object_set_new(o, "source", json_string(src));
        rc |= json_object_set_new(o, "type", json_string(SL_RECORD_PLAIN_TYPE));
        if (rec->timestamp >= 0) {
            sl_time_format_rfc3339(rec->timestamp, ts);
            rc |= json_object_set_new(o, "time", json_string(ts));
        }
        const uint8_t *ctv;
        size_t ctl;
        char ct[256] = "";
        if (sl_record_header(rec, "content-type", &ctv, &ctl) && ctv && ctl < sizeof ct) {
            memcpy(ct, ctv, ctl);
            ct[ctl] = '\0';
            rc |= json_object_set_new(o, "datacontenttype", json_string(ct));
        }
        if (rec->key) {
            json_t *k = json_stringn((const char *)rec->key, rec->key_len);
            if (k) {
                rc |= json_object_set(o, "subject", k);
                rc |= json_object_set_new(o, "partitionkey", k);
            }
        }
        rc |= put_data(o, rec->value, rec->value_len, ct[0] ? ct : NULL);
    }
    if (rec->lane_len && !json_object_get(o, "lane"))
        rc |= json_object_set_new(o, "lane", json_stringn(rec->lane, rec->lane_len));
    if (rc) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int sl_record_event(const sl_record *rec, const char *set, int32_t partition, sl_buf *out,
                    sl_error *err)
{
    sl_record_kind kind = sl_record_kind_of(rec);
    if (kind == SL_RECORD_STRUCTURED) {
        if (!rec->value)
            return sl_error_set(err, SL_EINVAL, "structured record without a value");
        int rc = sl_event_decorate((const char *)rec->value, rec->value_len, set, partition,
                                   rec->offset, out);
        if (rc == SL_EINVAL)
            sl_error_set(err, rc, "stored event is not a JSON object");
        return rc;
    }
    json_t *o = build(rec, kind, set, partition, err);
    if (!o)
        return err && err->code ? err->code : SL_ENOMEM;
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s)
        return SL_ENOMEM;
    int rc = sl_event_decorate(s, strlen(s), set, partition, rec->offset, out);
    free(s);
    return rc;
}
