/*
 * tests/fuzz/fuzzutil.h — what the fuzz harnesses (tests/fuzz/fuzz_*.c)
 * share: the libFuzzer entry points, cutting an input into parts, a scratch
 * directory per process, and oracle checks that abort (so libFuzzer and the
 * replay runner both count them as crashes).
 *
 * Each harness is built twice: with clang -fsanitize=fuzzer for `make fuzz`
 * (libFuzzer supplies main), and with gcc ASan+UBSan and tests/fuzz/replay.c
 * as main for `make test`, which replays the committed inputs.
 */
#ifndef SL_FUZZUTIL_H
#define SL_FUZZUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The harness: one input, returns 0 (libFuzzer's contract). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Fails the run with a message when an oracle does not hold: a property the
 * code documents (a stored event parses again, two matchers agree, …). */
#define FZ_CHECK(cond, ...)                                                                        \
    do {                                                                                           \
        if (!(cond))                                                                               \
            fz_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                                       \
    } while (0)

__attribute__((noreturn, format(printf, 4, 5))) void
fz_fail(const char *file, int line, const char *cond, const char *fmt, ...);

/* A malloc'ed copy of p[0..n) with no spare byte after it (plus a NUL that
 * is not part of the copy when nul is true), so that ASan catches a read
 * past the part of the input a parser was given. Aborts when out of memory. */
char *fz_dup(const void *p, size_t n, bool nul);

/* Cuts the next line off [*p, end): *line and *len get it without its '\n'
 * (a trailing '\r' is kept), *p moves past the '\n'. Returns false when
 * *p == end. */
bool fz_line(const char **p, const char *end, const char **line, size_t *len);

/* Finds sep (seplen bytes) in [p, end): returns its position, or NULL. */
const char *fz_find(const char *p, const char *end, const char *sep, size_t seplen);

/* A scratch directory for this process (on /dev/shm when it is writable,
 * else $TMPDIR or /tmp), created on first use and removed at exit. */
const char *fz_tmpdir(void);

/* Removes every entry of dir (recursively); dir itself stays. */
void fz_clear_dir(const char *dir);

/* Writes data[0..n) to path (created or truncated). Returns 0 or -1. */
int fz_write_file(const char *path, const void *data, size_t n);

#endif

/* ---- CloudEvents (core/bus/event.h) ------------------------------------------ */

#include "core/bus/event.h"

/* Runs one event through what HTTP ingest does with it
 * (http/http_ingest.c add_event: sl_event_parse,
 * sl_event_apply_lane with lane, sl_event_encode), then checks what stored
 * events promise: the stored form parses again, sl_event_decorate()'s read
 * form parses again with the same id, and the binding helpers of
 * core/bus/ce_binding.h work on it. Returns the parse status. */
int fz_ingest_event(const char *json, size_t len, const sl_event_limits *lim, const char *lane);

/* Splits "Name: value" lines (up to a blank line) into the ce-* headers
 * binary mode reads (at most 64, as http/http_ingest.c collects them) and
 * the Content-Type; the rest of the input is the body. Every part is its own
 * allocation (freed by fz_binary_free). */
typedef struct fz_binary {
    sl_event_header h[64];
    size_t n;
    char *ctype; /* NUL-terminated, or NULL */
    char *body;
    size_t body_len;
} fz_binary;

void fz_binary_split(fz_binary *b, const char *p, size_t len);
void fz_binary_free(fz_binary *b);
