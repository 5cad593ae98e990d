/*
 * connectors/source_file.h — source.file: lines of files, tailed, position
 * kept in the data dir. Its config struct and table (the keys are in
 * connectors/source_file.c).
 */
#ifndef SL_SOURCE_FILE_H
#define SL_SOURCE_FILE_H

#include "core/bus/connector.h"

#include <stdbool.h>
#include <stdint.h>

/* source.file { … } (sl_source_config.conf). */
typedef struct sl_source_file_conf {
    char *path; /* glob pattern, resolved against the config's folder */
    sl_source_parse parse;
    char *multiline;              /* ERE a line must match to start a new event; NULL: off */
    int64_t multiline_timeout_ms; /* a pending group is emitted after this quiet time; 1 s */
    uint64_t max_line;            /* bytes; default 256 KiB */
    bool split_long;              /* long_lines = "split" (default) or "skip" */
    int64_t poll_ms;              /* file check / glob rescan interval; default 250 ms */
    bool inotify;                 /* use inotify when it works; default true */
} sl_source_file_conf;

extern const sl_source_ops sl_source_file_ops;

#endif
