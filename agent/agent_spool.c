/*
 * agent/agent_spool.c — the Databus agent's disk queue: writing, reading,
 * listing and setting aside spool files (layout in agent/agent_spool.h).
 */
#include "agent/agent_spool.h"

#include "core/base/crc32c.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SPOOL_MAGIC "SLSPOOL1"
#define SPOOL_MAX_FILE (64u << 20) /* a batch is at most a few MiB; refuse absurd files */

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void spool_path(char *out, size_t cap, const char *dir, uint64_t seq, const char *ext)
{
    snprintf(out, cap, "%s/%020" PRIu64 ".%s", dir, seq, ext);
}

/* Syncs the directory so that a rename or unlink in it survives a crash. */
static int sync_dir(const char *dir, sl_error *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return sl_error_errno(err, errno, "spool dir %s", dir);
    int rc = 0;
    if (fsync(fd) != 0)
        rc = sl_error_errno(err, errno, "spool dir %s: fsync", dir);
    close(fd);
    return rc;
}

static int mkdir_p(const char *dir, sl_error *err)
{
    char tmp[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof tmp)
        return sl_error_set(err, SL_EINVAL, "spool dir \"%s\": empty or too long", dir);
    memcpy(tmp, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (tmp[i] != '/' && tmp[i] != '\0')
            continue;
        char c = tmp[i];
        tmp[i] = '\0';
        if (mkdir(tmp, 0700) != 0 && errno != EEXIST)
            return sl_error_errno(err, errno, "spool dir: mkdir %s", tmp);
        tmp[i] = c;
    }
    /* The spool holds acknowledged events and is read back as the agent's
     * own: a directory another user can write to (or a symlink to one) would
     * let them add, replace or remove batches. lstat, so that a symlink is
     * refused rather than followed. */
    struct stat st;
    if (lstat(dir, &st) != 0)
        return sl_error_errno(err, errno, "spool dir %s", dir);
    if (!S_ISDIR(st.st_mode))
        return sl_error_set(err, SL_EINVAL, "spool dir %s: not a directory (symlinks are refused)",
                            dir);
    if (st.st_uid != getuid())
        return sl_error_set(err, SL_EINVAL,
                            "spool dir %s: owned by uid %u, not by this user (uid %u); refusing "
                            "to use it",
                            dir, (unsigned)st.st_uid, (unsigned)getuid());
    if (st.st_mode & 077)
        return sl_error_set(err, SL_EINVAL,
                            "spool dir %s: mode %04o gives other users access; want 0700 "
                            "(chmod 700 %s)",
                            dir, (unsigned)(st.st_mode & 07777), dir);
    return 0;
}

int sl__spool_prepare(const char *dir, sl_error *err)
{
    int rc = mkdir_p(dir, err);
    if (rc)
        return rc;
    DIR *d = opendir(dir);
    if (!d)
        return sl_error_errno(err, errno, "spool dir %s", dir);
    /* A .tmp file is a batch whose write did not finish: it was never
     * acknowledged, so removing it loses nothing that was promised. */
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l > 4 && strcmp(e->d_name + l - 4, ".tmp") == 0) {
            char p[4400];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    }
    closedir(d);
    return 0;
}

static int write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

int sl__spool_write(const char *dir, uint64_t seq, const char *set, const char *lane,
                    uint32_t count, const void *body, size_t len, uint64_t *file_bytes,
                    sl_error *err)
{
    size_t sl = strlen(set), ll = strlen(lane);
    if (sl == 0 || sl > 128 || ll > 32 || len > SPOOL_MAX_FILE)
        return sl_error_set(err, SL_EINVAL, "spool: bad batch (set %zu, lane %zu, %zu bytes)", sl,
                            ll, len);
    uint8_t hdr[SL_SPOOL_HEADER + 128 + 32];
    size_t hl = SL_SPOOL_HEADER + sl + ll;
    memcpy(hdr, SPOOL_MAGIC, 8);
    put32(hdr + 12, count);
    put32(hdr + 16, (uint32_t)len);
    hdr[20] = (uint8_t)sl;
    hdr[21] = (uint8_t)ll;
    memcpy(hdr + SL_SPOOL_HEADER, set, sl);
    memcpy(hdr + SL_SPOOL_HEADER + sl, lane, ll);
    uint32_t crc = sl_crc32c(0, hdr + 12, hl - 12);
    crc = sl_crc32c(crc, body, len);
    put32(hdr + 8, crc);

    char tmp[4400], fin[4400];
    spool_path(tmp, sizeof tmp, dir, seq, "tmp");
    spool_path(fin, sizeof fin, dir, seq, "spool");
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return sl_error_errno(err, errno, "spool: create %s", tmp);
    if (write_all(fd, hdr, hl) != 0 || write_all(fd, body, len) != 0 || fdatasync(fd) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return sl_error_errno(err, e, "spool: write %s", tmp);
    }
    close(fd);
    if (rename(tmp, fin) != 0) {
        int e = errno;
        unlink(tmp);
        return sl_error_errno(err, e, "spool: rename %s", tmp);
    }
    /* Without the directory sync the new name might not survive a power
     * loss even though the data did; the ack promises both. */
    int rc = sync_dir(dir, err);
    if (rc) {
        unlink(fin);
        return rc;
    }
    *file_bytes = hl + len;
    return 0;
}

int sl__spool_read(const char *dir, uint64_t seq, sl_spool_hdr *h, sl_buf *body, sl_error *err)
{
    char p[4400];
    spool_path(p, sizeof p, dir, seq, "spool");
    sl_buf b = SL_BUF_INIT;
    int rc = sl_buf_read_file(&b, p, SPOOL_MAX_FILE, err);
    if (rc)
        return rc == SL_ETOOBIG ? SL_ECORRUPT : rc;
    rc = SL_ECORRUPT;
    if (b.len < SL_SPOOL_HEADER || memcmp(b.data, SPOOL_MAGIC, 8) != 0) {
        sl_error_set(err, rc, "%s: not a spool file (bad magic or too short)", p);
        goto out;
    }
    size_t sl = b.data[20], ll = b.data[21];
    uint32_t len = get32(b.data + 16);
    if (sl == 0 || sl > 128 || ll > 32 || b.len != SL_SPOOL_HEADER + sl + ll + (size_t)len) {
        sl_error_set(err, rc, "%s: lengths do not match the file size %zu", p, b.len);
        goto out;
    }
    uint32_t want = get32(b.data + 8), got = sl_crc32c(0, b.data + 12, b.len - 12);
    if (want != got) {
        sl_error_set(err, rc, "%s: CRC mismatch (header %08x, data %08x)", p, want, got);
        goto out;
    }
    h->seq = seq;
    memcpy(h->set, b.data + SL_SPOOL_HEADER, sl);
    h->set[sl] = '\0';
    memcpy(h->lane, b.data + SL_SPOOL_HEADER + sl, ll);
    h->lane[ll] = '\0';
    h->count = get32(b.data + 12);
    h->file_bytes = b.len;
    rc = 0;
    if (body && sl_buf_append(body, b.data + SL_SPOOL_HEADER + sl + ll, len) != 0)
        rc = sl_error_set(err, SL_ENOMEM, "%s: out of memory", p);
out:
    sl_buf_free(&b);
    return rc;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int sl__spool_list(const char *dir, uint64_t **out, size_t *n, sl_error *err)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return sl_error_errno(err, errno, "spool dir %s", dir);
    uint64_t *v = NULL;
    size_t cnt = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        /* Only names this module writes: 20 digits and ".spool". */
        if (strlen(e->d_name) != 26 || strcmp(e->d_name + 20, ".spool") != 0)
            continue;
        char *end;
        errno = 0;
        unsigned long long s = strtoull(e->d_name, &end, 10);
        if (errno || end != e->d_name + 20)
            continue;
        if (cnt == cap && SL_GROW(v, cap, 64)) {
            free(v);
            closedir(d);
            return sl_error_set(err, SL_ENOMEM, "spool dir %s: out of memory", dir);
        }
        v[cnt++] = s;
    }
    closedir(d);
    if (cnt)
        qsort(v, cnt, sizeof *v, cmp_u64);
    *out = v;
    *n = cnt;
    return 0;
}

int sl__spool_set_aside(const char *dir, uint64_t seq, const char *sub, sl_error *err)
{
    char sd[4200], from[4400], to[4500];
    snprintf(sd, sizeof sd, "%s/%s", dir, sub);
    if (mkdir(sd, 0700) != 0 && errno != EEXIST)
        return sl_error_errno(err, errno, "spool: mkdir %s", sd);
    spool_path(from, sizeof from, dir, seq, "spool");
    /* Sequence numbers start again at 1 when a run's spool was drained, so
     * a name may already be taken there by an earlier run's file: never
     * replace it (link fails with EEXIST), add a suffix instead. */
    for (unsigned i = 0;; i++) {
        if (i == 0)
            spool_path(to, sizeof to, sd, seq, "spool");
        else
            snprintf(to, sizeof to, "%s/%020" PRIu64 "-%u.spool", sd, seq, i);
        if (link(from, to) == 0)
            break;
        if (errno != EEXIST || i >= 100000)
            return sl_error_errno(err, errno, "spool: move %s to %s", from, sd);
    }
    if (unlink(from) != 0)
        return sl_error_errno(err, errno, "spool: move %s to %s: unlink", from, sd);
    sync_dir(sd, NULL);
    sync_dir(dir, NULL);
    return 0;
}

int sl__spool_remove(const char *dir, uint64_t seq, sl_error *err)
{
    char p[4400];
    spool_path(p, sizeof p, dir, seq, "spool");
    if (unlink(p) != 0 && errno != ENOENT)
        return sl_error_errno(err, errno, "spool: remove %s", p);
    return 0;
}
