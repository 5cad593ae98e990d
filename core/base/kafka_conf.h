/*
 * core/base/kafka_conf.h — what target.kafka and source.kafka share when
 * they configure librdkafka: setting properties from "name=value" lines
 * without ever quoting the value of a secret (passwords, keys, tokens) in a
 * message, and hiding such values in librdkafka's own log lines.
 */
#ifndef SL_KAFKA_CONF_H
#define SL_KAFKA_CONF_H

#include "core/base/err.h"

#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stddef.h>

/* Whether a property's value may be a secret. */
bool sl_kafka_sensitive(const char *name);

/* rd_kafka_conf_set(); on failure SL_EINVAL with err quoting librdkafka,
 * except for sensitive properties (whose message would quote the value). */
int sl_kafka_conf_set(rd_kafka_conf_t *conf, const char *name, const char *value, sl_error *err);

/* Splits a "name=value" property line: copies the name into name[0..cap).
 * Returns the value, or NULL with SL_EINVAL in err (never quoting what
 * follows '='). */
const char *sl_kafka_property_name(const char *line, char *name, size_t cap, sl_error *err);

/* Replaces in msg (NUL-terminated, edited in place) every value of the
 * sensitive properties among lines[0..n) with "***". */
void sl_kafka_redact(char *msg, char *const *lines, size_t n);

#endif
