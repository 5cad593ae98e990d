/*
 * kafka/kproto.h — the Kafka protocol's primitive types
 * (https://kafka.apache.org/protocol#protocol_types): a bounds-checked reader
 * over a received request and a writer that appends a response to an sl_buf,
 * the request and response headers, the API keys and the error codes.
 *
 * Both sides keep a sticky error instead of returning one per call, so a
 * handler reads a whole request and checks sl_kr_ok() once (the style of
 * librdkafka's rd_kafka_buf_read_* with its err_parse label): after the first
 * short or malformed field every further read returns zero/null and leaves
 * the position alone. Nothing here allocates while reading: strings and
 * bytes point into the request.
 */
#ifndef SL_KPROTO_H
#define SL_KPROTO_H

#include "core/base/buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* API keys sluice serves. */
enum {
    SL_KAPI_PRODUCE = 0,
    SL_KAPI_FETCH = 1,
    SL_KAPI_LIST_OFFSETS = 2,
    SL_KAPI_METADATA = 3,
    SL_KAPI_OFFSET_COMMIT = 8,
    SL_KAPI_OFFSET_FETCH = 9,
    SL_KAPI_FIND_COORDINATOR = 10,
    SL_KAPI_JOIN_GROUP = 11,
    SL_KAPI_HEARTBEAT = 12,
    SL_KAPI_LEAVE_GROUP = 13,
    SL_KAPI_SYNC_GROUP = 14,
    SL_KAPI_DESCRIBE_GROUPS = 15,
    SL_KAPI_LIST_GROUPS = 16,
    SL_KAPI_SASL_HANDSHAKE = 17,
    SL_KAPI_API_VERSIONS = 18,
    SL_KAPI_CREATE_TOPICS = 19,
    SL_KAPI_DELETE_TOPICS = 20,
    SL_KAPI_INIT_PRODUCER_ID = 22,
    SL_KAPI_SASL_AUTHENTICATE = 36,
    SL_KAPI_MAX = 67 /* highest key any client may send that we name in logs */
};

/* Error codes (Kafka's org.apache.kafka.common.protocol.Errors). */
enum {
    SL_KERR_UNKNOWN_SERVER_ERROR = -1,
    SL_KERR_NONE = 0,
    SL_KERR_OFFSET_OUT_OF_RANGE = 1,
    SL_KERR_CORRUPT_MESSAGE = 2,
    SL_KERR_UNKNOWN_TOPIC_OR_PARTITION = 3,
    SL_KERR_INVALID_FETCH_SIZE = 4,
    SL_KERR_LEADER_NOT_AVAILABLE = 5,
    SL_KERR_NOT_LEADER_OR_FOLLOWER = 6,
    SL_KERR_REQUEST_TIMED_OUT = 7,
    SL_KERR_MESSAGE_TOO_LARGE = 10,
    SL_KERR_COORDINATOR_LOAD_IN_PROGRESS = 14,
    SL_KERR_COORDINATOR_NOT_AVAILABLE = 15,
    SL_KERR_NOT_COORDINATOR = 16,
    SL_KERR_INVALID_TOPIC_EXCEPTION = 17,
    SL_KERR_RECORD_LIST_TOO_LARGE = 18,
    SL_KERR_INVALID_REQUIRED_ACKS = 21,
    SL_KERR_ILLEGAL_GENERATION = 22,
    SL_KERR_INCONSISTENT_GROUP_PROTOCOL = 23,
    SL_KERR_INVALID_GROUP_ID = 24,
    SL_KERR_UNKNOWN_MEMBER_ID = 25,
    SL_KERR_INVALID_SESSION_TIMEOUT = 26,
    SL_KERR_REBALANCE_IN_PROGRESS = 27,
    SL_KERR_INVALID_COMMIT_OFFSET_SIZE = 28,
    SL_KERR_TOPIC_AUTHORIZATION_FAILED = 29,
    SL_KERR_GROUP_AUTHORIZATION_FAILED = 30,
    SL_KERR_CLUSTER_AUTHORIZATION_FAILED = 31,
    SL_KERR_INVALID_TIMESTAMP = 32,
    SL_KERR_UNSUPPORTED_SASL_MECHANISM = 33,
    SL_KERR_ILLEGAL_SASL_STATE = 34,
    SL_KERR_UNSUPPORTED_VERSION = 35,
    SL_KERR_TOPIC_ALREADY_EXISTS = 36,
    SL_KERR_INVALID_PARTITIONS = 37,
    SL_KERR_INVALID_REPLICATION_FACTOR = 38,
    SL_KERR_INVALID_CONFIG = 40,
    SL_KERR_NOT_CONTROLLER = 41,
    SL_KERR_INVALID_REQUEST = 42,
    SL_KERR_UNSUPPORTED_FOR_MESSAGE_FORMAT = 43,
    SL_KERR_POLICY_VIOLATION = 44,
    SL_KERR_OUT_OF_ORDER_SEQUENCE_NUMBER = 45,
    SL_KERR_DUPLICATE_SEQUENCE_NUMBER = 46,
    SL_KERR_INVALID_PRODUCER_EPOCH = 47,
    SL_KERR_INVALID_TXN_STATE = 48,
    SL_KERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53,
    SL_KERR_KAFKA_STORAGE_ERROR = 56,
    SL_KERR_SASL_AUTHENTICATION_FAILED = 58,
    SL_KERR_UNKNOWN_PRODUCER_ID = 59,
    SL_KERR_NON_EMPTY_GROUP = 68,
    SL_KERR_GROUP_ID_NOT_FOUND = 69,
    SL_KERR_UNSUPPORTED_COMPRESSION_TYPE = 76,
    SL_KERR_MEMBER_ID_REQUIRED = 79,
    SL_KERR_GROUP_MAX_SIZE_REACHED = 81,
    SL_KERR_INVALID_RECORD = 87,
    SL_KERR_THROTTLING_QUOTA_EXCEEDED = 89,
};

/* A string or bytes field: p[0..len), or null (len -1, p NULL). Not
 * NUL-terminated; points into the request. */
typedef struct sl_kstr {
    const char *p;
    int32_t len;
} sl_kstr;

/* Reader over one request. */
typedef struct sl_kr {
    const uint8_t *p, *end;
    bool bad; /* a field ran past the end or was malformed: sticky */
} sl_kr;

void sl_kr_init(sl_kr *r, const void *p, size_t len);
static inline bool sl_kr_ok(const sl_kr *r)
{
    return !r->bad;
}
static inline size_t sl_kr_left(const sl_kr *r)
{
    return r->bad ? 0 : (size_t)(r->end - r->p);
}
/* Marks the request malformed (a value out of its domain). */
static inline void sl_kr_fail(sl_kr *r)
{
    r->bad = true;
}

int8_t sl_kr_i8(sl_kr *r);
int16_t sl_kr_i16(sl_kr *r);
int32_t sl_kr_i32(sl_kr *r);
int64_t sl_kr_i64(sl_kr *r);
/* UNSIGNED_VARINT (at most 5 bytes), VARINT (zig-zag int32), VARLONG (zig-zag int64). */
uint32_t sl_kr_uvarint(sl_kr *r);
int32_t sl_kr_varint(sl_kr *r);
int64_t sl_kr_varlong(sl_kr *r);
/* STRING / NULLABLE_STRING (int16 length, -1 null), or with compact
 * COMPACT_(NULLABLE_)STRING (unsigned varint length + 1, 0 null). */
sl_kstr sl_kr_str(sl_kr *r, bool compact);
/* BYTES / NULLABLE_BYTES (int32 length), or with compact COMPACT_BYTES. */
sl_kstr sl_kr_bytes(sl_kr *r, bool compact);
/* An ARRAY's element count (int32; compact: unsigned varint n + 1): -1 for
 * null. A count that could not fit in what is left (every element takes at
 * least min_elem bytes, >= 1) marks the reader bad and returns 0, so a
 * loop over it never runs away. */
int32_t sl_kr_array(sl_kr *r, bool compact, size_t min_elem);
/* Skips a tagged-field section (flexible versions only; no-op otherwise). */
void sl_kr_tags(sl_kr *r, bool flexible);
/* Skips n bytes. */
void sl_kr_skip(sl_kr *r, size_t n);

/* Copies s into out (cap bytes with the NUL) when it is not null, holds no
 * NUL byte and fits; false otherwise (out then holds ""). */
bool sl_kstr_copy(sl_kstr s, char *out, size_t cap);
/* Whether s equals the NUL-terminated z (a null s equals nothing). */
bool sl_kstr_eq(sl_kstr s, const char *z);

/* Writer appending to an sl_buf. */
typedef struct sl_kw {
    sl_buf *b;
    bool oom; /* an append failed for memory: sticky; the response is dropped */
} sl_kw;

void sl_kw_init(sl_kw *w, sl_buf *b);
void sl_kw_i8(sl_kw *w, int8_t v);
void sl_kw_i16(sl_kw *w, int16_t v);
void sl_kw_i32(sl_kw *w, int32_t v);
void sl_kw_i64(sl_kw *w, int64_t v);
void sl_kw_uvarint(sl_kw *w, uint32_t v);
void sl_kw_varint(sl_kw *w, int32_t v);
void sl_kw_varlong(sl_kw *w, int64_t v);
/* A string of len bytes (s NULL: null; len < 0: strlen(s)). */
void sl_kw_str(sl_kw *w, bool compact, const char *s, int32_t len);
/* Bytes (p NULL: null). */
void sl_kw_bytes(sl_kw *w, bool compact, const void *p, int32_t len);
/* An array's count (n -1: null). */
void sl_kw_array(sl_kw *w, bool compact, int32_t n);
/* An empty tagged-field section (flexible versions only; no-op otherwise). */
void sl_kw_tags(sl_kw *w, bool flexible);
/* Raw bytes. */
void sl_kw_raw(sl_kw *w, const void *p, size_t len);
/* Where the next byte goes, and back-patching an int32 written earlier
 * (array counts and lengths known only at the end). */
static inline size_t sl_kw_pos(const sl_kw *w)
{
    return w->b->len;
}
void sl_kw_i32_at(sl_kw *w, size_t pos, int32_t v);
static inline bool sl_kw_ok(const sl_kw *w)
{
    return !w->oom;
}

/* ---- headers -------------------------------------------------------------- */

/* Whether (key, version) uses the flexible encoding (request header v2,
 * compact strings and arrays, tagged fields), per the protocol's
 * "flexibleVersions". */
bool sl_kp_flexible(int16_t key, int16_t version);

/* The request header of a whole request frame (after the 4-byte size). */
typedef struct sl_kp_header {
    int16_t key;
    int16_t version;
    int32_t corr;
    sl_kstr client_id; /* nullable */
    bool flexible;     /* the body is in the flexible encoding */
} sl_kp_header;

/* Reads the request header from r (v1, or v2 with tagged fields when the
 * (key, version) is flexible), leaving r at the body. Returns false on a
 * short or malformed header. An unknown key or version still parses (as v1)
 * so the caller can answer or close. */
bool sl_kp_header_read(sl_kr *r, sl_kp_header *h);

/* Writes the response header: the correlation id, then an empty tagged
 * section for flexible responses (response header v1), except ApiVersions,
 * whose response header is always v0 (clients parse it before they know the
 * broker's versions). */
void sl_kp_resp_header(sl_kw *w, const sl_kp_header *h);

/* The API's name ("Produce", "Fetch", …) or "api N" in buf. */
const char *sl_kp_api_name(int16_t key, char buf[16]);

#endif
