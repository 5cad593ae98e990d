/*
 * kafka/kafka.c — the listener's interface (kafka.h): start and stop of its
 * pieces in order, the API key table on reload, groups and metrics.
 */
#include "kafka/kcoord.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* docs/limits.md names these. */
#define DEFAULT_MAX_REQUEST (100 << 20)
#define DEFAULT_MAX_CONNS 4096
#define DEFAULT_IDLE_MS 600000
#define DEFAULT_THREADS 2

int sl_kafka_start(const sl_kafka_options *opts, sl_sets *sets, sl_databus *bus, sl_kafka **out,
                   sl_error *err)
{
    *out = NULL;
    if (!opts->waits || !opts->data_dir)
        return sl_error_set(err, SL_EINVAL, "kafka listener: waits and data_dir are required");
    sl_kafka *k = calloc(1, sizeof *k);
    if (!k)
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    k->o = *opts;
    snprintf(k->host, sizeof k->host, "%s", opts->host ? opts->host : "127.0.0.1");
    snprintf(k->data_dir, sizeof k->data_dir, "%s", opts->data_dir);
    k->o.host = k->host;
    k->o.data_dir = k->data_dir;
    if (opts->tls_cert && opts->tls_key) {
        snprintf(k->tls_cert, sizeof k->tls_cert, "%s", opts->tls_cert);
        snprintf(k->tls_key, sizeof k->tls_key, "%s", opts->tls_key);
        k->o.tls_cert = k->tls_cert;
        k->o.tls_key = k->tls_key;
    } else {
        k->o.tls_cert = k->o.tls_key = NULL;
    }
    if (!k->o.max_request_bytes)
        k->o.max_request_bytes = DEFAULT_MAX_REQUEST;
    if (!k->o.max_connections)
        k->o.max_connections = DEFAULT_MAX_CONNS;
    if (!k->o.idle_timeout_s)
        k->o.idle_timeout_s = DEFAULT_IDLE_MS / 1000;
    if (!k->o.threads)
        k->o.threads = DEFAULT_THREADS;
    if (opts->hooks)
        k->hooks = *opts->hooks;
    k->o.hooks = &k->hooks;
    k->sets = sets;
    k->bus = bus;
    k->waits = opts->waits;
    atomic_store(&k->auth, sl_auth_count(opts->auth) ? opts->auth : NULL);
    int rc = sl__kidem_open(k, err);
    if (!rc)
        rc = sl__kcoord_open(k, err);
    if (!rc)
        rc = sl__klisten_start(k, err);
    if (rc) {
        sl_kafka_free(k);
        return rc;
    }
    /* Advertised: what clients are told to connect to; a wildcard listen
     * address is no address to connect to, so it advertises loopback. */
    const char *ah = opts->advertised_host && opts->advertised_host[0] ? opts->advertised_host
                     : (!strcmp(k->host, "0.0.0.0") || !strcmp(k->host, "::")) ? "127.0.0.1"
                                                                                : k->host;
    snprintf(k->adv_host, sizeof k->adv_host, "%s", ah);
    k->adv_port = opts->advertised_port ? opts->advertised_port : k->port;
    *out = k;
    return 0;
}

uint16_t sl_kafka_port(const sl_kafka *k)
{
    return k->port;
}

void sl_kafka_set_auth(sl_kafka *k, const struct sl_auth *auth)
{
    atomic_store(&k->auth, sl_auth_count(auth) ? auth : NULL);
}

int sl_kafka_groups_json(sl_kafka *k, sl_buf *out)
{
    return sl__kgroups_json(k, out);
}

int sl_kafka_metrics(sl_kafka *k, sl_buf *out)
{
    sl_kafka_stats *s = &k->stats;
    int rc = 0;
#define FAMILY(name, type, help)                                                                 \
    rc |= sl_buf_printf(out, "# HELP sluice_kafka_" name " " help "\n# TYPE sluice_kafka_" name   \
                             " " type "\n")
#define VALUE(name, v) rc |= sl_buf_printf(out, "sluice_kafka_" name " %llu\n", (unsigned long long)(v))
    FAMILY("connections_open", "gauge", "Kafka protocol connections open.");
    VALUE("connections_open", atomic_load(&s->open));
    FAMILY("connections_accepted_total", "counter", "Kafka protocol connections accepted.");
    VALUE("connections_accepted_total", atomic_load(&s->accepted));
    FAMILY("bad_frames_total", "counter",
           "Connections closed for a malformed, oversized or unsupported request.");
    VALUE("bad_frames_total", atomic_load(&s->bad_frames));
    FAMILY("requests_total", "counter", "Kafka protocol requests by API.");
    for (int key = 0; key <= SL_KAPI_MAX; key++) {
        uint64_t n = atomic_load(&s->requests[key]);
        char nb[16];
        if (n)
            rc |= sl_buf_printf(out, "sluice_kafka_requests_total{api=\"%s\"} %llu\n",
                                sl_kp_api_name((int16_t)key, nb), (unsigned long long)n);
    }
    FAMILY("received_bytes_total", "counter", "Bytes of Kafka protocol requests.");
    VALUE("received_bytes_total", atomic_load(&s->bytes_in));
    FAMILY("sent_bytes_total", "counter", "Bytes of Kafka protocol responses, zero-copy ones included.");
    VALUE("sent_bytes_total", atomic_load(&s->bytes_out) + atomic_load(&s->sendfile_bytes));
    FAMILY("sendfile_bytes_total", "counter", "Response bytes sent from segment files (sendfile).");
    VALUE("sendfile_bytes_total", atomic_load(&s->sendfile_bytes));
    FAMILY("produced_records_total", "counter", "Records stored from Produce requests.");
    VALUE("produced_records_total", atomic_load(&s->produced_records));
    FAMILY("produce_errors_total", "counter", "Produce partitions answered with an error.");
    VALUE("produce_errors_total", atomic_load(&s->produce_errors));
    FAMILY("duplicate_batches_total", "counter",
           "Idempotent producers' batches recognised as already stored.");
    VALUE("duplicate_batches_total", atomic_load(&s->duplicates));
    FAMILY("fetched_bytes_total", "counter", "Record bytes returned by Fetch.");
    VALUE("fetched_bytes_total", atomic_load(&s->fetched_bytes));
    sl_kcoord *c = k->coord;
    size_t groups = 0, members = 0;
    if (c) {
        pthread_mutex_lock(&c->mu);
        groups = c->ng;
        for (size_t i = 0; i < c->ng; i++)
            members += sl__kcoord_active(c->g[i]);
        pthread_mutex_unlock(&c->mu);
    }
    FAMILY("groups", "gauge", "Consumer groups the coordinator knows.");
    VALUE("groups", groups);
    FAMILY("group_members", "gauge", "Members of consumer groups.");
    VALUE("group_members", members);
#undef FAMILY
#undef VALUE
    return rc ? SL_ENOMEM : 0;
}

void sl_kafka_stop(sl_kafka *k)
{
    if (!k || k->stopped)
        return;
    k->stopped = true;
    sl__kcoord_stop(k); /* parked joins and syncs answered, the timer gone */
    sl__klisten_stop(k);
}

void sl_kafka_free(sl_kafka *k)
{
    if (!k)
        return;
    sl_kafka_stop(k);
    sl__klisten_free(k);
    /* After the last post: a durable Produce still completing may take its
     * batch back from the producer state (sl__kidem_failed). */
    sl__kidem_close(k);
    sl__kcoord_close(k);
    free(k);
}
