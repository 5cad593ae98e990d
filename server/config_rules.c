/*
 * server/config_rules.c — the rule blocks of the config loader: rule "NAME"
 * { … } with its retry policy, pattern and input, its lane overrides
 * (rule.lanes, each read into a complete rule config), and the lane
 * declarations (lane "NAME" { … }, lanes.auto).
 */
#include "server/config_internal.h"

#include "core/base/lane_name.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const key rule_keys[] = {
    {"set", K_STRING, FIELD(sl_rule_config, set), 0, 0, "required",
     "the event set the rule reads (declared with `set`)"},
    {"description", K_STRING, FIELD(sl_rule_config, description), 0, 0, "", "free text"},
    {"match", K_PATTERN, FIELD(sl_rule_config, match_json), 0, 0, "every event",
     "an EventBridge event pattern, as a Lua table or a JSON string"},
    {"filter", K_FUNCTION, FIELD(sl_rule_config, filter), 0, 0, "",
     "`function(e) return true|false end`, after match"},
    {"transform", K_FUNCTION, FIELD(sl_rule_config, transform), 0, 0, "",
     "`function(e) return e | {e1, e2} | nil end`: change, fan out or drop"},
    {"transform_batch", K_FUNCTION, FIELD(sl_rule_config, transform_batch), 0, 0, "",
     "`function(events) return {…} end`: one call per batch instead of per event"},
    {"input", K_INPUT, FIELD(sl_rule_config, input), 0, 0, "the event",
     "`\"$.data\"` or `{ paths = { name = \"$.x\" }, template = [[…<name>…]] }`"},
    {"target", K_TARGETS, 0, 0, 0, 0, "",
     "where matched events go (`target.file`, `target.set`, `target.http`)"},
    {"targets", K_TARGETS, 0, 0, 0, 0, "", "a list of targets; each gets every event"},
    {"start", K_START, FIELD(sl_rule_config, from_beginning), 0, 0, "\"end\"",
     "where a new rule starts reading: \"end\" or \"beginning\""},
    {"enabled", K_BOOL, FIELD(sl_rule_config, enabled), 0, 0, "true",
     "false passes events over without delivering them (as a disabled EventBridge rule); "
     "its cursor keeps moving"},
    {"retry", K_RETRY, FIELD(sl_rule_config, retry), 0, 0, "see below",
     "`{ attempts = 185, max_age = \"24h\", backoff = \"exponential\", initial = \"100ms\", "
     "max = \"5m\" }`: how a failed delivery is retried (docs/targets.md)"},
    {"dlq", K_STRING, FIELD(sl_rule_config, dlq), 0, 0, "none",
     "dead-letter set: events that exhausted their retries or were refused go there with "
     "`sluiceerror` … attributes; without one they are dropped and counted"},
    {"ordered", K_BOOL, FIELD(sl_rule_config, ordered), 0, 0, "true",
     "keep per-partition order: a failing event holds its partition for this rule; false "
     "sets failures aside and delivers the rest concurrently"},
    {"shape", K_STRING, FIELD(sl_rule_config, shape), 0, 0, "\"cloudevents\"",
     "\"eventbridge\": the pattern, filter, transform, input and targets see each event in "
     "Amazon EventBridge's shape (`detail-type`, `detail`, `account`, `region`, `resources`; "
     "docs/eventbridge-api.md), as the rules made through the EventBridge API do"},
    {"lanes", K_LANES, 0, 0, 0, 0, "none",
     "lane overrides, `{ [\"feature-x\"] = { target = target.http { … } } }`: for events of "
     "that lane, these keys replace the rule's; only `match`, `filter`, `transform`, "
     "`transform_batch`, `input`, `target` and `targets` can be given (a `transform` or "
     "`transform_batch` replaces both, as do `target` and `targets`); the lane must be declared "
     "unless `lanes.auto = true`"},
};

/* The keys a lane override may give (rule.lanes["LANE"]). */
static const char *const override_keys[] = {"match", "filter", "transform", "transform_batch",
                                            "input", "target", "targets"};

static const key lane_keys[] = {
    {"env", K_LANEENV, FIELD(sl_lane_decl, env), 0, 0, "\"boe\"",
     "\"boe\" (offline tests, many lanes side by side) or \"ppe\" (pre-production)"},
    {"fallback", K_FALLBACK, FIELD(sl_lane_decl, fallback_base), 0, 0,
     "\"base\" (boe), \"none\" (ppe)",
     "what an event of the lane does at a rule without an override for it: \"base\" goes "
     "through the base rule (keeping its lane), \"none\" is not delivered (counted as "
     "`lane_unrouted`)"},
    {"description", K_STRING, FIELD(sl_lane_decl, description), 0, 0, "", "free text"},
};

static const key lanes_keys[] = {
    {"auto", K_BOOL, FIELD(sl_config, lanes_auto), 0, 0, "false",
     "accept events of undeclared lanes (and overrides naming them) as `boe` lanes; "
     "`lanes.auto = true` or `lanes { auto = true }`"},
};

static const key retry_keys[] = {
    {"attempts", K_INT, FIELD(sl_retry_config, attempts), 1, 1000000, "185",
     "deliveries of an event to a target before it goes to the `dlq`"},
    {"max_age", K_DURATION, FIELD(sl_retry_config, max_age_ms), -1, INT64_MAX, "\"24h\"",
     "how long after its first failed delivery an event is still retried (\"forever\": no "
     "limit)"},
    {"backoff", K_BACKOFF, FIELD(sl_retry_config, backoff), 0, 0, "\"exponential\"",
     "\"exponential\" (initial, doubling up to max) or \"fixed\" (initial each time); full "
     "jitter on both"},
    {"initial", K_DURATION, FIELD(sl_retry_config, initial_ms), 1, 86400000, "\"100ms\"",
     "first back-off"},
    {"max", K_DURATION, FIELD(sl_retry_config, max_ms), 1, 86400000, "\"5m\"", "longest back-off"},
};

void sl__config_read_pattern(loader *ld, int idx, const key *k, const block *b, sl_rule_config *r)
{
    int line = sl__config_key_line(ld, b->line, k->name);
    char *json;
    if (lua_type(ld->L, idx) == LUA_TSTRING) {
        size_t n;
        const char *s = lua_tolstring(ld->L, idx, &n);
        json = sl__config_dup(ld, s, n);
    } else if (lua_istable(ld->L, idx)) {
        json = sl__config_lua_to_json(ld, idx, line, "match");
    } else {
        sl__config_problem(ld, line, "%s: match must be a table or a JSON string, not a %s",
                           b->what, luaL_typename(ld->L, idx));
        return;
    }
    if (!json)
        return;
    sl_error err = {0};
    if (sl_pattern_compile(json, strlen(json), &r->pattern, &err)) {
        sl__config_problem(ld, line, "%s: match: %s", b->what,
                           err.msg[0] ? err.msg : "invalid pattern");
        free(json);
        return;
    }
    r->match_json = json;
}

void sl__config_read_input(loader *ld, int idx, const key *k, const block *b, sl_rule_config *r)
{
    lua_State *L = ld->L;
    int line = sl__config_key_line(ld, b->line, k->name);
    sl_error err = {0};
    if (lua_type(L, idx) == LUA_TSTRING) {
        if (sl_input_compile_path(lua_tostring(L, idx), &r->input, &err))
            sl__config_problem(ld, line, "%s: input: %s", b->what, err.msg);
        return;
    }
    if (!lua_istable(L, idx)) {
        sl__config_problem(ld, line,
                           "%s: input must be a path string like \"$.data\" or "
                           "{ paths = {…}, template = \"…\" }",
                           b->what);
        return;
    }
    const char *names[64], *paths[64];
    size_t n = 0;
    const char *tmpl = NULL;
    bool ok = true;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        const char *kn = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "";
        if (strcmp(kn, "template") == 0 && lua_type(L, -1) == LUA_TSTRING) {
            tmpl = lua_tostring(L, -1);
        } else if (strcmp(kn, "paths") == 0 && lua_istable(L, -1)) {
            lua_pushnil(L);
            while (lua_next(L, -2)) {
                if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING) {
                    sl__config_problem(ld, line, "%s: input.paths maps names to path strings",
                                       b->what);
                    ok = false;
                } else if (n == 64) {
                    sl__config_problem(ld, line, "%s: input.paths: at most 64 paths", b->what);
                    ok = false;
                } else {
                    names[n] = lua_tostring(L, -2);
                    paths[n++] = lua_tostring(L, -1);
                }
                lua_pop(L, 1);
            }
        } else {
            sl__config_problem(ld, line,
                               "%s: input: unknown key or wrong type \"%s\" (want paths, template)",
                               b->what, kn);
            ok = false;
        }
        lua_pop(L, 1);
    }
    if (!tmpl) {
        sl__config_problem(ld, line, "%s: input: a template string is required", b->what);
        ok = false;
    }
    if (ok && sl_input_compile_template(names, paths, n, tmpl, &r->input, &err))
        sl__config_problem(ld, line, "%s: input: %s", b->what, err.msg);
}

/* A rule's defaults (besides zeros). */
static void rule_defaults(loader *ld, sl_rule_config *r, const char *name, int line)
{
    r->name = sl__config_dup(ld, name, strlen(name));
    r->line = line;
    r->enabled = true;
    r->ordered = true;
    r->retry = (sl_retry_config){.attempts = 185,
                                 .max_age_ms = 24 * 3600 * 1000,
                                 .backoff = SL_BACKOFF_EXPONENTIAL,
                                 .initial_ms = 100,
                                 .max_ms = 5 * 60 * 1000};
}

/* Whether the table at idx has a non-nil key (raw: no metamethods). */
static bool raw_has(lua_State *L, int idx, const char *k)
{
    lua_pushstring(L, k);
    bool has = lua_rawget(L, idx) != LUA_TNIL;
    lua_pop(L, 1);
    return has;
}

/* The line of `["LANE"] =` at or after from (else of `LANE =`, else from). */
static int override_line(loader *ld, int from, const char *lane)
{
    const char *s = ld->cfg->source, *end = s + ld->cfg->source_len;
    size_t kl = strlen(lane);
    int line = 1;
    for (const char *p = s; p < end; p++) {
        if (line >= from && (*p == '"' || *p == '\'') && (size_t)(end - p) > kl + 2 &&
            memcmp(p + 1, lane, kl) == 0 && p[kl + 1] == *p) {
            const char *q = p + kl + 2;
            while (q < end && (*q == ' ' || *q == '\t' || *q == ']'))
                q++;
            if (q < end && *q == '=' && (q + 1 == end || q[1] != '='))
                return line;
        }
        if (*p == '\n')
            line++;
    }
    return sl__config_key_line(ld, from, lane);
}

/* Appends the pairs of the table at from to the table at to (raw), but the
 * keys skip says to leave out. */
static void copy_pairs(lua_State *L, int from, int to, bool (*skip)(const char *, void *),
                       void *arg)
{
    lua_pushnil(L);
    while (lua_next(L, from)) {
        const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        if (!skip || !k || !skip(k, arg)) {
            lua_pushvalue(L, -2);
            lua_pushvalue(L, -2);
            lua_rawset(L, to);
        }
        lua_pop(L, 1);
    }
}

typedef struct merge_skip {
    bool transforms, targets; /* the override gives its own */
} merge_skip;

static bool skip_in_base(const char *k, void *arg)
{
    const merge_skip *m = arg;
    return strcmp(k, "lanes") == 0 ||
           (m->transforms && (strcmp(k, "transform") == 0 || strcmp(k, "transform_batch") == 0)) ||
           (m->targets && (strcmp(k, "target") == 0 || strcmp(k, "targets") == 0));
}

/* rule.lanes[lane] (the table at own) of base rule ri (its body at body):
 * checks the override's own keys (its mistakes reported once, named by the
 * lane), then reads the base's body with the override's keys on top through
 * the same key table as a rule, into a complete rule config in
 * cfg->overrides. The merged body's other mistakes are the base rule's,
 * already reported: that read is quiet. */
static void read_override(loader *ld, int body, int own, size_t ri, const char *lane)
{
    lua_State *L = ld->L;
    sl_config *cfg = ld->cfg;
    const char *rname = cfg->rules[ri].name ? cfg->rules[ri].name : "?";
    int line = override_line(ld, cfg->rules[ri].line, lane);
    char what[300];
    snprintf(what, sizeof what, "rule \"%s\" lanes[\"%s\"]", rname, lane);
    if (!lua_istable(L, own)) {
        sl__config_problem(ld, line, "%s: an override must be a table { target = … }, not a %s",
                           what, luaL_typename(L, own));
        return;
    }
    bool ok = true;
    lua_pushnil(L);
    while (lua_next(L, own)) {
        const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        bool allowed = false;
        for (size_t i = 0; k && i < sizeof override_keys / sizeof *override_keys; i++)
            allowed = allowed || strcmp(k, override_keys[i]) == 0;
        if (!allowed) {
            sl__config_problem(
                ld, k ? sl__config_key_line(ld, line, k) : line,
                "rule \"%s\": lanes[\"%s\"]: %s%s%s cannot be overridden per lane (only "
                "match, filter, transform, transform_batch, input, target, targets)",
                rname, lane, k ? "\"" : "a positional ", k ? k : luaL_typename(L, -1),
                k ? "\"" : "");
            ok = false;
        }
        lua_pop(L, 1);
    }
    if (!ok)
        return;
    sl_rule_config scratch = {0};
    block sb = {what, line, &scratch};
    sl__config_check_block(ld, own, KEYS(rule_keys), &sb, NULL);
    sl__config_free_rule(&scratch);

    merge_skip m = {raw_has(L, own, "transform") || raw_has(L, own, "transform_batch"),
                    raw_has(L, own, "target") || raw_has(L, own, "targets")};
    lua_newtable(L);
    int merged = lua_gettop(L);
    copy_pairs(L, body, merged, skip_in_base, &m);
    copy_pairs(L, own, merged, NULL, NULL);
    sl_rule_config *g = sl__config_grow(ld, cfg->overrides, cfg->noverrides, sizeof *g);
    if (g) {
        cfg->overrides = g;
        sl_rule_config *o = &cfg->overrides[cfg->noverrides++];
        rule_defaults(ld, o, rname, line);
        o->lane = sl__config_dup(ld, lane, strlen(lane));
        o->base = ri;
        o->targets_from_base = !m.targets;
        sl_buf *diag = ld->diag;
        int nerrors = ld->nerrors;
        ld->diag = NULL;
        block b = {what, line, o};
        sl__config_check_block(ld, merged, KEYS(rule_keys), &b, NULL);
        ld->diag = diag;
        ld->nerrors = nerrors;
        for (size_t t = 0; t < o->ntargets; t++)
            o->targets[t].ordered = o->ordered;
        o->eventbridge = o->shape && strcmp(o->shape, "eventbridge") == 0;
        o->api = ld->in_api;
        sl__config_dlq_target(ld, o); /* the base's dlq, so every rule config has one */
    }
    lua_pop(L, 1);
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The overrides of base rule ri (its body at body), in lane name order. */
static void read_overrides(loader *ld, int body, size_t ri)
{
    lua_State *L = ld->L;
    lua_pushliteral(L, "lanes");
    if (lua_rawget(L, body) != LUA_TTABLE) {
        lua_pop(L, 1); /* none, or not a table (K_LANES said so) */
        return;
    }
    int lanes = lua_gettop(L);
    const char *rname = ld->cfg->rules[ri].name ? ld->cfg->rules[ri].name : "?";
    int line = sl__config_key_line(ld, ld->cfg->rules[ri].line, "lanes");
    char **names = NULL;
    size_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, lanes)) {
        size_t len = 0;
        const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tolstring(L, -2, &len) : NULL;
        char **gn;
        if (!k)
            sl__config_problem(ld, line,
                               "rule \"%s\": lanes: the keys are lane names, as in "
                               "lanes = { [\"feature-x\"] = { … } }; found a %s key",
                               rname, luaL_typename(L, -2));
        else if (!len || !sl_lane_valid(k, len) || strlen(k) != len)
            sl__config_problem(ld, line,
                               "rule \"%s\": lanes: \"%s\" is not a lane name "
                               "([a-z0-9-]{1,32}; base events use the rule itself)",
                               rname, k);
        else if (!(gn = realloc(names, (n + 1) * sizeof *gn)))
            ld->oom = 1;
        else if (!((names = gn)[n] = sl__config_dup(ld, k, len)))
            ;
        else
            n++;
        lua_pop(L, 1);
    }
    if (n > 1)
        qsort(names, n, sizeof *names, cmp_names);
    for (size_t i = 0; i < n; i++) {
        lua_pushstring(L, names[i]);
        lua_rawget(L, lanes);
        read_override(ld, body, lua_gettop(L), ri, names[i]);
        lua_pop(L, 1);
        free(names[i]);
    }
    free(names);
    lua_pop(L, 1);
}

/* rule "NAME" { … } (body at idx). */
void sl__config_read_rule(loader *ld, int body, const char *name, int line)
{
    sl_config *cfg = ld->cfg;
    char what[200];
    snprintf(what, sizeof what, "rule \"%s\"", name);
    if (!sl_set_name_valid(name))
        sl__config_problem(
            ld, line, "%s: a rule name is 1-128 of A-Z a-z 0-9 . _ - , not beginning with .", what);
    else if (sl_config_rule(cfg, name))
        sl__config_problem(ld, line, "%s is declared twice", what);
    sl_rule_config *g = sl__config_grow(ld, cfg->rules, cfg->nrules, sizeof *g);
    if (g) {
        cfg->rules = g;
        sl_rule_config *r = &cfg->rules[cfg->nrules++];
        rule_defaults(ld, r, name, line);
        block b = {what, line, r};
        sl__config_check_block(ld, body, rule_keys, sizeof rule_keys / sizeof *rule_keys, &b, NULL);
        for (size_t t = 0; t < r->ntargets; t++)
            r->targets[t].ordered = r->ordered;
        if (r->shape && strcmp(r->shape, "eventbridge") && strcmp(r->shape, "cloudevents"))
            sl__config_problem(ld, sl__config_key_line(ld, line, "shape"),
                               "%s: shape must be \"cloudevents\" or \"eventbridge\"", what);
        r->eventbridge = r->shape && strcmp(r->shape, "eventbridge") == 0;
        r->api = ld->in_api;
        sl__config_dlq_target(ld, r);
        read_overrides(ld, body, cfg->nrules - 1);
    }
}

/* lane "NAME" { env = …, fallback = … } (body at idx). */
void sl__config_read_lane(loader *ld, int body, const char *name, int line)
{
    lua_State *L = ld->L;
    sl_config *cfg = ld->cfg;
    char what[200];
    snprintf(what, sizeof what, "lane \"%s\"", name);
    const sl_lane_decl *prev = NULL;
    if (!*name)
        sl__config_problem(ld, line, "%s: the base lane (\"\") is not declared: it always exists",
                           what);
    else if (!sl_lane_valid(name, strlen(name)))
        sl__config_problem(ld, line, "%s: a lane name is 1-32 of a-z 0-9 -", what);
    else if ((prev = sl_config_lane(cfg, name)))
        sl__config_problem(ld, line, "%s is declared twice (first at line %d)", what, prev->line);
    sl_lane_decl *g = sl__config_grow(ld, cfg->lanes, cfg->nlanes, sizeof *g);
    if (g) {
        cfg->lanes = g;
        sl_lane_decl *d = &cfg->lanes[cfg->nlanes++];
        d->name = sl__config_dup(ld, name, strlen(name));
        d->line = line;
        d->env = SL_LANE_BOE;
        block b = {what, line, d};
        sl__config_check_block(ld, body, KEYS(lane_keys), &b, NULL);
        if (!raw_has(L, body, "fallback"))
            d->fallback_base = d->env == SL_LANE_BOE;
    }
}

/* lanes.auto = true / lanes { auto = true }, as the file left them. */
void sl__config_read_lanes_settings(loader *ld)
{
    lua_State *L = ld->L;
    lua_getglobal(L, "__sluice_lanes");
    lua_call(L, 0, 2);
    int line = (int)lua_tointeger(L, -1);
    if (lua_istable(L, -2)) {
        block b = {"lanes", line > 0 ? line : 1, ld->cfg};
        sl__config_check_block(ld, lua_gettop(L) - 1, KEYS(lanes_keys), &b, NULL);
    } else if (!lua_isnil(L, -2)) {
        sl__config_problem(ld, sl__config_key_line(ld, 1, "lanes"),
                           "lanes must be a table, as in lanes.auto = true");
    }
    lua_pop(L, 2);
}

/* rule.retry { … } (the value at idx). */
void sl__config_read_retry(loader *ld, int idx, const key *k, const block *b, void *field)
{
    int line = sl__config_key_line(ld, b->line, k->name);
    if (lua_type(ld->L, idx) != LUA_TTABLE) {
        sl__config_problem(ld, line, "%s: %s must be a table { attempts = …, max_age = …, … }",
                           b->what, k->name);
        return;
    }
    char what[240];
    snprintf(what, sizeof what, "%s: retry", b->what);
    block rb = {what, line, field};
    sl__config_check_block(ld, idx, retry_keys, sizeof retry_keys / sizeof *retry_keys, &rb, NULL);
}

int sl__config_rules_markdown(sl_buf *out)
{
    int rc = 0;
    if (!rc)
        rc = sl__config_keys_table(out, "rule \"NAME\" { … }", KEYS(rule_keys));
    if (!rc)
        rc = sl__config_keys_table(out, "rule.retry { … }", KEYS(retry_keys));
    if (!rc)
        rc = sl__config_keys_table(out, "lane \"NAME\" { … }", KEYS(lane_keys));
    if (!rc)
        rc = sl__config_keys_table(out, "lanes { … }", KEYS(lanes_keys));
    return rc;
}
