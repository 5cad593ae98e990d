/*
 * connectors/source_kafka.h — source.kafka: its config struct and table
 * (the keys are in connectors/source_kafka.c), and what the source host
 * (server/sources.c) asks an instance beyond core/bus/connector.h's table:
 * its group state, for GET /v1/sources, `sluice status` and /metrics.
 */
#ifndef SL_SOURCE_KAFKA_H
#define SL_SOURCE_KAFKA_H

#include "core/bus/connector.h"

#include <stddef.h>
#include <stdint.h>

/* source.kafka { … } (sl_source_config.conf). */
typedef struct sl_source_kafka_conf {
    char *brokers;
    char **topics; /* names, or regexes starting with ^ (librdkafka's rule) */
    size_t ntopics;
    char *group;       /* NULL: sluice-NAME */
    char **properties; /* "name=value" librdkafka consumer properties */
    size_t nproperties;
} sl_source_kafka_conf;

extern const sl_source_ops sl_source_kafka_ops;

/* The state of the instance impl (what its ops' open() made):
 * "joining"  no partition assigned since the start, or since a revocation
 *            or failed rebalance left none (unhealthy past a 10 s grace);
 * "running"  the group assigned this member its partitions (maybe none);
 * "failing"  every broker is down, or the consumer hit a fatal error.
 * *since_ms gets when that state began (wall clock, ms since the epoch) and
 * why[0..cap) a sentence saying why, "" when running. */
const char *sl_source_kafka_state(void *impl, int64_t *since_ms, char *why, size_t cap);

#endif
