/*
 * core/bus/event.c — CloudEvents 1.0: structured-mode parsing and validation,
 * the stored form, read decoration, HTTP binary mode, and UUIDv7 ids.
 *
 * Parsing is a single pass: the event object's members are walked here and
 * each value is validated by sl_json_value_from() as it goes, so the input is
 * read once and nothing is copied. After the first semantic problem the loop
 * keeps going for syntax only, because an input that is not JSON at all must
 * be reported as InvalidJson whatever else is wrong with it.
 */
#include "core/bus/event.h"
#include "core/base/base64.h"
#include "core/base/clock.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

const char *sl_event_status_name(sl_event_status status)
{
    static const char *const names[SL_EVENT_STATUS_COUNT] = {
#define XX(code, name) name,
        SL_EVENT_STATUS_MAP(XX)
#undef XX
    };
    return (unsigned)status < SL_EVENT_STATUS_COUNT ? names[status] : "Unknown";
}

/* Members the parser knows by name, and where their tokens go in sl_event
 * (the sluice* members are dropped, so theirs is a placeholder). */
#define KNOWN(X)                                                                                   \
    X(SPECVERSION, "specversion", specversion)                                                     \
    X(ID, "id", id)                                                                                \
    X(SOURCE, "source", source)                                                                    \
    X(TYPE, "type", type)                                                                          \
    X(TIME, "time", time)                                                                          \
    X(SUBJECT, "subject", subject)                                                                 \
    X(DATACONTENTTYPE, "datacontenttype", datacontenttype)                                         \
    X(DATASCHEMA, "dataschema", dataschema)                                                        \
    X(DATA, "data", data)                                                                          \
    X(DATA_BASE64, "data_base64", data_base64)                                                     \
    X(LANE, "lane", lane_attr)                                                                     \
    X(PARTITIONKEY, "partitionkey", partitionkey)                                                  \
    X(SLUICESET, "sluiceset", object)                                                              \
    X(SLUICEPARTITION, "sluicepartition", object)                                                  \
    X(SLUICEOFFSET, "sluiceoffset", object)

enum {
#define X(id, name, field) A_##id,
    KNOWN(X)
#undef X
        A_COUNT
};

static const struct {
    const char *name;
    size_t len, off;
} known[A_COUNT] = {
#define X(id, name, field) {name, sizeof name - 1, offsetof(sl_event, field)},
    KNOWN(X)
#undef X
};

/* Which known member a name is, or -1. Length and first byte go first so
 * that memcmp() runs at most once or twice. */
static int lookup(const char *n, size_t len)
{
    for (int a = 0; a < A_COUNT; a++)
        if (known[a].len == len && known[a].name[0] == n[0] && memcmp(known[a].name, n, len) == 0)
            return a;
    return -1;
}

static sl_json_tok *field(sl_event *ev, int a)
{
    return (sl_json_tok *)((char *)ev + known[a].off);
}

static inline bool is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* ---- small validators ---------------------------------------------------- */

static bool lane_ok(const char *s, size_t n)
{
    if (n > SL_EVENT_LANE_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return false;
    return true;
}

static bool name_ok(const char *s, size_t n)
{
    if (n == 0 || n > SL_EVENT_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9')))
            return false;
    return true;
}

/* RFC 7230 token characters. */
static bool tchar(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && memchr("!#$%&'*+-.^_`|~", c, 15));
}

/* RFC 2046 "type/subtype", then the end or parameters. s may be a prefix. */
static bool media_type_ok(const char *s, size_t n)
{
    size_t i = 0, j;
    while (i < n && tchar(s[i]))
        i++;
    if (i == 0 || i >= n || s[i] != '/')
        return false;
    for (j = ++i; i < n && tchar(s[i]); i++) {
    }
    return i > j && (i == n || s[i] == ';' || s[i] == ' ' || s[i] == '\t');
}

/* An absolute URI starts with a scheme: ALPHA *(ALPHA / DIGIT / + - .) ":". */
static bool absolute_uri_ok(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && (((s[i] | 0x20) >= 'a' && (s[i] | 0x20) <= 'z') ||
                     (i && ((s[i] >= '0' && s[i] <= '9') || memchr("+-.", s[i], 3)))))
        i++;
    return i > 0 && i < n && s[i] == ':';
}

static bool int32_ok(const sl_json_tok *t)
{
    if (!(t->flags & SL_JSON_INTEGER))
        return false;
    const char *p = t->p;
    size_t n = t->len;
    bool neg = *p == '-';
    p += neg, n -= neg;
    if (n > 10)
        return false;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = v * 10 + (p[i] - '0');
    return v <= (neg ? 2147483648LL : 2147483647LL);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (char)(c | 0x20);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The CloudEvents String type refuses controls and noncharacters: returns
 * the first offending code point of a validated string token, or -1. */
static long bad_char(const sl_json_tok *t)
{
    const unsigned char *p = (const unsigned char *)t->p + 1, *e = p + t->len - 2;
    if (!(t->flags & SL_JSON_ESCAPED)) {
        /* No escapes and (validated) no raw controls: only bytes >= 0x7f
         * need a closer look. */
        const unsigned char *q = p;
        while (e - q >= 8) {
            uint64_t v;
            memcpy(&v, q, 8);
            if ((v | (v + 0x0101010101010101ull)) & 0x8080808080808080ull)
                break;
            q += 8;
        }
        while (q < e && *q < 0x7f)
            q++;
        if (q == e)
            return -1;
    }
    char chunk[256];
    size_t pos = 0, n;
    while ((n = sl_json_unescape_part(t, &pos, chunk, sizeof chunk)) > 0) {
        for (p = (const unsigned char *)chunk, e = p + n; p < e;) {
            unsigned cp = *p;
            int k = cp < 0x80 ? 1 : cp >= 0xf0 ? 4 : cp >= 0xe0 ? 3 : 2;
            if (k > 1)
                cp &= 0x3fu >> (k - 1);
            for (int i = 1; i < k; i++)
                cp = cp << 6 | (p[i] & 0x3fu);
            p += k;
            if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || (cp >= 0xfdd0 && cp <= 0xfdef) ||
                (cp & 0xfffe) == 0xfffe)
                return cp;
        }
    }
    return -1;
}

/* RFC 4648 base64 with padding; NULL if valid, else the reason. */
static const char *base64_problem(const sl_json_tok *t)
{
    char chunk[256];
    size_t pos = 0, total = 0, pad = 0, n;
    while ((n = sl_json_unescape_part(t, &pos, chunk, sizeof chunk)) > 0) {
        for (size_t i = 0; i < n; i++, total++) {
            if (chunk[i] == '=')
                pad++;
            else if (pad)
                return "'=' padding may only appear at the end";
            else if (sl_base64_value((unsigned char)chunk[i]) < 0)
                return "not a base64 character";
        }
    }
    if (total % 4 || pad > 2)
        return "base64 length must be a multiple of 4 with at most two '='";
    return NULL;
}

/* ---- parsing --------------------------------------------------------------- */

typedef struct pstate {
    sl_event *ev;
    sl_error *err;
    sl_event_status st; /* first semantic problem */
    uint32_t seen;      /* known members seen, bit per A_* */
    size_t n_names;     /* other member names, for duplicate detection */
    struct {
        const char *p;
        size_t len;
    } names[SL_EVENT_MAX_MEMBERS];
} pstate;

__attribute__((format(printf, 3, 4))) static void problem(pstate *ps, sl_event_status st,
                                                          const char *fmt, ...)
{
    if (ps->st != SL_EVENT_OK)
        return;
    ps->st = st;
    if (ps->err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ps->err->msg, sizeof ps->err->msg, fmt, ap);
        va_end(ap);
        ps->err->code = SL_EINVAL;
    }
}

/* A token as it appears in the input, shortened for a message. */
static const char *show(const sl_json_tok *t, char buf[96])
{
    if (t->type == SL_JSON_OBJECT || t->type == SL_JSON_ARRAY) {
        snprintf(buf, 96, "an %s", sl_json_type_name(t->type)); /* not its whole text */
        return buf;
    }
    size_t n = t->len;
    if (n <= 64) {
        memcpy(buf, t->p, n);
        buf[n] = '\0';
        return buf;
    }
    n = 60;
    while (n > 0 && ((unsigned char)t->p[n] & 0xc0) == 0x80)
        n--; /* do not cut a UTF-8 character */
    memcpy(buf, t->p, n);
    memcpy(buf + n, "…", sizeof "…");
    return buf;
}

/* Decodes a short string token into buf; false if it needs more than cap. */
static bool decode_small(const sl_json_tok *t, char *buf, size_t cap, size_t *len)
{
    if (!(t->flags & SL_JSON_ESCAPED)) {
        if (t->len - 2 > cap)
            return false;
        memcpy(buf, t->p + 1, t->len - 2);
        *len = t->len - 2;
        return true;
    }
    return sl_json_unescape(t, buf, cap, len) == 0;
}

#define WHY(...) (snprintf(why, 192, __VA_ARGS__), why)

/* What is wrong with a string attribute value, or NULL. */
static const char *string_problem(const sl_json_tok *v, bool nonempty, char why[192])
{
    char b[96];
    if (v->type != SL_JSON_STRING)
        return WHY("must be a string, not %s", show(v, b));
    if (nonempty && v->len == 2)
        return "must be a non-empty string";
    long cp = bad_char(v);
    if (cp >= 0)
        return WHY("contains U+%04lX, which CloudEvents strings do not allow (control "
                   "characters and noncharacters)",
                   (unsigned long)cp);
    return NULL;
}

/* Checks the value of member idx, known attribute a (-1 for an extension),
 * and records it in ev. Returns NULL or what is wrong. */
static const char *value_problem(sl_event *ev, int a, const sl_json_tok *v, int idx, char why[192])
{
    char s[256], b[96];
    size_t n, pos = 0;
    const char *bad;
    switch (a) {
    case A_DATA:
        break;
    case A_DATA_BASE64:
        if ((bad = string_problem(v, false, why)))
            return bad;
        if ((bad = base64_problem(v)))
            return WHY("invalid base64: %s", bad);
        break;
    case A_SPECVERSION:
        if ((bad = string_problem(v, true, why)))
            return bad;
        if (!decode_small(v, s, 8, &n) || n != 3 || memcmp(s, "1.0", 3) != 0)
            return WHY("must be \"1.0\" (the version sluice supports), not %s", show(v, b));
        break;
    case A_TIME:
        if ((bad = string_problem(v, true, why)))
            return bad;
        if (!decode_small(v, s, sizeof s, &n) || sl_time_parse_rfc3339(s, n, &ev->time_ms))
            return WHY("%s is not an RFC 3339 timestamp such as \"2024-05-01T12:00:00Z\"",
                       show(v, b));
        ev->has_time = true;
        break;
    case A_LANE:
        if (v->type != SL_JSON_STRING || !decode_small(v, ev->lane, SL_EVENT_LANE_MAX, &n) ||
            !lane_ok(ev->lane, n)) {
            ev->lane[0] = '\0';
            return WHY("%s is not a lane name (\"\" for the base lane, or 1-%d of a-z, 0-9 and "
                       "'-')",
                       show(v, b), SL_EVENT_LANE_MAX);
        }
        ev->lane[n] = '\0';
        ev->lane_member = idx;
        break;
    case A_DATACONTENTTYPE:
    case A_DATASCHEMA:
        if ((bad = string_problem(v, true, why)))
            return bad;
        n = sl_json_unescape_part(v, &pos, s, sizeof s); /* a prefix is enough */
        if (a == A_DATACONTENTTYPE && !media_type_ok(s, n))
            return WHY("%s is not a media type such as \"application/json\"", show(v, b));
        if (a == A_DATASCHEMA && !absolute_uri_ok(s, n))
            return WHY("%s is not an absolute URI", show(v, b));
        break;
    case -1: /* an extension */
        if (v->type == SL_JSON_STRING)
            return string_problem(v, false, why);
        if (v->type == SL_JSON_NUMBER && !int32_ok(v))
            return WHY("%s is not an integer in the 32-bit range (the only numbers CloudEvents "
                       "allows)",
                       show(v, b));
        if (v->type != SL_JSON_NUMBER && v->type != SL_JSON_TRUE && v->type != SL_JSON_FALSE)
            return WHY("must be a string, integer or boolean, not %s", show(v, b));
        return NULL;
    default: /* id, source, type, subject, partitionkey */
        if ((bad = string_problem(v, a != A_PARTITIONKEY, why)))
            return bad;
    }
    *field(ev, a) = *v;
    return NULL;
}
#undef WHY

/* Validates one member of the event object; idx is its position. */
static void member(pstate *ps, const sl_json_tok *k, const sl_json_tok *v, int idx)
{
    sl_event *ev = ps->ev;
    char tmp[SL_EVENT_NAME_MAX], why[192];
    const char *name = k->p + 1;
    size_t nlen = k->len - 2;
    if (ps->st != SL_EVENT_OK)
        return;
    if (idx >= SL_EVENT_MAX_MEMBERS) {
        problem(ps, SL_EVENT_INVALID_EVENT, "an event may have at most %d members",
                SL_EVENT_MAX_MEMBERS);
        return;
    }
    if (k->flags & SL_JSON_ESCAPED) {
        if (sl_json_unescape(k, tmp, sizeof tmp, &nlen) == 0)
            name = tmp;
        else
            nlen = 0; /* too long to be a name */
    }
    int a = nlen ? lookup(name, nlen) : -1;
    if (a >= 0) {
        if (ps->seen & 1u << a) {
            problem(ps, SL_EVENT_INVALID_EVENT, "attribute \"%s\" appears more than once",
                    known[a].name);
            return;
        }
        ps->seen |= 1u << a;
    } else {
        if (!name_ok(name, nlen)) {
            problem(ps, SL_EVENT_INVALID_EVENT,
                    "member %s: not a valid attribute name (lowercase letters a-z and digits "
                    "only, at most %d)",
                    show(k, why), SL_EVENT_NAME_MAX);
            return;
        }
        for (size_t i = 0; i < ps->n_names; i++) {
            if (ps->names[i].len == nlen && memcmp(ps->names[i].p, name, nlen) == 0) {
                problem(ps, SL_EVENT_INVALID_EVENT, "attribute \"%.*s\" appears more than once",
                        (int)nlen, name);
                return;
            }
        }
        if (name == tmp) { /* keep the decoded name alive with the event */
            if (ev->scratch_used + nlen > sizeof ev->scratch) {
                problem(ps, SL_EVENT_INVALID_EVENT, "too many escaped member names");
                return;
            }
            name = memcpy(ev->scratch + ev->scratch_used, tmp, nlen);
            ev->scratch_used += nlen;
        }
        ps->names[ps->n_names].p = name;
        ps->names[ps->n_names++].len = nlen;
    }
    /* null means unset (JSON format §2.2); sluice* are assigned on read. */
    if ((v->type == SL_JSON_NULL && a != A_DATA) || a >= A_SLUICESET) {
        ev->drop |= 1ull << idx;
        return;
    }
    const char *bad = value_problem(ev, a, v, idx, why);
    if (bad) {
        problem(ps, a == A_LANE ? SL_EVENT_INVALID_LANE : SL_EVENT_INVALID_EVENT,
                "attribute \"%.*s\": %s", (int)nlen, name, bad);
        return;
    }
    if (a < 0) {
        ev->ext[ev->n_ext].name = name;
        ev->ext[ev->n_ext].name_len = nlen;
        ev->ext[ev->n_ext++].value = *v;
    }
}

/* Skips whitespace, noting in *spaced that there was some. */
static inline const char *skip_ws(const char *p, const char *end, uint32_t *spaced)
{
    if (p < end && is_ws(*p))
        *spaced = SL_JSON_SPACED;
    while (p < end && is_ws(*p))
        p++;
    return p;
}

static sl_event_status syntax(sl_error *err, const char *json, const char *p, const char *end,
                              const char *expected)
{
    if (p >= end)
        sl_error_set(err, SL_EPARTIAL, "byte %zu: unexpected end of input inside the event",
                     (size_t)(p - json));
    else if ((unsigned char)*p > 0x20 && (unsigned char)*p < 0x7f)
        sl_error_set(err, SL_EPARSE, "byte %zu: expected %s, found '%c'", (size_t)(p - json),
                     expected, *p);
    else
        sl_error_set(err, SL_EPARSE, "byte %zu: expected %s, found byte 0x%02x", (size_t)(p - json),
                     expected, (unsigned char)*p);
    return SL_EVENT_INVALID_JSON;
}

/* Fills ev->key from partitionkey, else subject. */
static void routing_key(sl_event *ev)
{
    const sl_json_tok *t = ev->partitionkey.type ? &ev->partitionkey
                           : ev->subject.type    ? &ev->subject
                                                 : NULL;
    if (!t)
        return;
    ev->key = t->p + 1;
    ev->key_len = t->len - 2;
    size_t n, room = sizeof ev->scratch - ev->scratch_used;
    if ((t->flags & SL_JSON_ESCAPED) &&
        sl_json_unescape(t, ev->scratch + ev->scratch_used, room, &n) == 0) {
        ev->key = ev->scratch + ev->scratch_used;
        ev->key_len = n;
        ev->scratch_used += n;
    }
}

sl_event_status sl_event_parse(const char *json, size_t len, const sl_event_limits *lim,
                               sl_event *ev, sl_error *err)
{
    size_t max_bytes = lim && lim->max_bytes ? lim->max_bytes : SL_EVENT_MAX_BYTES_DEFAULT;
    int max_depth = lim && lim->max_depth > 0 ? lim->max_depth : SL_EVENT_MAX_DEPTH_DEFAULT;
    if (len > max_bytes) {
        sl_error_set(err, SL_ETOOBIG, "event is %zu bytes; the limit is %zu", len, max_bytes);
        return SL_EVENT_TOO_LARGE;
    }
    memset(ev, 0, offsetof(sl_event, ext));
    ev->lane_member = -1;
    pstate ps;
    ps.ev = ev, ps.err = err, ps.st = SL_EVENT_OK, ps.seen = 0, ps.n_names = 0;

    const char *p = json, *end = json + len;
    while (p < end && is_ws(*p))
        p++;
    if (p >= end || *p != '{') {
        sl_json_tok t;
        if (sl_json_validate(json, len, max_depth, &t, err))
            return SL_EVENT_INVALID_JSON;
        sl_error_set(err, SL_EINVAL, "an event must be a JSON object, not %s%s",
                     t.type == SL_JSON_ARRAY ? "an " : "a ", sl_json_type_name(t.type));
        return SL_EVENT_INVALID_EVENT;
    }
    const char *start = p++;
    uint32_t spaced = 0;
    int idx = 0;
#define WS() p = skip_ws(p, end, &spaced)
    WS();
    if (p < end && *p == '}') {
        p++;
    } else {
        for (;;) {
            sl_json_tok k, v;
            if (p >= end || *p != '"')
                return syntax(err, json, p, end, "a member name (string)");
            if (sl_json_value_from(json, p, end, 0, &k, &p, err))
                return SL_EVENT_INVALID_JSON;
            WS();
            if (p >= end || *p != ':')
                return syntax(err, json, p, end, "':' after a member name");
            p++;
            WS();
            if (sl_json_value_from(json, p, end, max_depth - 1, &v, &p, err)) {
                if (err && strstr(err->msg, "nesting deeper")) /* count the event object too */
                    sl_error_set(err, SL_EPARSE, "byte %zu: nesting deeper than %d level%s",
                                 (size_t)(p - json), max_depth, max_depth == 1 ? "" : "s");
                return SL_EVENT_INVALID_JSON;
            }
            spaced |= v.flags & SL_JSON_SPACED;
            member(&ps, &k, &v, idx++);
            WS();
            if (p < end && *p == ',') {
                p++;
                WS();
                continue;
            }
            if (p < end && *p == '}') {
                p++;
                break;
            }
            return syntax(err, json, p, end, "',' or '}'");
        }
    }
#undef WS
    ev->object.type = SL_JSON_OBJECT;
    ev->object.flags = spaced;
    ev->object.p = start;
    ev->object.len = (size_t)(p - start);
    while (p < end && is_ws(*p))
        p++;
    if (p != end)
        return syntax(err, json, p, end, "the end of the event");
    if (ps.st != SL_EVENT_OK)
        return ps.st;

    if (ev->data.type && ev->data_base64.type) {
        sl_error_set(err, SL_EINVAL, "an event may carry \"data\" or \"data_base64\", not both");
        return SL_EVENT_INVALID_EVENT;
    }
    static const int required[] = {A_SPECVERSION, A_ID, A_SOURCE, A_TYPE};
    char missing[96] = "";
    size_t n = 0, count = 0;
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        int a = required[i];
        if (field(ev, a)->type || (a == A_ID && lim && lim->generate_ids))
            continue;
        n += (size_t)snprintf(missing + n, sizeof missing - n, "%s\"%s\"", count++ ? ", " : "",
                              known[a].name);
    }
    if (count) {
        sl_error_set(err, SL_EINVAL, "missing required attribute%s %s", count > 1 ? "s" : "",
                     missing);
        return SL_EVENT_MISSING_ATTRIBUTE;
    }
    routing_key(ev);
    return SL_EVENT_OK;
}

sl_event_status sl_event_apply_lane(sl_event *ev, const char *lane, sl_error *err)
{
    if (!lane || !*lane)
        return SL_EVENT_OK;
    size_t n = strlen(lane);
    if (!lane_ok(lane, n)) {
        bool printable = n <= 40;
        for (size_t i = 0; i < n && printable; i++)
            printable = lane[i] >= 0x20 && lane[i] < 0x7f && lane[i] != '"';
        sl_error_set(err, SL_EINVAL,
                     "the lane %s%s%sset for the request is not a lane name (1-%d of a-z, 0-9 "
                     "and '-')",
                     printable ? "\"" : "", printable ? lane : "", printable ? "\" " : "",
                     SL_EVENT_LANE_MAX);
        return SL_EVENT_INVALID_LANE;
    }
    if (ev->lane[0]) {
        if (strcmp(ev->lane, lane) == 0)
            return SL_EVENT_OK;
        sl_error_set(err, SL_EINVAL,
                     "the event's lane \"%s\" differs from the lane \"%s\" set for the request",
                     ev->lane, lane);
        return SL_EVENT_LANE_CONFLICT;
    }
    memcpy(ev->lane, lane, n + 1);
    ev->lane_applied = true;
    if (ev->lane_member >= 0)
        ev->drop |= 1ull << ev->lane_member; /* the explicit "" is replaced */
    return SL_EVENT_OK;
}

/* ---- the stored form ----------------------------------------------------- */

static void put(sl_buf *out, const char *s, size_t n)
{
    memcpy(out->data + out->len, s, n); /* room was reserved by the caller */
    out->len += n;
}

int sl_event_encode(const sl_event *ev, const sl_event_fill *fill, sl_buf *out)
{
    const sl_json_tok *o = &ev->object;
    size_t mark = out->len;
    /* The fills need at most ~120 bytes; compaction never grows the input. */
    if (sl_buf_reserve(out, o->len + 160))
        return SL_ENOMEM;
    if (!ev->drop && !(o->flags & SL_JSON_SPACED)) {
        put(out, o->p, o->len - 1);
    } else if (!ev->drop) {
        sl_json_compact(o->p, o->len, out); /* cannot fail: reserved */
        out->len--;
    } else {
        sl_json_iter it;
        sl_json_tok k, v;
        int idx = 0;
        put(out, "{", 1);
        sl_json_iter_init(&it, o);
        for (; sl_json_iter_member(&it, &k, &v); idx++) {
            if (ev->drop >> idx & 1)
                continue;
            if (out->len > mark + 1)
                put(out, ",", 1);
            put(out, k.p, k.len);
            put(out, ":", 1);
            sl_json_compact(v.p, v.len, out);
        }
    }
    bool comma = out->len > mark + 1;
    if (!ev->id.type) {
        char id[37];
        sl_event_uuid7(fill->now_ms, id);
        put(out, ",\"id\":\"" + !comma, 7 - !comma);
        put(out, id, 36);
        put(out, "\"", 1);
        comma = true;
    }
    if (!ev->has_time) {
        char t[SL_TIME_RFC3339_MAX];
        size_t tl = sl_time_format_rfc3339(fill->now_ms, t);
        put(out, ",\"time\":\"" + !comma, 9 - !comma);
        put(out, t, tl);
        put(out, "\"", 1);
        comma = true;
    }
    if (ev->lane_applied) {
        put(out, ",\"lane\":\"" + !comma, 9 - !comma);
        put(out, ev->lane, strlen(ev->lane));
        put(out, "\"", 1);
    }
    put(out, "}", 1);
    return 0;
}

int sl_event_decorate(const char *stored, size_t len, const char *set, int32_t partition,
                      int64_t offset, sl_buf *out)
{
    if (len < 2 || stored[0] != '{' || stored[len - 1] != '}')
        return SL_EINVAL;
    size_t mark = out->len;
    char tail[96]; /* 36 bytes of text + an int32 + an int64 always fit */
    int rc = sl_buf_append(out, stored, len - 1);
    if (!rc)
        rc = sl_buf_append(out, len > 2 ? ",\"sluiceset\":" : "\"sluiceset\":", len > 2 ? 13 : 12);
    if (!rc)
        rc = sl_json_put_string(out, set, strlen(set));
    if (!rc)
        rc = sl_buf_append(out, tail,
                           (size_t)snprintf(tail, sizeof tail,
                                            ",\"sluicepartition\":%d,\"sluiceoffset\":%lld}",
                                            (int)partition, (long long)offset));
    if (rc)
        out->len = mark;
    return rc;
}

/* ---- HTTP binary mode ---------------------------------------------------- */

static const char oom[] = "out of memory";

/* Decodes one header value into out: optional whitespace trimmed, a
 * double-quoted value unquoted (RFC 7230 §3.2.6), then one round of
 * percent-decoding (HTTP binding §3.1.3.2). Returns NULL, oom, or the reason
 * the value is invalid. */
static const char *header_value(const char *v, size_t n, sl_buf *out)
{
    while (n && (*v == ' ' || *v == '\t'))
        v++, n--;
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    out->len = 0;
    if (sl_buf_reserve(out, n + 1))
        return oom;
    char *w = (char *)out->data;
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
        for (size_t i = 1; i + 1 < n; i++)
            *w++ = v[i] == '\\' && i + 2 < n ? v[++i] : v[i];
    } else {
        memcpy(w, v, n);
        w += n;
    }
    /* Percent-decoding in place: the output never outgrows the input. */
    char *r = (char *)out->data, *e = w;
    w = r;
    for (; r < e; r++) {
        if (*r != '%') {
            *w++ = *r;
            continue;
        }
        int hi = e - r > 2 ? hexval(r[1]) : -1, lo = e - r > 2 ? hexval(r[2]) : -1;
        if (hi < 0 || lo < 0)
            return "invalid percent-encoding (expected %XX with two hex digits)";
        *w++ = (char)(hi << 4 | lo);
        r += 2;
    }
    out->len = (size_t)(w - (char *)out->data);
    if (!sl_json_utf8_valid((const char *)out->data, out->len))
        return "the percent-decoded value is not valid UTF-8";
    return NULL;
}

enum { BODY_BINARY, BODY_JSON, BODY_TEXT };

/* Whether the parameters of a media type (the text after its first ';')
 * name a charset, and whether that charset is UTF-8 (or its subset
 * US-ASCII): text in another charset is kept as bytes (data_base64), since
 * a JSON string would have to be transcoded and would not give the same
 * bytes back. */
static void ct_charset(const char *params, bool *given, bool *utf8)
{
    *given = *utf8 = false;
    for (const char *p = params; p && (p = strchr(p, ';'));) {
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        if (strncasecmp(p, "charset=", 8) != 0)
            continue;
        p += 8;
        bool q = *p == '"';
        p += q;
        size_t n = strcspn(p, q ? "\"" : "; \t");
        *given = true;
        *utf8 = (n == 5 && strncasecmp(p, "utf-8", 5) == 0) ||
                (n == 4 && strncasecmp(p, "utf8", 4) == 0) ||
                (n == 8 && strncasecmp(p, "us-ascii", 8) == 0);
        return;
    }
}

/* What binary mode makes of a body of media type ct: JSON for a JSON
 * type (subtype json or *+json, as the CloudEvents JSON format defines
 * it); text for a textual type: type text, XML (subtype xml or *+xml), a few
 * other text formats, or any type with charset=utf-8; else bytes. The
 * caller checks the body (valid JSON, valid UTF-8) and falls back to
 * bytes. */
static int body_kind(const char *ct)
{
    if (!ct)
        return BODY_BINARY;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    size_t n = strcspn(ct, "; \t");
    const char *slash = memchr(ct, '/', n);
    if (!slash)
        return BODY_BINARY;
    size_t tl = (size_t)(slash - ct), sl = n - tl - 1;
    const char *sub = slash + 1;
    bool cs_given, cs_utf8;
    ct_charset(ct + n, &cs_given, &cs_utf8);
    if ((sl == 4 && strncasecmp(sub, "json", 4) == 0) ||
        (sl > 5 && strncasecmp(sub + sl - 5, "+json", 5) == 0))
        return BODY_JSON; /* JSON is UTF-8 (RFC 8259): a charset does not matter */
    if (cs_given && !cs_utf8)
        return BODY_BINARY;
    if (cs_given || (tl == 4 && strncasecmp(ct, "text", 4) == 0))
        return BODY_TEXT;
    static const char *const text_subtypes[] = {
        "xml",  "javascript", "ecmascript", "x-www-form-urlencoded",
        "yaml", "x-yaml",     "toml",       "graphql",
        "sql",  "csv",        NULL};
    for (size_t i = 0; text_subtypes[i]; i++)
        if (strlen(text_subtypes[i]) == sl && strncasecmp(sub, text_subtypes[i], sl) == 0)
            return BODY_TEXT;
    if ((sl > 4 && strncasecmp(sub + sl - 4, "+xml", 4) == 0) ||
        (sl > 5 && strncasecmp(sub + sl - 5, "+yaml", 5) == 0))
        return BODY_TEXT;
    return BODY_BINARY;
}

/* Appends "name": to the object started at mark, after a comma unless it is
 * the first member. Returns 0, SL_EINVAL (name not UTF-8) or SL_ENOMEM. */
static int put_name(sl_buf *out, size_t mark, const char *name, size_t n)
{
    int rc = out->len > mark + 1 ? sl_buf_append(out, ",", 1) : 0;
    if (!rc)
        rc = sl_json_put_string(out, name, n);
    return rc ? rc : sl_buf_append(out, ":", 1);
}

sl_event_status sl_event_from_binary(const sl_event_header *hdrs, size_t n,
                                     const char *content_type, const char *body, size_t body_len,
                                     const sl_event_limits *lim, sl_buf *json_out, sl_error *err)
{
    size_t max_bytes = lim && lim->max_bytes ? lim->max_bytes : SL_EVENT_MAX_BYTES_DEFAULT;
    int max_depth = lim && lim->max_depth > 0 ? lim->max_depth : SL_EVENT_MAX_DEPTH_DEFAULT;
    if (body_len > max_bytes) {
        sl_error_set(err, SL_ETOOBIG, "body is %zu bytes; the event limit is %zu", body_len,
                     max_bytes);
        return SL_EVENT_TOO_LARGE;
    }
    size_t mark = json_out->len, wlen = 0;
    sl_buf val = SL_BUF_INIT;
    const char *why = NULL, *what = NULL; /* a problem, and the header it is in */
    int rc = sl_buf_append(json_out, "{", 1);
    for (size_t i = 0; i < n && !rc && !why; i++) {
        const sl_event_header *h = &hdrs[i];
        if (h->name_len <= 3 || strncasecmp(h->name, "ce-", 3) != 0)
            continue;
        char name[SL_EVENT_NAME_MAX];
        size_t nl = h->name_len - 3;
        what = h->name, wlen = h->name_len > 64 ? 64 : h->name_len;
        if (nl > sizeof name) {
            why = "the name is too long";
            break;
        }
        for (size_t k = 0; k < nl; k++) {
            char c = h->name[3 + k];
            name[k] = c >= 'A' && c <= 'Z' ? (char)(c + 32) : c;
        }
        if (nl == 15 && memcmp(name, "datacontenttype", 15) == 0)
            why = "not allowed in binary mode (the Content-Type header carries it)";
        else if ((nl == 4 && memcmp(name, "data", 4) == 0) ||
                 (nl == 11 && memcmp(name, "data_base64", 11) == 0))
            why = "not allowed (the data travels in the body)";
        else if (!(why = header_value(h->value, h->value_len, &val)) &&
                 (rc = put_name(json_out, mark, name, nl)) == SL_EINVAL)
            why = "the name is not valid UTF-8", rc = 0;
        if (!why && !rc)
            rc = sl_json_put_string(json_out, (const char *)val.data, val.len);
    }
    if (!rc && !why && content_type && *content_type) {
        rc = put_name(json_out, mark, "datacontenttype", 15);
        if (!rc && sl_json_put_string(json_out, content_type, strlen(content_type)) == SL_EINVAL)
            why = "not valid UTF-8", what = "Content-Type", wlen = 12;
    }
    if (!rc && !why && body_len > 0) {
        int kind = body_kind(content_type);
        sl_json_tok t;
        if (kind == BODY_JSON && sl_json_validate(body, body_len, max_depth - 1, &t, NULL) != 0)
            kind = BODY_BINARY;
        if (kind == BODY_TEXT && !sl_json_utf8_valid(body, body_len))
            kind = BODY_BINARY;
        rc = kind == BODY_BINARY ? put_name(json_out, mark, "data_base64", 11)
                                 : put_name(json_out, mark, "data", 4);
        if (!rc)
            rc = kind == BODY_JSON   ? sl_json_compact(body, body_len, json_out)
                 : kind == BODY_TEXT ? sl_json_put_string(json_out, body, body_len)
                                     : sl_base64_append(json_out, body, body_len, SL_BASE64_QUOTED);
    }
    if (!rc && !why)
        rc = sl_buf_append(json_out, "}", 1);
    sl_buf_free(&val);
    if (!rc && !why)
        return SL_EVENT_OK;
    json_out->len = mark;
    if (rc || why == oom) {
        sl_error_set(err, SL_ENOMEM, "out of memory building the event");
        return SL_EVENT_NO_MEMORY;
    }
    sl_error_set(err, SL_EINVAL, "header %.*s: %s", (int)wlen, what, why);
    return SL_EVENT_INVALID_EVENT;
}

/* ---- UUIDv7 ------------------------------------------------------------------ */

/* Random bytes from a per-thread pool refilled by getrandom(), so ids cost
 * one system call per ~400 rather than one each. */
static void random_bytes(unsigned char *out, size_t n)
{
    static _Thread_local unsigned char pool[4096];
    static _Thread_local size_t avail;
    if (avail < n) {
        size_t got = 0;
        while (got < sizeof pool) {
            ssize_t r = getrandom(pool + got, sizeof pool - got, 0);
            if (r > 0)
                got += (size_t)r;
            else if (r < 0 && errno != EINTR)
                break;
        }
        if (got < sizeof pool) { /* no getrandom(): mix the clock, better than nothing */
            uint64_t x = (uint64_t)sl_clock_mono_ns() ^ (uint64_t)(uintptr_t)&got;
            for (size_t i = got; i < sizeof pool; i++) {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                pool[i] = (unsigned char)x;
            }
        }
        avail = sizeof pool;
    }
    memcpy(out, pool + sizeof pool - avail, n);
    avail -= n;
}

void sl_event_uuid7(int64_t now_ms, char out[37])
{
    /* Per thread: the last now_ms seen, the timestamp last written (ahead of
     * it only after the 12-bit counter ran out within one millisecond, as RFC
     * 9562 §6.2 allows) and the counter. */
    static _Thread_local int64_t seen_ms = INT64_MIN, used_ms = INT64_MIN;
    static _Thread_local unsigned seq;
    unsigned char b[16], r[10];
    random_bytes(r, sizeof r);
    if (now_ms >= seen_ms && now_ms <= used_ms) {
        if (++seq > 0xfff) {
            used_ms++;
            seq = ((unsigned)r[0] << 8 | r[1]) & 0x7ff;
        }
    } else {
        /* A new millisecond starts the counter at a random value in its lower
         * half, leaving room to count up. */
        seen_ms = used_ms = now_ms;
        seq = ((unsigned)r[0] << 8 | r[1]) & 0x7ff;
    }
    uint64_t ts = (uint64_t)used_ms;
    for (int i = 0; i < 6; i++)
        b[i] = (unsigned char)(ts >> (40 - 8 * i));
    b[6] = (unsigned char)(0x70 | seq >> 8);
    b[7] = (unsigned char)seq;
    b[8] = (unsigned char)(0x80 | (r[2] & 0x3f));
    memcpy(b + 9, r + 3, 7);
    static const char hex[] = "0123456789abcdef";
    char *w = out;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *w++ = '-';
        *w++ = hex[b[i] >> 4];
        *w++ = hex[b[i] & 15];
    }
    *w = '\0';
}

int sl_event_add_id(const char **json, size_t *len, const sl_json_tok *obj, const char *id,
                    size_t id_len, sl_buf *buf)
{
    const char *p = *json;
    size_t n = *len;
    sl_json_tok tok;
    if (!obj && sl_json_validate(p, n, SL_EVENT_MAX_DEPTH_DEFAULT, &tok, NULL) == 0)
        obj = &tok;
    if (!obj || obj->type != SL_JSON_OBJECT)
        return 0;
    sl_json_iter it;
    sl_json_tok k, v;
    sl_json_iter_init(&it, obj);
    while (sl_json_iter_member(&it, &k, &v))
        if (k.len == 4 && memcmp(k.p, "\"id\"", 4) == 0)
            return 0;
    size_t head = (size_t)(obj->p - p) + 1; /* up to and with '{' */
    size_t first = head;
    while (first < n && strchr(" \t\r\n", p[first]))
        first++;
    bool empty = first < n && p[first] == '}';
    buf->len = 0;
    if (sl_buf_append(buf, p, head) || sl_buf_append(buf, "\"id\":", 5) ||
        sl_json_put_string(buf, id, id_len) || (!empty && sl_buf_append(buf, ",", 1)) ||
        sl_buf_append(buf, p + head, n - head))
        return SL_ENOMEM;
    *json = (const char *)buf->data;
    *len = buf->len;
    return 0;
}
