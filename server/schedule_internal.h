/*
 * server/schedule_internal.h — what server/schedule.c (the runtime) and
 * server/schedule_state.c (declarations, events, the state file) share.
 * Not an API: only server/schedule*.c include it.
 */
#ifndef SL_SCHEDULE_INTERNAL_H
#define SL_SCHEDULE_INTERNAL_H

#include "server/schedule.h"

/* Room for a fingerprint: the expression, a space, the zone. */
#define SL__SCHEDULE_FP_MAX (SL_SCHED_EXPR_MAX + SL_TZ_NAME_MAX + 32)

/* "cron(0 3 * * ? *) Europe/Paris": what a schedule's ticks depend on. */
void sl__schedule_fingerprint(const sl_sched *s, char out[SL__SCHEDULE_FP_MAX]);

/* DATA/schedules/state.json into path (size bytes); the folder when
 * file is false. */
void sl__schedule_state_path(const char *data_dir, bool file, char *path, size_t size);

/* Writes v[0..n) as the whole state file: a temporary file, fsync,
 * rename over state.json, fsync of the folder. Returns 0 or an SL_E… code
 * with err (the previous file stays). */
int sl__schedule_state_write(const char *data_dir, const sl_schedule_state *v, size_t n,
                             sl_error *err);

#endif
