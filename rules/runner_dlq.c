/*
 * rules/runner_dlq.c — dead letters: the source event of a payload given up on, with
 * the sluice* error attributes, written to the rule's dlq set (or counted
 * as discarded when the rule has none).
 */
#include "rules/runner_internal.h"

#include "core/base/base64.h"
#include "core/base/clock.h"
#include "core/base/json.h"
#include "core/bus/ebshape.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- dead letters -------------------------------------------------------------- */

static void target_names(const rule_run *rr, uint64_t mask, char *out, size_t len)
{
    size_t o = 0;
    out[0] = '\0';
    for (size_t t = 0; t < 64 && o < len; t++) {
        if (!(mask & (1ull << t)))
            continue;
        const char *name = t == RULE_BIT ? "rule" : rr->targets[t].label;
        o += (size_t)snprintf(out + o, len - o, "%s%s", o ? "," : "", name);
    }
}

/* A reason fit for a string attribute: printable ASCII, bounded. */
void sl__runner_clean_reason(const char *in, char *out, size_t len)
{
    size_t o = 0;
    for (; in && *in && o + 1 < len; in++)
        out[o++] = (unsigned char)*in >= 0x20 && (unsigned char)*in < 0x7f ? *in : '?';
    out[o] = '\0';
}

/* Whether an event member is one a dead letter drops or sets itself. */
static bool replaced_member(const sl_json_tok *key)
{
    static const char *const names[] = {"sluiceset",    "sluicepartition", "sluiceoffset",
                                        "sluiceerror",  "sluiceattempts",  "sluicerule",
                                        "sluicetarget", "sluicefailedat"};
    char k[32];
    size_t kl = 0;
    if (sl_json_unescape(key, k, sizeof k, &kl))
        return false; /* longer than any of them */
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strlen(names[i]) == kl && memcmp(names[i], k, kl) == 0)
            return true;
    return false;
}

/* The dead letter of it: its source event (or the payload when that is an
 * event) as it is, byte for byte, without the read-back members, plus the
 * sluice* error attributes. A payload that is not an event is wrapped in a
 * sluice.deadletter event: JSON as data, anything else as data_base64.
 * Appends the JSON to out. */
static int dead_letter_json(rule_run *rr, const consumer *c, const item *it, sl_buf *out)
{
    const char *src = it->source ? it->source : it->payload;
    size_t len = it->source ? it->source_len : it->len;
    /* A rule of EventBridge's shape saw its events so: its dead letter is
     * the CloudEvent again. */
    sl_buf ce = SL_BUF_INIT;
    if (rr->rc->eventbridge && src && sl_ebshape_to_cloudevent(src, len, &ce, NULL) == 0) {
        src = (const char *)ce.data;
        len = ce.len;
    }
    sl_json_tok doc = {0}, key, val;
    bool json = src && sl_json_validate(src, len, 512, &doc, NULL) == 0;
    bool event = false;
    sl_json_iter iter;
    if (json && doc.type == SL_JSON_OBJECT) {
        sl_json_iter_init(&iter, &doc);
        while (!event && sl_json_iter_member(&iter, &key, &val))
            event = key.len == 13 && memcmp(key.p, "\"specversion\"", 13) == 0 &&
                    val.type == SL_JSON_STRING;
    }
    int rc = sl_buf_append(out, "{", 1);
    if (event) {
        bool first = true;
        sl_json_iter_init(&iter, &doc);
        while (!rc && sl_json_iter_member(&iter, &key, &val)) {
            if (replaced_member(&key))
                continue;
            rc = sl_buf_printf(out, "%s%.*s:%.*s", first ? "" : ",", (int)key.len, key.p,
                               (int)val.len, val.p);
            first = false;
        }
    } else {
        rc = sl_buf_printf(out,
                           "\"specversion\":\"1.0\",\"id\":\"%s-%d-%" PRId64 "-%" PRIu64
                           "\",\"source\":\"/sluice/rules/%s\",\"type\":\"sluice.deadletter\"",
                           rr->rc->name, c->part, it->offset, atomic_fetch_add(&rr->wrapped, 1),
                           rr->rc->name);
        if (!rc && json) {
            rc = sl_buf_printf(out, ",\"datacontenttype\":\"application/json\",\"data\":%.*s",
                               (int)len, src);
        } else if (!rc && src) {
            size_t at = out->len;
            rc = sl_buf_printf(out, ",\"data_base64\":");
            rc = rc ? rc : sl_base64_append(out, src, len, SL_BASE64_QUOTED);
            if (rc)
                out->len = at;
        }
    }
    char why[REASON_MAX], targets[256], at[SL_TIME_RFC3339_MAX];
    sl__runner_clean_reason(it->reason, why, sizeof why);
    target_names(rr, it->dead, targets, sizeof targets);
    sl_time_format_rfc3339(sl_clock_now_ms(), at);
    rc = rc ? rc : sl_buf_printf(out, ",\"sluiceerror\":");
    rc = rc ? rc
            : sl_json_put_string(out, why[0] ? why : "unknown", strlen(why[0] ? why : "unknown"));
    rc = rc ? rc
            : sl_buf_printf(out,
                            ",\"sluiceattempts\":%u,\"sluicerule\":\"%s\",\"sluicetarget\":\"%s\","
                            "\"sluicefailedat\":\"%s\"}",
                            it->attempts, rr->rc->name, targets, at);
    sl_buf_free(&ce);
    return rc;
}

/* A payload gets one dead letter, once every target is done with it (some
 * gave up, the others may have taken it), naming the ones that gave up. */
static bool letter_due(const item *it)
{
    return it->dead && !it->todo;
}

/* Writes the dead letters of the pool's items with a dead mask to the rule's
 * dlq set (or counts them discarded when it has none). An item whose letter
 * could not be written keeps its mask and is tried again later. */
void sl__runner_dead_letters(worker *w, consumer *c)
{
    rule_run *rr = c->rule;
    size_t n = 0;
    for (size_t i = 0; i < c->npool; i++)
        if (letter_due(&c->pool[i]))
            n++;
    if (!n)
        return;
    if (!rr->dlq.impl) {
        for (size_t i = 0; i < c->npool; i++) {
            item *it = &c->pool[i];
            if (!letter_due(it))
                continue;
            char targets[256], msg[SL_ERROR_MAX];
            target_names(rr, it->dead, targets, sizeof targets);
            snprintf(msg, sizeof msg, "dropped (the rule has no dlq) after %u attempt(s) at %s: %s",
                     it->attempts, targets, it->reason ? it->reason : "");
            sl__runner_rule_loss(rr, it->offset, c->part, msg);
            atomic_fetch_add(&c->ctr->discarded, 1);
            atomic_fetch_add(&c->ctr->failed, 1);
            it->dead = 0;
        }
        return;
    }
    /* Out of memory: the items stay and are tried again. */
    if (sl__runner_grow_round(w, n))
        return;
    if (n > w->dlq_cap) {
        size_t *e = realloc(w->dlq_ends, n * sizeof *e);
        if (!e)
            return;
        w->dlq_ends = e;
        w->dlq_cap = n;
    }
    w->dlq.len = 0;
    size_t k = 0;
    for (size_t i = 0; i < c->npool; i++) {
        item *it = &c->pool[i];
        if (!letter_due(it))
            continue;
        if (dead_letter_json(rr, c, it, &w->dlq))
            return;
        w->its[k] = it;
        w->dlq_ends[k++] = w->dlq.len;
    }
    for (size_t j = 0; j < k; j++) {
        size_t from = j ? w->dlq_ends[j - 1] : 0;
        w->sub[j] = (sl_delivery){.data = (const char *)w->dlq.data + from,
                                  .len = w->dlq_ends[j] - from,
                                  .lane = w->its[j]->lane};
    }
    w->reasons.len = 0;
    pthread_mutex_lock(&w->lock);
    w->pending = k;
    pthread_mutex_unlock(&w->lock);
    rr->dlq.ops->deliver(rr->dlq.impl, w->sub, k, sl__runner_on_done, w);
    sl__runner_wait_targets(w);
    for (size_t j = 0; j < k; j++) {
        item *it = w->its[j];
        if (w->st[j] == 0) {
            atomic_fetch_add(&c->ctr->dead_lettered, 1);
            atomic_fetch_add(&c->ctr->failed, 1);
            it->dead = 0;
        } else if (w->st[j] == SL_EINVAL) {
            /* The dlq set cannot take it (e.g. larger than its max_event). */
            char msg[SL_ERROR_MAX];
            snprintf(msg, sizeof msg, "dropped: the dlq set %s refused its dead letter: %s",
                     rr->rc->dlq, sl__runner_reason_at(w, w->rsub[j]));
            sl__runner_rule_loss(rr, it->offset, c->part, msg);
            atomic_fetch_add(&c->ctr->discarded, 1);
            atomic_fetch_add(&c->ctr->failed, 1);
            it->dead = 0;
        } else {
            char msg[SL_ERROR_MAX];
            snprintf(msg, sizeof msg, "writing to the dlq set %s: %s (trying again)", rr->rc->dlq,
                     sl__runner_reason_at(w, w->rsub[j]));
            sl__runner_rule_failure(rr, it->offset, c->part, msg);
            it->retry_at_ns = 0;
        }
    }
}
