/*
 * bench/e2e_bench.c — end-to-end delivery (issue 5 §7): events POSTed to
 * `sluice serve` (HTTP ingest), matched by an EventBridge pattern rule and
 * delivered by target.http to a receiver in this process, or by target.kafka
 * to the Kafka mock cluster (build/rel/tools/kafka_mock). Figures: delivered
 * events/s and end-to-end latency p50/p99 (the event's `time`, stamped by the
 * sender with µs precision just before the POST, to its receipt). References
 * measured in the same run: for target.http, the same events POSTed straight
 * to the same receiver by a libcurl multi client with target.http's
 * connection count, one event per request, with no sluice in between; for
 * target.kafka, `kcat -P` producing the same number of messages of the same
 * sizes to the same mock cluster. target.kafka is measured twice against the
 * same kcat runs: end to end (ingest and delivery at once, row 3) and alone,
 * as a new rule (start = "beginning") catching up on events stored by an
 * earlier server with no rule (row 3b). How to read the table: bench/README.md.
 *
 * Environment (bench/README.md has the table): SLUICE_BENCH_DIR, SLUICE_E2E_RATE,
 * SLUICE_E2E_SECS, SLUICE_E2E_HTTP_N, SLUICE_E2E_KAFKA_N, SLUICE_E2E_REPS,
 * SLUICE_E2E_PARTITIONS, SLUICE_E2E_WORKERS, SLUICE_E2E_ROWS, SLUICE_E2E_PERF (and
 * SLUICE_E2E_PERF_FREQ, its sampling rate, default 499),
 * and for experiments SLUICE_E2E_SET_EXTRA / _HTTP_EXTRA / _KAFKA_EXTRA (keys
 * added to the set, target.http and target.kafka blocks of the config).
 *
 * Exits 0 when it measured everything, goals met or not; 1 when something is
 * broken (an event lost, a server dead, a tool failing) or on Ctrl-C.
 */
#include "bench/tsv.h"

#include <curl/curl.h>
#include <librdkafka/rdkafka.h>
#include <microhttpd.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BATCH 100       /* events per ingest POST; the paced sender's burst */
#define EVENT_BYTES 300 /* size of one event as POSTed */
#define INGEST_CONNS 2  /* connections of the unpaced ingest */
#define HTTP_CONC 8     /* target.http concurrency, and the direct client's connections */
#define KAFKA_PARTS 4   /* partitions of the Kafka topics */
#define STALL_S 15      /* no progress for this long: events are lost */
#define MAX_REPS 9
#define TMPFS_MAGIC_ 0x01021994

/* ---- small helpers ---------------------------------------------------------------- */

static volatile sig_atomic_t stop_flag;
static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static char broken[512]; /* the first error; the run stops and exits 1 */
static void fail(const char *fmt, ...)
{
    if (broken[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(broken, sizeof broken, fmt, ap);
    va_end(ap);
    fprintf(stderr, "e2e_bench: error: %s\n", broken);
}
static bool ok(void)
{
    return !broken[0] && !stop_flag;
}

static int64_t wall_us(void) /* the clock of the `time` attribute */
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void sleep_us(int64_t us)
{
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) && errno == EINTR && !stop_flag)
        ;
}

static long env_long(const char *name, long def, long lo, long hi)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < lo || x > hi) {
        fprintf(stderr, "e2e_bench: %s must be a whole number in %ld..%ld\n", name, lo, hi);
        exit(1);
    }
    return x;
}

static bool has_row(const char *rows, const char *row)
{
    size_t n = strlen(row);
    for (const char *p = rows; *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && strncmp(p, row, n) == 0)
            return true;
        p += len + (p[len] == ',');
    }
    return false;
}

/* RFC 3339 UTC with µs, "2026-11-29T12:36:34.123456Z" (27 bytes + NUL). */
static void fmt_time(char out[32], int64_t us)
{
    time_t s = (time_t)(us / 1000000);
    struct tm tm;
    gmtime_r(&s, &tm);
    snprintf(out, 32, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(us % 1000000));
}

static int64_t days_from_civil(int64_t y, int m, int d) /* Howard Hinnant's algorithm */
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int digits(const char *p, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

/* Parses what fmt_time writes (fraction of 1-9 digits); -1 if it is not that. */
static int64_t parse_time(const char *p, const char *end)
{
    if (end - p < 20 || p[4] != '-' || p[7] != '-' || p[10] != 'T' || p[13] != ':' || p[16] != ':')
        return -1;
    int y = digits(p, 4), mo = digits(p + 5, 2), d = digits(p + 8, 2), h = digits(p + 11, 2),
        mi = digits(p + 14, 2), s = digits(p + 17, 2);
    if (y < 0 || mo < 1 || d < 1 || h < 0 || mi < 0 || s < 0)
        return -1;
    int64_t frac = 0;
    const char *q = p + 19;
    if (q < end && *q == '.') {
        int n = 0;
        for (q++; q < end && *q >= '0' && *q <= '9'; q++, n++)
            if (n < 6)
                frac = frac * 10 + (*q - '0');
        for (; n < 6; n++)
            frac *= 10;
    }
    if (q >= end || *q != 'Z')
        return -1;
    return ((days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s) * 1000000) + frac;
}

/* ---- events ------------------------------------------------------------------------- */

/* One event of run `run`, number `seq`, stamped `stamp`, EVENT_BYTES long;
 * with `decorate`, followed by the members sluice adds when it delivers
 * (sluiceset, sluicepartition, sluiceoffset), so the text is what a target
 * receives. Returns its length. `out` holds at least EVENT_BYTES + 100. */
static size_t make_event(char *out, int run, int seq, const char *stamp, bool decorate,
                         int partitions)
{
    int n = snprintf(out, EVENT_BYTES + 100,
                     "{\"specversion\":\"1.0\",\"id\":\"e2e-%d-%07d\",\"source\":\"/bench/e2e\","
                     "\"type\":\"bench.t\",\"time\":\"%s\",\"partitionkey\":\"k%03d\","
                     "\"datacontenttype\":\"application/json\",\"data\":{\"seq\":%d,\"pad\":\"",
                     run, seq, stamp, seq % 512, seq);
    int pad = EVENT_BYTES - n - 3; /* "}} */
    if (pad < 0)
        pad = 0;
    memset(out + n, 'x', (size_t)pad);
    n += pad;
    memcpy(out + n, "\"}", 2);
    n += 2;
    if (decorate)
        n += snprintf(out + n, 100,
                      ",\"sluiceset\":\"in\",\"sluicepartition\":%d,\"sluiceoffset\":%d",
                      seq % partitions, seq / partitions);
    out[n++] = '}';
    out[n] = '\0';
    return (size_t)n;
}

/* ---- the receiver: libmicrohttpd, answers 200 at once, records latency ------------ */

static struct {
    atomic_int run;     /* events of other runs are strays */
    int n;              /* events in this run */
    atomic_uchar *seen; /* per seq */
    int32_t *lat_us;    /* per seq: receipt - time of the first receipt */
    atomic_int unique, dups, stray, bad, requests;
    atomic_llong last_us; /* receipt of the newest first receipt */
    int cap;
} rx;

typedef struct {
    char *buf;
    size_t len, cap;
} body;

static void rx_event(const char *id, const char *end, int64_t now)
{
    /* id points after "id":"e2e- */
    char *q;
    long run = strtol(id, &q, 10);
    if (q >= end || *q != '-') {
        atomic_fetch_add(&rx.bad, 1);
        return;
    }
    long seq = strtol(q + 1, &q, 10);
    const char *t = strstr(q, "\"time\":\"");
    int64_t ts = t && t < end ? parse_time(t + 8, end) : -1;
    if (ts < 0) {
        atomic_fetch_add(&rx.bad, 1);
        return;
    }
    if (run != atomic_load(&rx.run) || seq < 0 || seq >= rx.n) {
        atomic_fetch_add(&rx.stray, 1);
        return;
    }
    if (atomic_exchange(&rx.seen[seq], 1)) {
        atomic_fetch_add(&rx.dups, 1);
        return;
    }
    int64_t lat = now - ts;
    rx.lat_us[seq] = (int32_t)(lat > INT32_MAX ? INT32_MAX : lat);
    long long prev = atomic_load(&rx.last_us);
    while (now > prev && !atomic_compare_exchange_weak(&rx.last_us, &prev, now))
        ;
    atomic_fetch_add(&rx.unique, 1);
}

static enum MHD_Result rx_handler(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    (void)cls;
    (void)url;
    (void)method;
    (void)version;
    body *b = *con_cls;
    if (!b) {
        b = calloc(1, sizeof *b);
        if (!b)
            return MHD_NO;
        *con_cls = b;
        return MHD_YES;
    }
    if (*upload_size) {
        if (b->len + *upload_size + 1 > b->cap) {
            size_t cap = b->cap ? b->cap : 4096;
            while (cap < b->len + *upload_size + 1)
                cap *= 2;
            char *nb = realloc(b->buf, cap);
            if (!nb)
                return MHD_NO;
            b->buf = nb;
            b->cap = cap;
        }
        memcpy(b->buf + b->len, upload, *upload_size);
        b->len += *upload_size;
        b->buf[b->len] = '\0';
        *upload_size = 0;
        return MHD_YES;
    }
    int64_t now = wall_us();
    atomic_fetch_add(&rx.requests, 1);
    const char *end = b->buf ? b->buf + b->len : NULL;
    for (const char *p = b->buf; p && (p = strstr(p, "\"id\":\"e2e-")) != NULL; p += 10) {
        const char *next = strstr(p + 10, "\"id\":\"e2e-");
        rx_event(p + 10, next ? next : end, now);
    }
    static char empty[] = "";
    struct MHD_Response *r = MHD_create_response_from_buffer(0, empty, MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

static void rx_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    body *b = *con_cls;
    if (b) {
        free(b->buf);
        free(b);
        *con_cls = NULL;
    }
}

static struct MHD_Daemon *rx_start(int *port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct MHD_Daemon *d =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, 0, NULL, NULL, rx_handler,
                         NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                         MHD_OPTION_THREAD_POOL_SIZE, 2u, MHD_OPTION_CONNECTION_TIMEOUT, 30u,
                         MHD_OPTION_NOTIFY_COMPLETED, rx_completed, NULL, MHD_OPTION_END);
    if (!d)
        return NULL;
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    *port = info ? info->port : 0;
    return d;
}

/* Starts run `run` of n events: clears the records. */
static void rx_arm(int run, int n)
{
    if (n > rx.cap) {
        free(rx.seen);
        free(rx.lat_us);
        rx.seen = calloc((size_t)n, sizeof *rx.seen);
        rx.lat_us = calloc((size_t)n, sizeof *rx.lat_us);
        if (!rx.seen || !rx.lat_us) {
            fprintf(stderr, "e2e_bench: out of memory\n");
            exit(1);
        }
        rx.cap = n;
    }
    atomic_store(&rx.run, -1);
    for (int i = 0; i < n; i++)
        atomic_store(&rx.seen[i], 0);
    rx.n = n;
    atomic_store(&rx.unique, 0);
    atomic_store(&rx.dups, 0);
    atomic_store(&rx.last_us, 0);
    atomic_store(&rx.run, run);
}

/* ---- child processes ---------------------------------------------------------------- */

#define MAX_PROCS 8
static pid_t procs[MAX_PROCS];

static void proc_add(pid_t pid)
{
    for (int i = 0; i < MAX_PROCS; i++)
        if (!procs[i]) {
            procs[i] = pid;
            return;
        }
}

/* Starts argv with stdout and stderr into `log` (or a pipe to *out_fd when
 * out_fd is given) and stdin from a pipe (*in_fd) or /dev/null. */
static pid_t spawn(const char *const argv[], const char *log, int *in_fd, int *out_fd)
{
    int in[2] = {-1, -1}, out[2] = {-1, -1};
    if ((in_fd && pipe(in)) || (out_fd && pipe(out)))
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = log ? open(log, O_WRONLY | O_CREAT | O_APPEND, 0644) : open("/dev/null", O_WRONLY);
        int nul = open("/dev/null", O_RDONLY);
        dup2(in_fd ? in[0] : nul, 0);
        dup2(out_fd ? out[1] : fd, 1);
        dup2(fd, 2);
        execvp(argv[0], (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    if (in_fd) {
        close(in[0]);
        *in_fd = in[1];
    }
    if (out_fd) {
        close(out[1]);
        *out_fd = out[0];
    }
    proc_add(pid);
    return pid;
}

static bool proc_alive(pid_t pid)
{
    int st;
    return pid > 0 && waitpid(pid, &st, WNOHANG) == 0;
}

/* SIGTERM (or sig), then SIGKILL after timeout_ms. Returns the wait status. */
static int proc_stop(pid_t pid, int sig, int timeout_ms)
{
    int st = 0;
    if (pid <= 0)
        return 0;
    kill(pid, sig);
    for (int i = 0; i < timeout_ms / 10; i++) {
        if (waitpid(pid, &st, WNOHANG) != 0)
            goto done;
        sleep_us(10000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
done:
    for (int i = 0; i < MAX_PROCS; i++)
        if (procs[i] == pid)
            procs[i] = 0;
    return st;
}

static char tmpdir[PATH_MAX];

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(p);
    return 0;
}

static void cleanup(void)
{
    for (int i = 0; i < MAX_PROCS; i++)
        if (procs[i])
            proc_stop(procs[i], SIGTERM, 5000);
    if (tmpdir[0])
        nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- sluice servers ----------------------------------------------------------------- */

typedef struct {
    pid_t pid, perf;
    int port;
    int64_t spawn_us, listen_us; /* mono_us just before the fork, when the port was seen */
    char dir[PATH_MAX], log[PATH_MAX + 16], rule[32];
} server;

static const char *perf_dir;          /* SLUICE_E2E_PERF=1: where perf record writes */
static const char *perf_graph = "fp"; /* SLUICE_E2E_PERF=dwarf: "dwarf,8192" */
static int workers = 2;               /* server { workers }: rule worker threads */
static const char *set_extra;         /* SLUICE_E2E_SET_EXTRA: more keys of the set (diagnostics) */

static void tail_log(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char buf[4096];
    fseek(f, -(long)sizeof buf + 1, SEEK_END);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fprintf(stderr, "---- %s (end) ----\n%s\n----\n", path, buf);
    fclose(f);
}

typedef struct {
    const char *name;       /* NAME.lua, NAME.log and the perf file NAME.data */
    const char *data;       /* the data directory's name in tmpdir; NULL: name */
    const char *ack;        /* of the set */
    int partitions;         /* of the set */
    const char *rule;       /* its name; NULL: the config has no rule */
    const char *rule_extra; /* more keys of the rule, e.g. start = "beginning"; or NULL */
    const char *target;     /* the rule's target */
    bool no_perf;           /* do not record this server even with SLUICE_E2E_PERF */
} server_cfg;

/* Writes NAME.lua with the set and (unless c->rule is NULL) one rule whose
 * target is c->target, starts `bin/sluice serve` on a free port and waits for
 * its "listening on" line (polled every 2 ms, so s->listen_us is within ~2 ms
 * of it). */
static int server_start_cfg(server *s, const server_cfg *c)
{
    memset(s, 0, sizeof *s);
    snprintf(s->rule, sizeof s->rule, "%s", c->rule ? c->rule : "");
    snprintf(s->dir, sizeof s->dir, "%s/%s", tmpdir, c->data ? c->data : c->name);
    snprintf(s->log, sizeof s->log, "%s/%s.log", tmpdir, c->name);
    char cfg[PATH_MAX + 8];
    snprintf(cfg, sizeof cfg, "%s/%s.lua", tmpdir, c->name);
    FILE *f = fopen(cfg, "w");
    if (!f)
        return fail("cannot write %s: %s", cfg, strerror(errno)), -1;
    fprintf(f,
            "server { workers = %d }\n"
            "set \"in\" { partitions = %d, ack = \"%s\"%s%s }\n",
            workers, c->partitions, c->ack, set_extra ? ", " : "", set_extra ? set_extra : "");
    if (c->rule)
        fprintf(f,
                "rule \"%s\" { set = \"in\"%s%s, match = { type = { \"bench.t\" } }, "
                "target = %s }\n",
                c->rule, c->rule_extra ? ", " : "", c->rule_extra ? c->rule_extra : "", c->target);
    fclose(f);
    const char *argv[] = {"bin/sluice",  "serve", "--data", s->dir, "--listen",
                          "127.0.0.1:0", "-c",    cfg,      NULL};
    s->spawn_us = mono_us();
    s->pid = spawn(argv, s->log, NULL, NULL);
    if (s->pid < 0)
        return fail("cannot start bin/sluice"), -1;
    long pos = 0; /* of the log, read so far (whole lines only) */
    for (int64_t end = mono_us() + 10000000; !s->port && mono_us() < end;) {
        sleep_us(2000);
        FILE *l = fopen(s->log, "r");
        char line[1024];
        if (l && fseek(l, pos, SEEK_SET) == 0)
            while (fgets(line, sizeof line, l) && strchr(line, '\n')) {
                pos = ftell(l);
                const char *p = strstr(line, "listening on http://");
                if (p && (p = strchr(p + 20, ':')) != NULL) {
                    s->port = atoi(p + 1);
                    s->listen_us = mono_us();
                }
            }
        if (l)
            fclose(l);
        if (!s->port && !proc_alive(s->pid))
            break;
    }
    if (!s->port) {
        tail_log(s->log);
        return fail("sluice (%s) did not start", c->name), -1;
    }
    if (perf_dir && !c->no_perf) {
        char pid[16], out[PATH_MAX + 32];
        snprintf(pid, sizeof pid, "%d", (int)s->pid);
        snprintf(out, sizeof out, "%s/%s.data", perf_dir, c->name);
        const char *freq = getenv("SLUICE_E2E_PERF_FREQ");
        const char *pargv[] = {"perf", "record", "-q", "--call-graph", perf_graph, "-F",
                               freq && atoi(freq) > 0 ? freq : "499", "-p", pid, "-o", out, NULL};
        s->perf = spawn(pargv, NULL, NULL, NULL);
    }
    return 0;
}

/* server_start_cfg() with the set and one rule, data in tmpdir/NAME. */
static int server_start(server *s, const char *name, const char *ack, int partitions,
                        const char *rule, const char *target)
{
    server_cfg c = {
        .name = name, .ack = ack, .partitions = partitions, .rule = rule, .target = target};
    return server_start_cfg(s, &c);
}

static bool server_alive(server *s)
{
    if (proc_alive(s->pid))
        return true;
    tail_log(s->log);
    fail("the sluice server in %s died (log above)", s->dir);
    return false;
}

/* Stops the server (SIGTERM, SIGKILL after 10 s) and its perf. Returns false
 * when it did not exit with status 0 (or had died before). */
static bool server_stop(server *s)
{
    bool clean = true;
    if (s->perf > 0)
        proc_stop(s->perf, SIGINT, 10000);
    if (s->pid > 0) {
        clean = false; /* already dead: server_alive() has said so */
        if (proc_alive(s->pid)) {
            int st = proc_stop(s->pid, SIGTERM, 10000);
            clean = WIFEXITED(st) && WEXITSTATUS(st) == 0;
            if (!clean)
                fprintf(stderr, "e2e_bench: note: sluice in %s ended with status 0x%x\n", s->dir,
                        st);
        }
    }
    s->pid = s->perf = 0;
    return clean;
}

/* ---- GET /v1/rules ---------------------------------------------------------------- */

typedef struct {
    char *buf;
    size_t len, cap;
} membuf;

static size_t membuf_write(char *p, size_t size, size_t n, void *ud)
{
    membuf *m = ud;
    size_t add = size * n;
    if (m->len + add + 1 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 4096;
        while (cap < m->len + add + 1)
            cap *= 2;
        char *nb = realloc(m->buf, cap);
        if (!nb)
            return 0;
        m->buf = nb;
        m->cap = cap;
    }
    memcpy(m->buf + m->len, p, add);
    m->len += add;
    m->buf[m->len] = '\0';
    return add;
}

typedef struct {
    long long delivered, failed, retries, lag;
    char last_error[256];
} rule_stats;

/* Reads the server's rule; 0 or -1. */
static int rule_get(CURL *h, server *s, rule_stats *st)
{
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/rules", s->port);
    membuf m = {0};
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, membuf_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &m);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
    long code = 0;
    int rc = -1;
    if (curl_easy_perform(h) == CURLE_OK &&
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code) == CURLE_OK && code == 200 && m.buf) {
        char key[64];
        snprintf(key, sizeof key, "\"name\":\"%s\"", s->rule);
        const char *r = strstr(m.buf, key);
        const char *lag = r ? strstr(r, "],\"lag\":") : NULL;
        const char *del = lag ? strstr(lag, "\"delivered\":") : NULL;
        const char *fl = lag ? strstr(lag, "\"failed\":") : NULL;
        const char *rt = lag ? strstr(lag, "\"retries\":") : NULL;
        const char *le = lag ? strstr(lag, "\"last_error\":\"") : NULL;
        if (del && fl && rt) {
            st->lag = atoll(lag + 8);
            st->delivered = atoll(del + 12);
            st->failed = atoll(fl + 9);
            st->retries = atoll(rt + 10);
            st->last_error[0] = '\0';
            if (le)
                snprintf(st->last_error, sizeof st->last_error, "%.*s", (int)strcspn(le + 14, "\""),
                         le + 14);
            rc = 0;
        }
    }
    free(m.buf);
    return rc;
}

/* ---- the sender: one libcurl multi handle, paced or not -------------------------- */

typedef struct {
    const char *url;
    bool ingest;    /* batches of BATCH events as NDJSON to sluice; else one event per request */
    int run, n;     /* events */
    int conns;      /* requests in flight at most */
    double rate;    /* events/s, in bursts of BATCH; 0 = as fast as possible */
    int partitions; /* for the decoration of direct events */
    /* results */
    int64_t first_us, last_us; /* wall clock of the first send, of the last answer */
    long retries;              /* 503 answers (ingest back-pressure), sent again */
} send_job;

typedef struct {
    CURL *h;
    int item;
    char *body;
    membuf resp;
} slot;

static int send_run(send_job *j)
{
    int per = j->ingest ? BATCH : 1;
    int items = (j->n + per - 1) / per;
    CURLM *m = curl_multi_init();
    curl_multi_setopt(m, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)j->conns);
    struct curl_slist *hdr =
        curl_slist_append(NULL, j->ingest ? "Content-Type: application/x-ndjson"
                                          : "Content-Type: application/cloudevents+json");
    hdr = curl_slist_append(hdr, "Expect:");
    slot *sl = calloc((size_t)j->conns, sizeof *sl);
    int *retry = calloc((size_t)items, sizeof *retry);
    int64_t *retry_at = calloc((size_t)items, sizeof *retry_at);
    int rhead = 0, rtail = 0; /* a queue of items answered 503 */
    size_t body_cap = (size_t)per * (EVENT_BYTES + 100) + 16;
    for (int i = 0; i < j->conns; i++) {
        sl[i].h = curl_easy_init();
        sl[i].body = malloc(body_cap);
        sl[i].item = -1;
        curl_easy_setopt(sl[i].h, CURLOPT_URL, j->url);
        curl_easy_setopt(sl[i].h, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(sl[i].h, CURLOPT_WRITEFUNCTION, membuf_write);
        curl_easy_setopt(sl[i].h, CURLOPT_WRITEDATA, &sl[i].resp);
        curl_easy_setopt(sl[i].h, CURLOPT_PRIVATE, &sl[i]);
        curl_easy_setopt(sl[i].h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(sl[i].h, CURLOPT_TIMEOUT, 30L);
    }
    j->first_us = 0;
    j->retries = 0;
    int next = 0, done = 0, inflight = 0;
    int64_t t0 = mono_us() + 1000;
    double per_burst_us = j->rate > 0 ? BATCH * 1e6 / j->rate : 0;
    char stamp[32], ev[EVENT_BYTES + 128];
    while (done < items && ok()) {
        int64_t now = mono_us();
        int64_t next_due = INT64_MAX;
        for (int i = 0; i < j->conns; i++) {
            if (sl[i].item >= 0)
                continue;
            int item = -1;
            if (rhead < rtail && retry_at[rhead] <= now) {
                item = retry[rhead++];
            } else if (next < items) {
                int64_t due = t0 + (int64_t)((next * per / BATCH) * per_burst_us);
                if (due <= now)
                    item = next++;
                else
                    next_due = due;
            }
            if (item < 0)
                break;
            int64_t w = wall_us();
            if (!j->first_us)
                j->first_us = w;
            fmt_time(stamp, w);
            size_t len = 0;
            for (int e = item * per; e < (item + 1) * per && e < j->n; e++) {
                size_t n = make_event(ev, j->run, e, stamp, !j->ingest, j->partitions);
                memcpy(sl[i].body + len, ev, n);
                len += n;
                if (j->ingest)
                    sl[i].body[len++] = '\n';
            }
            sl[i].item = item;
            sl[i].resp.len = 0;
            if (sl[i].resp.buf)
                sl[i].resp.buf[0] = '\0';
            curl_easy_setopt(sl[i].h, CURLOPT_POSTFIELDS, sl[i].body);
            curl_easy_setopt(sl[i].h, CURLOPT_POSTFIELDSIZE, (long)len);
            curl_multi_add_handle(m, sl[i].h);
            inflight++;
        }
        int running = 0;
        curl_multi_perform(m, &running);
        CURLMsg *msg;
        int left;
        bool freed = false;
        while ((msg = curl_multi_info_read(m, &left)) != NULL) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            slot *s = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&s);
            long code = 0;
            curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &code);
            CURLcode res = msg->data.result;
            curl_multi_remove_handle(m, s->h);
            inflight--;
            freed = true;
            int want = (s->item + 1) * per <= j->n ? per : j->n - s->item * per;
            if (res == CURLE_OK && code == 503) {
                j->retries++;
                retry[rtail] = s->item;
                retry_at[rtail++] = mono_us() + 1000;
                if (rtail == items) { /* compact the queue */
                    memmove(retry, retry + rhead, (size_t)(rtail - rhead) * sizeof *retry);
                    memmove(retry_at, retry_at + rhead, (size_t)(rtail - rhead) * sizeof *retry_at);
                    rtail -= rhead;
                    rhead = 0;
                }
            } else if (res != CURLE_OK || code != 200) {
                fail("POST %s answered %ld (%s): %.200s", j->url, code, curl_easy_strerror(res),
                     s->resp.buf ? s->resp.buf : "");
            } else if (j->ingest) {
                const char *a = s->resp.buf ? strstr(s->resp.buf, "\"accepted\":") : NULL;
                if (!a || atoi(a + 11) != want)
                    fail("POST of %d events answered: %.200s", want,
                         s->resp.buf ? s->resp.buf : "");
                done++;
            } else {
                done++;
            }
            s->item = -1;
        }
        if (freed)
            continue;
        int64_t wait = next_due == INT64_MAX ? 10000 : next_due - mono_us();
        if (rhead < rtail)
            wait = wait < 1000 ? wait : 1000;
        if (wait > 0 || inflight == j->conns)
            curl_multi_poll(m, NULL, 0, wait > 0 ? (int)((wait + 999) / 1000) : 10, NULL);
    }
    j->last_us = wall_us();
    for (int i = 0; i < j->conns; i++) {
        if (sl[i].item >= 0)
            curl_multi_remove_handle(m, sl[i].h);
        curl_easy_cleanup(sl[i].h);
        free(sl[i].body);
        free(sl[i].resp.buf);
    }
    free(sl);
    free(retry);
    free(retry_at);
    curl_slist_free_all(hdr);
    curl_multi_cleanup(m);
    return ok() ? 0 : -1;
}

/* ---- results -------------------------------------------------------------------------- */

typedef struct {
    double eps;                      /* delivered events/s */
    double p50, p90, p99, p999, max; /* ms */
    long dups, retries;
    double cpu, cpu_mock;   /* cores used during the run: sluice (or kcat), the mock */
    double ingest_eps;      /* events/s of the POSTs alone */
    double startup_ms;      /* backlog: from the fork to the "listening on" line */
    double first_ms;        /* backlog: from the fork to the first poll showing a delivery */
    double after_first_eps; /* backlog: delivered events/s from that poll on */
} result;

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* After a send: waits until the receiver has every event of the run (or no
 * progress for STALL_S: lost), then computes rate and latency. */
static int rx_collect(send_job *j, server *s, result *r)
{
    int last = -1;
    int64_t since = mono_us();
    while (atomic_load(&rx.unique) < j->n && ok()) {
        int u = atomic_load(&rx.unique);
        if (u != last) {
            last = u;
            since = mono_us();
        } else if (mono_us() - since > STALL_S * 1000000LL) {
            if (s) {
                CURL *h = curl_easy_init();
                rule_stats st = {0};
                rule_get(h, s, &st);
                curl_easy_cleanup(h);
                fail("%d of %d events received, none for %d s: lost (rule delivered %lld, failed "
                     "%lld, lag %lld, last_error \"%s\")",
                     u, j->n, STALL_S, st.delivered, st.failed, st.lag, st.last_error);
            } else {
                fail("%d of %d events received, none for %d s: lost", u, j->n, STALL_S);
            }
            return -1;
        }
        if (s && !server_alive(s))
            return -1;
        sleep_us(1000);
    }
    if (!ok())
        return -1;
    int64_t span = atomic_load(&rx.last_us) - j->first_us;
    r->eps = span > 0 ? j->n / (span / 1e6) : 0;
    int32_t *lat = malloc((size_t)j->n * sizeof *lat);
    memcpy(lat, rx.lat_us, (size_t)j->n * sizeof *lat);
    qsort(lat, (size_t)j->n, sizeof *lat, cmp_i32);
    r->p50 = lat[j->n / 2] / 1000.0;
    r->p90 = lat[(size_t)((j->n - 1) * 0.90)] / 1000.0;
    r->p99 = lat[(size_t)((j->n - 1) * 0.99)] / 1000.0;
    r->p999 = lat[(size_t)((j->n - 1) * 0.999)] / 1000.0;
    r->max = lat[j->n - 1] / 1000.0;
    free(lat);
    r->dups = atomic_load(&rx.dups);
    r->retries = j->retries;
    return 0;
}

static int run_seq;    /* run numbers, unique within the process */
static pid_t mock_pid; /* the Kafka mock cluster, for its CPU time */

/* CPU seconds (user + system) of a live process; 0 if unknown. */
static double proc_cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = pid > 0 ? fopen(path, "r") : NULL;
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the name may hold spaces */
    unsigned long long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* One HTTP run against server s (or straight to the receiver when s is NULL). */
static int http_run(server *s, const char *rx_url, int n, double rate, int partitions, result *r,
                    const char *label)
{
    char url[128];
    send_job j = {.run = ++run_seq, .n = n, .rate = rate, .partitions = partitions};
    if (s) {
        snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/sets/in/events", s->port);
        j.url = url;
        j.ingest = true;
        j.conns = rate > 0 ? 1 : INGEST_CONNS;
    } else {
        j.url = rx_url;
        j.conns = HTTP_CONC;
    }
    rx_arm(j.run, n);
    double c0 = s ? proc_cpu_s(s->pid) : 0;
    int64_t t0 = mono_us();
    if (send_run(&j) || rx_collect(&j, s, r))
        return -1;
    r->cpu = s ? (proc_cpu_s(s->pid) - c0) / ((mono_us() - t0) / 1e6) : 0;
    fprintf(stderr,
            "  %-30s %8.0f ev/s  p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms  dups %ld  cpu %.2f\n",
            label, r->eps, r->p50, r->p99, r->max, r->dups, r->cpu);
    return 0;
}

/* ---- Kafka ------------------------------------------------------------------------------ */

typedef struct {
    pid_t pid;
    FILE *in, *out;
    char boot[512];
} kmock;

static int kmock_cmd(kmock *k, const char *cmd)
{
    char line[512];
    fprintf(k->in, "%s\n", cmd);
    fflush(k->in);
    if (!fgets(line, sizeof line, k->out) || strncmp(line, "ok", 2) != 0)
        return fail("kafka_mock: %s: %s", cmd, line), -1;
    return 0;
}

static int kmock_start(kmock *k)
{
    const char *bin = "build/rel/tools/kafka_mock";
    int in = -1, out = -1;
    char log[PATH_MAX + 16];
    snprintf(log, sizeof log, "%s/kafka_mock.log", tmpdir);
    const char *argv[] = {bin, "--commands", "--brokers", "3", NULL};
    if (access(bin, X_OK))
        return fail("%s is missing (make build/rel/tools/kafka_mock)", bin), -1;
    k->pid = mock_pid = spawn(argv, log, &in, &out);
    if (k->pid < 0)
        return fail("cannot start %s", bin), -1;
    k->in = fdopen(in, "w");
    k->out = fdopen(out, "r");
    char line[600];
    if (!fgets(line, sizeof line, k->out) || strncmp(line, "bootstrap ", 10) != 0)
        return fail("kafka_mock printed no bootstrap line"), -1;
    snprintf(k->boot, sizeof k->boot, "%.*s", (int)strcspn(line + 10, "\r\n"), line + 10);
    return 0;
}

static void kmock_stop(kmock *k)
{
    if (k->in) {
        fprintf(k->in, "quit\n");
        fclose(k->in);
    }
    if (k->out)
        fclose(k->out);
    if (k->pid > 0)
        proc_stop(k->pid, SIGTERM, 5000);
    memset(k, 0, sizeof *k);
}

/* Sum of the high watermarks of topic's partitions: messages in the topic. */
static long long topic_count(const char *boot, const char *topic)
{
    char err[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", boot, err, sizeof err);
    rd_kafka_conf_set(conf, "log_level", "3", err, sizeof err);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk)
        return -1;
    long long sum = 0;
    for (int p = 0; p < KAFKA_PARTS; p++) {
        int64_t lo, hi;
        if (rd_kafka_query_watermark_offsets(rk, topic, p, &lo, &hi, 5000)) {
            sum = -1;
            break;
        }
        sum += hi;
    }
    rd_kafka_destroy(rk);
    return sum;
}

/* One target.kafka run: n events POSTed unpaced, timed from the first POST to
 * the GET /v1/rules that shows all of them delivered with lag 0. */
static int kafka_run(server *s, int n, int partitions, long long *base, result *r)
{
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/sets/in/events", s->port);
    send_job j = {.url = url,
                  .ingest = true,
                  .run = ++run_seq,
                  .n = n,
                  .conns = INGEST_CONNS,
                  .partitions = partitions};
    double c0 = proc_cpu_s(s->pid), m0 = proc_cpu_s(mock_pid);
    int64_t t0 = mono_us();
    if (send_run(&j))
        return -1;
    CURL *h = curl_easy_init();
    rule_stats st = {0};
    long long last = -1;
    int64_t since = mono_us(), done_us = 0;
    while (ok()) {
        if (rule_get(h, s, &st)) {
            fail("GET /v1/rules failed");
            break;
        }
        int64_t now = wall_us();
        if (st.delivered - *base >= n && st.lag == 0) {
            done_us = now;
            break;
        }
        if (st.delivered != last) {
            last = st.delivered;
            since = mono_us();
        } else if (mono_us() - since > STALL_S * 1000000LL) {
            fail("target.kafka delivered %lld of %d events, none for %d s (failed %lld, lag %lld, "
                 "last_error \"%s\")",
                 st.delivered - *base, n, STALL_S, st.failed, st.lag, st.last_error);
            break;
        }
        if (!server_alive(s))
            break;
        sleep_us(2000);
    }
    curl_easy_cleanup(h);
    if (!done_us)
        return -1;
    *base = st.delivered;
    r->eps = n / ((done_us - j.first_us) / 1e6);
    double wall = (mono_us() - t0) / 1e6;
    r->cpu = (proc_cpu_s(s->pid) - c0) / wall;
    r->cpu_mock = (proc_cpu_s(mock_pid) - m0) / wall;
    r->retries = st.retries;
    r->p50 = r->p99 = r->max = 0;
    r->ingest_eps = n / ((j.last_us - j.first_us) / 1e6);
    fprintf(stderr,
            "  %-30s %8.0f ev/s  cpu %.2f, mock %.2f  (ingest %.0f ev/s; %lld delivered in all, "
            "retries %lld)\n",
            "target.kafka, unpaced", r->eps, r->cpu, r->cpu_mock, r->ingest_eps, st.delivered,
            st.retries);
    return 0;
}

/* One target.kafka backlog run (number rep): a server whose config has the
 * set but no rule takes n events (the same bodies as kafka_run's, POSTed the
 * same way) and is stopped with SIGTERM; then a server on the same data
 * directory with the rule (start = "beginning", target `target`) delivers
 * them, timed from its fork to the GET /v1/rules that shows all n delivered
 * with lag 0. Returns 0, -1 when broken, 1 when target.kafka is not built
 * (*missing says so). *delivered gets the rule's delivered count. */
static int backlog_run(int rep, int n, int partitions, const char *target, long long *delivered,
                       result *r, const char **missing)
{
    char fill_name[32], name[32], data[32];
    snprintf(fill_name, sizeof fill_name, "backlog_fill_%d", rep);
    snprintf(name, sizeof name, "backlog_%d", rep);
    snprintf(data, sizeof data, "backlog_data_%d", rep);
    server s = {0};
    server_cfg fill = {.name = fill_name,
                       .data = data,
                       .ack = "buffer",
                       .partitions = partitions,
                       .no_perf = true};
    if (server_start_cfg(&s, &fill))
        return -1;
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/sets/in/events", s.port);
    send_job j = {.url = url,
                  .ingest = true,
                  .run = ++run_seq,
                  .n = n,
                  .conns = INGEST_CONNS,
                  .partitions = partitions};
    if (send_run(&j)) {
        server_stop(&s);
        return -1;
    }
    r->ingest_eps = n / ((j.last_us - j.first_us) / 1e6);
    if (!server_stop(&s))
        return fail("the rule-less sluice (%s) did not stop cleanly", fill_name), -1;

    server_cfg cfg = {.name = name,
                      .data = data,
                      .ack = "buffer",
                      .partitions = partitions,
                      .rule = "to-kafka",
                      .rule_extra = "start = \"beginning\"",
                      .target = target};
    double m0 = proc_cpu_s(mock_pid);
    if (server_start_cfg(&s, &cfg))
        return -1;
    CURL *h = curl_easy_init();
    rule_stats st = {0};
    long long last = -1;
    int64_t since = mono_us(), done_us = 0, first_us = 0;
    long long first_n = 0; /* delivered at the first poll that showed any */
    int rc = -1;
    while (ok()) {
        if (rule_get(h, &s, &st)) {
            fail("GET /v1/rules failed");
            break;
        }
        int64_t now = mono_us();
        if (st.delivered > 0 && !first_us) {
            first_us = now;
            first_n = st.delivered;
        }
        if (st.delivered >= n && st.lag == 0) {
            done_us = now;
            rc = 0;
            break;
        }
        if (st.delivered == 0 && strstr(st.last_error, "not built")) {
            *missing = "target.kafka missing";
            rc = 1;
            break;
        }
        if (st.delivered != last) {
            last = st.delivered;
            since = now;
        } else if (now - since > STALL_S * 1000000LL) {
            fail("target.kafka (backlog) delivered %lld of %d stored events, none for %d s "
                 "(failed %lld, lag %lld, last_error \"%s\")",
                 st.delivered, n, STALL_S, st.failed, st.lag, st.last_error);
            break;
        }
        if (!server_alive(&s))
            break;
        sleep_us(2000);
    }
    curl_easy_cleanup(h);
    if (rc == 0) {
        double wall = (done_us - s.spawn_us) / 1e6;
        r->eps = n / wall;
        r->cpu = proc_cpu_s(s.pid) / wall; /* the process started with the timing */
        r->cpu_mock = (proc_cpu_s(mock_pid) - m0) / wall;
        r->retries = st.retries;
        r->p50 = r->p99 = r->max = 0;
        r->startup_ms = (s.listen_us - s.spawn_us) / 1e3;
        r->first_ms = (first_us - s.spawn_us) / 1e3;
        r->after_first_eps =
            done_us > first_us ? (st.delivered - first_n) / ((done_us - first_us) / 1e6) : 0;
        *delivered = st.delivered;
        fprintf(stderr,
                "  %-30s %8.0f ev/s  cpu %.2f, mock %.2f  (listening after %.0f ms, first "
                "delivery seen after %.0f ms, %.0f ev/s from then on; stored at %.0f ev/s; "
                "delivered %lld, retries %lld)\n",
                "target.kafka, backlog", r->eps, r->cpu, r->cpu_mock, r->startup_ms, r->first_ms,
                r->after_first_eps, r->ingest_eps, st.delivered, st.retries);
    }
    server_stop(&s);
    char dir[PATH_MAX + 40];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, data);
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS); /* 60+ MB per run */
    return rc;
}

/* kcat -P of the file of n messages: wall time of the whole process. The
 * records are shaped as target.kafka's default binary mode makes them: key
 * partitionkey, value the event's data, the attributes as ce_* headers, the
 * read-back members as ce_sluice* headers (kcat sends the same headers with
 * every record: values of the same sizes). */
static int kcat_run(const char *boot, const char *topic, const char *file, int n, const char *stamp,
                    result *r)
{
    char h_time[64];
    snprintf(h_time, sizeof h_time, "ce_time=%s", stamp);
    const char *argv[] = {"kcat", "-P",
                          "-b",   boot,
                          "-t",   topic,
                          "-K",   "\t",
                          "-X",   "linger.ms=5",
                          "-X",   "compression.codec=zstd",
                          "-X",   "enable.idempotence=true",
                          "-X",   "acks=all",
                          "-X",   "partitioner=murmur2_random",
                          "-H",   "content-type=application/json",
                          "-H",   "ce_specversion=1.0",
                          "-H",   "ce_id=e2e-1-0000000",
                          "-H",   "ce_source=/bench/e2e",
                          "-H",   "ce_type=bench.t",
                          "-H",   h_time,
                          "-H",   "ce_partitionkey=k000",
                          "-H",   "ce_sluiceset=in",
                          "-H",   "ce_sluicepartition=0",
                          "-H",   "ce_sluiceoffset=100000",
                          "-l",   file,
                          NULL};
    char log[PATH_MAX + 16];
    snprintf(log, sizeof log, "%s/kcat.log", tmpdir);
    double m0 = proc_cpu_s(mock_pid);
    int64_t t0 = wall_us();
    pid_t pid = spawn(argv, log, NULL, NULL);
    if (pid < 0)
        return fail("cannot start kcat"), -1;
    int st = 0;
    struct rusage ru = {0};
    while (wait4(pid, &st, 0, &ru) < 0 && errno == EINTR)
        ;
    for (int i = 0; i < MAX_PROCS; i++)
        if (procs[i] == pid)
            procs[i] = 0;
    int64_t t1 = wall_us();
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        tail_log(log);
        return fail("kcat -P exited with status 0x%x", st), -1;
    }
    r->eps = n / ((t1 - t0) / 1e6);
    r->cpu = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
              (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6) /
             ((t1 - t0) / 1e6);
    r->cpu_mock = (proc_cpu_s(mock_pid) - m0) / ((t1 - t0) / 1e6);
    r->p50 = r->p99 = r->max = 0;
    fprintf(stderr, "  %-30s %8.0f ev/s  cpu %.2f, mock %.2f\n", "kcat -P, same messages", r->eps,
            r->cpu, r->cpu_mock);
    return 0;
}

/* ---- the table --------------------------------------------------------------------------- */

typedef struct {
    double v[MAX_REPS];
    int n;
} sample;

static void sample_add(sample *s, double v)
{
    if (s->n < MAX_REPS)
        s->v[s->n++] = v;
}
static double sample_best(const sample *s)
{
    double b = 0;
    for (int i = 0; i < s->n; i++)
        b = s->v[i] > b ? s->v[i] : b;
    return b;
}
static double sample_min(const sample *s)
{
    double b = s->n ? s->v[0] : 0;
    for (int i = 1; i < s->n; i++)
        b = s->v[i] < b ? s->v[i] : b;
    return b;
}

static void fmt_rate(char *out, size_t size, double v)
{
    if (v >= 1e6)
        snprintf(out, size, "%.2fM", v / 1e6);
    else if (v >= 1e3)
        snprintf(out, size, "%.1fk", v / 1e3);
    else
        snprintf(out, size, "%.0f", v);
}

static void fmt_noise(char *out, size_t size, const sample *s)
{
    char a[32], b[32];
    if (s->n < 2) {
        snprintf(out, size, "-");
        return;
    }
    fmt_rate(a, sizeof a, sample_min(s));
    fmt_rate(b, sizeof b, sample_best(s));
    snprintf(out, size, "%s..%s", a, b);
}

static void fmt_ms_noise(char *out, size_t size, const sample *s)
{
    if (s->n < 2)
        snprintf(out, size, "-");
    else
        snprintf(out, size, "%.2f..%.2f ms", sample_min(s), sample_best(s));
}

static void header(const char *kcat_version, int partitions, double rate, int secs, int http_n,
                   int kafka_n, int reps, bool is_tmpfs)
{
    char model[256] = "unknown";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "model name", 10) == 0) {
                const char *v = strchr(line, ':');
                if (v) {
                    v += 1 + (v[1] == ' ');
                    snprintf(model, sizeof model, "%.*s", (int)strcspn(v, "\n"), v);
                }
                break;
            }
        fclose(f);
    }
    double load[3] = {0, 0, 0};
    if (getloadavg(load, 3) < 0)
        load[0] = load[1] = load[2] = 0;
    printf("e2e_bench: HTTP ingest -> pattern rule -> target.http / target.kafka, against a direct "
           "HTTP client and kcat -P, measured in the same run\n\n");
    printf("- machine: %s, nproc %ld, load average %.2f %.2f %.2f at the start; the sender, the "
           "receiver, the mock cluster and kcat share the cores with sluice\n",
           model, sysconf(_SC_NPROCESSORS_ONLN), load[0], load[1], load[2]);
    printf("- libraries: libcurl %s, libmicrohttpd %s, librdkafka %s; %s\n",
           curl_version_info(CURLVERSION_NOW)->version, MHD_get_version(), rd_kafka_version_str(),
           kcat_version);
    printf("- sluice: set \"in\" with %d partitions, one rule (match type bench.t) per server, "
           "workers = %d; events of %d B, POSTed as NDJSON batches of %d\n",
           partitions, workers, EVENT_BYTES, BATCH);
    printf("- paced runs: %.0f events/s for %d s (a batch of %d every %.0f ms, one keep-alive "
           "connection), the run with the lowest p99 of %d per side; peak runs: %d events (http) "
           "/ %d (kafka) as fast as possible (%d connections), the fastest of %d per side; sides "
           "take turns, the order alternating; noise = min..max of the runs\n",
           rate, secs, BATCH, BATCH * 1000.0 / rate, reps, http_n, kafka_n, INGEST_CONNS, reps);
    printf("- data: %s%s\n\n", tmpdir, is_tmpfs ? " (tmpfs: ack=durable measures memory)" : "");
}

/* ---- main ------------------------------------------------------------------------------- */

static int repo_root(void)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return 0;
    exe[n] = '\0';
    char *p = strstr(exe, "/build/rel/bench/");
    if (!p)
        return 0; /* run from somewhere else: stay in the current directory */
    *p = '\0';
    return chdir(exe);
}

/* The report rows (bench/tsv.h) of one paced target.http run: p50, p90,
 * p99 and p99.9 of the end-to-end latency, against the direct run's. The
 * p99 of ack=buffer carries the goal (< 10 ms). */
#define REF_DIRECT "direct libcurl POSTs"
static void tsv_latency(const char *key, const char *ack, double rate, const result *s,
                        const result *ref, bool goal)
{
    static const char *name[] = {"p50", "p90", "p99", "p99.9"};
    static const char *id[] = {"p50", "p90", "p99", "p999"};
    double v[] = {s->p50, s->p90, s->p99, s->p999};
    double rv[] = {ref->p50, ref->p90, ref->p99, ref->p999};
    for (int i = 0; i < 4; i++) {
        char k[64], fig[160];
        snprintf(k, sizeof k, "e2e.lat_%s_%s", key, id[i]);
        snprintf(fig, sizeof fig, "1 target.http, paced %.0fk ev/s, %s: publish→delivery %s",
                 rate / 1000, ack, name[i]);
        bool g = goal && i == 2;
        sl_bench_tsv_row(k, fig, "ms", v[i], REF_DIRECT, rv[i], rv[i] > 0 ? v[i] / rv[i] : NAN,
                         g ? "< 10 ms" : NULL, g ? v[i] < 10 : SL_BENCH_NO_GOAL);
    }
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (repo_root())
        return fprintf(stderr, "e2e_bench: cannot enter the repository\n"), 1;
    double rate = (double)env_long("SLUICE_E2E_RATE", 10000, 100, 1000000);
    int secs = (int)env_long("SLUICE_E2E_SECS", 5, 1, 60);
    int http_n = (int)env_long("SLUICE_E2E_HTTP_N", 60000, 1000, 10000000);
    int kafka_n = (int)env_long("SLUICE_E2E_KAFKA_N", 200000, 1000, 10000000);
    int reps = (int)env_long("SLUICE_E2E_REPS", 3, 1, MAX_REPS);
    int partitions = (int)env_long("SLUICE_E2E_PARTITIONS", 2, 1, 64);
    workers = (int)env_long("SLUICE_E2E_WORKERS", 2, 1, 64);
    set_extra = getenv("SLUICE_E2E_SET_EXTRA");
    if (set_extra && !*set_extra)
        set_extra = NULL;
    const char *rows = getenv("SLUICE_E2E_ROWS");
    if (!rows || !*rows)
        rows = "paced,durable,peak,kafka,backlog";
    const char *root = getenv("SLUICE_BENCH_DIR");
    if (!root || !*root)
        root = "./build/bench-tmp";
    int paced_n = (int)(rate * secs);

    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);

    if (access("bin/sluice", X_OK))
        return fprintf(stderr, "e2e_bench: bin/sluice is missing (make)\n"), 1;
    char kcat_version[128] = "kcat missing";
    bool want_kafka = has_row(rows, "kafka"), want_backlog = has_row(rows, "backlog");
    bool kafka = want_kafka || want_backlog;
    if (kafka) {
        FILE *p =
            popen("kcat -V 2>&1 | sed -n 's/^kcat - .*//; s/^Version \\([^ ]*\\).*/\\1/p'", "r");
        char v[64] = "";
        if (p && fgets(v, sizeof v, p))
            snprintf(kcat_version, sizeof kcat_version, "kcat %.*s", (int)strcspn(v, "\n"), v);
        if (p && pclose(p) != 0 && !v[0])
            return fprintf(stderr, "e2e_bench: kcat is missing (apt-get install kcat)\n"), 1;
    }

    char tmpl[PATH_MAX];
    snprintf(tmpl, sizeof tmpl, "%s", root);
    mkdir(tmpl, 0755);
    snprintf(tmpl, sizeof tmpl, "%s/e2e_bench.XXXXXX", root);
    if (!mkdtemp(tmpl))
        return fprintf(stderr, "e2e_bench: cannot create a directory in %s\n", root), 1;
    snprintf(tmpdir, sizeof tmpdir, "%s", tmpl);
    atexit(cleanup);
    struct statfs sfs;
    bool is_tmpfs = statfs(tmpdir, &sfs) == 0 && sfs.f_type == TMPFS_MAGIC_;
    static char perf_path[PATH_MAX];
    const char *perf_env = getenv("SLUICE_E2E_PERF");
    if (perf_env && (strcmp(perf_env, "1") == 0 || strcmp(perf_env, "dwarf") == 0)) {
        if (strcmp(perf_env, "dwarf") == 0)
            perf_graph = "dwarf,8192";
        snprintf(perf_path, sizeof perf_path, "%s/e2e_perf", root);
        mkdir(perf_path, 0755);
        perf_dir = perf_path;
    }

    int rx_port = 0;
    struct MHD_Daemon *rxd = rx_start(&rx_port);
    if (!rxd || !rx_port)
        return fprintf(stderr, "e2e_bench: cannot start the receiver\n"), 1;
    char rx_url[64], http_target[256];
    snprintf(rx_url, sizeof rx_url, "http://127.0.0.1:%d/hook", rx_port);
    const char *http_extra = getenv("SLUICE_E2E_HTTP_EXTRA"); /* diagnostics only */
    snprintf(http_target, sizeof http_target, "target.http { url = \"%s\", concurrency = %d%s%s }",
             rx_url, HTTP_CONC, http_extra && *http_extra ? ", " : "",
             http_extra && *http_extra ? http_extra : "");

    header(kcat_version, partitions, rate, secs, http_n, kafka_n, reps, is_tmpfs);

    result paced = {0}, paced_ref = {0}, durable = {0}, warm = {0};
    sample paced_s = {0}, paced_ref_s = {0}, durable_s = {0};
    sample peak = {0}, peak_ref = {0}, kafka_s = {0}, kcat_s = {0}, backlog_s = {0};
    result peak_best = {0}, peak_ref_best = {0}, kafka_best = {0}, kcat_best = {0},
           backlog_best = {0};
    bool have_paced = false, have_durable = false, have_peak = false, have_kafka = false,
         have_backlog = false;
    const char *kafka_missing = NULL;
    server s = {0}, sd = {0};
    bool want_paced = has_row(rows, "paced"), want_durable = has_row(rows, "durable");

    /* 1. target.http: paced latency (ack=buffer, ack=durable, direct, taking
     * turns), then the peak rate (ack=buffer, direct). */
    if (want_paced || want_durable || has_row(rows, "peak")) {
        fprintf(stderr, "target.http\n");
        if (server_start(&s, "http_buffer", "buffer", partitions, "to-http", http_target) ||
            (want_durable &&
             server_start(&sd, "http_durable", "durable", partitions, "to-http", http_target)) ||
            http_run(&s, NULL, 2000, 0, partitions, &warm, "warm-up buffer (untimed)") ||
            (want_durable &&
             http_run(&sd, NULL, 2000, 0, partitions, &warm, "warm-up durable (untimed)")) ||
            http_run(NULL, rx_url, 2000, 0, partitions, &warm, "warm-up direct (untimed)"))
            goto out;
        want_paced = want_paced || want_durable; /* durable is compared with direct */
        for (int rep = 0; want_paced && rep < reps && ok(); rep++) {
            for (int k = 0; k < 3; k++) {
                int side = rep % 2 == 0 ? k : 2 - k; /* 0 buffer, 1 durable, 2 direct */
                result a = {0};
                if (side == 0 && has_row(rows, "paced")) {
                    if (http_run(&s, NULL, paced_n, rate, partitions, &a, "sluice buffer, paced"))
                        goto out;
                    sample_add(&paced_s, a.p99);
                    if (!paced.p99 || a.p99 < paced.p99)
                        paced = a;
                } else if (side == 1 && want_durable) {
                    if (http_run(&sd, NULL, paced_n, rate, partitions, &a, "sluice durable, paced"))
                        goto out;
                    sample_add(&durable_s, a.p99);
                    if (!durable.p99 || a.p99 < durable.p99)
                        durable = a;
                } else if (side == 2) {
                    if (http_run(NULL, rx_url, paced_n, rate, partitions, &a, "direct, paced"))
                        goto out;
                    sample_add(&paced_ref_s, a.p99);
                    if (!paced_ref.p99 || a.p99 < paced_ref.p99)
                        paced_ref = a;
                }
            }
        }
        have_paced = paced_s.n > 0;
        have_durable = durable_s.n > 0;
        server_stop(&sd);
        if (has_row(rows, "peak")) {
            for (int rep = 0; rep < reps && ok(); rep++) {
                result a = {0}, b = {0};
                bool sluice_first = rep % 2 == 0;
                for (int k = 0; k < 2; k++) {
                    if (sluice_first == (k == 0)) {
                        if (http_run(&s, NULL, http_n, 0, partitions, &a, "sluice buffer, unpaced"))
                            goto out;
                        sample_add(&peak, a.eps);
                        if (a.eps > peak_best.eps)
                            peak_best = a;
                    } else {
                        if (http_run(NULL, rx_url, http_n, 0, partitions, &b, "direct, unpaced"))
                            goto out;
                        sample_add(&peak_ref, b.eps);
                        if (b.eps > peak_ref_best.eps)
                            peak_ref_best = b;
                    }
                }
            }
            have_peak = true;
        }
        server_stop(&s);
    }

    /* 3. target.kafka against kcat -P, same mock cluster: end to end (the
     * kafka row) and catching up on stored events (the backlog row), both
     * against the same kcat runs. */
    if (kafka) {
        fprintf(stderr, "target.kafka and kcat -P\n");
        kmock km = {0};
        char target[700], backlog_target[700], file[PATH_MAX + 16], topic_cmd[64];
        long long backlog_delivered = 0; /* by the backlog runs, for the watermark check */
        if (kmock_start(&km))
            goto out;
        const char *topics[] = {"e2e", "ref", "backlog"};
        for (int t = 0; t < 3; t++) {
            snprintf(topic_cmd, sizeof topic_cmd, "topic %s %d", topics[t], KAFKA_PARTS);
            if (kmock_cmd(&km, topic_cmd))
                goto kafka_out;
        }
        /* kcat's input: KEY<TAB>VALUE lines, the key and value target.kafka
         * makes of the same events (binary mode: the value is the data). */
        snprintf(file, sizeof file, "%s/kcat_input.txt", tmpdir);
        FILE *f = fopen(file, "w");
        if (!f) {
            fail("cannot write %s", file);
            goto kafka_out;
        }
        char stamp[32], ev[EVENT_BYTES + 128];
        fmt_time(stamp, wall_us());
        for (int i = 0; i < kafka_n; i++) {
            size_t len = make_event(ev, 1, i, stamp, false, partitions);
            const char *data = strstr(ev, "\"data\":") + 7;
            const char *key = strstr(ev, "\"partitionkey\":\"") + 16;
            fprintf(f, "%.*s\t%.*s\n", (int)strcspn(key, "\""), key, (int)(ev + len - 1 - data),
                    data);
        }
        fclose(f);
        const char *extra = getenv("SLUICE_E2E_KAFKA_EXTRA"); /* diagnostics only */
        snprintf(target, sizeof target, "target.kafka { brokers = \"%s\", topic = \"e2e\"%s%s }",
                 km.boot, extra && *extra ? ", " : "", extra && *extra ? extra : "");
        snprintf(backlog_target, sizeof backlog_target,
                 "target.kafka { brokers = \"%s\", topic = \"backlog\"%s%s }", km.boot,
                 extra && *extra ? ", " : "", extra && *extra ? extra : "");
        if (want_kafka && server_start(&s, "kafka", "buffer", partitions, "to-kafka", target))
            goto kafka_out;
        /* warm-up: also tells whether target.kafka works at all */
        long long base = 0;
        if (want_kafka) {
            CURL *h = curl_easy_init();
            char url[128];
            snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/sets/in/events", s.port);
            send_job j = {.url = url,
                          .ingest = true,
                          .run = ++run_seq,
                          .n = 1000,
                          .conns = 1,
                          .partitions = partitions};
            rule_stats st = {0};
            int64_t t0 = mono_us();
            if (send_run(&j)) {
                curl_easy_cleanup(h);
                goto kafka_out;
            }
            while (ok() && mono_us() - t0 < 10000000) {
                if (rule_get(h, &s, &st) == 0 && st.delivered >= 1000 && st.lag == 0)
                    break;
                if (!server_alive(&s))
                    break;
                sleep_us(20000);
            }
            curl_easy_cleanup(h);
            if (!ok())
                goto kafka_out;
            if (st.delivered < 1000) {
                kafka_missing = strstr(st.last_error, "not built")
                                    ? "target.kafka missing"
                                    : "target.kafka delivers nothing";
                fprintf(stderr, "  %s: delivered %lld of 1000 in 10 s, last_error \"%s\"\n",
                        kafka_missing, st.delivered, st.last_error);
                goto kafka_out;
            }
            base = st.delivered;
        }
        /* Sides take turns: 0 the kafka row, 1 kcat (one run serves both rows),
         * 2 the backlog row; the order reverses every other repetition. */
        for (int rep = 0; rep < reps && ok(); rep++) {
            for (int k = 0; k < 3; k++) {
                int side = rep % 2 == 0 ? k : 2 - k;
                result a = {0};
                if (side == 0 && want_kafka) {
                    if (kafka_run(&s, kafka_n, partitions, &base, &a))
                        goto kafka_out;
                    sample_add(&kafka_s, a.eps);
                    if (a.eps > kafka_best.eps)
                        kafka_best = a;
                } else if (side == 1) {
                    if (kcat_run(km.boot, "ref", file, kafka_n, stamp, &a))
                        goto kafka_out;
                    sample_add(&kcat_s, a.eps);
                    if (a.eps > kcat_best.eps)
                        kcat_best = a;
                } else if (side == 2 && want_backlog) {
                    long long d = 0;
                    int rc = backlog_run(rep + 1, kafka_n, partitions, backlog_target, &d, &a,
                                         &kafka_missing);
                    if (rc)
                        goto kafka_out;
                    backlog_delivered += d;
                    sample_add(&backlog_s, a.eps);
                    if (a.eps > backlog_best.eps)
                        backlog_best = a;
                }
            }
        }
        {
            long long in_topic = want_kafka ? topic_count(km.boot, "e2e") : 0;
            long long in_ref = topic_count(km.boot, "ref");
            long long in_backlog = want_backlog ? topic_count(km.boot, "backlog") : 0;
            long long want = (long long)kafka_n * reps;
            if (in_topic < base)
                fail("topic e2e holds %lld messages, sluice delivered %lld", in_topic, base);
            else if (in_ref != want)
                fail("topic ref holds %lld messages, kcat produced %lld", in_ref, want);
            else if (in_backlog < backlog_delivered)
                fail("topic backlog holds %lld messages, sluice delivered %lld", in_backlog,
                     backlog_delivered);
            else
                fprintf(stderr,
                        "  topics: e2e %lld messages (sluice delivered %lld), ref %lld, backlog "
                        "%lld (sluice delivered %lld)\n",
                        in_topic, base, in_ref, in_backlog, backlog_delivered);
        }
        have_kafka = ok() && want_kafka;
        have_backlog = ok() && want_backlog;
    kafka_out:
        server_stop(&s);
        kmock_stop(&km);
    }

out:
    server_stop(&s);
    server_stop(&sd);
    MHD_stop_daemon(rxd);
    if (!ok()) {
        if (stop_flag && !broken[0])
            fprintf(stderr, "e2e_bench: interrupted\n");
        return 1;
    }

    /* The table. */
    int missed = 0;
    char a[32], b[32], na[48], nb[48], fig[160];
    printf(
        "| figure | sluice | same-run reference | ratio | goal | met? | noise sluice | noise ref "
        "|\n");
    printf("|---|---:|---:|---:|---:|---|---|---|\n");
    if (have_paced) {
        bool met = paced.p99 < 10;
        missed += !met;
        fmt_ms_noise(na, sizeof na, &paced_s);
        fmt_ms_noise(nb, sizeof nb, &paced_ref_s);
        printf("| 1a target.http, paced %.0fk ev/s, ack=buffer: end-to-end p99 | %.2f ms | %.2f ms "
               "| %.2f | < 10 ms | %s | %s | %s |\n",
               rate / 1000, paced.p99, paced_ref.p99,
               paced_ref.p99 > 0 ? paced.p99 / paced_ref.p99 : 0, met ? "yes" : "MISS", na, nb);
        printf("| 1b … p50 (max) | %.2f (%.1f) ms | %.2f (%.1f) ms | %.2f | - | - | | |\n",
               paced.p50, paced.max, paced_ref.p50, paced_ref.max,
               paced_ref.p50 > 0 ? paced.p50 / paced_ref.p50 : 0);
        printf("| 1b … p90 / p99.9 | %.2f / %.2f ms | %.2f / %.2f ms | | - | - | | |\n", paced.p90,
               paced.p999, paced_ref.p90, paced_ref.p999);
        tsv_latency("buffer", "ack=buffer", rate, &paced, &paced_ref, true);
        fmt_rate(a, sizeof a, paced.eps);
        fmt_rate(b, sizeof b, paced_ref.eps);
        printf("| 1c … delivered (achieved rate) | %s ev/s | %s ev/s | %.2f | - | - | | |\n", a, b,
               paced_ref.eps > 0 ? paced.eps / paced_ref.eps : 0);
        snprintf(fig, sizeof fig,
                 "1c target.http, paced %.0fk ev/s, ack=buffer: achieved delivery rate",
                 rate / 1000);
        sl_bench_tsv_row("e2e.http_paced_eps", fig, "ev/s", paced.eps, REF_DIRECT, paced_ref.eps,
                         paced_ref.eps > 0 ? paced.eps / paced_ref.eps : NAN, NULL,
                         SL_BENCH_NO_GOAL);
    }
    if (have_durable) {
        fmt_ms_noise(na, sizeof na, &durable_s);
        fmt_ms_noise(nb, sizeof nb, &paced_ref_s);
        printf(
            "| 1d target.http, paced %.0fk ev/s, ack=durable: end-to-end p99 | %.2f ms | %.2f ms "
            "| %.2f | - | - | %s | %s |\n",
            rate / 1000, durable.p99, paced_ref.p99,
            paced_ref.p99 > 0 ? durable.p99 / paced_ref.p99 : 0, na, nb);
        printf("| 1e … p50 (max) | %.2f (%.1f) ms | %.2f (%.1f) ms | %.2f | - | - | | |\n",
               durable.p50, durable.max, paced_ref.p50, paced_ref.max,
               paced_ref.p50 > 0 ? durable.p50 / paced_ref.p50 : 0);
        printf("| 1e … p90 / p99.9 | %.2f / %.2f ms | %.2f / %.2f ms | | - | - | | |\n",
               durable.p90, durable.p999, paced_ref.p90, paced_ref.p999);
        tsv_latency("durable", "ack=durable", rate, &durable, &paced_ref, false);
    }
    if (have_peak) {
        double sl = sample_best(&peak), rf = sample_best(&peak_ref);
        fmt_rate(a, sizeof a, sl);
        fmt_rate(b, sizeof b, rf);
        fmt_noise(na, sizeof na, &peak);
        fmt_noise(nb, sizeof nb, &peak_ref);
        printf(
            "| 2a target.http, unpaced: delivered | %s ev/s | %s ev/s | %.2f | - | - | %s | %s |\n",
            a, b, rf > 0 ? sl / rf : 0, na, nb);
        sl_bench_tsv_row("e2e.http_peak_eps", "2a target.http (batch = 1), unpaced: delivered",
                         "ev/s", sl, "direct libcurl POSTs", rf, rf > 0 ? sl / rf : NAN, NULL,
                         SL_BENCH_NO_GOAL);
        printf(
            "| 2b … end-to-end p50 / p99 (saturated) | %.1f / %.1f ms | %.1f / %.1f ms | | - | - "
            "| | |\n",
            peak_best.p50, peak_best.p99, peak_ref_best.p50, peak_ref_best.p99);
    }
    double kafka_ratio = 0;
    if (have_kafka) {
        double sl = sample_best(&kafka_s), rf = sample_best(&kcat_s);
        kafka_ratio = rf > 0 ? sl / rf : 0;
        bool met = kafka_ratio >= 0.8;
        missed += !met;
        fmt_rate(a, sizeof a, sl);
        fmt_rate(b, sizeof b, rf);
        fmt_noise(na, sizeof na, &kafka_s);
        fmt_noise(nb, sizeof nb, &kcat_s);
        printf("| 3 target.kafka, unpaced: delivered (ref: kcat -P) | %s ev/s | %s ev/s | %.2f | "
               ">= 0.80 | %s | %s | %s |\n",
               a, b, kafka_ratio, met ? "yes" : "MISS", na, nb);
        sl_bench_tsv_row("e2e.kafka_eps",
                         "3 target.kafka, unpaced, HTTP ingest included: delivered", "ev/s", sl,
                         "kcat -P", rf, kafka_ratio, ">= 0.80", met);
    } else if (want_kafka) {
        printf("| 3 target.kafka, unpaced: delivered (ref: kcat -P) | not measured (%s) | - | - | "
               ">= 0.80 | - | | |\n",
               kafka_missing ? kafka_missing : "?");
    }
    double backlog_ratio = 0;
    if (have_backlog) {
        double sl = sample_best(&backlog_s), rf = sample_best(&kcat_s);
        backlog_ratio = rf > 0 ? sl / rf : 0;
        bool met = backlog_ratio >= 0.8;
        missed += !met;
        fmt_rate(a, sizeof a, sl);
        fmt_rate(b, sizeof b, rf);
        fmt_noise(na, sizeof na, &backlog_s);
        fmt_noise(nb, sizeof nb, &kcat_s);
        printf("| 3b target.kafka backlog (rule catching up on %d stored events): delivered (ref: "
               "kcat -P) | %s ev/s | %s ev/s | %.2f | >= 0.80 | %s | %s | %s |\n",
               kafka_n, a, b, backlog_ratio, met ? "yes" : "MISS", na, nb);
        snprintf(fig, sizeof fig,
                 "3b target.kafka backlog: a new rule catching up on %d stored events", kafka_n);
        sl_bench_tsv_row("e2e.kafka_backlog_eps", fig, "ev/s", sl, "kcat -P", rf, backlog_ratio,
                         ">= 0.80", met);
    } else if (want_backlog) {
        printf("| 3b target.kafka backlog (rule catching up on %d stored events): delivered (ref: "
               "kcat -P) | not measured (%s) | - | - | >= 0.80 | - | | |\n",
               kafka_n, kafka_missing ? kafka_missing : "?");
    }

    printf("\nnotes\n\n");
    printf("- end-to-end latency: receipt by the receiver (wall clock, in the final request "
           "callback) minus the event's `time`, which the sender stamps just before the POST; the "
           "direct reference stamps each event just before its own POST to the receiver.\n");
    printf("- reference for target.http: a libcurl multi client with %d keep-alive connections "
           "POSTing each event alone (application/cloudevents+json, the same bytes as sluice "
           "delivers) straight to the same receiver, paced the same way: one HTTP hop without "
           "sluice. ratio = sluice / reference; for ms lower is better.\n",
           HTTP_CONC);
    printf("- target.http: concurrency = %d, batch = 1, ordered (requests of one partition one "
           "after another, so at most %d in flight with %d partitions).\n",
           HTTP_CONC, partitions < HTTP_CONC ? partitions : HTTP_CONC, partitions);
    if (want_kafka)
        printf("- target.kafka: timed from the first POST to the GET /v1/rules that shows every "
               "event delivered and lag 0 (polled every 2 ms); kcat -P -l FILE with -X "
               "linger.ms=5 -X compression.codec=zstd -X enable.idempotence=true -X acks=all -X "
               "partitioner=murmur2_random and the 10 headers sluice sends, wall "
               "time of the process including start and flush; %d topics of %d partitions on a "
               "3-broker mock cluster.\n",
               want_backlog ? 3 : 2, KAFKA_PARTS);
    if (want_backlog)
        printf("- target.kafka backlog: the same %d events POSTed to a server whose config has the "
               "set but no rule, stopped (SIGTERM); then a server on the same data with the rule "
               "(start = \"beginning\"), timed from its fork (start-up included, as kcat's) to the "
               "GET /v1/rules that shows all delivered and lag 0 (polled every 2 ms); in the run "
               "shown the \"listening on\" line came after %.0f ms (the rule starts before the "
               "port opens), the first delivery was seen after %.0f ms, and from then on it "
               "delivered %.0f ev/s; the same kcat runs as the reference.\n",
               kafka_n, backlog_best.startup_ms, backlog_best.first_ms,
               backlog_best.after_first_eps);
    if (have_paced || have_peak)
        printf("- receiver: duplicates paced %d, unpaced %ld (at least once: counted, not "
               "errors); strays %d, unparsable %d.\n",
               (int)paced.dups, peak_best.dups, atomic_load(&rx.stray), atomic_load(&rx.bad));
    if (have_peak && peak_best.retries)
        printf("- ingest answered 503 (back-pressure) %ld times in the best unpaced run; those "
               "batches were sent again.\n",
               peak_best.retries);
    printf("- cpu: cores (of %ld) used during the run shown in the table:",
           sysconf(_SC_NPROCESSORS_ONLN));
    if (have_paced)
        printf(" sluice paced %.2f;", paced.cpu);
    if (have_durable)
        printf(" sluice ack=durable paced %.2f;", durable.cpu);
    if (have_peak)
        printf(" sluice unpaced http %.2f;", peak_best.cpu);
    if (have_kafka)
        printf(" sluice kafka %.2f (mock cluster %.2f);", kafka_best.cpu, kafka_best.cpu_mock);
    if (have_backlog)
        printf(" sluice kafka backlog %.2f (mock cluster %.2f);", backlog_best.cpu,
               backlog_best.cpu_mock);
    if (have_kafka || have_backlog)
        printf(" kcat %.2f (mock cluster %.2f);", kcat_best.cpu, kcat_best.cpu_mock);
    printf(" the rest is the sender and receiver in this process, and idle time.\n");
    if (perf_dir)
        printf("- perf: %s/*.data (perf report -i FILE --no-children --stdio)\n", perf_dir);
    double load[3] = {0, 0, 0};
    if (getloadavg(load, 3) == 3) /* it returns the number of samples */
        printf("- load average at the end %.2f %.2f %.2f\n", load[0], load[1], load[2]);

    printf("\ne2e_bench:");
    if (have_paced)
        printf(" http_p50_ms=%.2f http_p99_ms=%.2f http_p99_vs_direct=%.2f", paced.p50, paced.p99,
               paced_ref.p99 > 0 ? paced.p99 / paced_ref.p99 : 0);
    if (have_durable)
        printf(" http_durable_p99_ms=%.2f", durable.p99);
    if (have_peak)
        printf(" http_peak_eps=%.0f http_peak_vs_direct=%.2f", sample_best(&peak),
               sample_best(&peak_ref) > 0 ? sample_best(&peak) / sample_best(&peak_ref) : 0);
    if (have_kafka)
        printf(" kafka_eps=%.0f kcat_eps=%.0f kafka_vs_kcat=%.2f", sample_best(&kafka_s),
               sample_best(&kcat_s), kafka_ratio);
    if (have_backlog && !have_kafka)
        printf(" kcat_eps=%.0f", sample_best(&kcat_s));
    if (have_backlog)
        printf(" kafka_backlog_eps=%.0f kafka_backlog_vs_kcat=%.2f", sample_best(&backlog_s),
               backlog_ratio);
    printf(" goals_missed=%d\n", missed);
    curl_global_cleanup();
    return 0;
}
