/*
 * tests/unit/testutil.c — shared helpers for the unit tests.
 */
#include "testutil.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *tu_tmpdir(void)
{
    const char *t = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/sluice-test-XXXXXX", t && *t ? t : "/tmp");
    char *d = mkdtemp(tmpl);
    assert_non_null(d);
    return strdup(d);
}

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void tu_rmdir(char *dir)
{
    if (!dir)
        return;
    nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

size_t tu_value(char *buf, size_t size, int64_t i)
{
    int n = snprintf(buf, size + 64, "{\"n\":%lld,\"pad\":\"", (long long)i);
    size_t len = (size_t)n;
    size_t pad = size > len + 2 ? size - len - 2 : 0;
    for (size_t k = 0; k < pad; k++)
        buf[len++] = (char)('a' + (i + (int64_t)k) % 26);
    buf[len++] = '"';
    buf[len++] = '}';
    return len;
}

void tu_append(sl_log *log, int64_t first, int64_t count, int per_batch, size_t value_size,
               int64_t ts0, const char *lane, sl_codec codec)
{
    sl_batch_builder b;
    sl_batch_builder_init(&b, codec, 0);
    char *v = malloc(value_size + 64);
    assert_non_null(v);
    int64_t i = first, end = first + count;
    while (i < end) {
        assert_int_equal(sl_batch_builder_reset(&b, lane), 0);
        for (int k = 0; k < per_batch && i < end; k++, i++) {
            size_t len = tu_value(v, value_size, i);
            char key[32];
            int kl = snprintf(key, sizeof key, "k%lld", (long long)(i % 7));
            assert_int_equal(sl_batch_builder_add(&b, ts0 + i, key, (size_t)kl, v, len), 0);
        }
        sl_batch batch;
        sl_error err = {0};
        assert_int_equal(sl_batch_builder_finish(&b, &batch, &err), 0);
        int64_t base = -1;
        int64_t expect = sl_log_end_offset(log);
        int rc = sl_log_append(log, &batch, &base, &err);
        if (rc)
            fail_msg("append: %s", err.msg);
        assert_int_equal(base, expect);
    }
    free(v);
    sl_batch_builder_free(&b);
}

int64_t tu_read_all(sl_log *log, int64_t offset, const char *lane, size_t value_size)
{
    sl_log_reader *r;
    sl_error err = {0};
    int rc = sl_log_reader_open(log, offset, lane, &r, &err);
    if (rc)
        fail_msg("reader_open: %s", err.msg);
    char *v = malloc(value_size + 64);
    assert_non_null(v);
    int64_t n = 0, prev = offset - 1;
    sl_record rec;
    while ((rc = sl_log_reader_next(r, &rec, &err)) == 0) {
        assert_true(rec.offset > prev);
        prev = rec.offset;
        size_t len = tu_value(v, value_size, rec.offset);
        assert_int_equal(rec.value_len, len);
        assert_memory_equal(rec.value, v, len);
        n++;
    }
    if (rc != SL_EEOF)
        fail_msg("reader_next: %s", err.msg);
    free(v);
    sl_log_reader_close(r);
    return n;
}

sl_log_config tu_config(uint64_t seg)
{
    sl_log_config c;
    sl_log_config_default(&c);
    c.segment_bytes = seg;
    c.segment_ms = 0;
    c.retention_ms = -1;
    c.retention_bytes = -1;
    return c;
}

int64_t tu_file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}
