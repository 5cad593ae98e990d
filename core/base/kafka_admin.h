/*
 * core/base/kafka_admin.h — the Kafka cluster a router's Kafka-backed sets
 * live on (server { kafka = { … } }): one description that the partition
 * stores (core/log/store_kafka.h), the set groups and the cursor topic
 * (core/bus/kgroup.h) all build their librdkafka clients from, and making
 * sure a topic exists with enough partitions.
 */
#ifndef SL_KAFKA_ADMIN_H
#define SL_KAFKA_ADMIN_H

#include "core/base/err.h"

#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sl_kafka_cluster {
    const char *brokers;      /* bootstrap.servers */
    const char *client_id;    /* client.id; NULL or "": "sluice" */
    char *const *props;       /* "name=value" librdkafka properties (security, SASL, …) */
    size_t nprops;
    const char *topic_prefix; /* "sluice." by default: a set's topic is PREFIX..NAME */
    const char *group_prefix; /* "sluice.set." by default: a set's group is PREFIX..NAME */
    int session_timeout_ms;   /* of the set groups; 0: 10000 */
    int delivery_timeout_ms;  /* durable sets: a record not acknowledged within it fails; 0: 30000 */
} sl_kafka_cluster;

/* A librdkafka configuration with the cluster's brokers, client id (with
 * suffix appended when not NULL: "sluice-orders-producer") and properties,
 * logging through slog. Returns it, or NULL with SL_EINVAL/SL_ENOMEM in err
 * (secret values never quoted). */
rd_kafka_conf_t *sl_kafka_cluster_conf(const sl_kafka_cluster *cl, const char *suffix,
                                       sl_error *err);

/* Makes sure topic exists: when missing, creates it (CreateTopics) with
 * partitions and replication (-1: the cluster's default) and the configs
 * ("name=value", NULL-terminated, may be NULL: e.g. "cleanup.policy=compact").
 * A cluster that cannot create topics (librdkafka's mock has no
 * CreateTopics) is said so in a warning, and the topic is looked up anyway
 * (a broker with auto.create.topics.enable makes it then). *actual gets the
 * partitions the topic has. Returns 0; SL_ENOENT when it does not exist and
 * cannot be made; SL_ETIMEDOUT when the cluster did not answer within
 * timeout_ms; SL_EINVAL for a bad configuration; with err. A topic with
 * fewer partitions than asked is not an error here (the caller decides). */
int sl_kafka_ensure_topic(const sl_kafka_cluster *cl, const char *topic, int32_t partitions,
                          int replication, const char *const *configs, int timeout_ms,
                          int32_t *actual, sl_error *err);

#endif
