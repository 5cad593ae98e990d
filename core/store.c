/*
 * core/store.c — the embedded log as a storage backend (see core/store.h):
 * thin adapters from the store table to core/log.h.
 */
#include "core/store.h"

static int log_append(void *impl, sl_batch *b, int64_t *base_offset, sl_error *err)
{
    return sl_log_append(impl, b, base_offset, err);
}

static int log_sync(void *impl, sl_error *err)
{
    return sl_log_sync(impl, err);
}

static int log_reader_open(void *impl, int64_t offset, const char *lane, void **reader,
                           sl_error *err)
{
    return sl_log_reader_open(impl, offset, lane, (sl_log_reader **)reader, err);
}

static int log_reader_next(void *reader, sl_record *rec, sl_error *err)
{
    return sl_log_reader_next(reader, rec, err);
}

static void log_reader_close(void *reader)
{
    sl_log_reader_close(reader);
}

static int log_offset_for_time(void *impl, int64_t ts_ms, int64_t *offset, sl_error *err)
{
    return sl_log_offset_for_time(impl, ts_ms, offset, err);
}

static int64_t log_start(void *impl)
{
    return sl_log_start_offset(impl);
}

static int64_t log_end(void *impl)
{
    return sl_log_end_offset(impl);
}

static int log_retain(void *impl, int64_t now_ms, sl_error *err)
{
    return sl_log_retain(impl, now_ms, NULL, err);
}

static void log_close(void *impl)
{
    sl_log_close(impl);
}

const sl_store_ops sl_store_log_ops = {
    .abi_version = SL_STORE_ABI_VERSION,
    .name = "log",
    .append = log_append,
    .sync = log_sync,
    .reader_open = log_reader_open,
    .reader_next = log_reader_next,
    .reader_close = log_reader_close,
    .offset_for_time = log_offset_for_time,
    .start_offset = log_start,
    .end_offset = log_end,
    .retain = log_retain,
    .close = log_close,
};

int sl_store_open_log(sl_store *st, const char *dir, const sl_log_config *cfg, sl_error *err)
{
    sl_log_open_options o = {.create = true};
    sl_log *log;
    int rc = sl_log_open(dir, cfg, &o, &log, err);
    if (rc)
        return rc;
    st->ops = &sl_store_log_ops;
    st->impl = log;
    st->data = NULL;
    return 0;
}
