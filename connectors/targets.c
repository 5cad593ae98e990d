/*
 * connectors/targets.c — the table of built-in targets.
 */
#include "core/connector.h"

extern const sl_target_ops sl__target_file_ops;
extern const sl_target_ops sl__target_set_ops;
extern const sl_target_ops sl__target_http_ops;
extern const sl_target_ops sl__target_kafka_ops;

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
    }
    return NULL;
}
