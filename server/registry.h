/*
 * server/registry.h — the built-in connector kinds (connectors/), in the
 * order docs/config.md lists them. Only the config loader looks kinds up
 * (plugins' kinds through core/bus/plugin.h); everything after it uses the
 * table the loader stored in each block's config (cfg->ops).
 */
#ifndef SL_REGISTRY_H
#define SL_REGISTRY_H

#include "core/bus/connector.h"

#include <stdbool.h>
#include <stddef.h>

/* The built-in target kinds (file, set, http, kafka); *n gets their count. */
const sl_target_ops *const *sl_registry_targets(size_t *n);

/* The built-in source kinds (file, webhook, kafka); *n gets their count. */
const sl_source_ops *const *sl_registry_sources(size_t *n);

/* The built-in kind called name, or NULL. */
const sl_target_ops *sl_registry_target(const char *name);
const sl_source_ops *sl_registry_source(const char *name);

/* Whether name is a built-in kind of either family (what no plugin may
 * call its kinds: core/bus/plugin.h's sl_plugin_builtin_fn). */
bool sl_registry_builtin(const char *name);

#endif
