/*
 * plugins/sluice_plugin.h — what a sluice plugin includes (plugins/README.md).
 *
 * It brings the ABI (core/bus/plugin.h, core/bus/connector.h) and two conveniences
 * that need nothing from the server's code (libsluice-core.a): the export marker for the two symbols
 * sluice looks up, and a look-up of one key's value among the "name=value"
 * option lines of a block (sl_target_config.options for a target plugin,
 * sl_source_config.options in a source plugin's check(); a running source
 * uses host->option()).
 */
#ifndef SL_SLUICE_PLUGIN_H
#define SL_SLUICE_PLUGIN_H

#include "core/bus/plugin.h"

#include <stddef.h>
#include <string.h>

/* sluice is built with -fvisibility=hidden and so are plugins built by its
 * Makefile: the two symbols must be exported explicitly. */
#define SL_PLUGIN_EXPORT __attribute__((visibility("default")))

/* The value of key name among n option lines ("name=value", value in the
 * normalised text of core/bus/connector.h), or NULL when the block did not set
 * it. Points into lines. */
static inline const char *sl_plugin_option(char *const *lines, size_t n, const char *name)
{
    size_t len = strlen(name);
    for (size_t i = 0; i < n; i++)
        if (strncmp(lines[i], name, len) == 0 && lines[i][len] == '=')
            return lines[i] + len + 1;
    return NULL;
}

#endif
