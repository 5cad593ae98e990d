/*
 * core/log/log.h — a partition's log: an ordered list of segments
 * (core/log/segment.h) with one writer and many concurrent readers. The storage
 * engine under every event set; layout and recovery in docs/storage-format.md.
 *
 *   <dir>/<20-digit base offset>.log|.index|.timeindex|.lanes
 *   <dir>/.lock    held (flock) while a process has the partition open
 *   <dir>/.clean   written by a clean close, holding the log's summary
 *                  (sl_log_clean_summary); its absence on open means the
 *                  last process crashed, so the active segment is checked fully
 *
 * Offsets are assigned by sl_log_append() and never reused. Readers see a
 * batch only after it is completely written.
 */
#ifndef SL_LOG_H
#define SL_LOG_H

#include "core/log/batch.h"
#include "core/base/err.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct sl_log_config {
    uint64_t segment_bytes;        /* roll before a batch would grow the active segment past this */
    int64_t segment_ms;            /* roll when the active segment is older; 0 = never */
    uint32_t index_interval_bytes; /* log bytes between offset index entries */
    int64_t retention_ms;          /* delete segments whose newest record is older; -1 = keep */
    int64_t retention_bytes;       /* delete oldest segments past this size; -1 = no limit */
} sl_log_config;

/* 128 MiB segments, 7-day segment age, 4 KiB index interval, 7-day retention,
 * no size limit (Kafka's defaults). */
void sl_log_config_default(sl_log_config *cfg);

/* Called with one line per repair or notable action while opening. */
typedef void sl_log_notify_fn(void *ctx, const char *msg);

typedef struct sl_log_open_options {
    bool create;        /* create the directory (and parents) when missing */
    bool full_recovery; /* CRC-check every batch of every segment (sluice log recover) */
    sl_log_notify_fn *notify;
    void *notify_ctx;
} sl_log_open_options;

typedef struct sl_log sl_log;

/* Opens (and recovers) the partition in dir. opts may be NULL (no create, no
 * notifications). Returns 0 with *out, or an SL_E… code with err: SL_ENOENT
 * (no such partition), SL_EEXIST (another process has it open), SL_EIO… */
int sl_log_open(const char *dir, const sl_log_config *cfg, const sl_log_open_options *opts,
                sl_log **out, sl_error *err);

/* Appends a finished batch (sl_batch_builder_finish), writing its base
 * offset into b->data. Rolls the segment first when needed. Not durable until
 * sl_log_sync(). Returns 0 with *base_offset, or an SL_E… code with err
 * (SL_ENOSPC when the disk is full); on error nothing of the batch is
 * visible and the log stays writable. Appenders are serialised internally. */
int sl_log_append(sl_log *log, sl_batch *b, int64_t *base_offset, sl_error *err);

/* fdatasyncs everything appended so far (and the directory after a roll).
 * Safe to call from another thread than the appender. */
int sl_log_sync(sl_log *log, sl_error *err);

/* First offset still stored, and the offset the next append will get. */
int64_t sl_log_start_offset(sl_log *log);
int64_t sl_log_end_offset(sl_log *log);

/* Bytes in all segments. */
uint64_t sl_log_size_bytes(sl_log *log);
/* Number of segments. */
size_t sl_log_segment_count(sl_log *log);

/* What a closed log needs to answer listings, end-offset checks and retention
 * decisions without being open (core/log/store.h parks idle partitions). */
typedef struct sl_log_summary {
    int64_t start, end;    /* sl_log_start_offset(), sl_log_end_offset() */
    uint64_t bytes;        /* sl_log_size_bytes() */
    uint64_t segments;     /* sl_log_segment_count() */
    uint64_t first_bytes;  /* the oldest segment's size ... */
    int64_t first_max_ts;  /* ... and newest timestamp (INT64_MIN when empty) */
    uint64_t active_bytes; /* the same for the active (newest) segment */
    int64_t active_max_ts;
    int64_t active_base; /* and its base offset */
} sl_log_summary;

/* Fills *out from the open log (a consistent snapshot under the log's lock). */
void sl_log_summarize(sl_log *log, sl_log_summary *out);

/* The summary that the last clean sl_log_close() left in dir/.clean, read
 * without opening the log (no descriptor stays open), once the active
 * segment's .log is checked to have the size it names. Returns 0, or
 * SL_ENOENT with err when there is none to trust: no marker (never closed
 * cleanly, or opened since), an older marker without a summary, or an
 * active segment of another size. */
int sl_log_clean_summary(const char *dir, sl_log_summary *out, sl_error *err);

/* True when sl_log_retain(now_ms) on a log with configuration cfg, summarised
 * as s, would roll or delete a segment; false when it would do nothing. */
bool sl_log_retain_due(const sl_log_config *cfg, const sl_log_summary *s, int64_t now_ms);

/* The first offset whose record timestamp is >= ts_ms, or the end offset
 * when there is none. Returns 0 or an SL_E… code with err. */
int sl_log_offset_for_time(sl_log *log, int64_t ts_ms, int64_t *offset, sl_error *err);

/* Closes the active segment and starts a new one (no-op when it is empty). */
int sl_log_roll(sl_log *log, sl_error *err);

/* Applies retention at time now_ms: deletes whole segments, oldest first,
 * while they are older than retention_ms or the log is over retention_bytes;
 * never the only segment holding the end offset. Readers inside a deleted
 * segment finish it. *deleted (may be NULL) gets the count. */
int sl_log_retain(sl_log *log, int64_t now_ms, int *deleted, sl_error *err);

/* Syncs, trims the indexes, marks the shutdown clean and frees the log.
 * Readers must be closed first. NULL is ignored. */
void sl_log_close(sl_log *log);

/* ---- reading ------------------------------------------------------------ */

typedef struct sl_log_reader sl_log_reader;

/* A reader positioned at offset (start <= offset <= end) returning records of
 * one lane: lane "" = the base lane, NULL = every lane. Batches of other
 * lanes are skipped through the lane sidecar without being read. Returns 0,
 * SL_ERANGE (offset outside the log, with err), SL_EINVAL or SL_ENOMEM. */
int sl_log_reader_open(sl_log *log, int64_t offset, const char *lane, sl_log_reader **out,
                       sl_error *err);

/* Next record at or after the reader's position. rec's pointers stay valid
 * until the next call. Returns 0, SL_EEOF when the reader has caught up with
 * the end (call again after more appends), SL_ECORRUPT (err names the file
 * and byte) or SL_EIO. CRCs are checked on every batch read. */
int sl_log_reader_next(sl_log_reader *r, sl_record *rec, sl_error *err);

/* Header of the batch the last returned record came from (for dumps). */
const sl_batch_info *sl_log_reader_batch(const sl_log_reader *r);

/* The offset the reader will look at next. */
int64_t sl_log_reader_position(const sl_log_reader *r);

void sl_log_reader_close(sl_log_reader *r);

/* A byte range of whole stored batches in one segment file, for zero-copy
 * sending (sendfile) of what is on disk: batch bytes exactly as stored. */
typedef struct sl_log_slice {
    int fd; /* the segment's .log; valid until sl_log_slice_release() */
    uint64_t pos;
    uint64_t len;         /* 0 when there is nothing to read yet */
    int64_t first_offset; /* base offset of the first batch (may be < the asked offset) */
    int64_t next_offset;  /* offset after the last batch in the range */
    bool compressed;      /* at least one batch in the range is zstd-compressed */
    void *seg;            /* reference held on the segment */
} sl_log_slice;

/* Finds the batches holding offset and after, of lane (NULL = every lane), up
 * to max_bytes (at least one batch). Returns 0 (len 0 when offset is the end),
 * SL_ERANGE or SL_EIO with err. Release with sl_log_slice_release(). */
int sl_log_slice_get(sl_log *log, int64_t offset, const char *lane, size_t max_bytes,
                     sl_log_slice *out, sl_error *err);
void sl_log_slice_release(sl_log_slice *s);

/* ---- checking ----------------------------------------------------------- */

/* What sl_log_verify() found. */
typedef struct sl_log_verify_report {
    size_t segments;
    uint64_t batches;
    uint64_t records;
    uint64_t bytes;
    int64_t first_offset;
    int64_t next_offset;
    bool damaged;
    char where[SL_ERROR_MAX]; /* "<file>: byte N: reason" of the first damage */
} sl_log_verify_report;

/* Reads every segment of dir without changing anything: batch headers and
 * CRCs, every record, offset order across segments, and that the indexes and
 * lane sidecar agree with the log. Returns 0 with the report (damaged set
 * when something is wrong) or an SL_E… code with err when dir cannot be
 * read at all. */
int sl_log_verify(const char *dir, sl_log_verify_report *rep, sl_error *err);

#endif
