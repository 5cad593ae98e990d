/*
 * server/config_keys.c — the generic key reader of the config loader: one
 * key table per block (Fluent Bit's config_map idea) validates each value,
 * fills the block's struct and prints the reference (docs/config.md); the
 * readers of the value types shared by several blocks (headers, auth,
 * properties, string lists, plugin keys) and the loader's message helpers.
 */
#include "server/config_internal.h"

#include "core/base/parse.h"
#include "core/base/slog.h"
#include "rules/luajson.h"

#include <ctype.h>
#include <lauxlib.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How far past a block's first line sl__config_key_line() looks for a key, once
 * KEY_LINE_FULL mistakes were reported (before that: to the end). */
#define KEY_LINE_FULL 50
#define KEY_LINE_SPAN (64u << 10)
/* Mistakes reported in full (sl__config_problem()). */
#define CONFIG_MAX_PROBLEMS 1000

void sl__config_problem(loader *ld, int line, const char *fmt, ...)
{
    ld->nerrors++;
    if (!ld->diag)
        return;
    /* A bound on the messages, and on the sl__config_key_line() look-ups they cost: a
     * generated table can hold any number of unknown keys. */
    if (ld->nerrors > CONFIG_MAX_PROBLEMS) {
        if (ld->nerrors == CONFIG_MAX_PROBLEMS + 1 &&
            sl_buf_printf(ld->diag, "%s: more than %d mistakes; the rest are not shown\n", ld->name,
                          CONFIG_MAX_PROBLEMS))
            ld->oom = 1;
        return;
    }
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (sl_buf_printf(ld->diag, "%s:%d: %s\n", ld->name, line, msg))
        ld->oom = 1;
}

/* The line where `key =` first appears at or after the block's line: Lua
 * keeps no line numbers for table fields, but the source text does. Falls
 * back to the block's line. */
int sl__config_key_line(loader *ld, int block_line, const char *keyname)
{
    /* Every look-up (one per mistake) used to scan the file from its
     * start: a 10 MB file with 10,000 mistakes took hours (found with the
     * hostile configs of the config fuzzer: tests/fuzz/regress/config/).
     * Now the start of block_line is found from the previous look-up
     * (blocks are read in file order), the key is looked for in at most
     * KEY_LINE_SPAN bytes, and not at all once sl__config_problem() stopped showing
     * messages. */
    const char *s = ld->cfg->source, *end = s + ld->cfg->source_len, *p = s;
    int line = 1;
    if (ld->nerrors >= CONFIG_MAX_PROBLEMS) /* the message will not be shown */
        return block_line;
    if (ld->kl_pos && ld->kl_line <= block_line)
        p = ld->kl_pos, line = ld->kl_line;
    for (; p < end && line < block_line; p++)
        if (*p == '\n')
            line++;
    ld->kl_pos = p;
    ld->kl_line = line;
    /* The first mistakes (the usual case: one or a few) search to the end,
     * so a key far below its block's first line still gets its own line;
     * past that the span bounds the cost. */
    const char *stop =
        ld->nerrors < KEY_LINE_FULL || (size_t)(end - p) <= KEY_LINE_SPAN ? end : p + KEY_LINE_SPAN;
    size_t kl = strlen(keyname);
    for (; p < stop; p++) {
        if ((size_t)(end - p) > kl && memcmp(p, keyname, kl) == 0 &&
            (p == s || !(isalnum((unsigned char)p[-1]) || p[-1] == '_' || p[-1] == '"'))) {
            const char *q = p + kl;
            if (*q == '"' && p > s && p[-1] == '"')
                q++;
            while (q < end && (*q == ' ' || *q == '\t' || *q == ']'))
                q++;
            if (q < end && *q == '=' && (q + 1 == end || q[1] != '='))
                return line;
        }
        if (*p == '\n')
            line++;
    }
    return block_line;
}

char *sl__config_dup(loader *ld, const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (!d) {
        ld->oom = 1;
        return NULL;
    }
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* Resolves a path relative to the config file's folder. */
char *sl__config_resolve_path(loader *ld, const char *p)
{
    if (p[0] == '/' || !ld->cfg->dir[0])
        return sl__config_dup(ld, p, strlen(p));
    size_t n = strlen(ld->cfg->dir) + strlen(p) + 2;
    char *d = malloc(n);
    if (!d) {
        ld->oom = 1;
        return NULL;
    }
    snprintf(d, n, "%s/%s", ld->cfg->dir, p);
    return d;
}

static void put_int(void *field, size_t size, int64_t v)
{
    if (size == 8) {
        memcpy(field, &v, 8);
    } else if (size == 4) {
        int32_t x = (int32_t)v;
        memcpy(field, &x, 4);
    } else if (size == 2) {
        int16_t x = (int16_t)v;
        memcpy(field, &x, 2);
    }
}

/* Encodes the Lua value at idx as JSON text (a pattern or an inline schema). */
char *sl__config_lua_to_json(loader *ld, int idx, int line, const char *what)
{
    sl_buf b = SL_BUF_INIT;
    sl_error err = {0};
    if (sl_luajson_encode(ld->L, idx, &b, &err) || sl_buf_append(&b, "", 1)) {
        sl__config_problem(ld, line, "%s: %s", what,
                           err.msg[0] ? err.msg : "cannot be encoded as JSON");
        sl_buf_free(&b);
        return NULL;
    }
    return (char *)b.data;
}

/* The value at idx as a plugin key's normalised text (core/bus/connector.h),
 * or false with a problem. */
static bool plugin_value(loader *ld, int idx, const sl_plugin_key *pk, const block *b, int line,
                         sl_buf *v)
{
    lua_State *L = ld->L;
    int t = lua_type(L, idx);
    bool ok = false;
    const char *want = "";
    switch (pk->type) {
    case SL_PKEY_STRING:
        want = "a string";
        ok = t == LUA_TSTRING && !sl_buf_append(v, lua_tostring(L, idx), lua_rawlen(L, idx));
        break;
    case SL_PKEY_INT:
        want = "an integer";
        ok = t == LUA_TNUMBER && lua_isinteger(L, idx) &&
             !sl_buf_printf(v, "%lld", (long long)lua_tointeger(L, idx));
        break;
    case SL_PKEY_BOOL:
        want = "true or false";
        ok = t == LUA_TBOOLEAN && !sl_buf_printf(v, "%s", lua_toboolean(L, idx) ? "true" : "false");
        break;
    case SL_PKEY_DURATION: {
        want = "a duration like \"30s\" or a number of ms";
        int64_t ms = 0;
        ok = (t == LUA_TNUMBER && lua_isinteger(L, idx) && (ms = lua_tointeger(L, idx)) >= 0) ||
             (t == LUA_TSTRING && sl_parse_duration_ms(lua_tostring(L, idx), &ms) == 0);
        ok = ok && !sl_buf_printf(v, "%lld", (long long)ms);
        break;
    }
    case SL_PKEY_SIZE: {
        want = "a size like \"1MiB\" or a number of bytes";
        uint64_t u = 0;
        ok = (t == LUA_TNUMBER && lua_isinteger(L, idx) && lua_tointeger(L, idx) >= 0 &&
              (u = (uint64_t)lua_tointeger(L, idx), true)) ||
             (t == LUA_TSTRING && sl_parse_bytes(lua_tostring(L, idx), &u) == 0);
        ok = ok && !sl_buf_printf(v, "%llu", (unsigned long long)u);
        break;
    }
    case SL_PKEY_STRINGS: {
        want = "a string or a list of strings (without line breaks)";
        if (t == LUA_TSTRING) {
            ok = !strchr(lua_tostring(L, idx), '\n') &&
                 !sl_buf_append(v, lua_tostring(L, idx), lua_rawlen(L, idx));
            break;
        }
        lua_Integer n = t == LUA_TTABLE ? luaL_len(L, idx) : 0;
        ok = n > 0;
        for (lua_Integer i = 1; ok && i <= n; i++) {
            lua_geti(L, idx, i);
            ok = lua_type(L, -1) == LUA_TSTRING && !strchr(lua_tostring(L, -1), '\n') &&
                 !(i > 1 && sl_buf_append(v, "\n", 1)) &&
                 !sl_buf_append(v, lua_tostring(L, -1), lua_rawlen(L, -1));
            lua_pop(L, 1);
        }
        break;
    }
    }
    if (!ok)
        sl__config_problem(ld, line, "%s: %s must be %s", b->what, pk->name, want);
    return ok;
}

/* The body of a plugin's block (at idx): the common keys (may be none) go
 * to the struct through check_block's reader, the plugin's own keys become
 * "name=value" option lines. */
void sl__config_read_plugin_body(loader *ld, int idx, const key *common, size_t ncommon,
                                 const sl_plugin_key *pk, size_t npk, const block *b, char ***opts,
                                 size_t *nopts)
{
    lua_State *L = ld->L;
    bool seen[64] = {false};
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        const char *name = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        const key *k = NULL;
        const sl_plugin_key *p = NULL;
        for (size_t i = 0; name && !k && i < ncommon; i++)
            if (strcmp(common[i].name, name) == 0)
                k = &common[i];
        for (size_t i = 0; name && !k && !p && i < npk; i++)
            if (strcmp(pk[i].name, name) == 0) {
                p = &pk[i];
                if (i < 64)
                    seen[i] = true;
            }
        if (k) {
            sl__config_read_key(ld, k, b, NULL);
        } else if (p) {
            sl_buf v = SL_BUF_INIT;
            if (plugin_value(ld, lua_gettop(L), p, b, sl__config_key_line(ld, b->line, name), &v) &&
                !sl_buf_append(&v, "", 1))
                sl__config_add_line(ld, opts, nopts, name, "=", (const char *)v.data);
            sl_buf_free(&v);
        } else {
            char known[512] = "";
            size_t o = 0;
            for (size_t i = 0; i < ncommon + npk && o < sizeof known; i++)
                o += (size_t)snprintf(known + o, sizeof known - o, "%s%s", i ? ", " : "",
                                      i < ncommon ? common[i].name : pk[i - ncommon].name);
            sl__config_problem(ld, name ? sl__config_key_line(ld, b->line, name) : b->line,
                               "%s: unknown key \"%s\" (known: %s)", b->what, name ? name : "?",
                               known);
        }
        lua_pop(L, 1);
    }
    for (size_t i = 0; i < npk && i < 64; i++)
        if (pk[i].required && !seen[i])
            sl__config_problem(ld, b->line, "%s: %s is required", b->what, pk[i].name);
}

/* A header name: an RFC 9110 token. */
static bool header_name_ok(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!(isalnum((unsigned char)*s) || strchr("!#$%&'*+-.^_`|~", *s)))
            return false;
    return true;
}

/* A header value: no line breaks or other controls but tab. */
static bool header_value_ok(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] < 0x20 && s[i] != '\t') || s[i] == 0x7f)
            return false;
    return true;
}

/* Appends "NAME SEP VALUE" to a list of lines (headers, properties). */
void sl__config_add_line(loader *ld, char ***list, size_t *n, const char *name, const char *sep,
                         const char *val)
{
    char **g = realloc(*list, (*n + 1) * sizeof *g);
    if (g)
        *list = g;
    size_t len = strlen(name) + strlen(sep) + strlen(val) + 1;
    char *line = g ? malloc(len) : NULL;
    if (!line) {
        ld->oom = 1;
        return;
    }
    snprintf(line, len, "%s%s%s", name, sep, val);
    (*list)[(*n)++] = line;
}

static void read_headers(loader *ld, int idx, const key *k, const block *b, char *field)
{
    lua_State *L = ld->L;
    int line = sl__config_key_line(ld, b->line, k->name);
    if (!lua_istable(L, idx)) {
        sl__config_problem(ld, line, "%s: headers must be a table { [\"Name\"] = \"value\" }",
                           b->what);
        return;
    }
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        const char *name = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        size_t vl = 0;
        const char *val = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &vl) : NULL;
        if (!name || !header_name_ok(name))
            sl__config_problem(ld, line, "%s: headers: \"%s\" is not a header name", b->what,
                               name ? name : "?");
        else if (!val || !header_value_ok(val, vl))
            sl__config_problem(ld, line, "%s: headers: %s must be a string without line breaks",
                               b->what, name);
        else
            sl__config_add_line(ld, (char ***)field, (size_t *)(field + sizeof(char **)), name,
                                ": ", val);
        lua_pop(L, 1);
    }
}

/* A string member of the table at idx (NULL with a problem when missing). */
static char *auth_field(loader *ld, int idx, const char *name, int line, const block *b,
                        const char *what)
{
    lua_State *L = ld->L;
    lua_getfield(L, idx, name);
    char *s = NULL;
    size_t n = 0;
    if (lua_type(L, -1) == LUA_TSTRING && header_value_ok(lua_tolstring(L, -1, &n), n))
        s = sl__config_dup(ld, lua_tostring(L, -1), n);
    else
        sl__config_problem(ld, line, "%s: auth.%s needs %s (a string without line breaks)", b->what,
                           what, name);
    lua_pop(L, 1);
    return s;
}

static void read_auth(loader *ld, int idx, const key *k, const block *b, sl_conf_auth *t)
{
    lua_State *L = ld->L;
    int line = sl__config_key_line(ld, b->line, k->name);
    int n = 0;
    if (lua_istable(L, idx)) {
        lua_pushnil(L);
        while (lua_next(L, idx)) {
            n++;
            lua_pop(L, 1);
        }
    }
    if (n != 1) {
        sl__config_problem(ld, line,
                           "%s: auth takes one of { bearer = … }, { basic = { user = …, "
                           "password = … } }, { api_key = { header = …, value = … } }, { oauth "
                           "= { token_url = …, client_id = …, client_secret = … } }",
                           b->what);
        return;
    }
    lua_getfield(L, idx, "bearer");
    if (lua_type(L, -1) == LUA_TSTRING) {
        size_t vl;
        const char *v = lua_tolstring(L, -1, &vl);
        if (header_value_ok(v, vl))
            t->bearer = sl__config_dup(ld, v, vl);
        else
            sl__config_problem(ld, line, "%s: auth.bearer must not hold line breaks", b->what);
        lua_pop(L, 1);
        return;
    }
    lua_pop(L, 1);
    lua_getfield(L, idx, "basic");
    if (lua_istable(L, -1)) {
        int bi = lua_gettop(L);
        t->basic_user = auth_field(ld, bi, "user", line, b, "basic");
        t->basic_pass = auth_field(ld, bi, "password", line, b, "basic");
        lua_pop(L, 1);
        return;
    }
    lua_pop(L, 1);
    lua_getfield(L, idx, "api_key");
    if (lua_istable(L, -1)) {
        int ai = lua_gettop(L);
        t->api_key_header = auth_field(ld, ai, "header", line, b, "api_key");
        t->api_key = auth_field(ld, ai, "value", line, b, "api_key");
        if (t->api_key_header && !header_name_ok(t->api_key_header))
            sl__config_problem(ld, line, "%s: auth.api_key.header \"%s\" is not a header name",
                               b->what, t->api_key_header);
        lua_pop(L, 1);
        return;
    }
    lua_pop(L, 1);
    lua_getfield(L, idx, "oauth");
    if (lua_istable(L, -1)) {
        int oi = lua_gettop(L);
        t->oauth_url = auth_field(ld, oi, "token_url", line, b, "oauth");
        t->oauth_id = auth_field(ld, oi, "client_id", line, b, "oauth");
        t->oauth_secret = auth_field(ld, oi, "client_secret", line, b, "oauth");
        lua_getfield(L, oi, "method");
        bool has_method = !lua_isnil(L, -1);
        lua_getfield(L, oi, "params");
        bool has_params = !lua_isnil(L, -1);
        lua_pop(L, 2);
        if (has_method)
            t->oauth_method = auth_field(ld, oi, "method", line, b, "oauth");
        if (has_params)
            t->oauth_params = auth_field(ld, oi, "params", line, b, "oauth");
        if (t->oauth_method && strcmp(t->oauth_method, "POST") && strcmp(t->oauth_method, "GET") &&
            strcmp(t->oauth_method, "PUT"))
            sl__config_problem(ld, line, "%s: auth.oauth.method must be POST, GET or PUT",
                               b->what);
        if (t->oauth_url && strncmp(t->oauth_url, "http://", 7) &&
            strncmp(t->oauth_url, "https://", 8))
            sl__config_problem(ld, line, "%s: auth.oauth.token_url must be an http(s) URL",
                               b->what);
        lua_pop(L, 1);
        return;
    }
    lua_pop(L, 1);
    sl__config_problem(ld, line,
                       "%s: auth takes one of { bearer = … }, { basic = { user = …, "
                       "password = … } }, { api_key = { header = …, value = … } }, { oauth = { "
                       "token_url = …, client_id = …, client_secret = … } }",
                       b->what);
}

/* properties = { ["name"] = value }: librdkafka's names are dotted words. */
static void read_props(loader *ld, int idx, const key *k, const block *b, char *field)
{
    lua_State *L = ld->L;
    int line = sl__config_key_line(ld, b->line, k->name);
    if (!lua_istable(L, idx)) {
        sl__config_problem(ld, line, "%s: properties must be a table { [\"name\"] = value }",
                           b->what);
        return;
    }
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        const char *name = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        int vt = lua_type(L, -1);
        bool name_ok = name && *name;
        for (const char *c = name; name_ok && *c; c++)
            name_ok = isalnum((unsigned char)*c) || *c == '.' || *c == '_' || *c == '-';
        char val[1024];
        if (vt == LUA_TBOOLEAN)
            snprintf(val, sizeof val, "%s", lua_toboolean(L, -1) ? "true" : "false");
        else if (vt == LUA_TNUMBER && lua_isinteger(L, -1))
            snprintf(val, sizeof val, "%lld", (long long)lua_tointeger(L, -1));
        else if (vt == LUA_TNUMBER)
            snprintf(val, sizeof val, "%.17g", lua_tonumber(L, -1));
        else if (vt == LUA_TSTRING && lua_rawlen(L, -1) < sizeof val)
            snprintf(val, sizeof val, "%s", lua_tostring(L, -1));
        else
            vt = LUA_TNONE;
        if (!name_ok)
            sl__config_problem(ld, line, "%s: properties: \"%s\" is not a property name", b->what,
                               name ? name : "?");
        else if (vt == LUA_TNONE)
            sl__config_problem(ld, line,
                               "%s: properties: %s must be a string, number or boolean (under "
                               "1024 bytes)",
                               b->what, name);
        else
            sl__config_add_line(ld, (char ***)field, (size_t *)(field + sizeof(char **)), name, "=",
                                val);
        lua_pop(L, 1);
    }
}

/* A string or a list of strings (topics = { "a", "^b.*" }). */
static void read_strings(loader *ld, int idx, const key *k, const block *b, char *field)
{
    lua_State *L = ld->L;
    int line = sl__config_key_line(ld, b->line, k->name);
    char ***list = (char ***)field;
    size_t *n = (size_t *)(field + sizeof(char **));
    if (lua_type(L, idx) == LUA_TSTRING) {
        sl__config_add_line(ld, list, n, lua_tostring(L, idx), "", "");
        return;
    }
    lua_Integer len = lua_istable(L, idx) ? luaL_len(L, idx) : 0;
    if (len == 0) {
        sl__config_problem(ld, line, "%s: %s must be a string or a non-empty list of strings",
                           b->what, k->name);
        return;
    }
    for (lua_Integer i = 1; i <= len; i++) {
        lua_geti(L, idx, i);
        if (lua_type(L, -1) == LUA_TSTRING && lua_rawlen(L, -1) > 0)
            sl__config_add_line(ld, list, n, lua_tostring(L, -1), "", "");
        else
            sl__config_problem(ld, line, "%s: %s[%lld] must be a non-empty string", b->what,
                               k->name, (long long)i);
        lua_pop(L, 1);
    }
}

/* Reads one key's value (at the top of the stack) into the block's struct. */
void sl__config_read_key(loader *ld, const key *k, const block *b, void *extra)
{
    lua_State *L = ld->L;
    int idx = lua_gettop(L);
    char *field = (char *)b->obj + k->off;
    int line = sl__config_key_line(ld, b->line, k->name);
    int t = lua_type(L, idx);
    switch (k->type) {
    case K_STRING:
    case K_PATH:
        if (t != LUA_TSTRING) {
            sl__config_problem(ld, line, "%s: %s must be a string, not a %s", b->what, k->name,
                               luaL_typename(L, idx));
        } else {
            size_t n;
            const char *s = lua_tolstring(L, idx, &n);
            char **dst = (char **)field;
            free(*dst);
            *dst = k->type == K_PATH ? sl__config_resolve_path(ld, s) : sl__config_dup(ld, s, n);
        }
        return;
    case K_BOOL:
    case K_TRISTATE:
        if (t != LUA_TBOOLEAN) {
            sl__config_problem(ld, line, "%s: %s must be true or false, not a %s", b->what, k->name,
                               luaL_typename(L, idx));
        } else if (k->type == K_BOOL) {
            *(bool *)field = lua_toboolean(L, idx);
        } else {
            *(int *)field = lua_toboolean(L, idx);
        }
        return;
    case K_INT:
    case K_SIZE:
    case K_DURATION: {
        int64_t v = 0;
        bool ok = false;
        if (t == LUA_TNUMBER && lua_isinteger(L, idx)) {
            v = lua_tointeger(L, idx);
            ok = true;
        } else if (t == LUA_TSTRING && k->type == K_SIZE) {
            uint64_t u;
            ok = sl_parse_bytes(lua_tostring(L, idx), &u) == 0 && u <= INT64_MAX;
            v = (int64_t)u;
        } else if (t == LUA_TSTRING && k->type == K_DURATION) {
            const char *s = lua_tostring(L, idx);
            ok =
                strcmp(s, "forever") == 0 ? (v = -1, k->min < 0) : sl_parse_duration_ms(s, &v) == 0;
        }
        static const char *const want[] = {[K_INT] = "an integer",
                                           [K_SIZE] = "a size like \"128MiB\" or a number of bytes",
                                           [K_DURATION] = "a duration like \"7d\", \"30s\", "
                                                          "\"250ms\" or a number of ms"};
        if (!ok)
            sl__config_problem(ld, line, "%s: %s must be %s", b->what, k->name, want[k->type]);
        else if (v < k->min || v > k->max)
            sl__config_problem(ld, line, "%s: %s = %lld is out of range (%lld..%lld)", b->what,
                               k->name, (long long)v, (long long)k->min, (long long)k->max);
        else
            put_int(field, k->size, v);
        return;
    }
    case K_ACK:
    case K_CODEC:
    case K_START: {
        const char *s = t == LUA_TSTRING ? lua_tostring(L, idx) : "";
        if (k->type == K_ACK && (strcmp(s, "durable") == 0 || strcmp(s, "buffer") == 0))
            *(sl_ack *)field = s[0] == 'd' ? SL_ACK_DURABLE : SL_ACK_BUFFER;
        else if (k->type == K_CODEC && sl_codec_parse(s, (sl_codec *)field) == 0)
            ;
        else if (k->type == K_START && (strcmp(s, "beginning") == 0 || strcmp(s, "end") == 0))
            *(bool *)field = s[0] == 'b';
        else
            sl__config_problem(ld, line, "%s: %s must be %s", b->what, k->name,
                               k->type == K_ACK     ? "\"durable\" or \"buffer\""
                               : k->type == K_CODEC ? "\"none\" or \"zstd\""
                                                    : "\"beginning\" or \"end\"");
        return;
    }
    case K_FUNCTION:
        if (t != LUA_TFUNCTION)
            sl__config_problem(ld, line, "%s: %s must be a function, not a %s", b->what, k->name,
                               luaL_typename(L, idx));
        else
            *(bool *)field = true;
        return;
    case K_PATTERN:
        sl__config_read_pattern(ld, idx, k, b, b->obj);
        return;
    case K_INPUT:
        sl__config_read_input(ld, idx, k, b, b->obj);
        return;
    case K_TARGETS:
        sl__config_read_targets(ld, idx, k, b, b->obj);
        return;
    case K_SCHEMAS:
        sl__config_read_schemas(ld, idx, k, b, extra);
        return;
    case K_SETBODY: {
        if (t != LUA_TTABLE) {
            sl__config_problem(ld, line, "%s: %s must be a table of set keys", b->what, k->name);
            return;
        }
        block sb = {"server.set_defaults", line, field};
        sl__config_read_set_body(ld, idx, (sl_set_config *)field, &sb, NULL);
        return;
    }
    case K_BODY: {
        const char *s = t == LUA_TSTRING ? lua_tostring(L, idx) : "";
        sl_http_body *bd = (sl_http_body *)field;
        if (strcmp(s, "structured") == 0)
            *bd = SL_HTTP_BODY_STRUCTURED;
        else if (strcmp(s, "binary") == 0)
            *bd = SL_HTTP_BODY_BINARY;
        else if (strcmp(s, "data") == 0)
            *bd = SL_HTTP_BODY_DATA;
        else
            sl__config_problem(ld, line, "%s: body must be \"structured\", \"binary\" or \"data\"",
                               b->what);
        return;
    }
    case K_HEADERS:
        read_headers(ld, idx, k, b, field);
        return;
    case K_AUTH:
        read_auth(ld, idx, k, b, (sl_conf_auth *)field);
        return;
    case K_APIKEYS:
        sl__config_read_api_keys(ld, idx, k, b);
        return;
    case K_KAFKA:
        sl__config_read_kafka(ld, idx, k, b);
        return;
    case K_AWS:
        sl__config_read_aws(ld, idx, k, b);
        return;
    case K_AWSCREDS:
        sl__config_read_aws_creds(ld, idx, k, b);
        return;
    case K_BACKEND: {
        const char *v = t == LUA_TSTRING ? lua_tostring(L, idx) : "";
        if (strcmp(v, "log") == 0)
            *(sl_backend *)field = SL_BACKEND_LOG;
        else if (strcmp(v, "kafka") == 0)
            *(sl_backend *)field = SL_BACKEND_KAFKA;
        else
            sl__config_problem(ld, line, "%s: backend must be \"log\" or \"kafka\"", b->what);
        return;
    }
    case K_TOPIC: {
        /* Kafka's rule for topic names: 1-249 of [A-Za-z0-9._-]. */
        size_t n = 0;
        const char *v = t == LUA_TSTRING ? lua_tolstring(L, idx, &n) : NULL;
        bool ok = v && n >= 1 && n <= SL_SET_TOPIC_MAX && strcmp(v, ".") && strcmp(v, "..");
        for (size_t i = 0; ok && i < n; i++)
            ok = isalnum((unsigned char)v[i]) || v[i] == '.' || v[i] == '_' || v[i] == '-';
        if (ok)
            memcpy(field, v, n + 1);
        else
            sl__config_problem(ld, line,
                               "%s: topic must be a Kafka topic name (1 to 249 of A-Z a-z 0-9 . _ -)",
                               b->what);
        return;
    }
    case K_PROPS:
        read_props(ld, idx, k, b, field);
        return;
    case K_STRINGS:
        read_strings(ld, idx, k, b, field);
        return;
    case K_PARSE: {
        const char *s = t == LUA_TSTRING ? lua_tostring(L, idx) : "";
        sl_source_parse *pp = (sl_source_parse *)field;
        if (t == LUA_TFUNCTION)
            *pp = SL_PARSE_LUA;
        else if (strcmp(s, "json") == 0)
            *pp = SL_PARSE_JSON;
        else if (strcmp(s, "text") == 0)
            *pp = SL_PARSE_TEXT;
        else
            sl__config_problem(ld, line, "%s: parse must be \"json\", \"text\" or a function(line)",
                               b->what);
        return;
    }
    case K_LONGLINES:
    case K_ENCODING: {
        const char *s = t == LUA_TSTRING ? lua_tostring(L, idx) : "";
        const char *yes = k->type == K_LONGLINES ? "split" : "base64";
        const char *no = k->type == K_LONGLINES ? "skip" : "hex";
        if (strcmp(s, yes) == 0 || strcmp(s, no) == 0)
            *(bool *)field = strcmp(s, yes) == 0;
        else
            sl__config_problem(ld, line, "%s: %s must be \"%s\" or \"%s\"", b->what, k->name,
                               k->type == K_LONGLINES ? yes : no,
                               k->type == K_LONGLINES ? no : yes);
        return;
    }
    case K_RETRY:
        sl__config_read_retry(ld, idx, k, b, field);
        return;
    case K_LANES:
        /* The overrides are read after the rule's own keys (read_overrides). */
        if (t != LUA_TTABLE)
            sl__config_problem(ld, line,
                               "%s: lanes must be a table { [\"LANE\"] = { … } }, not a %s",
                               b->what, luaL_typename(L, idx));
        return;
    case K_LANEENV:
    case K_FALLBACK: {
        const char *s = t == LUA_TSTRING ? lua_tostring(L, idx) : "";
        if (k->type == K_LANEENV && (strcmp(s, "boe") == 0 || strcmp(s, "ppe") == 0))
            *(sl_lane_env *)field = s[0] == 'b' ? SL_LANE_BOE : SL_LANE_PPE;
        else if (k->type == K_FALLBACK && (strcmp(s, "base") == 0 || strcmp(s, "none") == 0))
            *(bool *)field = s[0] == 'b';
        else
            sl__config_problem(ld, line, "%s: %s must be %s", b->what, k->name,
                               k->type == K_LANEENV ? "\"boe\" or \"ppe\""
                                                    : "\"base\" or \"none\"");
        return;
    }
    case K_BACKOFF: {
        const char *s = t == LUA_TSTRING ? lua_tostring(L, idx) : "";
        if (strcmp(s, "exponential") == 0)
            *(sl_backoff *)field = SL_BACKOFF_EXPONENTIAL;
        else if (strcmp(s, "fixed") == 0)
            *(sl_backoff *)field = SL_BACKOFF_FIXED;
        else
            sl__config_problem(ld, line, "%s: backoff must be \"exponential\" or \"fixed\"",
                               b->what);
        return;
    }
    }
}

/* Walks the table at idx: every key must be in keys. */
void sl__config_check_block(loader *ld, int idx, const key *keys, size_t nkeys, const block *b,
                            void *extra)
{
    sl__config_check_block2(ld, idx, keys, nkeys, b, NULL, 0, b, extra);
}

void sl__config_check_block2(loader *ld, int idx, const key *keys, size_t nkeys, const block *b,
                             const key *keys2, size_t nkeys2, const block *b2, void *extra)
{
    lua_State *L = ld->L;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (lua_type(L, -2) != LUA_TSTRING) {
            sl__config_problem(ld, b->line,
                               "%s: every entry needs a name (name = value); found a "
                               "positional %s",
                               b->what, luaL_typename(L, -1));
            lua_pop(L, 1);
            continue;
        }
        const char *name = lua_tostring(L, -2);
        const key *k = NULL;
        const block *kb = b;
        for (size_t i = 0; !k && i < nkeys; i++)
            if (strcmp(keys[i].name, name) == 0)
                k = &keys[i];
        for (size_t i = 0; !k && i < nkeys2; i++)
            if (strcmp(keys2[i].name, name) == 0)
                k = &keys2[i], kb = b2;
        if (!k) {
            char known[512] = "";
            size_t o = 0;
            for (size_t i = 0; i < nkeys + nkeys2 && o < sizeof known; i++)
                o += (size_t)snprintf(known + o, sizeof known - o, "%s%s", i ? ", " : "",
                                      i < nkeys ? keys[i].name : keys2[i - nkeys].name);
            sl__config_problem(ld, sl__config_key_line(ld, b->line, name),
                               "%s: unknown key \"%s\" (known: %s)", b->what, name, known);
        } else {
            sl__config_read_key(ld, k, kb, extra);
        }
        lua_pop(L, 1);
    }
}

void *sl__config_new_conf(loader *ld, size_t size, const void *defaults)
{
    void *c = calloc(1, size);
    if (!c)
        ld->oom = 1;
    else if (defaults)
        memcpy(c, defaults, size);
    return c;
}

void *sl__config_grow(loader *ld, void *arr, size_t n, size_t size)
{
    void *g = realloc(arr, (n + 1) * size);
    if (!g)
        ld->oom = 1;
    else
        memset((char *)g + n * size, 0, size);
    return g;
}

/* The type column of the docs, per key type (K__COUNT: every type has one). */
static const char *const type_names[K__COUNT] = {
    [K_STRING] = "string",         [K_PATH] = "string",       [K_BOOL] = "boolean",
    [K_TRISTATE] = "boolean",      [K_INT] = "integer",       [K_SIZE] = "size",
    [K_DURATION] = "duration",     [K_ACK] = "string",        [K_CODEC] = "string",
    [K_START] = "string",          [K_FUNCTION] = "function", [K_PATTERN] = "pattern",
    [K_INPUT] = "string or table", [K_TARGETS] = "target(s)", [K_SCHEMAS] = "table",
    [K_SETBODY] = "table",         [K_HEADERS] = "table",     [K_AUTH] = "table",
    [K_BODY] = "string",           [K_RETRY] = "table",       [K_BACKOFF] = "string",
    [K_PROPS] = "table",           [K_STRINGS] = "string(s)", [K_PARSE] = "string or function",
    [K_LONGLINES] = "string",      [K_ENCODING] = "string",   [K_LANES] = "table",
    [K_LANEENV] = "string",        [K_FALLBACK] = "string",   [K_APIKEYS] = "table",
    [K_KAFKA] = "table",           [K_BACKEND] = "string",    [K_TOPIC] = "string",
    [K_AWS] = "table",             [K_AWSCREDS] = "table",
};

int sl__config_keys_rows(sl_buf *out, const key *keys, size_t n)
{
    int rc = 0;
    for (size_t i = 0; !rc && i < n; i++)
        rc = sl_buf_printf(out, "| `%s` | %s | %s | %s |\n", keys[i].name, type_names[keys[i].type],
                           keys[i].dflt[0] ? keys[i].dflt : "—", keys[i].doc);
    return rc;
}

int sl__config_keys_table(sl_buf *out, const char *title, const key *keys, size_t n)
{
    int rc = sl_buf_printf(
        out, "\n### %s\n\n| key | type | default | meaning |\n|---|---|---|---|\n", title);
    return rc ? rc : sl__config_keys_rows(out, keys, n);
}

void sl__config_free_keys(const key *keys, size_t n, void *obj)
{
    for (size_t i = 0; obj && i < n; i++) {
        char *field = (char *)obj + keys[i].off;
        switch (keys[i].type) {
        case K_STRING:
        case K_PATH:
            free(*(char **)field);
            break;
        case K_HEADERS:
        case K_PROPS:
        case K_STRINGS:
            sl__config_free_lines(*(char ***)field, *(size_t *)(field + sizeof(char **)));
            break;
        case K_AUTH: {
            sl_conf_auth *a = (sl_conf_auth *)field;
            free(a->bearer);
            free(a->basic_user);
            free(a->basic_pass);
            free(a->api_key_header);
            free(a->api_key);
            free(a->oauth_url);
            free(a->oauth_id);
            free(a->oauth_secret);
            free(a->oauth_method);
            free(a->oauth_params);
            break;
        }
        default:
            break;
        }
    }
}

void sl__config_free_lines(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}
