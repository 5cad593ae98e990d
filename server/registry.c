/*
 * server/registry.c — the tables of built-in connectors, and the look-up
 * that prefers a configured plugin's table.
 */
#include "core/bus/connector.h"

extern const sl_target_ops sl__target_file_ops;
extern const sl_target_ops sl__target_set_ops;
extern const sl_target_ops sl__target_http_ops;
extern const sl_target_ops sl__target_kafka_ops;
extern const sl_source_ops sl__source_file_ops;
extern const sl_source_ops sl__source_kafka_ops;

const sl_target_ops *sl_target_find(sl_target_kind kind)
{
    switch (kind) {
    case SL_TARGET_FILE:
        return &sl__target_file_ops;
    case SL_TARGET_SET:
        return &sl__target_set_ops;
    case SL_TARGET_HTTP:
        return &sl__target_http_ops;
    case SL_TARGET_KAFKA:
        return &sl__target_kafka_ops;
    case SL_TARGET_PLUGIN:
        return NULL;
    }
    return NULL;
}

const sl_target_ops *sl_target_ops_of(const sl_target_config *cfg)
{
    return cfg->plugin ? cfg->plugin : sl_target_find(cfg->kind);
}

const sl_source_ops *sl_source_find(sl_source_kind kind)
{
    switch (kind) {
    case SL_SOURCE_FILE:
        return &sl__source_file_ops;
    case SL_SOURCE_KAFKA:
        return &sl__source_kafka_ops;
    case SL_SOURCE_WEBHOOK:
    case SL_SOURCE_PLUGIN:
        return NULL;
    }
    return NULL;
}

const sl_source_ops *sl_source_ops_of(const sl_source_config *cfg)
{
    return cfg->plugin ? cfg->plugin : sl_source_find(cfg->kind);
}
