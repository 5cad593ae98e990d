/*
 * tests/tools/kafka_mock.c — a Kafka cluster for tests: librdkafka's mock
 * cluster (several brokers, real Kafka protocol, 127.0.0.1 only) in a small
 * program that tests and benchmarks start and steer.
 *
 *   build/rel/tools/kafka_mock [--brokers N] [--topic NAME:PARTITIONS]…
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
 * Commands come one per line, each answered "ok" or "error: …"; the end of
 * stdin quits, as does `quit`:
 *
 *   down ID     take broker ID (1..N) down: its connections fail
 *   up ID       bring it back
 *   topic NAME PARTITIONS   create a topic
 *   error API CODE COUNT    the next COUNT requests of API (produce, metadata,
 *                           initproducerid, or a Kafka ApiKey number) fail
 *                           with error CODE (a number: 10 is
 *                           MSG_SIZE_TOO_LARGE, -195 a dropped connection)
 *   topicerror NAME CODE    metadata requests answer error CODE for topic
 *                           NAME (3: UNKNOWN_TOPIC_OR_PART; 0 clears it)
 *   quit        stop (so does the end of stdin, or SIGTERM/SIGINT)
 *
 * Nothing is written to disk: the cluster lives in memory and dies with the
 * process, so a test cannot leave a broker behind.
 */
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int usage(void)
{
    fprintf(stderr, "usage: kafka_mock [--brokers N] [--topic NAME:PARTITIONS]... "
                    "[--commands | --no-commands]\n");
    return 2;
}

static int create_topic(rd_kafka_mock_cluster_t *mc, const char *name, int parts)
{
    if (parts < 1 || parts > 1000)
        return -1;
    return rd_kafka_mock_topic_create(mc, name, parts, 1) == RD_KAFKA_RESP_ERR_NO_ERROR ? 0 : -1;
}

/* A Kafka protocol ApiKey by name or number, or -1. */
static int api_key(const char *s)
{
    if (strcmp(s, "produce") == 0)
        return 0;
    if (strcmp(s, "metadata") == 0)
        return 3;
    if (strcmp(s, "initproducerid") == 0)
        return 22;
    char *end;
    long v = strtol(s, &end, 10);
    return *end || end == s || v < 0 || v > 100 ? -1 : (int)v;
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
        char name[256];
        int parts = 0;
        const char *spec = argv[++i];
        const char *colon = strrchr(spec, ':');
        if (!colon || (size_t)(colon - spec) >= sizeof name || (parts = atoi(colon + 1)) < 1) {
            fprintf(stderr, "kafka_mock: --topic %s: want NAME:PARTITIONS\n", spec);
            rd_kafka_mock_cluster_destroy(mc);
            rd_kafka_destroy(rk);
            return 2;
        }
        memcpy(name, spec, (size_t)(colon - spec));
        name[colon - spec] = '\0';
        if (create_topic(mc, name, parts)) {
            fprintf(stderr, "kafka_mock: cannot create topic %s\n", name);
            rd_kafka_mock_cluster_destroy(mc);
            rd_kafka_destroy(rk);
            return 1;
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

static void serve_commands(rd_kafka_mock_cluster_t *mc, int brokers)
{
    char line[512];
    while (fgets(line, sizeof line, stdin)) {
        char cmd[32], arg[256];
        int n = 0, count = 0;
        int got = sscanf(line, "%31s %255s %d %d", cmd, arg, &n, &count);
        if (got < 1)
            continue;
        if (strcmp(cmd, "quit") == 0)
            break;
        int rc = -1;
        if ((strcmp(cmd, "down") == 0 || strcmp(cmd, "up") == 0) && got >= 2) {
            int id = atoi(arg);
            if (id >= 1 && id <= brokers)
                rc = (cmd[0] == 'd'
                          ? rd_kafka_mock_broker_set_down(mc, id)
                          : rd_kafka_mock_broker_set_up(mc, id)) == RD_KAFKA_RESP_ERR_NO_ERROR
                         ? 0
                         : -1;
        } else if (strcmp(cmd, "topic") == 0 && got == 3) {
            rc = create_topic(mc, arg, n);
        } else if (strcmp(cmd, "topicerror") == 0 && got == 3) {
            rd_kafka_mock_topic_set_error(mc, arg, (rd_kafka_resp_err_t)n);
            rc = 0;
        } else if (strcmp(cmd, "error") == 0 && got == 4 && count >= 1 && count <= 10000) {
            int api = api_key(arg);
            if (api >= 0) {
                rd_kafka_resp_err_t *errs = malloc((size_t)count * sizeof *errs);
                for (int k = 0; errs && k < count; k++)
                    errs[k] = (rd_kafka_resp_err_t)n;
                if (errs)
                    rd_kafka_mock_push_request_errors_array(mc, (int16_t)api, (size_t)count, errs);
                rc = errs ? 0 : -1;
                free(errs);
            }
        }
        printf(rc ? "error: %s" : "ok\n", line);
        fflush(stdout);
    }
}
