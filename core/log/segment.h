/*
 * core/log/segment.h — one log segment: the .log file of record batches and its
 * companions, all named by the 20-digit base offset:
 *
 *   <base>.log        record batches (core/log/batch.h), back to back
 *   <base>.index      offset index: {u32 relative base offset, u32 position}
 *                     per ~index_interval_bytes of log, big-endian
 *   <base>.timeindex  time index: {i64 max timestamp so far, u32 relative
 *                     offset}, added with offset index entries when the
 *                     timestamp grew
 *   <base>.lanes      lane sidecar: one 48-byte entry per run of consecutive
 *                     batches with the same lane {u32 relative base offset,
 *                     u32 position, u8 lane length, 32 bytes lane, 7 zero}
 *
 * The three companions are derived data: they are validated on open and
 * rebuilt from the .log when missing or inconsistent.
 *
 * Threading: one writer; readers use sl_segment_size(),
 * sl_segment_next_offset() and the index lookups without locks, and
 * sl_segment_lane_at() under the segment's own small lock.
 */
#ifndef SL_SEGMENT_H
#define SL_SEGMENT_H

#include "core/log/batch.h"
#include "core/log/index.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define SL_SEGMENT_NAME_LEN 20
#define SL_OFFSET_ENTRY 8
#define SL_TIME_ENTRY 12
#define SL_LANES_ENTRY 48

/* A run of batches with one lane, starting at pos. */
typedef struct sl_lane_run {
    uint32_t rel;
    uint32_t pos;
    char lane[SL_LANE_MAX + 1];
} sl_lane_run;

struct sl_segment;

/* Reads whole batches from a segment file, either in place from a read-only
 * mapping of the file or through a reusable buffer filled with pread(). */
typedef struct sl_segment_cursor {
    int fd;
    const uint8_t *map; /* mapping of the file's first map_len bytes, or NULL */
    uint64_t map_len;
    uint64_t pos;   /* file position of the next batch */
    uint64_t limit; /* stop at this position (the caller raises it as the file grows) */
    sl_buf buf;     /* holds file bytes [buf_pos, buf_pos + buf.len) */
    uint64_t buf_pos;
    size_t chunk; /* current read size: starts small, doubles up to max_chunk */
    size_t max_chunk;
} sl_segment_cursor;

/* Starts a cursor over fd at pos; reads start at 16 KiB and grow to
 * max_chunk (0 = 1 MiB) while the reading stays sequential. */
void sl_segment_cursor_init(sl_segment_cursor *c, int fd, uint64_t pos, uint64_t limit,
                            size_t max_chunk);

/* The same over a segment, reading in place from its mapping where the file
 * is mapped (bytes beyond the mapping are read with pread). */
void sl_segment_cursor_init_seg(sl_segment_cursor *c, const struct sl_segment *s, uint64_t pos,
                                uint64_t limit, size_t max_chunk);

/* Next whole batch at c->pos: *p points at its bytes in the cursor's buffer
 * (valid until the next call) and info holds its header; the cursor moves
 * past it. verify also checks the CRC. Returns 0, SL_EEOF at the limit,
 * SL_EPARTIAL when the bytes before the limit cannot hold the batch (a torn
 * tail), SL_ECORRUPT (err says why) or SL_EIO. The cursor does not move on
 * error. */
int sl_segment_cursor_next(sl_segment_cursor *c, const uint8_t **p, sl_batch_info *info, int verify,
                           sl_error *err);

void sl_segment_cursor_free(sl_segment_cursor *c);

typedef struct sl_segment {
    int64_t base;       /* base offset, from the file name */
    char *stem;         /* "<dir>/<20 digits>", without extension */
    int fd;             /* .log */
    const uint8_t *map; /* read-only mapping of the .log (readers only), or NULL */
    uint64_t map_len;
    _Atomic uint64_t size;   /* bytes of whole, valid batches (published after write) */
    _Atomic int64_t next;    /* offset after the last batch */
    _Atomic int64_t max_ts;  /* largest batch timestamp; INT64_MIN when empty */
    uint64_t synced;         /* bytes known to be on disk */
    uint64_t last_index_pos; /* position of the last offset index entry */
    int64_t created_ms;      /* wall clock when it became active, for segment_ms */
    sl_index oidx;
    sl_index tidx;
    int lanes_fd;
    pthread_mutex_t runs_lock; /* guards runs/nruns against the appending writer */
    sl_lane_run *runs;
    size_t nruns, cap_runs;
    _Atomic bool lanes_dirty; /* runs not yet fdatasync'ed (set by the writer, cleared by sync) */
    bool active;
    bool deleted; /* unlink the files when the last reference goes */
    _Atomic int refs;
} sl_segment;

/* How a segment was checked on open. */
typedef enum sl_segment_mode {
    SL_SEG_CLOSED,       /* older segment: validate indexes, scan the tail */
    SL_SEG_ACTIVE,       /* the last segment, after a clean shutdown */
    SL_SEG_ACTIVE_DIRTY, /* the last segment after a crash: also rebuild the lane sidecar */
    SL_SEG_FULL,         /* scan and CRC-check every batch, rebuild all companions */
} sl_segment_mode;

/* What opening/recovering a segment found and did, for operators. */
typedef struct sl_segment_report {
    uint64_t truncated_at; /* UINT64_MAX when nothing was cut */
    uint64_t truncated_bytes;
    bool rebuilt_index;
    bool rebuilt_timeindex;
    bool rebuilt_lanes;
    char reason[SL_ERROR_MAX]; /* why the tail was cut */
} sl_segment_report;

/* Formats "<dir>/<base, 20 digits>" into out (size >= strlen(dir) + 22). */
void sl_segment_stem(char *out, size_t size, const char *dir, int64_t base);

/* Creates a new empty active segment at base. Indexes are preallocated for
 * max_index_entries; the .log is mapped for readers up to map_bytes (the
 * segment size: a mapping may extend past the end of the file, readers only
 * touch published bytes). Returns 0 or an SL_E… code with err (nothing created
 * is left open). */
int sl_segment_create(const char *dir, int64_t base, size_t max_index_entries, uint64_t map_bytes,
                      sl_segment **out, sl_error *err);

/* Opens an existing segment, recovering it as mode says: batches are checked
 * from the last good index entry (every batch for SL_SEG_FULL), the file is
 * truncated at the first bad one, companions are rebuilt when needed.
 * A segment left active (mode ACTIVE*) keeps writable indexes. Returns 0
 * (see report) or an SL_E… code with err. */
int sl_segment_open(const char *dir, int64_t base, sl_segment_mode mode, size_t max_index_entries,
                    uint32_t index_interval, uint64_t map_bytes, sl_segment **out,
                    sl_segment_report *report, sl_error *err);

/* Appends one finished batch whose baseOffset is already set; updates the
 * indexes every index_interval bytes and the lane runs. On a failed or
 * short write the file is cut back to its old size. Returns 0 or an SL_E…
 * code with err. */
int sl_segment_append(sl_segment *s, const sl_batch *b, uint32_t index_interval, sl_error *err);

/* Makes the active segment read-only: trims the indexes (and, with sync,
 * msyncs them and fdatasyncs the .log and sidecar). Rolling seals without
 * sync: the log syncs closed segments in sl_log_sync(). Returns 0 or an
 * SL_E… code with err. */
int sl_segment_seal(sl_segment *s, bool sync, sl_error *err);

/* fdatasyncs the .log (and the lane sidecar when it changed). */
int sl_segment_sync(sl_segment *s, sl_error *err);

/* Published size and next offset (acquire). */
uint64_t sl_segment_size(const sl_segment *s);
int64_t sl_segment_next_offset(const sl_segment *s);

/* Position of a batch at or before the one holding offset (from the sparse
 * index): scan forward from there. */
uint64_t sl_segment_seek(const sl_segment *s, int64_t offset);

/* Position to start scanning for the first batch whose max timestamp is at
 * least ts. */
uint64_t sl_segment_seek_time(const sl_segment *s, int64_t ts);

/* The lane of the batch at pos (copied to lane, SL_LANE_MAX + 1 bytes), the
 * position where the next run starts and that run's first offset
 * (UINT64_MAX and INT64_MAX when there is no next run yet). Returns 0 or
 * SL_ENOENT when no run covers pos. */
int sl_segment_lane_at(sl_segment *s, uint64_t pos, char *lane, uint64_t *run_end,
                       int64_t *run_end_offset);

/* Reference counting: readers hold a reference while they use the segment. */
void sl_segment_ref(sl_segment *s);
void sl_segment_unref(sl_segment *s);

/* Reads exactly len bytes at pos. Returns 0 or SL_EIO with err. */
int sl_segment_pread(const sl_segment *s, void *buf, size_t len, uint64_t pos, sl_error *err);

#endif
