/*
 * core/base/kafka_conf.h — what target.kafka and source.kafka share when
 * they configure librdkafka: setting properties from "name=value" lines
 * without ever quoting the value of a secret (passwords, keys, tokens) in a
 * message, hiding such values in librdkafka's own messages, making the
 * client, and gathering the problems `sluice check` reports.
 */
#ifndef SL_KAFKA_CONF_H
#define SL_KAFKA_CONF_H

#include "core/base/buf.h"
#include "core/base/err.h"

#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stddef.h>

/* Whether a property's value may be a secret. */
bool sl_kafka_sensitive(const char *name);

/* rd_kafka_conf_set(); on failure SL_EINVAL with err quoting librdkafka,
 * except for sensitive properties (whose message would quote the value). */
int sl_kafka_conf_set(rd_kafka_conf_t *conf, const char *name, const char *value, sl_error *err);

/* sl_kafka_conf_set() of a number. */
int sl_kafka_conf_num(rd_kafka_conf_t *conf, const char *name, long long value, sl_error *err);

/* Splits a "name=value" property line: copies the name into name[0..cap).
 * Returns the value, or NULL with SL_EINVAL in err (never quoting what
 * follows '='). */
const char *sl_kafka_property_name(const char *line, char *name, size_t cap, sl_error *err);

/* Applies one "name=value" property line with sl_kafka_conf_set(). A name
 * in reserved (NULL-terminated; NULL for none) is refused with "property
 * NAME: sluice sets it (WHY)". Returns 0, or SL_EINVAL with err. */
int sl_kafka_conf_line(rd_kafka_conf_t *conf, const char *line, const char *const *reserved,
                       const char *why, sl_error *err);

/* The value of property name among the lines[0..n) ("name=value"), or NULL
 * when no line sets it. */
const char *sl_kafka_property(char *const *lines, size_t n, const char *name);

/* Replaces in msg (NUL-terminated, edited in place) every value of the
 * sensitive properties among lines[0..n) with "***". */
void sl_kafka_redact(char *msg, char *const *lines, size_t n);

/* rd_kafka_new(type, conf). Returns the client, which owns conf; or NULL
 * with conf destroyed and SL_EINVAL in err: "WHO: " (unless who is NULL)
 * and librdkafka's message, the sensitive values among lines[0..n) hidden. */
rd_kafka_t *sl_kafka_new(rd_kafka_type_t type, rd_kafka_conf_t *conf, char *const *lines, size_t n,
                         const char *who, sl_error *err);

/* A log callback that drops every line (rd_kafka_conf_set_log_cb()), for the
 * scratch clients `sluice check` makes. */
void sl_kafka_quiet_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf);

/* Appends msg to the problems gathered in b, "; " between two. */
void sl_kafka_problem(sl_buf *b, const char *msg);

/* Ends a check that gathered its problems in b, and frees b. Returns 0 (no
 * problem), SL_ENOMEM (oom: "out of memory") or SL_EINVAL with the problems
 * in err. */
int sl_kafka_problems_end(sl_buf *b, bool oom, sl_error *err);

#endif
