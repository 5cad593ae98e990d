/*
 * tests/tools/kafka_mock.c — a Kafka cluster for tests: librdkafka's mock
 * cluster (several brokers, real Kafka protocol, 127.0.0.1 only) in a small
 * program that tests and benchmarks start and steer.
 *
 *   build/rel/tools/kafka_mock [--brokers N] [--topic NAME:PARTITIONS[:REPLICATION]]…
 *                              [--commands | --no-commands]
 *
 * (`make kafka-mock` builds it.) Prints one line "bootstrap HOST:PORT,…" on
 * stdout once the cluster is up, then runs until SIGINT, SIGTERM or SIGHUP
 * (exit 0) — unless it reads commands: with --commands, or by default when
 * stdin is a pipe, a FIFO or a socket (a program or test steering it). A
 * terminal, /dev/null (what a script's `… &` gets) or a file is never read,
 * so `kafka_mock &` neither quits at once in a script nor stops on "tty
 * input" in a shell; --no-commands ignores stdin whatever it is.
 *
 * Commands come one per line, each answered with one line, "ok" (or "ok
 * VALUE") or "error: REASON: LINE"; blank lines get no answer; the end of
 * stdin quits, as does `quit`. Brokers are numbered 1..N; "all" (or -1)
 * means every broker where it says so. The librdkafka 2.0.2 mock has no
 * CreateTopics (topics are made here, or auto-created with 4 partitions and
 * replication min(3, N) by a client's metadata request) and its partition
 * leaders do not move by themselves (`down` keeps the leaders: `leader`
 * moves them):
 *
 *   ping                    ok (a round trip, to synchronise)
 *   bootstrap               ok HOST:PORT,…
 *   down ID|all             take broker ID down: its connections fail, new
 *                           ones are refused
 *   up ID|all               bring it back
 *   topic NAME PARTITIONS [REPLICATION]   create a topic (replication 1 by
 *                           default, at most N); an existing one is an error
 *   leader TOPIC PARTITION ID   partition PARTITION of TOPIC is led by broker
 *                           ID from now on (-1: no leader)
 *   coordinator group|txn KEY ID   broker ID coordinates the consumer group
 *                           (or transactional id) KEY from now on
 *   error API CODE COUNT    the next COUNT requests of API fail with error
 *                           CODE (COUNT 1..10000)
 *   errors API CODE…        the next requests of API fail with these codes,
 *                           one per request, in order (at most 38)
 *   clear API               forget the errors pushed for API
 *   topicerror NAME CODE    metadata requests answer error CODE for topic
 *                           NAME (3: UNKNOWN_TOPIC_OR_PART; 0 clears it)
 *   rtt ID|all MS           broker ID answers MS milliseconds late
 *   quit                    stop (so does the end of stdin, or SIGTERM/SIGINT)
 *
 * API is a Kafka ApiKey by name, any case (produce, fetch, listoffsets,
 * metadata, offsetcommit, offsetfetch, findcoordinator, joingroup,
 * heartbeat, leavegroup, syncgroup, describegroups, listgroups,
 * apiversions, createtopics, initproducerid, addpartitionstotxn,
 * addoffsetstotxn, endtxn, txnoffsetcommit, …) or number. CODE is a number
 * (10 MSG_SIZE_TOO_LARGE, 6 NOT_LEADER_FOR_PARTITION, 15
 * COORDINATOR_NOT_AVAILABLE, 16 NOT_COORDINATOR, 27 REBALANCE_IN_PROGRESS,
 * -195 a dropped connection) or librdkafka's name for it, with or without
 * RD_KAFKA_RESP_ERR_ (NOT_LEADER_FOR_PARTITION, _TRANSPORT).
 *
 * Nothing is written to disk: the cluster lives in memory and dies with the
 * process, so a test cannot leave a broker behind.
 */
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

static int usage(void)
{
    fprintf(stderr, "usage: kafka_mock [--brokers N] [--topic NAME:PARTITIONS[:REPLICATION]]... "
                    "[--commands | --no-commands]\n");
    return 2;
}

/* Creates a topic; 0, or -1 with a reason in why. */
static int create_topic(rd_kafka_mock_cluster_t *mc, int brokers, const char *name, long parts,
                        long repl, const char **why)
{
    if (parts < 1 || parts > 1000) {
        *why = "partitions must be 1..1000";
        return -1;
    }
    if (repl < 1 || repl > brokers) {
        *why = "replication must be 1..the number of brokers";
        return -1;
    }
    rd_kafka_resp_err_t e = rd_kafka_mock_topic_create(mc, name, (int)parts, (int)repl);
    *why = e ? rd_kafka_err2str(e) : NULL;
    return e ? -1 : 0;
}

/* The Kafka protocol's ApiKeys the mock answers (and a few it refuses), by
 * the names of the protocol guide, compared without regard to case. */
static const struct {
    const char *name;
    int key;
} apis[] = {
    {"Produce", 0},          {"Fetch", 1},           {"ListOffsets", 2},
    {"Metadata", 3},         {"OffsetCommit", 8},    {"OffsetFetch", 9},
    {"FindCoordinator", 10}, {"JoinGroup", 11},      {"Heartbeat", 12},
    {"LeaveGroup", 13},      {"SyncGroup", 14},      {"DescribeGroups", 15},
    {"ListGroups", 16},      {"SaslHandshake", 17},  {"ApiVersions", 18},
    {"CreateTopics", 19},    {"DeleteTopics", 20},   {"DeleteRecords", 21},
    {"InitProducerId", 22},  {"OffsetForLeaderEpoch", 23}, {"AddPartitionsToTxn", 24},
    {"AddOffsetsToTxn", 25}, {"EndTxn", 26},         {"TxnOffsetCommit", 28},
    {"DescribeConfigs", 32}, {"AlterConfigs", 33},   {"SaslAuthenticate", 36},
    {"CreatePartitions", 37},
};

/* A whole decimal number in s, or -1 (and *out untouched). */
static int parse_long(const char *s, long *out)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

/* A Kafka protocol ApiKey by name or number, or -1. */
static int api_key(const char *s)
{
    long v;
    if (parse_long(s, &v) == 0)
        return v >= 0 && v <= 100 ? (int)v : -1;
    for (size_t i = 0; i < sizeof apis / sizeof apis[0]; i++)
        if (strcasecmp(apis[i].name, s) == 0)
            return apis[i].key;
    return -1;
}

/* An error code by number or librdkafka's name; 0 or -1. */
static int err_code(const char *s, rd_kafka_resp_err_t *out)
{
    long v;
    if (parse_long(s, &v) == 0) {
        if (v < INT_MIN || v > INT_MAX)
            return -1;
        *out = (rd_kafka_resp_err_t)v;
        return 0;
    }
    if (strncasecmp(s, "RD_KAFKA_RESP_ERR_", 18) == 0)
        s += 18;
    const struct rd_kafka_err_desc *d;
    size_t n;
    rd_kafka_get_err_descs(&d, &n);
    for (size_t i = 0; i < n; i++)
        if (d[i].name && strcasecmp(d[i].name, s) == 0) {
            *out = d[i].code;
            return 0;
        }
    return -1;
}

/* A broker id 1..brokers, or -1 for "all"/-1 when all_ok; 0 or -1. */
static int broker_id(const char *s, int brokers, bool all_ok, int32_t *out)
{
    long v;
    if (all_ok && (strcmp(s, "all") == 0 || strcmp(s, "-1") == 0)) {
        *out = -1;
        return 0;
    }
    if (parse_long(s, &v) || v < 1 || v > brokers)
        return -1;
    *out = (int32_t)v;
    return 0;
}

/* Whether stdin is something a program writes commands into. */
static bool stdin_is_channel(void)
{
    struct stat st;
    return fstat(0, &st) == 0 && (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode));
}

/* Reads and answers commands until `quit` or the end of stdin. */
static void serve_commands(rd_kafka_mock_cluster_t *mc, int brokers);

int main(int argc, char **argv)
{
    int brokers = 3;
    int commands = -1; /* -1: decide from what stdin is */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--commands") == 0) {
            commands = 1;
            continue;
        }
        if (strcmp(argv[i], "--no-commands") == 0) {
            commands = 0;
            continue;
        }
        if (strcmp(argv[i], "--brokers") == 0 && i + 1 < argc) {
            brokers = atoi(argv[++i]);
            if (brokers < 1 || brokers > 16)
                return usage();
        } else if (strcmp(argv[i], "--topic") == 0 && i + 1 < argc) {
            i++; /* created below, once the cluster exists */
        } else {
            return usage();
        }
    }
    if (commands < 0)
        commands = stdin_is_channel();
    signal(SIGPIPE, SIG_IGN);
    /* Blocked before librdkafka starts its threads, which inherit the mask:
     * the signals that end the mock then reach only this thread, in
     * sigwait() below (or, with commands, by their default action once
     * unblocked here). */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    /* The mock cluster needs a handle for its bookkeeping; a producer that
     * never produces is the lightest one. */
    rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof errstr);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (!rk) {
        fprintf(stderr, "kafka_mock: %s\n", errstr);
        return 1;
    }
    rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(rk, brokers);
    if (!mc) {
        fprintf(stderr, "kafka_mock: cannot create the mock cluster\n");
        rd_kafka_destroy(rk);
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--topic") != 0)
            continue;
        /* NAME:PARTITIONS[:REPLICATION]; a topic name has no ':' (Kafka
         * allows only [A-Za-z0-9._-]) */
        char name[256];
        long parts = 0, repl = 1;
        const char *spec = argv[++i], *why = "want NAME:PARTITIONS[:REPLICATION]";
        const char *colon = strchr(spec, ':');
        int ok = colon && colon > spec && (size_t)(colon - spec) < sizeof name;
        if (ok) {
            char num[64];
            snprintf(num, sizeof num, "%s", colon + 1);
            char *second = strchr(num, ':');
            if (second)
                *second++ = '\0';
            ok = parse_long(num, &parts) == 0 && (!second || parse_long(second, &repl) == 0);
        }
        if (ok) {
            memcpy(name, spec, (size_t)(colon - spec));
            name[colon - spec] = '\0';
            ok = create_topic(mc, brokers, name, parts, repl, &why) == 0;
        }
        if (!ok) {
            fprintf(stderr, "kafka_mock: --topic %s: %s\n", spec, why);
            rd_kafka_mock_cluster_destroy(mc);
            rd_kafka_destroy(rk);
            return 2;
        }
    }
    printf("bootstrap %s\n", rd_kafka_mock_cluster_bootstraps(mc));
    fflush(stdout);

    if (commands) {
        /* A signal's default action ends the process in the middle of fgets,
         * which is fine: nothing to save. */
        pthread_sigmask(SIG_UNBLOCK, &stop, NULL);
        serve_commands(mc, brokers);
    } else {
        int sig;
        sigwait(&stop, &sig);
    }
    rd_kafka_mock_cluster_destroy(mc);
    rd_kafka_destroy(rk);
    return 0;
}

#define MAX_WORDS 40

/* Runs one command of n words w; returns NULL for "ok" (with *value set
 * when the answer carries one), else the reason it failed. */
static const char *run_command(rd_kafka_mock_cluster_t *mc, int brokers, char **w, int n,
                               const char **value)
{
    const char *cmd = w[0];
    long a, b;
    int32_t id;
    rd_kafka_resp_err_t e;
    *value = NULL;
    if (strcmp(cmd, "ping") == 0 && n == 1)
        return NULL;
    if (strcmp(cmd, "bootstrap") == 0 && n == 1) {
        *value = rd_kafka_mock_cluster_bootstraps(mc);
        return NULL;
    }
    if ((strcmp(cmd, "down") == 0 || strcmp(cmd, "up") == 0) && n == 2) {
        if (broker_id(w[1], brokers, true, &id))
            return "no such broker";
        e = cmd[0] == 'd' ? rd_kafka_mock_broker_set_down(mc, id)
                          : rd_kafka_mock_broker_set_up(mc, id);
        return e ? rd_kafka_err2str(e) : NULL;
    }
    if (strcmp(cmd, "topic") == 0 && (n == 3 || n == 4)) {
        const char *why;
        b = 1;
        if (parse_long(w[2], &a) || (n == 4 && parse_long(w[3], &b)))
            return "want topic NAME PARTITIONS [REPLICATION]";
        return create_topic(mc, brokers, w[1], a, b, &why) ? why : NULL;
    }
    if (strcmp(cmd, "leader") == 0 && n == 4) {
        if (parse_long(w[2], &a) || a < 0 || a > INT32_MAX)
            return "want leader TOPIC PARTITION BROKER";
        if (broker_id(w[3], brokers, true, &id))
            return "no such broker";
        e = rd_kafka_mock_partition_set_leader(mc, w[1], (int32_t)a, id);
        return e ? rd_kafka_err2str(e) : NULL;
    }
    if (strcmp(cmd, "coordinator") == 0 && n == 4) {
        const char *type = w[1];
        if (strcmp(type, "txn") == 0)
            type = "transaction";
        if (strcmp(type, "group") != 0 && strcmp(type, "transaction") != 0)
            return "want coordinator group|txn KEY BROKER";
        if (broker_id(w[3], brokers, false, &id))
            return "no such broker";
        e = rd_kafka_mock_coordinator_set(mc, type, w[2], id);
        return e ? rd_kafka_err2str(e) : NULL;
    }
    if (strcmp(cmd, "error") == 0 && n == 4) {
        int api = api_key(w[1]);
        rd_kafka_resp_err_t code;
        if (api < 0)
            return "unknown API";
        if (err_code(w[2], &code))
            return "unknown error code";
        if (parse_long(w[3], &a) || a < 1 || a > 10000)
            return "COUNT must be 1..10000";
        rd_kafka_resp_err_t *errs = malloc((size_t)a * sizeof *errs);
        if (!errs)
            return "out of memory";
        for (long k = 0; k < a; k++)
            errs[k] = code;
        rd_kafka_mock_push_request_errors_array(mc, (int16_t)api, (size_t)a, errs);
        free(errs);
        return NULL;
    }
    if (strcmp(cmd, "errors") == 0 && n >= 3) {
        int api = api_key(w[1]);
        rd_kafka_resp_err_t errs[MAX_WORDS];
        if (api < 0)
            return "unknown API";
        for (int k = 2; k < n; k++)
            if (err_code(w[k], &errs[k - 2]))
                return "unknown error code";
        rd_kafka_mock_push_request_errors_array(mc, (int16_t)api, (size_t)(n - 2), errs);
        return NULL;
    }
    if (strcmp(cmd, "clear") == 0 && n == 2) {
        int api = api_key(w[1]);
        if (api < 0)
            return "unknown API";
        rd_kafka_mock_clear_request_errors(mc, (int16_t)api);
        return NULL;
    }
    if (strcmp(cmd, "topicerror") == 0 && n == 3) {
        rd_kafka_resp_err_t code;
        if (err_code(w[2], &code))
            return "unknown error code";
        rd_kafka_mock_topic_set_error(mc, w[1], code);
        return NULL;
    }
    if (strcmp(cmd, "rtt") == 0 && n == 3) {
        if (broker_id(w[1], brokers, true, &id))
            return "no such broker";
        if (parse_long(w[2], &a) || a < 0 || a > 600000)
            return "MS must be 0..600000";
        e = rd_kafka_mock_broker_set_rtt(mc, id, (int)a);
        return e ? rd_kafka_err2str(e) : NULL;
    }
    return "unknown command or wrong arguments (ping, bootstrap, down ID, up ID, "
           "topic NAME PARTITIONS [REPLICATION], leader TOPIC PARTITION ID, "
           "coordinator group|txn KEY ID, error API CODE COUNT, errors API CODE..., "
           "clear API, topicerror NAME CODE, rtt ID MS, quit)";
}

static void serve_commands(rd_kafka_mock_cluster_t *mc, int brokers)
{
    char line[1024];
    while (fgets(line, sizeof line, stdin)) {
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n') {
            /* the rest of an overlong line is skipped, answered once */
            int c;
            while ((c = getchar()) != EOF && c != '\n')
                ;
            printf("error: line too long\n");
            fflush(stdout);
            continue;
        }
        line[strcspn(line, "\r\n")] = '\0';
        char copy[sizeof line], *w[MAX_WORDS], *save = NULL;
        memcpy(copy, line, sizeof line);
        int n = 0;
        for (char *t = strtok_r(copy, " \t", &save); t && n < MAX_WORDS;
             t = strtok_r(NULL, " \t", &save))
            w[n++] = t;
        if (n == 0)
            continue;
        if (strcmp(w[0], "quit") == 0)
            break;
        const char *value;
        const char *why = run_command(mc, brokers, w, n, &value);
        if (why)
            printf("error: %s: %s\n", why, line);
        else if (value)
            printf("ok %s\n", value);
        else
            printf("ok\n");
        fflush(stdout);
    }
}
