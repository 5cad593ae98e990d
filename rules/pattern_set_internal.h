/*
 * rules/pattern_set_internal.h — the layout of a built pattern set, shared by
 * its builder (rules/pattern_set_build.c) and its matcher
 * (rules/pattern_set.c). Not an interface: rules/pattern_set.h is.
 *
 * The idea (docs/config.md, "Many rules, one match"): for every pattern the
 * builder picks a set of anchors, a necessary condition of the pattern: the
 * pattern can only match an event in which at least one of its anchors
 * hits. An anchor is a (field path, key) pair looked up in a hash table (an
 * exact value, a prefix, an ASCII-lowered ignore-case value), a numeric
 * interval on a path, or "the path holds a leaf value" (present). Matching
 * walks the event's leaves once, collects the patterns whose anchors hit
 * (the candidates), and runs the real matcher, sl_pattern_match_event(), on
 * each candidate only. The answer is the one-by-one answer as long as every
 * anchor set is sound, which is what the builder's rules guarantee. A
 * pattern whose anchors are the whole pattern (one field down one chain of
 * objects, every value an exact test: {"type": ["x"]}) is "sure": a hit is
 * its match, and it is not checked again.
 *
 * Field paths are interned: path 0 is the event object, every other path is
 * (parent path, key). The event walk follows the keys of the event from the
 * root through the interned children, so no path string is ever built, and
 * a subtree no pattern mentions is skipped whole.
 */
#ifndef SL_PATTERN_SET_INTERNAL_H
#define SL_PATTERN_SET_INTERNAL_H

#include "rules/pattern_internal.h"
#include "rules/pattern_set.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define PS_NONE UINT32_MAX

/* A path with more children than this finds them through the hash table
 * (PK_CHILD keys); fewer are compared one by one (cheaper than hashing the
 * event's key). */
#define PS_LINEAR_KIDS 8

/* Ignore-case operands longer than this are anchored as present (the
 * matcher lowers the event's value on the stack, in this many bytes). */
#define PS_IC_MAX 256

/* Keys of the hash table, by what the bytes are. */
enum {
    PK_STR,  /* an exact string (decoded bytes) */
    PK_NUM,  /* an exact number: its JSON text (EventBridge compares numbers by text) */
    PK_TRUE, /* true, false, null: no bytes */
    PK_FALSE,
    PK_NULL,
    PK_PREFIX, /* a non-empty prefix */
    PK_IC,     /* an ASCII equals-ignore-case operand, ASCII-lowered */
    PK_CHILD,  /* a field name under path: postings hold the child path */
    PK_NUMEQ,  /* numeric "=": the operand's double (8 bytes, -0 as 0) */
    PK_SUFFIX, /* a non-empty suffix */
};

/* One key of the hash table: (path, kind, bytes) and its postings, the
 * patterns that anchor on it (ps->post[post0, post0 + npost), or the one
 * pattern itself in post0 when npost is 1), or for PK_CHILD the child's
 * path in post0. A hit reads the slot and the entry only when the key is
 * short (head) and has one pattern (post0), the usual case: a big set's
 * tables do not fit the L1 cache, and each further line is a miss. */
typedef struct ps_entry {
    uint64_t head;           /* ps_word() of keys up to 8 bytes */
    uint32_t path, off, len; /* bytes in ps->bytes[off, off + len) */
    uint32_t post0, npost;
    uint8_t kind;
} ps_entry;

/* A slot of the open-addressing table: an entry number and 32 bits of its
 * hash (compared before the entry is touched). */
typedef struct ps_slot {
    uint32_t entry; /* PS_NONE: empty */
    uint32_t h32;
} ps_slot;

/* A field name under a path (the small-fan-out list of a path's children). */
typedef struct ps_kid {
    uint32_t off, len; /* the name in ps->bytes */
    uint32_t path;
    unsigned char c0; /* its first byte (0 when empty), tested before the bytes */
} ps_kid;

/* One length of the prefixes of a path, and a bit per byte that one of
 * them ends with: a value whose byte at len - 1 is not among them cannot
 * have one of these prefixes, and is not hashed (prefixes that end with a
 * delimiter, "/shop/", "aws.", are the common case). Suffixes likewise,
 * with the byte they start with. */
typedef struct ps_plen {
    uint32_t len;
    uint64_t last[4];
} ps_plen;

/* The numeric intervals of one path cut into elementary regions: the sorted
 * distinct endpoints e[0..m) make 2m + 1 regions (below e[0], e[0] itself,
 * between e[0] and e[1], …, above e[m-1]); region r lists the patterns
 * whose interval covers it in ps->post[ps->roff[r0 + r], ps->roff[r0 + r + 1]). */
typedef struct ps_num {
    uint32_t e0, m; /* endpoints in ps->ends[e0, e0 + m) */
    uint32_t r0;    /* 2m + 2 offsets in ps->roff from r0 */
} ps_num;

typedef struct ps_path {
    uint32_t kids0, nkids; /* live children in ps->kids */
    uint64_t lenmask;      /* bit (len & 63) for the name of each live child */
    uint32_t pres0, npres; /* patterns anchored on "a leaf value here", in ps->post */
    uint32_t plen0, nplen; /* distinct prefix lengths, ascending, in ps->plens */
    uint32_t slen0, nslen; /* distinct suffix lengths, likewise */
    uint32_t ic_max;       /* longest ignore-case operand (longer values cannot match) */
    uint32_t num;          /* index in ps->nums, or PS_NONE */
    uint16_t kinds;        /* bit (1 << PK_x) for each kind of key at this path */
    bool live;             /* anchors here or below: the walk goes in */
} ps_path;

struct sl_pattern_set {
    const sl_pattern **pats;
    size_t n;
    ps_path *paths;
    size_t npaths;
    ps_entry *entries;
    size_t nentries;
    ps_slot *slots; /* power of two, at most half full */
    size_t mask;
    char *bytes;
    size_t nbytes;
    uint32_t *post;
    size_t npost;
    ps_kid *kids;
    size_t nkids;
    ps_plen *plens;
    size_t nplens;
    ps_num *nums;
    size_t nnums;
    double *ends;
    size_t nends;
    uint32_t *roff;
    size_t nroff;
    uint32_t *always; /* patterns without a sound anchor: checked for every event */
    uint8_t *sure;    /* per pattern: an anchor hit is a match (no check) */
    size_t nalways;
    size_t held; /* bytes of all the above (sl_pattern_set_bytes) */
};

struct sl_pattern_set_scratch {
    size_t n;         /* room for this many patterns */
    size_t npaths;    /* and paths (path_stamp; a set with more skips that dedupe) */
    uint32_t epoch;   /* stamp of the current match */
    uint32_t *stamp;  /* per pattern: epoch when it became a candidate */
    uint32_t *pstamp; /* per path: epoch when its present list was added */
    uint32_t *cand;   /* the candidates of the current match */
};

/* A key of up to 8 bytes as one word: two overlapping 4-byte loads, or
 * the first, middle and last byte; for a given length, equal words are
 * equal keys. Never reads outside s[0..len). */
static inline uint64_t ps_word(const char *s, size_t len)
{
    if (len >= 4) {
        uint32_t lo, hi;
        memcpy(&lo, s, 4);
        memcpy(&hi, s + len - 4, 4);
        return (uint64_t)lo | (uint64_t)hi << 32;
    }
    if (len == 0)
        return 0;
    return (uint64_t)(unsigned char)s[0] | (uint64_t)(unsigned char)s[len / 2] << 8 |
           (uint64_t)(unsigned char)s[len - 1] << 16;
}

/* The hash of a key: 8 bytes at a time (event values are short; a multiply
 * and a shift per word). Build and match must agree, hence inline here. */
static inline uint64_t ps_hash(uint32_t path, unsigned kind, const char *s, size_t len)
{
    uint64_t h = ((uint64_t)path << 8 | kind) * 0x9E3779B97F4A7C15ull ^ (uint64_t)len;
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
        s += 8;
        len -= 8;
    }
    if (len) /* the last 1-7 bytes without a variable-length copy (a call) */
        h = (h ^ ps_word(s, len)) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

/* The entry of key (path, kind, s[0..len)), or NULL. */
static inline const ps_entry *ps_find(const sl_pattern_set *ps, uint32_t path, unsigned kind,
                                      const char *s, size_t len)
{
    uint64_t h = ps_hash(path, kind, s, len);
    uint32_t h32 = (uint32_t)(h >> 32);
    for (size_t i = (size_t)h & ps->mask;; i = (i + 1) & ps->mask) {
        const ps_slot *sl = &ps->slots[i];
        if (sl->entry == PS_NONE)
            return NULL;
        if (sl->h32 != h32)
            continue;
        const ps_entry *e = &ps->entries[sl->entry];
        if (e->path == path && e->kind == kind && e->len == len &&
            (len <= 8 ? e->head == ps_word(s, len)
                      : sl__pattern_key_eq(ps->bytes + e->off, s, len)))
            return e;
    }
}

#endif
