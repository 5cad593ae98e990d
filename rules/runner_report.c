/*
 * rules/runner_report.c — what the runner tells: GET /v1/rules, the lanes' rule runs of
 * GET /v1/lanes, replay counters and the Prometheus lines of /metrics.
 */
#include "rules/runner_internal.h"

#include "core/base/json.h"
#include "core/base/metrics.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* A string for a JSON document: escaped, or made printable ASCII when it is
 * not UTF-8 (reasons may quote an endpoint's bytes). */
static int put_text(sl_buf *out, const char *s)
{
    if (sl_json_put_string(out, s, strlen(s)) == 0)
        return 0;
    char clean[SL_ERROR_MAX];
    sl__runner_clean_reason(s, clean, sizeof clean);
    return sl_json_put_string(out, clean, strlen(clean));
}

int sl__runner_counters_json(sl_buf *out, const counters *k)
{
    return sl_buf_printf(
        out,
        "\"read\":%" PRIu64 ",\"matched\":%" PRIu64 ",\"filtered\":%" PRIu64 ",\"dropped\":%" PRIu64
        ",\"failed\":%" PRIu64 ",\"delivered\":%" PRIu64 ",\"retries\":%" PRIu64
        ",\"dead_lettered\":%" PRIu64 ",\"discarded\":%" PRIu64 ",\"retrying\":%" PRId64,
        atomic_load(&k->read), atomic_load(&k->matched), atomic_load(&k->filtered),
        atomic_load(&k->dropped), atomic_load(&k->failed), atomic_load(&k->delivered),
        atomic_load(&k->retries), atomic_load(&k->dead_lettered), atomic_load(&k->discarded),
        atomic_load(&k->retrying));
}

/* The counters of base run rr and of every run of its lanes, added up. */
static void sum_counters(sl_runner *r, const rule_run *rr, counters *sum)
{
    uint64_t v[9] = {0};
    int64_t retrying = 0;
    for (size_t i = 0, n = atomic_load(&r->nruns); i < n; i++) {
        const rule_run *x = RUN(r, i);
        if (x != rr && x->base_run != rr)
            continue;
        const counters *k = &x->ctr;
        const _Atomic uint64_t *f[] = {&k->read,    &k->matched,       &k->filtered,
                                       &k->dropped, &k->failed,        &k->delivered,
                                       &k->retries, &k->dead_lettered, &k->discarded};
        for (size_t j = 0; j < 9; j++)
            v[j] += atomic_load(f[j]);
        if (!atomic_load(&x->dropped)) /* a dropped lane's pool waits for nothing */
            retrying += atomic_load(&k->retrying);
    }
    _Atomic uint64_t *t[] = {&sum->read,    &sum->matched,       &sum->filtered,
                             &sum->dropped, &sum->failed,        &sum->delivered,
                             &sum->retries, &sum->dead_lettered, &sum->discarded};
    for (size_t j = 0; j < 9; j++)
        atomic_init(t[j], v[j]);
    atomic_init(&sum->retrying, retrying);
}

/* ---- reporting ------------------------------------------------------------- */

static int64_t rule_lag(const rule_run *rr, int32_t p, int64_t *end)
{
    *end = sl_store_end_offset(&rr->set->parts[p]);
    int64_t lag = *end - atomic_load(&rr->cons[p].committed);
    return lag > 0 ? lag : 0;
}

static int health_json(sl_buf *out, const rule_run *rr)
{
    int rc = sl_buf_printf(out, ",\"health\":[");
    bool first = true;
    for (size_t t = 0; !rc && t < rr->ntargets; t++) {
        const target_inst *ti = &rr->targets[t];
        char msg[SL_ERROR_MAX] = "";
        int bad = ti->ops->health ? ti->ops->health(ti->impl, msg, sizeof msg) : 0;
        rc = sl_buf_printf(out, "%s{\"target\":\"%s\",\"healthy\":%s", first ? "" : ",", ti->label,
                           bad ? "false" : "true");
        if (!rc && bad) {
            rc = sl_buf_printf(out, ",\"reason\":");
            rc = rc ? rc : put_text(out, msg);
        }
        rc = rc ? rc : sl_buf_append(out, "}", 1);
        first = false;
    }
    return rc ? rc : sl_buf_append(out, "]", 1);
}

static const char *run_mode(const rule_run *rr)
{
    return !rr->base_run                ? "base"
           : rr->unrouted               ? "unrouted"
           : rr->rc != rr->base_run->rc ? "override"
                                        : "fallback";
}

/* Over the partitions it reads here: a Kafka-backed set's owned ones only. */
static int64_t run_lag(const rule_run *rr)
{
    int64_t total = 0, end;
    for (int32_t p = 0; p < rr->nparts; p++)
        if (sl__runner_kafka_shows(rr, p))
            total += rule_lag(rr, p, &end);
    return total;
}

/* {"lane" or "rule", mode, lag, counters…, unrouted, last_error} of a lane run. */
static int lane_run_json(sl_buf *out, rule_run *lr, bool first)
{
    const counters *c = &lr->ctr;
    int rc = sl_buf_printf(
        out,
        "%s{\"lane\":\"%s\",\"rule\":\"%s\",\"mode\":\"%s\",\"lag\":%" PRId64 ",\"read\":%" PRIu64
        ",\"matched\":%" PRIu64 ",\"delivered\":%" PRIu64 ",\"failed\":%" PRIu64
        ",\"dead_lettered\":%" PRIu64 ",\"retrying\":%" PRId64 ",\"unrouted\":%" PRIu64
        ",\"last_error\":",
        first ? "" : ",", lr->lane, lr->rc->name, run_mode(lr), run_lag(lr), atomic_load(&c->read),
        atomic_load(&c->matched), atomic_load(&c->delivered), atomic_load(&c->failed),
        atomic_load(&c->dead_lettered), atomic_load(&c->retrying), atomic_load(&lr->unrouted_n));
    if (!rc) {
        pthread_mutex_lock(&lr->err_lock);
        rc = put_text(out, lr->last_error);
        pthread_mutex_unlock(&lr->err_lock);
    }
    return rc ? rc : sl_buf_append(out, "}", 1);
}

int sl_runner_lane_json(sl_runner *r, const char *lane, sl_buf *out)
{
    uint64_t delivered = 0, unrouted = 0;
    size_t n = atomic_load(&r->nruns);
    for (size_t k = 0; k < n; k++) {
        rule_run *lr = RUN(r, k);
        if (strcmp(lr->lane, lane) == 0 && !atomic_load(&lr->dropped)) {
            delivered += atomic_load(&lr->ctr.delivered);
            unrouted += atomic_load(&lr->unrouted_n);
        }
    }
    int rc = sl_buf_printf(out, ",\"delivered\":%" PRIu64 ",\"unrouted\":%" PRIu64 ",\"rules\":[",
                           delivered, unrouted);
    bool first = true;
    for (size_t k = 0; !rc && k < n; k++) {
        rule_run *lr = RUN(r, k);
        if (strcmp(lr->lane, lane) || atomic_load(&lr->dropped))
            continue;
        rc = lane_run_json(out, lr, first);
        first = false;
    }
    return rc ? rc : sl_buf_append(out, "]", 1);
}

int sl_runner_rules_json(sl_runner *r, sl_buf *out)
{
    int rc = sl_buf_printf(out, "{\"rules\":[");
    for (size_t i = 0; !rc && i < r->nbase; i++) {
        rule_run *rr = RUN(r, i);
        rc = sl_buf_printf(out,
                           "%s{\"name\":\"%s\",\"set\":\"%s\",\"enabled\":%s,"
                           "\"ordered\":%s,\"managed\":\"%s\",\"shape\":\"%s\",\"dlq\":",
                           i ? "," : "", rr->rc->name, rr->set->name,
                           rr->rc->enabled ? "true" : "false", rr->rc->ordered ? "true" : "false",
                           rr->rc->api ? "api" : "config",
                           rr->rc->eventbridge ? "eventbridge" : "cloudevents");
        if (!rc && rr->rc->dlq)
            rc = sl_buf_printf(out, "\"%s\"", rr->rc->dlq);
        else if (!rc)
            rc = sl_buf_printf(out, "null");
        rc = rc ? rc : sl_buf_printf(out, ",\"targets\":[");
        for (size_t t = 0; !rc && t < rr->ntargets; t++)
            rc = sl_buf_printf(out, "%s\"%s\"", t ? "," : "", rr->targets[t].ops->name);
        rc = rc ? rc : sl_buf_printf(out, "]");
        rc = rc ? rc : health_json(out, rr);
        rc = rc ? rc : sl__runner_kafka_rule_json(r, out, rr); /* group, members */
        rc = rc ? rc : sl_buf_printf(out, ",\"partitions\":[");
        int64_t total = 0;
        bool first_part = true;
        for (int32_t p = 0; !rc && p < rr->nparts; p++) {
            if (!sl__runner_kafka_shows(rr, p))
                continue; /* a Kafka-backed set's partition another router owns */
            int64_t end, lag = rule_lag(rr, p, &end);
            total += lag;
            pthread_mutex_lock(&r->lock);
            bool shared = rr->cons[p].in != NULL;
            pthread_mutex_unlock(&r->lock);
            rc = sl_buf_printf(out,
                               "%s{\"partition\":%d,\"cursor\":%" PRId64 ",\"end\":%" PRId64
                               ",\"lag\":%" PRId64 ",\"shared\":%s",
                               first_part ? "" : ",", p, atomic_load(&rr->cons[p].committed), end,
                               lag, shared ? "true" : "false");
            rc = rc ? rc : sl__runner_kafka_part_json(r, out, rr, p);
            rc = rc ? rc : sl_buf_append(out, "}", 1);
            first_part = false;
        }
        rc = rc ? rc : sl_buf_printf(out, "],\"lag\":%" PRId64 ",", total);
        /* The rule's counts are those of all its lanes; "lanes" splits them. */
        counters sum;
        sum_counters(r, rr, &sum);
        rc = rc ? rc : sl__runner_counters_json(out, &sum);
        rc = rc ? rc : sl_buf_printf(out, ",\"last_error\":");
        if (!rc) {
            pthread_mutex_lock(&rr->err_lock);
            rc = put_text(out, rr->last_error);
            pthread_mutex_unlock(&rr->err_lock);
        }
        rc = rc ? rc : sl_buf_printf(out, ",\"lanes\":[");
        bool first = true;
        for (size_t k = r->nbase, n = atomic_load(&r->nruns); !rc && k < n; k++) {
            rule_run *lr = RUN(r, k);
            if (lr->base_run != rr || atomic_load(&lr->dropped))
                continue;
            rc = lane_run_json(out, lr, first);
            first = false;
        }
        rc = rc ? rc : sl_buf_printf(out, "]}");
    }
    return rc ? rc : sl_buf_printf(out, "]}\n");
}

/* The help of each rule counter, in the order of the counters struct. */
static const char *const ctr_fam[][2] = {
    {"sluice_rule_read_total", "Events the rule read from its set."},
    {"sluice_rule_matched_total", "Events that passed the rule's match and filter."},
    {"sluice_rule_filtered_total", "Events the rule's filter stopped."},
    {"sluice_rule_dropped_total", "Events the rule's transform turned into nothing."},
    {"sluice_rule_failed_total", "Events given up on (dead-lettered, discarded, or deleted by "
                                 "retention before delivery)."},
    {"sluice_rule_delivered_total", "Payloads every target of the rule accepted."},
    {"sluice_rule_retries_total", "Payloads sent again after a failure."},
    {"sluice_rule_dead_lettered_total", "Events written to the rule's dlq set."},
    {"sluice_rule_discarded_total", "Events given up on without a dlq (or that the dlq refused)."},
};

/* One sample per live run (rule="R", and lane="L" for a lane run). */
static int run_sample(sl_buf *out, const char *fam, const rule_run *rr, int64_t v)
{
    return sl_metrics_i64(out, fam, v, "rule", rr->rc->name, "lane", rr->lane[0] ? rr->lane : NULL,
                          NULL);
}

int sl_runner_metrics(sl_runner *r, sl_buf *out)
{
    size_t n = atomic_load(&r->nruns);
    int rc = 0;
    for (size_t k = 0; !rc && k < sizeof ctr_fam / sizeof *ctr_fam; k++) {
        rc = sl_metrics_family(out, ctr_fam[k][0], SL_METRIC_COUNTER, ctr_fam[k][1]);
        for (size_t i = 0; !rc && i < n; i++) {
            rule_run *rr = RUN(r, i);
            if (atomic_load(&rr->dropped) || rr->unrouted)
                continue;
            counters *c = &rr->ctr;
            _Atomic uint64_t *v[] = {&c->read,    &c->matched,       &c->filtered,
                                     &c->dropped, &c->failed,        &c->delivered,
                                     &c->retries, &c->dead_lettered, &c->discarded};
            rc = run_sample(out, ctr_fam[k][0], rr, (int64_t)atomic_load(v[k]));
        }
    }
    rc = rc ? rc
            : sl_metrics_family(
                  out, "sluice_rule_lag", SL_METRIC_GAUGE,
                  "Events of the rule's set the rule has not read yet (end offset - cursor); "
                  "for a Kafka-backed set, over the partitions this router owns.");
    for (size_t i = 0; !rc && i < n; i++)
        if (!atomic_load(&RUN(r, i)->dropped))
            rc = run_sample(out, "sluice_rule_lag", RUN(r, i), run_lag(RUN(r, i)));
    rc = rc ? rc
            : sl_metrics_family(out, "sluice_rule_retrying", SL_METRIC_GAUGE,
                                "Payloads waiting for a retry now.");
    for (size_t i = 0; !rc && i < n; i++)
        if (!atomic_load(&RUN(r, i)->dropped) && !RUN(r, i)->unrouted)
            rc = run_sample(out, "sluice_rule_retrying", RUN(r, i),
                            atomic_load(&RUN(r, i)->ctr.retrying));
    rc = rc ? rc
            : sl_metrics_family(out, "sluice_lane_unrouted_total", SL_METRIC_COUNTER,
                                "Events of a lane that reached a rule with no override for it "
                                "and no fallback.");
    for (size_t i = 0; !rc && i < n; i++)
        if (RUN(r, i)->unrouted && !atomic_load(&RUN(r, i)->dropped))
            rc = sl_metrics_u64(out, "sluice_lane_unrouted_total",
                                atomic_load(&RUN(r, i)->unrouted_n), "rule", RUN(r, i)->rc->name,
                                "lane", RUN(r, i)->lane, NULL);
    rc = rc ? rc
            : sl_metrics_family(out, "sluice_lane_delivered_total", SL_METRIC_COUNTER,
                                "Payloads the rules delivered per lane (\"\" is the base lane).");
    uint64_t *sum = rc ? NULL : calloc(LANE_NAMES, sizeof *sum);
    bool *live = rc ? NULL : calloc(LANE_NAMES, sizeof *live);
    if (!rc && (!sum || !live))
        rc = SL_ENOMEM;
    for (size_t i = 0; !rc && i < n; i++) {
        const rule_run *rr = RUN(r, i);
        if (rr->lane_idx >= 0 && !atomic_load(&rr->dropped)) {
            sum[rr->lane_idx] += atomic_load(&rr->ctr.delivered);
            live[rr->lane_idx] = true;
        }
    }
    for (size_t k = 0; !rc && k < LANE_NAMES; k++)
        if (live[k])
            rc = sl_metrics_u64(out, "sluice_lane_delivered_total", sum[k], "lane",
                                r->lane_names[k], NULL);
    free(sum);
    free(live);
    rc = rc ? rc
            : sl_metrics_family(out, "sluice_target_healthy", SL_METRIC_GAUGE,
                                "1 when the target is healthy, 0 when its health check fails.");
    for (size_t i = 0; !rc && i < n; i++) {
        rule_run *rr = RUN(r, i);
        if (atomic_load(&rr->dropped) || (rr->base_run && rr->targets == rr->base_run->targets))
            continue; /* borrowed targets are reported by their owner */
        for (size_t t = 0; !rc && t < rr->ntargets; t++) {
            const target_inst *ti = &rr->targets[t];
            char msg[SL_ERROR_MAX];
            int bad = ti->ops->health ? ti->ops->health(ti->impl, msg, sizeof msg) : 0;
            rc = sl_metrics_u64(out, "sluice_target_healthy", !bad, "rule", rr->rc->name, "lane",
                                rr->lane[0] ? rr->lane : NULL, "target", ti->label, NULL);
        }
    }
    return rc;
}
