/*
 * tests/integration/test_security.c — the HTTP API's security against the
 * real `bin/sluice serve` (docs/security.md):
 *   rights       four keys (publish/read on sets and globs, metrics, admin):
 *                401 (with WWW-Authenticate) / 403 (naming the right and the
 *                set) / 200 for every endpoint class; open /healthz, /ui/
 *                and signed webhooks; nothing stored from a refused request
 *   no_plaintext `sluice key new` → config entry → the token works; the token
 *                is nowhere in the config, the data dir, the log, /metrics or
 *                the answers; `sluice check` refuses a token in sha256
 *   cli_key      put/tail/status with --api-key and SLUICE_API_KEY; without
 *                a key: exit 1 with the 401 message
 *   listen       0.0.0.0 and :: without keys refuse to start (exit 1, the
 *                message); --insecure, insecure = true and keys start
 *   tls          HTTPS with a self-signed certificate (rx_make_cert): libcurl
 *                with the CA, refused without it, `sluice status --cacert`
 *                and SLUICE_CA_FILE; bad or missing files refuse to start
 *                naming the file
 *   limits       request size 413, batch count 413, event size (per event),
 *                header size 431, JSON depth, connection count 503, per-IP
 *                connections; earlier accepted data stays, nothing refused
 *                is stored
 *   rate         429 with Retry-After past `rate`, per client; the same
 *                request passes after waiting what Retry-After said; keys
 *                have separate buckets
 *   host         without keys on loopback: a Host that is not a loopback
 *                name (DNS rebinding) and, on writes, a foreign Origin get
 *                403; loopback names, the server's own Origin and none pass
 *   body_share   stalled webhook uploads (no key) cannot take the body
 *                memory a key holder's publish needs
 * Also in rights/limits: requests refused from their headers (401, 403,
 * 405 on /healthz and /ui, unknown webhooks) are answered at once without
 * waiting for their body; redrive needs publish on the DLQ and on the `to`
 * it uses (a `to` given twice is 400); connections past
 * max_connections_per_ip are closed at accept; 403 bodies stay JSON for
 * names that are not UTF-8; the cleartext-key warnings; --listen localhost.
 */
#include "itest.h"
#include "receiver.h"

#include "core/bus/auth.h"
#include "core/base/buf.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#define WAIT_S 30.0
#define EV(id) "{\"specversion\":\"1.0\",\"id\":\"" id "\",\"source\":\"/sec\",\"type\":\"t\"}"

/* Tokens of the rights test (their hashes go into the config). */
#define T_PUB "sk_test-publisher-token-0123456789abcdefghijkl"
#define T_READ "sk_test-reader-token-0123456789abcdefghijklmno"
#define T_PROM "sk_test-prometheus-token-0123456789abcdefghij"
#define T_OPS "sk_test-operator-token-0123456789abcdefghijklm"

/* ---- helpers ------------------------------------------------------------------ */

/* One request with an optional bearer token (NULL: no Authorization). */
static it_resp call(it_server *s, const char *method, const char *path, const char *token,
                    const char *ctype, const char *body)
{
    char auth[256];
    const char *hdrs[3] = {NULL, NULL, NULL};
    if (token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        hdrs[0] = auth;
    }
    it_call k = {.method = method,
                 .path = path,
                 .ctype = ctype,
                 .hdrs = hdrs,
                 .body = body,
                 .len = body ? strlen(body) : 0};
    it_resp r;
    it_http(NULL, s->port, &k, &r);
    return r;
}

/* Asserts status (and, when code, the JSON error code and that the message
 * holds each of the NULL-terminated words). */
static void expect(it_resp r, long status, const char *code, ...)
{
    if (r.status != status)
        fail_msg("want %ld, got %ld: %s", status, r.status, it_body(&r));
    if (code) {
        it_expect_error(&r, status, code);
        va_list ap;
        va_start(ap, code);
        for (const char *w; (w = va_arg(ap, const char *));)
            if (!strstr(it_body(&r), w))
                fail_msg("answer %ld lacks \"%s\": %s", status, w, it_body(&r));
        va_end(ap);
    }
    it_resp_free(&r);
}

/* The stored events of set, asked with token (GET /v1/sets/{set}). */
static long events_in(it_server *s, const char *set, const char *token)
{
    char path[256];
    snprintf(path, sizeof path, "/v1/sets/%s", set);
    it_resp r = call(s, "GET", path, token, NULL, NULL);
    if (r.status == 404) {
        it_resp_free(&r);
        return 0;
    }
    if (r.status != 200)
        fail_msg("GET %s: %ld %s", path, r.status, it_body(&r));
    json_t *j = it_parse_json(&r);
    long n = (long)json_integer_value(json_object_get(j, "events"));
    json_decref(j);
    it_resp_free(&r);
    return n;
}

/* events_in() polled until it is n (acks from the buffer are on disk
 * within milliseconds); fails the test after WAIT_S. */
static void wait_events(it_server *s, const char *set, const char *token, long n)
{
    long got = -1;
    for (double end = it_mono() + WAIT_S; it_mono() < end; it_sleep_ms(10))
        if ((got = events_in(s, set, token)) == n)
            return;
    fail_msg("set %s holds %ld events, want %ld", set, got, n);
}

static void hash_of(const char *tok, char out[SL_AUTH_HEX_LEN + 1])
{
    sl_auth_hash_hex(tok, strlen(tok), out);
}

/* A TCP connection to 127.0.0.1:port from the local address src (NULL: any;
 * "127.0.0.2" makes another client address on loopback); -1 on failure. */
static int conn_from(int port, const char *src)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (src) {
        struct sockaddr_in me = {.sin_family = AF_INET};
        inet_pton(AF_INET, src, &me.sin_addr);
        if (bind(fd, (struct sockaddr *)&me, sizeof me)) {
            close(fd);
            return -1;
        }
    }
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
        close(fd);
        return -1;
    }
    struct timeval tv = {.tv_sec = (time_t)WAIT_S};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

/* Sends req on fd and reads the answer's head: its status, 0 when the
 * server closed the connection without an answer, -1 when nothing came
 * within WAIT_S (the server waits for more: a body it should not read).
 * The answer's start goes into text (cap bytes, NUL-terminated). */
static long raw_exchange(int fd, const char *req, char *text, size_t cap)
{
    text[0] = '\0';
    if (send(fd, req, strlen(req), MSG_NOSIGNAL) < 0)
        return 0;
    size_t n = 0;
    while (n + 1 < cap && !strstr(text, "\r\n\r\n")) {
        ssize_t k = recv(fd, text + n, cap - 1 - n, 0);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return -1;
        if (k <= 0)
            break;
        n += (size_t)k;
        text[n] = '\0';
    }
    long st = 0;
    if (sscanf(text, "HTTP/1.%*d %ld", &st) != 1)
        return 0;
    return st;
}

/* Sends the head of a request whose body (Content-Length: 10 MB) never
 * comes, and returns the answer's status (raw_exchange()): a request
 * refused from its headers must be answered without waiting for it. */
static long head_only(int port, const char *method, const char *path, const char *extra, char *text,
                      size_t cap)
{
    int fd = conn_from(port, NULL);
    assert_true(fd >= 0);
    char req[1024];
    snprintf(req, sizeof req,
             "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
             "Content-Length: 10000000\r\n%s\r\n",
             method, path, port, extra ? extra : "");
    long st = raw_exchange(fd, req, text, cap);
    close(fd);
    return st;
}

/* Whether any file under dir contains needle. */
static bool tree_contains(const char *dir, const char *needle)
{
    DIR *d = opendir(dir);
    if (!d)
        return false;
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st))
            continue;
        if (S_ISDIR(st.st_mode)) {
            found = tree_contains(p, needle);
        } else if (S_ISREG(st.st_mode)) {
            FILE *f = fopen(p, "rb");
            if (!f)
                continue;
            sl_buf b = SL_BUF_INIT;
            char chunk[65536];
            size_t n;
            while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
                sl_buf_append(&b, chunk, n);
            fclose(f);
            found = b.len && memmem(b.data, b.len, needle, strlen(needle));
            sl_buf_free(&b);
        }
    }
    closedir(d);
    return found;
}

/* Starts bin/sluice serve with exactly args (after "serve"), output into
 * s->log, and waits until the log says it listens (true) or it exits
 * (false, its exit status in *status). For listens it_srv_start() cannot
 * check (0.0.0.0 given on the command line, HTTPS). */
static bool start_raw(it_server *s, const char *const *args, int *status)
{
    const char *argv[40] = {it_bin(), "serve"};
    int n = 2;
    for (int i = 0; args[i] && n < 38; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    int before = it_log_count(s, "listening on");
    int fd = open(s->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(it_bin(), (char **)argv);
        _exit(127);
    }
    close(fd);
    assert_true(pid > 0);
    s->pid = pid;
    for (double end = it_mono() + WAIT_S; it_mono() < end;) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            s->pid = 0;
            *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
            return false;
        }
        if (it_log_count(s, "listening on") > before)
            return true;
        it_sleep_ms(10);
    }
    fail_msg("sluice serve neither listened nor exited in %.0f s", WAIT_S);
    return false;
}

/* The rights test's config: four keys and a signed webhook. */
static void rights_config(it_server *s, char *cfg)
{
    char hp[65], hr[65], hm[65], ho[65];
    hash_of(T_PUB, hp);
    hash_of(T_READ, hr);
    hash_of(T_PROM, hm);
    hash_of(T_OPS, ho);
    it_write_config(s, cfg,
                    "server { api_keys = {\n"
                    "  pub = { sha256 = \"%s\", publish = { \"orders\", \"audit.*\" },\n"
                    "          read = { \"orders\" } },\n"
                    "  reader = { sha256 = \"%s\", read = \"orders\" },\n"
                    "  prom = { sha256 = \"%s\", metrics = true },\n"
                    "  ops = { sha256 = \"%s\", admin = true },\n"
                    "} }\n"
                    "set \"gh\" { }\n"
                    "source.webhook { name = \"gh\", preset = \"github\", secret = \"s3\", "
                    "set = \"gh\" }\n",
                    hp, hr, hm, ho);
}

/* ---- rights --------------------------------------------------------------------- */

static void test_rights(void **state)
{
    it_server *s = *state;
    static char cfg[PATH_MAX];
    rights_config(s, cfg);
    it_start_config(s, cfg, WAIT_S);
    const char *ce = IT_CT_CE;

    /* No key: 401 with WWW-Authenticate: Bearer, on every class. */
    expect(call(s, "POST", "/v1/sets/orders/events", NULL, ce, EV("n1")), 401, "Unauthorized",
           "API key", NULL);
    expect(call(s, "GET", "/v1/sets", NULL, NULL, NULL), 401, "Unauthorized", NULL);
    expect(call(s, "GET", "/v1/sets/orders/events", NULL, NULL, NULL), 401, "Unauthorized", NULL);
    expect(call(s, "GET", "/v1/rules", NULL, NULL, NULL), 401, "Unauthorized", NULL);
    expect(call(s, "GET", "/metrics", NULL, NULL, NULL), 401, "Unauthorized", NULL);
    expect(call(s, "DELETE", "/v1/lanes/x", NULL, NULL, NULL), 401, "Unauthorized", NULL);
    expect(call(s, "GET", "/v1/nothing-here", NULL, NULL, NULL), 401, "Unauthorized", NULL);
    {
        CURL *c = curl_easy_init();
        char url[128];
        snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/sets", s->port);
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, NULL);
        curl_easy_setopt(c, CURLOPT_HEADER, 1L);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, NULL);
        FILE *f = fmemopen(NULL, 65536, "w+");
        assert_non_null(f);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
        assert_int_equal(curl_easy_perform(c), CURLE_OK);
        long st = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
        assert_int_equal(st, 401);
        char text[4096] = "";
        rewind(f);
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = '\0';
        fclose(f);
        curl_easy_cleanup(c);
        if (!strcasestr(text, "\nWWW-Authenticate: Bearer"))
            fail_msg("401 without WWW-Authenticate: Bearer:\n%s", text);
    }
    /* Bad keys: unknown, another scheme, the hash itself. */
    char hp[65];
    hash_of(T_PUB, hp);
    expect(call(s, "GET", "/v1/sets", "sk_wrong", NULL, NULL), 401, "Unauthorized", "not known",
           NULL);
    expect(call(s, "GET", "/v1/sets", hp, NULL, NULL), 401, "Unauthorized", NULL);
    {
        const char *hdrs[] = {"Authorization: Basic dXNlcjpwYXNz", NULL};
        it_call k = {.method = "GET", .path = "/v1/sets", .hdrs = hdrs};
        it_resp r;
        it_http(NULL, s->port, &k, &r);
        expect(r, 401, "Unauthorized", "Bearer", NULL);
    }

    /* Open without a key: health, the console's files, signed webhooks. */
    expect(call(s, "GET", "/healthz", NULL, NULL, NULL), 200, NULL);
    expect(call(s, "GET", "/ui/", NULL, NULL, NULL), 200, NULL);
    /* A webhook without a signature is the webhook's own 401 (its
     * signature check), not the API key's. */
    {
        it_resp r = call(s, "POST", "/v1/webhooks/gh", NULL, "application/json", "{}");
        assert_int_equal(r.status, 401);
        assert_null(strstr(it_body(&r), "\"Unauthorized\""));
        assert_non_null(strstr(it_body(&r), "X-Hub-Signature-256"));
        it_resp_free(&r);
    }
    /* A signed one is stored without any API key. */
    {
        const char *body = "{\"zen\":\"keys do not gate webhooks\"}";
        unsigned char mac[EVP_MAX_MD_SIZE];
        unsigned mlen = 0;
        assert_non_null(
            HMAC(EVP_sha256(), "s3", 2, (const unsigned char *)body, strlen(body), mac, &mlen));
        char sig[200] = "X-Hub-Signature-256: sha256=";
        for (unsigned i = 0; i < mlen; i++)
            snprintf(sig + strlen(sig), 3, "%02x", mac[i]);
        const char *hdrs[] = {sig, "X-GitHub-Event: ping", "X-GitHub-Delivery: d-1", NULL};
        it_call k = {.method = "POST",
                     .path = "/v1/webhooks/gh",
                     .ctype = "application/json",
                     .hdrs = hdrs,
                     .body = body,
                     .len = strlen(body)};
        it_resp r;
        it_http(NULL, s->port, &k, &r);
        expect(r, 200, NULL);
        assert_int_equal(events_in(s, "gh", T_OPS), 1);
    }

    /* Refused from the headers: answered at once, the body (10 MB that
     * never come) not waited for, the connection closed. Key-free routes
     * that take no body, webhooks that do not exist, 401 and 403. */
    {
        char text[4096];
        struct {
            const char *method, *path, *extra;
            long status;
        } c[] = {
            {"POST", "/healthz", NULL, 405},
            {"PUT", "/ui/index.html", NULL, 405},
            {"POST", "/ui/", NULL, 405},
            {"POST", "/v1/webhooks/nope", NULL, 404},
            {"PUT", "/v1/webhooks/gh", NULL, 405},
            {"POST", "/v1/sets/orders/events", NULL, 401},
            {"POST", "/v1/sets/billing/events", "Authorization: Bearer " T_PUB "\r\n", 403},
        };
        for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
            long st = head_only(s->port, c[i].method, c[i].path, c[i].extra, text, sizeof text);
            if (st != c[i].status)
                fail_msg("%s %s with a pending body: want %ld at once, got %ld:\n%s", c[i].method,
                         c[i].path, c[i].status, st, text);
            if (!strcasestr(text, "\r\nConnection: close"))
                fail_msg("%s %s: no Connection: close:\n%s", c[i].method, c[i].path, text);
        }
    }
    /* A 403 naming a set that is not UTF-8 is still valid JSON. */
    {
        it_resp r = call(s, "GET", "/v1/sets/%ff%fe%c3/events", T_PROM, NULL, NULL);
        assert_int_equal(r.status, 403);
        json_error_t je;
        json_t *j = json_loads(it_body(&r), 0, &je);
        if (!j)
            fail_msg("403 body is not JSON (%s): %s", je.text, it_body(&r));
        assert_non_null(strstr(json_string_value(json_object_get(j, "message")), "\xef\xbf\xbd"));
        json_decref(j);
        it_resp_free(&r);
    }

    /* pub: publish on orders and audit.*, read on orders only. */
    expect(call(s, "POST", "/v1/sets/orders/events", T_PUB, ce, EV("p1")), 200, NULL);
    expect(call(s, "POST", "/v1/sets/audit.eu/events", T_PUB, ce, EV("p2")), 200, NULL);
    expect(call(s, "POST", "/v1/sets/billing/events", T_PUB, ce, EV("p3")), 403, "Forbidden",
           "\\\"pub\\\"", "publish", "\\\"billing\\\"", NULL);
    expect(call(s, "POST", "/v1/sets/audit/events", T_PUB, ce, EV("p4")), 403, "Forbidden", NULL);
    expect(call(s, "GET", "/v1/sets/orders/events?partition=0", T_PUB, NULL, NULL), 200, NULL);
    expect(call(s, "GET", "/v1/sets/orders", T_PUB, NULL, NULL), 200, NULL);
    expect(call(s, "GET", "/v1/sets/audit.eu/events", T_PUB, NULL, NULL), 403, "Forbidden", "read",
           "\\\"audit.eu\\\"", NULL);
    expect(call(s, "GET", "/v1/sets/audit.eu", T_PUB, NULL, NULL), 403, "Forbidden", NULL);
    expect(call(s, "GET", "/v1/sets", T_PUB, NULL, NULL), 200, NULL);
    expect(call(s, "GET", "/v1/rules", T_PUB, NULL, NULL), 200, NULL);
    expect(call(s, "GET", "/v1/lanes", T_PUB, NULL, NULL), 200, NULL);
    expect(call(s, "GET", "/v1/sources", T_PUB, NULL, NULL), 200, NULL);
    expect(call(s, "GET", "/metrics", T_PUB, NULL, NULL), 403, "Forbidden", "metrics", NULL);
    expect(call(s, "POST", "/v1/rules/r/replay", T_PUB, "application/json", "{\"from\":\"1h\"}"),
           403, "Forbidden", "admin", NULL);
    expect(call(s, "DELETE", "/v1/lanes/feature-x", T_PUB, NULL, NULL), 403, "Forbidden", "admin",
           NULL);
    expect(call(s, "POST", "/v1/patterns/test", T_PUB, "application/json", "{}"), 403, "Forbidden",
           "admin", NULL);
    /* Redrive: publish on the DLQ (it moves the DLQ's position) and on the
     * destination (query or body), checked on the `to` the redrive uses. */
    expect(call(s, "POST", "/v1/sets/orders/redrive?to=billing", T_PUB, NULL, NULL), 403,
           "Forbidden", "publish", "\\\"billing\\\"", NULL);
    expect(call(s, "POST", "/v1/sets/orders/redrive", T_PUB, "application/json",
                "{\"to\":\"billing\"}"),
           403, "Forbidden", "\\\"billing\\\"", NULL);
    expect(call(s, "POST", "/v1/sets/zzz/redrive?to=orders", T_PUB, NULL, NULL), 403, "Forbidden",
           "publish", "\\\"zzz\\\"", NULL);
    /* A `to` given twice is refused whole: the allowed one first does not
     * carry the other past the check, nor does an invalid first one. */
    expect(call(s, "POST", "/v1/sets/orders/redrive", T_PUB, "application/json",
                "{\"to\":\"orders\",\"to\":\"billing\"}"),
           400, "InvalidRequest", "more than once", NULL);
    expect(call(s, "POST", "/v1/sets/orders/redrive", T_PUB, "application/json",
                "{\"to\":\"no way!\",\"to\":\"billing\"}"),
           400, "InvalidRequest", "more than once", NULL);
    expect(call(s, "POST", "/v1/sets/orders/redrive", T_PUB, "application/json",
                "{\"max\":1,\"max\":2,\"to\":\"orders\"}"),
           400, "InvalidRequest", "more than once", NULL);
    /* An escaped member name is the same member. */
    expect(call(s, "POST", "/v1/sets/orders/redrive", T_PUB, "application/json",
                "{\"t\\u006f\":\"billing\"}"),
           403, "Forbidden", "\\\"billing\\\"", NULL);
    /* read on the DLQ is not enough: reader may read orders, not redrive it. */
    expect(call(s, "POST", "/v1/sets/orders/redrive?to=orders", T_READ, NULL, NULL), 403,
           "Forbidden", "publish", "\\\"orders\\\"", NULL);
    expect(call(s, "POST", "/v1/sets/orders/redrive", T_PUB, "application/json",
                "{\"to\":\"audit.eu\",\"max\":1}"),
           200, NULL);
    assert_int_equal(events_in(s, "billing", T_OPS), 0);

    /* reader: read on orders, nothing else. */
    expect(call(s, "GET", "/v1/sets/orders/events", T_READ, NULL, NULL), 200, NULL);
    expect(call(s, "POST", "/v1/sets/orders/events", T_READ, ce, EV("r1")), 403, "Forbidden",
           "publish", NULL);
    expect(call(s, "GET", "/v1/sets", T_READ, NULL, NULL), 200, NULL);

    /* prom: /metrics only. */
    expect(call(s, "GET", "/metrics", T_PROM, NULL, NULL), 200, NULL);
    expect(call(s, "GET", "/v1/sets", T_PROM, NULL, NULL), 403, "Forbidden", NULL);
    expect(call(s, "GET", "/v1/sets/orders/events", T_PROM, NULL, NULL), 403, "Forbidden", NULL);
    expect(call(s, "POST", "/v1/sets/orders/events", T_PROM, ce, EV("m1")), 403, "Forbidden", NULL);

    /* ops: admin, every endpoint. */
    expect(call(s, "POST", "/v1/sets/billing/events", T_OPS, ce, EV("o1")), 200, NULL);
    expect(call(s, "GET", "/metrics", T_OPS, NULL, NULL), 200, NULL);
    expect(call(s, "POST", "/v1/patterns/test", T_OPS, "application/json",
                "{\"pattern\":{\"type\":[\"t\"]},\"event\":{\"type\":\"t\"}}"),
           200, NULL);
    expect(call(s, "DELETE", "/v1/lanes/feature-x", T_OPS, NULL, NULL), 404, NULL);
    expect(call(s, "GET", "/v1/nothing-here", T_OPS, NULL, NULL), 404, "NotFound", NULL);

    /* Nothing from a refused request was stored: orders holds p1 (its
     * event moved by the redrive still counts there: a redrive copies),
     * billing only ops's. */
    assert_int_equal(events_in(s, "billing", T_OPS), 1);
    assert_int_equal(events_in(s, "audit.eu", T_OPS), 2); /* p2 and the redriven p1 */
    assert_int_equal(events_in(s, "orders", T_OPS), 1);
    s->passed = true;
}

/* ---- the token is never stored --------------------------------------------------- */

/* Runs `sluice key new NAME ARGS…` and returns its token and entry. */
static void key_new(it_server *s, const char *const *args, char tok[64], char *entry, size_t cap)
{
    char *out = NULL, *err = NULL;
    int rc = it_run(s, NULL, &out, &err, args, WAIT_S);
    if (rc != 0)
        fail_msg("sluice key new: exit %d: %s%s", rc, out, err);
    const char *t = strstr(out, "token: ");
    assert_non_null(t);
    snprintf(tok, 64, "%.*s", (int)strcspn(t + 7, "\n"), t + 7);
    assert_int_equal(strlen(tok), SL_AUTH_TOKEN_LEN);
    /* The entry is the line that is neither the token nor a comment. */
    entry[0] = '\0';
    for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        size_t n = strcspn(l, "\n");
        if (n && l[0] != '#' && strncmp(l, "token: ", 7) != 0)
            snprintf(entry, cap, "%.*s", (int)n, l);
    }
    assert_non_null(strstr(entry, "sha256 = \""));
    assert_null(strstr(entry, tok));
    free(out);
    free(err);
    /* it_run's copies of the output hold the token: not the server's doing. */
    char p[PATH_MAX];
    it_path(p, s, "cli.out");
    unlink(p);
    it_path(p, s, "cli.err");
    unlink(p);
}

static void test_no_plaintext(void **state)
{
    it_server *s = *state;
    char tok[64], entry[512];
    key_new(s,
            (const char *const[]){"key", "new", "ci", "--publish", "orders,audit.*", "--read",
                                  "orders", NULL},
            tok, entry, sizeof entry);
    assert_non_null(strstr(entry, "ci = { sha256 = \""));
    assert_non_null(strstr(entry, "publish = { \"orders\", \"audit.*\" }"));
    assert_non_null(strstr(entry, "read = { \"orders\" }"));
    /* Two runs never give the same token. */
    char tok2[64], entry2[512];
    key_new(s, (const char *const[]){"key", "new", NULL}, tok2, entry2, sizeof entry2);
    assert_string_not_equal(tok, tok2);
    assert_non_null(strstr(entry2, "key = { sha256"));
    assert_non_null(strstr(entry2, "publish = { \"*\" }, read = { \"*\" }"));

    static char cfg[PATH_MAX];
    it_write_config(s, cfg, "server { api_keys = {\n  %s\n} }\n", entry);
    it_start_config(s, cfg, WAIT_S);
    expect(call(s, "POST", "/v1/sets/orders/events", tok, IT_CT_CE, EV("1")), 200, NULL);
    expect(call(s, "GET", "/v1/sets/orders/events", tok, NULL, NULL), 200, NULL);
    expect(call(s, "GET", "/v1/sets/orders/events", tok2, NULL, NULL), 401, "Unauthorized", NULL);
    /* A mistyped token is not echoed. */
    char typo[64];
    snprintf(typo, sizeof typo, "%sX", tok);
    it_resp r = call(s, "GET", "/v1/sets", typo, NULL, NULL);
    assert_int_equal(r.status, 401);
    assert_null(strstr(it_body(&r), tok));
    it_resp_free(&r);
    it_srv_stop(s, SIGTERM, WAIT_S);
    /* The token is in no file: config, data dir, server log. */
    assert_false(tree_contains(s->dir, tok));
    assert_false(tree_contains(s->dir, tok + 3)); /* not even without its prefix */

    /* `sluice check` refuses the token where the hash belongs, and says so. */
    char bad[PATH_MAX];
    it_path(bad, s, "bad.lua");
    it_write_file(bad, "server { api_keys = { ci = { sha256 = \"%s\", read = \"*\" } } }\n", tok);
    char *out = NULL, *err = NULL;
    int rc = it_run(s, NULL, &out, &err, (const char *const[]){"check", bad, NULL}, WAIT_S);
    assert_int_equal(rc, 1);
    if (!strstr(out, "never the token itself") && !strstr(err, "never the token itself"))
        fail_msg("check did not explain: %s%s", out, err);
    assert_true(strstr(out, "bad.lua:1:") || strstr(err, "bad.lua:1:"));
    free(out);
    free(err);
    /* A key without sha256, an unknown key, and a bad glob: FILE:LINE each. */
    it_write_file(bad,
                  "server { api_keys = {\n ci = { read = \"*\" },\n x = { sha256 = \"%s\", "
                  "root = true } } }\n",
                  "0000000000000000000000000000000000000000000000000000000000000000");
    rc = it_run(s, NULL, &out, &err, (const char *const[]){"check", bad, NULL}, WAIT_S);
    assert_int_equal(rc, 1);
    const char *all = strstr(out, "needs sha256") ? out : err;
    assert_non_null(strstr(all, "needs sha256"));
    assert_non_null(strstr(all, "unknown key \"root\""));
    free(out);
    free(err);
    s->passed = true;
}

/* ---- key rotation by reload ----------------------------------------------------- */

static void test_reload_keys(void **state)
{
    it_server *s = *state;
    static char cfg[PATH_MAX];
    char ha[65], hb[65];
    hash_of(T_PUB, ha);
    hash_of(T_OPS, hb);
    it_write_config(s, cfg, "server { api_keys = { old = { sha256 = \"%s\", read = \"*\" } } }\n",
                    ha);
    it_start_config(s, cfg, WAIT_S);
    expect(call(s, "GET", "/v1/sets", T_PUB, NULL, NULL), 200, NULL);
    /* Rotate: the new key in, the old one out; SIGHUP. */
    it_write_config(s, cfg, "server { api_keys = { new = { sha256 = \"%s\", read = \"*\" } } }\n",
                    hb);
    kill(s->pid, SIGHUP);
    for (double end = it_mono() + WAIT_S; !it_log_contains(s, "(1 API key)"); it_sleep_ms(20))
        if (it_mono() > end)
            fail_msg("no reload in the log");
    expect(call(s, "GET", "/v1/sets", T_PUB, NULL, NULL), 401, "Unauthorized", NULL);
    expect(call(s, "GET", "/v1/sets", T_OPS, NULL, NULL), 200, NULL);
    /* A reload with a bad key is refused whole: the running keys stay. */
    it_write_config(s, cfg, "server { api_keys = { bad = { sha256 = \"%s\" } } }\n", T_PUB);
    kill(s->pid, SIGHUP);
    for (double end = it_mono() + WAIT_S; !it_log_contains(s, "refused"); it_sleep_ms(20))
        if (it_mono() > end)
            fail_msg("no refused reload in the log");
    assert_false(it_log_contains(s, T_PUB)); /* the token is not logged either */
    expect(call(s, "GET", "/v1/sets", T_OPS, NULL, NULL), 200, NULL);
    /* Dropping every key on loopback opens the API (it is allowed there). */
    it_write_config(s, cfg, "server { }\n");
    kill(s->pid, SIGHUP);
    for (double end = it_mono() + WAIT_S; !it_log_contains(s, "(0 API keys)"); it_sleep_ms(20))
        if (it_mono() > end)
            fail_msg("no reload to zero keys in the log");
    expect(call(s, "GET", "/v1/sets", NULL, NULL, NULL), 200, NULL);
    s->passed = true;
}

/* ---- the CLI sends the key ------------------------------------------------------- */

static void test_cli_key(void **state)
{
    it_server *s = *state;
    static char cfg[PATH_MAX];
    char h[65];
    hash_of(T_PUB, h);
    it_write_config(s, cfg,
                    "server { api_keys = { pub = { sha256 = \"%s\", publish = \"orders\", "
                    "read = \"orders\" } } }\n",
                    h);
    it_start_config(s, cfg, WAIT_S);
    char server[64], in[PATH_MAX];
    snprintf(server, sizeof server, "http://127.0.0.1:%d", s->port);
    it_path(in, s, "in.ndjson");
    it_write_file(in, "{\"a\":1}\n{\"a\":2}\n");
    char *out = NULL, *err = NULL;
    /* No key: refused, with the server's message. */
    unsetenv("SLUICE_API_KEY");
    int rc = it_run(s, in, &out, &err,
                    (const char *const[]){"put", "orders", "--type", "t", "--source", "/s",
                                          "--server", server, NULL},
                    WAIT_S);
    assert_int_not_equal(rc, 0);
    if (!strstr(err, "401"))
        fail_msg("put without a key: %s", err);
    free(out);
    free(err);
    /* --api-key (before and after the operands, and as --api-key=). */
    rc = it_run(s, in, &out, &err,
                (const char *const[]){"put", "--api-key", T_PUB, "orders", "--type", "t",
                                      "--source", "/s", "--server", server, NULL},
                WAIT_S);
    if (rc != 0)
        fail_msg("put --api-key: exit %d: %s", rc, err);
    free(out);
    free(err);
    rc = it_run(s, in, &out, &err,
                (const char *const[]){"put", "orders", "--type", "t", "--source", "/s", "--server",
                                      server, "--api-key=" T_PUB, NULL},
                WAIT_S);
    assert_int_equal(rc, 0);
    free(out);
    free(err);
    /* SLUICE_API_KEY (it_run's child inherits it). */
    setenv("SLUICE_API_KEY", T_PUB, 1);
    rc = it_run(
        s, NULL, &out, &err,
        (const char *const[]){"tail", "orders", "--from", "beginning", "--server", server, NULL},
        WAIT_S);
    unsetenv("SLUICE_API_KEY");
    if (rc != 0)
        fail_msg("tail with SLUICE_API_KEY: exit %d: %s", rc, err);
    int lines = 0;
    for (const char *p = out; (p = strchr(p, '\n')); p++)
        lines++;
    assert_int_equal(lines, 4);
    free(out);
    free(err);
    /* A key without the right: 403 named. */
    rc = it_run(s, NULL, &out, &err,
                (const char *const[]){"tail", "audit", "--from", "beginning", "--server", server,
                                      "--api-key", T_PUB, NULL},
                WAIT_S);
    assert_int_not_equal(rc, 0);
    if (!strstr(err, "403") || !strstr(err, "read"))
        fail_msg("tail of a set without read: %s", err);
    free(out);
    free(err);
    /* --api-key without a value: usage, exit 2. */
    rc = it_run(s, NULL, &out, &err,
                (const char *const[]){"status", "--server", server, "--api-key", NULL}, WAIT_S);
    assert_int_equal(rc, 2);
    free(out);
    free(err);
    s->passed = true;
}

/* ---- listening ---------------------------------------------------------------------- */

static void test_listen(void **state)
{
    it_server *s = *state;
    int port = it_free_port();
    char addr[64], addr6[64];
    snprintf(addr, sizeof addr, "0.0.0.0:%d", port);
    snprintf(addr6, sizeof addr6, "[::]:%d", port);
    /* Open to the network without keys: refused, said why, nothing opened. */
    const char *const *refused[] = {
        (const char *const[]){"serve", "--data", s->data, "--listen", addr, NULL},
        (const char *const[]){"serve", "--data", s->data, "--listen", addr6, NULL},
    };
    for (size_t i = 0; i < 2; i++) {
        char *out = NULL, *err = NULL;
        int rc = it_run(s, NULL, &out, &err, refused[i], WAIT_S);
        assert_int_equal(rc, 1);
        if (!strstr(err, "refusing to listen on") || !strstr(err, "without API keys") ||
            !strstr(err, "insecure"))
            fail_msg("refusal message: %s", err);
        free(out);
        free(err);
        assert_int_equal(it_status_of(port, "/healthz"), 0);
    }
    struct stat st;
    assert_int_not_equal(stat(s->data, &st), 0); /* refused before the data dir was made */

    /* --insecure: starts, warns, answers. */
    int status = 0;
    assert_true(
        start_raw(s, (const char *const[]){"--data", s->data, "--listen", addr, "--insecure", NULL},
                  &status));
    assert_true(it_log_contains(s, "insecure: no API keys on 0.0.0.0"));
    assert_int_equal(it_status_of(port, "/healthz"), 200);
    it_srv_stop(s, SIGTERM, WAIT_S);

    /* insecure = true in the config. */
    static char cfg[PATH_MAX];
    it_write_config(s, cfg, "server { listen = \"%s\", insecure = true }\n", addr);
    assert_true(start_raw(s, (const char *const[]){"-c", cfg, "--data", s->data, NULL}, &status));
    assert_int_equal(it_status_of(port, "/healthz"), 200);
    it_srv_stop(s, SIGTERM, WAIT_S);

    /* Keys: starts without insecure, and says how many. */
    char h[65];
    hash_of(T_OPS, h);
    it_write_config(s, cfg,
                    "server { listen = \"%s\", api_keys = { ops = { sha256 = \"%s\", "
                    "admin = true } } }\n",
                    addr, h);
    assert_true(start_raw(s, (const char *const[]){"-c", cfg, "--data", s->data, NULL}, &status));
    assert_true(it_log_contains(s, "1 API key required"));
    /* Keys without TLS beyond loopback: tokens travel in cleartext, said. */
    assert_true(it_log_contains(s, "API keys travel in cleartext"));
    s->port = port;
    expect(call(s, "GET", "/v1/sets", NULL, NULL, NULL), 401, "Unauthorized", NULL);
    expect(call(s, "GET", "/v1/sets", T_OPS, NULL, NULL), 200, NULL);
    /* The CLI says so too, once, when it sends a key over http:// to a
     * host that is not loopback (0.0.0.0 reaches this machine); not to
     * 127.0.0.1. */
    {
        char srv[64], lo[64];
        snprintf(srv, sizeof srv, "http://0.0.0.0:%d", port);
        snprintf(lo, sizeof lo, "http://127.0.0.1:%d", port);
        char *out = NULL, *err = NULL;
        int rc = it_run(s, NULL, &out, &err,
                        (const char *const[]){"status", "--server", srv, "--api-key", T_OPS, NULL},
                        WAIT_S);
        if (rc != 0 || !strstr(err, "warning: sending an API key over plain http:// to 0.0.0.0"))
            fail_msg("status over http:// to 0.0.0.0: exit %d, stderr: %s", rc, err);
        assert_null(strstr(strstr(err, "warning: sending") + 1, "warning: sending"));
        free(out);
        free(err);
        rc = it_run(s, NULL, &out, &err,
                    (const char *const[]){"status", "--server", lo, "--api-key", T_OPS, NULL},
                    WAIT_S);
        assert_int_equal(rc, 0);
        assert_null(strstr(err, "warning"));
        free(out);
        free(err);
    }
    it_srv_stop(s, SIGTERM, WAIT_S);

    /* --listen localhost:PORT is 127.0.0.1 (loopback, no keys needed). */
    char lh[64];
    snprintf(lh, sizeof lh, "localhost:%d", port);
    assert_true(
        start_raw(s, (const char *const[]){"--data", s->data, "--listen", lh, NULL}, &status));
    assert_int_equal(it_status_of(port, "/healthz"), 200);
    it_srv_stop(s, SIGTERM, WAIT_S);

    /* The embedded default: loopback, and it says so. */
    it_srv_start(s, NULL);
    assert_true(it_log_contains(s, "(loopback only), no API keys"));
    s->passed = true;
}

/* ---- TLS ---------------------------------------------------------------------------- */

/* A request over HTTPS with libcurl; ca NULL: the system CAs. Returns the
 * status, 0 when the exchange failed (*cerr gets the curl code). */
static long https_get(int port, const char *path, const char *ca, CURLcode *cerr)
{
    CURL *c = curl_easy_init();
    char url[256];
    snprintf(url, sizeof url, "https://127.0.0.1:%d%s", port, path);
    FILE *sink = fopen("/dev/null", "w");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, sink);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    if (ca)
        curl_easy_setopt(c, CURLOPT_CAINFO, ca);
    *cerr = curl_easy_perform(c);
    long st = 0;
    if (*cerr == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
    curl_easy_cleanup(c);
    fclose(sink);
    return st;
}

static void test_tls(void **state)
{
    it_server *s = *state;
    char *cert_pem = NULL, *key_pem = NULL, *other_cert = NULL, *other_key = NULL;
    assert_int_equal(rx_make_cert("127.0.0.1", &cert_pem, &key_pem), 0);
    assert_int_equal(rx_make_cert("127.0.0.1", &other_cert, &other_key), 0);
    char cert[PATH_MAX], key[PATH_MAX], okey[PATH_MAX], missing[PATH_MAX];
    it_path(cert, s, "cert.pem");
    it_path(key, s, "key.pem");
    it_path(okey, s, "other-key.pem");
    it_path(missing, s, "missing.pem");
    it_write_file(cert, "%s", cert_pem);
    it_write_file(key, "%s", key_pem);
    it_write_file(okey, "%s", other_key);
    free(cert_pem);
    free(key_pem);
    free(other_cert);
    free(other_key);
    int port = it_free_port();
    char listen[64];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", port);

    /* Bad files refuse to start, naming the file. */
    struct {
        const char *c, *k, *says;
    } bad[] = {
        {missing, key, "missing.pem"},
        {cert, missing, "missing.pem"},
        {key, key, "is not a PEM certificate"},
        {cert, cert, "is not an unencrypted PEM private key"},
        {cert, okey, "does not belong to certificate"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int status = -1;
        assert_false(
            start_raw(s,
                      (const char *const[]){"--data", s->data, "--listen", listen, "--tls-cert",
                                            bad[i].c, "--tls-key", bad[i].k, NULL},
                      &status));
        assert_int_equal(status, 1);
        if (!it_log_contains(s, bad[i].says))
            fail_msg("case %zu: the log does not say \"%s\"", i, bad[i].says);
    }
    assert_true(it_log_contains(s, "other-key.pem"));

    /* A good pair (flags): HTTPS with the CA; without it, refused. */
    int status = 0;
    assert_true(start_raw(s,
                          (const char *const[]){"--data", s->data, "--listen", listen, "--tls-cert",
                                                cert, "--tls-key", key, NULL},
                          &status));
    assert_true(it_log_contains(s, "listening on https://127.0.0.1"));
    CURLcode ce;
    assert_int_equal(https_get(port, "/healthz", cert, &ce), 200);
    assert_int_equal(https_get(port, "/healthz", NULL, &ce), 0);
    assert_int_equal(ce, CURLE_PEER_FAILED_VERIFICATION);
    /* Plain HTTP on the TLS port gets no answer. */
    assert_int_equal(it_status_of(port, "/healthz"), 0);

    /* The CLI: put and status over https with --cacert / SLUICE_CA_FILE. */
    char server[64], in[PATH_MAX];
    snprintf(server, sizeof server, "https://127.0.0.1:%d", port);
    it_path(in, s, "in.ndjson");
    it_write_file(in, "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n");
    char *out = NULL, *err = NULL;
    int rc = it_run(s, in, &out, &err,
                    (const char *const[]){"put", "tls", "--type", "t", "--source", "/s", "--server",
                                          server, "--cacert", cert, NULL},
                    WAIT_S);
    if (rc != 0)
        fail_msg("put over https: exit %d: %s", rc, err);
    free(out);
    free(err);
    rc =
        it_run(s, NULL, &out, &err,
               (const char *const[]){"status", "--server", server, "--cacert", cert, NULL}, WAIT_S);
    if (rc != 0 || !strstr(out, "tls"))
        fail_msg("status --cacert: exit %d: %s%s", rc, out, err);
    free(out);
    free(err);
    rc = it_run(s, NULL, &out, &err, (const char *const[]){"status", "--server", server, NULL},
                WAIT_S);
    assert_int_equal(rc, 1);
    if (!strstr(err, "certificate"))
        fail_msg("status without the CA: %s", err);
    free(out);
    free(err);
    setenv("SLUICE_CA_FILE", cert, 1);
    rc = it_run(
        s, NULL, &out, &err,
        (const char *const[]){"tail", "tls", "--from", "beginning", "--server", server, NULL},
        WAIT_S);
    unsetenv("SLUICE_CA_FILE");
    if (rc != 0)
        fail_msg("tail with SLUICE_CA_FILE: exit %d: %s", rc, err);
    int lines = 0;
    for (const char *p = out; (p = strchr(p, '\n')); p++)
        lines++;
    assert_int_equal(lines, 3);
    free(out);
    free(err);
    it_srv_stop(s, SIGTERM, WAIT_S);

    /* The config's tls_cert/tls_key, relative to the config file. */
    static char cfg[PATH_MAX];
    it_write_config(s, cfg, "server { tls_cert = \"cert.pem\", tls_key = \"key.pem\" }\n");
    assert_true(start_raw(
        s, (const char *const[]){"-c", cfg, "--data", s->data, "--listen", listen, NULL}, &status));
    assert_int_equal(https_get(port, "/healthz", cert, &ce), 200);
    s->passed = true;
}

/* ---- input limits -------------------------------------------------------------------- */

/* n NDJSON events with ids PREFIX-i. */
static char *ndjson(const char *prefix, int n)
{
    sl_buf b = SL_BUF_INIT;
    for (int i = 0; i < n; i++)
        sl_buf_printf(&b,
                      "{\"specversion\":\"1.0\",\"id\":\"%s-%d\",\"source\":\"/sec\","
                      "\"type\":\"t\"}\n",
                      prefix, i);
    sl_buf_append(&b, "", 1);
    return (char *)b.data;
}

/* A structured event whose data nests depth arrays. */
static char *deep_event(int depth)
{
    sl_buf b = SL_BUF_INIT;
    sl_buf_printf(&b, "{\"specversion\":\"1.0\",\"id\":\"deep\",\"source\":\"/sec\","
                      "\"type\":\"t\",\"data\":");
    for (int i = 0; i < depth; i++)
        sl_buf_append(&b, "[", 1);
    for (int i = 0; i < depth; i++)
        sl_buf_append(&b, "]", 1);
    sl_buf_append(&b, "}", 2);
    return (char *)b.data;
}

/* A TCP connection to the server that sends nothing; -1 when refused. */
static int idle_conn(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
        close(fd);
        return -1;
    }
    return fd;
}

static void test_limits(void **state)
{
    it_server *s = *state;
    static char cfg[PATH_MAX];
    it_write_config(s, cfg,
                    "server { max_request = \"4KiB\", max_batch = 5, max_connections = 3,\n"
                    "         set_defaults = { max_event = \"512B\", partitions = 1 } }\n");
    it_start_config(s, cfg, WAIT_S);
    /* Earlier accepted data. */
    char *five = ndjson("ok", 5);
    expect(it_post(s, "lim", IT_CT_NDJSON, NULL, five, SIZE_MAX), 200, NULL);
    free(five);

    /* Batch count: 6 events over a limit of 5. */
    char *six = ndjson("six", 6);
    expect(it_post(s, "lim", IT_CT_NDJSON, NULL, six, SIZE_MAX), 413, "TooManyEvents", "6 events",
           "limit of 5", "max_batch", NULL);
    sl_buf batch = SL_BUF_INIT;
    sl_buf_append(&batch, "[", 1);
    for (int i = 0; i < 6; i++)
        sl_buf_printf(&batch, "%s" EV("b"), i ? "," : "");
    sl_buf_append(&batch, "]", 2);
    expect(it_post(s, "lim", IT_CT_BATCH, NULL, (const char *)batch.data, SIZE_MAX), 413,
           "TooManyEvents", "6 events", NULL);
    sl_buf_free(&batch);
    free(six);
    /* Exactly the limit passes, with commas and brackets inside strings and
     * data (counted as the JSON says, not by the bytes). */
    sl_buf five_b = SL_BUF_INIT;
    sl_buf_append(&five_b, "[", 1);
    for (int i = 0; i < 5; i++)
        sl_buf_printf(&five_b,
                      "%s {\"specversion\":\"1.0\",\"id\":\"c%d\",\"source\":\"/s,[\",\"type\":"
                      "\"t\\\",],\",\"data\":[[1,2],{\"a\":\"]],,\"}]}",
                      i ? "," : "", i);
    sl_buf_append(&five_b, "]", 2);
    {
        it_resp r = it_post(s, "lim2", IT_CT_BATCH, NULL, (const char *)five_b.data, SIZE_MAX);
        json_decref(it_expect_results(&r, 5, 0));
        it_resp_free(&r);
    }
    sl_buf_free(&five_b);

    /* Request size: over 4 KiB. */
    char *big = ndjson("big", 100); /* ~100 * 70 bytes */
    assert_true(strlen(big) > 4096);
    expect(it_post(s, "lim", IT_CT_NDJSON, NULL, big, SIZE_MAX), 413, "RequestTooLarge", "4096",
           NULL);
    free(big);

    /* Event size: refused alone (per event), the request's others stored. */
    sl_buf ev = SL_BUF_INIT;
    sl_buf_printf(&ev, "{\"specversion\":\"1.0\",\"id\":\"fat\",\"source\":\"/sec\",\"type\":\"t\","
                       "\"data\":\"");
    for (int i = 0; i < 700; i++)
        sl_buf_append(&ev, "x", 1);
    sl_buf_printf(&ev, "\"}\n" EV("thin") "\n");
    sl_buf_append(&ev, "", 1);
    {
        it_resp r = it_post(s, "lim", IT_CT_NDJSON, NULL, (const char *)ev.data, SIZE_MAX);
        json_t *a = it_expect_results(&r, 1, 1);
        json_t *e = it_result(a, 0);
        assert_string_equal(json_string_value(json_object_get(e, "error")), "TooLarge");
        assert_non_null(strstr(json_string_value(json_object_get(e, "message")), "512"));
        json_decref(a);
        it_resp_free(&r);
    }
    sl_buf_free(&ev);

    /* Header size: past libmicrohttpd's 64 KiB of connection memory the
     * client gets 431. */
    {
        size_t n = 70000;
        char *h = malloc(n + 16);
        memcpy(h, "X-Big: ", 7);
        memset(h + 7, 'a', n);
        h[7 + n] = '\0';
        const char *hdrs[] = {h, NULL};
        it_call k = {.method = "GET", .path = "/healthz", .hdrs = hdrs};
        it_resp r;
        it_http(NULL, s->port, &k, &r);
        assert_int_equal(r.status, 431);
        it_resp_free(&r);
        /* The same as a publish: nothing stored. */
        it_call p = {.method = "POST",
                     .path = "/v1/sets/lim/events",
                     .ctype = IT_CT_CE,
                     .hdrs = hdrs,
                     .body = EV("hdr"),
                     .len = strlen(EV("hdr"))};
        it_http(NULL, s->port, &p, &r);
        assert_int_equal(r.status, 431);
        it_resp_free(&r);
        free(h);
    }

    /* JSON depth: an event nested past 64 levels is refused and says the
     * depth (the one event of a structured request: its 400 is the
     * answer); a body past 1024 levels is refused whole (400). */
    {
        char *d = deep_event(70);
        expect(it_post(s, "lim", IT_CT_CE, NULL, d, SIZE_MAX), 400, "InvalidJson",
               "nesting deeper than 64", NULL);
        /* As an NDJSON line it fails alone, in the results. */
        it_resp r = it_post(s, "lim", IT_CT_NDJSON, NULL, d, SIZE_MAX);
        json_t *a = it_expect_results(&r, 0, 1);
        json_t *e = it_result(a, 0);
        assert_string_equal(json_string_value(json_object_get(e, "error")), "InvalidJson");
        assert_non_null(
            strstr(json_string_value(json_object_get(e, "message")), "nesting deeper than 64"));
        json_decref(a);
        it_resp_free(&r);
        free(d);
        d = deep_event(2000); /* 4000 bytes and the event: under max_request */
        expect(it_post(s, "lim", IT_CT_CE, NULL, d, SIZE_MAX), 400, "InvalidJson",
               "nesting deeper than 1024", NULL);
        free(d);
        sl_buf b = SL_BUF_INIT;
        sl_buf_append(&b, "[", 1);
        for (int i = 0; i < 1100; i++)
            sl_buf_append(&b, "[", 1);
        for (int i = 0; i < 1100; i++)
            sl_buf_append(&b, "]", 1);
        sl_buf_append(&b, "]", 2);
        expect(it_post(s, "lim", IT_CT_BATCH, NULL, (const char *)b.data, SIZE_MAX), 400,
               "InvalidJson", "nesting deeper than", NULL);
        sl_buf_free(&b);
    }

    /* Connection count: three idle connections fill max_connections = 3;
     * one more request gets 503 and its connection closed. */
    int fds[3];
    for (int i = 0; i < 3; i++)
        assert_true((fds[i] = idle_conn(s->port)) >= 0);
    /* The server's threads accept them when they get to it (a busy machine
     * may take a while): ask until the cap shows. */
    it_resp cr = {0};
    for (double end = it_mono() + WAIT_S; it_mono() < end; it_sleep_ms(20)) {
        cr = it_get(s, "/v1/sets/lim");
        if (cr.status == 503)
            break;
        it_resp_free(&cr);
    }
    expect(cr, 503, "TooManyConnections", "3 connections", NULL);
    for (int i = 0; i < 3; i++)
        close(fds[i]);

    /* Everything accepted is there (5 + thin), nothing refused is. */
    for (int i = 0; i < 500 && it_status_of(s->port, "/v1/sets/lim") != 200; i++)
        it_sleep_ms(10); /* the idle connections' slots free up */
    assert_int_equal(events_in(s, "lim", NULL), 6);
    it_evs e = it_read_all(s, "lim", 0, "*");
    assert_int_equal(e.n, 6);
    for (size_t i = 0; i < e.n; i++)
        assert_true(strncmp(e.v[i].id, "ok-", 3) == 0 || strcmp(e.v[i].id, "thin") == 0);
    it_evs_free(&e);
    it_srv_stop(s, SIGTERM, WAIT_S);

    /* Per-IP connections are refused at accept: idle connections from one
     * address (127.0.0.2) cannot take the server's slots from others. */
    it_write_config(s, cfg, "server { max_connections = 4, max_connections_per_ip = 2 }\n");
    it_start_config(s, cfg, WAIT_S);
    int held[16], nheld = 0;
    bool refused = false;
    char text[4096];
    char get[128];
    snprintf(get, sizeof get, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", s->port);
    /* Each connection answers once (so it is counted), then stays open;
     * the one past the limit is closed without an answer. */
    while (nheld < 16 && !refused) {
        int fd = conn_from(s->port, "127.0.0.2");
        assert_true(fd >= 0);
        long st = raw_exchange(fd, get, text, sizeof text);
        if (st == 0) {
            refused = true;
            close(fd);
        } else if (st == 200) {
            held[nheld++] = fd;
        } else {
            fail_msg("connection %d from 127.0.0.2: want 200 or closed at accept, got %ld:\n%s",
                     nheld + 1, st, text);
        }
    }
    if (!refused || nheld != 2)
        fail_msg("127.0.0.2 holds %d connections (limit 2), refused: %d", nheld, refused);
    /* More from 127.0.0.2 are refused too, and take no slot. */
    for (int i = 0; i < 6; i++) {
        int fd = conn_from(s->port, "127.0.0.2");
        assert_true(fd >= 0);
        assert_int_equal(raw_exchange(fd, get, text, sizeof text), 0);
        close(fd);
    }
    /* Another address still gets in (4 connections allowed, 2 in use). */
    expect(it_get(s, "/healthz"), 200, NULL);
    for (int i = 0; i < nheld; i++)
        close(held[i]);
    long st = 0;
    for (int i = 0; i < 500 && (st = it_status_of(s->port, "/healthz")) != 200; i++)
        it_sleep_ms(10);
    assert_int_equal(st, 200);
    s->passed = true;
}

/* ---- body memory: strangers get a share -------------------------------------------- */

/* Uploads to a webhook (no key needed) that stall before their end cannot
 * take the body memory key holders need: they share a quarter of it. */
static void test_body_share(void **state)
{
    it_server *s = *state;
    static char cfg[PATH_MAX];
    char hp[65];
    hash_of(T_PUB, hp);
    it_write_config(s, cfg,
                    "server { max_body_memory = \"1MiB\", max_request = \"512KiB\",\n"
                    "  api_keys = { pub = { sha256 = \"%s\", publish = \"orders\" } } }\n"
                    "set \"gh\" { }\n"
                    "source.webhook { name = \"gh\", preset = \"github\", secret = \"s3\", "
                    "set = \"gh\" }\n",
                    hp);
    it_start_config(s, cfg, WAIT_S);
    /* Six uploads of 200 KiB each (1.2 MB, over the whole 1 MiB), each
     * announcing 500000 bytes: the server holds what came, waiting for more. */
    enum { N = 6, PART = 200 << 10 };
    char *chunk = malloc(PART);
    assert_non_null(chunk);
    memset(chunk, ' ', PART);
    int fds[N];
    for (int i = 0; i < N; i++) {
        assert_true((fds[i] = conn_from(s->port, NULL)) >= 0);
        char head[256];
        snprintf(head, sizeof head,
                 "POST /v1/webhooks/gh HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                 "Content-Type: application/json\r\nContent-Length: 500000\r\n\r\n",
                 s->port);
        assert_true(send(fds[i], head, strlen(head), MSG_NOSIGNAL) == (ssize_t)strlen(head));
        for (size_t off = 0; off < PART;) {
            ssize_t k = send(fds[i], chunk + off, PART - off, MSG_NOSIGNAL);
            assert_true(k > 0);
            off += (size_t)k;
        }
    }
    /* A key holder's 200 KiB event still fits. */
    sl_buf ev = SL_BUF_INIT;
    sl_buf_printf(&ev, "{\"specversion\":\"1.0\",\"id\":\"big\",\"source\":\"/sec\","
                       "\"type\":\"t\",\"data\":\"");
    for (int i = 0; i < PART / 64; i++)
        sl_buf_append(&ev, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", 64);
    sl_buf_append(&ev, "\"}", 3);
    for (int i = 0; i < 3; i++) /* more than once: the uploads are surely in by then */
        expect(call(s, "POST", "/v1/sets/orders/events", T_PUB, IT_CT_CE, (const char *)ev.data),
               200, NULL);
    sl_buf_free(&ev);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    free(chunk);
    s->passed = true;
}

/* ---- host / origin (no keys, loopback) ---------------------------------------------- */

/* call() with more headers (NULL-terminated). */
static it_resp call_h(it_server *s, const char *method, const char *path, const char *const *hdrs,
                      const char *body)
{
    it_call k = {.method = method,
                 .path = path,
                 .ctype = body ? IT_CT_CE : NULL,
                 .hdrs = hdrs,
                 .body = body,
                 .len = body ? strlen(body) : 0};
    it_resp r;
    it_http(NULL, s->port, &k, &r);
    return r;
}

static void test_host(void **state)
{
    it_server *s = *state;
    it_srv_start(s, NULL);
    char own[96], own_lh[96], own6[96], lh[96], origin[128], other_port[128];
    snprintf(own, sizeof own, "Host: 127.0.0.1:%d", s->port);
    snprintf(own_lh, sizeof own_lh, "Host: LocalHost:%d", s->port);
    snprintf(own6, sizeof own6, "Host: [::1]:%d", s->port);
    snprintf(lh, sizeof lh, "Host: localhost");
    snprintf(origin, sizeof origin, "Origin: http://localhost:%d", s->port);
    snprintf(other_port, sizeof other_port, "Origin: http://127.0.0.1:%d", s->port == 1 ? 2 : 1);
    /* DNS rebinding: a page of evil.example whose name now resolves to
     * 127.0.0.1 sends Host: evil.example. */
    expect(
        call_h(s, "GET", "/v1/sets", (const char *const[]){"Host: evil.example:8080", NULL}, NULL),
        403, "Forbidden", "evil.example:8080", "loopback", NULL);
    expect(call_h(s, "POST", "/v1/sets/h/events",
                  (const char *const[]){"Host: 127.0.0.1.evil.example", NULL}, EV("x0")),
           403, "Forbidden", NULL);
    expect(call_h(s, "GET", "/v1/sets", (const char *const[]){"Host: 10.0.0.1", NULL}, NULL), 403,
           "Forbidden", NULL);
    /* Loopback names, with or without a port. */
    expect(call_h(s, "GET", "/v1/sets", (const char *const[]){own, NULL}, NULL), 200, NULL);
    expect(call_h(s, "GET", "/v1/sets", (const char *const[]){own_lh, NULL}, NULL), 200, NULL);
    expect(call_h(s, "GET", "/v1/sets", (const char *const[]){own6, NULL}, NULL), 200, NULL);
    expect(call_h(s, "GET", "/v1/sets", (const char *const[]){lh, NULL}, NULL), 200, NULL);
    expect(call_h(s, "GET", "/healthz", (const char *const[]){"Host: 127.3.4.5", NULL}, NULL), 200,
           NULL);
    /* Cross-site writes: a foreign Origin is refused, the server's own
     * (the console's) and none (curl, the CLI) pass. */
    expect(call_h(s, "POST", "/v1/sets/h/events",
                  (const char *const[]){"Origin: http://evil.example", NULL}, EV("x1")),
           403, "Forbidden", "evil.example", NULL);
    expect(call_h(s, "POST", "/v1/sets/h/events", (const char *const[]){"Origin: null", NULL},
                  EV("x2")),
           403, "Forbidden", NULL);
    expect(
        call_h(s, "POST", "/v1/sets/h/events", (const char *const[]){other_port, NULL}, EV("x3")),
        403, "Forbidden", NULL);
    expect(call_h(s, "POST", "/v1/sets/h/events", (const char *const[]){origin, NULL}, EV("ok1")),
           200, NULL);
    expect(call_h(s, "POST", "/v1/sets/h/events", NULL, EV("ok2")), 200, NULL);
    /* A GET with a foreign Origin is answered (the browser keeps the
     * answer from the page: no CORS headers). */
    expect(call_h(s, "GET", "/v1/sets/h",
                  (const char *const[]){"Origin: http://evil.example", NULL}, NULL),
           200, NULL);
    /* Only the allowed ones were stored; the CLI still works. */
    assert_int_equal(events_in(s, "h", NULL), 2);
    char server[64];
    snprintf(server, sizeof server, "http://127.0.0.1:%d", s->port);
    char *out = NULL, *err = NULL;
    int rc = it_run(s, NULL, &out, &err, (const char *const[]){"status", "--server", server, NULL},
                    WAIT_S);
    if (rc != 0)
        fail_msg("sluice status: exit %d: %s", rc, err);
    free(out);
    free(err);
    s->passed = true;
}

/* sluice_http_requests_total{code="429"} from /metrics (no keys). */
static long count_429(it_server *s)
{
    it_resp r = it_get(s, "/metrics");
    assert_int_equal(r.status, 200);
    const char *p = strstr(it_body(&r), "sluice_http_requests_total{code=\"429\"} ");
    long n = p ? atol(p + strlen("sluice_http_requests_total{code=\"429\"} ")) : 0;
    it_resp_free(&r);
    return n;
}

/* ---- rate ---------------------------------------------------------------------------- */

static void test_rate(void **state)
{
    it_server *s = *state;
    static char cfg[PATH_MAX];
    /* 2 events a second, 10 at once; acks from the buffer so that the
     * requests follow each other closely (a refill between them is fine:
     * the second one needs 4 tokens, which take 2 s to come back). */
    it_write_config(s, cfg,
                    "server { rate = 2, burst = 10, set_defaults = { ack = \"buffer\" } }\n");
    it_start_config(s, cfg, WAIT_S);
    char *ten = ndjson("r", 10), *four = ndjson("f", 4);
    expect(it_post(s, "rate", IT_CT_NDJSON, NULL, ten, SIZE_MAX), 200, NULL);
    free(ten);
    it_resp r = it_post(s, "rate", IT_CT_NDJSON, NULL, four, SIZE_MAX);
    if (r.status != 429)
        fail_msg("want 429, got %ld: %s", r.status, it_body(&r));
    it_expect_error(&r, 429, "TooManyRequests");
    assert_non_null(strstr(it_body(&r), "rate of 2 events a second (burst 10)"));
    assert_non_null(strstr(it_body(&r), "nothing from this request was stored"));
    int wait = atoi(r.retry_after);
    assert_true(wait >= 1 && wait <= 2);
    it_resp_free(&r);
    wait_events(s, "rate", NULL, 10);
    /* Retry-After is honest: waiting it is enough for the same request. */
    it_sleep_ms(wait * 1000L);
    expect(it_post(s, "rate", IT_CT_NDJSON, NULL, four, SIZE_MAX), 200, NULL);
    free(four);
    wait_events(s, "rate", NULL, 14);
    /* `sluice put` waits for Retry-After on a 429 and sends again. */
    char in[PATH_MAX], server[64];
    it_path(in, s, "in.ndjson");
    it_write_file(in, "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n");
    snprintf(server, sizeof server, "http://127.0.0.1:%d", s->port);
    /* The bucket is nearly empty: 10 events need 10 tokens (5 s away). */
    char *junk = ndjson("j", 10);
    expect(it_post(s, "rate", IT_CT_NDJSON, NULL, junk, SIZE_MAX), 429, "TooManyRequests", NULL);
    free(junk);
    long before = count_429(s);
    char *out = NULL, *err = NULL;
    int rc = it_run(s, in, &out, &err,
                    (const char *const[]){"put", "rate", "--type", "t", "--source", "/s",
                                          "--server", server, NULL},
                    WAIT_S);
    if (rc != 0)
        fail_msg("put at the rate limit: exit %d: %s", rc, err);
    free(out);
    free(err);
    wait_events(s, "rate", NULL, 17);
    /* It did meet a 429 (3 events need 3 tokens, 1.5 s away) and got over it. */
    assert_true(count_429(s) > before);
    it_srv_stop(s, SIGTERM, WAIT_S);

    /* With keys: one bucket per key. */
    char ha[65], hb[65];
    hash_of(T_PUB, ha);
    hash_of(T_OPS, hb);
    it_write_config(s, cfg,
                    "server { rate = 1, burst = 5, api_keys = {\n"
                    "  a = { sha256 = \"%s\", publish = \"*\", read = \"*\" },\n"
                    "  b = { sha256 = \"%s\", publish = \"*\" } } }\n",
                    ha, hb);
    it_start_config(s, cfg, WAIT_S);
    char *five = ndjson("k", 5);
    expect(call(s, "POST", "/v1/sets/rk/events", T_PUB, IT_CT_NDJSON, five), 200, NULL);
    expect(call(s, "POST", "/v1/sets/rk/events", T_PUB, IT_CT_NDJSON, five), 429, "TooManyRequests",
           "\\\"a\\\"", NULL);
    expect(call(s, "POST", "/v1/sets/rk/events", T_OPS, IT_CT_NDJSON, five), 200, NULL);
    free(five);
    assert_int_equal(events_in(s, "rk", T_PUB), 10);
    s->passed = true;
}

int main(void)
{
    if (it_init("test_security"))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_rights, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_no_plaintext, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_reload_keys, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_cli_key, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_listen, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_tls, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_limits, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_rate, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_host, it_setup, it_teardown),
        cmocka_unit_test_setup_teardown(test_body_share, it_setup, it_teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
