/*
 * core/log/index.c — memory-mapped fixed-entry index files (see core/log/index.h).
 */
#include "core/log/index.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int sl_index_open(sl_index *ix, const char *path, size_t entry_size, size_t max_entries,
                  int writable, sl_error *err)
{
    memset(ix, 0, sizeof *ix);
    ix->fd = -1;
    ix->entry_size = entry_size;
    ix->writable = writable;
    ix->path = strdup(path);
    if (!ix->path)
        return SL_ENOMEM;
    int rc;
    ix->fd = open(path, writable ? O_RDWR | O_CREAT | O_CLOEXEC : O_RDONLY | O_CLOEXEC, 0644);
    if (ix->fd < 0) {
        rc = sl_error_errno(err, errno, "open %s", path);
        goto fail;
    }
    struct stat st;
    if (fstat(ix->fd, &st) < 0) {
        rc = sl_error_errno(err, errno, "stat %s", path);
        goto fail;
    }
    size_t present = (size_t)st.st_size / entry_size;
    if (writable && present < max_entries) {
        /* Reserve real blocks, not a sparse hole: a store through the mapping
         * into a hole on a full disk would kill the process with SIGBUS. */
        int e = posix_fallocate(ix->fd, 0, (off_t)(max_entries * entry_size));
        if (e == EOPNOTSUPP || e == EINVAL)
            e = ftruncate(ix->fd, (off_t)(max_entries * entry_size)) < 0 ? errno : 0;
        if (e) {
            rc = sl_error_errno(err, e, "preallocate %s", path);
            goto fail;
        }
    }
    ix->max_entries = writable ? (present > max_entries ? present : max_entries) : present;
    ix->map_len = ix->max_entries * entry_size;
    if (ix->map_len) {
        void *m = mmap(NULL, ix->map_len, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED,
                       ix->fd, 0);
        if (m == MAP_FAILED) {
            rc = sl_error_errno(err, errno, "mmap %s", path);
            goto fail;
        }
        ix->map = m;
    }
    atomic_store(&ix->count, present);
    return 0;
fail:
    if (ix->fd >= 0)
        close(ix->fd);
    free(ix->path);
    ix->path = NULL;
    ix->fd = -1;
    return rc;
}

uint8_t *sl_index_entry(const sl_index *ix, size_t i)
{
    return ix->map + i * ix->entry_size;
}

size_t sl_index_count(const sl_index *ix)
{
    return atomic_load_explicit(&ix->count, memory_order_acquire);
}

int sl_index_append(sl_index *ix, const void *entry)
{
    size_t n = atomic_load_explicit(&ix->count, memory_order_relaxed);
    if (!ix->writable || n >= ix->max_entries)
        return SL_ENOSPC;
    memcpy(ix->map + n * ix->entry_size, entry, ix->entry_size);
    atomic_store_explicit(&ix->count, n + 1, memory_order_release);
    return 0;
}

void sl_index_truncate(sl_index *ix, size_t n)
{
    size_t cur = sl_index_count(ix);
    if (n >= cur)
        return;
    atomic_store_explicit(&ix->count, n, memory_order_release);
    if (ix->writable)
        memset(ix->map + n * ix->entry_size, 0, (cur - n) * ix->entry_size);
}

int sl_index_sync(sl_index *ix, sl_error *err)
{
    size_t used = sl_index_count(ix) * ix->entry_size;
    if (ix->writable && used && msync(ix->map, used, MS_SYNC) < 0)
        return sl_error_errno(err, errno, "msync %s", ix->path);
    return 0;
}

int sl_index_seal(sl_index *ix, sl_error *err)
{
    if (!ix->writable)
        return 0;
    /* Entries stay mapped: readers only touch entries below count, which lie
     * inside the trimmed file, so no page beyond the new end is accessed. */
    size_t used = sl_index_count(ix) * ix->entry_size;
    if (ftruncate(ix->fd, (off_t)used) < 0)
        return sl_error_errno(err, errno, "trim %s", ix->path);
    ix->max_entries = sl_index_count(ix);
    ix->writable = 0;
    /* A sealed index is only read, through its mapping: its descriptor can
     * go, so a closed segment costs one (its .log), not four. */
    close(ix->fd);
    ix->fd = -1;
    return 0;
}

void sl_index_close(sl_index *ix)
{
    if (!ix->path) /* never opened (or already closed) */
        return;
    if (ix->writable)
        sl_index_seal(ix, NULL);
    if (ix->map)
        munmap(ix->map, ix->map_len);
    if (ix->fd >= 0)
        close(ix->fd);
    free(ix->path);
    memset(ix, 0, sizeof *ix);
    ix->fd = -1;
}
