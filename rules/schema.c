/*
 * rules/schema.c — the JSON Schema subset of schema.h: the compiler (jansson,
 * once per schema) and the validator, which walks the data's JSON text with
 * the core/base/json.h scanner: no DOM, and no allocation unless a string longer
 * than STACK_STR bytes with escapes meets a pattern or a format, a number is
 * longer than STACK_NUM characters, or an object schema lists more than 64
 * properties and has required ones.
 */
#include "rules/schema.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/base/buf.h"
#include "core/base/clock.h"
#include "core/base/json.h"

/* Escaped strings up to this size are decoded on the stack. */
#define STACK_STR 512
/* Numbers up to this size are copied on the stack for strtod(). */
#define STACK_NUM 64
/* Longest pointer kept in compile messages. */
#define CPATH_MAX 400
/* Largest schema file sl_schema_compile_file() reads. */
#define SCHEMA_FILE_MAX (16u << 20)

/* Type bits, in the order of type_names[]. */
enum {
    T_NULL = 1u << 0,
    T_BOOLEAN = 1u << 1,
    T_INTEGER = 1u << 2,
    T_NUMBER = 1u << 3,
    T_STRING = 1u << 4,
    T_ARRAY = 1u << 5,
    T_OBJECT = 1u << 6,
};
static const char *const type_names[] = {"null",   "boolean", "integer", "number",
                                         "string", "array",   "object"};
#define NTYPES 7

typedef enum sformat { F_NONE, F_DATE_TIME, F_EMAIL, F_URI } sformat;

/* Number keywords present (snode.numflags). */
enum { N_MIN = 1, N_MAX = 2, N_XMIN = 4, N_XMAX = 8 };

typedef struct snode snode;

/* One entry per name in "properties" or "required", sorted by name. */
typedef struct sprop {
    char *key; /* owned, NUL added but may hold NULs (klen counts) */
    size_t klen;
    snode *schema; /* NULL: only in "required"; its value counts as additional */
    bool required;
    size_t req_pos; /* when required: its index in "required" */
} sprop;

struct snode {
    bool never;     /* the schema false */
    unsigned types; /* allowed T_ bits; 0: any */
    sprop *props;
    size_t nprops;
    size_t *req; /* indexes into props, in the order "required" lists them */
    size_t nreq;
    snode *additional; /* additionalProperties; NULL: anything */
    snode *items;      /* NULL: anything */
    json_t *enumv;     /* an array; NULL when absent */
    json_t *constv;    /* NULL when absent */
    char *enum_text;   /* compact JSON of enum/const, for messages */
    char *const_text;
    unsigned numflags;
    double minimum, maximum, xmin, xmax;
    bool has_minlen, has_maxlen;
    size_t minlen, maxlen;
    bool has_pattern;
    regex_t re;
    char *pattern;
    sformat format;
};

struct sl_schema {
    snode *root;
};

/* ---- freeing ------------------------------------------------------------- */

static void node_free(snode *n)
{
    if (!n)
        return;
    for (size_t i = 0; i < n->nprops; i++) {
        free(n->props[i].key);
        node_free(n->props[i].schema);
    }
    free(n->props);
    free(n->req);
    node_free(n->additional);
    node_free(n->items);
    json_decref(n->enumv);
    json_decref(n->constv);
    free(n->enum_text);
    free(n->const_text);
    if (n->has_pattern)
        regfree(&n->re);
    free(n->pattern);
    free(n);
}

void sl_schema_free(sl_schema *s)
{
    if (!s)
        return;
    node_free(s->root);
    free(s);
}

/* ---- small helpers shared by compiler and validator ---------------------- */

/* Shortest "%g" form of d that reads back as d. */
static void fmt_num(double d, char *out, size_t cap)
{
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(out, cap, "%.*g", prec, d);
        if (strtod(out, NULL) == d)
            return;
    }
}

/* Appends s as one RFC 6901 pointer segment: "~" becomes "~0", "/" "~1". */
static void put_segment(char *out, size_t cap, size_t *pos, const char *s, size_t n)
{
    for (size_t i = 0; i < n && *pos + 3 < cap; i++) {
        if (s[i] == '~' || s[i] == '/') {
            out[(*pos)++] = '~';
            out[(*pos)++] = s[i] == '~' ? '0' : '1';
        } else {
            out[(*pos)++] = s[i];
        }
    }
    out[*pos] = '\0';
}

/* ---- compiling ------------------------------------------------------------ */

typedef struct cctx {
    sl_error *err;
    char path[CPATH_MAX]; /* JSON pointer of the keyword being compiled */
    size_t len;
} cctx;

/* Appends "/seg" to the pointer; returns the previous length for pop(). */
static size_t push(cctx *c, const char *seg, size_t n)
{
    size_t old = c->len;
    if (c->len + 1 < sizeof c->path) {
        c->path[c->len++] = '/';
        put_segment(c->path, sizeof c->path, &c->len, seg, n);
    }
    return old;
}

static size_t push_index(cctx *c, size_t i)
{
    char b[24];
    int n = snprintf(b, sizeof b, "%zu", i);
    return push(c, b, (size_t)n);
}

static void pop(cctx *c, size_t old)
{
    c->len = old;
    c->path[old] = '\0';
}

__attribute__((format(printf, 2, 3))) static int bad(cctx *c, const char *fmt, ...)
{
    if (c->err) {
        char why[SL_ERROR_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, sizeof why, fmt, ap);
        va_end(ap);
        sl_error_set(c->err, SL_EINVAL, "%s: %s", c->len ? c->path : "(root)", why);
    }
    return SL_EINVAL;
}

static int nomem(cctx *c)
{
    return sl_error_set(c->err, SL_ENOMEM, "out of memory compiling the schema");
}

/* The JSON type of v in JSON Schema's words, for messages. */
static const char *jtype(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "object";
    case JSON_ARRAY:
        return "array";
    case JSON_STRING:
        return "string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "boolean";
    case JSON_NULL:
        return "null";
    }
    return "value";
}

/* Appends the compact JSON of v, numbers in their shortest form (the schema
 * is read with every number as a double, which jansson would print as
 * "1.0"). Returns 0 or SL_ENOMEM. */
static int dump(const json_t *v, sl_buf *b)
{
    char num[32];
    int rc = 0;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        size_t kl;
        json_t *m;
        bool first = true;
        rc = sl_buf_append(b, "{", 1);
        json_object_keylen_foreach((json_t *)v, k, kl, m)
        {
            if (!rc && !first)
                rc = sl_buf_append(b, ",", 1);
            first = false;
            if (!rc)
                rc = sl_json_put_string(b, k, kl) == SL_ENOMEM ? SL_ENOMEM : 0;
            if (!rc)
                rc = sl_buf_append(b, ":", 1);
            if (!rc)
                rc = dump(m, b);
        }
        return rc ? rc : sl_buf_append(b, "}", 1);
    }
    case JSON_ARRAY:
        rc = sl_buf_append(b, "[", 1);
        for (size_t i = 0; !rc && i < json_array_size(v); i++) {
            if (i)
                rc = sl_buf_append(b, ",", 1);
            if (!rc)
                rc = dump(json_array_get(v, i), b);
        }
        return rc ? rc : sl_buf_append(b, "]", 1);
    case JSON_STRING:
        /* jansson checked the UTF-8, so only SL_ENOMEM can fail here. */
        return sl_json_put_string(b, json_string_value(v), json_string_length(v)) == SL_ENOMEM
                   ? SL_ENOMEM
                   : 0;
    case JSON_INTEGER:
    case JSON_REAL:
        fmt_num(json_number_value(v), num, sizeof num);
        return sl_buf_append(b, num, strlen(num));
    case JSON_TRUE:
        return sl_buf_append(b, "true", 4);
    case JSON_FALSE:
        return sl_buf_append(b, "false", 5);
    case JSON_NULL:
        return sl_buf_append(b, "null", 4);
    }
    return 0;
}

/* The compact JSON of v as a C string (owned), or NULL when out of memory. */
static char *dump_text(const json_t *v)
{
    sl_buf b = SL_BUF_INIT;
    if (dump(v, &b) || sl_buf_append(&b, "", 1)) {
        sl_buf_free(&b);
        return NULL;
    }
    return (char *)b.data;
}

static int compile_node(cctx *c, const json_t *js, snode **out);

static int compile_type(cctx *c, snode *n, const json_t *v)
{
    if (json_is_string(v) || json_is_array(v)) {
        size_t count = json_is_string(v) ? 1 : json_array_size(v);
        if (count == 0)
            return bad(c, "must name at least one type");
        for (size_t i = 0; i < count; i++) {
            const json_t *t = json_is_string(v) ? v : json_array_get(v, i);
            size_t old = json_is_array(v) ? push_index(c, i) : c->len;
            if (!json_is_string(t))
                return bad(c, "must be a type name (a string), got %s", jtype(t));
            unsigned bit = 0;
            for (int k = 0; k < NTYPES; k++)
                if (strcmp(json_string_value(t), type_names[k]) == 0)
                    bit = 1u << k;
            if (!bit)
                return bad(c,
                           "unknown type \"%s\" (want null, boolean, integer, number, string, "
                           "array or object)",
                           json_string_value(t));
            if (n->types & bit)
                return bad(c, "type \"%s\" is listed twice", json_string_value(t));
            n->types |= bit;
            pop(c, old);
        }
        return 0;
    }
    return bad(c, "must be a type name or a list of type names, got %s", jtype(v));
}

/* Finds name in n->props (unsorted while compiling); returns its index or
 * n->nprops. */
static size_t find_prop(const snode *n, const char *k, size_t kl)
{
    for (size_t i = 0; i < n->nprops; i++)
        if (n->props[i].klen == kl && memcmp(n->props[i].key, k, kl) == 0)
            return i;
    return n->nprops;
}

/* Adds a property entry (growing n->props; cap tracks the room). Returns its
 * index, or -1 when out of memory. */
static long add_prop(snode *n, size_t *cap, const char *k, size_t kl)
{
    if (n->nprops == *cap && sl_grow(&n->props, cap, sizeof *n->props, 8))
            return -1;
    sprop *p = &n->props[n->nprops];
    memset(p, 0, sizeof *p);
    if (!(p->key = malloc(kl + 1)))
        return -1;
    memcpy(p->key, k, kl);
    p->key[kl] = '\0';
    p->klen = kl;
    return (long)n->nprops++;
}

static int compile_properties(cctx *c, snode *n, size_t *cap, const json_t *v)
{
    if (!json_is_object(v))
        return bad(c, "must be an object of property schemas, got %s", jtype(v));
    const char *k;
    size_t kl;
    json_t *sub;
    json_object_keylen_foreach((json_t *)v, k, kl, sub)
    {
        size_t i = find_prop(n, k, kl);
        if (i == n->nprops) {
            long at = add_prop(n, cap, k, kl);
            if (at < 0)
                return nomem(c);
            i = (size_t)at;
        }
        size_t old = push(c, k, kl);
        int rc = compile_node(c, sub, &n->props[i].schema);
        if (rc)
            return rc;
        pop(c, old);
    }
    return 0;
}

static int compile_required(cctx *c, snode *n, size_t *cap, const json_t *v)
{
    if (!json_is_array(v))
        return bad(c, "must be an array of property names, got %s", jtype(v));
    size_t count = json_array_size(v);
    if (count && !(n->req = malloc(count * sizeof *n->req)))
        return nomem(c);
    for (size_t i = 0; i < count; i++) {
        const json_t *name = json_array_get(v, i);
        size_t old = push_index(c, i);
        if (!json_is_string(name))
            return bad(c, "must be a property name (a string), got %s", jtype(name));
        const char *k = json_string_value(name);
        size_t kl = json_string_length(name);
        size_t at = find_prop(n, k, kl);
        if (at == n->nprops) {
            long a = add_prop(n, cap, k, kl);
            if (a < 0)
                return nomem(c);
            at = (size_t)a;
        } else if (n->props[at].required) {
            return bad(c, "\"%s\" is listed twice", k);
        }
        n->props[at].required = true;
        n->props[at].req_pos = n->nreq;
        n->req[n->nreq++] = at;
        pop(c, old);
    }
    return 0;
}

static int compile_number(cctx *c, const json_t *v, bool exclusive, double *out)
{
    if (json_is_boolean(v) && exclusive)
        return bad(c, "must be a number (the draft-4 boolean form is not supported)");
    if (!json_is_number(v))
        return bad(c, "must be a number, got %s", jtype(v));
    *out = json_number_value(v);
    return 0;
}

static int compile_length(cctx *c, const json_t *v, size_t *out)
{
    double d = json_is_number(v) ? json_number_value(v) : -1;
    if (!json_is_number(v) || d < 0 || d != floor(d) || d > 9007199254740992.0)
        return bad(c, "must be a non-negative integer");
    *out = (size_t)d;
    return 0;
}

static int compile_pattern(cctx *c, snode *n, const json_t *v)
{
    if (!json_is_string(v))
        return bad(c, "must be a regular expression (a string), got %s", jtype(v));
    if (strlen(json_string_value(v)) != json_string_length(v))
        return bad(c, "must not contain a NUL character");
    if (!(n->pattern = strdup(json_string_value(v))))
        return nomem(c);
    int rc = regcomp(&n->re, n->pattern, REG_EXTENDED | REG_NOSUB);
    if (rc) {
        char why[256];
        regerror(rc, &n->re, why, sizeof why);
        return rc == REG_ESPACE ? nomem(c) : bad(c, "invalid regular expression: %s", why);
    }
    n->has_pattern = true;
    return 0;
}

static int compile_format(cctx *c, snode *n, const json_t *v)
{
    if (!json_is_string(v))
        return bad(c, "must be a format name (a string), got %s", jtype(v));
    const char *f = json_string_value(v);
    if (strcmp(f, "date-time") == 0)
        n->format = F_DATE_TIME;
    else if (strcmp(f, "email") == 0)
        n->format = F_EMAIL;
    else if (strcmp(f, "uri") == 0)
        n->format = F_URI;
    else
        return bad(c, "unknown format \"%s\" (supported: date-time, email, uri)", f);
    return 0;
}

/* Keywords, so that one switch handles them. */
typedef enum kw {
    KW_UNKNOWN,
    KW_ANNOTATION,
    KW_TYPE,
    KW_PROPERTIES,
    KW_REQUIRED,
    KW_ADDITIONAL,
    KW_ITEMS,
    KW_ENUM,
    KW_CONST,
    KW_MINIMUM,
    KW_MAXIMUM,
    KW_XMIN,
    KW_XMAX,
    KW_MINLENGTH,
    KW_MAXLENGTH,
    KW_PATTERN,
    KW_FORMAT,
} kw;

static kw keyword(const char *k, size_t kl)
{
    static const struct {
        const char *name;
        kw kw;
    } table[] = {
        {"type", KW_TYPE},
        {"properties", KW_PROPERTIES},
        {"required", KW_REQUIRED},
        {"additionalProperties", KW_ADDITIONAL},
        {"items", KW_ITEMS},
        {"enum", KW_ENUM},
        {"const", KW_CONST},
        {"minimum", KW_MINIMUM},
        {"maximum", KW_MAXIMUM},
        {"exclusiveMinimum", KW_XMIN},
        {"exclusiveMaximum", KW_XMAX},
        {"minLength", KW_MINLENGTH},
        {"maxLength", KW_MAXLENGTH},
        {"pattern", KW_PATTERN},
        {"format", KW_FORMAT},
        {"$schema", KW_ANNOTATION},
        {"$id", KW_ANNOTATION},
        {"title", KW_ANNOTATION},
        {"description", KW_ANNOTATION},
        {"default", KW_ANNOTATION},
        {"examples", KW_ANNOTATION},
        {"$comment", KW_ANNOTATION},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strlen(table[i].name) == kl && memcmp(table[i].name, k, kl) == 0)
            return table[i].kw;
    return KW_UNKNOWN;
}

static int compile_keyword(cctx *c, snode *n, size_t *cap, kw which, const json_t *v)
{
    switch (which) {
    case KW_UNKNOWN:
        return bad(c, "unknown keyword");
    case KW_ANNOTATION:
        return 0;
    case KW_TYPE:
        return compile_type(c, n, v);
    case KW_PROPERTIES:
        return compile_properties(c, n, cap, v);
    case KW_REQUIRED:
        return compile_required(c, n, cap, v);
    case KW_ADDITIONAL:
        if (!json_is_object(v) && !json_is_boolean(v))
            return bad(c, "must be a boolean or a schema, got %s", jtype(v));
        if (json_is_true(v))
            return 0; /* the default: anything */
        return compile_node(c, v, &n->additional);
    case KW_ITEMS:
        if (json_is_array(v))
            return bad(c, "must be a schema (the array form is not supported)");
        return compile_node(c, v, &n->items);
    case KW_ENUM:
        if (!json_is_array(v) || json_array_size(v) == 0)
            return bad(c, "must be a non-empty array of values");
        n->enumv = json_incref((json_t *)v);
        return (n->enum_text = dump_text(v)) ? 0 : nomem(c);
    case KW_CONST:
        n->constv = json_incref((json_t *)v);
        return (n->const_text = dump_text(v)) ? 0 : nomem(c);
    case KW_MINIMUM:
        n->numflags |= N_MIN;
        return compile_number(c, v, false, &n->minimum);
    case KW_MAXIMUM:
        n->numflags |= N_MAX;
        return compile_number(c, v, false, &n->maximum);
    case KW_XMIN:
        n->numflags |= N_XMIN;
        return compile_number(c, v, true, &n->xmin);
    case KW_XMAX:
        n->numflags |= N_XMAX;
        return compile_number(c, v, true, &n->xmax);
    case KW_MINLENGTH:
        n->has_minlen = true;
        return compile_length(c, v, &n->minlen);
    case KW_MAXLENGTH:
        n->has_maxlen = true;
        return compile_length(c, v, &n->maxlen);
    case KW_PATTERN:
        return compile_pattern(c, n, v);
    case KW_FORMAT:
        return compile_format(c, n, v);
    }
    return bad(c, "unknown keyword");
}

static int prop_cmp(const void *a, const void *b)
{
    const sprop *x = a, *y = b;
    size_t n = x->klen < y->klen ? x->klen : y->klen;
    int d = memcmp(x->key, y->key, n);
    return d ? d : (x->klen > y->klen) - (x->klen < y->klen);
}

/* Sorts the properties by name for binary search, and points req[] at
 * their new places (req_pos remembers each one's place in "required"). */
static void sort_props(snode *n)
{
    if (n->nprops > 1)
        qsort(n->props, n->nprops, sizeof *n->props, prop_cmp);
    for (size_t i = 0; i < n->nprops; i++)
        if (n->props[i].required)
            n->req[n->props[i].req_pos] = i;
}

static int compile_node(cctx *c, const json_t *js, snode **out)
{
    snode *n = calloc(1, sizeof *n);
    if (!n)
        return nomem(c);
    *out = n; /* freed by the caller's node_free() even on error */
    if (json_is_boolean(js)) {
        n->never = json_is_false(js);
        return 0;
    }
    if (!json_is_object(js))
        return bad(c, "a schema must be an object or a boolean, got %s", jtype(js));
    size_t cap = 0;
    const char *k;
    size_t kl;
    json_t *v;
    json_object_keylen_foreach((json_t *)js, k, kl, v)
    {
        size_t old = push(c, k, kl);
        int rc = compile_keyword(c, n, &cap, keyword(k, kl), v);
        if (rc)
            return rc;
        pop(c, old);
    }
    sort_props(n);
    return 0;
}

int sl_schema_compile(const char *json, size_t len, sl_schema **out, sl_error *err)
{
    json_error_t je;
    json_t *doc = json_loadb(
        json, len,
        JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!doc) {
        enum json_error_code code = json_error_code(&je);
        if (code == json_error_out_of_memory)
            return sl_error_set(err, SL_ENOMEM, "out of memory reading the schema");
        return sl_error_set(err, code == json_error_duplicate_key ? SL_EINVAL : SL_EPARSE,
                            "line %d, column %d: %s", je.line, je.column, je.text);
    }
    cctx c = {.err = err};
    sl_schema *s = calloc(1, sizeof *s);
    int rc = s ? compile_node(&c, doc, &s->root) : nomem(&c);
    json_decref(doc);
    if (rc) {
        sl_schema_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

int sl_schema_compile_file(const char *path, sl_schema **out, sl_error *err)
{
    sl_buf text = SL_BUF_INIT;
    int rc = sl_buf_read_file(&text, path, SCHEMA_FILE_MAX, err);
    if (rc)
        return rc;
    sl_error e = {0};
    rc = sl_schema_compile(text.data ? (const char *)text.data : "", text.len, out, &e);
    sl_buf_free(&text);
    if (rc)
        return sl_error_set(err, rc, "%s: %s", path, e.msg);
    return 0;
}

/* ---- validating ----------------------------------------------------------- */

/* Where the walk is: one frame per level, linked to the level above, so the
 * pointer costs nothing until a violation needs it. */
typedef struct frame {
    const struct frame *up; /* NULL at /data */
    const sl_json_tok *key; /* member name, or NULL for an array element */
    size_t index;
} frame;

static void put_pointer(const frame *f, char *out, size_t cap, size_t *pos)
{
    if (!f->up) {
        snprintf(out, cap, "/data");
        *pos = strlen(out);
        return;
    }
    put_pointer(f->up, out, cap, pos);
    if (*pos + 2 >= cap)
        return;
    out[(*pos)++] = '/';
    out[*pos] = '\0';
    if (!f->key) {
        int n = snprintf(out + *pos, cap - *pos, "%zu", f->index);
        *pos += n > 0 && (size_t)n < cap - *pos ? (size_t)n : 0;
        return;
    }
    size_t p = 0, got;
    char chunk[64];
    while ((got = sl_json_unescape_part(f->key, &p, chunk, sizeof chunk)) > 0)
        put_segment(out, cap, pos, chunk, got);
}

/* Records "<pointer of f>: <reason>" in err; returns SL_EINVAL. Out of line:
 * violations are the slow path. */
__attribute__((noinline, format(printf, 3, 4))) static int vfail(sl_error *err, const frame *f,
                                                                 const char *fmt, ...)
{
    if (err) {
        char ptr[256], why[SL_ERROR_MAX];
        size_t pos = 0;
        put_pointer(f, ptr, sizeof ptr, &pos);
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, sizeof why, fmt, ap);
        va_end(ap);
        sl_error_set(err, SL_EINVAL, "%s: %s", ptr, why);
    }
    return SL_EINVAL;
}

/* Reads a number token as a double. Returns 0 or SL_ENOMEM.
 *
 * Numbers with at most 15 significant digits and a short fraction take
 * Clinger's fast path: the digits as an integer below 2^53 and a power of
 * ten up to 1e22 are both exact doubles, so one IEEE division rounds
 * correctly, which is what strtod() gives, at a fraction of its cost. */
static int tok_num(const sl_json_tok *t, double *out)
{
    static const double pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                   1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    const char *p = t->p, *end = t->p + t->len;
    bool neg = *p == '-';
    uint64_t m = 0;
    int digits = 0, frac = 0;
    p += neg;
    for (; p < end && *p >= '0' && *p <= '9'; p++, digits++)
        m = m * 10 + (uint64_t)(*p - '0');
    if (p < end && *p == '.')
        for (p++; p < end && *p >= '0' && *p <= '9'; p++, digits++, frac++)
            m = m * 10 + (uint64_t)(*p - '0');
    if (p == end && digits <= 15) {
        double d = (double)m / pow10[frac];
        *out = neg ? -d : d;
        return 0;
    }
    char nb[STACK_NUM], *b = nb;
    if (t->len >= sizeof nb && !(b = malloc(t->len + 1)))
        return SL_ENOMEM;
    memcpy(b, t->p, t->len);
    b[t->len] = '\0';
    *out = strtod(b, NULL);
    if (b != nb)
        free(b);
    return 0;
}

/* Compares the decoded string token t with [s, s + n) bytewise (shorter
 * first on a common prefix), decoding escapes in small chunks. */
static int tok_str_cmp(const sl_json_tok *t, const char *s, size_t n)
{
    if (!(t->flags & SL_JSON_ESCAPED)) {
        size_t tl = t->len - 2, m = tl < n ? tl : n;
        int d = memcmp(t->p + 1, s, m);
        return d ? d : (tl > n) - (tl < n);
    }
    size_t pos = 0, off = 0, got;
    char chunk[64];
    while ((got = sl_json_unescape_part(t, &pos, chunk, sizeof chunk)) > 0) {
        size_t m = got < n - off ? got : n - off;
        int d = memcmp(chunk, s + off, m);
        if (d)
            return d;
        if (got > n - off)
            return 1;
        off += got;
    }
    return off == n ? 0 : -1;
}

/* Structural equality of the token t and the schema value j: object member
 * order does not matter and numbers compare as doubles. Recurses only as
 * deep as j goes. Returns 1, 0 or SL_ENOMEM. */
static int equal(const sl_json_tok *t, const json_t *j)
{
    switch (t->type) {
    case SL_JSON_NULL:
        return json_is_null(j);
    case SL_JSON_TRUE:
        return json_is_true(j);
    case SL_JSON_FALSE:
        return json_is_false(j);
    case SL_JSON_NUMBER: {
        double d;
        if (!json_is_number(j))
            return 0;
        if (tok_num(t, &d))
            return SL_ENOMEM;
        return d == json_number_value(j);
    }
    case SL_JSON_STRING:
        return json_is_string(j) &&
               tok_str_cmp(t, json_string_value(j), json_string_length(j)) == 0;
    case SL_JSON_ARRAY: {
        if (!json_is_array(j))
            return 0;
        sl_json_iter it;
        sl_json_tok el;
        size_t i = 0;
        sl_json_iter_init(&it, t);
        while (sl_json_iter_elem(&it, &el)) {
            if (i >= json_array_size(j))
                return 0;
            int rc = equal(&el, json_array_get(j, i++));
            if (rc != 1)
                return rc;
        }
        return i == json_array_size(j);
    }
    case SL_JSON_OBJECT: {
        if (!json_is_object(j))
            return 0;
        sl_json_iter it;
        sl_json_tok k, v;
        /* Every member of t is in j with an equal value… */
        sl_json_iter_init(&it, t);
        while (sl_json_iter_member(&it, &k, &v)) {
            const char *jk;
            size_t jl;
            json_t *jv, *found = NULL;
            json_object_keylen_foreach((json_t *)j, jk, jl, jv)
            {
                if (tok_str_cmp(&k, jk, jl) == 0) {
                    found = jv;
                    break;
                }
            }
            if (!found)
                return 0;
            int rc = equal(&v, found);
            if (rc != 1)
                return rc;
        }
        /* …and every name of j is in t (t may repeat a name). */
        const char *jk;
        size_t jl;
        json_t *jv;
        json_object_keylen_foreach((json_t *)j, jk, jl, jv)
        {
            bool seen = false;
            sl_json_iter_init(&it, t);
            while (!seen && sl_json_iter_member(&it, &k, &v))
                seen = tok_str_cmp(&k, jk, jl) == 0;
            if (!seen)
                return 0;
        }
        return 1;
    }
    case SL_JSON_NONE:
        break;
    }
    return 0;
}

/* "string", "string or null", "string, number or null". */
static void type_list(unsigned types, char *out, size_t cap)
{
    int total = __builtin_popcount(types), k = 0;
    size_t pos = 0;
    out[0] = '\0';
    for (int i = 0; i < NTYPES; i++) {
        if (!(types & (1u << i)))
            continue;
        const char *sep = k == 0 ? "" : k == total - 1 ? " or " : ", ";
        int n = snprintf(out + pos, cap - pos, "%s%s", sep, type_names[i]);
        if (n < 0 || (size_t)n >= cap - pos)
            return;
        pos += (size_t)n;
        k++;
    }
}

/* A data value for a message: the token's text, cut at 40 bytes. */
static void excerpt(const sl_json_tok *t, char *out, size_t cap)
{
    size_t n = t->len < 40 ? t->len : 40;
    snprintf(out, cap, "%.*s%s", (int)n, t->p, t->len > n ? "..." : "");
}

static int check_number(const snode *n, const sl_json_tok *t, double d, const frame *f,
                        sl_error *err)
{
    char lim[32], val[48];
    if ((n->numflags & N_MIN) && !(d >= n->minimum)) {
        fmt_num(n->minimum, lim, sizeof lim);
        excerpt(t, val, sizeof val);
        return vfail(err, f, "%s is less than the minimum %s", val, lim);
    }
    if ((n->numflags & N_MAX) && !(d <= n->maximum)) {
        fmt_num(n->maximum, lim, sizeof lim);
        excerpt(t, val, sizeof val);
        return vfail(err, f, "%s is greater than the maximum %s", val, lim);
    }
    if ((n->numflags & N_XMIN) && !(d > n->xmin)) {
        fmt_num(n->xmin, lim, sizeof lim);
        excerpt(t, val, sizeof val);
        return vfail(err, f, "%s is not greater than the exclusive minimum %s", val, lim);
    }
    if ((n->numflags & N_XMAX) && !(d < n->xmax)) {
        fmt_num(n->xmax, lim, sizeof lim);
        excerpt(t, val, sizeof val);
        return vfail(err, f, "%s is not less than the exclusive maximum %s", val, lim);
    }
    return 0;
}

/* Counts the code points of a string token (valid UTF-8 after decoding):
 * the bytes that are not continuation bytes (10xxxxxx), eight at a time. */
static size_t count_starts(const char *s, size_t n)
{
    const uint64_t highs = 0x8080808080808080ull;
    size_t count = n, i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, s + i, 8);
        count -= (size_t)__builtin_popcountll(v & ~(v << 1) & highs);
    }
    for (; i < n; i++)
        count -= ((unsigned char)s[i] & 0xc0) == 0x80;
    return count;
}

static size_t code_points(const sl_json_tok *t)
{
    if (!(t->flags & SL_JSON_ESCAPED))
        return count_starts(t->p + 1, t->len - 2);
    size_t pos = 0, got, count = 0;
    char chunk[64];
    while ((got = sl_json_unescape_part(t, &pos, chunk, sizeof chunk)) > 0)
        count += count_starts(chunk, got);
    return count;
}

static bool is_alpha(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

static bool is_alnum(char ch)
{
    return is_alpha(ch) || (ch >= '0' && ch <= '9');
}

static bool is_hex(char ch)
{
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
}

/* local@domain.tld, ASCII only (RFC 5321's dot-atom local part; "idn-email"
 * would be the internationalised form): the local part is 1-64 atext
 * characters with single inner dots; the domain has at least two labels of
 * 1-63 letters, digits and inner hyphens, the last starting with a letter. */
static bool is_email(const char *s, size_t n)
{
    const char *at = memchr(s, '@', n);
    if (!at || at == s || at - s > 64)
        return false;
    size_t ll = (size_t)(at - s);
    for (size_t i = 0; i < ll; i++) {
        char ch = s[i];
        if (ch == '.') {
            if (i == 0 || i == ll - 1 || s[i - 1] == '.')
                return false;
        } else if (!is_alnum(ch) && !strchr("!#$%&'*+-/=?^_`{|}~", ch)) {
            return false;
        }
    }
    const char *d = at + 1, *end = s + n;
    if (end - d > 253)
        return false;
    int labels = 0;
    const char *label = d;
    for (const char *p = d;; p++) {
        if (p == end || *p == '.') {
            size_t len = (size_t)(p - label);
            if (len == 0 || len > 63 || label[0] == '-' || p[-1] == '-')
                return false;
            labels++;
            if (p == end)
                return labels >= 2 && is_alpha(label[0]);
            label = p + 1;
        } else if (!is_alnum(*p) && *p != '-') {
            return false;
        }
    }
}

/* scheme ":" rest, with RFC 3986's scheme grammar (ALPHA *( ALPHA / DIGIT /
 * "+" / "-" / "." )); the rest may hold only characters a URI may hold
 * (unreserved, reserved, and '%' followed by two hex digits). */
static bool is_uri(const char *s, size_t n)
{
    size_t i = 0;
    if (n == 0 || !is_alpha(s[0]))
        return false;
    while (i < n && (is_alnum(s[i]) || s[i] == '+' || s[i] == '-' || s[i] == '.'))
        i++;
    if (i == n || s[i] != ':')
        return false;
    for (i++; i < n; i++) {
        char ch = s[i];
        if (ch == '%') {
            if (i + 2 >= n || !is_hex(s[i + 1]) || !is_hex(s[i + 2]))
                return false;
            i += 2;
        } else if (!is_alnum(ch) && !strchr("-._~:/?#[]@!$&'()*+,;=", ch)) {
            return false;
        }
    }
    return true;
}

/* pattern and format on a string token. The text goes through a stack
 * buffer (the heap past STACK_STR bytes) when it has escapes, or when a
 * pattern needs it NUL-terminated: regexec() gets REG_STARTEND, so NULs
 * decoded from \u0000 are matched like any byte, but sanitizer interceptors
 * still call strlen() on the string. Kept out of line so the buffer is not
 * part of every validation frame. */
__attribute__((noinline)) static int check_string_text(const snode *n, const sl_json_tok *t,
                                                       const frame *f, sl_error *err)
{
    char sbuf[STACK_STR], *heap = NULL;
    const char *s = t->p + 1;
    size_t len = t->len - 2;
    if ((t->flags & SL_JSON_ESCAPED) || n->has_pattern) {
        char *b = sbuf;
        if (len + 1 > sizeof sbuf && !(b = heap = malloc(len + 1)))
            return sl_error_set(err, SL_ENOMEM, "out of memory validating a string");
        if (t->flags & SL_JSON_ESCAPED)
            sl_json_unescape(t, b, len + 1, &len);
        else
            memcpy(b, s, len);
        b[len] = '\0';
        s = b;
    }
    int rc = 0;
    if (n->has_pattern) {
        regmatch_t m = {.rm_so = 0, .rm_eo = (regoff_t)len};
        if (regexec(&n->re, s, 1, &m, REG_STARTEND) != 0)
            rc = vfail(err, f, "string does not match the pattern \"%s\"", n->pattern);
    }
    if (!rc && n->format != F_NONE) {
        int64_t ms;
        switch (n->format) {
        case F_DATE_TIME:
            if (sl_time_parse_rfc3339(s, len, &ms) != 0)
                rc = vfail(err, f, "string is not a valid date-time (RFC 3339)");
            break;
        case F_EMAIL:
            if (!is_email(s, len))
                rc = vfail(err, f, "string is not a valid email address");
            break;
        case F_URI:
            if (!is_uri(s, len))
                rc = vfail(err, f, "string is not a valid URI");
            break;
        case F_NONE:
            break;
        }
    }
    free(heap);
    return rc;
}

static int check_string(const snode *n, const sl_json_tok *t, const frame *f, sl_error *err)
{
    if (n->has_minlen || n->has_maxlen) {
        size_t cp = code_points(t);
        if (n->has_minlen && cp < n->minlen)
            return vfail(err, f, "string is shorter than the minimum length %zu (%zu character%s)",
                         n->minlen, cp, cp == 1 ? "" : "s");
        if (n->has_maxlen && cp > n->maxlen)
            return vfail(err, f, "string is longer than the maximum length %zu (%zu characters)",
                         n->maxlen, cp);
    }
    if (n->has_pattern || n->format != F_NONE)
        return check_string_text(n, t, f, err);
    return 0;
}

static int validate(const snode *n, const sl_json_tok *t, const frame *f, sl_error *err);

/* Index of the property named by key token k in the sorted props, or
 * n->nprops. */
static size_t lookup(const snode *n, const sl_json_tok *k)
{
    size_t lo = 0, hi = n->nprops;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int d = tok_str_cmp(k, n->props[mid].key, n->props[mid].klen);
        if (d == 0)
            return mid;
        if (d < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return n->nprops;
}

static int check_object(const snode *n, const sl_json_tok *t, const frame *f, sl_error *err)
{
    uint64_t seen_bits = 0;
    unsigned char *seen = NULL; /* when there are more than 64 properties */
    if (n->nreq && n->nprops > 64 && !(seen = calloc(n->nprops, 1)))
        return sl_error_set(err, SL_ENOMEM, "out of memory validating an object");
    sl_json_iter it;
    sl_json_tok k, v;
    int rc = 0;
    sl_json_iter_init(&it, t);
    while (!rc && sl_json_iter_member(&it, &k, &v)) {
        size_t i = n->nprops ? lookup(n, &k) : n->nprops;
        frame sub = {f, &k, 0};
        const snode *s = n->additional;
        if (i < n->nprops) {
            if (n->props[i].required) {
                if (seen)
                    seen[i] = 1;
                else
                    seen_bits |= 1ull << i;
            }
            if (n->props[i].schema)
                s = n->props[i].schema;
        }
        if (!s)
            continue;
        if (s == n->additional && s->never)
            rc = vfail(err, &sub, "unexpected property (additionalProperties is false)");
        else
            rc = validate(s, &v, &sub, err);
    }
    for (size_t r = 0; !rc && r < n->nreq; r++) {
        size_t i = n->req[r];
        if (!(seen ? seen[i] : (seen_bits >> i) & 1))
            rc = vfail(err, f, "missing required property \"%s\"", n->props[i].key);
    }
    free(seen);
    return rc;
}

static int check_array(const snode *n, const sl_json_tok *t, const frame *f, sl_error *err)
{
    sl_json_iter it;
    sl_json_tok el;
    frame sub = {f, NULL, 0};
    sl_json_iter_init(&it, t);
    for (; sl_json_iter_elem(&it, &el); sub.index++) {
        int rc = validate(n->items, &el, &sub, err);
        if (rc)
            return rc;
    }
    return 0;
}

/* The order of checks, which decides the violation reported: false schema,
 * type, const, enum, then the keywords of the value's type (number bounds;
 * string lengths, pattern, format; array items in order; object members in
 * document order, then required properties in the order listed). */
static int validate(const snode *n, const sl_json_tok *t, const frame *f, sl_error *err)
{
    if (n->never)
        return vfail(err, f, "no value is allowed here (the schema is false)");
    double d = 0;
    bool have_d = false;
    if (n->types) {
        unsigned bit;
        switch (t->type) {
        case SL_JSON_NULL:
            bit = T_NULL;
            break;
        case SL_JSON_TRUE:
        case SL_JSON_FALSE:
            bit = T_BOOLEAN;
            break;
        case SL_JSON_NUMBER:
            bit = T_NUMBER;
            if (!(n->types & T_NUMBER) && (n->types & T_INTEGER)) {
                if (t->flags & SL_JSON_INTEGER) {
                    bit = T_INTEGER;
                } else {
                    if (tok_num(t, &d))
                        return sl_error_set(err, SL_ENOMEM, "out of memory");
                    have_d = true;
                    if (d == floor(d))
                        bit = T_INTEGER;
                }
            }
            break;
        case SL_JSON_STRING:
            bit = T_STRING;
            break;
        case SL_JSON_ARRAY:
            bit = T_ARRAY;
            break;
        default:
            bit = T_OBJECT;
            break;
        }
        if (!(n->types & bit)) {
            char want[96];
            type_list(n->types, want, sizeof want);
            return vfail(err, f, "expected %s, got %s", want, sl_json_type_name(t->type));
        }
    }
    if (n->constv || n->enumv) {
        int eq = 1;
        if (n->constv && (eq = equal(t, n->constv)) == 0)
            return vfail(err, f, "value does not equal the const %s", n->const_text);
        for (size_t i = 0; eq >= 0 && n->enumv && i < json_array_size(n->enumv); i++)
            if ((eq = equal(t, json_array_get(n->enumv, i))) == 1)
                break;
        if (eq < 0)
            return sl_error_set(err, SL_ENOMEM, "out of memory");
        if (eq == 0)
            return vfail(err, f, "value is not one of the enum values %s", n->enum_text);
    }
    switch (t->type) {
    case SL_JSON_NUMBER:
        if (!n->numflags)
            return 0;
        if (!have_d && tok_num(t, &d))
            return sl_error_set(err, SL_ENOMEM, "out of memory");
        return check_number(n, t, d, f, err);
    case SL_JSON_STRING:
        return check_string(n, t, f, err);
    case SL_JSON_ARRAY:
        return n->items ? check_array(n, t, f, err) : 0;
    case SL_JSON_OBJECT:
        return n->nprops || n->additional ? check_object(n, t, f, err) : 0;
    default:
        return 0;
    }
}

int sl_schema_validate(const sl_schema *s, const char *json, size_t len, sl_error *err)
{
    sl_json_tok tok;
    sl_error perr;
    int rc = sl_json_validate(json, len, SL_JSON_DEPTH_LIMIT, &tok, err ? &perr : NULL);
    if (rc)
        return sl_error_set(err, SL_EPARSE, "/data: not valid JSON: %s", perr.msg);
    frame root = {NULL, NULL, 0};
    return validate(s->root, &tok, &root, err);
}
