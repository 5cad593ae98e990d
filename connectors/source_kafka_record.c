/*
 * connectors/source_kafka_record.c — source.kafka: one record → one event,
 * the CloudEvents Kafka protocol binding in (docs/sources.md), run by the
 * consumer thread (source_kafka.c).
 *
 * Binary mode when the record has a ce_specversion header (ce_* headers →
 * attributes, content-type → datacontenttype, value → data, via
 * sl_event_from_binary()); structured mode when content-type is
 * application/cloudevents+json or the value is a valid CloudEvent;
 * otherwise the value is wrapped (configured type and source, id
 * TOPIC-PARTITION-OFFSET so that a record read again makes the same event,
 * the record time). A binary or structured event without an id gets the
 * same TOPIC-PARTITION-OFFSET id, for the same reason. A `lane` header sets
 * the lane; the key becomes partitionkey when the event has none. A record
 * that cannot become an event is refused here, with a reason the emit
 * thread hands to host->refused().
 */
#include "connectors/source_kafka_internal.h"

#include "core/base/base64.h"
#include "core/base/clock.h"
#include "core/base/json.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define MAX_CE_HEADERS SL_EVENT_MAX_MEMBERS

/* A header value for sl_event_from_binary(), which percent-decodes,
 * unquotes and trims spaces and tabs (the HTTP binding's rules): the Kafka
 * binding sends values as they are, so every '%' and '"' and the leading
 * and trailing spaces and tabs are percent-encoded first, into k->esc: the
 * attribute is then exactly the header's value. Sets *at to the value's
 * offset there and returns its length, or sets *at to (size_t)-1 when the
 * value needs no change. Returns (size_t)-1 out of memory. */
static size_t escape_value(kafka_source *k, const char *v, size_t len, size_t *at)
{
    *at = (size_t)-1;
    size_t lead = 0, trail = len;
    while (lead < len && (v[lead] == ' ' || v[lead] == '\t'))
        lead++;
    while (trail > lead && (v[trail - 1] == ' ' || v[trail - 1] == '\t'))
        trail--;
    if (lead == 0 && trail == len && !memchr(v, '%', len) && !memchr(v, '"', len))
        return len;
    *at = k->esc.len;
    for (size_t i = 0; i < len; i++) {
        int rc = v[i] == '%'                                ? sl_buf_append(&k->esc, "%25", 3)
                 : v[i] == '"'                              ? sl_buf_append(&k->esc, "%22", 3)
                 : (i < lead || i >= trail) && v[i] == ' '  ? sl_buf_append(&k->esc, "%20", 3)
                 : (i < lead || i >= trail) && v[i] == '\t' ? sl_buf_append(&k->esc, "%09", 3)
                                                            : sl_buf_append(&k->esc, &v[i], 1);
        if (rc)
            return (size_t)-1;
    }
    return k->esc.len - *at;
}

/* Whether [s, s + len) is a CloudEvents String: valid UTF-8 without the
 * code points the type refuses (U+0000–U+001F, U+007F–U+009F,
 * noncharacters), which the host would refuse the whole event for. */
static bool ce_string_ok(const char *s, size_t len)
{
    if (!sl_json_utf8_valid(s, len))
        return false;
    const unsigned char *p = (const unsigned char *)s, *e = p + len;
    while (p < e) {
        unsigned cp = *p;
        int n = cp < 0x80 ? 1 : cp >= 0xf0 ? 4 : cp >= 0xe0 ? 3 : 2;
        if (n > 1)
            cp &= 0x3fu >> (n - 1);
        for (int i = 1; i < n; i++)
            cp = cp << 6 | (p[i] & 0x3fu);
        p += n;
        if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || (cp >= 0xfdd0 && cp <= 0xfdef) ||
            (cp & 0xfffe) == 0xfffe)
            return false;
    }
    return true;
}

/* Refuses record m in the consumer thread: code (an sl_event_status name)
 * and the reason go with its item to the emit thread, which hands them to
 * host->refused(). Returns SL_EINVAL. */
static int refuse(kafka_source *k, const rd_kafka_message_t *m, const char *code, const char *fmt,
                  ...) __attribute__((format(printf, 4, 5)));
static int refuse(kafka_source *k, const rd_kafka_message_t *m, const char *code, const char *fmt,
                  ...)
{
    int n = snprintf(k->why, sizeof k->why,
                     "source.kafka: record %s/%d/%lld: ", rd_kafka_topic_name(m->rkt),
                     (int)m->partition, (long long)m->offset);
    if (n > 0 && (size_t)n < sizeof k->why) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(k->why + n, sizeof k->why - (size_t)n, fmt, ap);
        va_end(ap);
    }
    k->why_code = code;
    return SL_EINVAL;
}

/* The record headers sluice reads. */
typedef struct rec_headers {
    rd_kafka_headers_t *hdrs;
    bool binary;       /* a ce_specversion header */
    bool has_pkey;     /* a ce_partitionkey header */
    bool has_time;     /* a ce_time header */
    bool has_id;       /* a ce_id header */
    const char *ctype; /* content-type, NUL-terminated copy in k->ctb; NULL: none or unusable */
    const char *lane;  /* the lane header, NUL-terminated copy in k->lanebuf */
} rec_headers;

/* Reads m's headers into h. A content-type that is no CloudEvents String
 * (not UTF-8, control characters, NUL included) is left out: the default
 * applies, and the record is kept. A lane containing NUL, or longer than a
 * lane may be, is refused (SL_EINVAL, refuse()) rather than cut. Returns 0, SL_EINVAL or
 * SL_ENOMEM. */
static int read_headers(kafka_source *k, const rd_kafka_message_t *m, rec_headers *h)
{
    h->hdrs = NULL;
    h->binary = h->has_pkey = h->has_time = h->has_id = false;
    h->ctype = h->lane = NULL;
    if (rd_kafka_message_headers(m, &h->hdrs))
        return 0;
    const char *name;
    const void *val;
    size_t vl;
    for (size_t i = 0; !rd_kafka_header_get_all(h->hdrs, i, &name, &val, &vl); i++) {
        if (strncmp(name, "ce_", 3) == 0) {
            if (strcmp(name + 3, "specversion") == 0)
                h->binary = true;
            else if (strcmp(name + 3, "partitionkey") == 0)
                h->has_pkey = true;
            else if (strcmp(name + 3, "time") == 0)
                h->has_time = true;
            else if (strcmp(name + 3, "id") == 0)
                h->has_id = true;
        } else if (strcasecmp(name, "content-type") == 0 && val) {
            h->ctype = NULL;
            if (!ce_string_ok(val, vl))
                continue; /* left out: the default content type applies */
            k->ctb.len = 0;
            if (sl_buf_append(&k->ctb, val, vl) || sl_buf_append(&k->ctb, "", 1))
                return SL_ENOMEM;
            h->ctype = (const char *)k->ctb.data;
        } else if (strcasecmp(name, "lane") == 0) {
            if (val && memchr(val, '\0', vl))
                return refuse(k, m, "InvalidLane", "its lane header contains NUL");
            if (vl > SL_EVENT_LANE_MAX)
                return refuse(k, m, "InvalidLane",
                              "its lane header is %zu bytes long; a lane is at most %d", vl,
                              SL_EVENT_LANE_MAX);
            memcpy(k->lanebuf, val ? (const char *)val : "", vl);
            k->lanebuf[vl] = '\0';
            h->lane = k->lanebuf;
        }
    }
    return 0;
}

/* Whether the key can be partitionkey: a non-empty CloudEvents String (a
 * key with control characters, e.g. a Java IntegerSerializer's 00 00 00 2a,
 * would make the host refuse the whole event). */
static bool key_usable(const rd_kafka_message_t *m)
{
    return m->key && m->key_len && ce_string_ok(m->key, m->key_len);
}

/* The id of an event made from record m that has none of its own:
 * TOPIC-PARTITION-OFFSET, so that a record read again (after a crash, a
 * reset of the group's offsets) makes the same event and a consumer can
 * recognise the duplicate. A topic name needs no escaping. Returns the
 * length written to out (NUL-terminated). */
#define RECORD_ID_MAX (249 + 2 * 21 + 1)
static size_t record_id(const rd_kafka_message_t *m, char out[RECORD_ID_MAX])
{
    int n = snprintf(out, RECORD_ID_MAX, "%s-%d-%lld", rd_kafka_topic_name(m->rkt),
                     (int)m->partition, (long long)m->offset);
    return n > 0 && n < RECORD_ID_MAX ? (size_t)n : 0;
}

/* Binary mode: ce_* headers → a structured event appended to out. Returns
 * 0, SL_EINVAL (refuse(): the host never sees it), or SL_ENOMEM. */
static int conv_binary(kafka_source *k, const rd_kafka_message_t *m, const rec_headers *h,
                       sl_buf *out, sl_error *err)
{
    sl_event_header eh[MAX_CE_HEADERS + 3];
    size_t at[MAX_CE_HEADERS + 3];
    char names[MAX_CE_HEADERS][SL_EVENT_NAME_MAX + 4];
    size_t n = 0;
    int rc = 0;
    k->esc.len = 0;
    const char *name;
    const void *val;
    size_t vl;
    for (size_t i = 0; !rd_kafka_header_get_all(h->hdrs, i, &name, &val, &vl); i++) {
        if (strncmp(name, "ce_", 3) != 0 || !val)
            continue;
        size_t nl = strlen(name);
        if (n == MAX_CE_HEADERS || nl - 3 > SL_EVENT_NAME_MAX)
            return refuse(k, m, "InvalidEvent", "too many or too long ce_ headers");
        memcpy(names[n], "ce-", 3);
        memcpy(names[n] + 3, name + 3, nl - 3 + 1);
        eh[n].name = names[n];
        eh[n].name_len = nl;
        eh[n].value = val;
        if ((eh[n].value_len = escape_value(k, val, vl, &at[n])) == (size_t)-1)
            rc = SL_ENOMEM;
        n++;
    }
    if (!h->has_pkey && key_usable(m)) {
        eh[n].name = "ce-partitionkey";
        eh[n].name_len = 15;
        eh[n].value = m->key;
        if ((eh[n].value_len = escape_value(k, m->key, m->key_len, &at[n])) == (size_t)-1)
            rc = SL_ENOMEM;
        n++;
    }
    /* No ce_time: the record's timestamp, as for wrapped records (so that
     * a record read again makes the same event). */
    char ts[SL_TIME_RFC3339_MAX];
    int64_t ts_ms = rd_kafka_message_timestamp(m, NULL);
    size_t tsl = !h->has_time && ts_ms > 0 ? sl_time_format_rfc3339(ts_ms, ts) : 0;
    if (tsl) {
        eh[n].name = "ce-time";
        eh[n].name_len = 7;
        eh[n].value = ts;
        eh[n].value_len = tsl;
        at[n] = (size_t)-1;
        n++;
    }
    /* No ce_id: the record's coordinates, as for wrapped records. */
    char id[RECORD_ID_MAX];
    size_t idl = h->has_id ? 0 : record_id(m, id);
    if (idl) {
        eh[n].name = "ce-id";
        eh[n].name_len = 5;
        eh[n].value = id;
        eh[n].value_len = idl;
        at[n] = (size_t)-1;
        n++;
    }
    if (rc)
        return sl_error_set(err, rc, "source.kafka: out of memory");
    for (size_t i = 0; i < n; i++) /* k->esc is complete: its address is final */
        if (at[i] != (size_t)-1)
            eh[i].value = (const char *)k->esc.data + at[i];
    sl_event_limits lim = {.max_bytes = m->len + 1};
    sl_event_status st = sl_event_from_binary(eh, n, h->ctype, m->payload, m->len, &lim, out, err);
    if (st == SL_EVENT_NO_MEMORY)
        return sl_error_set(err, SL_ENOMEM, "source.kafka: out of memory");
    if (st != SL_EVENT_OK) /* this one never reaches the host */
        return refuse(k, m, sl_event_status_name(st), "%s",
                      err && err->msg[0] ? err->msg : sl_event_status_name(st));
    return 0;
}

/* Whether the object has an "id" member, null included (an "id": null is
 * an event without an id that the host refuses, not one to give ours: a
 * second "id" would be refused as a duplicate anyway). */
static bool has_id_member(const sl_json_tok *obj)
{
    sl_json_iter it;
    sl_json_tok key, val;
    sl_json_iter_init(&it, obj);
    while (sl_json_iter_member(&it, &key, &val))
        if (key.len == 4 && memcmp(key.p, "\"id\"", 4) == 0)
            return true;
    return false;
}

/* Structured mode: the value is the event, appended to out; the key
 * becomes partitionkey when the event has none, and an event without an id
 * gets the record's (record_id()) (k->ev parsed it, when parsed). Returns 0
 * or SL_ENOMEM. */
static int conv_structured(kafka_source *k, const rd_kafka_message_t *m, bool parsed, sl_buf *out)
{
    const char *v = m->payload;
    bool pkey = parsed && k->ev.partitionkey.type == SL_JSON_NONE && key_usable(m);
    bool noid = parsed && k->ev.id.type == SL_JSON_NONE && !has_id_member(&k->ev.object);
    if (!pkey && !noid)
        return sl_buf_append(out, v, m->len);
    size_t head = (size_t)(k->ev.object.p - v) + 1; /* up to and with '{' */
    int rc = sl_buf_append(out, v, head);
    /* SL_EINVAL cannot happen (key_usable, a topic name), but is kept apart from SL_ENOMEM */
    if (!rc && pkey)
        rc = sl_buf_append(out, "\"partitionkey\":", 15) ||
                     sl_json_put_string(out, m->key, m->key_len) || sl_buf_append(out, ",", 1)
                 ? SL_ENOMEM
                 : 0;
    if (!rc && noid) {
        char id[RECORD_ID_MAX];
        size_t idl = record_id(m, id);
        rc = sl_buf_append(out, "\"id\":", 5) || sl_json_put_string(out, id, idl) ||
                     sl_buf_append(out, ",", 1)
                 ? SL_ENOMEM
                 : 0;
    }
    if (!rc)
        rc = sl_buf_append(out, v + head, m->len - head) ? SL_ENOMEM : 0;
    return rc;
}

static bool is_ce_json(const char *ctype)
{
    return ctype && strncasecmp(ctype, "application/cloudevents+json", 28) == 0 &&
           (ctype[28] == '\0' || ctype[28] == ';' || ctype[28] == ' ');
}

/* A value that may be a structured CloudEvent: an object naming specversion. */
static bool looks_structured(const rd_kafka_message_t *m)
{
    const char *v = m->payload;
    size_t i = 0;
    while (i < m->len && (v[i] == ' ' || v[i] == '\t' || v[i] == '\n' || v[i] == '\r'))
        i++;
    return i < m->len && v[i] == '{' && memmem(v + i, m->len - i, "\"specversion\"", 13);
}

/* Appends the decimal text of v. */
static int put_int(sl_buf *b, long long v)
{
    char t[24], *e = t + sizeof t, *p = e;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do
        *--p = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0)
        *--p = '-';
    return sl_buf_append(b, p, (size_t)(e - p));
}

#define PUT(lit) sl_buf_append(b, lit, sizeof lit - 1)

/* A record that is no CloudEvent, wrapped as one, appended to b: the same
 * event the host's emit_data() makes (type and source configured, id
 * TOPIC-PARTITION-OFFSET, the record time, the key as partitionkey; data
 * as JSON when the value parses, else as text when it is UTF-8, else
 * data_base64), built here without printf: it is the hot path of a bridge. */
static int build_wrapped(kafka_source *k, const rd_kafka_message_t *m, const rec_headers *h,
                         sl_buf *b)
{
    const char *topic = rd_kafka_topic_name(m->rkt);
    size_t tl = strlen(topic); /* a valid topic name: nothing to escape */
    const char *v = m->payload ? m->payload : "";
    sl_json_tok tok;
    bool json =
        m->len && sl_json_validate(v, m->len, SL_EVENT_MAX_DEPTH_DEFAULT - 1, &tok, NULL) == 0;
    bool text = !json && sl_json_utf8_valid(v, m->len);
    /* rc: SL_ENOMEM, or SL_EINVAL from sl_json_put_string() (a string that
     * is not UTF-8: the checks above exclude it; kept apart so that it can
     * never pass for a lack of memory, which is retried). */
    int rc = PUT("{\"specversion\":\"1.0\",\"id\":\"") || sl_buf_append(b, topic, tl) || PUT("-") ||
                     put_int(b, m->partition) || PUT("-") || put_int(b, m->offset) ||
                     PUT("\",\"source\":")
                 ? SL_ENOMEM
                 : 0;
    if (!rc && k->source_json)
        rc = sl_buf_append(b, k->source_json, k->source_json_len) ? SL_ENOMEM : 0;
    else if (!rc)
        rc = PUT("\"kafka://") || sl_buf_append(b, topic, tl) || PUT("\"") ? SL_ENOMEM : 0;
    if (!rc)
        rc = PUT(",\"type\":") || sl_buf_append(b, k->type_json, k->type_json_len) ||
                     PUT(",\"datacontenttype\":")
                 ? SL_ENOMEM
                 : 0;
    if (!rc && h->ctype)
        rc = sl_json_put_string(b, h->ctype, strlen(h->ctype));
    else if (!rc)
        rc = (json   ? PUT("\"application/json\"")
              : text ? PUT("\"text/plain\"")
                     : PUT("\"application/octet-stream\""))
                 ? SL_ENOMEM
                 : 0;
    int64_t ts = rd_kafka_message_timestamp(m, NULL);
    if (!rc && ts > 0) {
        char t[SL_TIME_RFC3339_MAX];
        size_t n = sl_time_format_rfc3339(ts, t);
        if (n)
            rc = PUT(",\"time\":\"") || sl_buf_append(b, t, n) || PUT("\"") ? SL_ENOMEM : 0;
    }
    if (!rc && key_usable(m)) {
        rc = PUT(",\"partitionkey\":") ? SL_ENOMEM : 0;
        if (!rc)
            rc = sl_json_put_string(b, m->key, m->key_len);
    }
    if (!rc && json)
        rc = PUT(",\"data\":") || sl_buf_append(b, v, m->len) ? SL_ENOMEM : 0;
    else if (!rc && text)
        rc = PUT(",\"data\":") ? SL_ENOMEM : sl_json_put_string(b, v, m->len);
    else if (!rc)
        rc = PUT(",\"data_base64\":") || sl_base64_append(b, v, m->len, SL_BASE64_QUOTED) ? SL_ENOMEM
                                                                                          : 0;
    if (!rc)
        rc = PUT("}") ? SL_ENOMEM : 0;
    return rc;
}

#undef PUT

/* One record → one event's JSON appended to out (h: its headers, read).
 * Returns 0, SL_EINVAL (refused: refuse()), or SL_ENOMEM. */
static int convert(kafka_source *k, const rd_kafka_message_t *m, const rec_headers *h, sl_buf *out)
{
    sl_error err = {0};
    if (h->binary)
        return conv_binary(k, m, h, out, &err);
    bool ce_ct = is_ce_json(h->ctype);
    if (m->payload && (ce_ct || looks_structured(m))) {
        /* An event without an id is one: it gets the record's. */
        sl_event_limits lim = {.max_bytes = m->len + 1, .generate_ids = true};
        bool parsed = sl_event_parse(m->payload, m->len, &lim, &k->ev, NULL) == SL_EVENT_OK;
        if (parsed || ce_ct) /* with the CloudEvents type, the host says what is wrong */
            return conv_structured(k, m, parsed, out);
        /* Not a CloudEvent after all: wrapped like any value. */
    }
    int rc = build_wrapped(k, m, h, out);
    if (rc == SL_EINVAL)
        return refuse(k, m, "InvalidEvent", "cannot be wrapped: a string is not valid UTF-8");
    return rc;
}

/* With a lane configured, every event gets it (the host stamps it): a
 * record whose lane header names another lane is refused, as an event
 * naming another lane is. Returns 0 (h->lane cleared: the source's lane
 * applies), or SL_EINVAL (refuse()). */
static int lane_check(kafka_source *k, const rd_kafka_message_t *m, rec_headers *h)
{
    const char *lane = k->cfg->lane;
    if (!lane || !lane[0] || !h->lane)
        return 0;
    if (h->lane[0] && strcmp(h->lane, lane) != 0)
        return refuse(k, m, "LaneConflict",
                      "its lane header \"%s\" is not the source's lane \"%s\"",
                      sl_json_utf8_valid(h->lane, strlen(h->lane)) ? h->lane : "(not UTF-8)", lane);
    h->lane = NULL;
    return 0;
}

int sl__source_kafka_record(kafka_source *k, const rd_kafka_message_t *m, sl_buf *out,
                            const char **lane)
{
    rec_headers h;
    k->why_code = NULL;
    int rc = read_headers(k, m, &h);
    if (!rc)
        rc = lane_check(k, m, &h);
    if (!rc)
        rc = convert(k, m, &h, out);
    if (rc && rc != SL_ENOMEM && !k->why_code)
        refuse(k, m, "InvalidEvent", "cannot be converted (error %d)", rc);
    *lane = rc ? NULL : h.lane;
    return rc;
}
