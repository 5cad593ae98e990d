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

static int64_t log_reader_position(void *reader)
{
    return sl_log_reader_position(reader);
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

static void log_stat(void *impl, uint64_t *bytes, uint64_t *segments)
{
    *bytes = sl_log_size_bytes(impl);
    *segments = sl_log_segment_count(impl);
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
    .reader_position = log_reader_position,
    .reader_close = log_reader_close,
    .offset_for_time = log_offset_for_time,
    .start_offset = log_start,
    .end_offset = log_end,
    .retain = log_retain,
    .stat = log_stat,
    .close = log_close,
};

int sl_store_open_log(sl_store *st, const char *dir, const sl_log_config *cfg,
                      const sl_log_open_options *opts, sl_error *err)
{
    sl_log_open_options o = {.create = true};
    sl_log *log;
    int rc = sl_log_open(dir, cfg, opts ? opts : &o, &log, err);
    if (rc)
        return rc;
    st->ops = &sl_store_log_ops;
    st->impl = log;
    st->data = NULL;
    return 0;
}

int sl_store_append(const sl_store *st, sl_batch *b, int64_t *base_offset, sl_error *err)
{
    return st->ops->append(st->impl, b, base_offset, err);
}

int sl_store_sync(const sl_store *st, sl_error *err)
{
    return st->ops->sync(st->impl, err);
}

int sl_store_reader_open(const sl_store *st, int64_t offset, const char *lane, void **reader,
                         sl_error *err)
{
    return st->ops->reader_open(st->impl, offset, lane, reader, err);
}

int sl_store_reader_next(const sl_store *st, void *reader, sl_record *rec, sl_error *err)
{
    return st->ops->reader_next(reader, rec, err);
}

int64_t sl_store_reader_position(const sl_store *st, void *reader)
{
    return st->ops->reader_position(reader);
}

void sl_store_reader_close(const sl_store *st, void *reader)
{
    st->ops->reader_close(reader);
}

int sl_store_offset_for_time(const sl_store *st, int64_t ts_ms, int64_t *offset, sl_error *err)
{
    return st->ops->offset_for_time(st->impl, ts_ms, offset, err);
}

int64_t sl_store_start_offset(const sl_store *st)
{
    return st->ops->start_offset(st->impl);
}

int64_t sl_store_end_offset(const sl_store *st)
{
    return st->ops->end_offset(st->impl);
}

int sl_store_retain(const sl_store *st, int64_t now_ms, sl_error *err)
{
    return st->ops->retain(st->impl, now_ms, err);
}

void sl_store_stat(const sl_store *st, uint64_t *bytes, uint64_t *segments)
{
    st->ops->stat(st->impl, bytes, segments);
}

void sl_store_close(sl_store *st)
{
    if (st->ops)
        st->ops->close(st->impl);
    st->ops = NULL;
    st->impl = NULL;
}
