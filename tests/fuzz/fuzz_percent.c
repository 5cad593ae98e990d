/*
 * tests/fuzz/fuzz_percent.c — binary-mode header percent-decoding
 * (core/bus/event.c sl_event_from_binary, HTTP binding §3.1.3.2) against a
 * reference decoder written here from the spec, and the round trip that
 * target.http makes: every input line is
 *   1. a raw ce-subject header value: sl_event_from_binary must accept it
 *      exactly when the reference decoder does (trim spaces and tabs,
 *      unquote "…" with \-escapes, decode %XX, UTF-8), with the same bytes;
 *   2. a value to send: when it is UTF-8, it is percent-encoded as
 *      target.http does (connectors/target_http.c add_ce_header) and must
 *      decode back to itself.
 * An input that parses as a structured event is also sent through binary
 * mode and back (sl_ce_binary_attrs, encoded as headers, the data as the
 * body): every attribute must come back with the same text.
 */
#include "core/bus/ce_binding.h"
#include "tests/fuzz/fuzzutil.h"

#include <stdlib.h>
#include <string.h>

static int hexv(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The reference: returns the decoded length, or -1 when invalid. */
static long ref_decode(const char *v, size_t n, char *out)
{
    while (n && (v[0] == ' ' || v[0] == '\t'))
        v++, n--;
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    char *tmp = malloc(n + 1);
    size_t tl = 0;
    FZ_CHECK(tmp, "oom");
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
        for (size_t i = 1; i < n - 1; i++) {
            if (v[i] == '\\' && i + 1 < n - 1)
                i++;
            tmp[tl++] = v[i];
        }
    } else {
        memcpy(tmp, v, n);
        tl = n;
    }
    size_t w = 0;
    for (size_t i = 0; i < tl; i++) {
        if (tmp[i] != '%') {
            out[w++] = tmp[i];
            continue;
        }
        if (i + 2 >= tl) { /* fewer than two characters after the '%' */
            free(tmp);
            return -1;
        }
        int hi = hexv(tmp[i + 1]), lo = hexv(tmp[i + 2]);
        if (hi < 0 || lo < 0) {
            free(tmp);
            return -1;
        }
        out[w++] = (char)(hi << 4 | lo);
        i += 2;
    }
    free(tmp);
    return sl_json_utf8_valid(out, w) ? (long)w : -1;
}

/* Runs one ce-subject header through binary mode; returns the decoded
 * value's length (its bytes in out) or -1 when refused. */
static long from_binary(const char *value, size_t n, char *out)
{
    sl_event_header h = {"ce-subject", 10, value, n};
    sl_buf json = SL_BUF_INIT;
    sl_error err = {0};
    sl_event_status st = sl_event_from_binary(&h, 1, NULL, NULL, 0, NULL, &json, &err);
    FZ_CHECK(st == SL_EVENT_OK || st == SL_EVENT_INVALID_EVENT, "status %s",
             sl_event_status_name(st));
    if (st != SL_EVENT_OK) {
        sl_buf_free(&json); /* its length is back to 0, its memory is the caller's */
        return -1;
    }
    char *j = fz_dup(json.data, json.len, false);
    sl_json_tok obj, k, v;
    FZ_CHECK(sl_json_validate(j, json.len, 2, &obj, &err) == 0, "not JSON: %s", err.msg);
    sl_json_iter it;
    sl_json_iter_init(&it, &obj);
    FZ_CHECK(sl_json_iter_member(&it, &k, &v) && v.type == SL_JSON_STRING, "no subject member");
    size_t len = 0;
    FZ_CHECK(sl_json_unescape(&v, out, v.len, &len) == 0, "unescape");
    free(j);
    sl_buf_free(&json);
    return (long)len;
}

static void check_value(const char *line, size_t n)
{
    char *v = fz_dup(line, n, true); /* header values arrive NUL-terminated */
    char *a = malloc(n + 1), *b = malloc(6 * n + 8);
    FZ_CHECK(a && b, "oom");
    long ra = ref_decode(v, n, a), rb = from_binary(v, n, b);
    FZ_CHECK(ra == rb, "reference decoder says %ld, sluice %ld for \"%s\"", ra, rb, v);
    FZ_CHECK(ra < 0 || memcmp(a, b, (size_t)ra) == 0, "decoded bytes differ for \"%s\"", v);
    if (sl_json_utf8_valid(v, n)) {
        sl_buf enc = SL_BUF_INIT;
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)v[i];
            if (c <= 0x20 || c >= 0x7f || c == '"' || c == '%') {
                static const char hex[] = "0123456789ABCDEF";
                char e[3] = {'%', hex[c >> 4], hex[c & 15]};
                sl_buf_append(&enc, e, 3);
            } else {
                sl_buf_append(&enc, &v[i], 1);
            }
        }
        char *e = fz_dup(enc.data ? (const char *)enc.data : "", enc.len, true);
        char *back = malloc(enc.len + 8);
        long rl = from_binary(e, enc.len, back);
        FZ_CHECK(rl == (long)n && memcmp(back, v, n) == 0,
                 "\"%s\" does not survive percent-encoding (\"%s\")", v, e);
        free(back);
        free(e);
        sl_buf_free(&enc);
    }
    free(a);
    free(b);
    free(v);
}

/* Attributes as binary mode sends them, collected as encoded headers. */
typedef struct hdrs {
    sl_event_header h[SL_EVENT_MAX_MEMBERS + 8];
    size_t n;
    sl_buf text[SL_EVENT_MAX_MEMBERS + 8]; /* "name=value" as decoded, for comparing */
} hdrs;

static int collect(void *ud, const char *name, size_t nlen, const char *v, size_t vlen)
{
    hdrs *l = ud;
    FZ_CHECK(l->n < sizeof l->h / sizeof *l->h, "too many attributes");
    sl_buf hn = SL_BUF_INIT, hv = SL_BUF_INIT;
    sl_buf_append(&hn, "ce-", 3);
    sl_buf_append(&hn, name, nlen);
    sl_buf_append(&hn, "", 1);
    for (size_t i = 0; i < vlen; i++) {
        unsigned char c = (unsigned char)v[i];
        if (c <= 0x20 || c >= 0x7f || c == '"' || c == '%') {
            static const char hex[] = "0123456789ABCDEF";
            char e[3] = {'%', hex[c >> 4], hex[c & 15]};
            sl_buf_append(&hv, e, 3);
        } else {
            sl_buf_append(&hv, &v[i], 1);
        }
    }
    sl_buf_append(&hv, "", 1);
    l->h[l->n] =
        (sl_event_header){(const char *)hn.data, nlen + 3, (const char *)hv.data, hv.len - 1};
    sl_buf t = SL_BUF_INIT;
    sl_buf_append(&t, name, nlen);
    sl_buf_append(&t, "=", 1);
    sl_buf_append(&t, v, vlen);
    l->text[l->n] = t;
    l->n++;
    return 0;
}

static void free_hdrs(hdrs *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free((char *)l->h[i].name);
        free((char *)l->h[i].value);
        sl_buf_free(&l->text[i]);
    }
    l->n = 0;
}

static void round_trip(const char *json, size_t len)
{
    static sl_event ev, ev2;
    static hdrs a, b;
    sl_error err = {0};
    if (sl_event_parse(json, len, NULL, &ev, &err) != SL_EVENT_OK)
        return;
    FZ_CHECK(sl_ce_binary_attrs(&ev, collect, &a) == 0, "attrs");
    bool oom = false;
    char *ct = sl_ce_content_type(&ev, &oom);
    sl_buf body = SL_BUF_INIT, out = SL_BUF_INIT;
    FZ_CHECK(sl_ce_binary_data(&ev, ct, &body) == 0, "data");
    sl_event_limits big = {.max_bytes = (size_t)1 << 30};
    sl_event_status st = sl_event_from_binary(
        a.h, a.n, ct, body.data ? (const char *)body.data : "", body.len, &big, &out, &err);
    FZ_CHECK(st == SL_EVENT_OK, "binary mode refuses what the target sends: %s", err.msg);
    char *j = fz_dup(out.data, out.len, false);
    st = sl_event_parse(j, out.len, &big, &ev2, &err);
    FZ_CHECK(st == SL_EVENT_OK, "the event built from binary mode does not parse: %s: %s\n%s",
             sl_event_status_name(st), err.msg, j);
    FZ_CHECK(sl_ce_binary_attrs(&ev2, collect, &b) == 0, "attrs 2");
    FZ_CHECK(a.n == b.n, "%zu attributes became %zu", a.n, b.n);
    for (size_t i = 0; i < a.n; i++)
        FZ_CHECK(a.text[i].len == b.text[i].len &&
                     memcmp(a.text[i].data, b.text[i].data, a.text[i].len) == 0,
                 "attribute %zu: %.*s became %.*s", i, (int)a.text[i].len,
                 (const char *)a.text[i].data, (int)b.text[i].len, (const char *)b.text[i].data);
    free(j);
    free(ct);
    sl_buf_free(&body);
    sl_buf_free(&out);
    free_hdrs(&a);
    free_hdrs(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size, *line;
    size_t n;
    while (fz_line(&p, end, &line, &n))
        check_value(line, n);
    char *json = fz_dup(data, size, false);
    round_trip(json, size);
    free(json);
    return 0;
}
