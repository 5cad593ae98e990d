/*
 * rules/pattern_internal.h — the compiled form of a pattern, shared by the
 * compiler (rules/pattern.c) and the matcher (rules/pattern_match.c). Not an
 * interface: rules/pattern.h is.
 */
#ifndef SL_PATTERN_INTERNAL_H
#define SL_PATTERN_INTERNAL_H

#include "rules/pattern.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Numeric matching is limited to values between -5.0e9 and +5.0e9 inclusive. */
#define NUM_LIMIT 5e9

typedef enum mkind {
    M_STR,    /* exact string */
    M_NUM,    /* exact number: the same JSON text */
    M_NUMVAL, /* a number by value (anything-but lists only) */
    M_TRUE,
    M_FALSE,
    M_NULL,
    M_PREFIX,
    M_PREFIX_IC,
    M_SUFFIX,
    M_SUFFIX_IC,
    M_EQ_IC,
    M_WILDCARD,
    M_NUMERIC,
    M_EXISTS,
    M_CIDR,
    M_ANYBUT, /* none of subs matches (subs are M_STR/M_NUMVAL/M_PREFIX/…) */
} mkind;

typedef struct piece {
    char *s;
    size_t len;
} piece;

typedef struct matcher {
    mkind kind;
    char *s; /* string operand, or the number's JSON text (owned) */
    size_t slen;
    uint32_t *fold; /* *_IC with a non-ASCII operand: (as written, lower, upper) per character */
    size_t nfold;   /* characters in fold */
    double num;     /* M_NUMVAL */
    double lo, hi;  /* M_NUMERIC */
    bool has_lo, lo_incl, has_hi, hi_incl;
    bool exists;            /* M_EXISTS */
    int family;             /* M_CIDR: 4 or 6 */
    unsigned bits;          /* M_CIDR prefix length */
    unsigned char addr[16]; /* M_CIDR network, host bits cleared */
    piece *pieces;          /* M_WILDCARD: literal runs between stars */
    size_t npieces;
    struct matcher *subs; /* M_ANYBUT */
    size_t nsubs;
} matcher;

struct node;

typedef struct field {
    char *key; /* decoded, owned */
    size_t klen;
    matcher *m; /* a leaf when child is NULL */
    size_t nm;
    struct node *child;
} field;

typedef struct node {
    field *f; /* sorted by key (bytewise, shorter first on ties) */
    size_t nf;
    struct node *ors; /* "$or" alternatives, each a node */
    size_t nors;
} node;

struct sl_pattern {
    node root;
};

/* Whether a[0..n) equals b[0..n), for keys (the matcher's and the pattern
 * set's): most are short, where a few word compares (never reading outside
 * either range) beat a memcmp call. */
static inline bool sl__pattern_key_eq(const char *a, const char *b, size_t n)
{
    if (n >= 8) {
        if (n > 16)
            return memcmp(a, b, n) == 0;
        uint64_t x, y, u, v;
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        memcpy(&u, a + n - 8, 8);
        memcpy(&v, b + n - 8, 8);
        return x == y && u == v;
    }
    if (n >= 4) {
        uint32_t x, y, u, v;
        memcpy(&x, a, 4);
        memcpy(&y, b, 4);
        memcpy(&u, a + n - 4, 4);
        memcpy(&v, b + n - 4, 4);
        return x == y && u == v;
    }
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return false;
    return true;
}

/* Decodes one character of valid UTF-8 at *p and advances *p. */
uint32_t sl__pattern_utf8_next(const unsigned char **p);

#endif
