/*
 * core/base/lane_name.h — the syntax of a lane name ("" for the base lane, or
 * [a-z0-9-]{1,32}), which the log store (a batch's lane header), the bus and
 * every front door check alike.
 */
#ifndef SL_LANE_NAME_H
#define SL_LANE_NAME_H

#include <stddef.h>

/* The longest lane name, in bytes. */
#define SL_LANE_MAX 32

/* Checks lane syntax: "" or [a-z0-9-]{1,32}. Returns 1 when valid. */
int sl_lane_valid(const char *lane, size_t len);

#endif
