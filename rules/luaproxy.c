/*
 * rules/luaproxy.c — events as lazy, copy-on-write Lua proxies (see
 * rules/luaproxy.h).
 *
 * A proxy is a full userdata: a header (lp_proxy), then the node of each
 * original child in the parsed event (kid[], in text order) and one state
 * byte per child (st[]: untouched, set, deleted; plus a mark for members
 * whose key is repeated later). The value of an original child that was
 * written, or read as a proxy (that cache is what gives child proxies their
 * identity), is kept in user value slot 3 + i of a container of at most
 * LP_UV_SLOTS children, so the usual reads and writes allocate no table;
 * the rest lives in two user values created on first need:
 *  - ov, a table: ov[i] is the value of original child i (1-based) of a
 *    bigger container; arrays keep the elements past the original ones
 *    there; added entries (object keys the text did not have, array keys that
 *    are not positive integers) sit at ov[-2j] (the key) and ov[-2j-1] (the
 *    value, nil once deleted), j = 1, 2… in the order they were first added,
 *    so encoding and iteration never hash a key;
 *  - map, a table for objects of more than LP_MAP_MIN members or with more
 *    than LP_ADDED_SCAN added entries: key -> position (0..n0-1 an original
 *    member, n0 + j - 1 added entry j). Smaller objects are scanned.
 * Everything else is read from the parsed event, which is never changed.
 *
 * The metamethods run inside the sandboxed call (Lua errors and memory
 * errors are fine there); the encoder runs from sl_luajson_encode, outside
 * any protected call, so it only reads (raw gets of existing tables, no
 * allocation) and does the rare cases that need a table (holes, sparse
 * arrays, keys a JSON object cannot have) through lua_pcall.
 */
#include "rules/luaproxy.h"

#include "core/base/json.h"
#include "rules/luajson.h"
#include "rules/sandbox.h"

#include <lauxlib.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX
/* Objects with more members than this find keys through a map table. */
#define LP_MAP_MIN 16
/* Added entries are found by a scan up to this many, then through the map. */
#define LP_ADDED_SCAN 8
/* Objects up to this size look for repeated keys pairwise, bigger ones sort. */
#define LP_DUPS_PAIRWISE 64
/* Nesting limit of sluice.table (how a proxy holding itself ends). */
#define LP_MAX_DEPTH 128

/* Containers of up to this many children keep the values of written (or
 * cached) children in user value slots instead of the ov table. */
#define LP_UV_SLOTS 32

/* st[] of an original child. */
enum { LP_ORIG = 0, LP_SET = 1, LP_DEL = 2, LP_STMASK = 3, LP_SHADOWED = 0x80 };
/* User value slots: then UV_ORIG + i for child i of a small container. */
enum { UV_OV = 1, UV_MAP = 2, UV_ORIG = 3 };
/* lp_proxy.flags */
enum {
    F_OV = 1,    /* ov exists */
    F_MAP = 2,   /* map exists */
    F_MOD = 4,   /* written */
    F_KID = 8,   /* holds a cached child proxy */
    F_DUPS = 16, /* LP_SHADOWED marks are computed */
    F_ODD = 32,  /* encodes through a plain table: holes, sparse elements, or
                    keys that are not what the container's JSON kind allows */
};

/* Upvalues of the Lua-facing functions: sluice.null, the proxies' metatable,
 * sluice.array, and (only __pairs) the wrapped next. */
#define UP_NULL lua_upvalueindex(1)
#define UP_MT lua_upvalueindex(2)
#define UP_ARRAY lua_upvalueindex(3)
#define UP_NEXT lua_upvalueindex(4)

struct sl_luaproxy {
    sl_luajson_udata enc; /* first member: rules/luajson.c calls enc.encode */
    uint64_t gen;         /* proxies of another generation are stale */
    const void *mt;       /* the proxies' metatable */
    int ref_null, ref_mt, ref_array;
};

typedef struct lp_proxy {
    sl_luaproxy *px;
    const sl_evview *ev;
    uint64_t gen;
    lua_Integer len; /* arrays: the current length */
    uint32_t node;   /* the container in ev */
    uint32_t n0;     /* its original children */
    uint32_t nadded; /* added entries in ov */
    uint8_t type;    /* SL_JSON_OBJECT or SL_JSON_ARRAY */
    uint8_t flags;
} lp_proxy;

static const char lp_stale_msg[] = "event proxy used after its call returned";

static inline uint32_t *lp_kid(lp_proxy *p)
{
    return (uint32_t *)(p + 1);
}

static inline uint8_t *lp_st(lp_proxy *p)
{
    return (uint8_t *)(lp_kid(p) + p->n0);
}

static inline const sl_evview_value *lp_child(lp_proxy *p, uint32_t ord)
{
    return &p->ev->v[lp_kid(p)[ord]];
}

/* The proxy at idx (known to be one), raising the stale error when its call
 * is over. */
static lp_proxy *lp_self(lua_State *L, int idx)
{
    lp_proxy *p = lua_touserdata(L, idx);
    if (p->gen != p->px->gen)
        luaL_error(L, "%s", lp_stale_msg);
    return p;
}

/* The proxy at idx, or NULL when the value is not one (mt_idx: the
 * metatable, an absolute or pseudo index). */
static lp_proxy *lp_test(lua_State *L, int idx, int mt_idx)
{
    if (lua_type(L, idx) != LUA_TUSERDATA || !lua_getmetatable(L, idx))
        return NULL;
    bool mine = lua_rawequal(L, -1, mt_idx);
    lua_pop(L, 1);
    return mine ? lua_touserdata(L, idx) : NULL;
}

/* ---- making proxies and reading values ---------------------------------- */

/* Pushes a new proxy of container node of ev (mt_idx: absolute or pseudo). */
static lp_proxy *lp_new(lua_State *L, sl_luaproxy *px, const sl_evview *ev, uint32_t node,
                        int mt_idx)
{
    const sl_evview_value *v = &ev->v[node];
    uint32_t n = 0;
    for (uint32_t c = v->first; c != NONE; c = ev->v[c].next)
        n++;
    lp_proxy *p = lua_newuserdatauv(L, sizeof *p + (size_t)n * (sizeof(uint32_t) + 1),
                                    UV_ORIG - 1 + (n <= LP_UV_SLOTS ? (int)n : 0));
    *p = (lp_proxy){.px = px,
                    .ev = ev,
                    .gen = px->gen,
                    .len = n,
                    .node = node,
                    .n0 = n,
                    .type = v->type == SL_JSON_ARRAY ? SL_JSON_ARRAY : SL_JSON_OBJECT};
    uint32_t *kid = lp_kid(p), i = 0;
    for (uint32_t c = v->first; c != NONE; c = ev->v[c].next)
        kid[i++] = c;
    memset(lp_st(p), 0, n);
    lua_pushvalue(L, mt_idx);
    lua_setmetatable(L, -2);
    return p;
}

/* Pushes user value slot of p (at the absolute index pidx), creating its
 * table when create; returns false (nothing pushed) when it does not exist. */
static bool lp_uv(lua_State *L, lp_proxy *p, int pidx, int slot, bool create)
{
    int flag = slot == UV_OV ? F_OV : F_MAP;
    if (p->flags & flag) {
        lua_getiuservalue(L, pidx, slot);
        return true;
    }
    if (!create)
        return false;
    /* Room for the usual first writes: a cached child, or one added key. */
    lua_createtable(L, 0, 2);
    lua_pushvalue(L, -1);
    lua_setiuservalue(L, pidx, slot);
    p->flags |= (uint8_t)flag;
    return true;
}

/* Pushes the stored value of original child ord (its st is LP_SET). */
static void lp_orig_get(lua_State *L, lp_proxy *p, int pidx, uint32_t ord)
{
    if (p->n0 <= LP_UV_SLOTS) {
        lua_getiuservalue(L, pidx, UV_ORIG + (int)ord);
        return;
    }
    lua_getiuservalue(L, pidx, UV_OV);
    lua_rawgeti(L, -1, (lua_Integer)ord + 1);
    lua_remove(L, -2);
}

/* Stores the value at the absolute index vidx (nil clears) for original
 * child ord. */
static void lp_orig_put(lua_State *L, lp_proxy *p, int pidx, uint32_t ord, int vidx)
{
    if (p->n0 <= LP_UV_SLOTS) {
        lua_pushvalue(L, vidx);
        lua_setiuservalue(L, pidx, UV_ORIG + (int)ord);
        return;
    }
    if (lua_isnil(L, vidx) && !(p->flags & F_OV))
        return;
    lp_uv(L, p, pidx, UV_OV, true);
    lua_pushvalue(L, vidx);
    lua_rawseti(L, -2, (lua_Integer)ord + 1);
    lua_pop(L, 1);
}

/* A number as rules/luajson.c decodes it: integer text that fits an int64
 * as an integer, anything else as the double the parser computed. */
static void lp_push_number(lua_State *L, const sl_evview_value *v)
{
    const char *s = v->s, *e = v->s + v->len;
    bool neg = s < e && *s == '-';
    const char *q = s + neg;
    uint64_t m = 0;
    bool integer = q < e;
    for (; q < e; q++) {
        unsigned d = (unsigned)(unsigned char)*q - '0';
        if (d > 9 || m > (UINT64_MAX - d) / 10) {
            integer = false;
            break;
        }
        m = m * 10 + d;
    }
    if (integer && m <= (uint64_t)INT64_MAX + neg)
        lua_pushinteger(L, neg ? (lua_Integer)(0 - m) : (lua_Integer)m);
    else
        lua_pushnumber(L, (lua_Number)sl_evview_num(v));
}

static void lp_push_scalar(lua_State *L, const sl_evview_value *v, int null_idx)
{
    switch (v->type) {
    case SL_JSON_NULL:
        lua_pushvalue(L, null_idx);
        break;
    case SL_JSON_TRUE:
        lua_pushboolean(L, 1);
        break;
    case SL_JSON_FALSE:
        lua_pushboolean(L, 0);
        break;
    case SL_JSON_NUMBER:
        lp_push_number(L, v);
        break;
    case SL_JSON_STRING:
        lua_pushlstring(L, v->s, v->len);
        break;
    default:
        lua_pushnil(L);
    }
}

/* Pushes the current value of original child ord (0-based): the written
 * one, nil when deleted, else decoded from the event (a container becomes a
 * child proxy, kept as the child's value so the next read gives the same). */
static void lp_push_orig(lua_State *L, lp_proxy *p, int pidx, uint32_t ord, int null_idx,
                         int mt_idx)
{
    uint8_t *st = &lp_st(p)[ord];
    switch (*st & LP_STMASK) {
    case LP_DEL:
        lua_pushnil(L);
        return;
    case LP_SET:
        lp_orig_get(L, p, pidx, ord);
        return;
    default:
        break;
    }
    const sl_evview_value *v = lp_child(p, ord);
    if (v->type != SL_JSON_OBJECT && v->type != SL_JSON_ARRAY) {
        lp_push_scalar(L, v, null_idx);
        return;
    }
    lp_new(L, p->px, p->ev, lp_kid(p)[ord], mt_idx);
    lp_orig_put(L, p, pidx, ord, lua_gettop(L));
    *st = (uint8_t)((*st & LP_SHADOWED) | LP_SET);
    p->flags |= F_KID;
}

/* Element i (>= 1) of an array proxy. */
static void lp_push_elem(lua_State *L, lp_proxy *p, int pidx, lua_Integer i, int null_idx,
                         int mt_idx)
{
    if (i <= (lua_Integer)p->n0) {
        lp_push_orig(L, p, pidx, (uint32_t)(i - 1), null_idx, mt_idx);
    } else if (p->flags & F_OV) {
        lua_getiuservalue(L, pidx, UV_OV);
        lua_rawgeti(L, -1, i);
        lua_remove(L, -2);
    } else {
        lua_pushnil(L);
    }
}

/* Whether the value at idx is a number with an integer value (*out). */
static bool lp_intkey(lua_State *L, int idx, lua_Integer *out)
{
    int ok = 0;
    if (lua_type(L, idx) != LUA_TNUMBER)
        return false;
    *out = lua_tointegerx(L, idx, &ok);
    return ok;
}

/* ---- finding keys ----------------------------------------------------------- */

/* The last original member named [k, k + kl), or -1. */
static int64_t lp_scan(lp_proxy *p, const char *k, size_t kl)
{
    const uint32_t *kid = lp_kid(p);
    const sl_evview_value *v = p->ev->v;
    for (uint32_t i = p->n0; i-- > 0;) {
        const sl_evview_value *m = &v[kid[i]];
        if (m->klen == kl && memcmp(m->key, k, kl) == 0)
            return i;
    }
    return -1;
}

/* Builds the map: original members (the last of repeated keys wins, as in
 * rules/luajson.c) and added entries. */
static void lp_build_map(lua_State *L, lp_proxy *p, int pidx)
{
    bool obj = p->type == SL_JSON_OBJECT;
    uint32_t n = (obj ? p->n0 : 0) + p->nadded;
    luaL_checkstack(L, 4, "event proxy");
    lua_createtable(L, 0, n > INT_MAX ? INT_MAX : (int)n);
    int map = lua_gettop(L);
    for (uint32_t i = 0; obj && i < p->n0; i++) {
        const sl_evview_value *m = lp_child(p, i);
        lua_pushlstring(L, m->key, m->klen);
        lua_pushinteger(L, (lua_Integer)i);
        lua_rawset(L, map);
    }
    if (p->nadded) {
        lua_getiuservalue(L, pidx, UV_OV);
        for (uint32_t j = 1; j <= p->nadded; j++) {
            lua_rawgeti(L, -1, -2 * (lua_Integer)j);
            lua_pushinteger(L, (lua_Integer)(p->n0 + j - 1));
            lua_rawset(L, map);
        }
        lua_pop(L, 1);
    }
    lua_setiuservalue(L, pidx, UV_MAP);
    p->flags |= F_MAP;
}

/* Position of the key at kidx (absolute): an original member (objects),
 * n0 + j - 1 for added entry j, or -1. May build the map. */
static int64_t lp_find(lua_State *L, lp_proxy *p, int pidx, int kidx)
{
    if (!(p->flags & F_MAP) &&
        ((p->type == SL_JSON_OBJECT && p->n0 > LP_MAP_MIN) || p->nadded > LP_ADDED_SCAN))
        lp_build_map(L, p, pidx);
    if (p->flags & F_MAP) {
        lua_getiuservalue(L, pidx, UV_MAP);
        lua_pushvalue(L, kidx);
        lua_rawget(L, -2);
        int64_t pos = lua_isinteger(L, -1) ? (int64_t)lua_tointeger(L, -1) : -1;
        lua_pop(L, 2);
        return pos;
    }
    if (p->type == SL_JSON_OBJECT && lua_type(L, kidx) == LUA_TSTRING) {
        size_t kl;
        const char *k = lua_tolstring(L, kidx, &kl);
        int64_t i = lp_scan(p, k, kl);
        if (i >= 0)
            return i;
    }
    if (p->nadded == 0)
        return -1;
    lua_getiuservalue(L, pidx, UV_OV);
    for (uint32_t j = 1; j <= p->nadded; j++) {
        lua_rawgeti(L, -1, -2 * (lua_Integer)j);
        bool eq = lua_rawequal(L, -1, kidx);
        lua_pop(L, 1);
        if (eq) {
            lua_pop(L, 1);
            return (int64_t)p->n0 + j - 1;
        }
    }
    lua_pop(L, 1);
    return -1;
}

/* ---- repeated keys ------------------------------------------------------- */

static int lp_key_cmp(const void *a, const void *b, void *ctx)
{
    lp_proxy *p = ctx;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    const sl_evview_value *m = lp_child(p, x), *n = lp_child(p, y);
    if (m->klen != n->klen)
        return m->klen < n->klen ? -1 : 1;
    int c = memcmp(m->key, n->key, m->klen);
    if (c)
        return c;
    return x < y ? -1 : x > y;
}

/* Marks the members of an object whose key comes again later (iteration
 * skips them, and so does encoding once they are marked). Never allocates
 * Lua memory; without C memory for a big object it leaves them unmarked. */
static void lp_dups(lp_proxy *p)
{
    if ((p->flags & F_DUPS) || p->type != SL_JSON_OBJECT)
        return;
    p->flags |= F_DUPS;
    uint8_t *st = lp_st(p);
    uint32_t n = p->n0;
    if (n <= LP_DUPS_PAIRWISE) {
        /* A 256-bit filter on a hash of (length, first, middle and last
         * byte): the pairwise look only runs when two members collide. */
        uint64_t seen[4] = {0, 0, 0, 0};
        bool maybe = false;
        for (uint32_t i = 0; i < n && !maybe; i++) {
            const sl_evview_value *m = lp_child(p, i);
            const unsigned char *k = (const unsigned char *)m->key;
            uint32_t h = m->klen * 0x9E3779B1u;
            if (m->klen)
                h ^= k[0] * 0x85EBCA77u ^ k[m->klen / 2] * 0xC2B2AE3Du ^
                     k[m->klen - 1] * 0x27D4EB2Fu;
            h = (h ^ h >> 15) * 0x2C1B3C6Du;
            h >>= 24;
            uint64_t bit = UINT64_C(1) << (h & 63);
            maybe = (seen[h >> 6] & bit) != 0;
            seen[h >> 6] |= bit;
        }
        if (!maybe)
            return;
        for (uint32_t i = 0; i < n; i++) {
            const sl_evview_value *m = lp_child(p, i);
            for (uint32_t j = i + 1; j < n; j++) {
                const sl_evview_value *o = lp_child(p, j);
                if (o->klen == m->klen && memcmp(o->key, m->key, m->klen) == 0) {
                    st[i] |= LP_SHADOWED;
                    break;
                }
            }
        }
        return;
    }
    uint32_t *ord = malloc((size_t)n * sizeof *ord);
    if (!ord)
        return;
    for (uint32_t i = 0; i < n; i++)
        ord[i] = i;
    qsort_r(ord, n, sizeof *ord, lp_key_cmp, p);
    for (uint32_t i = 0; i + 1 < n; i++) {
        const sl_evview_value *m = lp_child(p, ord[i]), *o = lp_child(p, ord[i + 1]);
        if (m->klen == o->klen && memcmp(m->key, o->key, m->klen) == 0)
            st[ord[i]] |= LP_SHADOWED;
    }
    free(ord);
}

/* Before a write or delete of original member pos: marks the earlier
 * members with its key, so that an older copy does not come back in the
 * encoding (untouched repeated keys are encoded as written, which reads the
 * same: the last one wins). */
static void lp_shadow_before(lp_proxy *p, uint32_t pos)
{
    if ((p->flags & F_DUPS) || p->type != SL_JSON_OBJECT)
        return;
    if (p->n0 > LP_DUPS_PAIRWISE) {
        lp_dups(p);
        return;
    }
    const sl_evview_value *m = lp_child(p, pos);
    uint8_t *st = lp_st(p);
    for (uint32_t i = 0; i < pos; i++) {
        const sl_evview_value *o = lp_child(p, i);
        if (o->klen == m->klen && memcmp(o->key, m->key, m->klen) == 0)
            st[i] |= LP_SHADOWED;
    }
}

/* ---- reading and writing through a proxy ---------------------------------- */

/* Pushes p[key] (key at the absolute index kidx). */
static void lp_get(lua_State *L, lp_proxy *p, int pidx, int kidx, int null_idx, int mt_idx)
{
    lua_Integer i;
    if (p->type == SL_JSON_ARRAY && lp_intkey(L, kidx, &i) && i >= 1) {
        lp_push_elem(L, p, pidx, i, null_idx, mt_idx);
        return;
    }
    int64_t pos = lp_find(L, p, pidx, kidx);
    if (pos < 0) {
        lua_pushnil(L);
    } else if (pos < (int64_t)p->n0) {
        lp_push_orig(L, p, pidx, (uint32_t)pos, null_idx, mt_idx);
    } else {
        lua_getiuservalue(L, pidx, UV_OV);
        lua_rawgeti(L, -1, -2 * (pos - p->n0 + 1) - 1);
        lua_remove(L, -2);
    }
}

/* Whether element i of an array proxy holds a value. */
static bool lp_live(lua_State *L, lp_proxy *p, int pidx, lua_Integer i)
{
    if (i <= (lua_Integer)p->n0)
        return (lp_st(p)[i - 1] & LP_STMASK) != LP_DEL;
    if (!(p->flags & F_OV))
        return false;
    lua_getiuservalue(L, pidx, UV_OV);
    bool live = lua_rawgeti(L, -1, i) != LUA_TNIL;
    lua_pop(L, 2);
    return live;
}

/* a[i] = value at vidx, for i >= 1. The length follows Lua's border rules
 * for a sequence: appending at len + 1 grows it (over elements already
 * written beyond), deleting the last element shrinks it (over holes). */
static void lp_set_elem(lua_State *L, lp_proxy *p, int pidx, lua_Integer i, int vidx)
{
    bool del = lua_isnil(L, vidx);
    if (i <= (lua_Integer)p->n0) {
        lp_orig_put(L, p, pidx, (uint32_t)(i - 1), vidx);
        lp_st(p)[i - 1] = del ? LP_DEL : LP_SET;
    } else if (!del || (p->flags & F_OV)) {
        lp_uv(L, p, pidx, UV_OV, true);
        lua_pushvalue(L, vidx);
        lua_rawseti(L, -2, i);
        lua_pop(L, 1);
    }
    p->flags |= F_MOD;
    if (del) {
        if (i == p->len) {
            do
                p->len--;
            while (p->len > 0 && !lp_live(L, p, pidx, p->len));
        } else if (i < p->len) {
            p->flags |= F_ODD; /* a hole */
        }
    } else if (i == p->len + 1) {
        do
            p->len++;
        while (lp_live(L, p, pidx, p->len + 1));
    } else if (i > p->len + 1) {
        p->flags |= F_ODD; /* beyond the end, as a table's hash part holds it */
    }
}

/* p[key] = value (key at kidx, value at vidx; absolute). */
static void lp_set(lua_State *L, lp_proxy *p, int pidx, int kidx, int vidx)
{
    lua_Integer i;
    if (p->type == SL_JSON_ARRAY && lp_intkey(L, kidx, &i) && i >= 1) {
        lp_set_elem(L, p, pidx, i, vidx);
        return;
    }
    int kt = lua_type(L, kidx);
    if (kt == LUA_TNIL)
        luaL_error(L, "index is nil");
    if (kt == LUA_TNUMBER && !lua_isinteger(L, kidx) && isnan(lua_tonumber(L, kidx)))
        luaL_error(L, "index is NaN");
    bool del = lua_isnil(L, vidx);
    int64_t pos = lp_find(L, p, pidx, kidx);
    p->flags |= F_MOD;
    if (pos >= 0 && pos < (int64_t)p->n0) {
        uint8_t *st = &lp_st(p)[pos];
        lp_shadow_before(p, (uint32_t)pos);
        lp_orig_put(L, p, pidx, (uint32_t)pos, vidx);
        *st = (uint8_t)((*st & LP_SHADOWED) | (del ? LP_DEL : LP_SET));
        return;
    }
    if (pos >= 0) {
        lua_getiuservalue(L, pidx, UV_OV);
        lua_pushvalue(L, vidx);
        lua_rawseti(L, -2, -2 * (pos - p->n0 + 1) - 1);
        lua_pop(L, 1);
        return;
    }
    if (del)
        return;
    /* A new entry: key and value first, then it counts (a memory error in
     * between leaves the proxy as it was). */
    lua_Integer j = (lua_Integer)p->nadded + 1;
    lp_uv(L, p, pidx, UV_OV, true);
    lua_pushvalue(L, kidx);
    lua_rawseti(L, -2, -2 * j);
    lua_pushvalue(L, vidx);
    lua_rawseti(L, -2, -2 * j - 1);
    lua_pop(L, 1);
    if (p->flags & F_MAP) {
        lua_getiuservalue(L, pidx, UV_MAP);
        lua_pushvalue(L, kidx);
        lua_pushinteger(L, (lua_Integer)p->n0 + j - 1);
        lua_rawset(L, -3);
        lua_pop(L, 1);
    }
    p->nadded = (uint32_t)j;
    if (kt != LUA_TSTRING || p->type == SL_JSON_ARRAY)
        p->flags |= F_ODD;
}

/* #p: the length of an array; for an object, the border of the integer
 * keys a script added (0 without), as for a table. */
static lua_Integer lp_length(lua_State *L, lp_proxy *p, int pidx)
{
    if (p->type == SL_JSON_ARRAY)
        return p->len;
    if (!(p->flags & F_ODD))
        return 0;
    lua_Integer n = 0;
    for (;;) {
        lua_pushinteger(L, n + 1);
        int64_t pos = lp_find(L, p, pidx, lua_gettop(L));
        lua_pop(L, 1);
        if (pos < (int64_t)p->n0)
            return n;
        lua_getiuservalue(L, pidx, UV_OV);
        bool live = lua_rawgeti(L, -1, -2 * (pos - p->n0 + 1) - 1) != LUA_TNIL;
        lua_pop(L, 2);
        if (!live)
            return n;
        n++;
    }
}

/* ---- iteration ----------------------------------------------------------- */

/* Where an iteration stands. phase 0: original members (at = ordinal) or
 * elements (at = index); phase 1: array elements beyond the length (at =
 * the last key given, 0 at the start); phase 2: added entries (at = j). */
typedef struct lp_cursor {
    int phase;
    lua_Integer at;
} lp_cursor;

/* Pushes the key and value of the next entry from c and advances c; false
 * (nothing pushed) at the end. Order: members or elements, elements beyond
 * the length, added entries. */
static bool lp_step(lua_State *L, lp_proxy *p, int pidx, lp_cursor *c, int null_idx, int mt_idx)
{
    luaL_checkstack(L, 4, "event proxy");
    if (c->phase == 0) {
        if (p->type == SL_JSON_OBJECT) {
            lp_dups(p);
            const uint8_t *st = lp_st(p);
            for (; c->at < (lua_Integer)p->n0; c->at++) {
                uint8_t s = st[c->at];
                if ((s & LP_SHADOWED) || (s & LP_STMASK) == LP_DEL)
                    continue;
                const sl_evview_value *m = lp_child(p, (uint32_t)c->at);
                lua_pushlstring(L, m->key, m->klen);
                lp_push_orig(L, p, pidx, (uint32_t)c->at, null_idx, mt_idx);
                c->at++;
                return true;
            }
            c->phase = 2;
            c->at = 1;
        } else {
            for (; c->at <= p->len; c->at++) {
                lp_push_elem(L, p, pidx, c->at, null_idx, mt_idx);
                if (lua_isnil(L, -1)) {
                    lua_pop(L, 1);
                    continue;
                }
                lua_pushinteger(L, c->at);
                lua_insert(L, -2);
                c->at++;
                return true;
            }
            c->phase = 1;
            c->at = 0;
        }
    }
    if (c->phase == 1) {
        /* Original elements written past the length, then ov's. */
        const uint8_t *st = lp_st(p);
        if (c->at <= (lua_Integer)p->n0) {
            lua_Integer i = c->at > p->len ? c->at + 1 : p->len + 1;
            for (; i <= (lua_Integer)p->n0; i++)
                if ((st[i - 1] & LP_STMASK) == LP_SET) {
                    lua_pushinteger(L, i);
                    lp_orig_get(L, p, pidx, (uint32_t)(i - 1));
                    c->at = i;
                    return true;
                }
        }
        if (p->flags & F_OV) {
            lua_getiuservalue(L, pidx, UV_OV);
            int ov = lua_gettop(L);
            if (c->at > (lua_Integer)p->n0)
                lua_pushinteger(L, c->at);
            else
                lua_pushnil(L);
            while (lua_next(L, ov)) {
                lua_Integer k;
                if (lua_isinteger(L, -2) && (k = lua_tointeger(L, -2)) > p->len &&
                    k > (lua_Integer)p->n0) {
                    c->at = k;
                    lua_remove(L, ov);
                    return true;
                }
                lua_pop(L, 1);
            }
            lua_pop(L, 1);
        }
        c->phase = 2;
        c->at = 1;
    }
    if (c->phase == 2 && p->nadded) {
        lua_getiuservalue(L, pidx, UV_OV);
        for (; c->at <= (lua_Integer)p->nadded; c->at++) {
            if (lua_rawgeti(L, -1, -2 * c->at - 1) == LUA_TNIL) {
                lua_pop(L, 1);
                continue;
            }
            lua_rawgeti(L, -2, -2 * c->at);
            lua_insert(L, -2);
            lua_remove(L, -3);
            c->at++;
            return true;
        }
        lua_pop(L, 1);
    }
    return false;
}

/* The cursor just after the key at kidx (for next). */
static void lp_cursor_after(lua_State *L, lp_proxy *p, int pidx, int kidx, lp_cursor *c)
{
    lua_Integer i;
    if (lua_isnil(L, kidx)) {
        *c = (lp_cursor){0, p->type == SL_JSON_OBJECT ? 0 : 1};
        return;
    }
    if (p->type == SL_JSON_ARRAY && lp_intkey(L, kidx, &i) && i >= 1) {
        if (i <= p->len) {
            *c = (lp_cursor){0, i + 1};
        } else {
            /* Beyond the length: go on from that key in the overrides. A
             * key the loop has just cleared is still a valid position there
             * (as for lua_next), so never start the overrides over. */
            bool known = i <= (lua_Integer)p->n0 || (p->flags & F_OV);
            *c = (lp_cursor){1, known ? i : 0};
        }
        return;
    }
    int64_t pos = lp_find(L, p, pidx, kidx);
    if (pos < 0)
        luaL_error(L, "invalid key to 'next'");
    if (pos < (int64_t)p->n0)
        *c = (lp_cursor){0, pos + 1};
    else
        *c = (lp_cursor){2, pos - p->n0 + 2};
}

/* Pushes a new table with p's entries (at pidx): one level, or all the way
 * down when deep (nested proxies become tables too, up to LP_MAX_DEPTH).
 * Arrays get the sluice.array metatable. */
static void lp_totable(lua_State *L, int pidx, bool deep, int depth, int null_idx, int mt_idx,
                       int array_idx)
{
    lp_proxy *p = lp_self(L, pidx);
    if (depth > LP_MAX_DEPTH)
        luaL_error(L, "sluice.table: nesting deeper than %d (an event that contains itself?)",
                   LP_MAX_DEPTH);
    luaL_checkstack(L, 8, "event proxy");
    bool arr = p->type == SL_JSON_ARRAY;
    lua_Integer na = arr ? p->len : 0, nh = arr ? 0 : (lua_Integer)p->n0 + p->nadded;
    lua_createtable(L, na > INT_MAX ? INT_MAX : (int)na, nh > INT_MAX ? INT_MAX : (int)nh);
    int t = lua_gettop(L);
    if (arr) {
        lua_pushvalue(L, array_idx);
        lua_setmetatable(L, t);
    }
    lp_cursor c = {0, arr ? 1 : 0};
    while (lp_step(L, p, pidx, &c, null_idx, mt_idx)) {
        if (deep && lp_test(L, -1, mt_idx)) {
            lp_totable(L, lua_gettop(L), true, depth + 1, null_idx, mt_idx, array_idx);
            lua_remove(L, -2);
        }
        lua_rawset(L, t);
    }
}

/* ---- encoding ------------------------------------------------------------ */

/* Protected: argument 1 is a proxy; returns the one-level table of it. */
static int lp_shallow_p(lua_State *L)
{
    lp_proxy *p = lua_touserdata(L, 1);
    sl_luaproxy *px = p->px;
    lua_settop(L, 1);
    lua_rawgeti(L, LUA_REGISTRYINDEX, px->ref_null);
    lua_rawgeti(L, LUA_REGISTRYINDEX, px->ref_mt);
    lua_rawgeti(L, LUA_REGISTRYINDEX, px->ref_array);
    lp_totable(L, 1, false, 0, 2, 3, 4);
    return 1;
}

/* Text of original members (or elements) that nobody touched, kept as one
 * span of the event text while they follow each other: [start, end). */
typedef struct lp_run {
    const char *start, *end;
} lp_run;

static int lp_run_flush(sl_luajson_enc *E, lp_run *r)
{
    int rc = 0;
    if (r->start)
        rc = sl_luajson_enc_raw(E, r->start, (size_t)(r->end - r->start));
    r->start = NULL;
    return rc;
}

/* The object's members: untouched runs copied as text (separators included),
 * the others encoded from their values. */
static int lp_encode_object(sl_luajson_enc *E, lua_State *L, lp_proxy *p, int pidx)
{
    int ov = 0, rc;
    if (p->flags & F_OV) {
        lua_getiuservalue(L, pidx, UV_OV);
        ov = lua_gettop(L);
    }
    if ((rc = sl_luajson_enc_raw(E, "{", 1)))
        return rc;
    bool first = true;
    lp_run run = {NULL, NULL};
    const uint8_t *st = lp_st(p);
    uintptr_t s0 = (uintptr_t)p->ev->scratch, s1 = s0 + p->ev->scratch_len;
    for (uint32_t i = 0; i < p->n0; i++) {
        uint8_t s = st[i];
        const sl_evview_value *m = lp_child(p, i);
        if (s == LP_ORIG && run.start) {
            run.end = m->raw + m->raw_len; /* the text since the run began */
            continue;
        }
        if ((rc = lp_run_flush(E, &run)))
            return rc;
        if ((s & LP_SHADOWED) || (s & LP_STMASK) == LP_DEL)
            continue;
        if (!first && (rc = sl_luajson_enc_raw(E, ",", 1)))
            return rc;
        first = false;
        uintptr_t k = (uintptr_t)m->key;
        bool escaped = p->ev->scratch && k >= s0 && k < s1;
        if (s == LP_ORIG && !escaped) {
            /* "key": value as written, and the members after it. */
            run.start = m->key - 1;
            run.end = m->raw + m->raw_len;
            continue;
        }
        if (escaped)
            rc = sl_luajson_enc_string(E, m->key, m->klen);
        else
            rc = sl_luajson_enc_raw(E, m->key - 1, (size_t)m->klen + 2);
        if (rc || (rc = sl_luajson_enc_raw(E, ":", 1)))
            return rc;
        if (s == LP_ORIG) {
            run.start = m->raw;
            run.end = m->raw + m->raw_len;
            continue;
        }
        lp_orig_get(L, p, pidx, i);
        if ((rc = sl_luajson_enc_member(E, m->key, m->klen, 0)))
            return rc;
    }
    if ((rc = lp_run_flush(E, &run)))
        return rc;
    for (lua_Integer j = 1; j <= (lua_Integer)p->nadded; j++) {
        lua_rawgeti(L, ov, -2 * j);
        if (lua_rawgeti(L, ov, -2 * j - 1) == LUA_TNIL) {
            lua_pop(L, 2);
            continue;
        }
        size_t kl;
        const char *k = lua_tolstring(L, -2, &kl); /* a string: others are F_ODD */
        if ((!first && (rc = sl_luajson_enc_raw(E, ",", 1))) ||
            (rc = sl_luajson_enc_string(E, k, kl)) || (rc = sl_luajson_enc_raw(E, ":", 1)) ||
            (rc = sl_luajson_enc_member(E, k, kl, 0)))
            return rc;
        first = false;
        lua_pop(L, 1);
    }
    return sl_luajson_enc_raw(E, "}", 1);
}

static int lp_encode_array(sl_luajson_enc *E, lua_State *L, lp_proxy *p, int pidx)
{
    int ov = 0, rc;
    if (p->flags & F_OV) {
        lua_getiuservalue(L, pidx, UV_OV);
        ov = lua_gettop(L);
    }
    if ((rc = sl_luajson_enc_raw(E, "[", 1)))
        return rc;
    const uint8_t *st = lp_st(p);
    lp_run run = {NULL, NULL};
    /* Without F_ODD, elements 1..len all hold values. */
    for (lua_Integer i = 1; i <= p->len; i++) {
        bool orig = i <= (lua_Integer)p->n0 && st[i - 1] == LP_ORIG;
        if (orig && run.start) {
            run.end = lp_child(p, (uint32_t)(i - 1))->raw + lp_child(p, (uint32_t)(i - 1))->raw_len;
            continue;
        }
        if ((rc = lp_run_flush(E, &run)) || (i > 1 && (rc = sl_luajson_enc_raw(E, ",", 1))))
            return rc;
        if (orig) {
            const sl_evview_value *m = lp_child(p, (uint32_t)(i - 1));
            run.start = m->raw;
            run.end = m->raw + m->raw_len;
            continue;
        }
        if (i <= (lua_Integer)p->n0)
            lp_orig_get(L, p, pidx, (uint32_t)(i - 1));
        else
            lua_rawgeti(L, ov, i);
        if ((rc = sl_luajson_enc_member(E, NULL, 0, i)))
            return rc;
    }
    if ((rc = lp_run_flush(E, &run)))
        return rc;
    return sl_luajson_enc_raw(E, "]", 1);
}

/* The encoder rules/luajson.c calls for userdata (see sl_luajson_udata). */
static int lp_encode(sl_luajson_udata *self, sl_luajson_enc *E, lua_State *L, int idx)
{
    sl_luaproxy *px = (sl_luaproxy *)self;
    if (!lua_getmetatable(L, idx))
        return SL_EUNSUPPORTED;
    bool mine = lua_topointer(L, -1) == px->mt;
    lua_pop(L, 1);
    if (!mine)
        return SL_EUNSUPPORTED;
    lp_proxy *p = lua_touserdata(L, idx);
    if (p->gen != px->gen)
        return sl_luajson_enc_fail(E, lp_stale_msg);
    if (!(p->flags & (F_OV | F_MOD | F_KID))) {
        const sl_evview_value *v = &p->ev->v[p->node];
        return sl_luajson_enc_raw(E, v->raw, v->raw_len);
    }
    if (p->flags & F_ODD) {
        /* Rare shapes encode as the table they would be, with the table
         * rules (and errors) of rules/luajson.c. */
        lua_pushcfunction(L, lp_shallow_p);
        lua_pushvalue(L, idx);
        int st = lua_pcall(L, 1, 1, 0);
        if (st == LUA_ERRMEM || (st != LUA_OK && !lua_isstring(L, -1)))
            return sl_luajson_enc_nomem(E);
        if (st != LUA_OK)
            return sl_luajson_enc_fail(E, lua_tostring(L, -1));
        return sl_luajson_enc_value(E, -1);
    }
    return p->type == SL_JSON_OBJECT ? lp_encode_object(E, L, p, idx)
                                     : lp_encode_array(E, L, p, idx);
}

/* ---- the Lua side ---------------------------------------------------------- */

static int lp_index(lua_State *L)
{
    lp_proxy *p = lp_self(L, 1);
    lp_get(L, p, 1, 2, UP_NULL, UP_MT);
    return 1;
}

static int lp_newindex(lua_State *L)
{
    lp_proxy *p = lp_self(L, 1);
    lp_set(L, p, 1, 2, 3);
    return 0;
}

static int lp_len(lua_State *L)
{
    lp_proxy *p = lp_self(L, 1);
    lua_pushinteger(L, lp_length(L, p, 1));
    return 1;
}

static int lp_pairs(lua_State *L)
{
    lp_self(L, 1);
    lua_pushvalue(L, UP_NEXT);
    lua_pushvalue(L, 1);
    lua_pushnil(L);
    return 3;
}

static int lp_tostring(lua_State *L)
{
    lua_pushfstring(L, "sluice.event: %p", lua_touserdata(L, 1));
    return 1;
}

/* type(v): "table" for a proxy. */
static int lp_type_g(lua_State *L)
{
    luaL_argcheck(L, lua_type(L, 1) != LUA_TNONE, 1, "value expected");
    if (lp_test(L, 1, UP_MT))
        lua_pushliteral(L, "table");
    else
        lua_pushstring(L, luaL_typename(L, 1));
    return 1;
}

/* next(t [, k]): also over proxies, in the order of pairs(). */
static int lp_next_g(lua_State *L)
{
    lua_settop(L, 2);
    lp_proxy *p = lp_test(L, 1, UP_MT);
    if (!p) {
        luaL_checktype(L, 1, LUA_TTABLE);
        if (lua_next(L, 1))
            return 2;
        lua_pushnil(L);
        return 1;
    }
    lp_self(L, 1);
    lp_cursor c;
    lp_cursor_after(L, p, 1, 2, &c);
    if (lp_step(L, p, 1, &c, UP_NULL, UP_MT))
        return 2;
    lua_pushnil(L);
    return 1;
}

static int lp_rawget_g(lua_State *L)
{
    lp_proxy *p = lp_test(L, 1, UP_MT);
    if (p) {
        lp_self(L, 1);
        luaL_checkany(L, 2);
        lua_settop(L, 2);
        lp_get(L, p, 1, 2, UP_NULL, UP_MT);
        return 1;
    }
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checkany(L, 2);
    lua_settop(L, 2);
    lua_rawget(L, 1);
    return 1;
}

static int lp_rawset_g(lua_State *L)
{
    lp_proxy *p = lp_test(L, 1, UP_MT);
    luaL_checkany(L, 2);
    luaL_checkany(L, 3);
    lua_settop(L, 3);
    if (p) {
        lp_self(L, 1);
        lp_set(L, p, 1, 2, 3);
        lua_settop(L, 1);
        return 1;
    }
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_rawset(L, 1);
    return 1;
}

static int lp_rawlen_g(lua_State *L)
{
    lp_proxy *p = lp_test(L, 1, UP_MT);
    if (p) {
        lp_self(L, 1);
        lua_pushinteger(L, lp_length(L, p, 1));
        return 1;
    }
    int t = lua_type(L, 1);
    luaL_argexpected(L, t == LUA_TTABLE || t == LUA_TSTRING, 1, "table or string");
    lua_pushinteger(L, (lua_Integer)lua_rawlen(L, 1));
    return 1;
}

/* getmetatable(v): sluice.array for an array proxy, nil for an object one
 * (what the tables of rules/luajson.c have). */
static int lp_getmetatable_g(lua_State *L)
{
    luaL_checkany(L, 1);
    lp_proxy *p = lp_test(L, 1, UP_MT);
    if (p) {
        if (p->type == SL_JSON_ARRAY)
            lua_pushvalue(L, UP_ARRAY);
        else
            lua_pushnil(L);
        return 1;
    }
    if (!lua_getmetatable(L, 1)) {
        lua_pushnil(L);
        return 1;
    }
    luaL_getmetafield(L, 1, "__metatable");
    return 1;
}

/* sluice.table(v): a proxy as real tables, deep; anything else as it is. */
static int lp_table_g(lua_State *L)
{
    lua_settop(L, 1);
    if (lp_test(L, 1, UP_MT))
        lp_totable(L, 1, true, 0, UP_NULL, UP_MT, UP_ARRAY);
    return 1;
}

/* Pushes fn as a closure over sluice.null, the metatable and sluice.array
 * (at absolute indexes), plus extra values already on top. */
static void lp_closure(lua_State *L, lua_CFunction fn, int null_idx, int mt, int arr, int extra)
{
    lua_pushvalue(L, null_idx);
    lua_pushvalue(L, mt);
    lua_pushvalue(L, arr);
    if (extra)
        lua_rotate(L, -3 - extra, 3);
    lua_pushcclosure(L, fn, 3 + extra);
}

/* Protected: argument 1 is where *out goes. */
static int lp_install_p(lua_State *L)
{
    sl_luaproxy **out = lua_touserdata(L, 1);
    lua_settop(L, 0);
    sl_luaproxy *px = lua_newuserdatauv(L, sizeof *px, 0);
    memset(px, 0, sizeof *px);
    px->enc.encode = lp_encode;
    px->ref_null = px->ref_mt = px->ref_array = LUA_NOREF;
    luaL_ref(L, LUA_REGISTRYINDEX); /* keeps px as long as the state */

    if (lua_getglobal(L, "sluice") != LUA_TTABLE)
        return luaL_error(L, "no sluice table");
    int sl = lua_gettop(L);
    lua_getfield(L, sl, "null");
    int null_idx = lua_gettop(L);
    lua_getfield(L, sl, "array");
    int arr = lua_gettop(L);
    lua_createtable(L, 0, 8);
    int mt = lua_gettop(L);
    px->mt = lua_topointer(L, mt);

    lp_closure(L, lp_next_g, null_idx, mt, arr, 0);
    int next = lua_gettop(L);
    static const struct {
        const char *name;
        lua_CFunction fn;
    } meta[] = {{"__index", lp_index}, {"__newindex", lp_newindex}, {"__len", lp_len}};
    for (size_t i = 0; i < sizeof meta / sizeof *meta; i++) {
        lp_closure(L, meta[i].fn, null_idx, mt, arr, 0);
        lua_setfield(L, mt, meta[i].name);
    }
    lua_pushvalue(L, next);
    lp_closure(L, lp_pairs, null_idx, mt, arr, 1);
    lua_setfield(L, mt, "__pairs");
    lua_pushcfunction(L, lp_tostring);
    lua_setfield(L, mt, "__tostring");
    lua_pushliteral(L, "sluice.event");
    lua_setfield(L, mt, "__name");
    lua_pushliteral(L, "sluice.event");
    lua_setfield(L, mt, "__metatable");

    static const struct {
        const char *name;
        lua_CFunction fn;
    } globals[] = {{"type", lp_type_g},
                   {"rawget", lp_rawget_g},
                   {"rawset", lp_rawset_g},
                   {"rawlen", lp_rawlen_g},
                   {"getmetatable", lp_getmetatable_g}};
    lua_pushvalue(L, next);
    lua_setglobal(L, "next");
    for (size_t i = 0; i < sizeof globals / sizeof *globals; i++) {
        lp_closure(L, globals[i].fn, null_idx, mt, arr, 0);
        lua_setglobal(L, globals[i].name);
    }
    lp_closure(L, lp_table_g, null_idx, mt, arr, 0);
    lua_setfield(L, sl, "table");

    lua_pushvalue(L, null_idx);
    px->ref_null = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_pushvalue(L, mt);
    px->ref_mt = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_pushvalue(L, arr);
    px->ref_array = luaL_ref(L, LUA_REGISTRYINDEX);
    sl_luajson_set_udata(L, &px->enc);
    *out = px;
    return 0;
}

int sl_luaproxy_install(lua_State *L, sl_luaproxy **out, sl_error *err)
{
    if (!lua_checkstack(L, 2))
        return sl_error_set(err, SL_ENOMEM, "event proxies: Lua stack: out of memory");
    lua_pushcfunction(L, lp_install_p);
    lua_pushlightuserdata(L, out);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
        const char *m = lua_tostring(L, -1);
        sl_error_set(err, SL_ENOMEM, "event proxies: %s", m ? m : "out of memory");
        lua_pop(L, 1);
        return SL_ENOMEM;
    }
    return 0;
}

/* ---- calls --------------------------------------------------------------- */

typedef struct lp_call_args {
    sl_luaproxy *px;
    const sl_evview *const *evs;
    size_t n;
    bool list;
} lp_call_args;

/* Runs inside the sandboxed call: (fn, args) -> fn(proxy or list). */
static int lp_call_p(lua_State *L)
{
    const lp_call_args *a = lua_touserdata(L, 2);
    lua_settop(L, 1);
    lua_rawgeti(L, LUA_REGISTRYINDEX, a->px->ref_mt);
    if (!a->list) {
        lp_new(L, a->px, a->evs[0], 0, 2);
    } else {
        lua_createtable(L, a->n > INT_MAX ? INT_MAX : (int)a->n, 0);
        for (size_t i = 0; i < a->n; i++) {
            lp_new(L, a->px, a->evs[i], 0, 2);
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
    }
    lua_remove(L, 2);
    lua_call(L, 1, 1);
    return 1;
}

int sl_luaproxy_call(lua_State *L, sl_luaproxy *px, const sl_evview *const *evs, size_t n,
                     bool list, sl_error *err)
{
    px->gen++;
    lp_call_args a = {px, evs, n, list};
    if (!lua_checkstack(L, 3)) {
        lua_pop(L, 1);
        return sl_error_set(err, SL_ENOMEM, "Lua stack: out of memory");
    }
    lua_pushcfunction(L, lp_call_p);
    lua_insert(L, -2);
    lua_pushlightuserdata(L, &a);
    return sl_sandbox_call(L, 2, 1, err);
}

void sl_luaproxy_release(sl_luaproxy *px)
{
    px->gen++;
}

int sl_luaproxy_kind(lua_State *L, sl_luaproxy *px, int idx)
{
    if (lua_type(L, idx) != LUA_TUSERDATA || !lua_getmetatable(L, idx))
        return 0;
    bool mine = lua_topointer(L, -1) == px->mt;
    lua_pop(L, 1);
    return mine ? ((lp_proxy *)lua_touserdata(L, idx))->type : 0;
}

int sl_luaproxy_to_list(lua_State *L, sl_luaproxy *px, int idx, sl_error *err)
{
    idx = lua_absindex(L, idx);
    if (sl_luaproxy_kind(L, px, idx) != SL_JSON_ARRAY)
        return sl_error_set(err, SL_EINVAL, "not an array proxy");
    lp_proxy *p = lua_touserdata(L, idx);
    if (p->gen != px->gen)
        return sl_error_set(err, SL_EINVAL, "%s", lp_stale_msg);
    if (!lua_checkstack(L, 2))
        return sl_error_set(err, SL_ENOMEM, "Lua stack: out of memory");
    lua_pushcfunction(L, lp_shallow_p);
    lua_pushvalue(L, idx);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) {
        lua_pop(L, 1);
        return sl_error_set(err, SL_ENOMEM, "event proxy: out of memory");
    }
    lua_replace(L, idx);
    return 0;
}
