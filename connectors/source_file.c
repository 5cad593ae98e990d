/*
 * connectors/source_file.c — source.file: lines of files, tailed like
 * `tail -F` (docs/sources.md).
 *
 * One thread per instance. It finds files with glob(3) (again on every
 * directory event and every poll interval, so new files are picked up),
 * reads each with a bounded buffer, turns lines into events (parse = "json",
 * "text" or a Lua function; optional multi-line grouping) and hands them to
 * the host, which publishes them through the Databus. A file is known by
 * (dev, inode) plus a fingerprint (CRC-32C of its first bytes, up to 256), so
 * that a reused inode is not mistaken for the file it replaced. This file
 * finds, follows and reads the files and keeps their positions; lines become
 * events in source_file_lines.c (source_file_internal.h: what they share).
 *
 * Positions: every file has the offset up to which its bytes became events
 * (or were dropped on purpose), and the committed offset, which moves to it
 * only after host->flush() returned 0 (the Databus acknowledged the batch).
 * Committed offsets are kept in STATE_DIR/positions, one line per file
 * ("DEV INO OFFSET FPLEN FPCRC GEN PATH") and the next generation ("G N"),
 * replaced atomically (tmp + rename, fdatasync at most once a second). A
 * restart reads from there, so it repeats at most the batch that was not
 * acknowledged and loses nothing.
 *
 * Ids: an event gets "DEV-INO-GEN-OFFSET" (the line's first byte), unless
 * it is a CloudEvent with its own, so that a line read again (after a
 * crash, before its position was committed) makes the same event and a
 * consumer can recognise the duplicate. GEN tells apart what one inode held
 * at different times: every file read from 0 as new content (found for
 * the first time, truncated, replaced under its inode, or an inode used
 * again by a new file) takes the next generation, and the positions file
 * holds it (synced) before any of its events is emitted, so a re-read
 * after a crash finds the same one. A path is never part of the id: after
 * a rotation a new file at the same path repeats the positions.
 *
 * Rotation: when a path names another inode, or no file, the old file is
 * "gone": its descriptor is read to the end and kept until it has been idle
 * for ROTATE_GRACE_MS after the rename, then closed and forgotten; the new
 * file is read from offset 0. A file whose size fell below the position, or
 * whose first bytes changed (copy-truncate), is read again from 0. A file
 * deleted while open (st_nlink == 0) is gone in the same way.
 *
 * `start` applies only at the source's first start ever (no positions
 * file yet); afterwards a file without a position is read from 0, also one
 * made while sluice was stopped or reloading. A stored position whose file
 * the glob no longer lists (rotated while stopped) is looked for by (dev,
 * inode) at its path and in its folder, and read to its end as gone.
 *
 * A file is gone only when the glob could list its folder: a folder that
 * is missing or unreadable for a while does not make its files new ones.
 * A file forgotten while it may still exist leaves a tombstone (dev, ino,
 * fingerprint, offset; the last TOMBSTONES, in memory until the instance
 * stops), so that it resumes at its offset if the glob finds it again.
 *
 * A final line without '\n' is held until its newline comes; only when its
 * file is gone (rotated or deleted, then idle) is it emitted as it is.
 * Back-pressure: flush() blocks inside the host while the set's buffers are
 * full, and nothing is read meanwhile. A flush that fails otherwise (e.g.
 * SL_ENOMEM: the host keeps the batch) is tried again after RETRY_MS; only
 * SL_ESHUTDOWN stops the thread, and health() says so if it ever ends
 * while the server runs.
 */
#include "connectors/source_file_internal.h"

#include "core/base/clock.h"
#include "core/base/crc32c.h"
#include "core/base/metrics.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <regex.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define READ_BUF (1u << 20)    /* one read(2) at most */
#define ROUND_BYTES (4u << 20) /* read from one file per round, for fairness */
#define FP_MAX 256             /* fingerprint: CRC-32C of the first bytes */
#define MAX_OPEN 256           /* open descriptors per instance */
#define FLUSH_EVENTS 8192      /* a batch ends at this many events … */
#define FLUSH_BYTES (1u << 20) /* … or this many line bytes */
#define ROTATE_GRACE_MS 1000   /* a gone file is kept this long after its last data */
#define SYNC_EVERY_MS 1000     /* fdatasync of the positions at most this often */
#define TOMBSTONES 1024        /* positions of forgotten files kept (in memory) */
#define RETRY_MS 200           /* a failed flush is tried again after this long */
#define DEFAULT_TYPE "sluice.file.line"
#define POSITIONS "positions"
#define POSITIONS_HEADER "# sluice source.file positions v2\n"

/* A position not attached to a followed file: read back from the positions
 * file at start (path set), or a tombstone of a file that was forgotten
 * while it may still exist (its folder was missing, it was renamed out of
 * the pattern, …), so that it resumes there if the scan finds it again. */
struct sf_pos {
    dev_t dev;
    ino_t ino;
    uint64_t off;
    uint32_t fp_len, fp;
    uint64_t gen;
    char *path; /* where it was (NULL when unknown) */
    bool fresh; /* from the positions file, not looked for yet */
};

/* A watched directory. */
struct sf_watch {
    int wd;
    char *dir;
};

static void set_health(sf *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_health(sf *s, const char *fmt, ...)
{
    char msg[sizeof s->health];
    msg[0] = 0;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_lock(&s->mu);
    bool changed = strcmp(msg, s->health) != 0;
    snprintf(s->health, sizeof s->health, "%s", msg);
    pthread_mutex_unlock(&s->mu);
    if (changed && msg[0])
        s->host->log(s->host->ctx, "%s", msg);
}

/* ---- positions ------------------------------------------------------------------- */

static ssize_t stored_find(const sf *s, dev_t dev, ino_t ino)
{
    for (size_t i = 0; i < s->nstored; i++)
        if (s->stored[i].dev == dev && s->stored[i].ino == ino)
            return (ssize_t)i;
    return -1;
}

static void stored_remove(sf *s, size_t i)
{
    free(s->stored[i].path);
    memmove(&s->stored[i], &s->stored[i + 1], (s->nstored - i - 1) * sizeof *s->stored);
    s->nstored--;
}

/* Adds a position (replacing one of the same file); the oldest tombstone
 * goes when there are TOMBSTONES. path is copied (may be NULL). */
static void stored_add(sf *s, sf_pos p, const char *path)
{
    ssize_t k = stored_find(s, p.dev, p.ino);
    if (k >= 0)
        stored_remove(s, (size_t)k);
    if (!p.fresh && s->nstored >= TOMBSTONES) {
        for (size_t i = 0; i < s->nstored; i++) {
            if (!s->stored[i].fresh) {
                stored_remove(s, i);
                break;
            }
        }
    }
    sf_pos *g = realloc(s->stored, (s->nstored + 1) * sizeof *g);
    if (!g)
        return;
    s->stored = g;
    p.path = path ? strdup(path) : NULL;
    s->stored[s->nstored++] = p;
}

static void load_positions(sf *s)
{
    FILE *fp = fopen(s->pos_path, "re");
    if (!fp)
        return;
    char line[PATH_MAX + 128];
    bool v1 = false; /* without generations: every file's is 0 */
    unsigned long long gen = 0;
    while (fgets(line, sizeof line, fp)) {
        if (line[0] == '#') {
            v1 |= strncmp(line, "# sluice source.file positions v1", 33) == 0;
            continue;
        }
        if (line[0] == 'G' && sscanf(line, "G %llu", &gen) == 1) {
            if (gen > s->next_gen)
                s->next_gen = gen;
            continue;
        }
        unsigned long long dev, ino, off;
        unsigned fplen, crc;
        int at = 0;
        gen = 0;
        if (v1 ? sscanf(line, "%llu %llu %llu %u %x%n", &dev, &ino, &off, &fplen, &crc, &at) != 5
               : sscanf(line, "%llu %llu %llu %u %x %llu%n", &dev, &ino, &off, &fplen, &crc, &gen,
                        &at) != 6)
            continue;
        if (gen >= s->next_gen)
            s->next_gen = gen + 1;
        char *path = line + at;
        if (*path == ' ')
            path++;
        path[strcspn(path, "\n")] = 0;
        stored_add(s,
                   (sf_pos){(dev_t)dev, (ino_t)ino, (uint64_t)off, fplen > FP_MAX ? FP_MAX : fplen,
                            crc, (uint64_t)gen, NULL, true},
                   *path ? path : NULL);
    }
    fclose(fp);
}

/* Writes every file's committed position (tmp + rename). */
void sl__source_file_save_positions(sf *s, bool sync)
{
    sl_buf *b = &s->posbuf;
    b->len = 0;
    char g[32];
    int gl = snprintf(g, sizeof g, "G %llu\n", (unsigned long long)s->next_gen);
    int rc = sl_buf_append(b, POSITIONS_HEADER, strlen(POSITIONS_HEADER)) ||
             sl_buf_append(b, g, (size_t)gl);
    for (size_t i = 0; !rc && i < s->nfiles; i++) {
        const sf_file *f = s->files[i];
        char head[160];
        int n =
            snprintf(head, sizeof head, "%llu %llu %llu %u %08x %llu ", (unsigned long long)f->dev,
                     (unsigned long long)f->ino, (unsigned long long)f->committed, f->fp_len, f->fp,
                     (unsigned long long)f->gen);
        rc = sl_buf_append(b, head, (size_t)n);
        size_t at = b->len;
        if (!rc)
            rc = sl_buf_append(b, f->path, strlen(f->path));
        for (size_t j = at; !rc && j < b->len; j++)
            if (b->data[j] == '\n')
                b->data[j] = '?'; /* the path is for people only */
        if (!rc)
            rc = sl_buf_append(b, "\n", 1);
    }
    if (rc)
        return;
    int fd = open(s->pos_tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        s->host->log(s->host->ctx, "%s: %s", s->pos_tmp, strerror(errno));
        return;
    }
    size_t w = 0;
    while (w < b->len) {
        ssize_t k = write(fd, b->data + w, b->len - w);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        w += (size_t)k;
    }
    bool ok = w == b->len;
    if (ok && (sync || s->now - s->synced_ms >= SYNC_EVERY_MS)) {
        ok = fdatasync(fd) == 0;
        s->synced_ms = s->now;
    }
    close(fd);
    if (!ok || rename(s->pos_tmp, s->pos_path)) {
        s->host->log(s->host->ctx, "%s: cannot write the positions: %s", s->pos_path,
                     strerror(errno));
        unlink(s->pos_tmp);
        return;
    }
    s->dirty = false;
    if (b->cap > (1u << 20))
        sl_buf_free(b);
}

/* Every file's position is acknowledged (the batch was flushed, or empty):
 * moves the committed offsets and writes them when they changed. */
static void commit(sf *s, bool sync)
{
    bool changed = s->dirty;
    for (size_t i = 0; i < s->nfiles; i++) {
        sf_file *f = s->files[i];
        uint64_t p = sl__source_file_commit_pos(f);
        if (p != f->committed) {
            f->committed = p;
            changed = true;
        }
    }
    if (changed || sync)
        sl__source_file_save_positions(s, sync);
}

/* Publishes the batch and commits. Returns false when the server stops
 * (nothing committed). */
static bool flush_commit(sf *s)
{
    if (s->batch_events) {
        for (;;) {
            sl_error err = {0};
            int rc = s->host->flush(s->host->ctx, &err);
            if (rc == 0)
                break;
            if (rc == SL_ESHUTDOWN) {
                atomic_store(&s->halt, true);
                return false;
            }
            /* SL_ENOMEM (the batch is kept) or anything else: try again. */
            s->host->log(s->host->ctx, "publishing failed, retrying: %s",
                         err.msg[0] ? err.msg : sl_strerror(rc));
            if (s->host->wait(s->host->ctx, RETRY_MS) || atomic_load(&s->stop_asked)) {
                atomic_store(&s->halt, true);
                return false;
            }
        }
        s->batch_events = s->batch_bytes = 0;
        s->now = sl_clock_mono_ms();
    }
    commit(s, false);
    return true;
}

bool sl__source_file_halted(sf *s)
{
    return atomic_load_explicit(&s->halt, memory_order_relaxed);
}

/* Flushes when the batch is full. */
void sl__source_file_maybe_flush(sf *s)
{
    if (s->batch_events >= FLUSH_EVENTS || s->batch_bytes >= FLUSH_BYTES)
        flush_commit(s);
}

/* ---- files ----------------------------------------------------------------------- */

static uint32_t crc_prefix(int fd, uint32_t len, bool *ok)
{
    char b[FP_MAX];
    ssize_t n = pread(fd, b, len, 0);
    *ok = n == (ssize_t)len;
    return *ok ? sl_crc32c(0, b, len) : 0;
}

/* Grows the fingerprint of f as long as it covers fewer than FP_MAX bytes. */
static void fingerprint(sf_file *f, uint64_t size)
{
    if (f->fd < 0 || f->fp_len >= FP_MAX || size <= f->fp_len)
        return;
    uint32_t len = size < FP_MAX ? (uint32_t)size : FP_MAX;
    bool ok;
    uint32_t c = crc_prefix(f->fd, len, &ok);
    if (ok) {
        f->fp = c;
        f->fp_len = len;
    }
}

static void file_close(sf *s, sf_file *f)
{
    if (f->fd >= 0) {
        close(f->fd);
        f->fd = -1;
        s->nopen--;
    }
}

/* Forgets f (index i). */
static void file_drop(sf *s, size_t i)
{
    sf_file *f = s->files[i];
    file_close(s, f);
    free(f->path);
    free(f->src);
    sl_buf_free(&f->line);
    sl_buf_free(&f->group);
    free(f);
    s->files[i] = s->files[--s->nfiles];
    atomic_store(&s->n_files, s->nfiles);
    s->dirty = true;
}

/* Forgets a gone file (index i) that was read as far as it can be: what it
 * held back becomes events, and unless it was deleted its position stays as
 * a tombstone, so that it resumes there should the scan find it again. */
static void file_forget(sf *s, size_t i)
{
    sf_file *f = s->files[i];
    sl__source_file_drain_held(s, f);
    if (!f->deleted)
        stored_add(s,
                   (sf_pos){f->dev, f->ino, sl__source_file_commit_pos(f), f->fp_len, f->fp, f->gen,
                            NULL, false},
                   f->path);
    file_drop(s, i);
}

/* f holds content never read before: it takes the next generation, which
 * the positions file gets before any of its events is emitted. */
static void new_gen(sf *s, sf_file *f)
{
    f->gen = s->next_gen++;
    s->gen_unsaved = true;
}

/* The file is read again from 0 (truncated, or replaced under its inode). */
static void file_restart(sf *s, sf_file *f, const char *why)
{
    s->host->log(s->host->ctx, "%s %s: reading it again from the start", f->path, why);
    atomic_fetch_add(&s->n_truncations, 1);
    sl__source_file_drain_held(s, f);
    f->off = f->done = 0;
    f->grouping = f->split_cont = false;
    f->fp_len = 0;
    f->fp = 0;
    /* New content: a new generation, and the old position is of no use
     * (what was before the restart cannot be read again). */
    new_gen(s, f);
    f->committed = 0;
    f->want = true;
    s->dirty = true;
    if (f->fd >= 0 && lseek(f->fd, 0, SEEK_SET) < 0)
        file_close(s, f);
}

/* Makes room for one more descriptor: closes the least recently read file
 * that has nothing to read and is not gone. */
static bool make_room(sf *s)
{
    if (s->nopen < MAX_OPEN)
        return true;
    sf_file *old = NULL;
    for (size_t i = 0; i < s->nfiles; i++) {
        sf_file *f = s->files[i];
        if (f->fd >= 0 && !f->want && !f->gone && (!old || f->used_ms < old->used_ms))
            old = f;
    }
    if (!old)
        return false;
    file_close(s, old);
    return true;
}

/* Opens f at its offset. False when it is not the same file any more, or
 * cannot be opened now. */
static bool file_open(sf *s, sf_file *f)
{
    if (f->fd >= 0)
        return true;
    if (!make_room(s))
        return false;
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno != ENOENT)
        s->host->log(s->host->ctx, "%s: %s", f->path, strerror(errno));
    struct stat st;
    if (fd < 0 || fstat(fd, &st) || st.st_dev != f->dev || st.st_ino != f->ino) {
        if (fd >= 0)
            close(fd);
        return false; /* the next scan sorts it out */
    }
    f->fd = fd;
    s->nopen++;
    f->used_ms = s->now;
    if (f->fp_len) {
        bool ok;
        uint32_t c = crc_prefix(fd, f->fp_len, &ok);
        if (!ok || c != f->fp) {
            file_restart(s, f, "was replaced (same inode, other content)");
            return f->fd >= 0;
        }
    }
    if ((uint64_t)st.st_size < f->off) {
        file_restart(s, f, "was truncated");
        return f->fd >= 0;
    }
    if (lseek(fd, (off_t)f->off, SEEK_SET) < 0) {
        file_close(s, f);
        return false;
    }
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    return true;
}

static sf_file *file_find(sf *s, dev_t dev, ino_t ino)
{
    for (size_t i = 0; i < s->nfiles; i++)
        if (s->files[i]->dev == dev && s->files[i]->ino == ino)
            return s->files[i];
    return NULL;
}

static void file_set_path(sf *s, sf_file *f, const char *path)
{
    char *p = strdup(path), *src = NULL;
    if (!p)
        return;
    if (!s->cfg->source) {
        size_t n = strlen(path);
        if (!(src = malloc(n + 8))) {
            free(p);
            return;
        }
        memcpy(src, "file://", 7);
        memcpy(src + 7, path, n + 1);
    }
    free(f->path);
    free(f->src);
    f->path = p;
    f->src = src;
}

/* A new entry for path (NULL when out of memory), read from offset 0. */
static sf_file *file_new(sf *s, const char *path, const struct stat *st)
{
    if (s->nfiles == s->cap && sl_grow(&s->files, &s->cap, sizeof *s->files, 16))
            return NULL;
    sf_file *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->fd = -1;
    f->dev = st->st_dev;
    f->ino = st->st_ino;
    file_set_path(s, f, path);
    if (!f->path) {
        free(f);
        return NULL;
    }
    s->files[s->nfiles++] = f;
    atomic_store(&s->n_files, s->nfiles);
    f->data_ms = f->used_ms = s->now;
    f->want = f->seen = true;
    s->dirty = true;
    return f;
}

/* Opens path for a look at a stored position: -1 unless it is (dev, ino). */
static int open_same(const char *path, dev_t dev, ino_t ino, struct stat *st)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0 && (fstat(fd, st) || st->st_ino != ino || st->st_dev != dev)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Whether the position p still holds for the open file fd of size size. */
static bool pos_holds(int fd, const sf_pos *p, uint64_t size)
{
    bool ok = true;
    uint32_t c = p->fp_len ? crc_prefix(fd, p->fp_len, &ok) : 0;
    return ok && c == p->fp && p->off <= size;
}

/* A file the scan found for the first time: at its stored position (from
 * the last run, or a tombstone); else from 0, or at its end when this is
 * the source's first start ever and `start = "end"`. */
static void file_add(sf *s, const char *path, const struct stat *st)
{
    ssize_t k = stored_find(s, st->st_dev, st->st_ino);
    bool to_end = k < 0 && s->initial && s->first && !s->cfg->from_beginning;
    sf_file *f = file_new(s, path, st);
    if (f && k < 0)
        new_gen(s, f); /* a file never seen (or an inode used again) */
    if (!f || (k < 0 && !to_end))
        return; /* read from its beginning */
    /* The descriptor is a temporary one (file_read opens it within the cap). */
    struct stat fst;
    int fd = open_same(path, f->dev, f->ino, &fst);
    if (fd < 0) {
        if (k >= 0) {
            /* Taken as it is: file_open() checks it against the file. */
            f->off = f->done = f->committed = s->stored[k].off;
            f->fp = s->stored[k].fp;
            f->fp_len = s->stored[k].fp_len;
            f->gen = s->stored[k].gen;
            stored_remove(s, (size_t)k);
        }
        return;
    }
    f->fd = fd;
    uint64_t size = (uint64_t)fst.st_size;
    if (k >= 0) {
        const sf_pos *p = &s->stored[k];
        if (pos_holds(fd, p, size)) {
            f->off = f->done = f->committed = p->off;
            f->fp = p->fp;
            f->fp_len = p->fp_len;
            f->gen = p->gen;
        } else {
            new_gen(s, f);
            s->host->log(s->host->ctx,
                         "%s changed since its position was stored: reading it "
                         "from the start",
                         path);
        }
        stored_remove(s, (size_t)k);
    } else {
        f->off = f->done = f->committed = size;
    }
    fingerprint(f, f->off);
    close(f->fd);
    f->fd = -1;
}

/* Whether the folder holding path can be listed now. */
static bool parent_ok(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX];
    size_t n = !slash ? 0 : slash == path ? 1 : (size_t)(slash - path);
    if (n >= sizeof dir)
        return false;
    memcpy(dir, slash ? path : ".", slash ? n : 1);
    dir[slash ? n : 1] = 0;
    struct stat st;
    return stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && access(dir, R_OK | X_OK) == 0;
}

/* Looks for the file (p->dev, p->ino): at p->path, else among the entries
 * of p->path's folder (a rotated file). Returns its open descriptor, with
 * its name in out, or -1. */
static int find_stored(const sf_pos *p, char *out, size_t cap, struct stat *st)
{
    if (!p->path)
        return -1;
    int fd = open_same(p->path, p->dev, p->ino, st);
    if (fd >= 0) {
        snprintf(out, cap, "%s", p->path);
        return fd;
    }
    const char *slash = strrchr(p->path, '/');
    char dir[PATH_MAX];
    size_t n = !slash ? 1 : slash == p->path ? 1 : (size_t)(slash - p->path);
    if (n >= sizeof dir)
        return -1;
    if (!slash)
        memcpy(dir, ".", 2);
    else {
        memcpy(dir, p->path, n);
        dir[n] = 0;
    }
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    struct dirent *e;
    while (fd < 0 && (e = readdir(d))) {
        if (e->d_ino != p->ino)
            continue;
        int w = snprintf(out, cap, "%s/%s", strcmp(dir, "/") ? dir : "", e->d_name);
        if (w > 0 && (size_t)w < cap)
            fd = open_same(out, p->dev, p->ino, st);
    }
    closedir(d);
    return fd;
}

/* After the first scan: a stored position the pattern no longer matched is
 * a file rotated (renamed away) while sluice was stopped or reloading. It
 * is found by (dev, ino) and read to its end as a gone file; when it cannot
 * be found, its position stays as a tombstone. */
static void resume_rotated(sf *s)
{
    for (size_t i = s->nstored; i-- > 0;) {
        sf_pos *p = &s->stored[i];
        if (!p->fresh)
            continue;
        p->fresh = false;
        if (file_find(s, p->dev, p->ino)) {
            stored_remove(s, i);
            continue;
        }
        char path[PATH_MAX];
        struct stat st;
        int fd = find_stored(p, path, sizeof path, &st);
        if (fd < 0 && p->path && !parent_ok(p->path)) {
            s->host->log(s->host->ctx,
                         "%s: its folder cannot be read now; it is read from byte "
                         "%" PRIu64 " if it comes back",
                         p->path, p->off);
            continue;
        }
        if (fd < 0) {
            s->host->log(s->host->ctx,
                         "%s (inode %llu) went away while sluice was stopped and "
                         "was not found: what was written to it after byte %" PRIu64 " is not read",
                         p->path ? p->path : "a file", (unsigned long long)p->ino, p->off);
            continue;
        }
        if (!pos_holds(fd, p, (uint64_t)st.st_size)) {
            close(fd);
            s->host->log(s->host->ctx,
                         "%s went away while sluice was stopped and was replaced: "
                         "what was written to it after byte %" PRIu64 " is not read",
                         p->path, p->off);
            stored_remove(s, i);
            continue;
        }
        if (!make_room(s) || lseek(fd, (off_t)p->off, SEEK_SET) < 0) {
            close(fd);
            s->host->log(s->host->ctx,
                         "%s: too many files open: what was written to it after "
                         "byte %" PRIu64 " is not read",
                         path, p->off);
            continue;
        }
        sf_file *f = file_new(s, path, &st);
        if (!f) {
            close(fd);
            continue;
        }
        f->fd = fd;
        s->nopen++;
        f->off = f->done = f->committed = p->off;
        f->fp = p->fp;
        f->fp_len = p->fp_len;
        f->gen = p->gen;
        fingerprint(f, (uint64_t)st.st_size);
        f->gone = true;
        f->gone_ms = s->now;
        f->seen = false;
        atomic_fetch_add(&s->n_rotations, 1);
        s->host->log(s->host->ctx,
                     "%s was rotated while sluice was stopped: reading it from byte "
                     "%" PRIu64 " to its end",
                     path, p->off);
        stored_remove(s, i);
        /* Read before the files that replaced them. */
        memmove(&s->files[1], &s->files[0], (s->nfiles - 1) * sizeof *s->files);
        s->files[0] = f;
    }
}

/* Watches dir (once). */
static void watch_dir(sf *s, const char *dir)
{
    if (s->ino_fd < 0)
        return;
    for (size_t i = 0; i < s->nwatches; i++)
        if (strcmp(s->watches[i].dir, dir) == 0)
            return;
    int wd = inotify_add_watch(s->ino_fd, dir,
                               IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE |
                                   IN_CLOSE_WRITE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ATTRIB);
    if (wd < 0)
        return; /* polling covers it */
    sf_watch *g = realloc(s->watches, (s->nwatches + 1) * sizeof *g);
    char *d = strdup(dir);
    if (!g || !d) {
        free(d);
        if (g)
            s->watches = g;
        inotify_rm_watch(s->ino_fd, wd);
        return;
    }
    s->watches = g;
    s->watches[s->nwatches++] = (sf_watch){wd, d};
}

static void watch_parent(sf *s, const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return;
    char dir[PATH_MAX];
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    if (n >= sizeof dir)
        return;
    memcpy(dir, path, n);
    dir[n] = 0;
    watch_dir(s, dir);
}

/* glob(3)'s errfunc has no argument: each instance has its own thread. */
static _Thread_local int glob_errno;
static _Thread_local char glob_errpath[256];

static int glob_error(const char *path, int e)
{
    if (!glob_errno || (glob_errno == ENOENT && e != ENOENT)) {
        glob_errno = e;
        snprintf(glob_errpath, sizeof glob_errpath, "%s", path);
    }
    return 0; /* go on with the other folders; the scan knows its list is partial */
}

/* Finds the files the pattern names now: new ones, renamed and deleted
 * ones, truncated ones. A file the pattern did not list is gone only when
 * the listing was complete (the folders could be read): a folder that is
 * missing or unreadable for a moment must not make its files new ones. */
static void scan(sf *s)
{
    const char *pattern = s->conf->path;
    struct stat st;
    errno = 0;
    bool dir_ok = true;
    if (stat(s->dir, &st) || !S_ISDIR(st.st_mode) || access(s->dir, R_OK | X_OK)) {
        set_health(s, "%s: %s", s->dir, errno ? strerror(errno) : "not a readable folder");
        dir_ok = false;
    }
    watch_dir(s, s->dir);
    for (size_t i = 0; i < s->nfiles; i++)
        s->files[i]->seen = false;
    glob_t g;
    memset(&g, 0, sizeof g);
    glob_errno = 0;
    int gr = glob(pattern, GLOB_NOSORT, glob_error, &g);
    bool listed = dir_ok && !glob_errno && (gr == 0 || gr == GLOB_NOMATCH);
    if (dir_ok) {
        if (glob_errno && glob_errno != ENOENT)
            set_health(s, "%s: %s", glob_errpath, strerror(glob_errno));
        else if (gr == GLOB_NOSPACE)
            set_health(s, "%s: out of memory", pattern);
        else
            set_health(s, NULL);
    }
    for (size_t i = 0; (gr == 0 || gr == GLOB_ABORTED) && i < g.gl_pathc; i++) {
        const char *path = g.gl_pathv[i];
        if (stat(path, &st) || !S_ISREG(st.st_mode))
            continue;
        sf_file *f = file_find(s, st.st_dev, st.st_ino);
        if (!f) {
            file_add(s, path, &st);
            watch_parent(s, path);
            continue;
        }
        f->seen = true;
        if (f->gone) {
            f->gone = false; /* it came back (renamed back, or our mistake) */
        }
        struct stat cur;
        if (strcmp(f->path, path) &&
            (stat(f->path, &cur) || cur.st_dev != f->dev || cur.st_ino != f->ino)) {
            file_set_path(s, f, path); /* renamed inside the pattern: same file */
            s->dirty = true;
        }
        if ((uint64_t)st.st_size != f->off)
            f->want = true; /* more bytes (or fewer: handled once open) */
    }
    globfree(&g);
    for (size_t i = 0; i < s->nfiles; i++) {
        sf_file *f = s->files[i];
        if (!f->seen && !f->gone && listed && parent_ok(f->path)) {
            f->gone = true;
            f->gone_ms = s->now;
            atomic_fetch_add(&s->n_rotations, 1);
            if (f->fd < 0)
                s->host->log(s->host->ctx,
                             "%s went away while it was closed (too many files "
                             "open): what was written to it after byte %" PRIu64 " is not read",
                             f->path, f->off);
        }
        if (f->fd < 0)
            continue;
        if (fstat(f->fd, &st) == 0) {
            if (st.st_nlink == 0) {
                f->deleted = true;
                if (!f->gone) {
                    f->gone = true;
                    f->gone_ms = s->now;
                }
            }
            if ((uint64_t)st.st_size < f->off) {
                file_restart(s, f, "was truncated");
            } else if (f->fp_len && (uint64_t)st.st_size >= f->fp_len) {
                bool ok;
                uint32_t c = crc_prefix(f->fd, f->fp_len, &ok);
                if (ok && c != f->fp)
                    file_restart(s, f, "was truncated and written again");
            }
            if ((uint64_t)st.st_size > f->off)
                f->want = true;
        }
    }
    /* Gone files without a descriptor cannot be read any more. */
    for (size_t i = s->nfiles; i-- > 0;)
        if (s->files[i]->gone && s->files[i]->fd < 0)
            file_forget(s, i);
}

/* Reads what f has, up to ROUND_BYTES. Returns true when it may have more. */
static bool file_read(sf *s, sf_file *f)
{
    if (f->fd < 0) {
        if (!f->want)
            return false;
        if (!file_open(s, f)) {
            f->want = false; /* until the next scan or inotify event says more */
            return false;
        }
    }
    /* Copy-truncate: a smaller file, or other first bytes (truncated and
     * written past our offset again), is read again from the start. */
    struct stat st;
    if (fstat(f->fd, &st) == 0 && (uint64_t)st.st_size < f->off) {
        file_restart(s, f, "was truncated");
    } else if (f->fp_len && f->off) {
        bool ok;
        uint32_t c = crc_prefix(f->fd, f->fp_len, &ok);
        if (!ok || c != f->fp)
            file_restart(s, f, "was truncated and written again");
    }
    if (f->fd < 0)
        return false;
    size_t total = 0;
    f->used_ms = s->now;
    while (total < ROUND_BYTES && !sl__source_file_halted(s)) {
        ssize_t n = read(f->fd, s->rbuf, READ_BUF);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            s->host->log(s->host->ctx, "%s: read: %s", f->path, strerror(errno));
            f->want = false;
            return false;
        }
        if (n == 0) {
            f->want = false;
            return false;
        }
        uint64_t base = f->off;
        f->off += (uint64_t)n;
        f->data_ms = s->now;
        total += (size_t)n;
        if (f->fp_len < FP_MAX)
            fingerprint(f, f->off);
        sl__source_file_consume(s, f, s->rbuf, (size_t)n, base);
    }
    return true;
}

/* Emits multi-line groups that waited long enough; forgets gone files that
 * were read to the end and stayed quiet. Returns the ms until the next
 * such deadline (or -1). */
static int64_t timers(sf *s)
{
    int64_t next = -1;
    for (size_t i = s->nfiles; i-- > 0;) {
        sf_file *f = s->files[i];
        if (f->grouping) {
            int64_t last = f->group_ms > f->data_ms ? f->group_ms : f->data_ms;
            int64_t due = last + s->conf->multiline_timeout_ms - s->now;
            if (due <= 0)
                sl__source_file_group_emit(s, f);
            else if (due > 0 && (next < 0 || due < next))
                next = due;
        }
        if (f->gone && !f->want) {
            int64_t last = f->data_ms > f->gone_ms ? f->data_ms : f->gone_ms;
            int64_t due = last + ROTATE_GRACE_MS - s->now;
            if (due <= 0) {
                file_forget(s, i);
            } else if (next < 0 || due < next) {
                next = due;
            }
        }
    }
    return next;
}

/* Reads inotify events: true when a folder changed (files came or went). */
static bool read_inotify(sf *s)
{
    bool dirs = false;
    char buf[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
    for (;;) {
        ssize_t n = read(s->ino_fd, buf, sizeof buf);
        if (n <= 0)
            break;
        for (char *p = buf; p < buf + n;) {
            const struct inotify_event *e = (const struct inotify_event *)p;
            if (e->mask & (IN_CREATE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_ATTRIB |
                           IN_Q_OVERFLOW | IN_DELETE_SELF | IN_MOVE_SELF))
                dirs = true;
            if (e->mask & IN_IGNORED) {
                for (size_t i = 0; i < s->nwatches; i++) {
                    if (s->watches[i].wd != e->wd)
                        continue;
                    free(s->watches[i].dir);
                    s->watches[i] = s->watches[--s->nwatches];
                    break;
                }
                dirs = true;
            }
            if ((e->mask & (IN_MODIFY | IN_CLOSE_WRITE)) && e->len && s->nopen < s->nfiles) {
                /* A closed file got bytes: it wants a descriptor. */
                for (size_t w = 0; w < s->nwatches; w++) {
                    if (s->watches[w].wd != e->wd)
                        continue;
                    size_t dl = strlen(s->watches[w].dir);
                    for (size_t i = 0; i < s->nfiles; i++) {
                        sf_file *f = s->files[i];
                        if (f->fd < 0 && strncmp(f->path, s->watches[w].dir, dl) == 0 &&
                            f->path[dl] == '/' && strcmp(f->path + dl + 1, e->name) == 0)
                            f->want = true;
                    }
                }
            }
            p += sizeof *e + e->len;
        }
    }
    return dirs;
}

static void *run(void *arg)
{
    sf *s = arg;
    const int64_t poll_ms = s->conf->poll_ms > 0 ? s->conf->poll_ms : 250;
    s->now = sl_clock_mono_ms();
    /* `start` is for the source's very first start: once a positions file
     * exists, a file without a position appeared while sluice was stopped
     * or reloading and is read from its beginning. */
    struct stat pst;
    s->first = stat(s->pos_path, &pst) != 0 && errno == ENOENT;
    load_positions(s);
    s->initial = true;
    scan(s);
    resume_rotated(s);
    s->initial = false;
    if (s->first)
        s->dirty = true; /* the positions file says the first start happened */
    int64_t last_scan = s->now;
    while (!sl__source_file_halted(s) && !s->host->stopping(s->host->ctx)) {
        s->now = sl_clock_mono_ms();
        bool more = false;
        for (size_t i = 0; i < s->nfiles && !sl__source_file_halted(s); i++)
            more |= file_read(s, s->files[i]);
        if (sl__source_file_halted(s))
            break;
        int64_t next = timers(s);
        if (!more) {
            /* Everything readable was read: publish it. */
            if (!flush_commit(s))
                break;
            int64_t wait = poll_ms - (s->now - last_scan);
            if (next >= 0 && next < wait)
                wait = next;
            if (wait > 0) {
                struct pollfd pf[2] = {{.fd = s->wake_fd, .events = POLLIN},
                                       {.fd = s->ino_fd, .events = POLLIN}};
                int np = poll(pf, s->ino_fd >= 0 ? 2 : 1, (int)wait);
                s->now = sl_clock_mono_ms();
                if (np > 0 && (pf[1].revents & POLLIN) && s->ino_fd >= 0 && read_inotify(s))
                    last_scan = s->now - poll_ms; /* folders changed: scan now */
            }
        } else {
            sl__source_file_maybe_flush(s);
        }
        if (s->now - last_scan >= poll_ms) {
            scan(s);
            last_scan = s->now;
        }
    }
    /* Stopping: a batch in flight is not committed (it is read again after
     * the restart); without one, what changed is written and synced. */
    if (!s->batch_events)
        commit(s, true);
    if (!atomic_load(&s->stop_asked) && !s->host->stopping(s->host->ctx))
        set_health(s, "stopped reading (unexpectedly); a reload or restart starts it again");
    return NULL;
}

/* ---- the instance ---------------------------------------------------------------- */

static void sf_free(sf *s)
{
    if (!s)
        return;
    for (size_t i = s->nfiles; i-- > 0;)
        file_drop(s, i);
    free(s->files);
    for (size_t i = 0; i < s->nwatches; i++)
        free(s->watches[i].dir);
    free(s->watches);
    if (s->ino_fd >= 0)
        close(s->ino_fd);
    if (s->wake_fd >= 0)
        close(s->wake_fd);
    if (s->has_re)
        regfree(&s->re);
    for (size_t i = 0; i < s->nstored; i++)
        free(s->stored[i].path);
    free(s->stored);
    sl_buf_free(&s->rebuf);
    free(s->rbuf);
    sl_buf_free(&s->evbuf);
    sl_buf_free(&s->posbuf);
    free(s->pos_path);
    free(s->pos_tmp);
    free(s->dir);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* The folder part of the pattern before its first wildcard. */
static char *literal_dir(const char *pattern)
{
    size_t n = strcspn(pattern, "*?[");
    const char *slash = NULL;
    for (const char *p = pattern; p < pattern + n; p++)
        if (*p == '/')
            slash = p;
    if (!slash)
        return strdup(".");
    if (slash == pattern)
        return strdup("/");
    return strndup(pattern, (size_t)(slash - pattern));
}

static int check_(const sl_source_config *cfg, sl_error *err)
{
    const sl_source_file_conf *conf = cfg->conf;
    if (!conf->path || !conf->path[0])
        return sl_error_set(err, SL_EINVAL, "source.file: path is required");
    if (conf->max_line < 16)
        return sl_error_set(err, SL_EINVAL, "source.file: max_line must be at least 16 bytes");
    return 0;
}

static int open_(const sl_source_config *cfg, const sl_source_host *host, void **impl,
                 sl_error *err)
{
    const sl_source_file_conf *conf = cfg->conf;
    int rc = check_(cfg, err);
    if (rc)
        return rc;
    sf *s = calloc(1, sizeof *s);
    if (!s)
        return sl_error_set(err, SL_ENOMEM, "source.file: out of memory");
    s->cfg = cfg;
    s->conf = cfg->conf;
    s->host = host;
    s->wake_fd = s->ino_fd = -1;
    pthread_mutex_init(&s->mu, NULL);
    s->type = cfg->type ? cfg->type : DEFAULT_TYPE;
    size_t sd = strlen(host->state_dir);
    s->rbuf = malloc(READ_BUF);
    s->pos_path = malloc(sd + sizeof "/" POSITIONS);
    s->pos_tmp = malloc(sd + sizeof "/" POSITIONS ".tmp");
    s->dir = literal_dir(conf->path);
    if (!s->rbuf || !s->pos_path || !s->pos_tmp || !s->dir) {
        rc = sl_error_set(err, SL_ENOMEM, "source.file: out of memory");
        goto fail;
    }
    sprintf(s->pos_path, "%s/" POSITIONS, host->state_dir);
    sprintf(s->pos_tmp, "%s/" POSITIONS ".tmp", host->state_dir);
    if (conf->multiline) {
        int r = regcomp(&s->re, conf->multiline, REG_EXTENDED | REG_NOSUB);
        if (r) {
            char msg[256];
            regerror(r, &s->re, msg, sizeof msg);
            rc = sl_error_set(err, SL_EINVAL, "source.file: multiline: %s", msg);
            goto fail;
        }
        s->has_re = true;
    }
    if ((s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        rc = sl_error_errno(err, errno, "source.file: eventfd");
        goto fail;
    }
    if (conf->inotify && (s->ino_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) < 0)
        host->log(host->ctx, "inotify: %s: polling every %" PRId64 " ms", strerror(errno),
                  conf->poll_ms);
    int e = pthread_create(&s->thread, NULL, run, s);
    if (e) {
        rc = sl_error_errno(err, e, "source.file: thread");
        goto fail;
    }
    s->started = true;
    *impl = s;
    return 0;
fail:
    sf_free(s);
    return rc;
}

static void stop_(void *impl)
{
    sf *s = impl;
    atomic_store(&s->stop_asked, true);
    atomic_store(&s->halt, true);
    uint64_t one = 1;
    if (write(s->wake_fd, &one, sizeof one) < 0) {
        /* Already signalled (the counter is full): the thread wakes anyway. */
    }
}

static void close_(void *impl)
{
    sf *s = impl;
    if (!s)
        return;
    if (s->started) {
        stop_(s);
        pthread_join(s->thread, NULL);
    }
    sf_free(s);
}

static int health_(void *impl, char *msg, size_t len)
{
    sf *s = impl;
    pthread_mutex_lock(&s->mu);
    int bad = s->health[0] != 0;
    if (bad)
        snprintf(msg, len, "%s", s->health);
    pthread_mutex_unlock(&s->mu);
    return bad;
}

static size_t metrics_(void *impl, char *out, size_t cap)
{
    sf *s = impl;
    static const char *const fam[][2] = {
        {"sluice_source_file_files", "Files the source follows."},
        {"sluice_source_file_lines_total", "Lines read."},
        {"sluice_source_file_bytes_total", "Bytes read."},
        {"sluice_source_file_rotations_total", "Files found rotated (renamed or replaced)."},
        {"sluice_source_file_truncations_total", "Files found truncated (read again from 0)."},
        {"sluice_source_file_parse_errors_total", "Lines the parse option could not parse."},
        {"sluice_source_file_skipped_long_lines_total", "Lines over max_line, skipped."},
        {"sluice_source_file_refused_total", "Events the set refused (e.g. over max_event)."},
    };
    uint_fast64_t v[] = {atomic_load(&s->n_files),       atomic_load(&s->n_lines),
                         atomic_load(&s->n_bytes),       atomic_load(&s->n_rotations),
                         atomic_load(&s->n_truncations), atomic_load(&s->n_parse_errors),
                         atomic_load(&s->n_skipped),     atomic_load(&s->n_refused)};
    sl_buf b = SL_BUF_INIT;
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        sl_metrics_family(&b, fam[i][0], i ? SL_METRIC_COUNTER : SL_METRIC_GAUGE, fam[i][1]);
        sl_metrics_u64(&b, fam[i][0], v[i], "source", s->host->name, NULL);
    }
    return sl_metrics_copy(&b, out, cap);
}

static const sl_conf_key file_keys[] = {
    {"path", SL_KEY_PATH, SL_CONF_FIELD(sl_source_file_conf, path), 0, 0, "required",
     "a file or a glob (`/var/log/app/*.log`), relative to the config file; new matches are "
     "picked up"},
    {"parse", SL_KEY_PARSE, SL_CONF_FIELD(sl_source_file_conf, parse), 0, 0, "\"json\"",
     "\"json\": a CloudEvent as it is, other JSON as data, anything else as text; \"text\": "
     "the line as text data; `function(line) … end`: what it returns (docs/sources.md)"},
    {"multiline", SL_KEY_STRING, SL_CONF_FIELD(sl_source_file_conf, multiline), 0, 0, "off",
     "an extended regex (POSIX) a line must match to start a new event; other lines join "
     "the event before them"},
    {"multiline_timeout", SL_KEY_DURATION, SL_CONF_FIELD(sl_source_file_conf, multiline_timeout_ms),
     1, 3600000, "\"1s\"", "a multi-line event is complete after this long without a new line"},
    {"max_line", SL_KEY_SIZE, SL_CONF_FIELD(sl_source_file_conf, max_line), 16, 64 << 20,
     "\"256KiB\"",
     "longest line (or multi-line event) kept whole; keep it below the set's `max_event` "
     "(a piece and its envelope must fit)"},
    {"long_lines", SL_KEY_LONGLINES, SL_CONF_FIELD(sl_source_file_conf, split_long), 0, 0,
     "\"split\"",
     "what happens to a longer line: \"split\" into max_line pieces or \"skip\" (counted)"},
    {"poll", SL_KEY_DURATION, SL_CONF_FIELD(sl_source_file_conf, poll_ms), 10, 600000, "\"250ms\"",
     "how often files are checked and the glob is expanded again (also with inotify)"},
    {"inotify", SL_KEY_BOOL, SL_CONF_FIELD(sl_source_file_conf, inotify), 0, 0, "true",
     "wake up on inotify events; false: polling only (e.g. network file systems)"},
};

static const sl_source_file_conf file_defaults = {
    .parse = SL_PARSE_JSON,
    .multiline_timeout_ms = 1000,
    .max_line = 256 << 10, /* a piece plus its envelope fits the default max_event */
    .split_long = true,
    .poll_ms = 250,
    .inotify = true,
};

static void check_conf_(const sl_source_config *cfg, const sl_conf_check *chk)
{
    const sl_source_file_conf *conf = cfg->conf;
    if (!conf->path)
        chk->problem(chk->ctx, NULL, "path is required (a file or a glob)");
    regex_t re;
    int rc = conf->multiline ? regcomp(&re, conf->multiline, REG_EXTENDED | REG_NOSUB) : 0;
    if (rc) {
        char msg[200];
        regerror(rc, &re, msg, sizeof msg);
        chk->problem(chk->ctx, "multiline", "multiline is not an extended regex: %s", msg);
    } else if (conf->multiline) {
        regfree(&re);
    }
}

const sl_source_ops sl_source_file_ops = {
    .abi_version = SL_CONNECTOR_ABI_VERSION,
    .name = "file",
    .check = check_,
    .open = open_,
    .stop = stop_,
    .close = close_,
    .health = health_,
    .metrics = metrics_,
    .conf_keys = file_keys,
    .nconf_keys = sizeof file_keys / sizeof *file_keys,
    .conf_size = sizeof(sl_source_file_conf),
    .conf_defaults = &file_defaults,
    .doc = "tail files: one event per line (or multi-line group), position kept in the data dir",
    .check_conf = check_conf_,
};
