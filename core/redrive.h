/*
 * core/redrive.h — dead-letter redrive: moves the events of a dead-letter set
 * back into a live set (`sluice redrive DLQSET --to SET`,
 * POST /v1/sets/{dlq}/redrive).
 *
 * A rule with `dlq = "x"` appends the events it could not deliver to set x,
 * with the extension attributes sluiceerror, sluiceattempts, sluicerule,
 * sluicetarget and sluicefailedat (and sluicereplay for replayed events).
 * A redrive reads every partition of the dead-letter set from its redrive
 * position, strips those attributes (and sluiceset/sluicepartition/
 * sluiceoffset, should an event carry them), and publishes each event to the
 * destination set through the Databus with its lane and partition key, like
 * target.set does. The position of a partition moves only after the
 * destination's ack mode confirmed every event before it (after the fsync for
 * durable sets), so a crash in the middle repeats at most the unconfirmed
 * tail and never loses an event (at least once).
 *
 * The position belongs to the dead-letter set, not to the pair (dlq, to): an
 * event leaves the dead-letter set once, whichever set it was moved to (SQS's
 * redrive "moves" messages). It is kept per partition in a rule cursor file
 * (rules/cursor.h):
 *
 *     DATA/rules/~redrive/<dlq>/<partition>.cursor
 *
 * "~redrive" can never be a rule's name (rule names are [A-Za-z0-9._-]), so
 * it cannot collide with a rule's cursor. A partition without a position
 * starts at its oldest event kept; a damaged position file starts there again
 * (duplicates rather than losses), with a notice on stderr.
 *
 * Thread safety: redrives of the same dead-letter set are serialized in the
 * process (the second waits for the first); redrives of other sets run in
 * parallel. A redrive blocks its caller until it is done.
 */
#ifndef SL_REDRIVE_H
#define SL_REDRIVE_H

#include "core/buf.h"
#include "core/databus.h"
#include "core/err.h"
#include "core/set.h"

#include <stdint.h>

/* Stored in DATA/rules/<SL_REDRIVE_CURSOR_NAME>/<dlq>/<partition>.cursor. */
#define SL_REDRIVE_CURSOR_NAME "~redrive"

/* Moves up to max events (0: all there are now) from set dlq to set to.
 * Both sets must exist (neither is created). Events of dlq that are not valid
 * CloudEvents any more, or that the destination can never take (larger than
 * its max_event_bytes or its whole buffer), are skipped: the position passes
 * them, they are counted, and the first few are listed in the answer.
 *
 * On success returns 0 and appends to out_json
 *
 *     {"dlq":"…","to":"…","redriven":N,"skipped":K,
 *      "partitions":[{"partition":0,"from":A,"to":B},…],
 *      "skipped_events":[{"partition":P,"offset":O,"reason":"…"},…]}
 *
 * with one entry per partition of dlq (its position before and after).
 * Errors, with err naming the cause: SL_EINVAL for a bad set name or dlq ==
 * to; SL_ENOENT for a set that does not exist; SL_EFULL when the destination
 * stayed full too long; SL_ESHUTDOWN when the Databus is stopping; SL_EIO,
 * SL_ENOSPC or SL_ENOMEM otherwise. Events moved before an error stay moved
 * (their position is committed; err says how many); out_json is unchanged on
 * error. */
int sl_redrive(sl_sets *sets, sl_databus *bus, const char *data_dir, const char *dlq,
               const char *to, uint64_t max, sl_buf *out_json, sl_error *err);

/* What sl_redrive_hook() needs: the server's sets, bus and data folder. */
typedef struct sl_redrive_env {
    sl_sets *sets;
    sl_databus *bus;
    const char *data_dir;
} sl_redrive_env;

/* sl_redrive() with ctx an sl_redrive_env: fits sl_http_hooks.redrive for a
 * server without a config. */
int sl_redrive_hook(void *ctx, const char *dlq, const char *to, uint64_t max, sl_buf *out_json,
                    sl_error *err);

#endif
