/*
 * rules/schema_infer.c — schema discovery (sl_schema_infer_*, declared in
 * rules/schema.h): merges sample data documents into one shape per JSON
 * position, then writes the schema every sample satisfies.
 *
 * Samples are read with the core/base/json.h scanner; the shape keeps, for each
 * position, the types seen, how many strings were RFC 3339 times, the
 * properties seen (in first-seen order, with the number of objects holding
 * each) and one merged shape for all array elements. The result is built with
 * jansson, which writes it indented.
 */
#include "rules/schema.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/clock.h"
#include "core/base/json.h"

/* Below this depth only the types are recorded (no properties, no items), so
 * hostile samples cannot make the shape arbitrarily deep. */
#define INFER_MAX_DEPTH 64

/* Type bits, in the order they are written in a type list. */
enum {
    I_OBJECT = 1u << 0,
    I_ARRAY = 1u << 1,
    I_STRING = 1u << 2,
    I_NUMBER = 1u << 3,
    I_INTEGER = 1u << 4,
    I_BOOLEAN = 1u << 5,
    I_NULL = 1u << 6,
};
static const char *const inames[] = {"object",  "array",   "string", "number",
                                     "integer", "boolean", "null"};
#define INTYPES 7

typedef struct shape shape;

typedef struct iprop {
    char *key; /* decoded, owned; may hold NULs (klen counts) */
    size_t klen;
    size_t present;    /* objects at this position that had the property */
    uint64_t last_obj; /* the object that last counted it (duplicate names) */
    shape *sh;
} iprop;

struct shape {
    unsigned types;
    size_t strings, times; /* strings seen; of which RFC 3339 date-times */
    size_t objects;        /* objects seen here */
    iprop *props;
    size_t nprops, cap;
    shape *items; /* all elements of all arrays seen here; NULL until one */
};

struct sl_schema_infer {
    shape root;
    uint64_t next_obj; /* numbers objects, for iprop.last_obj */
};

static void shape_clear(shape *s)
{
    for (size_t i = 0; i < s->nprops; i++) {
        free(s->props[i].key);
        shape_clear(s->props[i].sh);
        free(s->props[i].sh);
    }
    free(s->props);
    if (s->items) {
        shape_clear(s->items);
        free(s->items);
    }
}

int sl_schema_infer_new(sl_schema_infer **out)
{
    sl_schema_infer *inf = calloc(1, sizeof *inf);
    if (!inf)
        return SL_ENOMEM;
    *out = inf;
    return 0;
}

void sl_schema_infer_free(sl_schema_infer *inf)
{
    if (!inf)
        return;
    shape_clear(&inf->root);
    free(inf);
}

/* Whether the string token t is an RFC 3339 date-time. */
static bool is_time(const sl_json_tok *t)
{
    char buf[64];
    size_t len;
    if (t->len - 2 > sizeof buf || sl_json_unescape(t, buf, sizeof buf, &len) != 0)
        return false;
    int64_t ms;
    return sl_time_parse_rfc3339(buf, len, &ms) == 0;
}

/* Whether the decoded string token t equals [s, s + n). */
static bool key_eq(const sl_json_tok *t, const char *s, size_t n)
{
    if (!(t->flags & SL_JSON_ESCAPED))
        return t->len - 2 == n && memcmp(t->p + 1, s, n) == 0;
    size_t pos = 0, off = 0, got;
    char chunk[64];
    while ((got = sl_json_unescape_part(t, &pos, chunk, sizeof chunk)) > 0) {
        if (got > n - off || memcmp(chunk, s + off, got) != 0)
            return false;
        off += got;
    }
    return off == n;
}

/* The property of s named by key token k, added when new; NULL when out of
 * memory. */
static iprop *prop_for(shape *s, const sl_json_tok *k)
{
    for (size_t i = 0; i < s->nprops; i++)
        if (key_eq(k, s->props[i].key, s->props[i].klen))
            return &s->props[i];
    if (s->nprops == s->cap && sl_grow(&s->props, &s->cap, sizeof *s->props, 8))
            return NULL;
    iprop *p = &s->props[s->nprops];
    memset(p, 0, sizeof *p);
    size_t raw = k->len - 2;
    if (!(p->key = malloc(raw + 1)) || !(p->sh = calloc(1, sizeof *p->sh))) {
        free(p->key);
        return NULL;
    }
    sl_json_unescape(k, p->key, raw + 1, &p->klen);
    p->key[p->klen] = '\0';
    s->nprops++;
    return p;
}

static int add(sl_schema_infer *inf, shape *s, const sl_json_tok *t, int depth)
{
    switch (t->type) {
    case SL_JSON_NULL:
        s->types |= I_NULL;
        return 0;
    case SL_JSON_TRUE:
    case SL_JSON_FALSE:
        s->types |= I_BOOLEAN;
        return 0;
    case SL_JSON_NUMBER:
        /* 10.0 or 1e3 says the writer had a non-integer type in mind. */
        s->types |= t->flags & SL_JSON_INTEGER ? I_INTEGER : I_NUMBER;
        return 0;
    case SL_JSON_STRING:
        s->types |= I_STRING;
        s->strings++;
        s->times += is_time(t);
        return 0;
    case SL_JSON_ARRAY: {
        s->types |= I_ARRAY;
        if (depth >= INFER_MAX_DEPTH)
            return 0;
        sl_json_iter it;
        sl_json_tok el;
        sl_json_iter_init(&it, t);
        while (sl_json_iter_elem(&it, &el)) {
            if (!s->items && !(s->items = calloc(1, sizeof *s->items)))
                return SL_ENOMEM;
            int rc = add(inf, s->items, &el, depth + 1);
            if (rc)
                return rc;
        }
        return 0;
    }
    case SL_JSON_OBJECT: {
        s->types |= I_OBJECT;
        if (depth >= INFER_MAX_DEPTH)
            return 0;
        s->objects++;
        uint64_t id = ++inf->next_obj;
        sl_json_iter it;
        sl_json_tok k, v;
        sl_json_iter_init(&it, t);
        while (sl_json_iter_member(&it, &k, &v)) {
            iprop *p = prop_for(s, &k);
            if (!p)
                return SL_ENOMEM;
            if (p->last_obj != id) {
                p->present++;
                p->last_obj = id;
            }
            int rc = add(inf, p->sh, &v, depth + 1);
            if (rc)
                return rc;
        }
        return 0;
    }
    case SL_JSON_NONE:
        break;
    }
    return 0;
}

int sl_schema_infer_add(sl_schema_infer *inf, const char *json, size_t len, sl_error *err)
{
    sl_json_tok tok;
    sl_error perr;
    if (sl_json_validate(json, len, SL_JSON_DEPTH_LIMIT, &tok, err ? &perr : NULL))
        return sl_error_set(err, SL_EPARSE, "not valid JSON: %s", perr.msg);
    if (add(inf, &inf->root, &tok, 0))
        return sl_error_set(err, SL_ENOMEM, "out of memory inferring a schema");
    return 0;
}

/* Sets o[key] = v (taking v), failing when v is NULL. */
static bool set(json_t *o, const char *key, json_t *v)
{
    return v && json_object_set_new(o, key, v) == 0;
}

/* The schema of shape s as a new jansson object, or NULL when out of
 * memory. A position never seen (no samples) is {}. */
static json_t *build(const shape *s)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    unsigned types = s->types;
    if (types & I_NUMBER)
        types &= ~I_INTEGER; /* integer + number -> number */
    int count = __builtin_popcount(types);
    if (count == 1) {
        for (int i = 0; i < INTYPES; i++)
            if (types == 1u << i && !set(o, "type", json_string(inames[i])))
                goto fail;
    } else if (count > 1) {
        json_t *list = json_array();
        if (!set(o, "type", list))
            goto fail;
        for (int i = 0; i < INTYPES; i++)
            if ((types & (1u << i)) && json_array_append_new(list, json_string(inames[i])))
                goto fail;
    }
    if (s->strings && s->times == s->strings && !set(o, "format", json_string("date-time")))
        goto fail;
    if (s->objects) {
        json_t *props = json_object(), *req = json_array();
        bool ok = set(o, "properties", props);
        if (!ok) {
            json_decref(req);
            goto fail;
        }
        if (!req)
            goto fail;
        for (size_t i = 0; i < s->nprops; i++) {
            const iprop *p = &s->props[i];
            json_t *sub = build(p->sh);
            if (!sub || json_object_setn_new(props, p->key, p->klen, sub)) {
                json_decref(req);
                goto fail;
            }
            if (p->present == s->objects &&
                json_array_append_new(req, json_stringn(p->key, p->klen))) {
                json_decref(req);
                goto fail;
            }
        }
        if (json_array_size(req) == 0)
            json_decref(req);
        else if (!set(o, "required", req))
            goto fail;
    }
    if (s->items && !set(o, "items", build(s->items)))
        goto fail;
    return o;
fail:
    json_decref(o);
    return NULL;
}

char *sl_schema_infer_result(const sl_schema_infer *inf)
{
    json_t *o = build(&inf->root);
    if (!o)
        return NULL;
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(o);
    return text;
}
