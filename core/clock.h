/*
 * core/clock.h — wall-clock and monotonic time in the units sluice stores.
 */
#ifndef SL_CLOCK_H
#define SL_CLOCK_H

#include <stdint.h>

/* Milliseconds since the Unix epoch (event and batch timestamps). */
int64_t sl_clock_now_ms(void);

/* Monotonic nanoseconds, for measuring durations only. */
int64_t sl_clock_mono_ns(void);

#endif
