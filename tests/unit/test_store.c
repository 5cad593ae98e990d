/*
 * tests/unit/test_store.c — the storage interface over the embedded log:
 * everything goes through the function table, as an event set will use it.
 */
#include "testutil.h"
#include "core/store.h"

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
    assert_int_equal(sl_store_open_log(&st, dir, &cfg, &err), 0);
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
    st.ops->reader_close(r);
    assert_int_equal(n, 25);

    int64_t off;
    assert_int_equal(st.ops->offset_for_time(st.impl, 1030, &off, &err), 0);
    assert_int_equal(off, 30);
    assert_int_equal(st.ops->retain(st.impl, 0, &err), 0);
    assert_int_equal(st.ops->end_offset(st.impl), 50);
    st.ops->close(st.impl);
    tu_rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_roundtrip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
