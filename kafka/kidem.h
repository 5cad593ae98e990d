/*
 * kafka/kidem.h — idempotent producers' sequence checks (kidem.c), used by
 * kproduce.c. Not for use outside kafka/.
 */
#ifndef SL_KIDEM_H
#define SL_KIDEM_H

#include "kafka/kafka_internal.h"

/* What a partition's batches say about their producer. */
typedef struct sl_kidem_batch {
    int64_t pid;  /* -1: not an idempotent producer's */
    int16_t epoch;
    int32_t first, last; /* sequence numbers of the first and last record */
} sl_kidem_batch;

/* Checks b for (set, part). Returns an error code to answer with, or NONE:
 * then either *dup_offset >= 0 (a batch already stored there: answer with
 * it, store nothing) or the state is held locked until sl__kidem_end(),
 * which the caller calls right after publishing, with the first offset
 * stored or -1 when the publish was refused. */
int16_t sl__kidem_begin(sl_kafka *k, const char *set, int32_t part, const sl_kidem_batch *b,
                        int64_t *dup_offset);
void sl__kidem_end(sl_kafka *k, const char *set, int32_t part, const sl_kidem_batch *b,
                   int64_t offset);
/* A durable publish of b failed after sl__kidem_end(): forget it. Any thread. */
void sl__kidem_failed(sl_kafka *k, const char *set, int32_t part, const sl_kidem_batch *b);

#endif
