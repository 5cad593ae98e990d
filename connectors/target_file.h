/*
 * connectors/target_file.h — target.file: events appended as NDJSON lines
 * to a file, rotated by size. Its config struct and table (the keys are in
 * connectors/target_file.c).
 */
#ifndef SL_TARGET_FILE_H
#define SL_TARGET_FILE_H

#include "core/bus/connector.h"

#include <stdint.h>

/* target.file { … } (sl_target_config.conf). */
typedef struct sl_target_file_conf {
    char *path;            /* the NDJSON file, resolved against the config's folder */
    uint64_t rotate_bytes; /* rename to PATH.1 … past this size; 0 never */
    int64_t keep;          /* rotated files kept; default 5 */
} sl_target_file_conf;

extern const sl_target_ops sl_target_file_ops;

#endif
