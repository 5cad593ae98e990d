/*
 * agent/agent_spool.h — the Databus agent's local disk queue: one file per
 * batch that could not go upstream, named by the batch's sequence number so
 * that `ls` (and the agent at start) sees them oldest first.
 *
 * File DIR/<20-digit seq>.spool, all integers big-endian:
 *
 *   off  size  field
 *     0     8  magic "SLSPOOL1"
 *     8     4  crc     CRC-32C of bytes 12 .. end of file
 *    12     4  count   events in the body
 *    16     4  body    length of the body in bytes
 *    20     1  setlen  1..128
 *    21     1  lanelen 0..32 (0 = base lane)
 *    22     …  set, lane, then the body: NDJSON, one event per line, as it
 *                is POSTed upstream
 *
 * A file is written as <seq>.tmp, fdatasync'ed, renamed and the directory
 * synced: a crash leaves either no .spool file or a complete one (.tmp files
 * are removed at start). A file whose CRC or lengths are wrong is moved to
 * DIR/corrupt/ and never sent. DIR must be a directory owned by the agent's
 * user with mode 0700 (group and others have no access).
 */
#ifndef SL_AGENT_SPOOL_H
#define SL_AGENT_SPOOL_H

#include "core/base/buf.h"
#include "core/base/err.h"

#include <stddef.h>
#include <stdint.h>

#define SL_SPOOL_HEADER 22

/* What a spool file's header says. */
typedef struct sl_spool_hdr {
    uint64_t seq;
    char set[129];
    char lane[33];
    uint32_t count;
    uint64_t file_bytes; /* size of the whole file */
} sl_spool_hdr;

/* Creates dir (mode 0700, parents included) and removes leftover .tmp
 * files. Refuses (SL_EINVAL, err says why) a dir that is not a real
 * directory (a symlink included), is not owned by getuid(), or gives group
 * or others any access. Returns 0 or an error code with err set. */
int sl__spool_prepare(const char *dir, sl_error *err);

/* Writes one batch as DIR/<seq>.spool, durably (see above). On success
 * *file_bytes is the file's size. On error nothing is left behind (the .tmp
 * is removed) and err says why. */
int sl__spool_write(const char *dir, uint64_t seq, const char *set, const char *lane,
                    uint32_t count, const void *body, size_t len, uint64_t *file_bytes,
                    sl_error *err);

/* Reads and checks DIR/<seq>.spool: fills *h and appends the body to *body
 * (when body is non-NULL). Returns 0, SL_ECORRUPT for a damaged file, or an
 * I/O code; err says why. */
int sl__spool_read(const char *dir, uint64_t seq, sl_spool_hdr *h, sl_buf *body, sl_error *err);

/* Lists the .spool files of dir in sequence order: *out becomes a malloc'ed
 * array of *n sequence numbers (caller frees; NULL when none). Returns 0 or
 * an error code. */
int sl__spool_list(const char *dir, uint64_t **out, size_t *n, sl_error *err);

/* Moves DIR/<seq>.spool into DIR/<sub>/ (created when missing), e.g. "corrupt"
 * or "rejected", never replacing a file there: when <seq>.spool exists in
 * DIR/<sub>/ (an earlier run's), the name gets a suffix, <seq>-N.spool.
 * Returns 0 or an error code (the file then stays where it was, or, when
 * only the unlink failed, is in both places). */
int sl__spool_set_aside(const char *dir, uint64_t seq, const char *sub, sl_error *err);

/* Removes DIR/<seq>.spool. Returns 0 or an error code. */
int sl__spool_remove(const char *dir, uint64_t seq, sl_error *err);

#endif
