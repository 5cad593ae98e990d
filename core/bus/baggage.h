/*
 * core/bus/baggage.h — reading one member of a W3C Baggage header (groundwork
 * for lanes, ISSUE 7: a lane can come from the `lane` member of `baggage`).
 *
 *     baggage-string = list-member *( OWS "," OWS list-member )
 *     list-member    = key OWS "=" OWS value *( OWS ";" OWS property )
 *     key            = token (RFC 9110)
 *     value          = *baggage-octet, percent-encoded UTF-8
 *
 * The header is parsed whole, so a malformed header is refused rather than
 * half read, and the limits of the spec are enforced: at most
 * SL_BAGGAGE_MAX_BYTES bytes and SL_BAGGAGE_MAX_MEMBERS members. Empty list
 * members (",,") are tolerated, as the spec asks of receivers. Nothing is
 * allocated.
 */
#ifndef SL_BAGGAGE_H
#define SL_BAGGAGE_H

#include "core/base/err.h"

#include <stddef.h>

#define SL_BAGGAGE_MAX_BYTES 8192
#define SL_BAGGAGE_MAX_MEMBERS 180

/* Finds member key in header[0..len) and writes its value, percent-decoded
 * and NUL-terminated, into out[0..cap) with its length in *out_len. Returns
 * 0; SL_ENOENT when the header has no such member; SL_EINVAL with err naming
 * the byte and the problem when the header is malformed (or over a limit, or
 * the value is not UTF-8 once decoded); SL_ETOOBIG when the value does not
 * fit in cap - 1 bytes. When key appears more than once the first wins. */
int sl_baggage_get(const char *header, size_t len, const char *key, char *out, size_t cap,
                   size_t *out_len, sl_error *err);

#endif
