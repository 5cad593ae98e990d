/*
 * core/bus/record_event.h — a stored record as the event rules see.
 *
 * Most records of a set are CloudEvents in the Kafka binding's structured
 * mode: every ingest path but the Kafka listener stores the event JSON as the
 * value with the header content-type: application/cloudevents+json
 * (segments written before that header existed have none, but their values
 * are CloudEvent objects with a specversion). A Kafka client's record keeps
 * its own bytes, and is one of:
 *   - structured mode: content-type application/cloudevents+json (any
 *     parameters), the value a CloudEvent: the event as it is;
 *   - binary mode: ce_specversion and the other ce_* headers carry the
 *     attributes, content-type the datacontenttype, the value the data
 *     (JSON data kept as JSON when the content type is JSON and the value
 *     parses; other text as a string; bytes that are not UTF-8 as
 *     data_base64);
 *   - anything else: an event of the default shape (docs/kafka-protocol.md,
 *     as source.kafka derives them): specversion "1.0", id
 *     "SET-PARTITION-OFFSET", source "kafka://sluice/SET", type
 *     "sluice.kafka.record", time the record's timestamp, subject the key
 *     (when it is UTF-8), partitionkey the key, data the value (JSON when it
 *     parses as JSON, else a string, else data_base64), and lane from the
 *     lane header.
 * The stored bytes never change; only the event handed to rules is built.
 */
#ifndef SL_RECORD_EVENT_H
#define SL_RECORD_EVENT_H

#include "core/base/buf.h"
#include "core/base/err.h"
#include "core/log/batch.h"

#include <stdint.h>

/* The type of a plain record's event. */
#define SL_RECORD_PLAIN_TYPE "sluice.kafka.record"

typedef enum sl_record_kind {
    SL_RECORD_STRUCTURED, /* the value is the CloudEvent */
    SL_RECORD_BINARY,     /* ce_* headers + data */
    SL_RECORD_PLAIN,      /* anything else: the default shape */
} sl_record_kind;

/* Which of the three rec is (from its headers; for a record without a
 * content-type or ce_specversion header, a value that starts as a JSON object
 * holding "specversion" is structured). */
sl_record_kind sl_record_kind_of(const sl_record *rec);

/* Appends the event of rec as rules get it, decorated as
 * sl_event_decorate() does (sluiceset, sluicepartition, sluiceoffset from
 * set, partition and rec->offset). Returns 0, SL_EINVAL when a structured
 * record's value is not a JSON object or a binary record lacks a required
 * attribute (err says which), or SL_ENOMEM; out is unchanged on error. */
int sl_record_event(const sl_record *rec, const char *set, int32_t partition, sl_buf *out,
                    sl_error *err);

/* The value of header name (exact, case-sensitive) of rec: true with
 * *v and *vlen (NULL/0 for a null value) when rec has it (the first one). */
bool sl_record_header(const sl_record *rec, const char *name, const uint8_t **v, size_t *vlen);

#endif
