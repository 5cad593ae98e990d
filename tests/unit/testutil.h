/*
 * tests/unit/testutil.h — helpers shared by the cmocka unit tests: temporary
 * directories, building batches of test records, and reading what a
 * partition's files hold straight from disk.
 */
#ifndef SL_TESTUTIL_H
#define SL_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/log/batch.h"
#include "core/log/log.h"
#include "core/log/store.h"

/* The embedded log behind partition p of an event set (core/bus/set.h), for
 * tests that look under the store interface. */
#define TU_LOG(set, p) sl_store_log(&(set)->parts[(p)])

/* A fresh directory under $TMPDIR (or /tmp); caller frees with tu_rmdir(). */
char *tu_tmpdir(void);

/* Removes dir recursively and frees the string. */
void tu_rmdir(char *dir);

/* Value of record number i: "{\"n\":i,\"pad\":\"xxx…\"}" padded to about
 * size bytes; written into buf (room for size + 64), returns its length. */
size_t tu_value(char *buf, size_t size, int64_t i);

/* Appends records [first, first + count) of about value_size bytes each, in
 * batches of per_batch, with timestamp ts0 + i and the given lane/codec;
 * asserts every append succeeds and offsets are consecutive. */
void tu_append(sl_log *log, int64_t first, int64_t count, int per_batch, size_t value_size,
               int64_t ts0, const char *lane, sl_codec codec);

/* Reads every record from offset with lane filter (NULL = all) until EEOF;
 * asserts offsets increase and each value matches tu_value(); returns the
 * number read. */
int64_t tu_read_all(sl_log *log, int64_t offset, const char *lane, size_t value_size);

/* A small config: segment_bytes seg, index interval 4096, no retention. */
sl_log_config tu_config(uint64_t seg);

/* The whole file (fails the test when it cannot be read); caller frees. */
uint8_t *tu_read_file(const char *path, size_t *len);

/* Checks, for every segment of the closed log in dir, that the .log holds
 * only whole valid batches and that .index, .timeindex and .lanes say exactly
 * what core/log/segment.h says about it (independent of sl_log_verify()); when
 * names the situation in failure messages. */
void tu_check_companions(const char *dir, const char *when);

/* Bytes placed so that they end exactly at a PROT_NONE page, for parsers
 * that must never read past their input (picohttpparser's trick): a
 * one-byte over-read crashes the test. Start from {0}; reusable. */
typedef struct tu_guard {
    char *map;
    size_t size; /* readable bytes */
    size_t page;
} tu_guard;

/* Copies n bytes of s to end at the guard page; returns where they start
 * (valid until the next call on g). Fails the test when mapping fails. */
const char *tu_guard_put(tu_guard *g, const void *s, size_t n);

/* Unmaps g (a zeroed g is fine); g is reusable after. */
void tu_guard_free(tu_guard *g);

/* Size of a file, or -1. */
int64_t tu_file_size(const char *path);

/* ---- the partition log tests (test_log.c, test_log_read.c) ---------------- */

/* SLUICE_SOAK=N multiplies the sizes of the bigger tests: N when it is more
 * than 1, else 1. */
int64_t tu_soak(void);

/* The next number of a fixed xorshift sequence: the same numbers in every
 * run of a test binary, drawn by its tests in the order they run. */
uint64_t tu_rng(void);

/* cmocka setup and teardown: each test gets a fresh tu_tmpdir() (a char *)
 * in *state, removed with tu_rmdir() even when it fails. Both return 0. */
int tu_tmp_setup(void **state);
int tu_tmp_teardown(void **state);

/* Opens the log in dir, creating it and its parents when missing; fails the
 * test on error. Caller closes with sl_log_close(). */
sl_log *tu_open_log(const char *dir, const sl_log_config *cfg);

/* The path DIR/BASE.EXT of a segment file (BASE as 20 digits) into out. */
void tu_seg_path(char *out, size_t size, const char *dir, int64_t base, const char *ext);

/* Whether the segment file DIR/BASE.EXT exists. */
int tu_seg_exists(const char *dir, int64_t base, const char *ext);

/* The whole file, with room for one more byte after it (caller frees);
 * NULL when it cannot be opened. */
uint8_t *tu_slurp(const char *path, size_t *len);

/* One batch of a partition, read straight from disk. */
typedef struct tu_dbatch {
    int64_t base;
    int32_t lod, count; /* last offset delta, records */
    int64_t max_ts;
    int codec;
    char lane[SL_LANE_MAX + 1];
    uint64_t pos, size; /* where it is in its .log */
    size_t seg;         /* index into tu_disk.segs */
} tu_dbatch;

/* One segment (.log file) of a partition. */
typedef struct tu_dseg {
    int64_t base;
    uint64_t size;
} tu_dseg;

/* What the files of a partition hold; filled by tu_disk_scan(), released
 * with tu_disk_free(). */
typedef struct tu_disk {
    tu_dseg *segs; /* by base offset */
    size_t nsegs;
    tu_dbatch *b; /* in offset order */
    size_t nb;
} tu_disk;

/* Fills d from the *.log files of dir (asserting their names are 20 digits),
 * checking every batch's CRC, that each segment starts with the batch its
 * name says and that offsets continue from one batch to the next. */
void tu_disk_scan(const char *dir, tu_disk *d);

/* Frees what tu_disk_scan() allocated and zeroes d. */
void tu_disk_free(tu_disk *d);

/* The size of all the .log files of d. */
uint64_t tu_disk_bytes(const tu_disk *d);

/* The size of all the .log files of dir, scanned (so checked) with
 * tu_disk_scan(). */
uint64_t tu_file_sum(const char *dir);

/* Appends records [first, first + n) with values tu_value(i, vsize), key
 * "k<i%7>", timestamps ts[i - first] (or ts0 + i when ts is NULL) and lane,
 * as one batch built with b; asserts it lands at first. */
void tu_append_batch(sl_log *log, sl_batch_builder *b, int64_t first, int n, size_t vsize,
                     const int64_t *ts, int64_t ts0, const char *lane);

/* Asserts that the .lanes sidecar of each segment of d holds exactly one
 * entry per run of batches of one lane: {rel, pos, len, lane, zeros}. */
void tu_check_sidecars(const char *dir, const tu_disk *d);

#endif
