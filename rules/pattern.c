/*
 * rules/pattern.c — EventBridge event patterns: the compiler (core/base/json.h
 * tokens, once per pattern, so numbers keep the text they were written
 * with). The matcher (per event, no allocation in the common case) is in
 * rules/pattern_match.c, the event it reads in rules/evview.c.
 */
#include "rules/pattern_internal.h"

#include <arpa/inet.h>
#include <locale.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wctype.h>

#include "core/base/json.h"

/* Fields per pattern object: the matcher tracks them in one 64-bit mask. */
#define MAX_FIELDS 64
/* Pattern objects nested deeper than this are refused. */
#define MAX_DEPTH 64
/* Escaped strings up to this size are decoded on the stack. */
#define STACK_STR 512
/* Numbers up to this size are copied on the stack for strtod(). */
#define STACK_NUM 64
#define PATH_MAX_LEN 256

/* ---- freeing ------------------------------------------------------------- */

static void matcher_clear(matcher *m)
{
    free(m->s);
    free(m->fold);
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

/* ---- compiling: helpers -------------------------------------------------- */

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

/* A string token decoded into a new NUL-terminated buffer (*len bytes). */
static char *tok_dup(const sl_json_tok *t, size_t *len)
{
    size_t cap = t->len - 2;
    char *s = malloc(cap + 1);
    if (!s)
        return NULL;
    sl_json_unescape(t, s, cap, len);
    s[*len] = '\0';
    return s;
}

/* The name of an operator key, decoded into buf (a name too long for buf
 * cannot be an operator and comes back cut short). */
static const char *op_name(const sl_json_tok *k, char buf[64])
{
    size_t n = 0, pos = 0;
    n = sl_json_unescape_part(k, &pos, buf, 63);
    buf[n] = '\0';
    return buf;
}

/* The only member of an object token: true and *key, *val when it has
 * exactly one. */
static bool only_member(const sl_json_tok *obj, sl_json_tok *key, sl_json_tok *val)
{
    sl_json_iter it;
    sl_json_tok k2, v2;
    sl_json_iter_init(&it, obj);
    if (!sl_json_iter_member(&it, key, val))
        return false;
    return !sl_json_iter_member(&it, &k2, &v2);
}

/* The value of a number token (which the scanner has validated). */
static double tok_num(const sl_json_tok *t)
{
    char nb[STACK_NUM];
    if (t->len < sizeof nb) {
        memcpy(nb, t->p, t->len);
        nb[t->len] = '\0';
        return strtod(nb, NULL);
    }
    char *b = dupmem(t->p, t->len);
    double x = b ? strtod(b, NULL) : 0; /* a 64-byte number is in range or refused anyway */
    free(b);
    return x;
}

static int set_string(matcher *m, const sl_json_tok *t)
{
    m->s = tok_dup(t, &m->slen);
    return m->s ? 0 : SL_ENOMEM;
}

/* ---- case folding -------------------------------------------------------- */

static locale_t utf8_locale;
static pthread_once_t utf8_once = PTHREAD_ONCE_INIT;

static void utf8_locale_init(void)
{
    utf8_locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
}

/* Decodes one character of valid UTF-8 at *p and advances *p. */
uint32_t sl__pattern_utf8_next(const unsigned char **p)
{
    const unsigned char *s = *p;
    uint32_t c = s[0];
    if (c < 0x80) {
        *p = s + 1;
        return c;
    }
    if (c < 0xe0) {
        *p = s + 2;
        return ((c & 0x1f) << 6) | (s[1] & 0x3f);
    }
    if (c < 0xf0) {
        *p = s + 3;
        return ((c & 0x0f) << 12) | ((uint32_t)(s[1] & 0x3f) << 6) | (s[2] & 0x3f);
    }
    *p = s + 4;
    return ((c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3f) << 12) | ((uint32_t)(s[2] & 0x3f) << 6) |
           (s[3] & 0x3f);
}

/* For an ignore-case operand with non-ASCII characters: each character as
 * written, lower-cased and upper-cased (Unicode simple case mapping). ASCII
 * operands keep fold NULL and are compared byte by byte. */
static int set_fold(matcher *m)
{
    bool ascii = true;
    for (size_t i = 0; i < m->slen && ascii; i++)
        ascii = (unsigned char)m->s[i] < 0x80;
    if (ascii)
        return 0;
    pthread_once(&utf8_once, utf8_locale_init);
    m->fold = malloc(m->slen * 3 * sizeof *m->fold);
    if (!m->fold)
        return SL_ENOMEM;
    const unsigned char *p = (const unsigned char *)m->s, *end = p + m->slen;
    while (p < end) {
        uint32_t c = sl__pattern_utf8_next(&p);
        uint32_t *t = &m->fold[m->nfold++ * 3];
        t[0] = c;
        t[1] = utf8_locale ? (uint32_t)towlower_l((wint_t)c, utf8_locale) : c;
        t[2] = utf8_locale ? (uint32_t)towupper_l((wint_t)c, utf8_locale) : c;
        if (c < 0x80) { /* the C.UTF-8 mapping of ASCII is ASCII's */
            t[1] = c >= 'A' && c <= 'Z' ? c + 32 : c;
            t[2] = c >= 'a' && c <= 'z' ? c - 32 : c;
        }
    }
    return 0;
}

static int set_string_ic(matcher *m, const sl_json_tok *t)
{
    if (set_string(m, t))
        return SL_ENOMEM;
    return set_fold(m);
}

/* ---- compiling: operators ------------------------------------------------ */

/* Parses "a.b.c.d/n" or "v6/n"; the slash and the prefix length are
 * required. */
static int compile_cidr(matcher *m, const sl_json_tok *v, const char *path, sl_error *err)
{
    if (v->type != SL_JSON_STRING)
        return bad(err, path, "cidr needs a string such as \"10.0.0.0/24\"", NULL);
    size_t len;
    char *s = tok_dup(v, &len);
    if (!s)
        return SL_ENOMEM;
    char buf[INET6_ADDRSTRLEN + 8];
    char *slash = strchr(s, '/');
    int rc = 0;
    if (len >= sizeof buf || !slash || strlen(s) != len) {
        rc = bad(err, path, "cidr: \"%s\" is not an address/prefix-length", s);
        goto done;
    }
    memcpy(buf, s, len + 1);
    buf[slash - s] = '\0';
    unsigned maxbits;
    if (inet_pton(AF_INET, buf, m->addr) == 1) {
        m->family = 4;
        maxbits = 32;
    } else if (inet_pton(AF_INET6, buf, m->addr) == 1 && !strchr(buf, '.')) {
        m->family = 6;
        maxbits = 128;
    } else {
        rc = bad(err, path, "cidr: \"%s\" is not an address/prefix-length", s);
        goto done;
    }
    const char *d = slash + 1;
    unsigned bits = 0;
    if (!*d || strlen(d) > 3) {
        rc = bad(err, path, "cidr: \"%s\" has a bad prefix length", s);
        goto done;
    }
    for (; *d; d++) {
        if (*d < '0' || *d > '9') {
            rc = bad(err, path, "cidr: \"%s\" has a bad prefix length", s);
            goto done;
        }
        bits = bits * 10 + (unsigned)(*d - '0');
    }
    if (bits > maxbits) {
        rc = bad(err, path, "cidr: \"%s\" has a bad prefix length", s);
        goto done;
    }
    m->bits = bits;
    /* Clear host bits so the match is a plain prefix compare. */
    for (unsigned i = 0; i < maxbits / 8; i++) {
        unsigned from = i * 8;
        if (from >= m->bits)
            m->addr[i] = 0;
        else if (m->bits - from < 8)
            m->addr[i] &= (unsigned char)(0xFFu << (8 - (m->bits - from)));
    }
    m->kind = M_CIDR;
done:
    free(s);
    return rc;
}

/* Splits a wildcard pattern into the literal runs between unescaped stars;
 * "\*" is a literal star and "\\" a literal backslash. */
static int compile_wildcard(matcher *m, const sl_json_tok *v, const char *path, sl_error *err)
{
    if (v->type != SL_JSON_STRING)
        return bad(err, path, "wildcard needs a string", NULL);
    size_t len;
    char *s = tok_dup(v, &len);
    if (!s)
        return SL_ENOMEM;
    size_t stars = 0;
    int rc = 0;
    for (size_t i = 0; i < len && !rc; i++) {
        if (s[i] == '\\') {
            if (i + 1 >= len || (s[i + 1] != '*' && s[i + 1] != '\\'))
                rc = bad(err, path, "wildcard \"%s\": a backslash may only escape '*' or '\\'", s);
            i++;
        } else if (s[i] == '*') {
            if (i + 1 < len && s[i + 1] == '*')
                rc = bad(err, path, "wildcard \"%s\": consecutive '*' are not allowed", s);
            stars++;
        }
    }
    m->kind = M_WILDCARD;
    char *cur = rc ? NULL : malloc(len + 1);
    if (!rc && (!cur || !(m->pieces = calloc(stars + 1, sizeof *m->pieces))))
        rc = SL_ENOMEM;
    size_t cl = 0;
    for (size_t i = 0; i <= len && !rc; i++) {
        if (i == len || s[i] == '*') {
            piece *pc = &m->pieces[m->npieces++];
            if (!(pc->s = dupmem(cur, cl)))
                rc = SL_ENOMEM;
            pc->len = cl;
            cl = 0;
        } else if (s[i] == '\\') {
            cur[cl++] = s[++i];
        } else {
            cur[cl++] = s[i];
        }
    }
    free(cur);
    free(s);
    return rc;
}

static int numeric_op(const sl_json_tok *t, int *code)
{
    static const char *const ops[] = {"=", "<", "<=", ">", ">="};
    if (t->type != SL_JSON_STRING)
        return -1;
    for (int i = 0; i < 5; i++) {
        if (t->len - 2 == strlen(ops[i]) && memcmp(t->p + 1, ops[i], t->len - 2) == 0) {
            *code = i;
            return 0;
        }
    }
    return -1;
}

/* A number of a numeric comparison: within -5e9..5e9. */
static int numeric_value(const sl_json_tok *t, double *x, const char *path, sl_error *err)
{
    *x = tok_num(t);
    if (!(*x >= -NUM_LIMIT && *x <= NUM_LIMIT)) {
        char txt[72];
        snprintf(txt, sizeof txt, "%.*s", (int)(t->len > 64 ? 64 : t->len), t->p);
        return bad(err, path, "numeric value %s is outside the range -5e9 to 5e9", txt);
    }
    return 0;
}

static int compile_numeric(matcher *m, const sl_json_tok *v, const char *path, sl_error *err)
{
    const char *need = "numeric needs an operator and a number";
    if (v->type != SL_JSON_ARRAY)
        return bad(err, path, need, NULL);
    sl_json_tok el[5];
    size_t n = 0;
    sl_json_iter it;
    sl_json_iter_init(&it, v);
    while (n < 5 && sl_json_iter_elem(&it, &el[n]))
        n++;
    if (n != 2 && n != 4)
        return bad(err, path, "numeric needs [op, number] or [op, number, op, number]", NULL);
    m->kind = M_NUMERIC;
    for (size_t i = 0; i < n; i += 2) {
        int code;
        if (el[i].type != SL_JSON_STRING || el[i + 1].type != SL_JSON_NUMBER)
            return bad(err, path, need, NULL);
        if (numeric_op(&el[i], &code) != 0) {
            char op[64];
            return bad(err, path, "numeric: unknown operator \"%s\"", op_name(&el[i], op));
        }
        double x;
        int rc = numeric_value(&el[i + 1], &x, path, err);
        if (rc)
            return rc;
        if (code == 0) { /* "=" */
            if (n != 2)
                return bad(err, path, "numeric: \"=\" cannot be part of a range", NULL);
            m->has_lo = m->has_hi = m->lo_incl = m->hi_incl = true;
            m->lo = m->hi = x;
            return 0;
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
    /* As in EventBridge, the implicit bounds are the limits themselves, and
     * the lower bound must lie below the upper one. */
    if (!((m->has_lo ? m->lo : -NUM_LIMIT) < (m->has_hi ? m->hi : NUM_LIMIT)))
        return bad(err, path, "numeric: the lower bound must be less than the upper bound", NULL);
    return 0;
}

/* {"equals-ignore-case": "s"} as the operand of prefix or suffix. */
static bool ic_operand(const sl_json_tok *v, sl_json_tok *s)
{
    sl_json_tok k;
    char op[64];
    return v->type == SL_JSON_OBJECT && only_member(v, &k, s) &&
           strcmp(op_name(&k, op), "equals-ignore-case") == 0 && s->type == SL_JSON_STRING;
}

/* One value excluded by anything-but. */
static int anybut_sub(matcher *s, mkind sub, const sl_json_tok *x, const char *opname,
                      const char *path, sl_error *err)
{
    if (sub == M_WILDCARD)
        return compile_wildcard(s, x, path, err);
    if (sub == M_STR && x->type == SL_JSON_NUMBER) {
        s->kind = M_NUMVAL;
        return numeric_value(x, &s->num, path, err);
    }
    if (x->type != SL_JSON_STRING) {
        if (sub == M_STR)
            return bad(err, path, "anything-but needs a string, a number or a list of them", NULL);
        return bad(err, path, "anything-but %s needs a string or a list of strings", opname);
    }
    if ((sub == M_PREFIX || sub == M_SUFFIX) && x->len == 2)
        return bad(err, path, "anything-but %s must not be empty", opname);
    s->kind = sub;
    return sub == M_EQ_IC ? set_string_ic(s, x) : set_string(s, x) ? SL_ENOMEM : 0;
}

static int compile_anybut(matcher *m, const sl_json_tok *v, const char *path, sl_error *err)
{
    m->kind = M_ANYBUT;
    const sl_json_tok *arg = v;
    sl_json_tok k, inner;
    mkind sub = M_STR;
    char opbuf[64];
    const char *op = "";
    if (v->type == SL_JSON_OBJECT) {
        if (!only_member(v, &k, &inner))
            return bad(err, path, "anything-but takes one operator", NULL);
        op = op_name(&k, opbuf);
        if (strcmp(op, "prefix") == 0)
            sub = M_PREFIX;
        else if (strcmp(op, "suffix") == 0)
            sub = M_SUFFIX;
        else if (strcmp(op, "equals-ignore-case") == 0)
            sub = M_EQ_IC;
        else if (strcmp(op, "wildcard") == 0)
            sub = M_WILDCARD;
        else
            return bad(err, path, "unknown anything-but operator \"%s\"", op);
        arg = &inner;
    } else if (v->type != SL_JSON_STRING && v->type != SL_JSON_NUMBER && v->type != SL_JSON_ARRAY) {
        return bad(err, path, "anything-but needs a string, a number or a list of them", NULL);
    }
    size_t n = 1;
    if (arg->type == SL_JSON_ARRAY) {
        sl_json_iter it;
        sl_json_tok x;
        sl_json_iter_init(&it, arg);
        for (n = 0; sl_json_iter_elem(&it, &x);)
            n++;
        if (n == 0)
            return bad(err, path, "anything-but list must not be empty", NULL);
    }
    m->subs = calloc(n, sizeof *m->subs);
    if (!m->subs)
        return SL_ENOMEM;
    bool saw_str = false, saw_num = false;
    sl_json_iter it;
    sl_json_tok x = *arg;
    if (arg->type == SL_JSON_ARRAY)
        sl_json_iter_init(&it, arg);
    for (size_t i = 0; i < n; i++) {
        if (arg->type == SL_JSON_ARRAY)
            sl_json_iter_elem(&it, &x);
        int rc = anybut_sub(&m->subs[m->nsubs++], sub, &x, op, path, err);
        if (rc)
            return rc;
        saw_str |= x.type == SL_JSON_STRING;
        saw_num |= x.type == SL_JSON_NUMBER;
    }
    if (saw_str && saw_num)
        return bad(err, path, "anything-but list must hold only strings or only numbers", NULL);
    return 0;
}

/* One element of a leaf array: a value or a one-operator object. */
static int compile_matcher(matcher *m, const sl_json_tok *v, const char *path, sl_error *err)
{
    switch (v->type) {
    case SL_JSON_STRING:
        m->kind = M_STR;
        return set_string(m, v) ? SL_ENOMEM : 0;
    case SL_JSON_NUMBER:
        m->kind = M_NUM;
        m->slen = v->len;
        return (m->s = dupmem(v->p, v->len)) ? 0 : SL_ENOMEM;
    case SL_JSON_TRUE:
        m->kind = M_TRUE;
        return 0;
    case SL_JSON_FALSE:
        m->kind = M_FALSE;
        return 0;
    case SL_JSON_NULL:
        m->kind = M_NULL;
        return 0;
    case SL_JSON_ARRAY:
        return bad(err, path, "a pattern leaf may not hold nested arrays", NULL);
    case SL_JSON_OBJECT:
    case SL_JSON_NONE:
        break;
    }
    sl_json_tok k, arg, ic;
    if (!only_member(v, &k, &arg))
        return bad(err, path, "an operator object must hold exactly one operator", NULL);
    char opbuf[64];
    const char *op = op_name(&k, opbuf);
    if (strcmp(op, "prefix") == 0 || strcmp(op, "suffix") == 0) {
        bool pre = op[0] == 'p';
        if (ic_operand(&arg, &ic)) {
            m->kind = pre ? M_PREFIX_IC : M_SUFFIX_IC;
            return set_string_ic(m, &ic);
        }
        if (arg.type != SL_JSON_STRING)
            return bad(err, path, "%s needs a string or {\"equals-ignore-case\": string}", op);
        m->kind = pre ? M_PREFIX : M_SUFFIX;
        return set_string(m, &arg) ? SL_ENOMEM : 0;
    }
    if (strcmp(op, "equals-ignore-case") == 0) {
        if (arg.type != SL_JSON_STRING)
            return bad(err, path, "equals-ignore-case needs a string", NULL);
        m->kind = M_EQ_IC;
        return set_string_ic(m, &arg);
    }
    if (strcmp(op, "anything-but") == 0)
        return compile_anybut(m, &arg, path, err);
    if (strcmp(op, "numeric") == 0)
        return compile_numeric(m, &arg, path, err);
    if (strcmp(op, "exists") == 0) {
        if (arg.type != SL_JSON_TRUE && arg.type != SL_JSON_FALSE)
            return bad(err, path, "exists needs true or false", NULL);
        m->kind = M_EXISTS;
        m->exists = arg.type == SL_JSON_TRUE;
        return 0;
    }
    if (strcmp(op, "wildcard") == 0)
        return compile_wildcard(m, &arg, path, err);
    if (strcmp(op, "cidr") == 0)
        return compile_cidr(m, &arg, path, err);
    return bad(err, path, "unknown operator \"%s\"", op);
}

/* ---- compiling: objects and $or ------------------------------------------ */

static int field_cmp(const void *a, const void *b)
{
    const field *x = a, *y = b;
    size_t n = x->klen < y->klen ? x->klen : y->klen;
    int c = memcmp(x->key, y->key, n);
    if (c)
        return c;
    return x->klen < y->klen ? -1 : x->klen > y->klen;
}

/* Event-ruler's words that may not be field names inside "$or". */
static bool reserved_in_or(const char *k)
{
    static const char *const words[] = {"exactly",
                                        "equals-ignore-case",
                                        "prefix",
                                        "suffix",
                                        "anything-but",
                                        "exists",
                                        "wildcard",
                                        "numeric",
                                        "cidr",
                                        "html",
                                        "=",
                                        "<",
                                        "<=",
                                        ">",
                                        ">=",
                                        "regex",
                                        "not-wildcard",
                                        "not-equals-ignore-case",
                                        "date-after",
                                        "date-on-or-after",
                                        "date-before",
                                        "date-on-or-before",
                                        "in-date-range",
                                        "ip-address-in-range",
                                        "ip-address-not-in-range"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strcmp(k, words[i]) == 0)
            return true;
    return false;
}

static void path_push(char *path, size_t plen, const char *key)
{
    snprintf(path + plen, PATH_MAX_LEN - plen, "%s%s", plen ? "." : "", key);
}

typedef struct member {
    char *key; /* decoded (owned) */
    size_t klen;
    sl_json_tok val;
    bool skip; /* a later member has the same name: the last one counts */
} member;

static bool is_or(const member *m)
{
    return m->klen == 3 && memcmp(m->key, "$or", 3) == 0;
}

static int compile_node(node *n, const sl_json_tok *obj, char *path, size_t plen, int depth,
                        bool in_or, sl_error *err);

static int compile_or(node *n, const sl_json_tok *arr, char *path, size_t plen, int depth,
                      sl_error *err)
{
    path_push(path, plen, "$or");
    const char *need = "$or needs an array of at least two pattern objects";
    if (arr->type != SL_JSON_ARRAY)
        return bad(err, path, need, NULL);
    sl_json_iter it;
    sl_json_tok alt;
    size_t k = 0;
    sl_json_iter_init(&it, arr);
    while (sl_json_iter_elem(&it, &alt)) {
        if (alt.type != SL_JSON_OBJECT)
            return bad(err, path, need, NULL);
        k++;
    }
    if (k < 2)
        return bad(err, path, need, NULL);
    n->ors = calloc(k, sizeof *n->ors);
    if (!n->ors)
        return nomem(err);
    n->nors = k;
    sl_json_iter_init(&it, arr);
    for (size_t i = 0; sl_json_iter_elem(&it, &alt); i++) {
        /* The alternatives live at the same level as $or itself. */
        path[plen] = '\0';
        int rc = compile_node(&n->ors[i], &alt, path, plen, depth + 1, true, err);
        if (rc)
            return rc;
    }
    return 0;
}

static int compile_leaf(field *f, const sl_json_tok *val, const char *path, sl_error *err)
{
    if (val->type != SL_JSON_ARRAY)
        return bad(err, path, "pattern leaf must be an array", NULL);
    sl_json_iter it;
    sl_json_tok el;
    size_t k = 0;
    sl_json_iter_init(&it, val);
    while (sl_json_iter_elem(&it, &el))
        k++;
    if (k == 0)
        return bad(err, path, "pattern leaf array must not be empty", NULL);
    f->m = calloc(k, sizeof *f->m);
    if (!f->m)
        return nomem(err);
    sl_json_iter_init(&it, val);
    while (sl_json_iter_elem(&it, &el)) {
        int rc = compile_matcher(&f->m[f->nm++], &el, path, err);
        if (rc == SL_ENOMEM)
            return nomem(err);
        if (rc)
            return rc;
    }
    return 0;
}

static int compile_members(node *n, member *mb, size_t total, char *path, size_t plen, int depth,
                           bool in_or, sl_error *err)
{
    size_t nfields = 0;
    for (size_t i = 0; i < total; i++) {
        for (size_t j = i + 1; j < total && !mb[i].skip; j++)
            mb[i].skip = mb[j].klen == mb[i].klen && memcmp(mb[j].key, mb[i].key, mb[i].klen) == 0;
        if (!mb[i].skip && !is_or(&mb[i]))
            nfields++;
    }
    if (nfields > MAX_FIELDS)
        return bad(err, path, "more than 64 fields in one pattern object", NULL);
    n->f = calloc(nfields ? nfields : 1, sizeof *n->f);
    if (!n->f)
        return nomem(err);
    for (size_t i = 0; i < total; i++) {
        if (mb[i].skip)
            continue;
        path[plen] = '\0';
        if (is_or(&mb[i])) {
            int rc = compile_or(n, &mb[i].val, path, plen, depth, err);
            if (rc)
                return rc;
            continue;
        }
        path_push(path, plen, mb[i].key);
        if (in_or && strlen(mb[i].key) == mb[i].klen && reserved_in_or(mb[i].key))
            return bad(err, path, "\"%s\" is a reserved word and cannot be a field name in $or",
                       mb[i].key);
        field *f = &n->f[n->nf++];
        f->key = mb[i].key;
        f->klen = mb[i].klen;
        mb[i].key = NULL; /* now owned by the field */
        int rc;
        if (mb[i].val.type == SL_JSON_OBJECT) {
            if (!(f->child = calloc(1, sizeof *f->child)))
                return nomem(err);
            rc = compile_node(f->child, &mb[i].val, path, strlen(path), depth + 1, in_or, err);
        } else {
            rc = compile_leaf(f, &mb[i].val, path, err);
        }
        if (rc)
            return rc;
    }
    qsort(n->f, n->nf, sizeof *n->f, field_cmp);
    return 0;
}

static int compile_node(node *n, const sl_json_tok *obj, char *path, size_t plen, int depth,
                        bool in_or, sl_error *err)
{
    path[plen] = '\0';
    if (depth > MAX_DEPTH)
        return bad(err, path, "pattern nested too deep", NULL);
    sl_json_iter it;
    sl_json_tok k, v;
    size_t total = 0;
    sl_json_iter_init(&it, obj);
    while (sl_json_iter_member(&it, &k, &v))
        total++;
    if (total == 0)
        return bad(err, path, "empty objects are not allowed", NULL);
    member *mb = calloc(total, sizeof *mb);
    if (!mb)
        return nomem(err);
    int rc = 0;
    size_t got = 0;
    sl_json_iter_init(&it, obj);
    while (sl_json_iter_member(&it, &k, &v)) {
        member *x = &mb[got++];
        x->val = v;
        if (!(x->key = tok_dup(&k, &x->klen))) {
            rc = nomem(err);
            goto done;
        }
    }
    rc = compile_members(n, mb, total, path, plen, depth, in_or, err);
done:
    for (size_t i = 0; i < got; i++)
        free(mb[i].key);
    free(mb);
    return rc;
}

/* Combinations, counted as event-ruler expands a pattern (its
 * JsonRuleCompiler turns every $or alternative into a sub-rule, copying the
 * fields around it): the fields of an object multiply (a leaf counts its
 * values: ["a", "b", {"prefix": "c"}] is 3; an operator with a list, such as
 * anything-but or a numeric range, is one value), the alternatives of a $or
 * add up, and that sum multiplies the rest of its object, so nested $or
 * multiply too. {"a": [1, 2], "$or": [{"b": [1, 2, 3]}, {"c": [1]}]} has
 * 2 * (3 + 1) = 8. Saturates at UINT64_MAX (a pattern of 64 fields of 64
 * values nested 64 deep would overflow). */
static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    return b && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

static uint64_t combinations(const node *n)
{
    uint64_t c = 1;
    for (size_t i = 0; i < n->nf; i++)
        c = mul_sat(c, n->f[i].child ? combinations(n->f[i].child) : n->f[i].nm);
    if (n->nors) {
        uint64_t alts = 0;
        for (size_t i = 0; i < n->nors; i++) {
            uint64_t a = combinations(&n->ors[i]);
            alts = a > UINT64_MAX - alts ? UINT64_MAX : alts + a;
        }
        c = mul_sat(c, alts);
    }
    return c;
}

/* 1234567 as "1,234,567", as the message and docs write counts. */
static void thousands(uint64_t v, char *buf, size_t cap)
{
    char digits[24];
    int n = snprintf(digits, sizeof digits, "%llu", (unsigned long long)v);
    size_t o = 0;
    for (int i = 0; i < n && o + 2 < cap; i++) {
        if (i && (n - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
}

int sl_pattern_compile(const char *json, size_t len, sl_pattern **out, sl_error *err)
{
    sl_json_tok root;
    sl_error jerr = {0};
    int rc = sl_json_validate(json, len, SL_JSON_DEPTH_LIMIT, &root, &jerr);
    if (rc)
        return sl_error_set(err, SL_EPARSE, "pattern is not valid JSON: %s", jerr.msg);
    if (root.type != SL_JSON_OBJECT)
        return sl_error_set(err, SL_EINVAL, "a pattern must be a JSON object");
    sl_pattern *p = calloc(1, sizeof *p);
    if (!p)
        return nomem(err);
    char path[PATH_MAX_LEN] = "";
    rc = compile_node(&p->root, &root, path, 0, 0, false, err);
    uint64_t combos = rc ? 0 : combinations(&p->root);
    if (combos > SL_PATTERN_MAX_COMBINATIONS) {
        char n[32];
        thousands(combos, n, sizeof n);
        rc = sl_error_set(err, SL_EINVAL,
                          "the pattern has %s%s combinations of values, more than EventBridge's "
                          "limit of 1,000 (each $or alternative and each value of a list is one "
                          "more way to match; the values of fields multiply)",
                          combos == UINT64_MAX ? "more than " : "", n);
    }
    if (rc) {
        sl_pattern_free(p);
        return rc == SL_ENOMEM ? nomem(err) : rc;
    }
    *out = p;
    return 0;
}
