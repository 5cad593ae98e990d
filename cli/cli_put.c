/*
 * cli/cli_put.c — `sluice put SET [FILE]`: publishes NDJSON to a server.
 *
 * Each input line is a full CloudEvent (sent as it is) or a plain JSON value
 * wrapped into one with --type/--source and a generated UUIDv7 id. Lines are
 * checked locally, batched (PUT_BATCH_EVENTS or PUT_BATCH_BYTES per POST) over
 * one keep-alive connection, and every per-entry answer is mapped back to its
 * input line. A 503 is retried with back-off (nothing was stored); anything
 * that leaves the outcome unknown stops the command and says which lines.
 */
#include "core/base/lane_name.h"
#include "cli/cli.h"
#include "core/base/httpc.h"
#include "core/base/clock.h"
#include "core/base/json.h"
#include "core/base/buf.h"
#include "core/bus/set.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define PUT_BATCH_EVENTS 500
#define PUT_BATCH_BYTES (1u << 20)
#define PUT_RETRY_BUDGET_MS 120000 /* give up on a busy server after this long */
#define PUT_TIMEOUT_MS 60000L      /* one POST, including the server's fsync */
#define PUT_MAX_LISTED 20          /* failures printed one by one */
#define PUT_JSON_DEPTH 512
#define PUT_PROGRESS_NS 200000000 /* progress line refresh on a terminal */

static const char put_usage[] =
    "usage: sluice put SET [FILE] [--lane L] [--type T --source S] [--server URL]\n"
    "  Publishes NDJSON from FILE (or stdin, or \"-\") to event set SET.\n"
    "  Each line is a CloudEvent (it has \"specversion\") sent as it is, or any JSON\n"
    "  value that becomes the data of a new event with type T, source S and a\n"
    "  generated id. Empty lines are skipped.\n"
    "  --type T --source S   wrap lines that are not CloudEvents (both or neither)\n"
    "  --lane L       lane for events that do not name one ([a-z0-9-]{1,32})\n"
    "  --server URL   default $SLUICE_SERVER, else " SL_HTTPC_DEFAULT_SERVER "\n"
    "  Exit status: 0 all accepted, 1 some line failed or the server could not be\n"
    "  used, 2 usage error.\n";

static const sl_cli_usage k_usage = {"put", put_usage, false};

/* One event of the current batch: its input line and its bytes in the body
 * (the trailing newline included). */
typedef struct put_entry {
    int64_t line;
    size_t off, len;
} put_entry;

typedef struct put_failure {
    int64_t line;
    char msg[240];
} put_failure;

typedef struct put_ctx {
    const char *set;
    const char *lane; /* NULL or the --lane value */
    const char *type, *source;
    char server[1024];
    char url[1400];
    sl_httpc http;
    /* The batch being built. */
    sl_buf body;
    put_entry *entries;
    size_t count;
    sl_buf scratch;     /* one event, before it joins the batch */
    size_t batch_bytes; /* body size limit, lowered when the server answers 413 */
    /* Id generation: a random 74-bit start plus a counter. */
    uint16_t id_rand_a;
    uint64_t id_rand_b;
    uint64_t id_counter;
    /* Totals. */
    int64_t sent, accepted, failed, invalid, retries;
    put_failure listed[PUT_MAX_LISTED];
    int nlisted;
    bool fatal;
    int64_t unsent_from; /* after a fatal error: the first line not sent */
    bool maybe_stored;   /* some lines' outcome is unknown */
    /* Progress. */
    FILE *in;
    off_t in_size; /* > 0 for a regular file */
    bool tty;
    bool progress_shown;
    int64_t start_ns, progress_ns;
} put_ctx;

static void clear_progress(put_ctx *c)
{
    if (c->progress_shown) {
        fputs("\r\033[K", stderr);
        c->progress_shown = false;
    }
}

/* Redraws the progress line on a terminal, at most every PUT_PROGRESS_NS and
 * only once the command has run for a second (small inputs print nothing). */
static void show_progress(put_ctx *c, const char *note, bool force)
{
    if (!c->tty)
        return;
    int64_t now = sl_clock_mono_ns();
    if (!force && (now - c->start_ns < 1000000000 || now - c->progress_ns < PUT_PROGRESS_NS))
        return;
    c->progress_ns = now;
    char pct[16] = "";
    if (c->in_size > 0) {
        off_t pos = ftello(c->in);
        if (pos >= 0)
            snprintf(pct, sizeof pct, " (%d%%)", (int)(pos * 100 / c->in_size));
    }
    fprintf(stderr,
            "\rput: %" PRId64 " events sent%s, %" PRId64 " accepted, %" PRId64 " failed%s%s\033[K",
            c->sent, pct, c->accepted, c->failed, note ? ", " : "", note ? note : "");
    c->progress_shown = true;
}

static void add_failure(put_ctx *c, int64_t line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void add_failure(put_ctx *c, int64_t line, const char *fmt, ...)
{
    /* Keep the PUT_MAX_LISTED lowest line numbers, sorted: a batch's server
     * answers arrive after the local failures of lines that follow them. */
    c->failed++;
    int pos = c->nlisted;
    while (pos > 0 && c->listed[pos - 1].line > line)
        pos--;
    if (pos >= PUT_MAX_LISTED)
        return;
    if (c->nlisted < PUT_MAX_LISTED)
        c->nlisted++;
    memmove(&c->listed[pos + 1], &c->listed[pos],
            (size_t)(c->nlisted - 1 - pos) * sizeof c->listed[0]);
    put_failure *f = &c->listed[pos];
    f->line = line;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->msg, sizeof f->msg, fmt, ap);
    va_end(ap);
}

/* Stops the command: msg is printed after the per-line failures. */
static void set_fatal(put_ctx *c, char *dst, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void set_fatal(put_ctx *c, char *dst, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, cap, fmt, ap);
    va_end(ap);
    c->fatal = true;
}

static void id_init(put_ctx *c)
{
    uint8_t r[10];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
        /* No entropy source: fall back to time and pid, still unique per run. */
        uint64_t x = (uint64_t)sl_clock_mono_ns() ^ ((uint64_t)getpid() << 32);
        for (size_t i = 0; i < sizeof r; i++, x = x * 6364136223846793005ull + 1)
            r[i] = (uint8_t)(x >> 56);
    }
    c->id_rand_a = (uint16_t)(((r[0] << 8) | r[1]) & 0xfff);
    c->id_rand_b = 0;
    for (int i = 2; i < 10; i++)
        c->id_rand_b = (c->id_rand_b << 8) | r[i];
}

/* Writes a UUIDv7 (RFC 9562): 48-bit Unix ms, version 7, 12 random bits,
 * variant 10, 62 bits of random start plus counter, so ids never repeat
 * within a run and collide across runs only by chance (2^-74). */
static void id_next(put_ctx *c, char out[37])
{
    uint64_t ms = (uint64_t)sl_clock_now_ms() & 0xffffffffffffull;
    uint64_t b = (c->id_rand_b + c->id_counter++) & 0x3fffffffffffffffull;
    uint64_t hi = (ms << 16) | 0x7000u | c->id_rand_a;
    uint64_t lo = 0x8000000000000000ull | b;
    snprintf(out, 37, "%08" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%012" PRIx64,
             hi >> 32, (hi >> 16) & 0xffff, hi & 0xffff, lo >> 48, lo & (uint64_t)0xffffffffffff);
}

/* Reads the server's 200 answer for entries [a, b). Returns false when the
 * answer cannot be read (then the outcome of those lines is unknown). */
static bool read_results(put_ctx *c, size_t a, size_t b)
{
    const sl_buf *body = &c->http.body;
    sl_json_tok doc, results, v;
    if (!body->len || sl_json_validate((const char *)body->data, body->len, 64, &doc, NULL) != 0 ||
        doc.type != SL_JSON_OBJECT)
        return false;
    int64_t acc = -1, fail = -1, listed_fail = 0, listed_ok = 0;
    if (sl_json_get(&doc, "accepted", &v))
        sl_json_i64(&v, &acc);
    if (sl_json_get(&doc, "failed", &v))
        sl_json_i64(&v, &fail);
    if (sl_json_get(&doc, "results", &results) && results.type == SL_JSON_ARRAY) {
        sl_json_iter it;
        sl_json_iter_init(&it, &results);
        size_t pos = 0;
        while (sl_json_iter_elem(&it, &v)) {
            sl_json_tok code, msg, index;
            if (sl_json_get(&v, "error", &code)) {
                int64_t idx = (int64_t)pos;
                if (sl_json_get(&v, "index", &index))
                    sl_json_i64(&index, &idx);
                if (idx < 0 || (size_t)idx >= b - a)
                    idx = pos < b - a ? (int64_t)pos : (int64_t)(b - a - 1);
                char ctext[64], mtext[200] = "";
                sl_httpc_json_str(&code, ctext, sizeof ctext);
                if (sl_json_get(&v, "message", &msg))
                    sl_httpc_json_str(&msg, mtext, sizeof mtext);
                add_failure(c, c->entries[a + (size_t)idx].line, "%s%s%s", ctext,
                            mtext[0] ? ": " : "", mtext);
                listed_fail++;
            } else {
                listed_ok++;
            }
            pos++;
        }
    }
    if (acc < 0)
        acc = listed_ok;
    if (fail < 0)
        fail = listed_fail;
    if (acc + fail == 0 && b > a)
        return false; /* a 200 that mentions none of our events */
    c->accepted += acc;
    if (fail > listed_fail) { /* failures the server counted without details */
        add_failure(c, c->entries[a].line,
                    "%" PRId64 " events of lines %" PRId64 "-%" PRId64
                    " failed without details from the server",
                    fail - listed_fail, c->entries[a].line, c->entries[b - 1].line);
        c->failed += fail - listed_fail - 1; /* add_failure() counted one */
    }
    c->sent += (int64_t)(b - a);
    return true;
}

/* True for an answer that does not promise "nothing was stored": the
 * server's 500 NotConfirmed means the events were queued but their fsync
 * failed, so sending them again could store them twice. */
static bool stored_maybe(const sl_httpc *h)
{
    sl_json_tok doc, code;
    char text[32];
    if (!h->body.len ||
        sl_json_validate((const char *)h->body.data, h->body.len, 64, &doc, NULL) != 0 ||
        !sl_json_get(&doc, "error", &code))
        return false;
    sl_httpc_json_str(&code, text, sizeof text);
    return strcmp(text, "NotConfirmed") == 0;
}

/* POSTs entries [a, b) of the batch: retries 503 and 429, halves the range on 413.
 * On anything that stops the command, sets c->fatal and fills why. */
static void send_range(put_ctx *c, size_t a, size_t b, char *why, size_t cap)
{
    const put_entry *first = &c->entries[a], *last = &c->entries[b - 1];
    const uint8_t *p = c->body.data + first->off;
    size_t len = last->off + last->len - first->off;
    int64_t waited = 0;
    char msg[600];
    for (int attempt = 0;; attempt++) {
        sl_httpc_fail f =
            sl_httpc_request(&c->http, c->server, "POST", c->url, "application/x-ndjson",
                                c->lane, p, len, PUT_TIMEOUT_MS, msg, sizeof msg);
        int64_t delay = -1;
        if (f == SL_HTTPC_OK && c->http.status == 200) {
            if (!read_results(c, a, b)) {
                set_fatal(c, why, cap,
                          "the server's answer for lines %" PRId64 "-%" PRId64
                          " cannot be read; they may or may not have been stored",
                          first->line, last->line);
                c->unsent_from = last->line + 1;
                c->maybe_stored = true;
            }
            return;
        } else if (f == SL_HTTPC_OK && c->http.status == 500 && stored_maybe(&c->http)) {
            char d[400];
            sl_httpc_describe(c->http.status, &c->http.body, d, sizeof d);
            set_fatal(c, why, cap,
                      "server answered %s; lines %" PRId64 "-%" PRId64
                      " may or may not have been stored",
                      d, first->line, last->line);
            c->unsent_from = last->line + 1;
            c->maybe_stored = true;
            return;
        } else if (f == SL_HTTPC_OK && (c->http.status == 503 || c->http.status == 429)) {
            /* 429: over the server's publish rate (docs/security.md); like a
             * 503, nothing was stored and Retry-After says when to come back. */
            delay = sl_httpc_backoff_ms(attempt, c->http.retry_after_ms);
            if (waited + delay > PUT_RETRY_BUDGET_MS && c->http.retry_after_ms > delay / 2)
                snprintf(msg, sizeof msg,
                         "server %s is busy (%ld) and asks to retry in %" PRId64
                         " s, past the %d s this command waits",
                         c->server, c->http.status, c->http.retry_after_ms / 1000,
                         PUT_RETRY_BUDGET_MS / 1000);
            else
                snprintf(msg, sizeof msg,
                         "server %s is still busy (%ld) after %d attempts over "
                         "%" PRId64 " s",
                         c->server, c->http.status, attempt + 1, waited / 1000);
        } else if (f == SL_HTTPC_OK && c->http.status == 413 && b - a > 1) {
            /* The server's request limit is below ours: send each half alone,
             * and build smaller batches from now on. */
            size_t mid = a + (b - a) / 2;
            if (c->batch_bytes > len / 2)
                c->batch_bytes = len / 2;
            send_range(c, a, mid, why, cap);
            if (!c->fatal)
                send_range(c, mid, b, why, cap);
            return;
        } else if (f == SL_HTTPC_OK && c->http.status == 413) {
            char d[400];
            sl_httpc_describe(c->http.status, &c->http.body, d, sizeof d);
            add_failure(c, first->line, "%s", d);
            c->sent++;
            return;
        } else if (f == SL_HTTPC_OK) {
            char d[400];
            sl_httpc_describe(c->http.status, &c->http.body, d, sizeof d);
            set_fatal(c, why, cap, "server refused lines %" PRId64 "-%" PRId64 ": %s", first->line,
                      last->line, d);
            c->unsent_from = first->line;
            return;
        } else if (f == SL_HTTPC_UNREACHABLE && c->sent > 0) {
            /* It answered before: perhaps restarting. Nothing was sent, so retry. */
            delay = sl_httpc_backoff_ms(attempt, -1);
        } else if (f == SL_HTTPC_BROKEN) {
            set_fatal(c, why, cap,
                      "%s; lines %" PRId64 "-%" PRId64 " may or may not have been stored", msg,
                      first->line, last->line);
            c->unsent_from = last->line + 1;
            c->maybe_stored = true;
            return;
        } else {
            set_fatal(c, why, cap, "%s", msg);
            c->unsent_from = first->line;
            return;
        }
        if (waited + delay > PUT_RETRY_BUDGET_MS) {
            set_fatal(c, why, cap, "%s; giving up", msg);
            c->unsent_from = first->line;
            return;
        }
        char note[64];
        snprintf(note, sizeof note, "server %s, retrying in %.1f s",
                 f == SL_HTTPC_OK ? "busy" : "unreachable", (double)delay / 1000);
        show_progress(c, note, true);
        sl_httpc_sleep_ms(delay);
        waited += delay;
        c->retries++;
    }
}

static void flush_batch(put_ctx *c, char *why, size_t cap)
{
    if (c->count == 0)
        return;
    send_range(c, 0, c->count, why, cap);
    c->count = 0;
    c->body.len = 0;
    show_progress(c, NULL, false);
}

/* Turns one non-empty input line into an event in c->scratch, or records
 * why it fails. Returns true when scratch holds an event to send. */
static bool build_event(put_ctx *c, int64_t line, const char *s, size_t n)
{
    sl_json_tok tok, sv;
    sl_error err = {0};
    c->scratch.len = 0;
    if (sl_json_validate(s, n, PUT_JSON_DEPTH, &tok, &err) != 0) {
        add_failure(c, line, "invalid JSON: %s", err.msg[0] ? err.msg : "parse error");
        c->invalid++;
        return false;
    }
    int rc = 0;
    if (tok.type == SL_JSON_OBJECT && sl_json_get(&tok, "specversion", &sv)) {
        rc = sl_buf_append(&c->scratch, tok.p, tok.len);
    } else if (!c->type) {
        add_failure(c, line,
                    "not a CloudEvent (no \"specversion\"); give --type and --source "
                    "to wrap plain JSON");
        c->invalid++;
        return false;
    } else {
        char id[37];
        id_next(c, id);
        rc = sl_buf_printf(&c->scratch, "{\"specversion\":\"1.0\",\"id\":\"%s\",\"source\":", id);
        if (!rc)
            rc = sl_json_put_string(&c->scratch, c->source, strlen(c->source));
        if (!rc)
            rc = sl_buf_append(&c->scratch, ",\"type\":", 8);
        if (!rc)
            rc = sl_json_put_string(&c->scratch, c->type, strlen(c->type));
        if (!rc)
            rc = sl_buf_append(&c->scratch, ",\"data\":", 8);
        if (!rc)
            rc = sl_buf_append(&c->scratch, tok.p, tok.len);
        if (!rc)
            rc = sl_buf_append(&c->scratch, "}", 1);
    }
    if (!rc)
        rc = sl_buf_append(&c->scratch, "\n", 1);
    if (rc) {
        add_failure(c, line, "out of memory");
        c->invalid++;
        return false;
    }
    return true;
}

/* Adds the event in scratch to the batch, sending the batch first when the
 * event would not fit. */
static void queue_event(put_ctx *c, int64_t line, char *why, size_t cap)
{
    if (c->count > 0 &&
        (c->count >= PUT_BATCH_EVENTS || c->body.len + c->scratch.len > c->batch_bytes))
        flush_batch(c, why, cap);
    if (c->fatal)
        return;
    if (sl_buf_append(&c->body, c->scratch.data, c->scratch.len)) {
        set_fatal(c, why, cap, "out of memory at line %" PRId64, line);
        c->unsent_from = c->count ? c->entries[0].line : line;
        return;
    }
    c->entries[c->count++] =
        (put_entry){.line = line, .off = c->body.len - c->scratch.len, .len = c->scratch.len};
    if (c->count >= PUT_BATCH_EVENTS)
        flush_batch(c, why, cap);
}

static bool is_blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return false;
    return true;
}

int sl_cli_put_main(int argc, char **argv)
{
    put_ctx c = {.start_ns = sl_clock_mono_ns(), .batch_bytes = PUT_BATCH_BYTES};
    const char *file = NULL, *server = NULL;
    bool missing = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(put_usage, stdout);
            return 0;
        } else if (sl_httpc_opt(argc, argv, &i, "--lane", &c.lane, &missing) ||
                   sl_httpc_opt(argc, argv, &i, "--type", &c.type, &missing) ||
                   sl_httpc_opt(argc, argv, &i, "--source", &c.source, &missing) ||
                   sl_httpc_opt(argc, argv, &i, "--server", &server, &missing)) {
            if (missing)
                return sl_cli_usage_error(&k_usage, "%s needs a value", a);
        } else if (a[0] == '-' && a[1] != '\0') {
            return sl_cli_usage_error(&k_usage, "unknown option \"%s\"", a);
        } else if (!c.set) {
            c.set = a;
        } else if (!file) {
            file = a;
        } else {
            return sl_cli_usage_error(&k_usage, "unexpected argument \"%s\"", a);
        }
    }
    if (sl_cli_set_arg(&k_usage, c.set))
        return SL_CLI_USAGE;
    if (c.lane && !sl_lane_valid(c.lane, strlen(c.lane)))
        return sl_cli_usage_error(&k_usage, "invalid lane \"%s\" (want [a-z0-9-]{1,32})", c.lane);
    if (!c.type != !c.source)
        return sl_cli_usage_error(&k_usage, "--type and --source go together");
    if (c.type && (!*c.type || !sl_json_utf8_valid(c.type, strlen(c.type))))
        return sl_cli_usage_error(&k_usage, "--type \"%s\" must be non-empty UTF-8", c.type);
    if (c.source && (!*c.source || !sl_json_utf8_valid(c.source, strlen(c.source))))
        return sl_cli_usage_error(&k_usage, "--source \"%s\" must be non-empty UTF-8", c.source);
    sl_error err = {0};
    if (sl_httpc_server(server, c.server, sizeof c.server, &err))
        return sl_cli_usage_error(&k_usage, "%s", err.msg);
    snprintf(c.url, sizeof c.url, "%s/v1/sets/%s/events", c.server, c.set);

    c.in = stdin;
    if (file && strcmp(file, "-") != 0) {
        c.in = fopen(file, "r");
        if (!c.in) {
            fprintf(stderr, "sluice put: cannot open %s: %s\n", file, strerror(errno));
            return 1;
        }
    }
    struct stat st;
    if (fstat(fileno(c.in), &st) == 0 && S_ISREG(st.st_mode))
        c.in_size = st.st_size;
    c.tty = isatty(STDERR_FILENO);
    if (c.in == stdin && isatty(STDIN_FILENO))
        fprintf(stderr, "put: reading NDJSON from the terminal (end with Ctrl-D)\n");
    signal(SIGPIPE, SIG_IGN);
    id_init(&c);
    c.entries = calloc(PUT_BATCH_EVENTS, sizeof *c.entries);
    if (!c.entries || sl_httpc_init(&c.http, &err)) {
        fprintf(stderr, "sluice put: %s\n", c.entries ? err.msg : "out of memory");
        free(c.entries);
        if (c.in != stdin)
            fclose(c.in);
        return 1;
    }

    char why[1024] = "";
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int64_t lineno = 0;
    while (!c.fatal && (n = getline(&line, &cap, c.in)) >= 0) {
        lineno++;
        const char *s = line;
        size_t len = (size_t)n;
        if (lineno == 1 && len >= 3 && memcmp(s, "\xef\xbb\xbf", 3) == 0) {
            s += 3; /* a UTF-8 byte order mark */
            len -= 3;
        }
        while (len && (s[len - 1] == '\n' || s[len - 1] == '\r'))
            len--;
        if (is_blank(s, len))
            continue;
        if (build_event(&c, lineno, s, len))
            queue_event(&c, lineno, why, sizeof why);
    }
    if (!c.fatal && ferror(c.in)) {
        set_fatal(&c, why, sizeof why, "reading %s: %s", file ? file : "stdin", strerror(errno));
        c.unsent_from = c.count ? c.entries[0].line : lineno + 1;
    }
    if (!c.fatal)
        flush_batch(&c, why, sizeof why);
    if (c.fatal) {
        /* Say where the input stops being sent, when anything is left. */
        int ch = c.unsent_from > lineno && !ferror(c.in) ? getc(c.in) : 0;
        if (c.sent == 0 && !c.maybe_stored)
            snprintf(why + strlen(why), sizeof why - strlen(why), "; nothing was sent");
        else if (c.unsent_from <= lineno || ch != EOF)
            snprintf(why + strlen(why), sizeof why - strlen(why),
                     "; stopped: the input from line %" PRId64 " on was not sent", c.unsent_from);
    }
    clear_progress(&c);

    for (int i = 0; i < c.nlisted; i++)
        fprintf(stderr, "put: line %" PRId64 ": %s\n", c.listed[i].line, c.listed[i].msg);
    if (c.failed > c.nlisted)
        fprintf(stderr, "put: … and %" PRId64 " more failed lines\n", c.failed - c.nlisted);
    if (c.fatal)
        fprintf(stderr, "put: error: %s\n", why);
    double secs = (double)(sl_clock_mono_ns() - c.start_ns) / 1e9;
    char extra[96] = "", retries[64] = "";
    if (c.invalid)
        snprintf(extra, sizeof extra, " (%" PRId64 " rejected locally, not sent)", c.invalid);
    if (c.retries)
        snprintf(retries, sizeof retries, " (%" PRId64 " retries)", c.retries);
    fprintf(stderr,
            "put: %" PRId64 " event%s sent to %s: %" PRId64 " accepted, %" PRId64
            " failed%s in %.1f s%s\n",
            c.sent, c.sent == 1 ? "" : "s", c.set, c.accepted, c.failed, extra, secs, retries);

    free(line);
    free(c.entries);
    sl_buf_free(&c.body);
    sl_buf_free(&c.scratch);
    sl_httpc_close(&c.http);
    if (c.in != stdin)
        fclose(c.in);
    return c.fatal || c.failed ? 1 : 0;
}
