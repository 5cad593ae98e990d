/*
 * tests/integration/test_kafka_rdkafka.c — librdkafka programs against
 * sluice's Kafka listener (docs/kafka-protocol.md):
 *
 *   idempotence  an idempotent producer (acks=all, 5 requests in flight)
 *                writes through a TCP proxy that drops connections right
 *                after passing a Produce request on, so the answers of
 *                stored batches are lost and the client sends them again:
 *                every record is stored exactly once, in order per
 *                partition, and sluice counted the duplicates it recognised;
 *   commits      a high-level consumer reads half, commits and closes; the
 *                next member of the group reads exactly the other half.
 *
 * The proxy is sluice's advertised address (server.kafka_advertised), so
 * every connection the client makes, bootstrap or not, goes through it.
 */
#include "itest.h"

#include <librdkafka/rdkafka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define N_RECORDS 10000
#define N_PARTS 3

/* ---- the proxy ------------------------------------------------------------- */

typedef struct proxy {
    int lfd, port, upstream;
    _Atomic bool stop, chaos;
    _Atomic int drops; /* connections dropped right after a Produce went up */
    pthread_t tid;
} proxy;

typedef struct pair {
    int c, u;
} pair;

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Moves bytes both ways for up to 64 connections; with chaos, a chunk
 * from the client that starts a Produce request (api key 0 after the
 * size) is passed on and then, one time in four (12 times at most), both
 * sides are closed: the server stores the batch, the client never hears
 * of it. */
static void *proxy_main(void *arg)
{
    proxy *p = arg;
    pair prs[64];
    int n = 0;
    char buf[65536];
    unsigned seed = 7;
    while (!atomic_load(&p->stop)) {
        struct pollfd fds[1 + 128];
        fds[0] = (struct pollfd){.fd = p->lfd, .events = POLLIN};
        for (int i = 0; i < n; i++) {
            fds[1 + 2 * i] = (struct pollfd){.fd = prs[i].c, .events = POLLIN};
            fds[2 + 2 * i] = (struct pollfd){.fd = prs[i].u, .events = POLLIN};
        }
        if (poll(fds, (nfds_t)(1 + 2 * n), 100) <= 0)
            continue;
        if ((fds[0].revents & POLLIN) && n < 64) {
            int c = accept(p->lfd, NULL, NULL);
            int u = c >= 0 ? connect_to(p->upstream) : -1;
            if (u >= 0)
                prs[n++] = (pair){c, u};
            else if (c >= 0)
                close(c);
        }
        for (int i = 0; i < n; i++) {
            bool dead = false;
            for (int side = 0; side < 2 && !dead; side++) {
                struct pollfd *f = &fds[1 + 2 * i + side];
                if (!(f->revents & (POLLIN | POLLHUP | POLLERR)))
                    continue;
                int from = side ? prs[i].u : prs[i].c, to = side ? prs[i].c : prs[i].u;
                ssize_t got = recv(from, buf, sizeof buf, 0);
                if (got <= 0 || send(to, buf, (size_t)got, MSG_NOSIGNAL) != got) {
                    dead = true;
                    break;
                }
                bool produce = side == 0 && got >= 6 && buf[4] == 0 && buf[5] == 0;
                if (produce && atomic_load(&p->chaos) && atomic_load(&p->drops) < 12 &&
                    rand_r(&seed) % 4 == 0) {
                    usleep(2000); /* let it reach the server first */
                    atomic_fetch_add(&p->drops, 1);
                    dead = true;
                }
            }
            if (dead) {
                close(prs[i].c);
                close(prs[i].u);
                prs[i] = prs[--n];
                i--;
                break; /* fds no longer match prs: poll again */
            }
        }
    }
    for (int i = 0; i < n; i++) {
        close(prs[i].c);
        close(prs[i].u);
    }
    return NULL;
}

static void proxy_start(proxy *p, int upstream)
{
    p->upstream = upstream;
    p->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(p->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    assert_int_equal(bind(p->lfd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(p->lfd, 64), 0);
    socklen_t sl = sizeof a;
    getsockname(p->lfd, (struct sockaddr *)&a, &sl);
    p->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&p->tid, NULL, proxy_main, p), 0);
}

static void proxy_stop(proxy *p)
{
    atomic_store(&p->stop, true);
    pthread_join(p->tid, NULL);
    close(p->lfd);
}

/* ---- fixtures --------------------------------------------------------------- */

typedef struct fx {
    it_server *s;
    proxy px;
    int kport;
    char boot[64];
} fx;

static int setup(void **state)
{
    it_setup(state);
    fx *f = calloc(1, sizeof *f);
    f->s = *state;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    void *s = f->s;
    if (f->px.lfd > 0)
        proxy_stop(&f->px);
    free(f);
    return it_teardown(&s);
}

/* sluice with its Kafka listener advertised as the proxy. */
static void start(fx *f)
{
    f->kport = it_free_port();
    proxy_start(&f->px, f->kport);
    char cfg[PATH_MAX], text[512];
    snprintf(cfg, sizeof cfg, "%s/sluice.lua", f->s->dir);
    snprintf(text, sizeof text,
             "server { kafka_listen = \"127.0.0.1:%d\", kafka_advertised = \"127.0.0.1:%d\" }\n"
             "set \"idem\" { partitions = %d }\n",
             f->kport, f->px.port, N_PARTS);
    FILE *fp = fopen(cfg, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
    static char cfg_arg[PATH_MAX];
    snprintf(cfg_arg, sizeof cfg_arg, "%s", cfg);
    it_srv_start(f->s, "-c", cfg_arg, NULL);
    snprintf(f->boot, sizeof f->boot, "127.0.0.1:%d", f->px.port);
}

static rd_kafka_conf_t *conf(const char *boot, const char *const *kv)
{
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    char es[256];
    assert_int_equal(rd_kafka_conf_set(c, "bootstrap.servers", boot, es, sizeof es),
                     RD_KAFKA_CONF_OK);
    for (; kv && kv[0]; kv += 2)
        if (rd_kafka_conf_set(c, kv[0], kv[1], es, sizeof es) != RD_KAFKA_CONF_OK)
            fail_msg("%s=%s: %s", kv[0], kv[1], es);
    return c;
}

static _Atomic int delivered, failed;

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    (void)opaque;
    if (m->err) {
        if (atomic_fetch_add(&failed, 1) < 3)
            fprintf(stderr, "delivery failed: %s\n", rd_kafka_err2str(m->err));
    } else {
        atomic_fetch_add(&delivered, 1);
    }
}

/* Reads every record of the set from the beginning: seen[i] counts record
 * i; per partition the numbers must rise (idempotence keeps the order). */
static void read_all(fx *f, int *seen)
{
    rd_kafka_conf_t *c = conf(f->boot, (const char *const[]){"group.id", "verify",
                                                             "enable.partition.eof", "true",
                                                             "enable.auto.commit", "false", NULL});
    char es[256];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, es, sizeof es);
    assert_non_null(rk);
    rd_kafka_topic_partition_list_t *tl = rd_kafka_topic_partition_list_new(N_PARTS);
    for (int p = 0; p < N_PARTS; p++)
        rd_kafka_topic_partition_list_add(tl, "idem", p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    assert_int_equal(rd_kafka_assign(rk, tl), 0);
    rd_kafka_topic_partition_list_destroy(tl);
    int eof = 0, last[N_PARTS] = {-1, -1, -1};
    double until = it_mono() + 60 * it_scale();
    while (eof < N_PARTS && it_mono() < until) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 500);
        if (!m)
            continue;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            eof++;
        } else if (!m->err) {
            char v[32] = "";
            memcpy(v, m->payload, m->len < 31 ? m->len : 31);
            int i = atoi(v + 4);
            assert_true(i >= 0 && i < N_RECORDS);
            seen[i]++;
            if (i <= last[m->partition])
                fail_msg("partition %d: record %d after %d", (int)m->partition, i,
                         last[m->partition]);
            last[m->partition] = i;
        }
        rd_kafka_message_destroy(m);
    }
    assert_int_equal(eof, N_PARTS);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
}

static void test_idempotence(void **state)
{
    fx *f = *state;
    start(f);
    atomic_store(&delivered, 0);
    atomic_store(&failed, 0);
    rd_kafka_conf_t *c = conf(f->boot, (const char *const[]){
        "enable.idempotence", "true", "acks", "all", "linger.ms", "5", "batch.num.messages", "200",
        "max.in.flight.requests.per.connection", "5", "retry.backoff.ms", "20",
        "message.timeout.ms", "120000", "reconnect.backoff.ms", "10",
        "reconnect.backoff.max.ms", "200", NULL});
    rd_kafka_conf_set_dr_msg_cb(c, on_delivery);
    char es[256];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, es, sizeof es);
    assert_non_null(rk);
    atomic_store(&f->px.chaos, true);
    for (int i = 0; i < N_RECORDS; i++) {
        char key[16], val[32];
        snprintf(key, sizeof key, "k%d", i % 11);
        snprintf(val, sizeof val, "rec-%d", i);
        rd_kafka_resp_err_t e;
        while ((e = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC("idem"),
                                      RD_KAFKA_V_PARTITION(i % N_PARTS),
                                      RD_KAFKA_V_KEY(key, strlen(key)),
                                      RD_KAFKA_V_VALUE(val, strlen(val)),
                                      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END)) ==
               RD_KAFKA_RESP_ERR__QUEUE_FULL)
            rd_kafka_poll(rk, 10);
        assert_int_equal(e, 0);
        if (i % 1000 == 0)
            rd_kafka_poll(rk, 0);
    }
    assert_int_equal(rd_kafka_flush(rk, (int)(120000 * it_scale())), 0);
    atomic_store(&f->px.chaos, false);
    rd_kafka_destroy(rk);
    assert_int_equal(atomic_load(&failed), 0);
    assert_int_equal(atomic_load(&delivered), N_RECORDS);
    print_message("proxy dropped %d connections after a Produce\n", atomic_load(&f->px.drops));
    assert_true(atomic_load(&f->px.drops) > 0);

    int *seen = calloc(N_RECORDS, sizeof *seen);
    read_all(f, seen);
    int missing = 0, twice = 0;
    for (int i = 0; i < N_RECORDS; i++) {
        missing += seen[i] == 0;
        twice += seen[i] > 1;
    }
    free(seen);
    if (missing || twice)
        fail_msg("%d records missing, %d stored more than once", missing, twice);
    /* The retries reached sluice and were recognised. */
    it_resp r = {0};
    assert_int_equal(it_http(NULL, f->s->port, &(it_call){.method = "GET", .path = "/metrics"}, &r),
                     0);
    const char *m = strstr(it_body(&r), "\nsluice_kafka_duplicate_batches_total ");
    assert_non_null(m);
    long dups = atol(m + strlen("\nsluice_kafka_duplicate_batches_total "));
    print_message("sluice recognised %ld duplicate batches\n", dups);
    assert_true(dups > 0);
    it_resp_free(&r);
    f->s->passed = true;
}

/* Consumes n records of group g (after a rebalance), recording them. */
static int consume(fx *f, int n, int *seen, bool commit)
{
    rd_kafka_conf_t *c =
        conf(f->boot, (const char *const[]){"group.id", "g", "enable.auto.commit", "false",
                                            "auto.offset.reset", "earliest",
                                            "session.timeout.ms", "6000", NULL});
    char es[256];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, c, es, sizeof es);
    assert_non_null(rk);
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *tl = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(tl, "idem", RD_KAFKA_PARTITION_UA);
    assert_int_equal(rd_kafka_subscribe(rk, tl), 0);
    rd_kafka_topic_partition_list_destroy(tl);
    int got = 0;
    double until = it_mono() + 60 * it_scale();
    while (got < n && it_mono() < until) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 500);
        if (!m)
            continue;
        if (!m->err) {
            char v[32] = "";
            memcpy(v, m->payload, m->len < 31 ? m->len : 31);
            seen[atoi(v + 4)]++;
            got++; /* its position is stored (auto store): the commit covers it */
        }
        rd_kafka_message_destroy(m);
    }
    if (commit)
        assert_int_equal(rd_kafka_commit(rk, NULL, 0), 0);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return got;
}

static void test_commits(void **state)
{
    fx *f = *state;
    start(f);
    rd_kafka_conf_t *c = conf(f->boot, (const char *const[]){"acks", "all", NULL});
    char es[256];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, es, sizeof es);
    assert_non_null(rk);
    for (int i = 0; i < N_RECORDS; i++) {
        char val[32];
        snprintf(val, sizeof val, "rec-%d", i);
        while (rd_kafka_producev(rk, RD_KAFKA_V_TOPIC("idem"), RD_KAFKA_V_PARTITION(i % N_PARTS),
                                 RD_KAFKA_V_VALUE(val, strlen(val)),
                                 RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                 RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR__QUEUE_FULL)
            rd_kafka_poll(rk, 10);
    }
    assert_int_equal(rd_kafka_flush(rk, (int)(60000 * it_scale())), 0);
    rd_kafka_destroy(rk);

    int *seen = calloc(N_RECORDS, sizeof *seen);
    int a = consume(f, N_RECORDS / 2, seen, true);
    assert_int_equal(a, N_RECORDS / 2);
    int b = consume(f, N_RECORDS - a, seen, false);
    assert_int_equal(b, N_RECORDS - a);
    int missing = 0, twice = 0;
    for (int i = 0; i < N_RECORDS; i++) {
        missing += seen[i] == 0;
        twice += seen[i] > 1;
    }
    free(seen);
    if (missing || twice)
        fail_msg("after a commit and a new member: %d records missing, %d read twice", missing,
                 twice);
    f->s->passed = true;
}

int main(void)
{
    if (it_init("test_kafka_rdkafka"))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_idempotence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_commits, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    it_cleanup();
    return rc;
}
