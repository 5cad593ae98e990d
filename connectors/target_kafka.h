/*
 * connectors/target_kafka.h — target.kafka: records produced to an external
 * Kafka topic (librdkafka, idempotent). Its config struct and table (the
 * keys are in connectors/target_kafka.c).
 */
#ifndef SL_TARGET_KAFKA_H
#define SL_TARGET_KAFKA_H

#include "core/bus/connector.h"

#include <stddef.h>
#include <stdint.h>

/* target.kafka { … } (sl_target_config.conf). */
typedef struct sl_target_kafka_conf {
    char *brokers;     /* bootstrap.servers */
    char *topic;       /* template: {attribute} is replaced from the event */
    char *key;         /* template; NULL: partitionkey, else subject, else none */
    sl_http_body body; /* default binary (the CloudEvents Kafka binding) */
    char *compression; /* compression.type; NULL: zstd */
    char **headers;    /* "name: value" record headers */
    size_t nheaders;
    int64_t timeout_ms; /* message.timeout.ms; default 30 s */
    char **properties;  /* "name=value" lines passed to librdkafka as they are */
    size_t nproperties;
} sl_target_kafka_conf;

extern const sl_target_ops sl_target_kafka_ops;

#endif
