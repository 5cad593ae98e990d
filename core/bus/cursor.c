/*
 * core/bus/cursor.c — rule cursors on disk (two slots, see cursor.h).
 */
#include "core/bus/cursor.h"

#include "core/base/clock.h"
#include "core/base/crc32c.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SLOT 32

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int mkdirs(char *path, sl_error *err)
{
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int r = mkdir(path, 0755);
        *p = '/';
        if (r && errno != EEXIST)
            return sl_error_errno(err, errno, "mkdir %s", path);
    }
    return 0;
}

int sl_cursor_open(sl_cursor *c, const char *data_dir, const char *rule, const char *set,
                   int32_t partition, bool *found, sl_error *err)
{
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/rules/%s/%s/%d.cursor", data_dir, rule, set,
                         partition) >= sizeof path)
        return sl_error_set(err, SL_EINVAL, "cursor path too long under %s", data_dir);
    int rc = mkdirs(path, err);
    if (rc)
        return rc;
    memset(c, 0, sizeof *c);
    c->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (c->fd < 0)
        return sl_error_errno(err, errno, "open %s", path);
    uint8_t buf[2 * SLOT];
    ssize_t n = pread(c->fd, buf, sizeof buf, 0);
    *found = false;
    if (n < 0) {
        int e = errno;
        close(c->fd);
        c->fd = -1;
        return sl_error_errno(err, e, "read %s", path);
    }
    for (int s = 0; n > 0 && s < 2; s++) {
        const uint8_t *p = buf + s * SLOT;
        if ((s + 1) * SLOT > n || memcmp(p, "SLC1", 4) ||
            sl_crc32c(0, p, 20) != (uint32_t)get64(p + 20) /* low 4 bytes */)
            continue;
        uint64_t seq = get64(p + 4);
        if (!*found || seq > c->seq) {
            c->seq = seq;
            c->offset = (int64_t)get64(p + 12);
            *found = true;
        }
    }
    c->synced_ns = sl_clock_mono_ns();
    if (n > 0 && !*found) /* written once, now unreadable: not a new rule */
        return sl_error_set(err, SL_ECORRUPT, "%s: both slots are damaged", path);
    return 0;
}

int sl_cursor_commit(sl_cursor *c, int64_t offset, int64_t sync_interval_ns, sl_error *err)
{
    uint8_t p[SLOT] = {'S', 'L', 'C', '1'};
    uint64_t seq = c->seq + 1;
    put64(p + 4, seq);
    put64(p + 12, (uint64_t)offset);
    uint32_t crc = sl_crc32c(0, p, 20);
    for (int i = 0; i < 4; i++)
        p[20 + i] = (uint8_t)(crc >> (8 * i));
    if (pwrite(c->fd, p, SLOT, (off_t)(seq % 2) * SLOT) != SLOT)
        return sl_error_errno(err, errno ? errno : EIO, "cursor write");
    c->seq = seq;
    c->offset = offset;
    c->dirty = true;
    int64_t now = sl_clock_mono_ns();
    if (now - c->synced_ns >= sync_interval_ns) {
        if (fdatasync(c->fd))
            return sl_error_errno(err, errno, "cursor fdatasync");
        c->synced_ns = now;
        c->dirty = false;
    }
    return 0;
}

void sl_cursor_close(sl_cursor *c)
{
    if (c->fd < 0)
        return;
    if (c->dirty)
        (void)fdatasync(c->fd);
    close(c->fd);
    c->fd = -1;
}
