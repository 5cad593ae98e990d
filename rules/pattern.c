/*
 * rules/pattern.c — EventBridge event patterns: the compiler (jansson, once
 * per pattern) and the matcher (core/json.h, per event, no allocation in the
 * common case).
 */
#include "rules/pattern.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"

/* Fields per pattern object: the matcher tracks them in one 64-bit mask. */
#define MAX_FIELDS 64
/* Escaped strings up to this size are decoded on the stack. */
#define STACK_STR 512
/* Numbers up to this size are copied on the stack for strtod(). */
#define STACK_NUM 64
#define PATH_MAX_LEN 256

typedef enum mkind {
    M_STR, /* exact string */
    M_NUM, /* exact number */
    M_TRUE,
    M_FALSE,
    M_NULL,
    M_PREFIX,
    M_PREFIX_IC,
    M_SUFFIX,
    M_SUFFIX_IC,
    M_EQ_IC,
    M_WILDCARD,
    M_NUMERIC,
    M_EXISTS,
    M_CIDR,
    M_ANYBUT, /* none of subs matches (subs are M_STR/M_NUM/M_PREFIX/…) */
} mkind;

typedef struct piece {
    char *s;
    size_t len;
} piece;

typedef struct matcher {
    mkind kind;
    char *s; /* string operand (owned) */
    size_t slen;
    double num;    /* M_NUM */
    double lo, hi; /* M_NUMERIC */
    bool has_lo, lo_incl, has_hi, hi_incl;
    bool exists;            /* M_EXISTS */
    int family;             /* M_CIDR: 4 or 6 */
    unsigned bits;          /* M_CIDR prefix length */
    unsigned char addr[16]; /* M_CIDR network, host bits cleared */
    piece *pieces;          /* M_WILDCARD: literal runs between stars */
    size_t npieces;
    struct matcher *subs; /* M_ANYBUT */
    size_t nsubs;
    bool strings_only; /* M_ANYBUT: only string values can match */
} matcher;

struct node;

typedef struct field {
    char *key; /* decoded, owned */
    size_t klen;
    matcher *m; /* a leaf when child is NULL */
    size_t nm;
    struct node *child;
} field;

typedef struct node {
    field *f; /* sorted by key (bytewise, shorter first on ties) */
    size_t nf;
    struct node *ors; /* "$or" alternatives, each a node */
    size_t nors;
} node;

struct sl_pattern {
    node root;
};

/* ---- freeing ------------------------------------------------------------- */

static void matcher_clear(matcher *m)
{
    free(m->s);
    for (size_t i = 0; i < m->npieces; i++)
        free(m->pieces[i].s);
    free(m->pieces);
    for (size_t i = 0; i < m->nsubs; i++)
        matcher_clear(&m->subs[i]);
    free(m->subs);
}

static void node_clear(node *n)
{
    for (size_t i = 0; i < n->nf; i++) {
        field *f = &n->f[i];
        free(f->key);
        for (size_t j = 0; j < f->nm; j++)
            matcher_clear(&f->m[j]);
        free(f->m);
        if (f->child) {
            node_clear(f->child);
            free(f->child);
        }
    }
    free(n->f);
    for (size_t i = 0; i < n->nors; i++)
        node_clear(&n->ors[i]);
    free(n->ors);
}

void sl_pattern_free(sl_pattern *p)
{
    if (!p)
        return;
    node_clear(&p->root);
    free(p);
}

/* ---- compiling ------------------------------------------------------------ */

static char *dupmem(const char *s, size_t len)
{
    char *d = malloc(len + 1);
    if (d) {
        memcpy(d, s, len);
        d[len] = '\0';
    }
    return d;
}

static int nomem(sl_error *err)
{
    return sl_error_set(err, SL_ENOMEM, "out of memory compiling the pattern");
}

static int bad(sl_error *err, const char *path, const char *fmt, const char *arg)
{
    char msg[SL_ERROR_MAX];
    snprintf(msg, sizeof msg, fmt, arg ? arg : "");
    return sl_error_set(err, SL_EINVAL, "%s: %s", path[0] ? path : "(pattern)", msg);
}

static int set_string(matcher *m, json_t *v)
{
    m->slen = json_string_length(v);
    m->s = dupmem(json_string_value(v), m->slen);
    return m->s ? 0 : SL_ENOMEM;
}

/* Parses "a.b.c.d/n" or "v6/n" (a bare address means the full length). */
static int compile_cidr(matcher *m, json_t *v, const char *path, sl_error *err)
{
    if (!json_is_string(v))
        return bad(err, path, "cidr needs a string such as \"10.0.0.0/24\"", NULL);
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    char buf[INET6_ADDRSTRLEN + 8];
    if (len >= sizeof buf)
        return bad(err, path, "cidr: \"%s\" is not an address/prefix", s);
    memcpy(buf, s, len + 1);
    char *slash = strchr(buf, '/');
    if (slash)
        *slash = '\0';
    unsigned maxbits;
    if (inet_pton(AF_INET, buf, m->addr) == 1) {
        m->family = 4;
        maxbits = 32;
    } else if (inet_pton(AF_INET6, buf, m->addr) == 1) {
        m->family = 6;
        maxbits = 128;
    } else {
        return bad(err, path, "cidr: \"%s\" is not an address/prefix", s);
    }
    m->bits = maxbits;
    if (slash) {
        const char *d = slash + 1;
        unsigned bits = 0;
        if (!*d || strlen(d) > 3)
            return bad(err, path, "cidr: \"%s\" has a bad prefix length", s);
        for (; *d; d++) {
            if (*d < '0' || *d > '9')
                return bad(err, path, "cidr: \"%s\" has a bad prefix length", s);
            bits = bits * 10 + (unsigned)(*d - '0');
        }
        if (bits > maxbits)
            return bad(err, path, "cidr: \"%s\" has a bad prefix length", s);
        m->bits = bits;
    }
    /* Clear host bits so the match is a plain prefix compare. */
    unsigned nbytes = maxbits / 8;
    for (unsigned i = 0; i < nbytes; i++) {
        unsigned from = i * 8;
        if (from >= m->bits)
            m->addr[i] = 0;
        else if (m->bits - from < 8)
            m->addr[i] &= (unsigned char)(0xFFu << (8 - (m->bits - from)));
    }
    m->kind = M_CIDR;
    return 0;
}

/* Splits a wildcard pattern into the literal runs between unescaped stars;
 * "\*" is a literal star and "\\" a literal backslash. */
static int compile_wildcard(matcher *m, json_t *v, const char *path, sl_error *err)
{
    if (!json_is_string(v))
        return bad(err, path, "wildcard needs a string", NULL);
    const char *s = json_string_value(v);
    size_t len = json_string_length(v);
    size_t stars = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '\\') {
            if (i + 1 >= len || (s[i + 1] != '*' && s[i + 1] != '\\'))
                return bad(err, path, "wildcard \"%s\": a backslash may only escape '*' or '\\'",
                           s);
            i++;
        } else if (s[i] == '*') {
            if (i + 1 < len && s[i + 1] == '*')
                return bad(err, path, "wildcard \"%s\": consecutive '*' are not allowed", s);
            stars++;
        }
    }
    m->kind = M_WILDCARD;
    m->pieces = calloc(stars + 1, sizeof *m->pieces);
    if (!m->pieces)
        return SL_ENOMEM;
    m->npieces = stars + 1;
    size_t k = 0;
    char *cur = malloc(len + 1);
    if (!cur)
        return SL_ENOMEM;
    size_t cl = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || s[i] == '*') {
            m->pieces[k].s = dupmem(cur, cl);
            if (!m->pieces[k].s) {
                free(cur);
                return SL_ENOMEM;
            }
            m->pieces[k++].len = cl;
            cl = 0;
        } else if (s[i] == '\\') {
            cur[cl++] = s[++i];
        } else {
            cur[cl++] = s[i];
        }
    }
    free(cur);
    return 0;
}

static int numeric_op(const char *op, int *code)
{
    static const char *const ops[] = {"=", "<", "<=", ">", ">="};
    for (int i = 0; i < 5; i++) {
        if (strcmp(op, ops[i]) == 0) {
            *code = i;
            return 0;
        }
    }
    return -1;
}

static int compile_numeric(matcher *m, json_t *v, const char *path, sl_error *err)
{
    const char *need = "numeric needs an operator and a number";
    if (!json_is_array(v))
        return bad(err, path, need, NULL);
    size_t n = json_array_size(v);
    if (n != 2 && n != 4)
        return bad(err, path, "numeric needs [op, number] or [op, number, op, number]", NULL);
    m->kind = M_NUMERIC;
    for (size_t i = 0; i < n; i += 2) {
        json_t *op = json_array_get(v, i), *num = json_array_get(v, i + 1);
        int code;
        if (!json_is_string(op) || !json_is_number(num))
            return bad(err, path, need, NULL);
        if (numeric_op(json_string_value(op), &code) != 0)
            return bad(err, path, "numeric: unknown operator \"%s\"", json_string_value(op));
        double x = json_number_value(num);
        if (code == 0) { /* "=" */
            if (n != 2)
                return bad(err, path, "numeric: \"=\" cannot be part of a range", NULL);
            m->has_lo = m->has_hi = m->lo_incl = m->hi_incl = true;
            m->lo = m->hi = x;
        } else if (code == 1 || code == 2) { /* upper bound */
            if (m->has_hi)
                return bad(err, path, "numeric: a range needs one lower and one upper bound", NULL);
            m->has_hi = true;
            m->hi_incl = code == 2;
            m->hi = x;
        } else {
            if (m->has_lo || m->has_hi)
                return bad(err, path, "numeric: a range must give the lower bound (> or >=) first",
                           NULL);
            m->has_lo = true;
            m->lo_incl = code == 4;
            m->lo = x;
        }
    }
    if (n == 4 && !(m->has_lo && m->has_hi))
        return bad(err, path, "numeric: a range needs one lower and one upper bound", NULL);
    return 0;
}

/* {"equals-ignore-case": "s"} as the operand of prefix or suffix. */
static json_t *ic_operand(json_t *v)
{
    if (json_is_object(v) && json_object_size(v) == 1) {
        json_t *s = json_object_get(v, "equals-ignore-case");
        if (json_is_string(s))
            return s;
    }
    return NULL;
}

static int compile_anybut(matcher *m, json_t *v, const char *path, sl_error *err)
{
    m->kind = M_ANYBUT;
    json_t *one[1] = {v};
    json_t **vals = one;
    size_t n = 1;
    json_t *list = NULL;
    mkind sub = M_STR;
    if (json_is_object(v)) {
        if (json_object_size(v) != 1)
            return bad(err, path, "anything-but takes one operator", NULL);
        const char *op = json_object_iter_key(json_object_iter(v));
        json_t *arg = json_object_iter_value(json_object_iter(v));
        m->strings_only = true;
        if (strcmp(op, "prefix") == 0 || strcmp(op, "suffix") == 0) {
            if (!json_is_string(arg))
                return bad(err, path, "anything-but %s needs a string", op);
            sub = op[0] == 'p' ? M_PREFIX : M_SUFFIX;
            one[0] = arg;
        } else if (strcmp(op, "equals-ignore-case") == 0 || strcmp(op, "wildcard") == 0) {
            sub = op[0] == 'e' ? M_EQ_IC : M_WILDCARD;
            if (json_is_array(arg))
                list = arg;
            else
                one[0] = arg;
        } else {
            return bad(err, path, "unknown anything-but operator \"%s\"", op);
        }
    } else if (json_is_array(v)) {
        list = v;
    }
    if (list) {
        n = json_array_size(list);
        if (n == 0)
            return bad(err, path, "anything-but list must not be empty", NULL);
    }
    m->subs = calloc(n, sizeof *m->subs);
    if (!m->subs)
        return SL_ENOMEM;
    m->nsubs = n;
    bool saw_str = false, saw_num = false;
    for (size_t i = 0; i < n; i++) {
        json_t *x = list ? json_array_get(list, i) : vals[0];
        matcher *s = &m->subs[i];
        if (sub == M_WILDCARD) {
            int rc = compile_wildcard(s, x, path, err);
            if (rc)
                return rc;
            continue;
        }
        if (json_is_string(x)) {
            saw_str = true;
            s->kind = sub;
            if (set_string(s, x))
                return SL_ENOMEM;
        } else if (json_is_number(x) && sub == M_STR) {
            saw_num = true;
            s->kind = M_NUM;
            s->num = json_number_value(x);
        } else {
            return bad(err, path,
                       sub == M_STR ? "anything-but needs a string, a number or a list of them"
                                    : "anything-but %s needs a string",
                       sub == M_EQ_IC ? "equals-ignore-case" : NULL);
        }
    }
    if (saw_str && saw_num)
        return bad(err, path, "anything-but list must hold only strings or only numbers", NULL);
    return 0;
}

/* One element of a leaf array: a value or a one-operator object. */
static int compile_matcher(matcher *m, json_t *v, const char *path, sl_error *err)
{
    switch (json_typeof(v)) {
    case JSON_STRING:
        m->kind = M_STR;
        return set_string(m, v) ? SL_ENOMEM : 0;
    case JSON_INTEGER:
    case JSON_REAL:
        m->kind = M_NUM;
        m->num = json_number_value(v);
        return 0;
    case JSON_TRUE:
        m->kind = M_TRUE;
        return 0;
    case JSON_FALSE:
        m->kind = M_FALSE;
        return 0;
    case JSON_NULL:
        m->kind = M_NULL;
        return 0;
    case JSON_ARRAY:
        return bad(err, path, "a pattern leaf may not hold nested arrays", NULL);
    case JSON_OBJECT:
        break;
    }
    if (json_object_size(v) != 1)
        return bad(err, path, "an operator object must hold exactly one operator", NULL);
    const char *op = json_object_iter_key(json_object_iter(v));
    json_t *arg = json_object_iter_value(json_object_iter(v));
    if (strcmp(op, "prefix") == 0 || strcmp(op, "suffix") == 0) {
        bool pre = op[0] == 'p';
        json_t *ic = ic_operand(arg);
        if (ic) {
            m->kind = pre ? M_PREFIX_IC : M_SUFFIX_IC;
            return set_string(m, ic) ? SL_ENOMEM : 0;
        }
        if (!json_is_string(arg))
            return bad(err, path, "%s needs a string or {\"equals-ignore-case\": string}", op);
        m->kind = pre ? M_PREFIX : M_SUFFIX;
        return set_string(m, arg) ? SL_ENOMEM : 0;
    }
    if (strcmp(op, "equals-ignore-case") == 0) {
        if (!json_is_string(arg))
            return bad(err, path, "equals-ignore-case needs a string", NULL);
        m->kind = M_EQ_IC;
        return set_string(m, arg) ? SL_ENOMEM : 0;
    }
    if (strcmp(op, "anything-but") == 0)
        return compile_anybut(m, arg, path, err);
    if (strcmp(op, "numeric") == 0)
        return compile_numeric(m, arg, path, err);
    if (strcmp(op, "exists") == 0) {
        if (!json_is_boolean(arg))
            return bad(err, path, "exists needs true or false", NULL);
        m->kind = M_EXISTS;
        m->exists = json_is_true(arg);
        return 0;
    }
    if (strcmp(op, "wildcard") == 0)
        return compile_wildcard(m, arg, path, err);
    if (strcmp(op, "cidr") == 0)
        return compile_cidr(m, arg, path, err);
    return bad(err, path, "unknown operator \"%s\"", op);
}

static int field_cmp(const void *a, const void *b)
{
    const field *x = a, *y = b;
    size_t n = x->klen < y->klen ? x->klen : y->klen;
    int c = memcmp(x->key, y->key, n);
    if (c)
        return c;
    return x->klen < y->klen ? -1 : x->klen > y->klen;
}

static int compile_node(node *n, json_t *obj, char *path, size_t plen, int depth, sl_error *err);

static void path_push(char *path, size_t plen, const char *key)
{
    snprintf(path + plen, PATH_MAX_LEN - plen, "%s%s", plen ? "." : "", key);
}

static int compile_or(node *n, json_t *arr, char *path, size_t plen, int depth, sl_error *err)
{
    path_push(path, plen, "$or");
    if (!json_is_array(arr) || json_array_size(arr) == 0)
        return bad(err, path, "$or needs a non-empty array of pattern objects", NULL);
    size_t k = json_array_size(arr);
    n->ors = calloc(k, sizeof *n->ors);
    if (!n->ors)
        return nomem(err);
    n->nors = k;
    for (size_t i = 0; i < k; i++) {
        json_t *alt = json_array_get(arr, i);
        path_push(path, plen, "$or");
        if (!json_is_object(alt))
            return bad(err, path, "$or needs a non-empty array of pattern objects", NULL);
        /* The alternatives live at the same level as $or itself. */
        path[plen] = '\0';
        int rc = compile_node(&n->ors[i], alt, path, plen, depth + 1, err);
        if (rc)
            return rc;
    }
    return 0;
}

static int compile_node(node *n, json_t *obj, char *path, size_t plen, int depth, sl_error *err)
{
    if (depth > 64) {
        path[plen] = '\0';
        return bad(err, path, "pattern nested too deep", NULL);
    }
    size_t total = json_object_size(obj);
    if (total > MAX_FIELDS) {
        path[plen] = '\0';
        return bad(err, path, "more than 64 fields in one pattern object", NULL);
    }
    n->f = calloc(total ? total : 1, sizeof *n->f);
    if (!n->f)
        return nomem(err);
    const char *key;
    json_t *val;
    json_object_foreach(obj, key, val)
    {
        path[plen] = '\0';
        if (strcmp(key, "$or") == 0) {
            int rc = compile_or(n, val, path, plen, depth, err);
            if (rc)
                return rc;
            continue;
        }
        path_push(path, plen, key);
        size_t mylen = strlen(path);
        field *f = &n->f[n->nf++];
        f->klen = strlen(key);
        f->key = dupmem(key, f->klen);
        if (!f->key)
            return nomem(err);
        if (json_is_object(val)) {
            f->child = calloc(1, sizeof *f->child);
            if (!f->child)
                return nomem(err);
            int rc = compile_node(f->child, val, path, mylen, depth + 1, err);
            if (rc)
                return rc;
            continue;
        }
        if (!json_is_array(val))
            return bad(err, path, "pattern leaf must be an array", NULL);
        size_t k = json_array_size(val);
        if (k == 0)
            return bad(err, path, "pattern leaf array must not be empty", NULL);
        f->m = calloc(k, sizeof *f->m);
        if (!f->m)
            return nomem(err);
        f->nm = k;
        for (size_t i = 0; i < k; i++) {
            int rc = compile_matcher(&f->m[i], json_array_get(val, i), path, err);
            if (rc == SL_ENOMEM)
                return nomem(err);
            if (rc)
                return rc;
        }
    }
    qsort(n->f, n->nf, sizeof *n->f, field_cmp);
    return 0;
}

int sl_pattern_compile(const char *json, size_t len, sl_pattern **out, sl_error *err)
{
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return sl_error_set(err, SL_EPARSE, "pattern is not valid JSON: line %d column %d: %s",
                            jerr.line, jerr.column, jerr.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return sl_error_set(err, SL_EINVAL, "a pattern must be a JSON object");
    }
    sl_pattern *p = calloc(1, sizeof *p);
    if (!p) {
        json_decref(root);
        return nomem(err);
    }
    char path[PATH_MAX_LEN] = "";
    int rc = compile_node(&p->root, root, path, 0, 0, err);
    json_decref(root);
    if (rc) {
        sl_pattern_free(p);
        return rc;
    }
    *out = p;
    return 0;
}

/* ---- matching ----------------------------------------------------------- */

/* One decoded leaf value of the event. */
typedef struct scalar {
    sl_json_type type;
    const char *s; /* string bytes (decoded) */
    size_t len;
    double num;
} scalar;

static unsigned char lower(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c;
}

static bool eq_ic(const char *a, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (lower((unsigned char)a[i]) != lower((unsigned char)b[i]))
            return false;
    return true;
}

static bool wildcard_match(const matcher *m, const char *s, size_t len)
{
    const piece *p = m->pieces;
    size_t k = m->npieces;
    if (k == 1)
        return len == p[0].len && memcmp(s, p[0].s, len) == 0;
    if (len < p[0].len + p[k - 1].len)
        return false;
    if (memcmp(s, p[0].s, p[0].len) != 0 ||
        memcmp(s + len - p[k - 1].len, p[k - 1].s, p[k - 1].len) != 0)
        return false;
    /* Middle runs, leftmost first, within what the first and last leave. */
    const char *cur = s + p[0].len, *end = s + len - p[k - 1].len;
    for (size_t i = 1; i + 1 < k; i++) {
        if (p[i].len == 0)
            continue;
        const char *hit = memmem(cur, (size_t)(end - cur), p[i].s, p[i].len);
        if (!hit)
            return false;
        cur = hit + p[i].len;
    }
    return true;
}

static bool cidr_match(const matcher *m, const char *s, size_t len)
{
    char buf[INET6_ADDRSTRLEN + 1];
    unsigned char a[16];
    if (len == 0 || len >= sizeof buf)
        return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (inet_pton(m->family == 4 ? AF_INET : AF_INET6, buf, a) != 1)
        return false;
    unsigned full = m->bits / 8, rest = m->bits % 8;
    if (memcmp(a, m->addr, full) != 0)
        return false;
    if (rest) {
        unsigned char mask = (unsigned char)(0xFFu << (8 - rest));
        if ((a[full] & mask) != m->addr[full])
            return false;
    }
    return true;
}

static bool matcher_scalar(const matcher *m, const scalar *v)
{
    bool str = v->type == SL_JSON_STRING;
    switch (m->kind) {
    case M_STR:
        return str && v->len == m->slen && memcmp(v->s, m->s, v->len) == 0;
    case M_NUM:
        return v->type == SL_JSON_NUMBER && v->num == m->num;
    case M_TRUE:
        return v->type == SL_JSON_TRUE;
    case M_FALSE:
        return v->type == SL_JSON_FALSE;
    case M_NULL:
        return v->type == SL_JSON_NULL;
    case M_PREFIX:
        return str && v->len >= m->slen && memcmp(v->s, m->s, m->slen) == 0;
    case M_PREFIX_IC:
        return str && v->len >= m->slen && eq_ic(v->s, m->s, m->slen);
    case M_SUFFIX:
        return str && v->len >= m->slen && memcmp(v->s + v->len - m->slen, m->s, m->slen) == 0;
    case M_SUFFIX_IC:
        return str && v->len >= m->slen && eq_ic(v->s + v->len - m->slen, m->s, m->slen);
    case M_EQ_IC:
        return str && v->len == m->slen && eq_ic(v->s, m->s, m->slen);
    case M_WILDCARD:
        return str && wildcard_match(m, v->s, v->len);
    case M_NUMERIC:
        if (v->type != SL_JSON_NUMBER)
            return false;
        if (m->has_lo && (m->lo_incl ? v->num < m->lo : v->num <= m->lo))
            return false;
        if (m->has_hi && (m->hi_incl ? v->num > m->hi : v->num >= m->hi))
            return false;
        return true;
    case M_CIDR:
        return str && cidr_match(m, v->s, v->len);
    case M_ANYBUT:
        if (!str && (m->strings_only || v->type != SL_JSON_NUMBER))
            return false;
        for (size_t i = 0; i < m->nsubs; i++)
            if (matcher_scalar(&m->subs[i], v))
                return false;
        return true;
    case M_EXISTS:
        return false; /* handled by the caller */
    }
    return false;
}

/* Decodes tok (a scalar) into v; *heap receives a buffer to free, if any.
 * Returns 0 or SL_ENOMEM. */
static int decode(const sl_json_tok *tok, scalar *v, char *sbuf, char **heap)
{
    v->type = tok->type;
    if (tok->type == SL_JSON_STRING) {
        size_t raw = tok->len - 2;
        if (!(tok->flags & SL_JSON_ESCAPED)) {
            v->s = tok->p + 1;
            v->len = raw;
            return 0;
        }
        char *out = sbuf;
        if (raw > STACK_STR) {
            out = *heap = malloc(raw);
            if (!out)
                return SL_ENOMEM;
        }
        sl_json_unescape(tok, out, raw > STACK_STR ? raw : STACK_STR, &v->len);
        v->s = out;
    } else if (tok->type == SL_JSON_NUMBER) {
        char nb[STACK_NUM], *b = nb;
        if (tok->len >= STACK_NUM) {
            b = *heap = malloc(tok->len + 1);
            if (!b)
                return SL_ENOMEM;
        }
        memcpy(b, tok->p, tok->len);
        b[tok->len] = '\0';
        v->num = strtod(b, NULL);
    }
    return 0;
}

/* The non-exists matchers of f against one scalar. Kept out of line so the
 * decode buffer is not part of every frame of the recursions below (event
 * arrays may nest up to SL_JSON_DEPTH_LIMIT deep). 1, 0 or SL_ENOMEM. */
__attribute__((noinline)) static int leaf_scalar(const field *f, const sl_json_tok *tok)
{
    char sbuf[STACK_STR], *heap = NULL;
    scalar v;
    if (decode(tok, &v, sbuf, &heap))
        return SL_ENOMEM;
    int hit = 0;
    for (size_t i = 0; i < f->nm && !hit; i++)
        if (f->m[i].kind != M_EXISTS && matcher_scalar(&f->m[i], &v))
            hit = 1;
    free(heap);
    return hit;
}

/* Whether any non-exists matcher of f matches a leaf of tok (arrays are
 * searched element by element, nested arrays too); *has_leaf is set when tok
 * holds a leaf value. 1, 0 or SL_ENOMEM. */
static int leaf_any(const field *f, const sl_json_tok *tok, bool *has_leaf)
{
    if (tok->type == SL_JSON_OBJECT)
        return 0;
    if (tok->type == SL_JSON_ARRAY) {
        sl_json_iter it;
        sl_json_tok el;
        sl_json_iter_init(&it, tok);
        while (sl_json_iter_elem(&it, &el)) {
            int rc = leaf_any(f, &el, has_leaf);
            if (rc)
                return rc;
        }
        return 0;
    }
    *has_leaf = true;
    return leaf_scalar(f, tok);
}

/* A leaf field against tok, or against a missing field when tok is NULL. */
static int leaf_eval(const field *f, const sl_json_tok *tok)
{
    bool has_leaf = false;
    if (tok) {
        int rc = leaf_any(f, tok, &has_leaf);
        if (rc)
            return rc;
    }
    for (size_t i = 0; i < f->nm; i++)
        if (f->m[i].kind == M_EXISTS && f->m[i].exists == has_leaf)
            return 1;
    return 0;
}

static int node_eval(const node *n, const sl_json_tok *tok);

static int field_eval(const field *f, const sl_json_tok *tok)
{
    return f->child ? node_eval(f->child, tok) : leaf_eval(f, tok);
}

static const field *find_field(const node *n, const char *k, size_t klen)
{
    size_t lo = 0, hi = n->nf;
    field key = {.key = (char *)(uintptr_t)k, .klen = klen};
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = field_cmp(&key, &n->f[mid]);
        if (c == 0)
            return &n->f[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

/* The field of n named by the key token k (or NULL); out of line for the
 * same reason as leaf_scalar(). Returns 0 or SL_ENOMEM. */
__attribute__((noinline)) static int lookup_key(const node *n, const sl_json_tok *k,
                                                const field **f)
{
    char kb[STACK_STR], *heap = NULL;
    scalar ks;
    if (decode(k, &ks, kb, &heap))
        return SL_ENOMEM;
    *f = find_field(n, ks.s, ks.len);
    free(heap);
    return 0;
}

/* An object pattern against tok: an object is walked once; an array matches
 * when one of its elements does; anything else (or NULL) is a missing
 * object, which only patterns made of exists:false can match. */
static int node_eval(const node *n, const sl_json_tok *tok)
{
    if (tok && tok->type == SL_JSON_ARRAY) {
        sl_json_iter it;
        sl_json_tok el;
        bool any = false;
        sl_json_iter_init(&it, tok);
        while (sl_json_iter_elem(&it, &el)) {
            any = true;
            int rc = node_eval(n, &el);
            if (rc)
                return rc;
        }
        return any ? 0 : node_eval(n, NULL);
    }
    if (tok && tok->type != SL_JSON_OBJECT)
        tok = NULL;
    uint64_t found = 0, ok = 0;
    if (tok) {
        sl_json_iter it;
        sl_json_tok k, v;
        sl_json_iter_init(&it, tok);
        while (sl_json_iter_member(&it, &k, &v)) {
            const field *f;
            if (lookup_key(n, &k, &f))
                return SL_ENOMEM;
            if (!f)
                continue;
            uint64_t bit = (uint64_t)1 << (f - n->f);
            found |= bit;
            if (ok & bit)
                continue;
            int rc = field_eval(f, &v);
            if (rc < 0)
                return rc;
            if (rc)
                ok |= bit;
        }
    }
    for (size_t i = 0; i < n->nf; i++) {
        uint64_t bit = (uint64_t)1 << i;
        if (ok & bit)
            continue;
        if (found & bit)
            return 0;
        int rc = field_eval(&n->f[i], NULL);
        if (rc <= 0)
            return rc;
    }
    if (n->nors) {
        for (size_t i = 0; i < n->nors; i++) {
            int rc = node_eval(&n->ors[i], tok);
            if (rc)
                return rc;
        }
        return 0;
    }
    return 1;
}

int sl_pattern_match(const sl_pattern *p, const char *event_json, size_t len, bool *matched,
                     sl_error *err)
{
    sl_json_tok tok;
    int rc = sl_json_validate(event_json, len, SL_JSON_DEPTH_LIMIT, &tok, err);
    if (rc)
        return rc;
    if (tok.type != SL_JSON_OBJECT)
        return sl_error_set(err, SL_EINVAL, "event must be a JSON object, not %s",
                            sl_json_type_name(tok.type));
    rc = node_eval(&p->root, &tok);
    if (rc < 0)
        return sl_error_set(err, rc, "out of memory decoding a long event value");
    *matched = rc == 1;
    return 0;
}
