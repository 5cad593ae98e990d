/* core/plugin.c — placeholder until plugin loading is written. */
#include "core/plugin.h"

#include <stdio.h>

int sl_plugin_load_dir(const char *dir, sl_buf *diag)
{
    if (diag)
        sl_buf_printf(diag, "plugin_dir %s: plugins are not built yet\n", dir);
    return SL_EINVAL;
}
const sl_source_ops *sl_plugin_source(const char *name) { (void)name; return NULL; }
const sl_target_ops *sl_plugin_target(const char *name) { (void)name; return NULL; }
void sl_plugin_kinds(char *out, size_t cap)
{
    if (cap)
        out[0] = '\0';
}
