/*
 * tests/plugins/bad_table.c — a plugin whose tables the registry refuses
 * (a built-in kind's name, a target without deliver, a bad name), each
 * with its own message; its one good kind, source.fine, is still added.
 */
#include "plugins/sluice_plugin.h"

#include <stddef.h>

static int open_(const sl_source_config *cfg, const sl_source_host *host, void **impl,
                 sl_error *err)
{
    (void)cfg, (void)host, (void)err;
    *impl = NULL;
    return 0;
}
static void stop_(void *impl)
{
    (void)impl;
}
static void close_(void *impl)
{
    (void)impl;
}
static int topen_(const sl_target_config *cfg, const sl_target_env *env, void **impl, sl_error *err)
{
    (void)cfg, (void)env, (void)err;
    *impl = NULL;
    return 0;
}

static const sl_source_ops builtin_name = {.abi_version = SL_CONNECTOR_ABI_VERSION,
                                           .name = "file",
                                           .open = open_,
                                           .stop = stop_,
                                           .close = close_};
static const sl_source_ops bad_name = {.abi_version = SL_CONNECTOR_ABI_VERSION,
                                       .name = "Bad-Name",
                                       .open = open_,
                                       .stop = stop_,
                                       .close = close_};
static const sl_target_ops no_deliver = {
    .abi_version = SL_CONNECTOR_ABI_VERSION, .name = "nodeliver", .open = topen_, .close = close_};
static const sl_source_ops fine = {.abi_version = SL_CONNECTOR_ABI_VERSION,
                                   .name = "fine",
                                   .open = open_,
                                   .stop = stop_,
                                   .close = close_};

SL_PLUGIN_EXPORT const uint32_t sluice_plugin_abi = SL_CONNECTOR_ABI_VERSION;

SL_PLUGIN_EXPORT int sluice_plugin_register(uint32_t abi, const sl_plugin_registry *reg);
int sluice_plugin_register(uint32_t abi, const sl_plugin_registry *reg)
{
    (void)abi;
    int refused = 0;
    refused += reg->add_source(reg->ctx, &builtin_name) == SL_EINVAL;
    refused += reg->add_source(reg->ctx, &bad_name) == SL_EINVAL;
    refused += reg->add_target(reg->ctx, &no_deliver) == SL_EINVAL;
    refused += reg->add_source(reg->ctx, &fine) == SL_EINVAL;
    return refused == 3 ? 0 : SL_EINVAL;
}
