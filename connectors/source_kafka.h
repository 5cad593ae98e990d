/*
 * connectors/source_kafka.h — what the source host (server/sources.c)
 * asks a source.kafka instance beyond core/bus/connector.h's table: its group
 * state, for GET /v1/sources, `sluice status` and /metrics.
 */
#ifndef SL_SOURCE_KAFKA_H
#define SL_SOURCE_KAFKA_H

#include <stddef.h>
#include <stdint.h>

/* The state of the instance impl (what its ops' open() made):
 * "joining"  no partition assigned since the start, or since a revocation
 *            or failed rebalance left none (unhealthy past a 10 s grace);
 * "running"  the group assigned this member its partitions (maybe none);
 * "failing"  every broker is down, or the consumer hit a fatal error.
 * *since_ms gets when that state began (wall clock, ms since the epoch) and
 * why[0..cap) a sentence saying why, "" when running. */
const char *sl_source_kafka_state(void *impl, int64_t *since_ms, char *why, size_t cap);

#endif
