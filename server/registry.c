/*
 * server/registry.c — the tables of the built-in connectors: adding a
 * connector kind adds one line here (its keys live in its own file).
 */
#include "server/registry.h"

#include "connectors/source_file.h"
#include "connectors/source_kafka.h"
#include "connectors/source_webhook.h"
#include "connectors/target_file.h"
#include "connectors/target_http.h"
#include "connectors/target_kafka.h"
#include "connectors/target_set.h"

#include <string.h>

static const sl_target_ops *const targets[] = {
    &sl_target_file_ops,
    &sl_target_set_ops,
    &sl_target_http_ops,
    &sl_target_kafka_ops,
};

static const sl_source_ops *const sources[] = {
    &sl_source_file_ops,
    &sl_source_webhook_ops,
    &sl_source_kafka_ops,
};

const sl_target_ops *const *sl_registry_targets(size_t *n)
{
    *n = sizeof targets / sizeof *targets;
    return targets;
}

const sl_source_ops *const *sl_registry_sources(size_t *n)
{
    *n = sizeof sources / sizeof *sources;
    return sources;
}

const sl_target_ops *sl_registry_target(const char *name)
{
    for (size_t i = 0; name && i < sizeof targets / sizeof *targets; i++)
        if (strcmp(targets[i]->name, name) == 0)
            return targets[i];
    return NULL;
}

const sl_source_ops *sl_registry_source(const char *name)
{
    for (size_t i = 0; name && i < sizeof sources / sizeof *sources; i++)
        if (strcmp(sources[i]->name, name) == 0)
            return sources[i];
    return NULL;
}

bool sl_registry_builtin(const char *name)
{
    /* "set" is a target kind; "webhook" a source kind: each name is kept
     * from both families, so that a plugin's kind never reads like a
     * built-in of the other. */
    return sl_registry_target(name) || sl_registry_source(name);
}
