/*
 * plugins/exec/exec.c — source.exec, the example plugin (plugins/README.md):
 * runs a command and turns each line it prints into an event (Fluent Bit's
 * exec input, as a sluice source).
 *
 *     source.exec { command = { "df", "-P" }, interval = "60s", set = "hosts" }
 *
 * The command is argv, run directly (posix_spawnp: no shell unless the
 * config says { "sh", "-c", "…" }), in its own process group, with stdin
 * from /dev/null, default signal dispositions and an empty signal mask
 * (sluice's own blocked signals must not reach it). Each stdout line is one
 * event: with parse = "json" a JSON object with a top-level specversion is
 * taken as a CloudEvent, other JSON becomes the data of a wrapped event and
 * anything else text data; parse = "text" wraps every line as text. Lines
 * longer than max_line are split. stderr lines go to the server log.
 *
 * It is built without libsluice: it only calls libc and the host's function
 * pointers.
 */
#include "plugins/sluice_plugin.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EXIT_POLL_MS 100   /* how often a command that holds its pipes open is checked */
#define KILL_GRACE_MS 2000 /* SIGTERM, then SIGKILL after this */
#define ERR_LINE_MAX 1024  /* stderr lines are cut here */
#define JSON_DEPTH_MAX 128

static const sl_plugin_key exec_keys[] = {
    {"command", SL_PKEY_STRINGS, true, "",
     "the program and its arguments, run directly (no shell: write { \"sh\", \"-c\", \"…\" } "
     "for one); each line it prints on stdout is one event"},
    {"interval", SL_PKEY_DURATION, false, "0",
     "run the command every interval (a run that takes longer delays the next; runs never "
     "overlap); 0 runs it once"},
    {"restart", SL_PKEY_BOOL, false, "false",
     "with interval 0: start the command again restart_delay after it exits (for commands "
     "that keep running, like `journalctl -f`)"},
    {"restart_delay", SL_PKEY_DURATION, false, "\"1s\"", "the pause before a restart"},
    {"parse", SL_PKEY_STRING, false, "\"json\"",
     "\"json\": a JSON object with specversion is a CloudEvent, other JSON becomes data, "
     "anything else text data; \"text\": every line is text data"},
    {"max_line", SL_PKEY_SIZE, false, "\"64KiB\"",
     "longer lines are split into several events (16 B .. 16 MiB)"},
    {"flush_lines", SL_PKEY_INT, false, "1000",
     "publish the batch once it holds this many lines (1 .. 100000)"},
    {"linger", SL_PKEY_DURATION, false, "\"200ms\"",
     "a line waits at most this long before its batch is published (all of it is published "
     "when the command exits)"},
};

/* ---- options ---------------------------------------------------------------------- */

typedef struct exec_opts {
    char **argv; /* NULL-terminated, pointing into argv_buf */
    char *argv_buf;
    int64_t interval_ms;
    bool restart;
    int64_t restart_ms;
    bool parse_json;
    size_t max_line;
    long flush_lines;
    int64_t linger_ms;
} exec_opts;

typedef const char *getter_fn(const void *ctx, const char *name);

/* Fills err (which may be NULL) like sl_error_set(), which a plugin cannot
 * call; returns code. */
static int fail(sl_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(sl_error *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

static const char *get_lines(const void *ctx, const char *name)
{
    const sl_source_config *cfg = ctx;
    return sl_plugin_option(cfg->options, cfg->noptions, name);
}

static const char *get_host(const void *ctx, const char *name)
{
    const sl_source_host *h = ctx;
    return h->option(h->ctx, name);
}

static bool parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static void opts_free(exec_opts *o)
{
    free(o->argv);
    free(o->argv_buf);
    o->argv = NULL;
    o->argv_buf = NULL;
}

/* Reads and checks every option. Returns 0, or SL_EINVAL/SL_ENOMEM with err
 * (nothing left allocated). */
static int opts_read(getter_fn *get, const void *ctx, exec_opts *o, sl_error *err)
{
    *o = (exec_opts){.restart_ms = 1000,
                     .parse_json = true,
                     .max_line = 64 * 1024,
                     .flush_lines = 1000,
                     .linger_ms = 200};
    const char *v;
    int64_t n;
#define BAD(...) fail(err, SL_EINVAL, __VA_ARGS__)
    if ((v = get(ctx, "interval")) && !parse_i64(v, 0, INT64_MAX / 2, &o->interval_ms))
        return BAD("interval: \"%s\" is not a duration", v);
    if ((v = get(ctx, "restart")))
        o->restart = strcmp(v, "true") == 0;
    if ((v = get(ctx, "restart_delay")) && !parse_i64(v, 0, INT64_MAX / 2, &o->restart_ms))
        return BAD("restart_delay: \"%s\" is not a duration", v);
    if (o->restart && o->interval_ms > 0)
        return BAD("restart = true needs interval = 0 (with an interval the command runs "
                   "again anyway)");
    if ((v = get(ctx, "parse"))) {
        if (strcmp(v, "json") != 0 && strcmp(v, "text") != 0)
            return BAD("parse must be \"json\" or \"text\", not \"%s\"", v);
        o->parse_json = strcmp(v, "json") == 0;
    }
    if ((v = get(ctx, "max_line"))) {
        if (!parse_i64(v, 16, 16 << 20, &n))
            return BAD("max_line must be between 16 B and 16 MiB, not %s bytes", v);
        o->max_line = (size_t)n;
    }
    if ((v = get(ctx, "flush_lines"))) {
        if (!parse_i64(v, 1, 100000, &n))
            return BAD("flush_lines must be between 1 and 100000, not %s", v);
        o->flush_lines = (long)n;
    }
    if ((v = get(ctx, "linger")) && !parse_i64(v, 0, 3600000, &o->linger_ms))
        return BAD("linger must be at most 1h, not %s ms", v);
    v = get(ctx, "command");
    if (!v && get == get_lines)
        return 0; /* check(): sluice reports the missing required key itself */
    if (!v || !*v || *v == '\n')
        return BAD("command must name a program, e.g. command = { \"date\", \"-u\" }");
    if (!strchr(v, '\n') && strchr(v, ' ') && !strchr(v, '/'))
        return BAD("command \"%s\" is one program name; write the arguments as a list, e.g. "
                   "{ \"date\", \"-u\" }, or use a shell: { \"sh\", \"-c\", \"…\" }",
                   v);
#undef BAD
    /* The list arrives joined by '\n' (arguments cannot hold one). */
    size_t argc = 1;
    for (const char *p = v; *p; p++)
        argc += *p == '\n';
    o->argv_buf = strdup(v);
    o->argv = calloc(argc + 1, sizeof *o->argv);
    if (!o->argv_buf || !o->argv) {
        opts_free(o);
        return fail(err, SL_ENOMEM, "out of memory");
    }
    char *p = o->argv_buf;
    for (size_t i = 0; i < argc; i++) {
        o->argv[i] = p;
        char *nl = strchr(p, '\n');
        if (nl) {
            *nl = '\0';
            p = nl + 1;
        }
    }
    return 0;
}

static int exec_check(const sl_source_config *cfg, sl_error *err)
{
    exec_opts o = {0};
    int rc = opts_read(get_lines, cfg, &o, err);
    opts_free(&o);
    return rc;
}

/* ---- what a line is ------------------------------------------------------------- */

/* A small JSON checker (RFC 8259, UTF-8 checked): the plugin cannot use
 * sluice's parser, and emit_data(SL_DATA_JSON) wants known-good JSON. */
typedef struct jscan {
    const unsigned char *p, *end;
    int depth;
    bool deep; /* gave up: nested deeper than JSON_DEPTH_MAX */
} jscan;

static void ws(jscan *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

/* One UTF-8 sequence at j->p (its first byte is >= 0x80). */
static bool utf8(jscan *j)
{
    const unsigned char *p = j->p;
    size_t n;
    uint32_t c;
    if (*p >= 0xC2 && *p <= 0xDF)
        n = 1, c = *p & 0x1F;
    else if (*p >= 0xE0 && *p <= 0xEF)
        n = 2, c = *p & 0x0F;
    else if (*p >= 0xF0 && *p <= 0xF4)
        n = 3, c = *p & 0x07;
    else
        return false;
    if ((size_t)(j->end - p) <= n)
        return false;
    for (size_t i = 1; i <= n; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return false;
        c = (c << 6) | (p[i] & 0x3F);
    }
    if ((n == 2 && (c < 0x800 || (c >= 0xD800 && c <= 0xDFFF))) ||
        (n == 3 && (c < 0x10000 || c > 0x10FFFF)))
        return false;
    j->p += n + 1;
    return true;
}

static bool hex4(const unsigned char *p)
{
    for (int i = 0; i < 4; i++)
        if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f') ||
              (p[i] >= 'A' && p[i] <= 'F')))
            return false;
    return true;
}

/* A string at j->p (the opening quote); raw and rawlen: its bytes between the
 * quotes as written. */
static bool jstring(jscan *j, const unsigned char **raw, size_t *rawlen)
{
    j->p++;
    const unsigned char *start = j->p;
    while (j->p < j->end) {
        unsigned char c = *j->p;
        if (c == '"') {
            *raw = start;
            *rawlen = (size_t)(j->p - start);
            j->p++;
            return true;
        }
        if (c < 0x20)
            return false;
        if (c == '\\') {
            if (j->end - j->p < 2)
                return false;
            unsigned char e = j->p[1];
            if (e == 'u') {
                if (j->end - j->p < 6 || !hex4(j->p + 2))
                    return false;
                j->p += 6;
            } else if (strchr("\"\\/bfnrt", e) && e) {
                j->p += 2;
            } else {
                return false;
            }
        } else if (c >= 0x80) {
            if (!utf8(j))
                return false;
        } else {
            j->p++;
        }
    }
    return false;
}

static bool digits(jscan *j)
{
    const unsigned char *s = j->p;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
        j->p++;
    return j->p > s;
}

static bool jnumber(jscan *j)
{
    if (j->p < j->end && *j->p == '-')
        j->p++;
    if (j->p < j->end && *j->p == '0')
        j->p++;
    else if (!(j->p < j->end && *j->p >= '1' && *j->p <= '9') || !digits(j))
        return false;
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        if (!digits(j))
            return false;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
            j->p++;
        if (!digits(j))
            return false;
    }
    return true;
}

static bool literal(jscan *j, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, w, n) != 0)
        return false;
    j->p += n;
    return true;
}

/* One value; *ce set when it is an object with a top-level "specversion"
 * (ce may be NULL below the top). */
static bool jvalue(jscan *j, bool *ce)
{
    ws(j);
    if (j->p >= j->end)
        return false;
    const unsigned char *raw;
    size_t rawlen;
    switch (*j->p) {
    case '"':
        return jstring(j, &raw, &rawlen);
    case 't':
        return literal(j, "true");
    case 'f':
        return literal(j, "false");
    case 'n':
        return literal(j, "null");
    case '[':
    case '{': {
        bool obj = *j->p == '{';
        unsigned char close = obj ? '}' : ']';
        if (++j->depth > JSON_DEPTH_MAX) {
            j->deep = true;
            return false;
        }
        j->p++;
        ws(j);
        if (j->p < j->end && *j->p == close) {
            j->p++;
            j->depth--;
            return true;
        }
        for (;;) {
            if (obj) {
                ws(j);
                if (j->p >= j->end || *j->p != '"' || !jstring(j, &raw, &rawlen))
                    return false;
                if (ce && rawlen == 11 && memcmp(raw, "specversion", 11) == 0)
                    *ce = true;
                ws(j);
                if (j->p >= j->end || *j->p != ':')
                    return false;
                j->p++;
            }
            if (!jvalue(j, NULL))
                return false;
            ws(j);
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                continue;
            }
            if (j->p < j->end && *j->p == close) {
                j->p++;
                j->depth--;
                return true;
            }
            return false;
        }
    }
    default:
        return jnumber(j);
    }
}

typedef enum line_kind { LINE_TEXT, LINE_JSON, LINE_EVENT, LINE_UNSURE } line_kind;

static line_kind classify(const char *s, size_t len)
{
    jscan j = {(const unsigned char *)s, (const unsigned char *)s + len, 0, false};
    bool ce = false;
    bool ok = jvalue(&j, &ce);
    if (ok) {
        ws(&j);
        ok = j.p == j.end;
    }
    if (!ok)
        return j.deep ? LINE_UNSURE : LINE_TEXT;
    return ce ? LINE_EVENT : LINE_JSON;
}

/* ---- the instance ------------------------------------------------------------------ */

typedef struct exec_src {
    const sl_source_host *host;
    exec_opts o;
    char *type, *source; /* defaults for wrapped lines; NULL: the config's */
    pthread_t thread;
    int wake[2]; /* stop() writes a byte: the reader's poll() returns */
    atomic_bool stop;
    pthread_mutex_t mu; /* guards pid: a reaped child is never signalled */
    pid_t pid;          /* the running command (its process group), 0 none */
    char *line;         /* stdout bytes not yet a whole line (max_line) */
    size_t len;
    char errline[ERR_LINE_MAX + 1];
    size_t errlen;
    long unflushed;   /* lines emitted since the last flush */
    int64_t first_ms; /* when the first of them was */
    bool shutdown;    /* a flush returned SL_ESHUTDOWN */
    /* health */
    pthread_mutex_t hmu;
    char problem[256]; /* "" healthy */
    atomic_uint_fast64_t runs, lines, refused;
} exec_src;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool stopping(exec_src *s)
{
    return atomic_load(&s->stop) || s->host->stopping(s->host->ctx);
}

static void set_problem(exec_src *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_problem(exec_src *s, const char *fmt, ...)
{
    pthread_mutex_lock(&s->hmu);
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->problem, sizeof s->problem, fmt, ap);
        va_end(ap);
    } else {
        s->problem[0] = '\0';
    }
    pthread_mutex_unlock(&s->hmu);
}

/* Publishes the batch; false when the server stops. */
static bool flush(exec_src *s)
{
    sl_error err = {0};
    s->unflushed = 0;
    if (s->host->flush(s->host->ctx, &err) == SL_ESHUTDOWN)
        s->shutdown = true;
    return !s->shutdown;
}

static void emit_line(exec_src *s, const char *p, size_t n)
{
    if (n && p[n - 1] == '\r')
        n--;
    if (!n)
        return; /* blank lines are not events */
    const sl_source_host *h = s->host;
    sl_source_meta meta = {.type = s->type, .source = s->source, .data = SL_DATA_TEXT};
    sl_error err = {0};
    int rc;
    line_kind k = s->o.parse_json ? classify(p, n) : LINE_TEXT;
    if (k == LINE_EVENT) {
        rc = h->emit_event(h->ctx, p, n, NULL, &err);
    } else {
        meta.data = k == LINE_JSON ? SL_DATA_JSON : k == LINE_UNSURE ? SL_DATA_AUTO : SL_DATA_TEXT;
        rc = h->emit_data(h->ctx, p, n, &meta, &err);
    }
    atomic_fetch_add(&s->lines, 1);
    if (rc) /* the host counted and logged a refusal; nothing else to do */
        atomic_fetch_add(&s->refused, 1);
    else if (s->unflushed++ == 0)
        s->first_ms = now_ms();
    if (s->unflushed >= s->o.flush_lines)
        flush(s);
}

/* The length of buf[0..n) without a UTF-8 sequence cut at its end, so that a
 * split long line does not break a character (n itself when none is cut). */
static size_t utf8_cut(const char *buf, size_t n)
{
    size_t i = n, back = 0;
    while (i > 0 && back < 4 && ((unsigned char)buf[i - 1] & 0xC0) == 0x80)
        i--, back++;
    if (i == 0)
        return n;
    unsigned char lead = (unsigned char)buf[i - 1];
    size_t want = lead >= 0xF0 ? 3 : lead >= 0xE0 ? 2 : lead >= 0xC0 ? 1 : 0;
    if (want > back && i - 1 > 0)
        return i - 1; /* the lead byte and its continuation go to the next piece */
    return n;
}

/* Emits the whole lines of s->line, keeps the rest; a full buffer without a
 * line break is emitted as one piece (the line is split). */
static void stdout_lines(exec_src *s, bool eof)
{
    size_t start = 0;
    for (;;) {
        char *nl = memchr(s->line + start, '\n', s->len - start);
        if (!nl || s->shutdown)
            break;
        emit_line(s, s->line + start, (size_t)(nl - (s->line + start)));
        start = (size_t)(nl - s->line) + 1;
    }
    size_t rest = s->len - start;
    if (rest && (eof || (start == 0 && rest == s->o.max_line))) {
        size_t n = eof ? rest : utf8_cut(s->line, rest);
        emit_line(s, s->line + start, n);
        start += n;
        rest -= n;
    }
    memmove(s->line, s->line + start, rest);
    s->len = rest;
}

static void stderr_lines(exec_src *s, const char *p, size_t n, bool eof)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\n' || s->errlen == ERR_LINE_MAX) {
            s->errline[s->errlen] = '\0';
            if (s->errlen)
                s->host->log(s->host->ctx, "stderr: %s", s->errline);
            s->errlen = 0;
            if (p[i] == '\n')
                continue;
        }
        s->errline[s->errlen++] = p[i];
    }
    if (eof && s->errlen) {
        s->errline[s->errlen] = '\0';
        s->host->log(s->host->ctx, "stderr: %s", s->errline);
        s->errlen = 0;
    }
}

/* Signals the command's process group (mu held by the caller). */
static void signal_locked(exec_src *s, int sig)
{
    if (s->pid > 0)
        kill(-s->pid, sig);
}

/* Whether the command exited (it is not reaped yet). */
static bool exited(pid_t pid)
{
    siginfo_t si;
    si.si_pid = 0;
    return waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 ? si.si_pid == pid
                                                                           : errno == ECHILD;
}

/* Waits for the command to exit: until it does on its own, or, once the
 * server stops, SIGTERM and SIGKILL after the grace. Then reaps it. */
static void reap(exec_src *s, int *status)
{
    int64_t term_at = -1;
    bool killed = false;
    while (!exited(s->pid)) {
        if (stopping(s) && term_at < 0) {
            pthread_mutex_lock(&s->mu);
            signal_locked(s, SIGTERM);
            pthread_mutex_unlock(&s->mu);
            term_at = now_ms();
        }
        if (term_at >= 0 && !killed && now_ms() - term_at >= KILL_GRACE_MS) {
            pthread_mutex_lock(&s->mu);
            signal_locked(s, SIGKILL);
            pthread_mutex_unlock(&s->mu);
            killed = true;
        }
        /* Not the wake pipe: once stop() wrote to it, it stays readable. */
        struct timespec ts = {0, (term_at >= 0 ? 20 : 50) * 1000000L};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&s->mu);
    *status = 0;
    while (waitpid(s->pid, status, 0) < 0 && errno == EINTR)
        ;
    s->pid = 0;
    pthread_mutex_unlock(&s->mu);
}

/* Starts the command with its stdout and stderr on pipes; 0, or -1 after
 * logging why. */
static int spawn(exec_src *s, int out[2], int err[2])
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t none, dflt;
    int rc = -1;
    out[0] = out[1] = err[0] = err[1] = -1;
    if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) {
        s->host->log(s->host->ctx, "cannot make a pipe: %s", strerror(errno));
        set_problem(s, "cannot make a pipe: %s", strerror(errno));
        return -1;
    }
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    sigemptyset(&none);
    sigemptyset(&dflt);
    const int sigs[] = {SIGPIPE, SIGINT,  SIGTERM, SIGHUP, SIGQUIT,
                        SIGCHLD, SIGUSR1, SIGUSR2, SIGALRM};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++)
        sigaddset(&dflt, sigs[i]);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err[1], 2);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    /* Not even a descriptor someone opened without O_CLOEXEC (a listening
     * socket would outlive sluice in a command that keeps running). */
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
#endif
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &dflt);
    posix_spawnattr_setpgroup(&at, 0);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETPGROUP);
    extern char **environ;
    pthread_mutex_lock(&s->mu);
    int e = atomic_load(&s->stop)
                ? ECANCELED
                : posix_spawnp(&s->pid, s->o.argv[0], &fa, &at, s->o.argv, environ);
    if (e)
        s->pid = 0;
    pthread_mutex_unlock(&s->mu);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(out[1]);
    close(err[1]);
    out[1] = err[1] = -1;
    if (e == 0) {
        rc = 0;
    } else if (e != ECANCELED) {
        s->host->log(s->host->ctx, "cannot run %s: %s", s->o.argv[0], strerror(e));
        set_problem(s, "cannot run %s: %s", s->o.argv[0], strerror(e));
    }
    if (rc) {
        close(out[0]);
        close(err[0]);
        out[0] = err[0] = -1;
    }
    return rc;
}

/* One run of the command: reads its output until it exits (or the server
 * stops), publishing as it goes. */
static void run_once(exec_src *s)
{
    int out[2], err[2];
    if (spawn(s, out, err))
        return;
    atomic_fetch_add(&s->runs, 1);
    s->len = s->errlen = 0;
    int64_t next_exit_check = now_ms() + EXIT_POLL_MS;
    bool child_gone = false, stopped = false;
    char ebuf[4096];
    while ((out[0] >= 0 || err[0] >= 0) && !stopped) {
        struct pollfd p[3] = {{s->wake[0], POLLIN, 0}, {out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
        int64_t now = now_ms(), timeout = next_exit_check - now;
        if (s->unflushed && s->first_ms + s->o.linger_ms - now < timeout)
            timeout = s->first_ms + s->o.linger_ms - now;
        if (child_gone)
            timeout = 0; /* draining what it wrote before it exited */
        int n = poll(p, 3, timeout < 0 ? 0 : (int)timeout);
        if (n < 0 && errno != EINTR)
            break;
        if (stopping(s)) {
            stopped = true;
            break;
        }
        bool got = false;
        if (out[0] >= 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            ssize_t r = read(out[0], s->line + s->len, s->o.max_line - s->len);
            if (r > 0) {
                s->len += (size_t)r;
                stdout_lines(s, false);
                got = true;
            } else if (r == 0 || errno != EINTR) {
                stdout_lines(s, true);
                close(out[0]);
                out[0] = -1;
            }
        }
        if (err[0] >= 0 && (p[2].revents & (POLLIN | POLLHUP | POLLERR))) {
            ssize_t r = read(err[0], ebuf, sizeof ebuf);
            if (r > 0) {
                stderr_lines(s, ebuf, (size_t)r, false);
                got = true;
            } else if (r == 0 || errno != EINTR) {
                stderr_lines(s, NULL, 0, true);
                close(err[0]);
                err[0] = -1;
            }
        }
        now = now_ms();
        if (s->unflushed && now - s->first_ms >= s->o.linger_ms)
            flush(s);
        if (s->shutdown) {
            stopped = true;
            break;
        }
        if (child_gone && !got)
            break; /* its pipes are empty; someone it started may hold them open */
        if (!child_gone && now >= next_exit_check) {
            child_gone = exited(s->pid);
            next_exit_check = now + EXIT_POLL_MS;
        }
    }
    if (!stopped) {
        if (out[0] >= 0)
            stdout_lines(s, true);
        if (err[0] >= 0)
            stderr_lines(s, NULL, 0, true);
    }
    if (out[0] >= 0)
        close(out[0]);
    if (err[0] >= 0)
        close(err[0]);
    int status;
    reap(s, &status);
    if (stopped || stopping(s)) {
        if (s->unflushed && !s->shutdown)
            flush(s); /* returns SL_ESHUTDOWN at once, or stores what it can */
        return;
    }
    if (s->unflushed)
        flush(s);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        set_problem(s, NULL);
    } else if (WIFEXITED(status)) {
        s->host->log(s->host->ctx, "%s exited with status %d", s->o.argv[0], WEXITSTATUS(status));
        set_problem(s, "%s exited with status %d", s->o.argv[0], WEXITSTATUS(status));
    } else if (WIFSIGNALED(status)) {
        s->host->log(s->host->ctx, "%s was killed by signal %d", s->o.argv[0], WTERMSIG(status));
        set_problem(s, "%s was killed by signal %d", s->o.argv[0], WTERMSIG(status));
    }
}

static void *exec_main(void *arg)
{
    exec_src *s = arg;
    const sl_source_host *h = s->host;
    while (!stopping(s)) {
        int64_t started = now_ms();
        run_once(s);
        if (stopping(s))
            break;
        int64_t pause = s->o.interval_ms > 0 ? started + s->o.interval_ms - now_ms()
                        : s->o.restart       ? (s->o.restart_ms < 100 ? 100 : s->o.restart_ms)
                                             : -1;
        if (pause < 0 && s->o.interval_ms <= 0)
            break; /* ran once */
        if (pause > 0 && h->wait(h->ctx, pause))
            break;
    }
    return NULL;
}

/* ---- the ops ------------------------------------------------------------------------- */

static void exec_free(exec_src *s)
{
    if (s->wake[0] >= 0)
        close(s->wake[0]);
    if (s->wake[1] >= 0)
        close(s->wake[1]);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->hmu);
    opts_free(&s->o);
    free(s->line);
    free(s->type);
    free(s->source);
    free(s);
}

static int exec_open(const sl_source_config *cfg, const sl_source_host *host, void **impl,
                     sl_error *err)
{
    exec_src *s = calloc(1, sizeof *s);
    if (!s)
        return fail(err, SL_ENOMEM, "out of memory");
    s->host = host;
    s->wake[0] = s->wake[1] = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->hmu, NULL);
    atomic_init(&s->stop, false);
    int rc = opts_read(get_host, host, &s->o, err);
    if (rc)
        goto fail_free;
    rc = SL_ENOMEM;
    char src[300];
    snprintf(src, sizeof src, "/exec/%s", host->name ? host->name : "exec");
    if (!(s->line = malloc(s->o.max_line)) ||
        (!cfg->type && !(s->type = strdup("sluice.exec.line"))) ||
        (!cfg->source && !(s->source = strdup(src)))) {
        fail(err, rc, "out of memory");
        goto fail_free;
    }
    if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK)) {
        rc = fail(err, SL_EIO, "pipe: %s", strerror(errno));
        goto fail_free;
    }
    int e = pthread_create(&s->thread, NULL, exec_main, s);
    if (e) {
        rc = fail(err, SL_EIO, "cannot start a thread: %s", strerror(e));
        goto fail_free;
    }
    *impl = s;
    return 0;
fail_free:
    exec_free(s);
    return rc;
}

static void exec_stop(void *impl)
{
    exec_src *s = impl;
    atomic_store(&s->stop, true);
    pthread_mutex_lock(&s->mu);
    signal_locked(s, SIGTERM);
    pthread_mutex_unlock(&s->mu);
    ssize_t w = write(s->wake[1], "x", 1);
    (void)w; /* a full pipe already wakes the reader */
}

static void exec_close(void *impl)
{
    exec_src *s = impl;
    pthread_join(s->thread, NULL);
    exec_free(s);
}

static int exec_health(void *impl, char *msg, size_t len)
{
    exec_src *s = impl;
    pthread_mutex_lock(&s->hmu);
    int bad = s->problem[0] != '\0';
    if (bad)
        snprintf(msg, len, "%s", s->problem);
    pthread_mutex_unlock(&s->hmu);
    return bad;
}

static size_t exec_metrics(void *impl, char *out, size_t cap)
{
    exec_src *s = impl;
    const char *n = s->host->name ? s->host->name : "";
    int w =
        snprintf(out, cap,
                 /* Every family needs its # HELP and # TYPE (lines without them are
                  * left out of /metrics); the server keeps one of each per family. */
                 "# HELP sluice_exec_runs_total Runs of the command started.\n"
                 "# TYPE sluice_exec_runs_total counter\n"
                 "sluice_exec_runs_total{source=\"%s\"} %" PRIuFAST64 "\n"
                 "# HELP sluice_exec_lines_total Lines the command printed on stdout.\n"
                 "# TYPE sluice_exec_lines_total counter\n"
                 "sluice_exec_lines_total{source=\"%s\"} %" PRIuFAST64 "\n"
                 "# HELP sluice_exec_refused_total Lines refused (not stored).\n"
                 "# TYPE sluice_exec_refused_total counter\n"
                 "sluice_exec_refused_total{source=\"%s\"} %" PRIuFAST64 "\n",
                 n, (uint_fast64_t)atomic_load(&s->runs), n, (uint_fast64_t)atomic_load(&s->lines),
                 n, (uint_fast64_t)atomic_load(&s->refused));
    return w < 0 || (size_t)w >= cap ? 0 : (size_t)w;
}

static const sl_source_ops exec_ops = {
    .abi_version = SL_CONNECTOR_ABI_VERSION,
    .name = "exec",
    .keys = exec_keys,
    .nkeys = sizeof exec_keys / sizeof *exec_keys,
    .check = exec_check,
    .open = exec_open,
    .stop = exec_stop,
    .close = exec_close,
    .health = exec_health,
    .metrics = exec_metrics,
};

SL_PLUGIN_EXPORT const uint32_t sluice_plugin_abi = SL_CONNECTOR_ABI_VERSION;

SL_PLUGIN_EXPORT int sluice_plugin_register(uint32_t abi, const sl_plugin_registry *reg);
int sluice_plugin_register(uint32_t abi, const sl_plugin_registry *reg)
{
    if (abi != SL_CONNECTOR_ABI_VERSION)
        return SL_EINVAL;
    return reg->add_source(reg->ctx, &exec_ops);
}
