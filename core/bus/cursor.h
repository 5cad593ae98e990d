/*
 * core/bus/cursor.h — a rule's committed position in one partition, on disk.
 *
 * DATA/rules/<rule>/<set>/<partition>.cursor holds two 32-byte slots:
 *
 *   | bytes | field                                   |
 *   |-------|-----------------------------------------|
 *   | 0-3   | magic "SLC1"                            |
 *   | 4-11  | sequence number, u64 little-endian      |
 *   | 12-19 | next offset to deliver, i64 LE          |
 *   | 20-23 | CRC-32C of bytes 0-19                   |
 *   | 24-31 | zero                                    |
 *
 * Commits write the older slot in place, so a torn write leaves the other
 * slot's (earlier) position readable: after any crash the cursor is at or
 * before the last commit, never past it, and at-least-once holds. The file
 * is fdatasync'ed at most once per sync interval (and on close); a process
 * crash loses nothing since the page cache survives it, and power loss
 * only moves the cursor back by that interval (duplicates, never gaps).
 */
#ifndef SL_CURSOR_H
#define SL_CURSOR_H

#include "core/base/err.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct sl_cursor {
    int fd;
    uint64_t seq;
    int64_t offset;    /* the committed position */
    int64_t synced_ns; /* monotonic time of the last fdatasync */
    bool dirty;        /* written since the last fdatasync */
} sl_cursor;

/* Opens (creating the folders and the file) the cursor of rule/set/partition
 * under data_dir. *found says whether a committed position was there; if not
 * the caller commits its starting point. Returns 0; SL_ECORRUPT (the cursor
 * stays open, *found false) when the file holds bytes but no valid slot, so
 * that the caller does not take a damaged cursor for a new rule; or another
 * SL_E… code with err (nothing left open). */
int sl_cursor_open(sl_cursor *c, const char *data_dir, const char *rule, const char *set,
                   int32_t partition, bool *found, sl_error *err);

/* Commits offset; fdatasyncs when sync_interval_ns passed since the last
 * one (0: every commit). Returns 0 or SL_EIO/SL_ENOSPC with err. */
int sl_cursor_commit(sl_cursor *c, int64_t offset, int64_t sync_interval_ns, sl_error *err);

/* Syncs if dirty and closes. */
void sl_cursor_close(sl_cursor *c);

#endif
