/*
 * core/log/index.h — a memory-mapped file of fixed-size entries, preallocated to
 * its maximum size while a segment is active and trimmed when it closes.
 * Backs the offset index (8-byte entries) and the time index (12-byte
 * entries) of each log segment; the entry meaning lives in core/log/segment.c.
 *
 * One writer appends; readers read entries below sl_index_count() without
 * locks: an entry is fully written before the count that covers it is
 * published.
 */
#ifndef SL_INDEX_H
#define SL_INDEX_H

#include "core/base/err.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sl_index {
    int fd;
    uint8_t *map;
    size_t map_len; /* bytes mapped (capacity) */
    size_t entry_size;
    size_t max_entries; /* capacity in entries */
    _Atomic size_t count;
    int writable;
    char *path;
} sl_index;

/* Opens (creating when writable) path. The entries already in the file are
 * counted from its size, ignoring a partial trailing entry (the caller
 * validates their contents). A writable index is grown to max_entries.
 * Returns 0 or an SL_E… code with err; on error nothing is left open. */
int sl_index_open(sl_index *ix, const char *path, size_t entry_size, size_t max_entries,
                  int writable, sl_error *err);

/* Pointer to entry i (< count). */
uint8_t *sl_index_entry(const sl_index *ix, size_t i);

/* Number of published entries (acquire). */
size_t sl_index_count(const sl_index *ix);

/* Appends one entry. Returns 0 or SL_ENOSPC when the index is full. */
int sl_index_append(sl_index *ix, const void *entry);

/* Forgets entries from n on (n <= count); zeroes them in the file. */
void sl_index_truncate(sl_index *ix, size_t n);

/* Trims the file to the used entries; the index stays readable but no
 * longer writable. Dirty pages reach the disk with the kernel's writeback
 * (or sl_index_sync()). Returns 0 or SL_EIO with err. */
int sl_index_seal(sl_index *ix, sl_error *err);

/* msync()s the used entries. Returns 0 or SL_EIO. */
int sl_index_sync(sl_index *ix, sl_error *err);

/* Unmaps and closes; trims the file first when it is still writable. */
void sl_index_close(sl_index *ix);

#endif
