/*
 * core/bus/waits.h — the long-poll wait: a registry of waiters, each
 * parked until a partition of an event set grows past a position or a
 * deadline passes, whichever comes first.
 *
 * A front door (the HTTP API's GET …/events?wait_ms=, later the Kafka
 * listener's fetch with max_wait_ms) parks a request here instead of on a
 * thread: the waiter is a struct the owner embeds in its request, and its
 * wake callback resumes the request (MHD_resume_connection() in http/).
 * The server feeds every append in (sl_waits_on_append(), from the
 * Databus's append hook); one timer thread per registry wakes waiters whose
 * deadline passed; sl_waits_stop() wakes everyone.
 *
 * Exactly one wake-up: a registered waiter is woken exactly once (by an
 * append past its position, by its deadline, or by sl_waits_stop()), unless
 * sl_waits_cancel() took it out first. It is unlinked before its wake
 * callback runs, so the callback may hand the waiter's memory back to its
 * owner.
 *
 * Callbacks run with the registry's lock held, on the thread that appended,
 * the timer thread or the thread calling sl_waits_stop(): they must be
 * short and must not call into the registry.
 */
#ifndef SL_WAITS_H
#define SL_WAITS_H

#include "core/base/err.h"
#include "core/bus/set.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct sl_waits sl_waits;
typedef struct sl_wait sl_wait;

/* A waiter's callback; w is the waiter (its data field finds the owner). */
typedef void sl_wait_fn(sl_wait *w);

/* One waiter, embedded in its owner's request and owned by it. Fill data,
 * wake and (if needed) park; sl_waits_add() fills the rest. */
struct sl_wait {
    void *data;       /* the owner's */
    sl_wait_fn *wake; /* the wake-up (required) */
    /* Called once w is registered, before any wake-up can reach it: the
     * place to suspend the request, so that a wake-up on another thread
     * never runs before the suspend. May be NULL. */
    sl_wait_fn *park;
    /* What w waits for (set by sl_waits_add(); read-only for the owner). */
    const sl_set *set;
    int32_t part;
    int64_t pos;         /* woken when the partition's end passes it (end > pos) */
    int64_t deadline_ns; /* sl_clock_mono_ns() time; woken at it at the latest */
    /* private to core/bus/waits.c */
    sl_wait *next, **prev;
};

/* Creates a registry and starts its timer thread. Returns 0 with *out
 * (release with sl_waits_free()), or SL_ENOMEM, or the thread's failure
 * with err ("start the long-poll timer: …"); nothing is left behind. */
int sl_waits_start(sl_waits **out, sl_error *err);

/* Registers w to wait until partition part of set ends past pos, or until
 * deadline_ns. The end is re-read under the registry's lock, so that an
 * append between the caller's read and this call is never missed: returns
 * false (w not registered, no callback called) when the end is already
 * past pos or the registry is stopping, and the caller goes on at once.
 * True: w->park was called and w->wake will be called exactly once. w must
 * stay valid until then (or until sl_waits_cancel() returns true). */
bool sl_waits_add(sl_waits *ws, sl_wait *w, const sl_set *set, int32_t part, int64_t pos,
                  int64_t deadline_ns);

/* Takes w out without waking it: true when it was still waiting (its wake
 * callback will not run), false when it was already woken (or never
 * registered: w zeroed). */
bool sl_waits_cancel(sl_waits *ws, sl_wait *w);

/* Wakes every waiter on (set, part) whose position end passes. Fits the
 * Databus's append hook (core/bus/databus.h), called with the partition's
 * new end offset. */
void sl_waits_on_append(sl_waits *ws, const sl_set *set, int32_t part, int64_t end);

/* Wakes every waiter, refuses new ones (sl_waits_add() returns false from
 * now on) and joins the timer thread. Frees nothing; safe to call again.
 * NULL is ignored. */
void sl_waits_stop(sl_waits *ws);

/* Stops the registry if it is not (sl_waits_stop()) and releases it. NULL
 * is ignored. */
void sl_waits_free(sl_waits *ws);

#endif
