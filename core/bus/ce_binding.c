/*
 * core/bus/ce_binding.c — attributes, templates and binary-mode data of a
 * parsed CloudEvent, shared by target.http and target.kafka
 * (core/bus/ce_binding.h).
 */
#include "core/bus/ce_binding.h"
#include "core/base/base64.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const struct {
    const char *name;
    size_t off;
} std_attrs[] = {
    {"specversion", offsetof(sl_event, specversion)},
    {"id", offsetof(sl_event, id)},
    {"source", offsetof(sl_event, source)},
    {"type", offsetof(sl_event, type)},
    {"time", offsetof(sl_event, time)},
    {"subject", offsetof(sl_event, subject)},
    {"datacontenttype", offsetof(sl_event, datacontenttype)},
    {"dataschema", offsetof(sl_event, dataschema)},
    {"lane", offsetof(sl_event, lane_attr)},
    {"partitionkey", offsetof(sl_event, partitionkey)},
};

static bool present(const sl_json_tok *tok)
{
    return tok->type != SL_JSON_NONE && tok->type != SL_JSON_NULL;
}

bool sl_ce_attr(const sl_event *ev, const char *name, size_t len, sl_json_tok *tok)
{
    for (size_t i = 0; i < sizeof std_attrs / sizeof *std_attrs; i++) {
        if (strlen(std_attrs[i].name) == len && memcmp(std_attrs[i].name, name, len) == 0) {
            *tok = *(const sl_json_tok *)((const char *)ev + std_attrs[i].off);
            return present(tok);
        }
    }
    for (size_t i = 0; i < ev->n_ext; i++) {
        if (ev->ext[i].name_len == len && memcmp(ev->ext[i].name, name, len) == 0) {
            *tok = ev->ext[i].value;
            return present(tok);
        }
    }
    return false;
}

char *sl_ce_attr_text(const sl_json_tok *tok, size_t *len)
{
    char *s = malloc(tok->len + 1);
    if (!s)
        return NULL;
    if (tok->type == SL_JSON_STRING) {
        if (sl_json_unescape(tok, s, tok->len, len)) {
            free(s);
            return NULL;
        }
    } else {
        memcpy(s, tok->p, tok->len);
        *len = tok->len;
    }
    s[*len] = '\0';
    return s;
}

bool sl_ce_has_placeholder(const char *tpl)
{
    const char *open = strchr(tpl, '{');
    return open && strchr(open, '}');
}

int sl_ce_expand(const char *tpl, const sl_event *ev, sl_ce_escape_fn *esc, char **out,
                 size_t *out_len, const char **missing, size_t *missing_len)
{
    sl_buf b = SL_BUF_INIT;
    int rc = 0;
    for (const char *p = tpl; *p && !rc;) {
        const char *open = strchr(p, '{'), *close = open ? strchr(open, '}') : NULL;
        if (!open || !close) {
            rc = sl_buf_append(&b, p, strlen(p));
            break;
        }
        if ((rc = sl_buf_append(&b, p, (size_t)(open - p))))
            break;
        size_t nlen = (size_t)(close - open - 1);
        sl_json_tok tok;
        if (!ev || !sl_ce_attr(ev, open + 1, nlen, &tok)) {
            *missing = open + 1;
            *missing_len = nlen;
            rc = SL_EINVAL;
            break;
        }
        size_t vlen = 0;
        char *v = sl_ce_attr_text(&tok, &vlen);
        if (!v)
            rc = SL_ENOMEM;
        else
            rc = esc ? esc(&b, v, vlen) : sl_buf_append(&b, v, vlen);
        free(v);
        p = close + 1;
    }
    if (!rc)
        rc = sl_buf_append(&b, "", 1);
    if (rc) {
        sl_buf_free(&b);
        return rc;
    }
    *out = (char *)b.data;
    if (out_len)
        *out_len = b.len - 1;
    return 0;
}

int sl_ce_template_check(const char *tpl, sl_error *err)
{
    for (const char *p = tpl; *p; p++) {
        if (*p == '}')
            return sl_error_set(err, SL_EINVAL, "template \"%s\": '}' without '{'", tpl);
        if (*p != '{')
            continue;
        const char *q = p + 1;
        while (*q && *q != '}' && *q != '{')
            q++;
        if (*q != '}')
            return sl_error_set(err, SL_EINVAL, "template \"%s\": '{' without its '}'", tpl);
        if (q == p + 1)
            return sl_error_set(err, SL_EINVAL, "template \"%s\": empty placeholder {}", tpl);
        for (const char *c = p + 1; c < q; c++)
            if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9')))
                return sl_error_set(err, SL_EINVAL,
                                    "template \"%s\": {%.*s} is not an attribute name "
                                    "(lowercase letters and digits)",
                                    tpl, (int)(q - p - 1), p + 1);
        p = q;
    }
    return 0;
}

/* Calls fn with the text of tok: straight from the input when no decoding
 * is needed (the common case: no allocation), else decoded into a copy. */
static int call_attr(sl_ce_attr_fn *fn, void *ud, const char *name, size_t nlen,
                     const sl_json_tok *tok)
{
    if (tok->type != SL_JSON_STRING)
        return fn(ud, name, nlen, tok->p, tok->len);
    if (tok->len >= 2 && !memchr(tok->p, '\\', tok->len))
        return fn(ud, name, nlen, tok->p + 1, tok->len - 2);
    size_t len = 0;
    char *v = sl_ce_attr_text(tok, &len);
    int rc = v ? fn(ud, name, nlen, v, len) : SL_ENOMEM;
    free(v);
    return rc;
}

int sl_ce_binary_attrs(const sl_event *ev, sl_ce_attr_fn *fn, void *ud)
{
    int rc = 0;
    sl_json_tok tok;
    for (size_t i = 0; !rc && i < sizeof std_attrs / sizeof *std_attrs; i++) {
        const char *name = std_attrs[i].name;
        size_t nlen = strlen(name);
        if (strcmp(name, "datacontenttype") == 0 || !sl_ce_attr(ev, name, nlen, &tok))
            continue;
        rc = call_attr(fn, ud, name, nlen, &tok);
    }
    for (size_t i = 0; !rc && i < ev->n_ext; i++)
        if (present(&ev->ext[i].value))
            rc = call_attr(fn, ud, ev->ext[i].name, ev->ext[i].name_len, &ev->ext[i].value);
    return rc;
}

char *sl_ce_content_type(const sl_event *ev, bool *oom)
{
    sl_json_tok tok;
    size_t len = 0;
    *oom = false;
    if (!sl_ce_attr(ev, "datacontenttype", 15, &tok))
        return NULL;
    char *s = sl_ce_attr_text(&tok, &len);
    *oom = s == NULL;
    return s;
}

/* Appends the decoded form of a validated base64 string token (JSON escapes
 * such as \u002B for '+' are resolved first: ingest checks the unescaped
 * text, and some JSON writers escape '+' and '/'). */
static int b64_decode(const sl_json_tok *tok, sl_buf *out)
{
    char *text = malloc(tok->len ? tok->len : 1);
    size_t tl = 0;
    if (!text)
        return SL_ENOMEM;
    sl_json_unescape(tok, text, tok->len, &tl);
    size_t n = 0;
    int rc = sl_buf_reserve(out, tl / 4 * 3 + 2);
    if (!rc) {
        /* Padding is passed over: the text was checked at ingest. */
        sl_base64_decode(text, tl, SL_BASE64_SKIP_INVALID, out->data + out->len, &n, NULL);
        out->len += n;
    }
    free(text);
    return rc;
}

/* Whether ctype declares JSON data as the CloudEvents JSON format defines it
 * (§3.1): no type at all, or a media type (parameters stripped) whose
 * subtype is "json" or ends in "+json". Not any type that merely mentions "json"
 * (text/x-json5 is text: its string data goes out as the text, not quoted),
 * so that what ingest stored as text (core/bus/event.c) goes back as the same
 * bytes. */
static bool ct_is_json(const char *ctype)
{
    if (!ctype)
        return true;
    while (*ctype == ' ' || *ctype == '\t')
        ctype++;
    size_t n = strcspn(ctype, "; \t");
    const char *slash = memchr(ctype, '/', n);
    if (!slash)
        return false;
    size_t sl = n - (size_t)(slash + 1 - ctype);
    const char *sub = slash + 1;
    return (sl == 4 && strncasecmp(sub, "json", 4) == 0) ||
           (sl > 5 && strncasecmp(sub + sl - 5, "+json", 5) == 0);
}

bool sl_ce_binary_data_is_json(const sl_event *ev, const char *ctype)
{
    bool json_ct = ct_is_json(ctype);
    return ev->data_base64.type != SL_JSON_STRING && !(ev->data.type == SL_JSON_STRING && !json_ct);
}

int sl_ce_binary_data(const sl_event *ev, const char *ctype, sl_buf *out)
{
    bool json_ct = ct_is_json(ctype);
    if (ev->data_base64.type == SL_JSON_STRING)
        return b64_decode(&ev->data_base64, out);
    if (ev->data.type == SL_JSON_STRING && !json_ct) {
        size_t len = 0;
        int rc = sl_buf_reserve(out, ev->data.len);
        if (!rc)
            rc = sl_json_unescape(&ev->data, (char *)out->data + out->len, ev->data.len, &len);
        if (!rc)
            out->len += len;
        return rc;
    }
    if (ev->data.type != SL_JSON_NONE)
        return sl_buf_append(out, ev->data.p, ev->data.len);
    return 0;
}
