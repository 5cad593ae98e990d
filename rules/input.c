/*
 * rules/input.c — the input transformer: paths and templates are compiled
 * once (the template pre-split into literal pieces and placeholders); each
 * application validates the event, resolves every used path once with the
 * core/base/json.h iterators and appends the pieces to the caller's buffer.
 */
#include "rules/input.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/base/clock.h"
#include "core/base/json.h"

/* One step of a path: a member name or an array index. */
typedef struct step {
    char *key; /* decoded member name (owned); NULL for an index */
    size_t klen;
    size_t index;
} step;

typedef struct path {
    step *steps;
    size_t n;
} path;

/* The used paths of a template merged into a trie, so one walk of the event
 * resolves them all. Children are at most SL_INPUT_MAX_VARS (each comes
 * from a distinct path), which the walk tracks in a 128-bit mask. */
typedef struct tnode {
    const step *st; /* the step that leads here (NULL at the root) */
    struct tnode *kids;
    size_t nkids;
    size_t *vars; /* the paths that end here */
    size_t nvars;
} tnode;

typedef enum pkind {
    P_LIT,   /* literal template text */
    P_VAR,   /* a declared path */
    P_EVENT, /* <sluice.event> */
    P_RULE,  /* <sluice.rule> */
    P_TIME,  /* <sluice.matched-at> */
} pkind;

/* Where a placeholder sits, which decides how its value is written. */
typedef enum pctx {
    C_VALUE,  /* JSON template, outside a string */
    C_STRING, /* JSON template, inside a string */
    C_TEXT,   /* text template */
} pctx;

typedef struct piece {
    pkind kind;
    pctx ctx;
    size_t off, len; /* P_LIT: bytes of tmpl */
    size_t var;      /* P_VAR: index into paths */
} piece;

struct sl_input {
    bool is_path; /* input = "$.data": paths[0] only */
    char *tmpl;   /* owned copy of the template */
    piece *pieces;
    size_t npieces;
    path *paths;
    size_t npaths;
    bool *used; /* used[i]: paths[i] appears in the template */
    tnode trie; /* the used paths */
};

/* ---- freeing ------------------------------------------------------------- */

static void path_clear(path *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->steps[i].key);
    free(p->steps);
}

static void tnode_clear(tnode *t)
{
    for (size_t i = 0; i < t->nkids; i++)
        tnode_clear(&t->kids[i]);
    free(t->kids);
    free(t->vars);
}

void sl_input_free(sl_input *in)
{
    if (!in)
        return;
    tnode_clear(&in->trie);
    for (size_t i = 0; i < in->npaths; i++)
        path_clear(&in->paths[i]);
    free(in->paths);
    free(in->used);
    free(in->pieces);
    free(in->tmpl);
    free(in);
}

/* ---- compiling paths ---------------------------------------------------- */

static bool is_dot_name_byte(unsigned char c)
{
    return c > 0x20 && c != 0x7f && c != '.' && c != '[' && c != ']' && c != '\'' && c != '"' &&
           c != '\\' && c != '*';
}

static int bad_path(sl_error *err, const char *what, const char *p, size_t at, const char *why)
{
    return sl_error_set(err, SL_EINVAL, "%s \"%s\": byte %zu: %s", what, p, at, why);
}

static int push_step(path *pa, size_t *cap, char *key, size_t klen, size_t index)
{
    if (pa->n == *cap && sl_grow(&pa->steps, cap, sizeof *pa->steps, 4))
            return SL_ENOMEM;
    pa->steps[pa->n++] = (step){.key = key, .klen = klen, .index = index};
    return 0;
}

/* Parses s into pa (cleared by the caller on error). what names the path in
 * messages ("path", or "path of <name>"). */
static int compile_path(path *pa, const char *s, const char *what, sl_error *err)
{
    size_t len = strlen(s), i = 1, cap = 0;
    if (len == 0 || s[0] != '$')
        return bad_path(err, what, s, 0, "a path starts with '$'");
    while (i < len) {
        char *key = NULL;
        size_t klen = 0, index = 0;
        if (s[i] == '.') {
            size_t b = ++i;
            while (i < len && is_dot_name_byte((unsigned char)s[i]))
                i++;
            if (i == b) {
                if (i < len && (s[i] == '*'))
                    return bad_path(err, what, s, i, "wildcards are not supported");
                return bad_path(err, what, s, i, "expected a member name after '.'");
            }
            klen = i - b;
            key = malloc(klen + 1);
            if (!key)
                return SL_ENOMEM;
            memcpy(key, s + b, klen);
            key[klen] = '\0';
        } else if (s[i] == '[') {
            size_t open = i++;
            if (i < len && (s[i] == '\'' || s[i] == '"')) {
                char q = s[i++];
                key = malloc(len - i + 1);
                if (!key)
                    return SL_ENOMEM;
                while (i < len && s[i] != q) {
                    if (s[i] == '\\' && i + 1 < len)
                        i++;
                    key[klen++] = s[i++];
                }
                if (i >= len || i + 1 >= len || s[i + 1] != ']') {
                    free(key);
                    return bad_path(err, what, s, open, "unterminated quoted name");
                }
                key[klen] = '\0';
                if (!sl_json_utf8_valid(key, klen)) {
                    free(key);
                    return bad_path(err, what, s, open, "the name is not valid UTF-8");
                }
                i += 2;
            } else {
                size_t b = i;
                if (i < len && s[i] == '*')
                    return bad_path(err, what, s, i, "wildcards are not supported");
                while (i < len && s[i] >= '0' && s[i] <= '9')
                    i++;
                size_t nd = i - b;
                if (nd == 0 || i >= len || s[i] != ']')
                    return bad_path(err, what, s, open,
                                    "expected an index (digits) or a quoted name in brackets");
                if ((nd > 1 && s[b] == '0') || nd > 9)
                    return bad_path(err, what, s, b, "bad array index");
                for (size_t k = b; k < i; k++)
                    index = index * 10 + (size_t)(s[k] - '0');
                i++;
            }
        } else {
            return bad_path(err, what, s, i, "expected '.' or '['");
        }
        if (push_step(pa, &cap, key, klen, index)) {
            free(key);
            return SL_ENOMEM;
        }
    }
    return 0;
}

int sl_input_compile_path(const char *path_str, sl_input **out, sl_error *err)
{
    sl_input *in = calloc(1, sizeof *in);
    if (!in || !(in->paths = calloc(1, sizeof *in->paths))) {
        free(in);
        return sl_error_set(err, SL_ENOMEM, "out of memory compiling an input path");
    }
    in->is_path = true;
    in->npaths = 1;
    int rc = compile_path(&in->paths[0], path_str ? path_str : "", "path", err);
    if (rc) {
        sl_input_free(in);
        if (rc == SL_ENOMEM)
            return sl_error_set(err, SL_ENOMEM, "out of memory compiling an input path");
        return rc;
    }
    *out = in;
    return 0;
}

/* ---- compiling templates ------------------------------------------------ */

static bool is_name_byte(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
}

static bool valid_name(const char *s)
{
    if (!s || !*s)
        return false;
    for (; *s; s++)
        if (!is_name_byte((unsigned char)*s))
            return false;
    return true;
}

static bool reserved_name(const char *s)
{
    return strncasecmp(s, "sluice.", 7) == 0;
}

static int push_piece(sl_input *in, size_t *cap, piece pc)
{
    if (pc.kind == P_LIT && pc.len == 0)
        return 0;
    /* Adjacent literal runs (split around an escaped byte) merge. */
    if (pc.kind == P_LIT && in->npieces && in->pieces[in->npieces - 1].kind == P_LIT) {
        piece *last = &in->pieces[in->npieces - 1];
        if (last->off + last->len == pc.off) {
            last->len += pc.len;
            return 0;
        }
    }
    if (in->npieces == *cap && sl_grow(&in->pieces, cap, sizeof *in->pieces, 8))
            return SL_ENOMEM;
    in->pieces[in->npieces++] = pc;
    return 0;
}

static size_t skip_ws(const char *s, size_t i, size_t len)
{
    while (i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
        i++;
    return i;
}

/* Resolves the placeholder name [s, s + nlen) into pc (kind and var). */
static int resolve_name(const sl_input *in, const char *const *names, const char *s, size_t nlen,
                        piece *pc)
{
    static const struct {
        const char *name;
        pkind kind;
    } predefined[] = {
        {"sluice.event", P_EVENT}, {"sluice.rule", P_RULE}, {"sluice.matched-at", P_TIME}};
    for (size_t k = 0; k < sizeof predefined / sizeof predefined[0]; k++) {
        if (strlen(predefined[k].name) == nlen && memcmp(predefined[k].name, s, nlen) == 0) {
            pc->kind = predefined[k].kind;
            return 0;
        }
    }
    for (size_t k = 0; k < in->npaths; k++) {
        if (strlen(names[k]) == nlen && memcmp(names[k], s, nlen) == 0) {
            pc->kind = P_VAR;
            pc->var = k;
            return 0;
        }
    }
    return -1;
}

/* Splits the template into pieces; see input.h for the rules. */
static int split_template(sl_input *in, const char *const *names, sl_error *err)
{
    const char *s = in->tmpl;
    size_t len = strlen(s), cap = 0;
    size_t first = skip_ws(s, 0, len);
    bool json = first < len && (s[first] == '{' || s[first] == '[' || s[first] == '"');
    bool in_str = false;
    size_t str_ph = SIZE_MAX; /* byte of the first placeholder of the open string */
    size_t lit = 0;           /* start of the pending literal run */
    size_t i = 0;
    while (i < len) {
        char c = s[i];
        if (c == '<' && i + 1 < len && is_name_byte((unsigned char)s[i + 1])) {
            size_t b = i + 1, e = b;
            while (e < len && is_name_byte((unsigned char)s[e]))
                e++;
            if (e >= len || s[e] != '>')
                return sl_error_set(err, SL_EINVAL,
                                    "template byte %zu: unterminated placeholder <%.*s (expected "
                                    "'>' after the name)",
                                    i, (int)(e - b > 64 ? 64 : e - b), s + b);
            piece pc = {.ctx = !json ? C_TEXT : in_str ? C_STRING : C_VALUE};
            if (resolve_name(in, names, s + b, e - b, &pc))
                return sl_error_set(err, SL_EINVAL,
                                    "template byte %zu: unknown placeholder <%.*s> (not declared "
                                    "in paths and not predefined)",
                                    i, (int)(e - b > 64 ? 64 : e - b), s + b);
            if (pc.kind == P_EVENT && pc.ctx == C_STRING)
                return sl_error_set(err, SL_EINVAL,
                                    "template byte %zu: <sluice.event> can only be a JSON value, "
                                    "not part of a string",
                                    i);
            if (json && !in_str) {
                size_t k = skip_ws(s, e + 1, len);
                if (k < len && s[k] == ':')
                    return sl_error_set(err, SL_EINVAL,
                                        "template byte %zu: a placeholder cannot be an object key",
                                        i);
            }
            if (in_str && str_ph == SIZE_MAX)
                str_ph = i;
            if (push_piece(in, &cap, (piece){.kind = P_LIT, .off = lit, .len = i - lit}) ||
                push_piece(in, &cap, pc))
                return SL_ENOMEM;
            if (pc.kind == P_VAR)
                in->used[pc.var] = true;
            i = e + 1;
            lit = i;
            continue;
        }
        if (json && in_str && c == '\\' && i + 1 < len && s[i + 1] != '<') {
            i += 2; /* the escaped byte cannot end the string */
            continue;
        }
        if (json && c == '"') {
            if (in_str && str_ph != SIZE_MAX) {
                size_t k = skip_ws(s, i + 1, len);
                if (k < len && s[k] == ':')
                    return sl_error_set(err, SL_EINVAL,
                                        "template byte %zu: a placeholder cannot be part of an "
                                        "object key",
                                        str_ph);
            }
            in_str = !in_str;
            str_ph = SIZE_MAX;
        }
        i++;
    }
    if (push_piece(in, &cap, (piece){.kind = P_LIT, .off = lit, .len = len - lit}))
        return SL_ENOMEM;
    return 0;
}

static bool same_step(const step *a, const step *b)
{
    if (!a->key || !b->key)
        return !a->key && !b->key && a->index == b->index;
    return a->klen == b->klen && memcmp(a->key, b->key, a->klen) == 0;
}

/* Adds path number var to the trie. Returns 0 or SL_ENOMEM. */
static int trie_add(tnode *t, const path *pa, size_t var)
{
    for (size_t i = 0; i < pa->n; i++) {
        size_t k = 0;
        while (k < t->nkids && !same_step(t->kids[k].st, &pa->steps[i]))
            k++;
        if (k == t->nkids) {
            tnode *kids = realloc(t->kids, (t->nkids + 1) * sizeof *kids);
            if (!kids)
                return SL_ENOMEM;
            t->kids = kids;
            t->kids[t->nkids++] = (tnode){.st = &pa->steps[i]};
        }
        t = &t->kids[k];
    }
    size_t *vars = realloc(t->vars, (t->nvars + 1) * sizeof *vars);
    if (!vars)
        return SL_ENOMEM;
    t->vars = vars;
    t->vars[t->nvars++] = var;
    return 0;
}

int sl_input_compile_template(const char *const *names, const char *const *paths, size_t n,
                              const char *tmpl, sl_input **out, sl_error *err)
{
    if (!tmpl)
        return sl_error_set(err, SL_EINVAL, "input template is missing");
    if (n > SL_INPUT_MAX_VARS)
        return sl_error_set(err, SL_EINVAL, "input template: %zu paths, at most %d allowed", n,
                            SL_INPUT_MAX_VARS);
    for (size_t i = 0; i < n; i++) {
        if (!valid_name(names[i]))
            return sl_error_set(err, SL_EINVAL,
                                "input path name \"%s\": names are made of A-Z a-z 0-9 _ . -",
                                names[i] ? names[i] : "");
        if (reserved_name(names[i]))
            return sl_error_set(err, SL_EINVAL,
                                "input path name \"%s\": names starting with \"sluice.\" are "
                                "reserved",
                                names[i]);
        for (size_t j = 0; j < i; j++)
            if (strcmp(names[i], names[j]) == 0)
                return sl_error_set(err, SL_EINVAL, "input path name \"%s\" is declared twice",
                                    names[i]);
    }
    int rc = SL_ENOMEM;
    sl_input *in = calloc(1, sizeof *in);
    if (!in)
        goto fail;
    in->tmpl = strdup(tmpl);
    in->paths = calloc(n ? n : 1, sizeof *in->paths);
    in->used = calloc(n ? n : 1, sizeof *in->used);
    if (!in->tmpl || !in->paths || !in->used)
        goto fail;
    in->npaths = n;
    for (size_t i = 0; i < n; i++) {
        char what[SL_ERROR_MAX / 2];
        snprintf(what, sizeof what, "path of <%s>", names[i]);
        rc = compile_path(&in->paths[i], paths[i] ? paths[i] : "", what, err);
        if (rc)
            goto fail;
    }
    rc = split_template(in, names, err);
    if (rc)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        if (in->used[i] && trie_add(&in->trie, &in->paths[i], i)) {
            rc = SL_ENOMEM;
            goto fail;
        }
    }
    *out = in;
    return 0;
fail:
    sl_input_free(in);
    if (rc == SL_ENOMEM)
        return sl_error_set(err, SL_ENOMEM, "out of memory compiling an input template");
    return rc;
}

/* ---- applying ------------------------------------------------------------ */

/* Whether the key token k decodes to [s, s + n), without allocating. */
static bool key_equals(const sl_json_tok *k, const char *s, size_t n)
{
    if (!(k->flags & SL_JSON_ESCAPED))
        return k->len - 2 == n && memcmp(k->p + 1, s, n) == 0;
    if (k->len - 2 < n)
        return false; /* decoding never lengthens */
    char buf[64];
    size_t pos = 0, got = 0;
    while (pos < k->len) {
        size_t w = sl_json_unescape_part(k, &pos, buf, sizeof buf);
        if (w == 0)
            break;
        if (got + w > n || memcmp(buf, s + got, w) != 0)
            return false;
        got += w;
    }
    return got == n;
}

/* Walks pa from root; true and *val when every step exists. */
static bool resolve(const path *pa, const sl_json_tok *root, sl_json_tok *val)
{
    sl_json_tok cur = *root;
    for (size_t i = 0; i < pa->n; i++) {
        const step *st = &pa->steps[i];
        sl_json_iter it;
        sl_json_tok k, v;
        bool found = false;
        if (st->key) {
            if (cur.type != SL_JSON_OBJECT)
                return false;
            sl_json_iter_init(&it, &cur);
            while (sl_json_iter_member(&it, &k, &v)) {
                if (key_equals(&k, st->key, st->klen)) {
                    found = true;
                    break;
                }
            }
        } else {
            if (cur.type != SL_JSON_ARRAY)
                return false;
            sl_json_iter_init(&it, &cur);
            for (size_t j = 0; sl_json_iter_elem(&it, &v); j++) {
                if (j == st->index) {
                    found = true;
                    break;
                }
            }
        }
        if (!found)
            return false;
        cur = v;
    }
    *val = cur;
    return true;
}

/* Resolves every path of the trie below t, tok being where t is: one pass
 * over each container on the way, which stops as soon as every child has
 * been found. The first occurrence of a repeated member name is used. */
static void walk(const tnode *t, const sl_json_tok *tok, sl_json_tok *vals, bool *found)
{
    for (size_t i = 0; i < t->nvars; i++) {
        vals[t->vars[i]] = *tok;
        found[t->vars[i]] = true;
    }
    if (!t->nkids || (tok->type != SL_JSON_OBJECT && tok->type != SL_JSON_ARRAY))
        return;
    uint64_t done[2] = {0, 0};
    size_t left = 0; /* children of the right kind not found yet */
    for (size_t c = 0; c < t->nkids; c++)
        left += (t->kids[c].st->key != NULL) == (tok->type == SL_JSON_OBJECT);
    sl_json_iter it;
    sl_json_tok k, v;
    sl_json_iter_init(&it, tok);
    if (tok->type == SL_JSON_OBJECT) {
        while (left && sl_json_iter_member(&it, &k, &v)) {
            for (size_t c = 0; c < t->nkids; c++) {
                const step *st = t->kids[c].st;
                if (!st->key || (done[c / 64] >> (c % 64) & 1) ||
                    !key_equals(&k, st->key, st->klen))
                    continue;
                done[c / 64] |= (uint64_t)1 << (c % 64);
                left--;
                walk(&t->kids[c], &v, vals, found);
            }
        }
        return;
    }
    for (size_t j = 0; left && sl_json_iter_elem(&it, &v); j++) {
        for (size_t c = 0; c < t->nkids; c++) {
            const step *st = t->kids[c].st;
            if (st->key || st->index != j)
                continue;
            left--;
            walk(&t->kids[c], &v, vals, found);
        }
    }
}

/* The JSON text of a value, minified when it holds whitespace. */
static int put_json(sl_buf *out, const sl_json_tok *t)
{
    if ((t->type == SL_JSON_OBJECT || t->type == SL_JSON_ARRAY) && (t->flags & SL_JSON_SPACED))
        return sl_json_compact(t->p, t->len, out);
    return sl_buf_append(out, t->p, t->len);
}

/* A container minified with its structural quotes dropped, for use inside a
 * JSON string; what is inside member strings (escapes included) is kept. */
static int put_unquoted(sl_buf *out, const sl_json_tok *t)
{
    if (sl_buf_reserve(out, t->len))
        return SL_ENOMEM;
    char *w = (char *)out->data + out->len;
    const char *p = t->p, *end = t->p + t->len;
    bool in_str = false;
    while (p < end) {
        char c = *p++;
        if (in_str) {
            if (c == '\\') {
                *w++ = c;
                *w++ = *p++;
            } else if (c == '"') {
                in_str = false;
            } else {
                *w++ = c;
            }
        } else if (c == '"') {
            in_str = true;
        } else if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            *w++ = c;
        }
    }
    out->len = (size_t)(w - (char *)out->data);
    return 0;
}

/* A found value written for its place (see input.h). */
static int put_value(sl_buf *out, const sl_json_tok *t, pctx ctx)
{
    if (ctx == C_VALUE)
        return put_json(out, t);
    if (t->type == SL_JSON_STRING) {
        if (ctx == C_STRING || !(t->flags & SL_JSON_ESCAPED))
            return sl_buf_append(out, t->p + 1, t->len - 2);
        if (sl_buf_reserve(out, t->len - 2))
            return SL_ENOMEM;
        size_t n = 0;
        sl_json_unescape(t, (char *)out->data + out->len, t->len - 2, &n);
        out->len += n;
        return 0;
    }
    if (ctx == C_STRING && (t->type == SL_JSON_OBJECT || t->type == SL_JSON_ARRAY))
        return put_unquoted(out, t);
    return put_json(out, t);
}

/* A string known to sluice (rule name, time) written for its place. */
static int put_text(sl_buf *out, const char *s, size_t n, pctx ctx)
{
    if (ctx == C_TEXT)
        return sl_buf_append(out, s, n);
    size_t at = out->len;
    int rc = sl_json_put_string(out, s, n);
    if (rc || ctx == C_VALUE)
        return rc;
    /* Inside a string: the escaped text without its quotes. */
    size_t body = out->len - at - 2;
    memmove(out->data + at, out->data + at + 1, body);
    out->len = at + body;
    return 0;
}

static int put_missing(sl_buf *out, pctx ctx)
{
    return ctx == C_VALUE ? sl_buf_append(out, "null", 4) : 0;
}

int sl_input_apply(const sl_input *in, const char *event_json, size_t len, const sl_input_ctx *ctx,
                   sl_buf *out, sl_error *err)
{
    sl_json_tok root;
    sl_error jerr = {0};
    int rc = sl_json_validate(event_json, len, SL_JSON_DEPTH_LIMIT, &root, &jerr);
    if (rc)
        return sl_error_set(err, SL_EPARSE, "event is not JSON: %s", jerr.msg);
    size_t start = out->len;
    if (in->is_path) {
        sl_json_tok v;
        rc = resolve(&in->paths[0], &root, &v) ? put_json(out, &v) : put_missing(out, C_VALUE);
        goto done;
    }
    /* Every used path is resolved once, all in one walk of the event. */
    sl_json_tok vals[SL_INPUT_MAX_VARS];
    bool found[SL_INPUT_MAX_VARS] = {false};
    walk(&in->trie, &root, vals, found);
    for (size_t i = 0; i < in->npieces && rc == 0; i++) {
        const piece *pc = &in->pieces[i];
        switch (pc->kind) {
        case P_LIT:
            rc = sl_buf_append(out, in->tmpl + pc->off, pc->len);
            break;
        case P_VAR:
            rc = found[pc->var] ? put_value(out, &vals[pc->var], pc->ctx)
                                : put_missing(out, pc->ctx);
            break;
        case P_EVENT:
            rc = put_value(out, &root, pc->ctx);
            break;
        case P_RULE:
            rc = ctx && ctx->rule ? put_text(out, ctx->rule, strlen(ctx->rule), pc->ctx)
                                  : put_missing(out, pc->ctx);
            if (rc == SL_EINVAL) {
                out->len = start;
                return sl_error_set(err, SL_EINVAL, "<sluice.rule>: the rule name is not UTF-8");
            }
            break;
        case P_TIME: {
            char ts[SL_TIME_RFC3339_MAX];
            size_t n = ctx ? sl_time_format_rfc3339(ctx->now_ms, ts) : 0;
            rc = n ? put_text(out, ts, n, pc->ctx) : put_missing(out, pc->ctx);
            break;
        }
        }
    }
done:
    if (rc) {
        out->len = start;
        return sl_error_set(err, rc, "out of memory applying an input transformer");
    }
    return 0;
}
