/*
 * connectors/source_file_internal.h — what the files of source.file share:
 * the instance and file structs, and the functions one file calls in the
 * other. Not a public interface (core/bus/connector.h is the source's).
 *
 *   source_file.c        the instance: finding and following files (glob,
 *                        inotify, rotation, truncation), positions, commits
 *   source_file_lines.c  read bytes → lines → events: long lines, multi-line
 *                        groups, parse = json / text / Lua (run by the host), ids
 */
#ifndef SL_SOURCE_FILE_INTERNAL_H
#define SL_SOURCE_FILE_INTERNAL_H

#include "core/base/buf.h"
#include "connectors/source_file.h"
#include "core/bus/connector.h"

#include <pthread.h>
#include <regex.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct sf_pos sf_pos;     /* a position of a file not followed (source_file.c) */
typedef struct sf_watch sf_watch; /* a watched directory (source_file.c) */

/* One file being tailed. */
typedef struct sf_file {
    char *path;
    char *src; /* CloudEvent source of its lines: "file://PATH" (NULL: cfg->source) */
    dev_t dev;
    ino_t ino;
    int fd;             /* -1 when closed (not opened yet, or recycled) */
    uint64_t off;       /* the next byte read(2) gives */
    uint64_t done;      /* bytes before it became events or were dropped */
    uint64_t committed; /* acknowledged: what the positions file says */
    uint32_t fp;        /* CRC-32C of the first fp_len bytes */
    uint32_t fp_len;
    uint64_t gen;    /* its generation: a new one whenever it is read from 0 as new content */
    sl_buf line;     /* the current line so far (at most max_line bytes) */
    bool skipping;   /* dropping the rest of a line longer than max_line */
    bool split_cont; /* pieces of the current line were emitted already */
    /* multiline: the pending event's lines, joined with '\n' */
    sl_buf group;
    bool grouping;
    uint64_t group_start; /* where its first line starts */
    uint64_t group_end;   /* where its last line ends */
    int64_t group_ms;     /* when a line was last added */
    bool gone;            /* renamed away or deleted: drain, then forget */
    bool deleted;         /* st_nlink == 0 seen: no tombstone when it is forgotten */
    int64_t gone_ms;
    int64_t data_ms; /* last time a read gave bytes */
    int64_t used_ms; /* last time it was read: the oldest is closed first */
    bool seen;       /* found by the current scan */
    bool want;       /* has (or may have) unread bytes: keep or get a descriptor */
} sf_file;

typedef struct sf {
    const sl_source_config *cfg;
    const sl_source_file_conf *conf; /* cfg->conf */
    const sl_source_host *host;
    pthread_t thread;
    bool started;
    int wake_fd;            /* eventfd: stop() wakes the thread's poll(2) */
    int ino_fd;             /* inotify, or -1: polling only */
    atomic_bool halt;       /* stop() was called, or flush() said SL_ESHUTDOWN */
    atomic_bool stop_asked; /* stop() was called */
    regex_t re;
    bool has_re;
    const char *type;
    sf_file **files;
    size_t nfiles, cap;
    size_t nopen;
    sf_pos *stored; /* positions of files not followed: from the last run, tombstones */
    size_t nstored;
    sl_buf rebuf; /* a NUL-terminated copy of a line for regexec */
    sf_watch *watches;
    size_t nwatches;
    char *rbuf;    /* READ_BUF bytes */
    sl_buf posbuf; /* the positions file being written */
    char *pos_path, *pos_tmp;
    char *dir; /* the pattern's literal folder (for health) */
    size_t batch_events, batch_bytes;
    bool dirty;        /* positions to write even without a batch */
    uint64_t next_gen; /* the next file generation (kept in the positions file) */
    bool gen_unsaved;  /* a generation was given that the positions file does not hold yet */
    sl_buf evbuf;      /* an event line with the id it lacked */
    int64_t synced_ms;
    int64_t now;  /* monotonic ms, refreshed per round */
    bool initial; /* the first scan of this instance */
    bool first;   /* no positions file existed: the source's first start, `start` applies */
    /* counters (read by metrics() from other threads) */
    atomic_uint_fast64_t n_files, n_lines, n_bytes, n_rotations, n_truncations, n_parse_errors,
        n_skipped, n_refused;
    pthread_mutex_t mu; /* guards health */
    char health[256];   /* "" when healthy */
} sf;

/* ---- source_file.c ---------------------------------------------------------------- */

/* Writes every file's committed position (tmp + rename; fdatasync when
 * sync, else at most once a second). On failure it is logged and the old
 * file stays. */
void sl__source_file_save_positions(sf *s, bool sync);

/* Whether the thread must stop reading (stop(), or flush() said SL_ESHUTDOWN). */
bool sl__source_file_halted(sf *s);

/* Publishes the batch and commits the positions when the batch is full. */
void sl__source_file_maybe_flush(sf *s);

/* ---- source_file_lines.c ---------------------------------------------------------- */

/* Splits the n bytes just read at file offset base of f into lines, which
 * become events of the batch (flushed when full). Stops early when the
 * server stops. */
void sl__source_file_consume(sf *s, sf_file *f, const char *data, size_t n, uint64_t base);

/* A gone file is done with: what it held back (a last line without '\n',
 * a multi-line group) becomes events. */
void sl__source_file_drain_held(sf *s, sf_file *f);

/* Emits the pending multi-line group of f (if any). */
void sl__source_file_group_emit(sf *s, sf_file *f);

/* Where a restart must read f again from: the start of its pending group,
 * else what became events. */
uint64_t sl__source_file_commit_pos(const sf_file *f);

#endif
