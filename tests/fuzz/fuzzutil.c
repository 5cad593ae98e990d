/*
 * tests/fuzz/fuzzutil.c — helpers shared by the fuzz harnesses (see
 * fuzzutil.h).
 */
#include "tests/fuzz/fuzzutil.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void fz_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
    fprintf(stderr, "%s:%d: fuzz oracle failed: %s: ", file, line, cond);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

char *fz_dup(const void *p, size_t n, bool nul)
{
    char *s = malloc(n + nul + (n + nul == 0)); /* malloc(0) may return NULL */
    if (!s)
        abort();
    if (n)
        memcpy(s, p, n);
    if (nul)
        s[n] = '\0';
    return s;
}

bool fz_line(const char **p, const char *end, const char **line, size_t *len)
{
    if (*p >= end)
        return false;
    const char *nl = memchr(*p, '\n', (size_t)(end - *p));
    *line = *p;
    *len = (size_t)((nl ? nl : end) - *p);
    *p = nl ? nl + 1 : end;
    return true;
}

const char *fz_find(const char *p, const char *end, const char *sep, size_t seplen)
{
    if ((size_t)(end - p) < seplen)
        return NULL;
    return memmem(p, (size_t)(end - p), sep, seplen);
}

static char tmpdir[512];

static void rm_tree(const char *dir)
{
    fz_clear_dir(dir);
    rmdir(dir);
}

static void remove_tmpdir(void)
{
    if (tmpdir[0])
        rm_tree(tmpdir);
}

const char *fz_tmpdir(void)
{
    if (tmpdir[0])
        return tmpdir;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR");
    if (!base || !*base)
        base = "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/sluice-fuzz-XXXXXX", base);
    if (!mkdtemp(tmpdir)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(remove_tmpdir);
    return tmpdir;
}

void fz_clear_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
            rm_tree(path);
        else
            unlink(path);
    }
    closedir(d);
}

int fz_write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = n ? fwrite(data, 1, n, f) : 0;
    return fclose(f) == 0 && w == n ? 0 : -1;
}

/* ---- CloudEvents ------------------------------------------------------------ */

#include "core/bus/ce_binding.h"

#include <strings.h>

static int walk_attr(void *ud, const char *name, size_t nlen, const char *v, size_t vlen)
{
    FZ_CHECK(nlen > 0 && nlen <= SL_EVENT_NAME_MAX, "attribute name of %zu bytes", nlen);
    FZ_CHECK(sl_json_utf8_valid(v, vlen), "attribute %.*s: value not UTF-8", (int)nlen, name);
    *(size_t *)ud += 1;
    return 0;
}

static int pct_escape(sl_buf *out, const char *v, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)v[i];
        if (c <= 0x20 || c >= 0x7f || c == '/' || c == '%') {
            static const char hex[] = "0123456789ABCDEF";
            char e[3] = {'%', hex[c >> 4], hex[c & 15]};
            if (sl_buf_append(out, e, 3))
                return SL_ENOMEM;
        } else if (sl_buf_append(out, &v[i], 1)) {
            return SL_ENOMEM;
        }
    }
    return 0;
}

/* What the targets do with a parsed event: attributes as headers, the
 * content type, the data as binary mode sends it, templates. */
static void binding_checks(const sl_event *ev)
{
    size_t n = 0;
    FZ_CHECK(sl_ce_binary_attrs(ev, walk_attr, &n) == 0, "binary attrs");
    FZ_CHECK(n >= 3, "an event has at least id, source and type; got %zu attributes", n);
    bool oom = false;
    char *ct = sl_ce_content_type(ev, &oom);
    FZ_CHECK(!oom, "content type oom");
    sl_buf data = SL_BUF_INIT;
    FZ_CHECK(sl_ce_binary_data(ev, ct, &data) == 0, "binary data");
    if (sl_ce_binary_data_is_json(ev, ct)) {
        size_t want = ev->data.type == SL_JSON_NONE ? 0 : ev->data.len;
        FZ_CHECK(data.len == want && (!want || memcmp(data.data, ev->data.p, want) == 0),
                 "binary data said to be the JSON text as it is, but differs");
    }
    sl_buf_free(&data);
    free(ct);
    static const char *const tpls[] = {"{id}", "/x/{type}/{source}", "{subject}-{lane}",
                                       "{partitionkey}{time}", "{nope"};
    for (size_t i = 0; i < sizeof tpls / sizeof *tpls; i++) {
        char *out = NULL;
        size_t ol = 0, ml = 0;
        const char *miss = NULL;
        int rc = sl_ce_expand(tpls[i], ev, i & 1 ? pct_escape : NULL, &out, &ol, &miss, &ml);
        FZ_CHECK(rc == 0 || rc == SL_EINVAL, "expand: %d", rc);
        free(out);
    }
}

int fz_ingest_event(const char *json, size_t len, const sl_event_limits *lim, const char *lane)
{
    static sl_event ev, ev2, ev3; /* ~3.5 KiB each: not on the stack */
    sl_error err = {0};
    sl_event_status st = sl_event_parse(json, len, lim, &ev, &err);
    FZ_CHECK(st < SL_EVENT_STATUS_COUNT, "status %d", (int)st);
    if (st != SL_EVENT_OK) {
        FZ_CHECK(err.msg[0] != '\0', "status %s without a message", sl_event_status_name(st));
        return st;
    }
    st = sl_event_apply_lane(&ev, lane, &err);
    if (st != SL_EVENT_OK)
        return st;
    binding_checks(&ev);
    sl_buf stored = SL_BUF_INIT, dec = SL_BUF_INIT;
    sl_event_fill fill = {.now_ms = 1764400000123};
    FZ_CHECK(sl_event_encode(&ev, &fill, &stored) == 0, "encode");
    /* The stored form is what the log keeps and rules read: it must parse
     * again, with its lane and id. */
    char *s = fz_dup(stored.data, stored.len, false);
    sl_event_limits big = {.max_bytes = (size_t)1 << 30, .max_depth = 0};
    if (lim)
        big.max_depth = lim->max_depth;
    st = sl_event_parse(s, stored.len, &big, &ev2, &err);
    FZ_CHECK(st == SL_EVENT_OK, "the stored form does not parse: %s: %s\n%.*s",
             sl_event_status_name(st), err.msg, (int)stored.len, s);
    FZ_CHECK(strcmp(ev2.lane, ev.lane) == 0, "lane %s became %s", ev.lane, ev2.lane);
    FZ_CHECK(ev2.id.type == SL_JSON_STRING && ev2.has_time, "stored id/time");
    if (ev.id.type == SL_JSON_STRING)
        FZ_CHECK(ev2.id.len == ev.id.len && memcmp(ev2.id.p, ev.id.p, ev.id.len) == 0, "id");
    /* Read back: decorated with set, partition and offset, parses again. */
    FZ_CHECK(sl_event_decorate(s, stored.len, "fuzz-set", 3, 42, &dec) == 0, "decorate");
    char *d = fz_dup(dec.data, dec.len, false);
    st = sl_event_parse(d, dec.len, &big, &ev3, &err);
    FZ_CHECK(st == SL_EVENT_OK, "the read form does not parse: %s: %s", sl_event_status_name(st),
             err.msg);
    FZ_CHECK(ev3.id.len == ev2.id.len && memcmp(ev3.id.p, ev2.id.p, ev2.id.len) == 0, "read id");
    binding_checks(&ev3);
    free(d);
    free(s);
    sl_buf_free(&dec);
    sl_buf_free(&stored);
    return SL_EVENT_OK;
}

void fz_binary_split(fz_binary *b, const char *p, size_t len)
{
    memset(b, 0, sizeof *b);
    const char *end = p + len, *line;
    size_t ll;
    while (fz_line(&p, end, &line, &ll)) {
        if (ll && line[ll - 1] == '\r')
            ll--;
        if (ll == 0)
            break;
        const char *colon = memchr(line, ':', ll);
        if (!colon)
            continue;
        size_t nl = (size_t)(colon - line);
        const char *v = colon + 1;
        size_t vl = ll - nl - 1;
        while (vl && (*v == ' ' || *v == '\t')) /* as an HTTP server hands it over */
            v++, vl--;
        if (nl == 12 && strncasecmp(line, "content-type", 12) == 0) {
            free(b->ctype);
            b->ctype = fz_dup(v, vl, true);
        } else if (nl > 3 && strncasecmp(line, "ce-", 3) == 0 && b->n < 64) {
            b->h[b->n].name = fz_dup(line, nl, true);
            b->h[b->n].name_len = nl;
            b->h[b->n].value = fz_dup(v, vl, true);
            b->h[b->n].value_len = vl;
            b->n++;
        }
    }
    b->body_len = (size_t)(end - p);
    b->body = fz_dup(p, b->body_len, false);
}

void fz_binary_free(fz_binary *b)
{
    for (size_t i = 0; i < b->n; i++) {
        free((char *)b->h[i].name);
        free((char *)b->h[i].value);
    }
    free(b->ctype);
    free(b->body);
}
