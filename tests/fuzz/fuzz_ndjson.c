/*
 * tests/fuzz/fuzz_ndjson.c — the NDJSON reader (Content-Type:
 * application/x-ndjson): lines split as http/http_ingest.c parse_ndjson
 * does (blank and whitespace-only lines skipped, each other line one event
 * through ingest's steps, fz_ingest_event), plus the core/base/json.h scanner on
 * every line: validate, iterate every container, decode every string whole
 * and in parts, compact, and re-encode strings; each must agree with the
 * others.
 */
#include "tests/fuzz/fuzzutil.h"

#include <stdlib.h>
#include <string.h>

/* Walks a validated value: every string decoded (whole and in 4-byte
 * parts, which must agree) and written back with sl_json_put_string, which
 * must decode to the same bytes. */
static void walk(const sl_json_tok *t, int depth)
{
    FZ_CHECK(depth < 2000, "walk depth");
    if (t->type == SL_JSON_STRING) {
        char *a = malloc(t->len), *b = malloc(t->len);
        size_t al = 0, bl = 0, pos = 0, n;
        FZ_CHECK(a && b, "oom");
        FZ_CHECK(sl_json_unescape(t, a, t->len - 2, &al) == 0, "unescape with len-2 bytes");
        while ((n = sl_json_unescape_part(t, &pos, b + bl, 4)) > 0) {
            bl += n;
            FZ_CHECK(bl <= al, "parts longer than the whole");
        }
        FZ_CHECK(pos == t->len, "unescape_part stopped at %zu of %zu", pos, t->len);
        FZ_CHECK(al == bl && memcmp(a, b, al) == 0, "unescape and unescape_part differ");
        FZ_CHECK(sl_json_utf8_valid(a, al), "a decoded string is not UTF-8");
        sl_buf enc = SL_BUF_INIT;
        FZ_CHECK(sl_json_put_string(&enc, a, al) == 0, "put_string");
        char *e = fz_dup(enc.data, enc.len, false);
        sl_json_tok t2;
        FZ_CHECK(sl_json_validate(e, enc.len, 0, &t2, NULL) == 0 && t2.type == SL_JSON_STRING,
                 "put_string wrote an invalid string");
        size_t cl = 0;
        char *c = malloc(enc.len);
        FZ_CHECK(sl_json_unescape(&t2, c, enc.len, &cl) == 0 && cl == al && !memcmp(a, c, al),
                 "a string does not survive put_string");
        free(c);
        free(e);
        sl_buf_free(&enc);
        free(a);
        free(b);
        return;
    }
    sl_json_iter it;
    sl_json_tok k, v;
    if (t->type == SL_JSON_OBJECT) {
        sl_json_iter_init(&it, t);
        while (sl_json_iter_member(&it, &k, &v)) {
            FZ_CHECK(k.type == SL_JSON_STRING, "member name is not a string");
            walk(&k, depth + 1);
            walk(&v, depth + 1);
        }
    } else if (t->type == SL_JSON_ARRAY) {
        sl_json_iter_init(&it, t);
        while (sl_json_iter_elem(&it, &v))
            walk(&v, depth + 1);
    }
}

static void scan_line(const char *p, size_t len)
{
    sl_json_tok t;
    sl_error err = {0};
    int rc = sl_json_validate(p, len, SL_EVENT_MAX_DEPTH_DEFAULT, &t, &err);
    FZ_CHECK(rc == 0 || rc == SL_EPARSE || rc == SL_EPARTIAL, "validate: %d", rc);
    if (rc) {
        FZ_CHECK(strncmp(err.msg, "byte ", 5) == 0, "message \"%s\"", err.msg);
        return;
    }
    walk(&t, 0);
    sl_buf c = SL_BUF_INIT;
    FZ_CHECK(sl_json_compact(t.p, t.len, &c) == 0, "compact");
    char *cp = fz_dup(c.data, c.len, false);
    sl_json_tok t2;
    FZ_CHECK(sl_json_validate(cp, c.len, SL_EVENT_MAX_DEPTH_DEFAULT, &t2, &err) == 0,
             "the compact form is not valid: %s", err.msg);
    FZ_CHECK(t2.type == t.type && t2.len == c.len, "compact form type/length");
    free(cp);
    sl_buf_free(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *body = fz_dup(data, size, false);
    sl_event_limits lim = {.max_bytes = SL_EVENT_MAX_BYTES_DEFAULT,
                           .max_depth = SL_EVENT_MAX_DEPTH_DEFAULT};
    const char *p = body, *end = body + size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        const char *s = p;
        while (s < le && (*s == ' ' || *s == '\t' || *s == '\r'))
            s++;
        if (s < le) {
            /* Each line in its own allocation: a read past the line's end
             * (into the next line) is an ASan report. */
            char *line = fz_dup(p, (size_t)(le - p), false);
            fz_ingest_event(line, (size_t)(le - p), &lim, NULL);
            scan_line(line, (size_t)(le - p));
            free(line);
        }
        p = nl ? nl + 1 : end;
    }
    free(body);
    return 0;
}
