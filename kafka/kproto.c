/*
 * kafka/kproto.c — the Kafka protocol's primitive types (kproto.h).
 *
 * Integers are big-endian; varints are protobuf-style base-128, signed ones
 * zig-zag encoded (the record format's and the flexible versions' encoding).
 */
#include "kafka/kproto.h"

#include <stdio.h>
#include <string.h>

void sl_kr_init(sl_kr *r, const void *p, size_t len)
{
    r->p = p;
    r->end = r->p + len;
    r->bad = false;
}

/* The next n bytes, or NULL (and bad) when fewer are left. */
static const uint8_t *take(sl_kr *r, size_t n)
{
    if (r->bad || (size_t)(r->end - r->p) < n) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *p = r->p;
    r->p += n;
    return p;
}

int8_t sl_kr_i8(sl_kr *r)
{
    const uint8_t *p = take(r, 1);
    return p ? (int8_t)p[0] : 0;
}

int16_t sl_kr_i16(sl_kr *r)
{
    const uint8_t *p = take(r, 2);
    return p ? (int16_t)(uint16_t)((unsigned)p[0] << 8 | p[1]) : 0;
}

int32_t sl_kr_i32(sl_kr *r)
{
    const uint8_t *p = take(r, 4);
    if (!p)
        return 0;
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
}

int64_t sl_kr_i64(sl_kr *r)
{
    const uint8_t *p = take(r, 8);
    if (!p)
        return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return (int64_t)v;
}

/* An unsigned base-128 varint of at most max_bytes. */
static uint64_t uvarint(sl_kr *r, int max_bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < max_bytes; i++) {
        const uint8_t *p = take(r, 1);
        if (!p)
            return 0;
        v |= (uint64_t)(p[0] & 0x7f) << (7 * i);
        if (!(p[0] & 0x80))
            return v;
    }
    r->bad = true; /* too long */
    return 0;
}

uint32_t sl_kr_uvarint(sl_kr *r)
{
    uint64_t v = uvarint(r, 5);
    if (v > UINT32_MAX) {
        r->bad = true;
        return 0;
    }
    return (uint32_t)v;
}

int32_t sl_kr_varint(sl_kr *r)
{
    uint32_t u = sl_kr_uvarint(r);
    return (int32_t)((u >> 1) ^ (uint32_t)-(int32_t)(u & 1));
}

int64_t sl_kr_varlong(sl_kr *r)
{
    uint64_t u = uvarint(r, 10);
    return (int64_t)((u >> 1) ^ (uint64_t) - (int64_t)(u & 1));
}

static const sl_kstr null_str = {NULL, -1};

/* A field of len bytes (-1: null) at the reader's position. */
static sl_kstr field(sl_kr *r, int64_t len)
{
    if (r->bad)
        return null_str;
    if (len < 0)
        return len == -1 ? null_str : (r->bad = true, null_str);
    if (len > INT32_MAX) {
        r->bad = true;
        return null_str;
    }
    const uint8_t *p = take(r, (size_t)len);
    if (!p)
        return null_str;
    return (sl_kstr){(const char *)p, (int32_t)len};
}

sl_kstr sl_kr_str(sl_kr *r, bool compact)
{
    if (compact)
        return field(r, (int64_t)sl_kr_uvarint(r) - 1);
    return field(r, sl_kr_i16(r));
}

sl_kstr sl_kr_bytes(sl_kr *r, bool compact)
{
    if (compact)
        return field(r, (int64_t)sl_kr_uvarint(r) - 1);
    return field(r, sl_kr_i32(r));
}

int32_t sl_kr_array(sl_kr *r, bool compact, size_t min_elem)
{
    int64_t n = compact ? (int64_t)sl_kr_uvarint(r) - 1 : sl_kr_i32(r);
    if (r->bad)
        return 0;
    if (n == -1)
        return -1;
    if (min_elem < 1)
        min_elem = 1;
    if (n < -1 || (uint64_t)n > (size_t)(r->end - r->p) / min_elem) {
        r->bad = true;
        return 0;
    }
    return (int32_t)n;
}

void sl_kr_tags(sl_kr *r, bool flexible)
{
    if (!flexible)
        return;
    uint32_t n = sl_kr_uvarint(r);
    for (uint32_t i = 0; i < n && !r->bad; i++) {
        (void)sl_kr_uvarint(r); /* tag */
        uint32_t size = sl_kr_uvarint(r);
        (void)take(r, size);
    }
}

void sl_kr_skip(sl_kr *r, size_t n)
{
    (void)take(r, n);
}

bool sl_kstr_copy(sl_kstr s, char *out, size_t cap)
{
    if (cap)
        out[0] = '\0';
    if (!s.p || s.len < 0 || (size_t)s.len >= cap || memchr(s.p, '\0', (size_t)s.len))
        return false;
    memcpy(out, s.p, (size_t)s.len);
    out[s.len] = '\0';
    return true;
}

bool sl_kstr_eq(sl_kstr s, const char *z)
{
    if (!s.p || s.len < 0)
        return false;
    size_t n = strlen(z);
    return (size_t)s.len == n && memcmp(s.p, z, n) == 0;
}

/* ---- writer --------------------------------------------------------------- */

void sl_kw_init(sl_kw *w, sl_buf *b)
{
    w->b = b;
    w->oom = false;
}

void sl_kw_raw(sl_kw *w, const void *p, size_t len)
{
    if (w->oom || !len)
        return;
    if (sl_buf_append(w->b, p, len) != 0)
        w->oom = true;
}

void sl_kw_i8(sl_kw *w, int8_t v)
{
    uint8_t b = (uint8_t)v;
    sl_kw_raw(w, &b, 1);
}

void sl_kw_i16(sl_kw *w, int16_t v)
{
    uint16_t u = (uint16_t)v;
    uint8_t b[2] = {(uint8_t)(u >> 8), (uint8_t)u};
    sl_kw_raw(w, b, 2);
}

static void be32(uint8_t b[4], int32_t v)
{
    uint32_t u = (uint32_t)v;
    b[0] = (uint8_t)(u >> 24);
    b[1] = (uint8_t)(u >> 16);
    b[2] = (uint8_t)(u >> 8);
    b[3] = (uint8_t)u;
}

void sl_kw_i32(sl_kw *w, int32_t v)
{
    uint8_t b[4];
    be32(b, v);
    sl_kw_raw(w, b, 4);
}

void sl_kw_i64(sl_kw *w, int64_t v)
{
    uint64_t u = (uint64_t)v;
    uint8_t b[8];
    for (int i = 7; i >= 0; i--, u >>= 8)
        b[i] = (uint8_t)u;
    sl_kw_raw(w, b, 8);
}

static void uvarint_w(sl_kw *w, uint64_t v)
{
    uint8_t b[10];
    size_t n = 0;
    while (v >= 0x80) {
        b[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    b[n++] = (uint8_t)v;
    sl_kw_raw(w, b, n);
}

void sl_kw_uvarint(sl_kw *w, uint32_t v)
{
    uvarint_w(w, v);
}

void sl_kw_varint(sl_kw *w, int32_t v)
{
    uvarint_w(w, (uint32_t)(((uint32_t)v << 1) ^ (uint32_t)(v >> 31)));
}

void sl_kw_varlong(sl_kw *w, int64_t v)
{
    uvarint_w(w, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}

void sl_kw_str(sl_kw *w, bool compact, const char *s, int32_t len)
{
    if (s && len < 0)
        len = (int32_t)strlen(s);
    if (s && len > INT16_MAX && !compact)
        len = INT16_MAX; /* a STRING cannot say more; the caller's names are short */
    if (compact)
        sl_kw_uvarint(w, s ? (uint32_t)len + 1 : 0);
    else
        sl_kw_i16(w, s ? (int16_t)len : -1);
    if (s)
        sl_kw_raw(w, s, (size_t)len);
}

void sl_kw_bytes(sl_kw *w, bool compact, const void *p, int32_t len)
{
    if (compact)
        sl_kw_uvarint(w, p ? (uint32_t)len + 1 : 0);
    else
        sl_kw_i32(w, p ? len : -1);
    if (p)
        sl_kw_raw(w, p, (size_t)len);
}

void sl_kw_array(sl_kw *w, bool compact, int32_t n)
{
    if (compact)
        sl_kw_uvarint(w, n < 0 ? 0 : (uint32_t)n + 1);
    else
        sl_kw_i32(w, n);
}

void sl_kw_tags(sl_kw *w, bool flexible)
{
    if (flexible)
        sl_kw_uvarint(w, 0);
}

void sl_kw_i32_at(sl_kw *w, size_t pos, int32_t v)
{
    if (w->oom || pos + 4 > w->b->len)
        return;
    be32(w->b->data + pos, v);
}

/* ---- headers -------------------------------------------------------------- */

/* The first flexible version of each API key (the "flexibleVersions" of
 * apache/kafka's message JSON files); 0 for none known. */
static int16_t first_flexible(int16_t key)
{
    switch (key) {
    case SL_KAPI_PRODUCE: return 9;
    case SL_KAPI_FETCH: return 12;
    case SL_KAPI_LIST_OFFSETS: return 6;
    case SL_KAPI_METADATA: return 9;
    case SL_KAPI_OFFSET_COMMIT: return 8;
    case SL_KAPI_OFFSET_FETCH: return 6;
    case SL_KAPI_FIND_COORDINATOR: return 3;
    case SL_KAPI_JOIN_GROUP: return 6;
    case SL_KAPI_HEARTBEAT: return 4;
    case SL_KAPI_LEAVE_GROUP: return 4;
    case SL_KAPI_SYNC_GROUP: return 4;
    case SL_KAPI_DESCRIBE_GROUPS: return 5;
    case SL_KAPI_LIST_GROUPS: return 3;
    case SL_KAPI_SASL_HANDSHAKE: return 0; /* never flexible */
    case SL_KAPI_API_VERSIONS: return 3;
    case SL_KAPI_CREATE_TOPICS: return 5;
    case SL_KAPI_DELETE_TOPICS: return 4;
    case SL_KAPI_INIT_PRODUCER_ID: return 2;
    case SL_KAPI_SASL_AUTHENTICATE: return 2;
    default: return 0;
    }
}

bool sl_kp_flexible(int16_t key, int16_t version)
{
    int16_t f = first_flexible(key);
    return f > 0 && version >= f;
}

bool sl_kp_header_read(sl_kr *r, sl_kp_header *h)
{
    memset(h, 0, sizeof *h);
    h->key = sl_kr_i16(r);
    h->version = sl_kr_i16(r);
    h->corr = sl_kr_i32(r);
    h->client_id = sl_kr_str(r, false); /* a STRING even in header v2 */
    h->flexible = sl_kp_flexible(h->key, h->version);
    /* An ApiVersions of a version we do not know may come with either
     * header (a client probing, a tool sending v1 headers): its body is
     * not read, so the tagged section is not either, and it is answered. */
    sl_kr_tags(r, h->flexible && !(h->key == SL_KAPI_API_VERSIONS && h->version > 3));
    return sl_kr_ok(r);
}

void sl_kp_resp_header(sl_kw *w, const sl_kp_header *h)
{
    sl_kw_i32(w, h->corr);
    sl_kw_tags(w, h->flexible && h->key != SL_KAPI_API_VERSIONS);
}

const char *sl_kp_api_name(int16_t key, char buf[16])
{
    static const char *const names[] = {
        [SL_KAPI_PRODUCE] = "Produce",
        [SL_KAPI_FETCH] = "Fetch",
        [SL_KAPI_LIST_OFFSETS] = "ListOffsets",
        [SL_KAPI_METADATA] = "Metadata",
        [4] = "LeaderAndIsr",
        [5] = "StopReplica",
        [6] = "UpdateMetadata",
        [7] = "ControlledShutdown",
        [SL_KAPI_OFFSET_COMMIT] = "OffsetCommit",
        [SL_KAPI_OFFSET_FETCH] = "OffsetFetch",
        [SL_KAPI_FIND_COORDINATOR] = "FindCoordinator",
        [SL_KAPI_JOIN_GROUP] = "JoinGroup",
        [SL_KAPI_HEARTBEAT] = "Heartbeat",
        [SL_KAPI_LEAVE_GROUP] = "LeaveGroup",
        [SL_KAPI_SYNC_GROUP] = "SyncGroup",
        [SL_KAPI_DESCRIBE_GROUPS] = "DescribeGroups",
        [SL_KAPI_LIST_GROUPS] = "ListGroups",
        [SL_KAPI_SASL_HANDSHAKE] = "SaslHandshake",
        [SL_KAPI_API_VERSIONS] = "ApiVersions",
        [SL_KAPI_CREATE_TOPICS] = "CreateTopics",
        [SL_KAPI_DELETE_TOPICS] = "DeleteTopics",
        [21] = "DeleteRecords",
        [SL_KAPI_INIT_PRODUCER_ID] = "InitProducerId",
        [23] = "OffsetForLeaderEpoch",
        [24] = "AddPartitionsToTxn",
        [25] = "AddOffsetsToTxn",
        [26] = "EndTxn",
        [28] = "TxnOffsetCommit",
        [29] = "DescribeAcls",
        [32] = "DescribeConfigs",
        [33] = "AlterConfigs",
        [SL_KAPI_SASL_AUTHENTICATE] = "SaslAuthenticate",
        [37] = "CreatePartitions",
        [42] = "DeleteGroups",
    };
    if (key >= 0 && (size_t)key < sizeof names / sizeof names[0] && names[key])
        return names[key];
    snprintf(buf, 16, "api %d", key);
    return buf;
}
