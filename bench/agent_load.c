/*
 * bench/agent_load.c — one writer process for bench/agent_bench.sh.
 *
 *   agent_load agent SOCKET SET N      N lines over the agent's UNIX socket,
 *                                      pipelined; waits for the N answers
 *   agent_load http URL SET N BATCH    N events as NDJSON POSTs of BATCH
 *                                      events to URL/v1/sets/SET/events, one
 *                                      at a time on one keep-alive connection
 *
 * Prints "ok N SECONDS" on stdout; exits 1 when any event was refused or an
 * exchange failed. Events are ~200-byte CloudEvents with unique ids. Built by
 * the bench script with cc (it is not a *_bench.c, so make does not run it).
 */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int event(char *out, size_t cap, long i)
{
    return snprintf(out, cap,
                    "{\"specversion\":\"1.0\",\"id\":\"%d-%ld\",\"source\":\"/bench/agent\","
                    "\"type\":\"bench.event\",\"subject\":\"s%ld\",\"data\":{\"n\":%ld,"
                    "\"pad\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}}",
                    (int)getpid(), i, i % 64, i);
}

/* ---- agent mode ---------------------------------------------------------------- */

typedef struct wargs {
    int fd;
    const char *set;
    long n;
    int failed;
} wargs;

static void *agent_writer(void *p)
{
    wargs *w = p;
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap);
    for (long i = 0; i < w->n; i++) {
        char ev[512];
        int el = event(ev, sizeof ev, i);
        len += (size_t)snprintf(buf + len, cap - len, "{\"set\":\"%s\",\"event\":%.*s}\n", w->set,
                                el, ev);
        if (len > cap - 1024 || i == w->n - 1) {
            for (size_t off = 0; off < len;) {
                ssize_t r = write(w->fd, buf + off, len - off);
                if (r < 0 && errno == EINTR)
                    continue;
                if (r <= 0) {
                    w->failed = 1;
                    free(buf);
                    return NULL;
                }
                off += (size_t)r;
            }
            len = 0;
        }
    }
    free(buf);
    return NULL;
}

static int run_agent(const char *sock, const char *set, long n)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        perror("agent_load: connect");
        return 1;
    }
    double t0 = now_s();
    wargs w = {fd, set, n, 0};
    pthread_t t;
    pthread_create(&t, NULL, agent_writer, &w);
    long got = 0, bad = 0;
    char buf[1 << 16];
    size_t have = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + have, sizeof buf - have);
        if (r <= 0)
            break;
        have += (size_t)r;
        char *s = buf, *e = buf + have, *nl;
        while ((nl = memchr(s, '\n', (size_t)(e - s)))) {
            got++;
            if (!memmem(s, (size_t)(nl - s), "\"ok\":true", 9)) {
                if (bad++ < 3)
                    fprintf(stderr, "agent_load: %.*s\n", (int)(nl - s), s);
            }
            s = nl + 1;
        }
        have = (size_t)(e - s);
        memmove(buf, s, have);
    }
    double dt = now_s() - t0;
    pthread_join(t, NULL);
    close(fd);
    printf("ok %ld %.6f\n", got, dt);
    return got == n && bad == 0 && !w.failed ? 0 : 1;
}

/* ---- direct HTTP mode ------------------------------------------------------------- */

static size_t sink(char *p, size_t sz, size_t n, void *ud)
{
    char *b = ud;
    size_t l = strlen(b), add = sz * n;
    if (add > 4095 - l)
        add = 4095 - l; /* the head of the answer is enough: "failed" comes first */
    memcpy(b + l, p, add);
    b[l + add] = '\0';
    return sz * n;
}

static int run_http(const char *base, const char *set, long n, long batch)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURL *c = curl_easy_init();
    char url[1024];
    snprintf(url, sizeof url, "%s/v1/sets/%s/events", base, set);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/x-ndjson");
    h = curl_slist_append(h, "Expect:");
    char resp[4096];
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, resp);
    size_t cap = (size_t)batch * 512 + 1024;
    char *body = malloc(cap);
    double t0 = now_s();
    long sent = 0;
    int rc = 0;
    while (sent < n && rc == 0) {
        size_t len = 0;
        long k;
        for (k = 0; k < batch && sent + k < n; k++) {
            len += (size_t)event(body + len, cap - len, sent + k);
            body[len++] = '\n';
        }
        for (int attempt = 0;; attempt++) {
            resp[0] = '\0';
            curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
            curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)len);
            CURLcode cc = curl_easy_perform(c);
            long st = 0;
            curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
            if (cc == CURLE_OK && st == 503 && attempt < 50) {
                usleep(100000); /* back-pressure: retry like any client */
                continue;
            }
            if (cc != CURLE_OK || st != 200 || !strstr(resp, "\"failed\":0")) {
                fprintf(stderr, "agent_load: POST: %s, HTTP %ld: %.200s\n", curl_easy_strerror(cc),
                        st, resp);
                rc = 1;
            }
            break;
        }
        sent += k;
    }
    double dt = now_s() - t0;
    printf("ok %ld %.6f\n", sent, dt);
    free(body);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "agent") == 0)
        return run_agent(argv[2], argv[3], atol(argv[4]));
    if (argc == 6 && strcmp(argv[1], "http") == 0)
        return run_http(argv[2], argv[3], atol(argv[4]), atol(argv[5]));
    fprintf(stderr, "usage: agent_load agent SOCKET SET N | http URL SET N BATCH\n");
    return 2;
}
