/*
 * core/bus/event.h — the CloudEvents 1.0 event model (JSON format, HTTP binary
 * mode) on top of the non-allocating scanner in core/base/json.h.
 *
 * Ingest flow, per event:
 *
 *     sl_event ev;                             // ~3.5 KiB; reusable, no free
 *     st = sl_event_parse(json, len, &lim, &ev, &err);
 *     if (st == SL_EVENT_OK)
 *         st = sl_event_apply_lane(&ev, request_lane, &err);   // X-Sluice-Lane
 *     if (st == SL_EVENT_OK)
 *         rc = sl_event_encode(&ev, &(sl_event_fill){.now_ms = now}, &stored);
 *
 * An sl_event holds no memory of its own: its tokens point into the input,
 * which must outlive it. Status names ("InvalidEvent", …) are the error codes
 * of the HTTP API, and every failure fills an optional sl_error with a
 * sentence naming the attribute and what was wrong.
 *
 * Decisions where the CloudEvents specs leave room (each checked against the
 * JSON format and HTTP binding specs, version 1.0.2):
 *  - An attribute whose value is null is unset (JSON format §2.2); encode
 *    leaves it out of the stored form. `data: null` is an explicit null
 *    payload and is kept.
 *  - Attribute names must be [a-z0-9]+ (a MUST). The spec only says names
 *    SHOULD NOT exceed 20 characters, so longer names are accepted, up to
 *    SL_EVENT_NAME_MAX bytes.
 *  - String attributes refuse the characters the CloudEvents String type
 *    disallows: controls U+0000–U+001F and U+007F–U+009F, noncharacters.
 *  - Extension values may be strings, integers in the 32-bit range, or
 *    booleans. `lane` and `partitionkey` must be strings.
 *  - Syntax checks stay cheap: `source` must be a non-empty string (its
 *    URI-reference grammar is not enforced), `dataschema` must start with a
 *    URI scheme, `datacontenttype` with "type/subtype", `time` must be RFC
 *    3339, `data_base64` padded RFC 4648 base64.
 *  - `sluiceset`, `sluicepartition` and `sluiceoffset` are assigned by sluice
 *    on read; an incoming event that carries them (an event read back and
 *    published again) has them dropped by encode rather than refused.
 *  - An explicit `"lane": ""` is the base lane, the same as no lane: a lane
 *    set for the whole request replaces it without a conflict.
 *  - Bounds that keep parsing allocation-free: at most SL_EVENT_MAX_MEMBERS
 *    members per event (InvalidEvent beyond), names of at most
 *    SL_EVENT_NAME_MAX bytes.
 */
#ifndef SL_EVENT_H
#define SL_EVENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/base/buf.h"
#include "core/base/err.h"
#include "core/base/json.h"

/* One table drives the enum and sl_event_status_name(). */
#define SL_EVENT_STATUS_MAP(XX)                                                                    \
    XX(OK, "OK")                                                                                   \
    XX(INVALID_JSON, "InvalidJson")           /* not parseable as JSON */                          \
    XX(INVALID_EVENT, "InvalidEvent")         /* JSON, but not a valid CloudEvent */               \
    XX(MISSING_ATTRIBUTE, "MissingAttribute") /* id, source, type or specversion */                \
    XX(TOO_LARGE, "TooLarge")                 /* over sl_event_limits.max_bytes */                 \
    XX(INVALID_LANE, "InvalidLane")           /* lane not "" or [a-z0-9-]{1,32} */                 \
    XX(LANE_CONFLICT, "LaneConflict")         /* event lane differs from the request's */          \
    XX(NO_MEMORY, "NoMemory")                 /* allocation failed (binary mode only) */           \
    XX(SCHEMA_VIOLATION, "SchemaViolation")   /* data does not fit its type's schema */            \
    XX(UNKNOWN_LANE, "UnknownLane")           /* lane not declared (core/bus/lanes.h) */               \
    XX(LANE_DROPPED, "LaneDropped")           /* lane dropped by `sluice lane drop` */

typedef enum sl_event_status {
#define XX(code, _) SL_EVENT_##code,
    SL_EVENT_STATUS_MAP(XX)
#undef XX
        SL_EVENT_STATUS_COUNT /* number of statuses, for per-status tables */
} sl_event_status;

/* The API name of a status ("InvalidEvent"); "Unknown" for other values. */
const char *sl_event_status_name(sl_event_status status);

#define SL_EVENT_MAX_BYTES_DEFAULT ((size_t)1 << 20)
#define SL_EVENT_MAX_DEPTH_DEFAULT 64
#define SL_EVENT_LANE_MAX 32    /* bytes in a lane name */
#define SL_EVENT_NAME_MAX 128   /* bytes in an attribute name */
#define SL_EVENT_MAX_MEMBERS 64 /* members of the event object, all kinds */
#define SL_EVENT_SCRATCH 512    /* decoded names/keys that use escapes */

/* Per-set limits. A zero field means its default. */
typedef struct sl_event_limits {
    size_t max_bytes;  /* whole event, as received: default 1 MiB */
    int max_depth;     /* JSON nesting, the event object included: default 64 */
    bool generate_ids; /* a missing id is allowed; encode makes a UUIDv7 */
} sl_event_limits;

/* An extension attribute other than lane and partitionkey. */
typedef struct sl_event_ext {
    const char *name; /* decoded name, not NUL-terminated */
    size_t name_len;
    sl_json_tok value; /* a string, integer number, true or false */
} sl_event_ext;

/* A parsed event. Every sl_json_tok is the raw JSON value inside the input
 * (strings with their quotes and escapes: decode with sl_json_unescape());
 * type SL_JSON_NONE means absent or null. Fields not documented as public
 * are private to event.c. */
typedef struct sl_event {
    sl_json_tok object; /* the whole event object */
    sl_json_tok specversion, id, source, type, time, subject, datacontenttype, dataschema;
    sl_json_tok data;        /* any JSON value, SL_JSON_NULL included */
    sl_json_tok data_base64; /* a validated base64 string */
    sl_json_tok lane_attr;   /* the event's own lane attribute */
    sl_json_tok partitionkey;
    char lane[SL_EVENT_LANE_MAX + 1]; /* decoded lane, "" = base; set by apply_lane too */
    bool has_time;                    /* time present: time_ms is its value, UTC */
    int64_t time_ms;
    /* Routing key for partitioning: the decoded partitionkey, else the decoded
     * subject, else NULL. Points into the input or into scratch; a key that
     * uses escapes and does not fit in scratch is given in its raw (escaped)
     * form, which is still deterministic for identical inputs. */
    const char *key;
    size_t key_len;
    size_t n_ext; /* extensions in ext[0 .. n_ext), in input order */

    /* private */
    bool lane_applied; /* lane came from sl_event_apply_lane(): encode adds it */
    int lane_member;   /* index of the lane member, or -1 */
    uint64_t drop;     /* members encode leaves out, bit = member index */
    size_t scratch_used;

    /* Last, so that parse does not have to clear them. */
    sl_event_ext ext[SL_EVENT_MAX_MEMBERS];
    char scratch[SL_EVENT_SCRATCH]; /* private */
} sl_event;

/* Parses and validates one structured-mode event of len bytes (a JSON object,
 * optionally surrounded by whitespace). lim may be NULL for the defaults.
 *
 * Returns SL_EVENT_OK with *ev filled, or the first problem found, with err
 * (if non-NULL) holding the message; *ev is then unspecified. Precedence:
 * TooLarge, then InvalidJson (syntax anywhere in the input wins over a
 * semantic problem earlier in it; messages say "byte N: …" from the start of
 * json), then the first InvalidEvent/InvalidLane in member order, then
 * MissingAttribute (naming every missing attribute). Never allocates. */
sl_event_status sl_event_parse(const char *json, size_t len, const sl_event_limits *lim,
                               sl_event *ev, sl_error *err);

/* Applies a lane chosen for the whole request (HTTP X-Sluice-Lane) to a
 * parsed event. NULL or "" does nothing. Returns SL_EVENT_INVALID_LANE when
 * lane is not a valid name, SL_EVENT_LANE_CONFLICT when the event already has
 * a different non-empty lane (ev unchanged in both cases), else SL_EVENT_OK
 * with ev->lane set; encode then writes the lane into the stored event. */
sl_event_status sl_event_apply_lane(sl_event *ev, const char *lane, sl_error *err);

/* What encode fills in for attributes the event left out. */
typedef struct sl_event_fill {
    int64_t now_ms; /* for a missing time, and the timestamp of a generated id */
} sl_event_fill;

/* Appends the stored form of a parsed event to out: its members compacted in
 * their original order (null attributes and sluice* members dropped), then
 * `id` (a UUIDv7 from fill->now_ms) if missing, `time` (fill->now_ms, RFC
 * 3339 UTC with milliseconds) if missing, and `lane` if it was applied.
 * Returns 0, or SL_ENOMEM with out unchanged. */
int sl_event_encode(const sl_event *ev, const sl_event_fill *fill, sl_buf *out);

/* Appends a stored event (as encode wrote it) with
 * `,"sluiceset":SET,"sluicepartition":P,"sluiceoffset":O` spliced in before
 * its closing brace, for serving reads. set is a NUL-terminated UTF-8 name.
 * Returns 0, SL_EINVAL when stored is not an object ("{…}") or set is not
 * UTF-8, or SL_ENOMEM; out is unchanged on error. */
int sl_event_decorate(const char *stored, size_t len, const char *set, int32_t partition,
                      int64_t offset, sl_buf *out);

/* One HTTP request header (binary mode). Not NUL-terminated. */
typedef struct sl_event_header {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
} sl_event_header;

/* Builds a structured-mode event from an HTTP binary-mode request and appends
 * it to json_out; the caller then runs sl_event_parse() on it, which does all
 * attribute validation. Headers named ce-* (any case) become attributes with
 * the lowercased rest of the name; their values are unquoted if
 * double-quoted, then percent-decoded (%XX, which must form valid UTF-8).
 * Other headers are ignored. content_type (NULL if absent) becomes
 * `datacontenttype`. A non-empty body becomes `data` — as JSON when the
 * media type's subtype is "json" or ends in "+json" and the body is valid
 * JSON; as a string when the type is textual (type text, subtype xml or
 * *+xml, *+yaml, yaml, x-yaml, csv, javascript, ecmascript,
 * x-www-form-urlencoded, toml, graphql, sql, or any type with
 * charset=utf-8) and the body is UTF-8 — or else `data_base64` (also for
 * text in another charset, whose bytes a JSON string could not keep).
 *
 * Returns SL_EVENT_OK; SL_EVENT_TOO_LARGE when body_len exceeds the limit;
 * SL_EVENT_INVALID_EVENT for a bad percent-encoding, a value that is not
 * UTF-8, or a ce-datacontenttype/ce-data/ce-data_base64 header (the binding
 * forbids them); SL_EVENT_NO_MEMORY. json_out is unchanged on error. */
sl_event_status sl_event_from_binary(const sl_event_header *hdrs, size_t n,
                                     const char *content_type, const char *body, size_t body_len,
                                     const sl_event_limits *lim, sl_buf *json_out, sl_error *err);

/* Writes a UUIDv7 (RFC 9562) for now_ms as 36 lowercase characters plus a
 * NUL: 48-bit big-endian milliseconds, version 7, a 12-bit counter that
 * starts at random in each millisecond and counts up within it, the RFC
 * variant, 62 random bits from getrandom() (buffered per thread). So one
 * thread's ids increase while now_ms does not go backwards; past 2048 ids in
 * one millisecond the timestamp runs ahead of now_ms (RFC 9562 §6.2).
 * Never fails. */
void sl_event_uuid7(int64_t now_ms, char out[37]);

/* Gives a CloudEvent's JSON text *json (*len bytes) the id id[0..id_len)
 * when its top-level object has no "id" member: the text with "id":ID as
 * its first member is written to buf (reset first), and *json and *len then
 * point there. obj is the text's top-level value as sl_json_validate() gave
 * it, or NULL to validate it here (to SL_EVENT_MAX_DEPTH_DEFAULT). Text that
 * has an id, is not an object or is not JSON is left as it is (the event
 * check refuses what it must). Returns 0, or SL_ENOMEM with *json and *len
 * unchanged. */
int sl_event_add_id(const char **json, size_t *len, const sl_json_tok *obj, const char *id,
                    size_t id_len, sl_buf *buf);

#endif
