/*
 * connectors/target_file.c — target.file: payloads appended as NDJSON lines,
 * fdatasync'ed before they count as delivered, with rotation by size
 * (PATH -> PATH.1 -> PATH.2 …, `keep` files kept).
 */
#include "connectors/target_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct file_target {
    char *path;
    uint64_t rotate_bytes;
    int64_t keep;
    int fd;
    uint64_t size;
    pthread_mutex_t lock; /* deliveries of one instance never interleave */
    sl_buf line;          /* the lines of one deliver() call */
} file_target;

/* Creates the folders above path, as `mkdir -p` would. */
static int make_parents(const char *path, sl_error *err)
{
    char *p = strdup(path);
    if (!p)
        return sl_error_set(err, SL_ENOMEM, "target.file: out of memory");
    int rc = 0;
    for (char *s = p + 1; *s && !rc; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0755) && errno != EEXIST)
            rc = sl_error_errno(err, errno, "target.file: mkdir %s", p);
        *s = '/';
    }
    free(p);
    return rc;
}

static int open_file(file_target *t, sl_error *err)
{
    int rc = make_parents(t->path, err);
    if (rc)
        return rc;
    t->fd = open(t->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (t->fd < 0)
        return sl_error_errno(err, errno, "target.file %s: open", t->path);
    struct stat st;
    t->size = fstat(t->fd, &st) == 0 ? (uint64_t)st.st_size : 0;
    return 0;
}

static int file_open(const sl_target_config *tc, const sl_target_env *env, void **impl,
                     sl_error *err)
{
    const sl_target_file_conf *cfg = tc->conf;
    (void)env;
    file_target *t = calloc(1, sizeof *t);
    if (!t || !(t->path = strdup(cfg->path))) {
        free(t);
        return sl_error_set(err, SL_ENOMEM, "target.file: out of memory");
    }
    t->rotate_bytes = cfg->rotate_bytes;
    t->keep = cfg->keep > 0 ? cfg->keep : 5;
    pthread_mutex_init(&t->lock, NULL);
    int rc = open_file(t, err);
    if (rc) {
        pthread_mutex_destroy(&t->lock);
        free(t->path);
        free(t);
        return rc;
    }
    *impl = t;
    return 0;
}

/* PATH.(keep-1) -> PATH.keep, …, PATH -> PATH.1; then a fresh PATH. */
static int rotate(file_target *t, sl_error *err)
{
    size_t n = strlen(t->path) + 24;
    char *from = malloc(n), *to = malloc(n);
    int rc = 0;
    if (!from || !to) {
        rc = sl_error_set(err, SL_ENOMEM, "target.file: out of memory");
        goto out;
    }
    for (int64_t i = t->keep - 1; i >= 1; i--) {
        snprintf(from, n, "%s.%lld", t->path, (long long)i);
        snprintf(to, n, "%s.%lld", t->path, (long long)i + 1);
        if (rename(from, to) && errno != ENOENT) {
            rc = sl_error_errno(err, errno, "target.file: rename %s", from);
            goto out;
        }
    }
    snprintf(to, n, "%s.1", t->path);
    if (rename(t->path, to)) {
        rc = sl_error_errno(err, errno, "target.file: rename %s", t->path);
        goto out;
    }
    close(t->fd);
    t->fd = -1; /* if the reopen fails, the next batch tries again */
    rc = open_file(t, err);
out:
    free(from);
    free(to);
    return rc;
}

static int write_all(file_target *t, const uint8_t *p, size_t n, sl_error *err)
{
    uint64_t before = t->size;
    int rc = 0;
    while (n && !rc) {
        ssize_t w = write(t->fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0) {
            rc = sl_error_errno(err, errno, "target.file %s: write", t->path);
            break;
        }
        p += w;
        n -= (size_t)w;
        t->size += (uint64_t)w;
    }
    if (!rc && fdatasync(t->fd))
        rc = sl_error_errno(err, errno, "target.file %s: fdatasync", t->path);
    /* A failed batch is delivered again: cut what it half wrote, so the
     * retry does not follow a torn line. */
    if (rc && ftruncate(t->fd, (off_t)before) == 0)
        t->size = before;
    return rc;
}

static void file_deliver(void *impl, const sl_delivery *d, size_t n, sl_deliver_done_fn *done,
                         void *ctx)
{
    file_target *t = impl;
    sl_error err = {0};
    int rc = 0;
    pthread_mutex_lock(&t->lock);
    if (t->fd < 0)
        rc = open_file(t, &err);
    t->line.len = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        size_t at = t->line.len;
        if ((rc = sl_buf_append(&t->line, d[i].data, d[i].len)) ||
            (rc = sl_buf_append(&t->line, "\n", 1)))
            break;
        /* One payload, one line: a JSON text can only hold raw line breaks
         * as whitespace, so they become spaces (templates may have them). */
        for (size_t k = at; k < t->line.len - 1; k++)
            if (t->line.data[k] == '\n' || t->line.data[k] == '\r')
                t->line.data[k] = ' ';
    }
    if (!rc)
        rc = write_all(t, t->line.data, t->line.len, &err);
    if (!rc && t->rotate_bytes && t->size >= t->rotate_bytes)
        rotate(t, &err); /* the lines are on disk; a failed rotation retries next time */
    if (t->line.cap > (1u << 20))
        sl_buf_free(&t->line);
    pthread_mutex_unlock(&t->lock);
    for (size_t i = 0; i < n; i++)
        done(ctx, i, rc, rc ? err.msg : NULL);
}

static void file_close(void *impl)
{
    file_target *t = impl;
    if (!t)
        return;
    if (t->fd >= 0)
        close(t->fd);
    pthread_mutex_destroy(&t->lock);
    sl_buf_free(&t->line);
    free(t->path);
    free(t);
}

static const sl_conf_key file_keys[] = {
    {"path", SL_KEY_PATH, SL_CONF_FIELD(sl_target_file_conf, path), 0, 0, "required",
     "the NDJSON file (relative to the config file)"},
    {"rotate_bytes", SL_KEY_SIZE, SL_CONF_FIELD(sl_target_file_conf, rotate_bytes), 0, INT64_MAX,
     "never", "rename the file to PATH.1 (PATH.1 to PATH.2, …) once it passes this size"},
    {"keep", SL_KEY_INT, SL_CONF_FIELD(sl_target_file_conf, keep), 1, 1000, "5",
     "rotated files kept"},
};

static const sl_target_file_conf file_defaults = {.keep = 5};

static void file_check_conf(const sl_target_config *tc, const sl_conf_check *chk)
{
    const sl_target_file_conf *c = tc->conf;
    if (!c->path)
        chk->problem(chk->ctx, NULL, "target.file needs a path");
}

const sl_target_ops sl_target_file_ops = {
    .abi_version = SL_CONNECTOR_ABI_VERSION,
    .name = "file",
    .open = file_open,
    .deliver = file_deliver,
    .close = file_close,
    .conf_keys = file_keys,
    .nconf_keys = sizeof file_keys / sizeof *file_keys,
    .conf_size = sizeof(sl_target_file_conf),
    .conf_defaults = &file_defaults,
    .doc = "append events as NDJSON lines to a file",
    .check_conf = file_check_conf,
};
