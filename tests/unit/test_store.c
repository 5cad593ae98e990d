/*
 * tests/unit/test_store.c — the storage interface over the embedded log:
 * everything goes through the function table, as an event set will use it.
 */
#include "testutil.h"
#include "core/log/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_store_roundtrip(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    sl_log_config cfg = tu_config(64 << 10);
    sl_store st;
    sl_error err = {0};
    assert_int_equal(sl_store_open_log(&st, dir, &cfg, NULL, &err), 0);
    assert_int_equal(st.ops->abi_version, SL_STORE_ABI_VERSION);
    assert_string_equal(st.ops->name, "log");

    sl_batch_builder b;
    sl_batch_builder_init(&b, SL_CODEC_ZSTD, 0);
    for (int i = 0; i < 50; i++) {
        char v[64];
        int n = snprintf(v, sizeof v, "{\"i\":%d}", i);
        assert_int_equal(sl_batch_builder_reset(&b, i % 2 ? "lane-a" : ""), 0);
        assert_int_equal(sl_batch_builder_add(&b, 1000 + i, NULL, 0, v, (size_t)n), 0);
        sl_batch batch;
        int64_t base;
        assert_int_equal(sl_batch_builder_finish(&b, &batch, &err), 0);
        assert_int_equal(st.ops->append(st.impl, &batch, &base, &err), 0);
        assert_int_equal(base, i);
    }
    sl_batch_builder_free(&b);
    assert_int_equal(st.ops->sync(st.impl, &err), 0);
    assert_int_equal(st.ops->start_offset(st.impl), 0);
    assert_int_equal(st.ops->end_offset(st.impl), 50);

    void *r;
    sl_record rec;
    assert_int_equal(st.ops->reader_open(st.impl, 0, "lane-a", &r, &err), 0);
    int n = 0;
    while (st.ops->reader_next(r, &rec, &err) == 0) {
        assert_int_equal(rec.offset % 2, 1);
        assert_int_equal(rec.lane_len, 6);
        n++;
    }
    /* The position moved past the base-lane records the reader skipped. */
    assert_int_equal(st.ops->reader_position(r), 50);
    st.ops->reader_close(r);
    assert_int_equal(n, 25);

    /* The call-site wrappers reach the same table. */
    assert_int_equal(sl_store_reader_open(&st, 10, "", &r, &err), 0);
    assert_int_equal(sl_store_reader_next(&st, r, &rec, &err), 0);
    assert_int_equal(rec.offset, 10);
    assert_int_equal(sl_store_reader_position(&st, r), 11);
    sl_store_reader_close(&st, r);
    uint64_t bytes = 0, segs = 0;
    sl_store_stat(&st, &bytes, &segs);
    assert_true(bytes > 50 * 61);
    assert_true(segs >= 1);
    assert_int_equal(sl_store_end_offset(&st), 50);
    assert_int_equal(sl_store_start_offset(&st), 0);

    int64_t off;
    assert_int_equal(st.ops->offset_for_time(st.impl, 1030, &off, &err), 0);
    assert_int_equal(off, 30);
    assert_int_equal(st.ops->retain(st.impl, 0, &err), 0);
    assert_int_equal(st.ops->end_offset(st.impl), 50);
    sl_store_close(&st);
    assert_null(st.ops);
    sl_store_close(&st); /* closing twice is harmless */
    tu_rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
