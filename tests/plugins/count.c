/*
 * tests/plugins/count.c — target.count, a test-only target plugin: appends
 * each payload it is given as one line to `path` (an absolute path), so
 * that tests/integration/test_plugins.c can see what a rule delivered
 * through a plugin. Like every plugin it uses libc only.
 */
#include "plugins/sluice_plugin.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

static const sl_plugin_key count_keys[] = {
    {"path", SL_PKEY_STRING, true, "", "the file each payload is appended to, one per line"},
};

typedef struct count_target {
    int fd;
    pthread_mutex_t mu;
} count_target;

static int count_open(const sl_target_config *cfg, const sl_target_env *env, void **impl,
                      sl_error *err)
{
    (void)env;
    const char *path = sl_plugin_option(cfg->options, cfg->noptions, "path");
    count_target *t = calloc(1, sizeof *t);
    if (!t || !path) {
        free(t);
        if (err) {
            err->code = SL_EINVAL;
            snprintf(err->msg, sizeof err->msg, "target.count: %s",
                     path ? "out of memory" : "no path");
        }
        return SL_EINVAL;
    }
    t->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (t->fd < 0) {
        if (err) {
            err->code = SL_EIO;
            snprintf(err->msg, sizeof err->msg, "target.count: %s: %s", path, strerror(errno));
        }
        free(t);
        return SL_EIO;
    }
    pthread_mutex_init(&t->mu, NULL);
    *impl = t;
    return 0;
}

static void count_deliver(void *impl, const sl_delivery *d, size_t n, sl_deliver_done_fn *done,
                          void *ctx)
{
    count_target *t = impl;
    for (size_t i = 0; i < n; i++) {
        static char nl[] = "\n";
        struct iovec v[2] = {{(void *)d[i].data, d[i].len}, {nl, 1}};
        pthread_mutex_lock(&t->mu);
        ssize_t w = writev(t->fd, v, 2);
        pthread_mutex_unlock(&t->mu);
        if (w == (ssize_t)(d[i].len + 1))
            done(ctx, i, 0, NULL);
        else
            done(ctx, i, SL_EIO, "target.count: short write");
    }
}

static void count_close(void *impl)
{
    count_target *t = impl;
    close(t->fd);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

static const sl_target_ops count_ops = {
    .abi_version = SL_CONNECTOR_ABI_VERSION,
    .name = "count",
    .open = count_open,
    .deliver = count_deliver,
    .close = count_close,
    .keys = count_keys,
    .nkeys = sizeof count_keys / sizeof *count_keys,
};

SL_PLUGIN_EXPORT const uint32_t sluice_plugin_abi = SL_CONNECTOR_ABI_VERSION;

SL_PLUGIN_EXPORT int sluice_plugin_register(uint32_t abi, const sl_plugin_registry *reg);
int sluice_plugin_register(uint32_t abi, const sl_plugin_registry *reg)
{
    (void)abi;
    return reg->add_target(reg->ctx, &count_ops);
}
