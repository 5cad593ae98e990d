/*
 * tests/plugins/old_abi.c — a plugin built for ABI 1, before the connector
 * config structs held each kind's own struct (ABI 2): sluice must refuse it
 * without calling anything (register aborts to prove it).
 */
#include "plugins/sluice_plugin.h"

#include <stdlib.h>

SL_PLUGIN_EXPORT const uint32_t sluice_plugin_abi = 1;

SL_PLUGIN_EXPORT int sluice_plugin_register(uint32_t abi, const sl_plugin_registry *reg);
int sluice_plugin_register(uint32_t abi, const sl_plugin_registry *reg)
{
    (void)abi, (void)reg;
    abort();
}
