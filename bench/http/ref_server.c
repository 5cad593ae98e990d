/*
 * bench/http/ref_server.c — the same-run reference of bench/http_bench.sh:
 * the smallest libmicrohttpd server with sluice's thread model (internal
 * polling thread, epoll, a pool of one thread per core, the same connection
 * memory limit and timeouts), which reads every request body into a growing
 * buffer and answers with a fixed 200 JSON of the same shape and size as
 * sluice's. It does no parsing, no validation and no storing, so the ratio
 * sluice / reference is the share of the machine's HTTP ceiling that sluice
 * reaches with the same client on the same cores.
 *
 *   POST (any path)  200 {"accepted":N,"failed":0,"results":[{"partition":0,
 *                    "offset":1000000},...]} with N = 1 for
 *                    application/cloudevents+json, else N = --batch.
 *   GET  (any path)  200: the bytes of --get-body FILE (a real sluice answer
 *                    to GET .../events, loaded at the first GET) up to its
 *                    "next_offset", then "next_offset": offset + --get-events
 *                    (offset from the query, or without one the sample's
 *                    first offset), so a reader that follows next_offset
 *                    counts the same events per answer.
 *
 * Build: cc -O2 $(pkg-config --cflags --libs libmicrohttpd) -pthread
 * Usage: http_ref_server [--listen HOST:PORT] [--batch N] [--threads N]
 *                        [--get-body FILE --get-events N] [--conn-memory KIB]
 * (--conn-memory: MHD_OPTION_CONNECTION_MEMORY_LIMIT, 64 KiB like sluice's; it
 * is there to measure what that setting costs, not for the benchmark.)
 * It prints "ref_server: listening on http://HOST:PORT" on stderr and stops
 * cleanly on SIGTERM or SIGINT.
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

typedef struct req {
    char *body;
    size_t len, cap;
} req;

static char *post_one, *post_batch; /* the two fixed POST answers */
static size_t post_one_len, post_batch_len;

static const char *get_body_path;
static long long get_events = 1000;
static char *get_blob; /* the --get-body bytes before "next_offset" */
static size_t get_blob_len;
static long long get_first; /* the sample's first "sluiceoffset" */
static pthread_once_t get_once = PTHREAD_ONCE_INIT;

/* {"accepted":n,"failed":0,"results":[...]} with 7-digit offsets, about the
 * size of sluice's answer once its partitions hold a million events. */
static char *make_post_answer(long n, size_t *len)
{
    size_t cap = 64 + (size_t)n * 40;
    char *s = malloc(cap);
    if (!s)
        return NULL;
    size_t k = (size_t)snprintf(s, cap, "{\"accepted\":%ld,\"failed\":0,\"results\":[", n);
    for (long i = 0; i < n; i++)
        k += (size_t)snprintf(s + k, cap - k, "%s{\"partition\":%ld,\"offset\":%ld}", i ? "," : "",
                              i % 4, 1000000 + i);
    k += (size_t)snprintf(s + k, cap - k, "]}\n");
    *len = k;
    return s;
}

static void load_get_body(void)
{
    FILE *f = get_body_path ? fopen(get_body_path, "rb") : NULL;
    if (!f)
        return;
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    char chunk[65536];
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + n > cap) {
            cap = (len + n) * 2;
            char *p = realloc(buf, cap);
            if (!p) {
                free(buf);
                fclose(f);
                return;
            }
            buf = p;
        }
        memcpy(buf + len, chunk, n);
        len += n;
    }
    fclose(f);
    /* Keep everything before the last "next_offset" key. */
    static const char key[] = "\"next_offset\":";
    for (size_t i = len >= sizeof key ? len - (sizeof key - 1) + 1 : 0; i-- > 0;) {
        if (memcmp(buf + i, key, sizeof key - 1) == 0) {
            get_blob = buf;
            get_blob_len = i;
            buf[i] = '\0'; /* overwritten by each answer's own next_offset */
            const char *first = strstr(buf, "\"sluiceoffset\":");
            get_first = first ? strtoll(first + 15, NULL, 10) : 0;
            return;
        }
    }
    free(buf);
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, void *body, size_t len,
                             enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, mode);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    enum MHD_Result ok = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ok;
}

static enum MHD_Result answer_get(struct MHD_Connection *c)
{
    pthread_once(&get_once, load_get_body);
    if (!get_blob) {
        static char msg[] = "{\"error\":\"NoGetBody\",\"message\":\"start with --get-body\"}\n";
        return reply(c, 500, msg, sizeof msg - 1, MHD_RESPMEM_PERSISTENT);
    }
    const char *o = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "offset");
    long long off = o ? strtoll(o, NULL, 10) : get_first; /* from=beginning */
    /* One copy of the answer's bytes, as any server that assembles a body. */
    size_t cap = get_blob_len + 64;
    char *body = malloc(cap);
    if (!body)
        return MHD_NO;
    memcpy(body, get_blob, get_blob_len);
    size_t len = get_blob_len + (size_t)snprintf(body + get_blob_len, 64, "\"next_offset\":%lld}\n",
                                                 off + get_events);
    return reply(c, 200, body, len, MHD_RESPMEM_MUST_FREE);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **con_cls)
{
    (void)cls;
    (void)url;
    (void)version;
    req *r = *con_cls;
    if (!r) {
        if (!(r = calloc(1, sizeof *r)))
            return MHD_NO;
        *con_cls = r;
        return MHD_YES;
    }
    if (*upload_size) { /* the same growing copy of the body that sluice makes */
        if (r->len + *upload_size > r->cap) {
            size_t cap = r->cap ? r->cap : 4096;
            while (cap < r->len + *upload_size)
                cap *= 2;
            char *p = realloc(r->body, cap);
            if (!p)
                return MHD_NO;
            r->body = p;
            r->cap = cap;
        }
        memcpy(r->body + r->len, upload_data, *upload_size);
        r->len += *upload_size;
        *upload_size = 0;
        return MHD_YES;
    }
    if (strcmp(method, "POST") == 0) {
        const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
        bool one = ct && strncasecmp(ct, "application/cloudevents+json", 28) == 0;
        return reply(c, 200, one ? post_one : post_batch, one ? post_one_len : post_batch_len,
                     MHD_RESPMEM_PERSISTENT);
    }
    if (strcmp(method, "GET") == 0 && strcmp(url, "/healthz") == 0) {
        static char ok[] = "{\"status\":\"ok\"}\n";
        return reply(c, 200, ok, sizeof ok - 1, MHD_RESPMEM_PERSISTENT);
    }
    if (strcmp(method, "GET") == 0)
        return answer_get(c);
    static char no[] = "{\"error\":\"MethodNotAllowed\",\"message\":\"GET or POST\"}\n";
    return reply(c, 405, no, sizeof no - 1, MHD_RESPMEM_PERSISTENT);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    req *r = *con_cls;
    if (r) {
        free(r->body);
        free(r);
        *con_cls = NULL;
    }
}

static int usage(void)
{
    fprintf(stderr, "usage: http_ref_server [--listen HOST:PORT] [--batch N] [--threads N] "
                    "[--get-body FILE --get-events N] [--conn-memory KIB]\n");
    return 2;
}

int main(int argc, char **argv)
{
    char host[64] = "127.0.0.1";
    long port = 0, batch = 100, threads = sysconf(_SC_NPROCESSORS_ONLN), conn_kib = 64;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return usage();
        i++;
        if (strcmp(a, "--listen") == 0) {
            const char *colon = strrchr(v, ':');
            if (!colon || (size_t)(colon - v) >= sizeof host)
                return usage();
            if (colon > v)
                snprintf(host, sizeof host, "%.*s", (int)(colon - v), v);
            port = strtol(colon + 1, NULL, 10);
        } else if (strcmp(a, "--batch") == 0) {
            batch = strtol(v, NULL, 10);
        } else if (strcmp(a, "--threads") == 0) {
            threads = strtol(v, NULL, 10);
        } else if (strcmp(a, "--get-body") == 0) {
            get_body_path = v;
        } else if (strcmp(a, "--conn-memory") == 0) {
            conn_kib = strtol(v, NULL, 10);
        } else if (strcmp(a, "--get-events") == 0) {
            get_events = strtoll(v, NULL, 10);
        } else {
            return usage();
        }
    }
    if (port < 0 || port > 65535 || batch < 1 || batch > 100000 || threads < 1 || conn_kib < 4 ||
        conn_kib > 65536)
        return usage();
    post_one = make_post_answer(1, &post_one_len);
    post_batch = make_post_answer(batch, &post_batch_len);
    if (!post_one || !post_batch)
        return 1;

    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return usage();
    /* sluice's flags and options (http/http.c), less suspend/resume. */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR, &sa,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)threads, MHD_OPTION_CONNECTION_LIMIT, 4096u,
        MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)conn_kib << 10, MHD_OPTION_LISTEN_BACKLOG_SIZE,
        1024u, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "ref_server: cannot listen on %s:%ld\n", host, port);
        return 1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "ref_server: listening on http://%s:%u\n", host,
            di ? di->port : (unsigned)port);
    int sig;
    sigwait(&sigs, &sig);
    MHD_stop_daemon(d);
    free(post_one);
    free(post_batch);
    free(get_blob);
    return 0;
}
