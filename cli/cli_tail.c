/*
 * cli/cli_tail.c — `sluice tail SET`: prints a set's events as NDJSON.
 *
 * One libcurl easy handle per partition, driven by one curl multi handle.
 * Without --follow the partitions are read one after another up to the end
 * offsets seen at start, so the output is ordered by partition then offset.
 * With --follow every partition long-polls at once (wait_ms=TAIL_WAIT_MS);
 * curl_multi_poll() also watches a self-pipe that SIGINT/SIGTERM write to,
 * so the loop sleeps until data, a retry time, or a signal, and never spins.
 */
#include "core/base/lane_name.h"
#include "cli/cli.h"
#include "core/base/httpc.h"
#include "core/base/clock.h"
#include "core/base/json.h"
#include "core/base/buf.h"
#include "core/bus/set.h"

#include <curl/curl.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TAIL_WAIT_MS 1000          /* long-poll length with --follow */
#define TAIL_MAX_EVENTS 1000       /* events asked for per request */
#define TAIL_RETRY_BUDGET_MS 60000 /* give up after this long without an answer */
#define TAIL_MIN_POLL_MS 200       /* an empty answer faster than this was no long-poll */
#define TAIL_INFO_TIMEOUT_MS 30000L

static const char tail_usage[] =
    "usage: sluice tail SET [--from beginning|end|TIME] [--follow] [--lane L|*]\n"
    "                   [--partition P] [--server URL]\n"
    "  Prints the events of SET as NDJSON on stdout, one compact object per line.\n"
    "  --from      where to start: beginning, end, or an RFC 3339 time\n"
    "              (default: end with --follow, else beginning)\n"
    "  --follow    keep waiting for new events until interrupted (also -f)\n"
    "  --lane L    read lane L instead of the base lane; * reads every lane\n"
    "  --partition P   read only partition P (default: all)\n"
    "  --server URL    default $SLUICE_SERVER, else " SL_HTTPC_DEFAULT_SERVER "\n"
    "  Without --follow, stops at the end offsets the set had when tail started.\n";

static const sl_cli_usage k_usage = {"tail", tail_usage, false};

typedef enum tail_state {
    TAIL_READY,   /* the next request can start now */
    TAIL_RUNNING, /* a request is in flight */
    TAIL_WAITING, /* retrying at retry_at_ns */
    TAIL_DONE,    /* nothing more to read (without --follow) */
} tail_state;

typedef struct tail_part {
    int32_t id;
    sl_httpc http;
    tail_state state;
    bool added;         /* the easy handle is in the multi handle */
    int64_t offset;     /* next offset to read, -1 until the first answer */
    int64_t end;        /* end offset at start, -1 when unknown */
    int max;            /* events per request; halved when answers get too big */
    int attempt;        /* failed attempts in a row */
    int64_t failing_ns; /* start of the current run of failures, 0 if none */
    int64_t started_ns; /* when the request in flight started */
    int64_t retry_at_ns;
    char url[2048];
} tail_part;

typedef struct tail_ctx {
    const char *set;
    const char *from;
    const char *lane; /* NULL: the server's default (base lane) */
    bool follow;
    char server[1024];
    tail_part *parts;
    int nparts;
    sl_buf out;
    bool lost; /* "lost the server" was said and "reconnected" was not yet */
} tail_ctx;

static volatile sig_atomic_t tail_stop;
static int tail_wake_fd = -1;

static void on_signal(int sig)
{
    (void)sig;
    int saved = errno;
    tail_stop = 1;
    if (tail_wake_fd >= 0)
        (void)!write(tail_wake_fd, "x", 1);
    errno = saved;
}

/* Writes all of [p, p + n) to stdout. Returns 0, 1 when the reader went
 * away (EPIPE) or a signal asked us to stop, or -1 with errno on failure. */
static int write_all(const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(STDOUT_FILENO, p, n);
        if (w < 0) {
            if (errno == EINTR) {
                if (tail_stop)
                    return 1;
                continue;
            }
            return errno == EPIPE ? 1 : -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* GET /v1/sets/SET into h->body, retrying 503 for a while. Returns 0 on a
 * 200, or -1 with a sentence in msg (a 404 says the set does not exist). */
static int get_set_info(const tail_ctx *c, sl_httpc *h, char *msg, size_t cap)
{
    char url[1400];
    snprintf(url, sizeof url, "%s/v1/sets/%s", c->server, c->set);
    int64_t waited = 0;
    sl_httpc_fail f;
    for (int attempt = 0;; attempt++) {
        f = sl_httpc_request(h, c->server, "GET", url, NULL, NULL, NULL, 0, TAIL_INFO_TIMEOUT_MS,
                                msg, cap);
        if (f != SL_HTTPC_OK || h->status != 503)
            break;
        int64_t delay = sl_httpc_backoff_ms(attempt, h->retry_after_ms);
        if (waited + delay > TAIL_RETRY_BUDGET_MS)
            break;
        sl_httpc_sleep_ms(delay);
        waited += delay;
    }
    if (f != SL_HTTPC_OK)
        return -1;
    if (h->status == 404) {
        snprintf(msg, cap, "set \"%s\" does not exist on %s", c->set, c->server);
        return -1;
    }
    if (h->status != 200) {
        char d[500];
        sl_httpc_describe(h->status, &h->body, d, sizeof d);
        snprintf(msg, cap, "GET %s: %s", url, d);
        return -1;
    }
    return 0;
}

/* Reads partition id's start and end offsets from a set answer's
 * partition_info (each left at -1 when absent). */
static void partition_bounds(const sl_json_tok *doc, int64_t id, int64_t *start, int64_t *end)
{
    sl_json_tok info, v, t;
    *start = *end = -1;
    if (!sl_json_get(doc, "partition_info", &info) || info.type != SL_JSON_ARRAY)
        return;
    sl_json_iter it;
    sl_json_iter_init(&it, &info);
    while (sl_json_iter_elem(&it, &v)) {
        int64_t pid;
        if (!sl_json_get(&v, "partition", &t) || !sl_json_i64(&t, &pid) || pid != id)
            continue;
        if (sl_json_get(&v, "start_offset", &t))
            sl_json_i64(&t, start);
        if (sl_json_get(&v, "end_offset", &t))
            sl_json_i64(&t, end);
        return;
    }
}

/* Learns the partition count and end offsets. Returns 0, or prints why and
 * returns 1. */
static int read_set_info(tail_ctx *c, int32_t only)
{
    sl_httpc h;
    sl_error err = {0};
    if (sl_httpc_init(&h, &err)) {
        fprintf(stderr, "sluice tail: %s\n", err.msg);
        return 1;
    }
    char msg[600];
    int rc = 1;
    sl_json_tok doc, v;
    int64_t n = -1;
    if (get_set_info(c, &h, msg, sizeof msg)) {
        fprintf(stderr, "sluice tail: %s\n", msg);
    } else if (sl_json_validate((const char *)h.body.data, h.body.len, 64, &doc, NULL) ||
               !sl_json_get(&doc, "partitions", &v) || !sl_json_i64(&v, &n) || n < 1 || n > 65536) {
        fprintf(stderr,
                "sluice tail: unexpected answer from %s for set \"%s\" (no partition "
                "count)\n",
                c->server, c->set);
    } else if (only >= n) {
        fprintf(stderr,
                "sluice tail: set \"%s\" has %" PRId64 " partition%s (0..%" PRId64
                "); there is no partition %d\n",
                c->set, n, n == 1 ? "" : "s", n - 1, only);
    } else if (!(c->parts = calloc(only >= 0 ? 1 : (size_t)n, sizeof *c->parts))) {
        fprintf(stderr, "sluice tail: out of memory\n");
    } else {
        c->nparts = only >= 0 ? 1 : (int)n;
        for (int i = 0; i < c->nparts; i++) {
            tail_part *p = &c->parts[i];
            int64_t start;
            p->id = only >= 0 ? only : i;
            p->offset = -1;
            p->max = TAIL_MAX_EVENTS;
            partition_bounds(&doc, p->id, &start, &p->end);
            /* Without --follow an empty partition needs no request. */
            if (!c->follow && strcmp(c->from, "beginning") == 0 && start >= 0 && p->end >= 0 &&
                start >= p->end)
                p->state = TAIL_DONE;
        }
        rc = 0;
    }
    sl_httpc_close(&h);
    return rc;
}

/* After a 416: the offset p wanted is gone (retention) or past the end (the
 * partition was cut back). Moves p to the nearest offset that exists and
 * says so. Returns 0, or -1 when the bounds cannot be learnt or p's offset is
 * inside them (then the 416 was something else). */
static int resync(tail_ctx *c, tail_part *p)
{
    sl_httpc h;
    char msg[600];
    sl_json_tok doc;
    int64_t start = -1, end = -1;
    if (sl_httpc_init(&h, NULL))
        return -1;
    if (get_set_info(c, &h, msg, sizeof msg) == 0 &&
        sl_json_validate((const char *)h.body.data, h.body.len, 64, &doc, NULL) == 0)
        partition_bounds(&doc, p->id, &start, &end);
    sl_httpc_close(&h);
    if (start >= 0 && p->offset < start) {
        fprintf(stderr,
                "sluice tail: partition %d: offsets %" PRId64 "..%" PRId64 " were "
                "removed before they could be read; continuing at %" PRId64 "\n",
                p->id, p->offset, start - 1, start);
        p->offset = start;
    } else if (end >= 0 && p->offset > end) {
        fprintf(stderr,
                "sluice tail: partition %d: offset %" PRId64 " is past the end (%" PRId64
                "); continuing there\n",
                p->id, p->offset, end);
        p->offset = end;
    } else {
        return -1;
    }
    p->state = TAIL_READY;
    if (!c->follow && p->end >= 0 && p->offset >= p->end)
        p->state = TAIL_DONE;
    return 0;
}

/* Builds the URL of p's next request into p->url. Returns 0 or SL_ENOMEM. */
static int build_url(tail_ctx *c, tail_part *p)
{
    /* The first request (from=…) does not wait: it only pins the position.
     * A long-poll that resolves from=end again when it wakes would skip the
     * very events that woke it; offset=N long-polls are unambiguous. */
    sl_buf u = SL_BUF_INIT;
    int rc = sl_buf_printf(&u, "%s/v1/sets/%s/events?partition=%d&max=%d&wait_ms=%d", c->server,
                           c->set, p->id, p->max, c->follow && p->offset >= 0 ? TAIL_WAIT_MS : 0);
    if (!rc && p->offset >= 0) {
        rc = sl_buf_printf(&u, "&offset=%" PRId64, p->offset);
    } else if (!rc) {
        char *e = curl_easy_escape(p->http.curl, c->from, 0);
        rc = e ? sl_buf_printf(&u, "&from=%s", e) : SL_ENOMEM;
        curl_free(e);
    }
    if (!rc && c->lane) {
        char *e = curl_easy_escape(p->http.curl, c->lane, 0);
        rc = e ? sl_buf_printf(&u, "&lane=%s", e) : SL_ENOMEM;
        curl_free(e);
    }
    if (!rc && u.len >= sizeof p->url)
        rc = SL_ETOOBIG;
    if (!rc)
        memcpy(p->url, u.data, u.len + 1);
    sl_buf_free(&u);
    return rc;
}

/* Prints the events of p's 200 answer and moves p along. Returns 0, 1 to
 * stop quietly (EPIPE), or -1 after printing an error. */
static int handle_events(tail_ctx *c, tail_part *p)
{
    const sl_buf *b = &p->http.body;
    sl_json_tok doc, events, ev, t;
    int64_t next = -1, count = 0;
    if (!b->len ||
        sl_json_validate((const char *)b->data, b->len, SL_JSON_DEPTH_LIMIT, &doc, NULL) ||
        !sl_json_get(&doc, "events", &events) || events.type != SL_JSON_ARRAY) {
        fprintf(stderr, "sluice tail: partition %d: unexpected answer from %s (no events)\n", p->id,
                c->server);
        return -1;
    }
    c->out.len = 0;
    sl_json_iter it;
    sl_json_iter_init(&it, &events);
    while (sl_json_iter_elem(&it, &ev)) {
        if (sl_json_compact(ev.p, ev.len, &c->out) || sl_buf_append(&c->out, "\n", 1)) {
            fprintf(stderr, "sluice tail: out of memory\n");
            return -1;
        }
        count++;
        int64_t off;
        if (sl_json_get(&ev, "sluiceoffset", &t) && sl_json_i64(&t, &off))
            next = off + 1; /* a fallback when next_offset is missing */
    }
    if (sl_json_get(&doc, "next_offset", &t))
        sl_json_i64(&t, &next);
    if (next < 0) {
        fprintf(stderr, "sluice tail: partition %d: answer from %s has no next_offset\n", p->id,
                c->server);
        return -1;
    }
    if (c->out.len) {
        int w = write_all(c->out.data, c->out.len);
        if (w < 0) {
            fprintf(stderr, "sluice tail: writing to stdout: %s\n", strerror(errno));
            return -1;
        }
        if (w > 0)
            return 1;
    }
    int64_t prev = p->offset;
    p->offset = next;
    p->state = TAIL_READY;
    if (!c->follow) {
        /* Done at the end seen at start, or when an answer makes no progress. */
        if ((p->end >= 0 && next >= p->end) || (count == 0 && (p->end < 0 || next <= prev)))
            p->state = TAIL_DONE;
    } else if (count == 0 && next == prev &&
               sl_clock_mono_ns() - p->started_ns < TAIL_MIN_POLL_MS * 1000000ll) {
        /* The server did not hold the request: wait here instead of spinning. */
        p->state = TAIL_WAITING;
        p->retry_at_ns = sl_clock_mono_ns() + TAIL_WAIT_MS * 1000000ll / 2;
    }
    return 0;
}

/* Handles one finished transfer of p. Returns 0 to go on, 1 to stop
 * quietly, -1 after printing an error. */
static int handle_done(tail_ctx *c, tail_part *p, CURLcode result)
{
    char msg[600];
    sl_httpc_fail f = sl_httpc_finish(&p->http, (int)result, c->server, msg, sizeof msg);
    int64_t now = sl_clock_mono_ns();
    if (f == SL_HTTPC_OK && p->http.status == 200) {
        if (c->lost) {
            fprintf(stderr, "sluice tail: reconnected to %s\n", c->server);
            c->lost = false;
        }
        p->attempt = 0;
        p->failing_ns = 0;
        return handle_events(c, p);
    }
    if (f == SL_HTTPC_LOCAL && p->http.too_big && p->max > 1) {
        p->max /= 2; /* events are large: ask for fewer at a time */
        p->state = TAIL_READY;
        return 0;
    }
    if (f == SL_HTTPC_OK && p->http.status == 416 && p->offset >= 0 && resync(c, p) == 0)
        return 0;
    if (f == SL_HTTPC_LOCAL ||
        (f == SL_HTTPC_OK && p->http.status != 503 && p->http.status < 500)) {
        if (f == SL_HTTPC_OK)
            sl_httpc_describe(p->http.status, &p->http.body, msg, sizeof msg);
        fprintf(stderr, "sluice tail: partition %d: %s\n", p->id, msg);
        return -1;
    }
    /* 503, other 5xx, or a lost connection: reading is safe to repeat. */
    if (f == SL_HTTPC_OK)
        sl_httpc_describe(p->http.status, &p->http.body, msg, sizeof msg);
    if (p->failing_ns == 0)
        p->failing_ns = now;
    int64_t delay = sl_httpc_backoff_ms(p->attempt++, p->http.retry_after_ms);
    if ((now - p->failing_ns) / 1000000 + delay > TAIL_RETRY_BUDGET_MS) {
        fprintf(stderr, "sluice tail: partition %d: %s; giving up after %d attempts\n", p->id, msg,
                p->attempt);
        return -1;
    }
    if (!c->lost && f != SL_HTTPC_OK) {
        fprintf(stderr, "sluice tail: %s; retrying\n", msg);
        c->lost = true;
    }
    p->state = TAIL_WAITING;
    p->retry_at_ns = now + delay * 1000000;
    return 0;
}

/* Starts the requests that are due; in order, and only one at a time
 * without --follow. Returns 0 or -1 after printing an error. */
static int start_due(tail_ctx *c, CURLM *multi, int64_t now)
{
    int running = 0;
    for (int i = 0; i < c->nparts; i++)
        running += c->parts[i].state == TAIL_RUNNING;
    for (int i = 0; i < c->nparts; i++) {
        tail_part *p = &c->parts[i];
        if (p->state == TAIL_WAITING && now >= p->retry_at_ns)
            p->state = TAIL_READY;
        if (!c->follow && (running > 0 || p->state == TAIL_WAITING))
            break;
        if (p->state != TAIL_READY)
            continue;
        if (build_url(c, p) || sl_httpc_prepare(&p->http, "GET", p->url, NULL, NULL, NULL, 0,
                                                   (c->follow ? TAIL_WAIT_MS : 0) + 30000L)) {
            fprintf(stderr, "sluice tail: out of memory\n");
            return -1;
        }
        if (curl_multi_add_handle(multi, p->http.curl) != CURLM_OK) {
            fprintf(stderr, "sluice tail: curl_multi_add_handle failed\n");
            return -1;
        }
        p->added = true;
        p->state = TAIL_RUNNING;
        p->started_ns = now;
        running++;
    }
    return 0;
}

/* Milliseconds until the earliest retry, capped at 1 s. */
static int poll_timeout_ms(const tail_ctx *c, int64_t now)
{
    int64_t ms = 1000;
    for (int i = 0; i < c->nparts; i++) {
        const tail_part *p = &c->parts[i];
        if (p->state == TAIL_WAITING) {
            int64_t d = (p->retry_at_ns - now + 999999) / 1000000;
            if (d < ms)
                ms = d < 0 ? 0 : d;
        }
    }
    return (int)ms;
}

static int run(tail_ctx *c, int wake_rd)
{
    CURLM *multi = curl_multi_init();
    if (!multi) {
        fprintf(stderr, "sluice tail: curl_multi_init failed\n");
        return 1;
    }
    int rc = 0;
    while (!tail_stop && rc == 0) {
        int64_t now = sl_clock_mono_ns();
        if (start_due(c, multi, now)) {
            rc = -1;
            break;
        }
        bool all_done = true;
        for (int i = 0; i < c->nparts; i++)
            all_done = all_done && c->parts[i].state == TAIL_DONE;
        if (all_done)
            break;
        struct curl_waitfd wfd = {.fd = wake_rd, .events = CURL_WAIT_POLLIN};
        if (curl_multi_poll(multi, &wfd, 1, poll_timeout_ms(c, now), NULL) != CURLM_OK) {
            fprintf(stderr, "sluice tail: curl_multi_poll failed\n");
            rc = -1;
            break;
        }
        if (tail_stop)
            break;
        int still;
        curl_multi_perform(multi, &still);
        CURLMsg *m;
        int left;
        while (rc == 0 && (m = curl_multi_info_read(multi, &left))) {
            if (m->msg != CURLMSG_DONE)
                continue;
            tail_part *p = NULL;
            for (int i = 0; i < c->nparts && !p; i++)
                if (c->parts[i].http.curl == m->easy_handle)
                    p = &c->parts[i];
            CURLcode result = m->data.result; /* m is invalid after remove_handle */
            curl_multi_remove_handle(multi, m->easy_handle);
            if (!p)
                continue;
            p->added = false;
            rc = handle_done(c, p, result);
        }
    }
    for (int i = 0; i < c->nparts; i++) {
        if (c->parts[i].added)
            curl_multi_remove_handle(multi, c->parts[i].http.curl);
        c->parts[i].added = false;
    }
    curl_multi_cleanup(multi);
    return rc < 0 ? 1 : 0; /* rc 1: stdout closed, a quiet success */
}

int sl_cli_tail_main(int argc, char **argv)
{
    tail_ctx c = {0};
    const char *server = NULL, *part = NULL;
    bool missing = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(tail_usage, stdout);
            return 0;
        } else if (strcmp(a, "--follow") == 0 || strcmp(a, "-f") == 0) {
            c.follow = true;
        } else if (sl_httpc_opt(argc, argv, &i, "--from", &c.from, &missing) ||
                   sl_httpc_opt(argc, argv, &i, "--lane", &c.lane, &missing) ||
                   sl_httpc_opt(argc, argv, &i, "--partition", &part, &missing) ||
                   sl_httpc_opt(argc, argv, &i, "--server", &server, &missing)) {
            if (missing)
                return sl_cli_usage_error(&k_usage, "%s needs a value", a);
        } else if (a[0] == '-' && a[1] != '\0') {
            return sl_cli_usage_error(&k_usage, "unknown option \"%s\"", a);
        } else if (!c.set) {
            c.set = a;
        } else {
            return sl_cli_usage_error(&k_usage, "unexpected argument \"%s\"", a);
        }
    }
    if (sl_cli_set_arg(&k_usage, c.set))
        return SL_CLI_USAGE;
    if (!c.from)
        c.from = c.follow ? "end" : "beginning";
    int64_t ms;
    if (strcmp(c.from, "beginning") != 0 && strcmp(c.from, "end") != 0 &&
        sl_time_parse_rfc3339(c.from, strlen(c.from), &ms) != 0)
        return sl_cli_usage_error(&k_usage,
                                  "--from \"%s\": want beginning, end or an RFC 3339 time "
                                  "such as 2024-05-01T12:00:00Z",
                                  c.from);
    if (c.lane && strcmp(c.lane, "*") != 0 && !sl_lane_valid(c.lane, strlen(c.lane)))
        return sl_cli_usage_error(&k_usage, "invalid lane \"%s\" (want [a-z0-9-]{1,32} or *)",
                                  c.lane);
    int32_t only = -1;
    if (part) {
        char *end;
        errno = 0;
        long v = strtol(part, &end, 10);
        if (errno || end == part || *end || v < 0 || v > 65535)
            return sl_cli_usage_error(&k_usage, "--partition \"%s\": want a partition number",
                                      part);
        only = (int32_t)v;
    }
    sl_error err = {0};
    if (sl_httpc_server(server, c.server, sizeof c.server, &err))
        return sl_cli_usage_error(&k_usage, "%s", err.msg);
    signal(SIGPIPE, SIG_IGN);

    if (read_set_info(&c, only))
        return 1;
    int rc = 0;
    if (!c.follow && strcmp(c.from, "end") == 0)
        goto done; /* nothing is after the end yet */
    for (int i = 0; i < c.nparts; i++) {
        if (sl_httpc_init(&c.parts[i].http, &err)) {
            fprintf(stderr, "sluice tail: %s\n", err.msg);
            rc = 1;
            goto done;
        }
    }
    int pfd[2];
    if (pipe2(pfd, O_NONBLOCK | O_CLOEXEC) != 0) {
        fprintf(stderr, "sluice tail: pipe: %s\n", strerror(errno));
        rc = 1;
        goto done;
    }
    tail_wake_fd = pfd[1];
    struct sigaction sa = {.sa_handler = on_signal}, old_int, old_term;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    rc = run(&c, pfd[0]);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    tail_wake_fd = -1;
    close(pfd[0]);
    close(pfd[1]);
done:
    for (int i = 0; i < c.nparts; i++)
        sl_httpc_close(&c.parts[i].http);
    free(c.parts);
    sl_buf_free(&c.out);
    return rc;
}
