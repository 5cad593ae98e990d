/*
 * core/bus/redrive.h — dead-letter redrive: moves the events of a dead-letter set
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
 * target.set does. The position of a partition moves only after every event
 * before it is on disk in the destination, whatever the destination's ack
 * mode: after the fsync that completes a durable publish, and for an
 * ack = "buffer" set (whose publish returns once the events are queued in
 * memory) after the Databus writer appended them and the redrive synced the
 * partition itself. A crash in the middle therefore repeats at most the
 * unconfirmed tail and never loses an event (at least once). When a chunk is
 * larger than a whole partition buffer of the destination, its events go one
 * at a time and the position moves after each one.
 *
 * The position belongs to the dead-letter set, not to the pair (dlq, to): an
 * event leaves the dead-letter set once, whichever set it was moved to (SQS's
 * redrive "moves" messages). It is kept per partition in a rule cursor file
 * (core/bus/cursor.h):
 *
 *     DATA/rules/~redrive/<dlq>/<partition>.cursor
 *
 * "~redrive" can never be a rule's name (rule names are [A-Za-z0-9._-]), so
 * it cannot collide with a rule's cursor. A partition without a position
 * starts at its oldest event kept; a damaged position file starts there again
 * (duplicates rather than losses), with a notice on stderr. A position past
 * the partition's end (the partition lost an unsynced tail in a crash, and
 * new dead letters will reuse those offsets) is moved back to the end and
 * committed at once, with a notice on stderr; so is a position before the
 * oldest event kept (retention deleted events not redriven yet).
 *
 * Thread safety: one redrive of a dead-letter set at a time in the process:
 * a second one while the first runs fails at once with SL_EDEFERRED (HTTP
 * 409); redrives of other sets run in parallel. A redrive blocks its caller
 * until it is done (the HTTP API runs it on its own thread), or until the
 * stop flag set with sl_redrive_set_stop() is raised.
 */
#ifndef SL_REDRIVE_H
#define SL_REDRIVE_H

#include "core/base/buf.h"
#include "core/bus/databus.h"
#include "core/base/err.h"
#include "core/bus/lanes.h"
#include "core/bus/set.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Stored in DATA/rules/<SL_REDRIVE_CURSOR_NAME>/<dlq>/<partition>.cursor. */
#define SL_REDRIVE_CURSOR_NAME "~redrive"

/* Moves up to max events (0: all there are now) from set dlq to set to.
 * Both sets must exist (neither is created). Events of dlq that are not valid
 * CloudEvents any more, whose lane lanes does not admit (dropped or unknown
 * since; lanes NULL: every lane), whose stored lane is longer than
 * SL_EVENT_LANE_MAX,
 * or that the destination can never take (larger than its max_event_bytes or
 * its whole buffer), are skipped: the position passes them, they are
 * counted, and the first few are listed in the answer.
 *
 * On success returns 0 and appends to out_json
 *
 *     {"dlq":"…","to":"…","redriven":N,"skipped":K,
 *      "partitions":[{"partition":0,"from":A,"to":B},…],
 *      "skipped_events":[{"partition":P,"offset":O,"reason":"…"},…]}
 *
 * with one entry per partition of dlq (its position before and after).
 * Errors, with err naming the cause: SL_EINVAL for a bad set name or dlq ==
 * to; SL_ENOENT for a set that does not exist; SL_EDEFERRED when a redrive of
 * dlq is running already (nothing done); SL_EFULL when the destination
 * stayed full too long; SL_ESHUTDOWN when the Databus is stopping or the
 * stop flag (sl_redrive_set_stop()) was raised; SL_EIO when the destination
 * did not write buffered events in time; SL_EIO, SL_ENOSPC or SL_ENOMEM
 * otherwise. Events moved before an error stay moved
 * (their position is committed; err says how many); out_json is unchanged on
 * error. */
int sl_redrive(sl_sets *sets, sl_databus *bus, sl_lanes *lanes, const char *data_dir,
               const char *dlq, const char *to, uint64_t max, sl_buf *out_json, sl_error *err);

/* Gives the redrives that the calling thread runs from now on a stop flag
 * (NULL: none, the default). They check it between chunks (at most 256
 * events or 1 MiB) and while the destination is full, and stop with
 * SL_ESHUTDOWN once it is true; events moved before stay moved and the
 * chunk under way is finished first, so nothing is published twice. The
 * flag must outlive those redrives. The HTTP API passes its server's
 * stopping flag, so that a redrive ends promptly when the server stops. */
void sl_redrive_set_stop(const _Atomic bool *stop);

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
