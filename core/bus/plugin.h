/*
 * core/bus/plugin.h — loadable connector plugins (plugins/README.md documents
 * the ABI for plugin authors).
 *
 * `server { plugin_dir = "…" }` makes the config loader dlopen every *.so
 * in that folder (once per process: a reload does not load a file twice).
 * A plugin exports
 *
 *     const uint32_t sluice_plugin_abi = SL_CONNECTOR_ABI_VERSION;
 *     int sluice_plugin_register(uint32_t abi, const sl_plugin_registry *reg);
 *
 * sluice reads sluice_plugin_abi first and refuses a plugin built against
 * another version with a message naming both versions, without calling it.
 * The register function adds its source and target tables; their kinds are
 * then usable as source.NAME { … } and target.NAME { … } exactly like the
 * built-in ones (a plugin cannot replace a built-in kind or another
 * plugin's). Plugins are never unloaded.
 */
#ifndef SL_PLUGIN_H
#define SL_PLUGIN_H

#include "core/base/buf.h"
#include "core/bus/connector.h"

#include <stdint.h>

typedef struct sl_plugin_registry {
    uint32_t abi_version; /* SL_CONNECTOR_ABI_VERSION */
    void *ctx;
    /* Register a kind; 0, or SL_EINVAL (name taken, bad table). */
    int (*add_source)(void *ctx, const sl_source_ops *ops);
    int (*add_target)(void *ctx, const sl_target_ops *ops);
} sl_plugin_registry;

#define SL_PLUGIN_ABI_SYMBOL "sluice_plugin_abi"
#define SL_PLUGIN_REGISTER_SYMBOL "sluice_plugin_register"
typedef int sl_plugin_register_fn(uint32_t abi_version, const sl_plugin_registry *reg);

/* Whether name is a built-in kind (of either family): no plugin may take it. */
typedef bool sl_plugin_builtin_fn(const char *name);

/* Loads the *.so files of dir not loaded yet, in name order, refusing kinds
 * that is_builtin (may be NULL) names. Appends one line per problem to diag
 * ("plugin FILE: …") and returns SL_EINVAL when any plugin could not be
 * loaded (the others stay loaded); 0 otherwise. Thread-safe. */
int sl_plugin_load_dir(const char *dir, sl_plugin_builtin_fn *is_builtin, sl_buf *diag);

/* A kind by name among the plugins loaded from dir (a config's plugin_dir,
 * as given to sl_plugin_load_dir; NULL: none), or NULL. A config sees only
 * its own folder's plugins, so a reload that drops plugin_dir drops their
 * kinds too. */
const sl_source_ops *sl_plugin_source(const char *name, const char *dir);
const sl_target_ops *sl_plugin_target(const char *name, const char *dir);

/* Names of the kinds loaded from dir, e.g. "source.exec, target.count"
 * ("" none). */
void sl_plugin_kinds(const char *dir, char *out, size_t cap);

#endif
