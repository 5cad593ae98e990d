/*
 * tests/unit/testutil.h — helpers shared by the cmocka unit tests: temporary
 * directories and building batches of test records.
 */
#ifndef SL_TESTUTIL_H
#define SL_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/batch.h"
#include "core/log.h"

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
 * what core/segment.h says about it (independent of sl_log_verify()); when
 * names the situation in failure messages. */
void tu_check_companions(const char *dir, const char *when);

/* Size of a file, or -1. */
int64_t tu_file_size(const char *path);

#endif
