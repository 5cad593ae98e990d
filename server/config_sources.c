/*
 * server/config_sources.c — the connector blocks of the config loader:
 * target.KIND { … } (a rule's target or targets) and source.KIND { … },
 * built-in kinds through their key tables, plugin kinds through their
 * declared keys.
 */
#include "server/config_internal.h"

#include "core/base/buf.h"
#include "core/bus/plugin.h"
#include "server/registry.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keys every source block takes. */
#define SOURCE_COMMON_KEYS                                                                         \
    {"name",                                                                                       \
     K_STRING,                                                                                     \
     FIELD(sl_source_config, name),                                                                \
     0,                                                                                            \
     0,                                                                                            \
     "KIND-SET",                                                                                   \
     "unique among sources; its state lives in DATA/sources/NAME"},                                \
        {"set",                                                                                    \
         K_STRING,                                                                                 \
         FIELD(sl_source_config, set),                                                             \
         0,                                                                                        \
         0,                                                                                        \
         "required",                                                                               \
         "the event set the events go to (declared with `set`)"},                                  \
        {"lane",                                                                                   \
         K_STRING,                                                                                 \
         FIELD(sl_source_config, lane),                                                            \
         0,                                                                                        \
         0,                                                                                        \
         "base",                                                                                   \
         "lane stamped on every event (an event naming another lane is refused)"},                 \
        {"type",                                                                                   \
         K_STRING,                                                                                 \
         FIELD(sl_source_config, type),                                                            \
         0,                                                                                        \
         0,                                                                                        \
         "per kind",                                                                               \
         "CloudEvent `type` of payloads that are not CloudEvents"},                                \
    {                                                                                              \
        "source", K_STRING, FIELD(sl_source_config, source), 0, 0, "per kind",                     \
            "CloudEvent `source` of payloads that are not CloudEvents"                             \
    }

#define SOURCE_START_KEY                                                                           \
    {                                                                                              \
        "start", K_START, FIELD(sl_source_config, from_beginning), 0, 0, "\"end\"",                \
            "where a source without a stored position starts: \"beginning\" or \"end\""            \
    }

/* Every source block takes these (the last, start, unless the kind says
 * no_start); the kind's own keys follow (sl_source_ops.conf_keys). */
static const key source_common_keys[] = {SOURCE_COMMON_KEYS, SOURCE_START_KEY};

#define NCOMMON(ops)                                                                               \
    (sizeof source_common_keys / sizeof *source_common_keys - ((ops)->no_start ? 1 : 0))

/* "file, set, http, kafka" plus the plugins' kinds of that family. */
static void known_kinds(const loader *ld, char *out, size_t cap, bool targets)
{
    char plugins[512];
    const char *family = targets ? "target" : "source";
    sl_plugin_kinds(ld->cfg->plugin_dir, plugins, sizeof plugins);
    size_t o = 0, nk = 0;
    if (targets) {
        const sl_target_ops *const *t = sl_registry_targets(&nk);
        for (size_t i = 0; i < nk && o < cap; i++)
            o += (size_t)snprintf(out + o, cap - o, "%s%s", i ? ", " : "", t[i]->name);
    } else {
        const sl_source_ops *const *sk = sl_registry_sources(&nk);
        for (size_t i = 0; i < nk && o < cap; i++)
            o += (size_t)snprintf(out + o, cap - o, "%s%s", i ? ", " : "", sk[i]->name);
    }
    size_t fl = strlen(family);
    for (char *p = plugins; *p && o < cap;) {
        char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n > fl + 1 && strncmp(p, family, fl) == 0 && p[fl] == '.')
            o += (size_t)snprintf(out + o, cap - o, ", %.*s", (int)(n - fl - 1), p + fl + 1);
        p += n;
        while (*p == ',' || *p == ' ')
            p++;
    }
}

/* A new target of kind ops in r, its own config at its defaults. */
static sl_target_config *new_target(loader *ld, sl_rule_config *r, int line,
                                    const sl_target_ops *ops)
{
    sl_target_config *grown = realloc(r->targets, (r->ntargets + 1) * sizeof *grown);
    if (!grown) {
        ld->oom = 1;
        return NULL;
    }
    r->targets = grown;
    sl_target_config *t = &r->targets[r->ntargets++];
    memset(t, 0, sizeof *t);
    t->line = line;
    t->ops = ops;
    t->kind_name = ops->name;
    if (ops->conf_size &&
        !(t->conf = sl__config_new_conf(ld, ops->conf_size, ops->conf_defaults))) {
        r->ntargets--;
        return NULL;
    }
    return t;
}

/* target.NAME { … } of a plugin (the target value is at idx). */
static void read_plugin_target(loader *ld, int idx, const block *b, int line, sl_rule_config *r,
                               const sl_target_ops *ops)
{
    sl_target_config *t = new_target(ld, r, line, ops);
    if (!t)
        return;
    char what[200];
    snprintf(what, sizeof what, "%s: target.%s", b->what, ops->name);
    block tb = {what, line, t};
    lua_getfield(ld->L, idx, "body");
    sl__config_read_plugin_body(ld, lua_gettop(ld->L), NULL, 0, ops->keys, ops->nkeys, &tb,
                                &t->options, &t->noptions);
    lua_pop(ld->L, 1);
}

static void read_target(loader *ld, int idx, const block *b, int line, sl_rule_config *r)
{
    lua_State *L = ld->L;
    lua_getglobal(L, "__sluice_is_target");
    lua_pushvalue(L, idx);
    lua_call(L, 1, 1);
    bool is = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (!is) {
        sl__config_problem(
            ld, line, "%s: a target must be made with target.KIND { … } (file, set, http, kafka)",
            b->what);
        return;
    }
    lua_getfield(L, idx, "kind");
    const char *kind = lua_tostring(L, -1);
    lua_getfield(L, idx, "line");
    int tline = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
    const sl_target_ops *tk = sl_registry_target(kind);
    const sl_target_ops *plugin = tk || !kind ? NULL : sl_plugin_target(kind, ld->cfg->plugin_dir);
    if (!tk && !plugin) {
        char known[600];
        known_kinds(ld, known, sizeof known, true);
        sl__config_problem(ld, tline, "%s: unknown target kind target.%s (known: %s)", b->what,
                           kind ? kind : "?", known);
        lua_pop(L, 1);
        return;
    }
    if (plugin) {
        read_plugin_target(ld, idx, b, tline, r, plugin);
        lua_pop(L, 1);
        return;
    }
    lua_pop(L, 1);
    sl_target_config *t = new_target(ld, r, tline, tk);
    if (!t)
        return;
    char what[200];
    snprintf(what, sizeof what, "%s: target.%s", b->what, tk->name);
    block tb = {what, tline, t->conf};
    lua_getfield(L, idx, "body");
    sl__config_check_block(ld, lua_gettop(L), tk->conf_keys, tk->nconf_keys, &tb, NULL);
    lua_pop(L, 1);
}

void sl__config_read_targets(loader *ld, int idx, const key *k, const block *b, sl_rule_config *r)
{
    lua_State *L = ld->L;
    r->target_given = true;
    int line = sl__config_key_line(ld, b->line, k->name);
    if (!lua_istable(L, idx)) {
        sl__config_problem(ld, line, "%s: %s must be a target or a list of targets", b->what,
                           k->name);
        return;
    }
    lua_getglobal(L, "__sluice_is_target");
    lua_pushvalue(L, idx);
    lua_call(L, 1, 1);
    bool single = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (single) {
        read_target(ld, idx, b, line, r);
        return;
    }
    lua_Integer n = luaL_len(L, idx);
    if (n == 0 && (lua_pushnil(L), lua_next(L, idx))) { /* neither a target nor a list */
        lua_pop(L, 2);
        sl__config_problem(
            ld, line, "%s: a target must be made with target.KIND { … } (file, set, http, kafka)",
            b->what);
        return;
    }
    for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, idx, i);
        read_target(ld, lua_gettop(L), b, line, r);
        lua_pop(L, 1);
    }
}

/* source.KIND { … } (body at idx). */
void sl__config_read_source(loader *ld, int body, const char *kind, int line)
{
    sl_config *cfg = ld->cfg;
    const sl_source_ops *sk = sl_registry_source(kind);
    const sl_source_ops *plugin = sk ? NULL : sl_plugin_source(kind, cfg->plugin_dir);
    if (!sk && !plugin) {
        char known[600];
        known_kinds(ld, known, sizeof known, false);
        sl__config_problem(ld, line, "unknown source kind source.%s (known: %s)", kind, known);
        return;
    }
    sl_source_config *g = sl__config_grow(ld, cfg->sources, cfg->nsources, sizeof *g);
    if (!g)
        return;
    cfg->sources = g;
    sl_source_config *sc = &cfg->sources[cfg->nsources];
    sc->index = cfg->nsources++;
    sc->owner = cfg;
    sc->line = line;
    sc->ops = sk ? sk : plugin;
    sc->kind_name = sc->ops->name;
    if (sc->ops->conf_size &&
        !(sc->conf = sl__config_new_conf(ld, sc->ops->conf_size, sc->ops->conf_defaults)))
        return;
    char what[200];
    snprintf(what, sizeof what, "source.%s", sc->kind_name);
    block b = {what, line, sc};
    if (sk) {
        block own = {what, line, sc->conf};
        sl__config_check_block2(ld, body, source_common_keys, NCOMMON(sk), &b, sk->conf_keys,
                                sk->nconf_keys, &own, NULL);
    } else {
        sl__config_read_plugin_body(ld, body, KEYS(source_common_keys), plugin->keys, plugin->nkeys,
                                    &b, &sc->options, &sc->noptions);
    }
    if (!sc->name && sc->set) {
        size_t n = strlen(sc->kind_name) + strlen(sc->set) + 2;
        if ((sc->name = malloc(n)))
            snprintf(sc->name, n, "%s-%s", sc->kind_name, sc->set);
        else
            ld->oom = 1;
    }
}

int sl__config_kinds_markdown(sl_buf *out)
{
    int rc = 0;
    size_t n = 0;
    const sl_target_ops *const *t = sl_registry_targets(&n);
    for (size_t i = 0; !rc && i < n; i++) {
        char title[64];
        snprintf(title, sizeof title, "target.%s { … }", t[i]->name);
        rc = sl__config_keys_table(out, title, t[i]->conf_keys, t[i]->nconf_keys);
        if (!rc)
            rc = sl_buf_printf(out, "\n%s.\n", t[i]->doc);
    }
    const sl_source_ops *const *sk = sl_registry_sources(&n);
    for (size_t i = 0; !rc && i < n; i++) {
        char title[64];
        snprintf(title, sizeof title, "source.%s { … }", sk[i]->name);
        rc = sl__config_keys_table(out, title, source_common_keys, NCOMMON(sk[i]));
        if (!rc)
            rc = sl__config_keys_rows(out, sk[i]->conf_keys, sk[i]->nconf_keys);
        if (!rc)
            rc = sl_buf_printf(out, "\n%s.\n", sk[i]->doc);
    }
    return rc;
}

/* The dlq goes through target.set's own table: its key "set" names the set. */
void sl__config_dlq_target(loader *ld, sl_rule_config *r)
{
    const sl_target_ops *ops = sl_registry_target("set");
    if (!r->dlq || !ops)
        return;
    sl_target_config *t = &r->dlq_target;
    *t = (sl_target_config){.ops = ops, .kind_name = ops->name, .line = r->line};
    if (!(t->conf = sl__config_new_conf(ld, ops->conf_size, ops->conf_defaults)))
        return;
    for (size_t i = 0; i < ops->nconf_keys; i++)
        if (strcmp(ops->conf_keys[i].name, "set") == 0)
            *(char **)((char *)t->conf + ops->conf_keys[i].off) =
                sl__config_dup(ld, r->dlq, strlen(r->dlq));
}

void sl__config_free_target(sl_target_config *tc)
{
    if (tc->ops)
        sl__config_free_keys(tc->ops->conf_keys, tc->ops->nconf_keys, tc->conf);
    free(tc->conf);
    sl__config_free_lines(tc->options, tc->noptions);
}

void sl__config_free_source(sl_source_config *sc)
{
    free(sc->name);
    free(sc->set);
    free(sc->lane);
    free(sc->type);
    free(sc->source);
    if (sc->ops)
        sl__config_free_keys(sc->ops->conf_keys, sc->ops->nconf_keys, sc->conf);
    free(sc->conf);
    sl__config_free_lines(sc->options, sc->noptions);
}
