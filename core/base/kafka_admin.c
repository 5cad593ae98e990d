/*
 * core/base/kafka_admin.c — the cluster description of Kafka-backed sets
 * and topic creation (see kafka_admin.h).
 */
#include "core/base/kafka_admin.h"

#include "core/base/kafka_conf.h"
#include "core/base/slog.h"

#include <stdio.h>
#include <string.h>

/* librdkafka's own lines go to slog, as warnings at most: a broker that
 * comes and goes is routine for a router and must not read as an error. */
static void cluster_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    sl_slog(level <= 4 ? SL_SLOG_WARN : SL_SLOG_DEBUG, "kafka", "kafka %s: %s", fac, buf);
}

rd_kafka_conf_t *sl_kafka_cluster_conf(const sl_kafka_cluster *cl, const char *suffix,
                                       sl_error *err)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (!conf) {
        sl_error_set(err, SL_ENOMEM, "out of memory for a Kafka client");
        return NULL;
    }
    char id[256];
    const char *base = cl->client_id && cl->client_id[0] ? cl->client_id : "sluice";
    snprintf(id, sizeof id, "%s%s%s", base, suffix ? "-" : "", suffix ? suffix : "");
    /* The user's properties first: what sluice sets after them wins for
     * the keys it owns (the config check refuses those keys anyway). */
    for (size_t i = 0; i < cl->nprops; i++)
        if (sl_kafka_conf_line(conf, cl->props[i], NULL, NULL, err)) {
            rd_kafka_conf_destroy(conf);
            return NULL;
        }
    if (sl_kafka_conf_set(conf, "bootstrap.servers", cl->brokers ? cl->brokers : "", err) ||
        sl_kafka_conf_set(conf, "client.id", id, err)) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_conf_set_log_cb(conf, cluster_log);
    return conf;
}

/* The partitions of topic as the cluster's metadata says (a producer's
 * metadata request may make the topic where the broker auto-creates). */
static int topic_partitions(rd_kafka_t *rk, const char *topic, int timeout_ms, int32_t *out,
                            sl_error *err)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    if (!rkt)
        return sl_error_set(err, SL_ENOMEM, "out of memory for topic %s", topic);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, rkt, &md, timeout_ms);
    int rc = 0;
    if (e) {
        rc = sl_error_set(err, e == RD_KAFKA_RESP_ERR__TIMED_OUT ? SL_ETIMEDOUT : SL_EIO,
                          "topic %s: metadata: %s", topic, rd_kafka_err2str(e));
    } else if (md->topic_cnt != 1 || md->topics[0].err || md->topics[0].partition_cnt == 0) {
        rd_kafka_resp_err_t te = md->topic_cnt == 1 ? md->topics[0].err : RD_KAFKA_RESP_ERR_NO_ERROR;
        rc = sl_error_set(err, SL_ENOENT, "topic %s does not exist on the cluster%s%s", topic,
                          te ? ": " : "", te ? rd_kafka_err2str(te) : "");
    } else {
        *out = md->topics[0].partition_cnt;
    }
    if (md)
        rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
    return rc;
}

/* CreateTopics for one topic: 0 (made, or it was there), SL_EUNSUPPORTED
 * when the cluster cannot, or another code with err. */
static int create_topic(rd_kafka_t *rk, const char *topic, int32_t partitions, int replication,
                        const char *const *configs, int timeout_ms, sl_error *err)
{
    char es[256];
    rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(topic, partitions, replication, es, sizeof es);
    if (!nt)
        return sl_error_set(err, SL_EINVAL, "topic %s: %s", topic, es);
    for (size_t i = 0; configs && configs[i]; i++) {
        char name[128];
        const char *eq = strchr(configs[i], '=');
        size_t nl = eq ? (size_t)(eq - configs[i]) : 0;
        if (!eq || nl >= sizeof name)
            continue;
        memcpy(name, configs[i], nl);
        name[nl] = '\0';
        rd_kafka_NewTopic_set_config(nt, name, eq + 1);
    }
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_AdminOptions_t *ao = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
    int rc = 0;
    if (!q || !ao) {
        rc = sl_error_set(err, SL_ENOMEM, "out of memory creating topic %s", topic);
        goto out;
    }
    rd_kafka_AdminOptions_set_operation_timeout(ao, timeout_ms, es, sizeof es);
    rd_kafka_AdminOptions_set_request_timeout(ao, timeout_ms, es, sizeof es);
    rd_kafka_CreateTopics(rk, &nt, 1, ao, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, timeout_ms + 1000);
    if (!ev) {
        rc = sl_error_set(err, SL_ETIMEDOUT, "topic %s: CreateTopics got no answer within %d ms",
                          topic, timeout_ms);
        goto out;
    }
    rd_kafka_resp_err_t e = rd_kafka_event_error(ev);
    const char *why = rd_kafka_event_error_string(ev);
    if (!e) {
        const rd_kafka_CreateTopics_result_t *res = rd_kafka_event_CreateTopics_result(ev);
        size_t n = 0;
        const rd_kafka_topic_result_t **tr = res ? rd_kafka_CreateTopics_result_topics(res, &n) : NULL;
        if (n == 1) {
            e = rd_kafka_topic_result_error(tr[0]);
            why = rd_kafka_topic_result_error_string(tr[0]);
        }
    }
    if (e == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS || !e)
        rc = 0;
    else if (e == RD_KAFKA_RESP_ERR__UNSUPPORTED_FEATURE ||
             e == RD_KAFKA_RESP_ERR_UNSUPPORTED_VERSION || e == RD_KAFKA_RESP_ERR_INVALID_REQUEST)
        rc = sl_error_set(err, SL_EUNSUPPORTED, "%s", why ? why : rd_kafka_err2str(e));
    else
        rc = sl_error_set(err, e == RD_KAFKA_RESP_ERR__TIMED_OUT ? SL_ETIMEDOUT : SL_EIO,
                          "topic %s: CreateTopics: %s", topic, why ? why : rd_kafka_err2str(e));
    rd_kafka_event_destroy(ev);
out:
    if (ao)
        rd_kafka_AdminOptions_destroy(ao);
    if (q)
        rd_kafka_queue_destroy(q);
    rd_kafka_NewTopic_destroy(nt);
    return rc;
}

int sl_kafka_ensure_topic(const sl_kafka_cluster *cl, const char *topic, int32_t partitions,
                          int replication, const char *const *configs, int timeout_ms,
                          int32_t *actual, sl_error *err)
{
    rd_kafka_conf_t *conf = sl_kafka_cluster_conf(cl, "admin", err);
    if (!conf)
        return err->code ? err->code : SL_EINVAL;
    rd_kafka_conf_set_log_cb(conf, sl_kafka_quiet_log);
    rd_kafka_t *rk = sl_kafka_new(RD_KAFKA_PRODUCER, conf, cl->props, cl->nprops, "kafka", err);
    if (!rk)
        return SL_EINVAL;
    sl_error e1 = {0};
    int rc = topic_partitions(rk, topic, timeout_ms, actual, &e1);
    if (rc == SL_ENOENT) {
        sl_error e2 = {0};
        int crc = create_topic(rk, topic, partitions, replication, configs, timeout_ms, &e2);
        if (crc == SL_EUNSUPPORTED)
            sl_slog(SL_SLOG_WARN, "kafka",
                    "kafka: the cluster cannot create topic %s (%s); looking it up anyway", topic,
                    e2.msg);
        else if (crc) {
            rd_kafka_destroy(rk);
            *err = e2;
            return crc;
        } else
            sl_slog(SL_SLOG_INFO, "kafka", "kafka: created topic %s (%d partitions)", topic,
                    (int)partitions);
        /* Metadata may lag a creation by a moment. */
        for (int i = 0; i < 20; i++) {
            e1 = (sl_error){0};
            if ((rc = topic_partitions(rk, topic, timeout_ms, actual, &e1)) != SL_ENOENT)
                break;
            rd_kafka_poll(rk, 100);
        }
        if (rc == SL_ENOENT && crc == SL_EUNSUPPORTED)
            sl_error_set(&e1, SL_ENOENT,
                         "topic %s does not exist and the cluster cannot create it (%s): "
                         "create it with %d partitions",
                         topic, e2.msg, (int)partitions);
    }
    rd_kafka_destroy(rk);
    if (rc)
        *err = e1;
    return rc;
}
