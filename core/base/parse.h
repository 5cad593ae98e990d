/*
 * core/base/parse.h — numbers with units in configuration values and
 * command-line options: durations and sizes.
 */
#ifndef SL_PARSE_H
#define SL_PARSE_H

#include <stdint.h>

/* Parses "7d", "12h", "30m", "10s", "250ms", or a plain number of ms.
 * Returns 0 or SL_EINVAL. */
int sl_parse_duration_ms(const char *s, int64_t *ms);

/* Parses "128MiB", "1GiB", "512KiB", "10MB", or a plain number of bytes.
 * Returns 0 or SL_EINVAL. */
int sl_parse_bytes(const char *s, uint64_t *bytes);

#endif
