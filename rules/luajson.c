/*
 * rules/luajson.c — JSON text <-> Lua values (see rules/luajson.h).
 *
 * Decoding is one strict recursive-descent pass (the grammar, UTF-8 and
 * escape rules of core/base/json.h) that builds the value on the Lua stack: the
 * members of an object or the elements of an array are pushed first and the
 * table is created afterwards with the exact size, so no table is ever
 * rehashed while it grows. Strings without escapes go to lua_pushlstring()
 * straight from the input; escaped ones are decoded into a stack buffer (or a
 * luaL_Buffer when long), so nothing is malloc'd per value.
 *
 * Encoding walks tables with lua_next() and raw accesses only (no metamethod
 * runs, so encoding never calls Lua code and never raises a Lua error) and
 * appends to an sl_buf.
 */
#include "rules/luajson.h"

#include <lauxlib.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Containers nested deeper than this are refused both ways (the encoder's
 * only defence against cycles). */
#define LJ_MAX_DEPTH 128
/* Members collected on the Lua stack before their table is created; bigger
 * containers are flushed into a table of twice this size and grow from there. */
#define LJ_FLUSH 128
/* Escaped strings decoding to at most this many bytes use a C stack buffer. */
#define LJ_STACK_STR 256
/* Numbers up to this many characters are converted from a C stack copy. */
#define LJ_STACK_NUM 64

/* Registry keys (their addresses) of sluice.null, the array metatable and
 * the userdata encoder (a light userdata). */
static char lj_null_key;
static char lj_array_key;
static char lj_udata_key;

/* ---- sluice.null and sluice.array ---------------------------------------- */

static int lj_null_tostring(lua_State *L)
{
    lua_pushliteral(L, "null");
    return 1;
}

/* Removes a __gc field a script may have put into the array metatable (a
 * table it can reach as sluice.array): the tables we mark with it would get a
 * finalizer, and finalizers run with hooks off, out of the sandbox's budget.
 * Expects the metatable on top. */
static void lj_array_no_gc(lua_State *L)
{
    lua_pushliteral(L, "__gc");
    if (lua_rawget(L, -2) != LUA_TNIL) {
        lua_pushliteral(L, "__gc");
        lua_pushnil(L);
        lua_rawset(L, -4);
    }
    lua_pop(L, 1);
}

/* sluice.array(t): marks t (or a new table) as an array and returns it. */
static int lj_array_call(lua_State *L)
{
    /* Argument 1 is the array metatable itself (this is its __call). */
    if (lua_isnoneornil(L, 2)) {
        lua_settop(L, 1);
        lua_newtable(L);
    } else {
        luaL_checktype(L, 2, LUA_TTABLE);
        lua_settop(L, 2);
        if (luaL_getmetafield(L, 2, "__metatable") != LUA_TNIL)
            return luaL_error(L, "cannot change a protected metatable");
    }
    lua_pushvalue(L, 1);
    lj_array_no_gc(L);
    lua_setmetatable(L, 2);
    return 1;
}

/* Creates sluice.null and pushes it. */
static void lj_create_null(lua_State *L)
{
    lua_newuserdatauv(L, 0, 0);
    lua_createtable(L, 0, 3);
    lua_pushliteral(L, "sluice.null");
    lua_setfield(L, -2, "__name");
    lua_pushcfunction(L, lj_null_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushliteral(L, "sluice.null"); /* getmetatable(sluice.null) gives this */
    lua_setfield(L, -2, "__metatable");
    lua_setmetatable(L, -2);
}

/* Creates the array metatable and pushes it. */
static void lj_create_array(lua_State *L)
{
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "sluice.array");
    lua_setfield(L, -2, "__name");
    lua_createtable(L, 0, 1); /* the array metatable's own metatable: makes it callable */
    lua_pushcfunction(L, lj_array_call);
    lua_setfield(L, -2, "__call");
    lua_setmetatable(L, -2);
}

/* Pushes the value at registry key, creating it once per state (each on its
 * own, so a memory error between the two leaves nothing half made). */
static void lj_push_ref(lua_State *L, const char *key, void (*create)(lua_State *))
{
    if (lua_rawgetp(L, LUA_REGISTRYINDEX, key) == LUA_TNIL) {
        lua_pop(L, 1);
        create(L);
        lua_pushvalue(L, -1);
        lua_rawsetp(L, LUA_REGISTRYINDEX, key);
    }
}

/* Pushes sluice.null and the array metatable, creating them when missing
 * (may raise a memory error). */
static void lj_push_refs(lua_State *L)
{
    lj_push_ref(L, &lj_null_key, lj_create_null);
    lj_push_ref(L, &lj_array_key, lj_create_array);
    lj_array_no_gc(L);
}

/* ---- decoding ------------------------------------------------------------ */

typedef struct lj_parser {
    lua_State *L;
    const unsigned char *start, *p, *end;
    int null_idx, array_idx; /* absolute stack slots */
    const char *why;         /* set on a parse error */
    const unsigned char *at; /* where the error is */
} lj_parser;

/* Bytes that may appear unescaped in a string and need no further look:
 * printable ASCII except '"' and '\'. */
static const unsigned char lj_plain[256] = {
    [0x20] = 1, [0x21] = 1, [0x23 ... 0x5b] = 1, [0x5d ... 0x7e] = 1, [0x7f] = 1,
};

/* The first byte in [q, end) that is not plain (lj_plain), or end. Eight
 * bytes at a time: a byte is flagged when it is below 0x20, has its high bit
 * set, or equals '"' or '\\' (the classic "has zero byte" bit trick; flags
 * above the first true one may be wrong, the lowest one never is). */
static inline const unsigned char *lj_scan_plain(const unsigned char *q, const unsigned char *end)
{
    const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
    while (end - q >= 8) {
        uint64_t x;
        memcpy(&x, q, 8);
        uint64_t quote = x ^ (ones * '"'), bslash = x ^ (ones * '\\');
        uint64_t t =
            ((x - ones * 0x20) & ~x) | ((quote - ones) & ~quote) | ((bslash - ones) & ~bslash) | x;
        t &= highs;
        if (t) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            return q + (__builtin_ctzll(t) >> 3);
#else
            break;
#endif
        }
        q += 8;
    }
    while (q < end && lj_plain[*q])
        q++;
    return q;
}

static int lj_fail(lj_parser *P, const unsigned char *at, const char *why)
{
    P->why = why;
    P->at = at;
    return -1;
}

static inline const unsigned char *lj_skip_ws(const unsigned char *p, const unsigned char *end)
{
    /* Everything above ' ' ends it at once: one test in the common case. */
    while (p < end && *p <= ' ' && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
}

/* Length of the valid UTF-8 sequence (RFC 3629) starting at q (a byte
 * >= 0x80), or 0. */
static size_t lj_utf8_seq(const unsigned char *q, const unsigned char *end)
{
    unsigned c = q[0];
    size_t n;
    unsigned lo = 0x80, hi = 0xbf; /* range of the second byte */
    if (c >= 0xc2 && c <= 0xdf)
        n = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f; /* no surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f; /* nothing above U+10FFFF */
    } else
        return 0;
    if ((size_t)(end - q) < n || q[1] < lo || q[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if ((q[i] & 0xc0) != 0x80)
            return 0;
    return n;
}

static int lj_hex4(const unsigned char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = p[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
            d = (c | 0x20) - 'a' + 10;
        else
            return -1;
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

static size_t lj_put_utf8(unsigned char *w, unsigned cp)
{
    if (cp < 0x80) {
        w[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        w[0] = (unsigned char)(0xc0 | cp >> 6);
        w[1] = (unsigned char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        w[0] = (unsigned char)(0xe0 | cp >> 12);
        w[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        w[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    w[0] = (unsigned char)(0xf0 | cp >> 18);
    w[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
    w[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
    w[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Decodes and validates the string body [s, e) (e is the closing quote) into
 * w, which has room for e - s bytes (escapes never grow the text: \uXXXX is 6
 * bytes for at most 3, a surrogate pair 12 for 4). Returns the length or -1. */
static long lj_unescape(lj_parser *P, const unsigned char *s, const unsigned char *e,
                        unsigned char *w)
{
    unsigned char *w0 = w;
    while (s < e) {
        unsigned c = *s;
        if (lj_plain[c]) {
            *w++ = (unsigned char)c;
            s++;
        } else if (c == '\\') {
            if (e - s < 2)
                return lj_fail(P, s, "bad escape");
            unsigned x = s[1];
            s += 2;
            switch (x) {
            case '"':
            case '\\':
            case '/':
                *w++ = (unsigned char)x;
                break;
            case 'b':
                *w++ = '\b';
                break;
            case 'f':
                *w++ = '\f';
                break;
            case 'n':
                *w++ = '\n';
                break;
            case 'r':
                *w++ = '\r';
                break;
            case 't':
                *w++ = '\t';
                break;
            case 'u': {
                unsigned cp, lo;
                if (e - s < 4 || lj_hex4(s, &cp))
                    return lj_fail(P, s - 2, "bad \\u escape");
                s += 4;
                if (cp >= 0xdc00 && cp <= 0xdfff)
                    return lj_fail(P, s - 6, "lone low surrogate in \\u escape");
                if (cp >= 0xd800 && cp <= 0xdbff) {
                    if (e - s < 6 || s[0] != '\\' || s[1] != 'u' || lj_hex4(s + 2, &lo) ||
                        lo < 0xdc00 || lo > 0xdfff)
                        return lj_fail(P, s - 6, "high surrogate without a low surrogate");
                    s += 6;
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                }
                w += lj_put_utf8(w, cp);
                break;
            }
            default:
                return lj_fail(P, s - 2, "bad escape");
            }
        } else if (c < 0x20) {
            return lj_fail(P, s, "control character in string");
        } else {
            size_t n = lj_utf8_seq(s, e);
            if (n == 0)
                return lj_fail(P, s, "invalid UTF-8 in string");
            memcpy(w, s, n);
            w += n;
            s += n;
        }
    }
    return (long)(w - w0);
}

/* P->p is at the opening quote; pushes the string. Never inlined: its
 * buffers (about 1 KiB) would sit in every level of the recursive descent. */
__attribute__((noinline)) static int lj_string(lj_parser *P)
{
    lua_State *L = P->L;
    const unsigned char *s = P->p + 1, *q = s, *end = P->end;
    for (;;) {
        q = lj_scan_plain(q, end);
        if (q >= end)
            return lj_fail(P, P->p, "unterminated string");
        unsigned c = *q;
        if (c == '"') {
            lua_pushlstring(L, (const char *)s, (size_t)(q - s));
            P->p = q + 1;
            return 0;
        }
        if (c == '\\')
            break;
        if (c < 0x20)
            return lj_fail(P, q, "control character in string");
        size_t n = lj_utf8_seq(q, end);
        if (n == 0)
            return lj_fail(P, q, "invalid UTF-8 in string");
        q += n;
    }
    /* Escapes: find the closing quote (a backslash hides the next byte), then
     * decode and check everything in one go. */
    while (q < end && *q != '"')
        q += (*q == '\\' && end - q > 1) ? 2 : 1;
    if (q >= end)
        return lj_fail(P, P->p, "unterminated string");
    size_t cap = (size_t)(q - s);
    long n;
    if (cap <= LJ_STACK_STR) {
        unsigned char tmp[LJ_STACK_STR];
        if ((n = lj_unescape(P, s, q, tmp)) < 0)
            return -1;
        lua_pushlstring(L, (const char *)tmp, (size_t)n);
    } else {
        luaL_Buffer b;
        unsigned char *w = (unsigned char *)luaL_buffinitsize(L, &b, cap);
        if ((n = lj_unescape(P, s, q, w)) < 0) {
            lua_pop(L, 1); /* the buffer's placeholder or box */
            return -1;
        }
        luaL_pushresultsize(&b, (size_t)n);
    }
    P->p = q + 1;
    return 0;
}

/* Exact powers of ten as doubles (10^22 is the largest). */
static const double lj_p10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static int lj_number(lj_parser *P)
{
    const unsigned char *s = P->p, *q = s, *end = P->end;
    bool neg = false, integer = true;
    uint64_t m = 0; /* the first 19 significant digits */
    int sig = 0;    /* significant digits seen */
    int scale = 0;  /* the value is m * 10^(scale + exponent) while sig <= 19 */
    if (*q == '-') {
        neg = true;
        q++;
    }
    if (q < end && *q == '0') {
        q++;
        if (q < end && *q >= '0' && *q <= '9')
            return lj_fail(P, q - 1, "invalid number: leading zero");
    } else if (q < end && *q >= '1' && *q <= '9') {
        for (; q < end && *q >= '0' && *q <= '9'; q++) {
            if (sig++ < 19)
                m = m * 10 + (unsigned)(*q - '0');
        }
        if (sig > 19)
            scale = sig - 19;
    } else {
        return lj_fail(P, q, "invalid number");
    }
    if (q < end && *q == '.') {
        integer = false;
        q++;
        if (q >= end || *q < '0' || *q > '9')
            return lj_fail(P, q, "invalid number: digits expected after '.'");
        for (; q < end && *q >= '0' && *q <= '9'; q++) {
            if (m == 0 && *q == '0') {
                scale--; /* leading zeros of 0.00…: no significant digit yet */
            } else if (sig++ < 19) {
                m = m * 10 + (unsigned)(*q - '0');
                scale--;
            }
        }
    }
    int e = 0;
    if (q < end && (*q | 0x20) == 'e') {
        integer = false;
        q++;
        bool eneg = false;
        if (q < end && (*q == '+' || *q == '-'))
            eneg = *q++ == '-';
        if (q >= end || *q < '0' || *q > '9')
            return lj_fail(P, q, "invalid number: digits expected in the exponent");
        for (; q < end && *q >= '0' && *q <= '9'; q++)
            if (e < 100000)
                e = e * 10 + (*q - '0');
        if (eneg)
            e = -e;
    }
    P->p = q;
    if (integer && sig <= 19 && m <= (uint64_t)INT64_MAX + neg) {
        lua_pushinteger(P->L, neg ? (lua_Integer)(0 - m) : (lua_Integer)m);
        return 0;
    }
    /* Short decimals: an exact m (below 2^53) times or divided by an exact
     * power of ten is one correctly rounded IEEE operation, which is what
     * strtod() returns for the same text (Clinger's fast path). */
    if (sig <= 19 && m <= (UINT64_C(1) << 53)) {
        int x = scale + e;
        double d = (double)m;
        if (m == 0 || (x >= -22 && x <= 22)) {
            if (m != 0)
                d = x < 0 ? d / lj_p10[-x] : d * lj_p10[x];
            lua_pushnumber(P->L, (lua_Number)(neg ? -d : d));
            return 0;
        }
    }
    size_t len = (size_t)(q - s);
    double d;
    if (len < LJ_STACK_NUM) {
        char tmp[LJ_STACK_NUM];
        memcpy(tmp, s, len);
        tmp[len] = '\0';
        d = strtod(tmp, NULL); /* the grammar was checked above */
    } else {
        /* Very long numbers: let Lua copy them (its strings end with a NUL). */
        lua_pushlstring(P->L, (const char *)s, len);
        d = strtod(lua_tostring(P->L, -1), NULL);
        lua_pop(P->L, 1);
    }
    lua_pushnumber(P->L, (lua_Number)d);
    return 0;
}

static int lj_value(lj_parser *P, int depth);

/* Moves the n key/value pairs (or n values when array) stored from slot base
 * into a new table of exact size (plus extra), which replaces them at base.
 * Pairs are copied in order so that a repeated key keeps its last value. */
static void lj_collect(lua_State *L, int base, int n, bool array, int extra)
{
    if (array) {
        lua_createtable(L, n + extra, 0);
        lua_rotate(L, base, 1); /* the table below its elements */
        for (int i = n; i > 0; i--)
            lua_rawseti(L, base, i);
        return;
    }
    lua_createtable(L, 0, n + extra);
    int t = lua_gettop(L);
    for (int i = 0; i < n; i++) {
        lua_pushvalue(L, base + 2 * i);
        lua_pushvalue(L, base + 2 * i + 1);
        lua_rawset(L, t);
    }
    lua_replace(L, base);
    lua_settop(L, base);
}

/* Stack room is checked once per LJ_CHECK members: enough for that many
 * pairs plus what lj_collect() pushes. */
#define LJ_CHECK 16

static int lj_object(lj_parser *P, int depth)
{
    lua_State *L = P->L;
    const unsigned char *end = P->end;
    P->p = lj_skip_ws(P->p + 1, end);
    if (P->p < end && *P->p == '}') {
        P->p++;
        lua_createtable(L, 0, 0);
        return 0;
    }
    int base = lua_gettop(L) + 1, n = 0;
    bool flushed = false;
    for (int i = 0;; i++) {
        if (i % LJ_CHECK == 0)
            luaL_checkstack(L, 2 * LJ_CHECK + 4, "JSON object");
        if (P->p >= end || *P->p != '"')
            return lj_fail(P, P->p, "expected a string key");
        if (lj_string(P))
            return -1;
        P->p = lj_skip_ws(P->p, end);
        if (P->p >= end || *P->p != ':')
            return lj_fail(P, P->p, "expected ':'");
        P->p = lj_skip_ws(P->p + 1, end);
        if (lj_value(P, depth))
            return -1;
        if (flushed) {
            lua_rawset(L, base);
        } else if (++n == LJ_FLUSH) {
            lj_collect(L, base, n, false, LJ_FLUSH);
            flushed = true;
        }
        P->p = lj_skip_ws(P->p, end);
        if (P->p < end && *P->p == ',') {
            P->p = lj_skip_ws(P->p + 1, end);
        } else if (P->p < end && *P->p == '}') {
            P->p++;
            break;
        } else {
            return lj_fail(P, P->p, "expected ',' or '}'");
        }
    }
    if (!flushed)
        lj_collect(L, base, n, false, 0);
    return 0;
}

static int lj_array(lj_parser *P, int depth)
{
    lua_State *L = P->L;
    const unsigned char *end = P->end;
    int base = lua_gettop(L) + 1, n = 0;
    P->p = lj_skip_ws(P->p + 1, end);
    if (P->p < end && *P->p == ']') {
        P->p++;
        lua_createtable(L, 0, 0);
    } else {
        bool flushed = false;
        for (;;) {
            if (n % LJ_CHECK == 0)
                luaL_checkstack(L, LJ_CHECK + 4, "JSON array");
            if (lj_value(P, depth))
                return -1;
            n++;
            if (flushed)
                lua_rawseti(L, base, n);
            else if (n == LJ_FLUSH) {
                lj_collect(L, base, n, true, LJ_FLUSH);
                flushed = true;
            }
            P->p = lj_skip_ws(P->p, end);
            if (P->p < end && *P->p == ',') {
                P->p = lj_skip_ws(P->p + 1, end);
            } else if (P->p < end && *P->p == ']') {
                P->p++;
                break;
            } else {
                return lj_fail(P, P->p, "expected ',' or ']'");
            }
        }
        if (!flushed)
            lj_collect(L, base, n, true, 0);
    }
    lua_pushvalue(L, P->array_idx);
    lua_setmetatable(L, -2);
    return 0;
}

static int lj_literal(lj_parser *P, const char *word, size_t n)
{
    if ((size_t)(P->end - P->p) < n || memcmp(P->p, word, n) != 0)
        return lj_fail(P, P->p, "invalid literal");
    P->p += n;
    return 0;
}

/* Parses the value at P->p (whitespace already skipped) and pushes it. */
static int lj_value(lj_parser *P, int depth)
{
    lua_State *L = P->L;
    if (P->p >= P->end)
        return lj_fail(P, P->p, "unexpected end of input");
    switch (*P->p) {
    case '{':
        if (depth >= LJ_MAX_DEPTH)
            return lj_fail(P, P->p, "nesting deeper than 128");
        return lj_object(P, depth + 1);
    case '[':
        if (depth >= LJ_MAX_DEPTH)
            return lj_fail(P, P->p, "nesting deeper than 128");
        return lj_array(P, depth + 1);
    case '"':
        return lj_string(P);
    case 't':
        if (lj_literal(P, "true", 4))
            return -1;
        lua_pushboolean(L, 1);
        return 0;
    case 'f':
        if (lj_literal(P, "false", 5))
            return -1;
        lua_pushboolean(L, 0);
        return 0;
    case 'n':
        if (lj_literal(P, "null", 4))
            return -1;
        lua_pushvalue(L, P->null_idx);
        return 0;
    default:
        if (*P->p == '-' || (*P->p >= '0' && *P->p <= '9'))
            return lj_number(P);
        return lj_fail(P, P->p, "unexpected character");
    }
}

/* Decodes [json, json + len). Pushes the value and returns 0, or returns -1
 * with P->why/P->at set and the stack back where it was. Raises Lua errors
 * on memory failure. */
static int lj_decode(lua_State *L, const char *json, size_t len, lj_parser *P)
{
    int top = lua_gettop(L);
    luaL_checkstack(L, 8, "JSON");
    lj_push_refs(L);
    P->L = L;
    P->start = (const unsigned char *)json;
    P->end = P->start + len;
    P->null_idx = top + 1;
    P->array_idx = top + 2;
    P->why = NULL;
    P->p = lj_skip_ws(P->start, P->end);
    int rc = lj_value(P, 0);
    if (rc == 0) {
        P->p = lj_skip_ws(P->p, P->end);
        if (P->p != P->end)
            rc = lj_fail(P, P->p, "unexpected data after the JSON value");
    }
    if (rc) {
        lua_settop(L, top);
        return -1;
    }
    lua_replace(L, top + 1);
    lua_settop(L, top + 1);
    return 0;
}

typedef struct lj_push_args {
    const char *json;
    size_t len;
    lj_parser P;
    int rc;
} lj_push_args;

/* Runs lj_decode() in protected mode for sl_luajson_push(). */
static int lj_push_protected(lua_State *L)
{
    lj_push_args *a = lua_touserdata(L, 1);
    lua_pop(L, 1);
    a->rc = lj_decode(L, a->json, a->len, &a->P);
    return a->rc == 0 ? 1 : 0;
}

int sl_luajson_push(lua_State *L, const char *json, size_t len, sl_error *err)
{
    lj_push_args a = {.json = json, .len = len};
    if (!lua_checkstack(L, 2))
        return sl_error_set(err, SL_ENOMEM, "JSON: Lua stack: out of memory");
    lua_pushcfunction(L, lj_push_protected);
    lua_pushlightuserdata(L, &a);
    int st = lua_pcall(L, 1, 1, 0);
    if (st != LUA_OK) {
        const char *m = lua_tostring(L, -1);
        sl_error_set(err, SL_ENOMEM, "JSON: %s", m ? m : "out of memory");
        lua_pop(L, 1);
        return SL_ENOMEM;
    }
    if (a.rc) {
        lua_pop(L, 1);
        return sl_error_set(err, SL_EPARSE, "JSON: byte %zu: %s", (size_t)(a.P.at - a.P.start),
                            a.P.why);
    }
    return 0;
}

/* sluice.json.decode(s) */
static int lj_decode_lua(lua_State *L)
{
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    lj_parser P;
    if (lj_decode(L, s, len, &P))
        return luaL_error(L, "json.decode: byte %d: %s", (int)(P.at - P.start), P.why);
    return 1;
}

/* ---- encoding ------------------------------------------------------------ */

typedef struct lj_path {
    const char *key; /* NULL for an array index */
    size_t klen;
    lua_Integer idx;
} lj_path;

typedef struct sl_luajson_enc {
    lua_State *L;
    sl_buf *out;
    sl_error *err;
    const void *null_ptr, *array_ptr; /* looked up on first need (NULL: never created) */
    sl_luajson_udata *udata;          /* the state's userdata encoder, or NULL */
    bool have_null, have_array, have_udata;
    int depth;
    lj_path path[LJ_MAX_DEPTH + 1];
} lj_enc;

/* Appends path segment p ("[3]", ".key" or "[\"odd key\"]") to path[*n]. */
static void lj_path_put(char *path, size_t cap, size_t *n, const lj_path *p)
{
    int w;
    if (p->key == NULL) {
        w = snprintf(path + *n, cap - *n, "[%lld]", (long long)p->idx);
    } else {
        bool ident = p->klen > 0 && !(p->key[0] >= '0' && p->key[0] <= '9');
        for (size_t j = 0; j < p->klen && ident; j++) {
            unsigned char c = (unsigned char)p->key[j];
            ident = c == '_' || (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
        }
        int kl = p->klen > 64 ? 64 : (int)p->klen;
        w = ident ? snprintf(path + *n, cap - *n, ".%.*s", kl, p->key)
                  : snprintf(path + *n, cap - *n, "[\"%.*s%s\"]", kl, p->key,
                             p->klen > 64 ? "..." : "");
    }
    if (w > 0 && (size_t)w < cap - *n)
        *n += (size_t)w;
}

/* Records an encoding error; err gets "$.path: reason". Returns SL_EINVAL.
 * A deep path keeps its first and last levels and says how many it left
 * out, so that the reason (often "nesting deeper than …") is not cut off
 * the end of the message. */
static int lj_enc_fail(lj_enc *E, const char *fmt, const char *arg)
{
    if (!E->err)
        return SL_EINVAL;
    enum { HEAD = 4, TAIL = 3 };
    char path[256];
    size_t n = 0;
    path[n++] = '$';
    for (int i = 0; i < E->depth && n < sizeof path - 72; i++) {
        if (E->depth > HEAD + TAIL + 1 && i == HEAD) {
            int skip = E->depth - HEAD - TAIL;
            n += (size_t)snprintf(path + n, sizeof path - n, "…(%d levels)…", skip);
            i += skip - 1;
            continue;
        }
        lj_path_put(path, sizeof path, &n, &E->path[i]);
    }
    path[n] = '\0';
    char why[128];
    snprintf(why, sizeof why, fmt, arg);
    return sl_error_set(E->err, SL_EINVAL, "%s: %s", path, why);
}

static int lj_enc_oom(lj_enc *E)
{
    return sl_error_set(E->err, SL_ENOMEM, "JSON encoding: out of memory");
}

static inline int lj_put(lj_enc *E, const char *s, size_t n)
{
    sl_buf *b = E->out;
    if (n > b->cap - b->len && sl_buf_reserve(b, n))
        return lj_enc_oom(E);
    memcpy(b->data + b->len, s, n);
    b->len += n;
    return 0;
}

static inline int lj_putc(lj_enc *E, char c)
{
    sl_buf *b = E->out;
    if (b->len == b->cap && sl_buf_reserve(b, 1))
        return lj_enc_oom(E);
    b->data[b->len++] = (uint8_t)c;
    return 0;
}

/* Appends s as a JSON string: '"', '\' and controls escaped, UTF-8 checked. */
static int lj_enc_string(lj_enc *E, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    sl_buf *b = E->out;
    const unsigned char *u = (const unsigned char *)s, *e = u + len;
    if (len + 2 > b->cap - b->len && sl_buf_reserve(b, len + 2))
        return lj_enc_oom(E);
    b->data[b->len++] = '"';
    for (;;) {
        const unsigned char *r = u;
        u = lj_scan_plain(u, e);
        /* Plain runs are copied at once; room for them was reserved above
         * (escapes below reserve their own extra bytes). */
        memcpy(b->data + b->len, r, (size_t)(u - r));
        b->len += (size_t)(u - r);
        if (u >= e)
            break;
        unsigned c = *u;
        if (c >= 0x80) {
            size_t n = lj_utf8_seq(u, e);
            if (n == 0)
                return lj_enc_fail(E, "string is not valid UTF-8%s", "");
            memcpy(b->data + b->len, u, n);
            b->len += n;
            u += n;
            continue;
        }
        /* '"', '\' or a control: up to 6 bytes for at most 1 reserved. */
        if (sl_buf_reserve(b, (size_t)(e - u) + 6 + 1))
            return lj_enc_oom(E);
        char *w = (char *)b->data + b->len;
        *w++ = '\\';
        switch (c) {
        case '"':
        case '\\':
            *w++ = (char)c;
            break;
        case '\b':
            *w++ = 'b';
            break;
        case '\f':
            *w++ = 'f';
            break;
        case '\n':
            *w++ = 'n';
            break;
        case '\r':
            *w++ = 'r';
            break;
        case '\t':
            *w++ = 't';
            break;
        default:
            memcpy(w, "u00", 3);
            w[3] = hex[c >> 4];
            w[4] = hex[c & 15];
            w += 5;
        }
        b->len = (size_t)(w - (char *)b->data);
        u++;
    }
    b->data[b->len++] = '"';
    return 0;
}

static int lj_enc_integer(lj_enc *E, lua_Integer i)
{
    char tmp[24], *w = tmp + sizeof tmp;
    uint64_t v = i < 0 ? 0 - (uint64_t)i : (uint64_t)i;
    do {
        *--w = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    if (i < 0)
        *--w = '-';
    return lj_put(E, w, (size_t)(tmp + sizeof tmp - w));
}

/* Floats between 1e-5 and 1e15 (most of them) in plain notation with the
 * fewest fraction digits k such that some integer r (below 2^53) gives
 * r / 10^k == |d|: that IEEE division rounds the same real number strtod()
 * rounds when it reads the text back, so the text reads back as d. Returns
 * the length written to out, or 0 when no such k exists. */
static int lj_float_fast(double d, char *out)
{
    double a = fabs(d);
    if (!(a >= 1e-5 && a < 1e15))
        return 0;
    for (int k = 0; k <= 17; k++) {
        double t = a * lj_p10[k];
        if (t >= 9007199254740992.0) /* 2^53 */
            return 0;
        uint64_t r = (uint64_t)(t + 0.5);
        if ((double)r / lj_p10[k] != a)
            continue;
        char digits[24], *w = digits + sizeof digits;
        int n = 0;
        do {
            *--w = (char)('0' + r % 10);
            r /= 10;
            n++;
        } while (r);
        char *o = out;
        if (d < 0)
            *o++ = '-';
        if (n <= k) { /* 0.000ddd */
            *o++ = '0';
            *o++ = '.';
            for (int z = n; z < k; z++)
                *o++ = '0';
            memcpy(o, w, (size_t)n);
            o += n;
        } else {
            memcpy(o, w, (size_t)(n - k));
            o += n - k;
            *o++ = '.';
            if (k == 0) {
                *o++ = '0';
            } else {
                memcpy(o, w + n - k, (size_t)k);
                o += k;
            }
        }
        return (int)(o - out);
    }
    return 0;
}

/* The shortest of %.15g, %.16g and %.17g that reads back as d (after the
 * fast path above), with ".0" added when it would read back as an integer. */
static int lj_enc_float(lj_enc *E, double d)
{
    if (isnan(d))
        return lj_enc_fail(E, "NaN cannot be encoded%s", "");
    if (isinf(d))
        return lj_enc_fail(E, "%s cannot be encoded", d > 0 ? "inf" : "-inf");
    char tmp[48];
    int n;
    if (d == 0)
        return signbit(d) ? lj_put(E, "-0.0", 4) : lj_put(E, "0.0", 3);
    if ((n = lj_float_fast(d, tmp)) > 0)
        return lj_put(E, tmp, (size_t)n);
    for (int prec = 15; prec <= 17; prec++) {
        n = snprintf(tmp, sizeof tmp, "%.*g", prec, d);
        if (prec == 17 || strtod(tmp, NULL) == d)
            break;
    }
    if (strspn(tmp, "-0123456789") == (size_t)n) {
        memcpy(tmp + n, ".0", 3);
        n += 2;
    }
    return lj_put(E, tmp, (size_t)n);
}

static int lj_enc_value(lj_enc *E, int idx);

/* The address of sluice.null or the array metatable (registry key), read
 * once per encoding (a raw registry read allocates nothing); NULL when the
 * state never created them. */
static const void *lj_enc_ref(lj_enc *E, const char *key, bool *have, const void **ptr)
{
    if (!*have) {
        lua_rawgetp(E->L, LUA_REGISTRYINDEX, key);
        *ptr = lua_topointer(E->L, -1);
        lua_pop(E->L, 1);
        *have = true;
    }
    return *ptr;
}

/* Encodes the value on top of the stack (then pops it) as path entry p. */
static int lj_enc_member(lj_enc *E)
{
    E->depth++;
    int rc = lj_enc_value(E, lua_gettop(E->L));
    E->depth--;
    lua_pop(E->L, 1);
    return rc;
}

/* An integer-keyed table whose keys did not come in order 1, 2, 3…: checks
 * that they are exactly 1..n, then encodes them by index. */
static int lj_enc_array_slow(lj_enc *E, int idx)
{
    lua_State *L = E->L;
    lua_Integer count = 0, max = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TNUMBER || !lua_isinteger(L, -1)) {
            return lj_enc_fail(E,
                               "table mixes integer keys with %s keys (neither array nor object)",
                               luaL_typename(L, -1));
        }
        if (lua_tointeger(L, -1) < 1)
            return lj_enc_fail(E, "%s", "array key below 1 (keys must be exactly 1..n)");
        lua_Integer k = lua_tointeger(L, -1);
        count++;
        if (k > max)
            max = k;
    }
    if (max != count)
        return lj_enc_fail(E, "%s", "array with holes (keys must be exactly 1..n)");
    if (lj_putc(E, '['))
        return SL_ENOMEM;
    for (lua_Integer i = 1; i <= count; i++) {
        if (i > 1 && lj_putc(E, ','))
            return SL_ENOMEM;
        E->path[E->depth] = (lj_path){NULL, 0, i};
        lua_rawgeti(L, idx, i);
        int rc = lj_enc_member(E);
        if (rc)
            return rc;
    }
    return lj_putc(E, ']');
}

static int lj_enc_table(lj_enc *E, int idx)
{
    lua_State *L = E->L;
    if (E->depth >= LJ_MAX_DEPTH)
        return lj_enc_fail(E, "%s", "nesting deeper than 128 (a table that contains itself?)");
    if (!lua_checkstack(L, 4))
        return lj_enc_oom(E);
    bool marked = false;
    if (lua_getmetatable(L, idx)) {
        marked =
            lua_topointer(L, -1) == lj_enc_ref(E, &lj_array_key, &E->have_array, &E->array_ptr);
        lua_pop(L, 1);
    }
    size_t start = E->out->len;
    lua_pushnil(L);
    if (!lua_next(L, idx))
        return lj_put(E, marked ? "[]" : "{}", 2);
    int kt = lua_type(L, -2);
    if (kt == LUA_TSTRING && !marked) {
        if (lj_putc(E, '{'))
            return SL_ENOMEM;
        bool first = true;
        do {
            if (lua_type(L, -2) != LUA_TSTRING) {
                return lj_enc_fail(
                    E, "table mixes string keys with %s keys (neither array nor object)",
                    luaL_typename(L, -2));
            }
            size_t kl;
            const char *k = lua_tolstring(L, -2, &kl);
            if (!first && lj_putc(E, ','))
                return SL_ENOMEM;
            first = false;
            int rc = lj_enc_string(E, k, kl);
            if (rc || (rc = lj_putc(E, ':')) != 0)
                return rc;
            E->path[E->depth] = (lj_path){k, kl, 0};
            rc = lj_enc_member(E);
            if (rc)
                return rc;
        } while (lua_next(L, idx));
        return lj_putc(E, '}');
    }
    if (kt == LUA_TSTRING) /* marked as an array */
        return lj_enc_fail(E, "%s", "array (sluice.array) with a string key");
    if (kt != LUA_TNUMBER || !lua_isinteger(L, -2))
        return lj_enc_fail(E, "table key of type %s (object keys must be strings)",
                           kt == LUA_TNUMBER ? "float" : luaL_typename(L, -2));
    /* Fast path: the array part yields 1, 2, 3… in order. */
    if (lj_putc(E, '['))
        return SL_ENOMEM;
    lua_Integer i = 1;
    do {
        if (!lua_isinteger(L, -2) || lua_tointeger(L, -2) != i) {
            lua_pop(L, 2);
            E->out->len = start;
            return lj_enc_array_slow(E, idx);
        }
        if (i > 1 && lj_putc(E, ','))
            return SL_ENOMEM;
        E->path[E->depth] = (lj_path){NULL, 0, i};
        int rc = lj_enc_member(E);
        if (rc)
            return rc;
        i++;
    } while (lua_next(L, idx));
    return lj_putc(E, ']');
}

static int lj_enc_value(lj_enc *E, int idx)
{
    lua_State *L = E->L;
    switch (lua_type(L, idx)) {
    case LUA_TNIL:
        return lj_put(E, "null", 4);
    case LUA_TBOOLEAN:
        return lua_toboolean(L, idx) ? lj_put(E, "true", 4) : lj_put(E, "false", 5);
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx))
            return lj_enc_integer(E, lua_tointeger(L, idx));
        return lj_enc_float(E, (double)lua_tonumber(L, idx));
    case LUA_TSTRING: {
        size_t n;
        const char *s = lua_tolstring(L, idx, &n);
        return lj_enc_string(E, s, n);
    }
    case LUA_TTABLE: {
        int top = lua_gettop(L);
        int rc = lj_enc_table(E, idx);
        lua_settop(L, top);
        return rc;
    }
    case LUA_TUSERDATA:
        if (lua_topointer(L, idx) == lj_enc_ref(E, &lj_null_key, &E->have_null, &E->null_ptr))
            return lj_put(E, "null", 4);
        if (!E->have_udata) {
            lua_rawgetp(L, LUA_REGISTRYINDEX, &lj_udata_key);
            E->udata = lua_touserdata(L, -1);
            lua_pop(L, 1);
            E->have_udata = true;
        }
        if (E->udata) {
            if (E->depth >= LJ_MAX_DEPTH)
                return lj_enc_fail(E, "%s",
                                   "nesting deeper than 128 (a table that contains itself?)");
            if (!lua_checkstack(L, 8))
                return lj_enc_oom(E);
            int top = lua_gettop(L);
            int rc = E->udata->encode(E->udata, E, L, lua_absindex(L, idx));
            lua_settop(L, top);
            if (rc != SL_EUNSUPPORTED)
                return rc;
        }
        return lj_enc_fail(E, "%s cannot be encoded (only sluice.null)", "a userdata");
    default:
        return lj_enc_fail(E, "a %s cannot be encoded", luaL_typename(L, idx));
    }
}

int sl_luajson_encode(lua_State *L, int idx, sl_buf *out, sl_error *err)
{
    lj_enc E;
    E.L = L;
    E.out = out;
    E.err = err;
    E.depth = 0;
    idx = lua_absindex(L, idx);
    if (!lua_checkstack(L, 4))
        return sl_error_set(err, SL_ENOMEM, "JSON encoding: Lua stack: out of memory");
    int top = lua_gettop(L);
    E.have_null = E.have_array = E.have_udata = false;
    E.udata = NULL;
    sl_error local;
    if (!err)
        E.err = &local;
    int rc = lj_enc_value(&E, idx);
    lua_settop(L, top);
    return rc;
}

/* ---- userdata encoders ------------------------------------------------------ */

void sl_luajson_set_udata(lua_State *L, sl_luajson_udata *u)
{
    if (u)
        lua_pushlightuserdata(L, u);
    else
        lua_pushnil(L);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &lj_udata_key);
}

int sl_luajson_enc_raw(sl_luajson_enc *E, const char *s, size_t n)
{
    return lj_put(E, s, n);
}

int sl_luajson_enc_string(sl_luajson_enc *E, const char *s, size_t n)
{
    return lj_enc_string(E, s, n);
}

int sl_luajson_enc_member(sl_luajson_enc *E, const char *key, size_t klen, lua_Integer idx)
{
    E->path[E->depth] = (lj_path){key, klen, idx};
    return lj_enc_member(E);
}

int sl_luajson_enc_value(sl_luajson_enc *E, int idx)
{
    return lj_enc_value(E, lua_absindex(E->L, idx));
}

int sl_luajson_enc_fail(sl_luajson_enc *E, const char *why)
{
    return lj_enc_fail(E, "%s", why);
}

int sl_luajson_enc_nomem(sl_luajson_enc *E)
{
    return lj_enc_oom(E);
}

/* ---- the Lua side ---------------------------------------------------------- */

/* Encoding buffer owned by the encode closure (its upvalue), so a Lua error
 * while pushing the result cannot leak it, and calls reuse its memory. */
static int lj_buf_gc(lua_State *L)
{
    sl_buf *b = lua_touserdata(L, 1);
    sl_buf_free(b);
    return 0;
}

/* sluice.json.encode(v) */
static int lj_encode_lua(lua_State *L)
{
    sl_buf *b = lua_touserdata(L, lua_upvalueindex(1));
    luaL_checkany(L, 1);
    lua_settop(L, 1);
    b->len = 0;
    sl_error err;
    int rc = sl_luajson_encode(L, 1, b, &err);
    if (rc == SL_ENOMEM) {
        sl_buf_free(b);
        return luaL_error(L, "json.encode: out of memory");
    }
    if (rc)
        return luaL_error(L, "json.encode: %s", err.msg);
    lua_pushlstring(L, (const char *)b->data, b->len);
    if (b->cap > 65536) /* keep small buffers for the next call only */
        sl_buf_free(b);
    return 1;
}

void sl_luajson_register(lua_State *L)
{
    luaL_checkstack(L, 6, "sl_luajson_register");
    lj_push_refs(L);
    lua_setfield(L, -3, "array");
    lua_setfield(L, -2, "null");
    lua_createtable(L, 0, 2);
    sl_buf *b = lua_newuserdatauv(L, sizeof *b, 0);
    *b = (sl_buf)SL_BUF_INIT;
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, lj_buf_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_pushcclosure(L, lj_encode_lua, 1);
    lua_setfield(L, -2, "encode");
    lua_pushcfunction(L, lj_decode_lua);
    lua_setfield(L, -2, "decode");
    lua_setfield(L, -2, "json");
}
