/* connectors/source_file.c — placeholder until source.file is written. */
#include "core/connector.h"

static int open_(const sl_source_config *cfg, const sl_source_host *host, void **impl,
                 sl_error *err)
{
    (void)cfg, (void)host, (void)impl;
    return sl_error_set(err, SL_EINVAL, "source.file is not built yet");
}

const sl_source_ops sl__source_file_ops = {
    .abi_version = SL_CONNECTOR_ABI_VERSION,
    .name = "file",
    .open = open_,
};
