/*
 * rules/evview.h — the event view: an event parsed once (a flat array of
 * decoded values linked as a tree), read by the pattern matcher
 * (rules/pattern.h), the rule VM (rules/rule.h) and its Lua proxies
 * (rules/luaproxy.h).
 */
#ifndef SL_EVVIEW_H
#define SL_EVVIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/base/err.h"

/* An event parsed once for matching many patterns: a flat array of values
 * (decoded strings, numbers as doubles) linked as a tree. Reusable: parse
 * again into the same struct and nothing is allocated once it has grown to
 * the size of the events it sees (small events fit the inline array). */
#define SL_EVVIEW_INLINE 64

/* The index of no value: first and next of a value without a child or a
 * next sibling. */
#define SL_EVVIEW_NONE UINT32_MAX

typedef struct sl_evview_value {
    uint8_t type;         /* sl_json_type */
    uint32_t first, next; /* first child, next sibling (SL_EVVIEW_NONE: none) */
    uint32_t klen, len;
    uint32_t raw_len;
    const char *key; /* member name, decoded */
    const char *s;   /* string (decoded) or the number's text */
    const char *raw; /* the value's JSON text as written (quotes and brackets
                        included): [raw, raw + raw_len) inside the parsed text */
} sl_evview_value;

/* The value of a number (type SL_JSON_NUMBER), as a double. Computed on
 * demand: most numbers of an event are never compared. */
double sl_evview_num(const sl_evview_value *v);

typedef struct sl_evview {
    sl_evview_value *v; /* v[0] is the event object */
    size_t n, cap;
    char *scratch; /* decoded escaped strings */
    size_t scratch_len, scratch_cap;
    bool oom; /* the last parse ran out of memory (not a syntax error) */
    sl_evview_value inline_v[SL_EVVIEW_INLINE];
} sl_evview;

/* Prepares ev (no allocation). */
void sl_evview_init(sl_evview *ev);

/* Parses the event JSON text [json, json + len), which must stay unchanged
 * while ev is used (values point into it). validate checks it strictly
 * first (RFC 8259, UTF-8); without it (for events sluice stored itself,
 * which were validated at ingest) malformed text is still refused safely,
 * never over-read. Returns 0, SL_EPARSE/SL_EPARTIAL (not JSON), SL_EINVAL
 * (not an object) or SL_ENOMEM, with err. */
int sl_evview_parse(sl_evview *ev, const char *json, size_t len, bool validate, sl_error *err);

/* Frees what ev allocated; ev is empty and reusable after. */
void sl_evview_free(sl_evview *ev);

#endif
