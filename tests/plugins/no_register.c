/*
 * tests/plugins/no_register.c — a plugin with the ABI symbol but without
 * sluice_plugin_register: refused with a message naming the symbol.
 */
#include "plugins/sluice_plugin.h"

SL_PLUGIN_EXPORT const uint32_t sluice_plugin_abi = SL_CONNECTOR_ABI_VERSION;
