/*
 * agent/agent_fwd.c — the Databus agent's forwarding side: per-(set, lane,
 * stream) batches, the upstream requests (libcurl multi, at most one in
 * flight per key, the keys of a (set, lane) concurrently), mapping upstream's
 * per-entry results to line answers, retries with back-off, and the spool
 * (write while upstream is down, drain when it is back, oldest first per
 * stream). The ordering rule is in agent/agent_internal.h.
 */
#include "agent/agent_internal.h"
#include "agent/agent_spool.h"
#include "core/base/httpc.h"
#include "core/base/clock.h"
#include "core/base/json.h"

#include <curl/curl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define MS ((int64_t)1000000)

/* ---- keys and batches ------------------------------------------------------- */

static ag_key *key_get(sl_agent *a, const char *set, const char *lane, int stream)
{
    ag_key *k = a->last_key;
    if (k && k->stream == stream && strcmp(k->set, set) == 0 && strcmp(k->lane, lane) == 0)
        return k;
    for (k = a->keys; k; k = k->next)
        if (k->stream == stream && strcmp(k->set, set) == 0 && strcmp(k->lane, lane) == 0)
            return a->last_key = k;
    k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    snprintf(k->set, sizeof k->set, "%s", set);
    snprintf(k->lane, sizeof k->lane, "%s", lane);
    k->stream = stream;
    k->next = a->keys;
    a->keys = k;
    return a->last_key = k;
}

/* Frees a batch, keeping its body's and refs' memory for the next batch:
 * growing a fresh buffer to a megabyte for every batch cost page faults and
 * copies (a tenth of the agent's CPU with eight busy sets). */
static void batch_free(sl_agent *a, ag_batch *b)
{
    if (!b)
        return;
    if (b->body.data && a->npool < AG_POOL && b->body.cap <= AG_POOL_BYTES - a->pool_bytes) {
        b->body.len = 0;
        a->pool[a->npool].body = b->body;
        a->pool[a->npool].refs = b->refs;
        a->pool[a->npool].rcap = b->rcap;
        a->npool++;
        a->pool_bytes += b->body.cap;
    } else {
        sl_buf_free(&b->body);
        free(b->refs);
    }
    free(b);
}

/* Frees k, its batches and its connection handle (k is already unlinked). */
static void key_free(sl_agent *a, ag_key *k)
{
    batch_free(a, k->open);
    while (k->head) {
        ag_batch *b = k->head;
        k->head = b->next;
        batch_free(a, b);
    }
    if (k->easy) {
        if (k->inflight)
            curl_multi_remove_handle(a->multi, k->easy);
        curl_easy_cleanup(k->easy);
    }
    curl_slist_free_all(k->hdrs);
    sl_buf_free(&k->resp);
    sl_buf_free(&k->fbody);
    free(k);
}

/* Unlinks the head batch of k (after it was answered or set aside). */
static ag_batch *pop_head(sl_agent *a, ag_key *k)
{
    ag_batch *b = k->head;
    if (k->stream < 0 && a->left_batches)
        a->left_batches--;
    k->head = b->next;
    if (!k->head)
        k->tail = NULL;
    b->next = NULL;
    return b;
}

/* Answers every line of a memory batch with the same outcome and releases
 * the batch's memory accounting. */
static void answer_ref(sl_agent *a, ag_ref *r, const char *code, const char *msg)
{
    sl__agent_answer(a, r->c, r->seq, code, msg);
    r->c->pending--; /* the connection may be freed once this reaches 0 */
}

static void answer_all(sl_agent *a, ag_batch *b, const char *code, const char *msg)
{
    for (uint32_t i = 0; i < b->count; i++)
        answer_ref(a, &b->refs[i], code, msg);
}

static void mem_release(sl_agent *a, ag_batch *b)
{
    b->k->mem_bytes -= b->body.len;
    a->mem_total -= b->body.len;
}

/* The open batch joins the sealed ones and gets its place in the order. */
static void seal(sl_agent *a, ag_key *k)
{
    ag_batch *b = k->open;
    k->open = NULL;
    k->last_body = b->body.len;
    b->seq = a->next_batch_seq++;
    if (k->tail)
        k->tail->next = b;
    else
        k->head = b;
    k->tail = b;
}

int sl__agent_add(sl_agent *a, ag_conn *c, uint64_t seq, const char *set, const char *lane,
                  const char *ev, size_t len)
{
    ag_key *k = key_get(a, set, lane, c->stream);
    if (!k)
        return SL_ENOMEM;
    k->used_ns = a->read_ns;
    /* Seal before the batch would pass batch_bytes, so that a request is
     * never bigger than asked for (the server caps request bodies). */
    if (k->open && k->open->body.len + len + 1 > a->o.batch_bytes)
        seal(a, k);
    ag_batch *b = k->open;
    if (!b) {
        b = calloc(1, sizeof *b);
        if (!b)
            return SL_ENOMEM;
        b->k = k;
        b->first_ns = a->read_ns;
        if (a->npool) {
            a->npool--;
            b->body = a->pool[a->npool].body;
            b->refs = a->pool[a->npool].refs;
            b->rcap = a->pool[a->npool].rcap;
            a->pool_bytes -= b->body.cap;
        }
        /* Room for as much as the key's previous batch held (a busy key
         * fills batch_bytes), so that the body is not reallocated and
         * copied while it fills; a key of a few lines stays small. Without
         * the memory it grows as lines come. */
        (void)sl_buf_reserve(&b->body, k->last_body < a->o.batch_bytes ? k->last_body
                                                                        : a->o.batch_bytes);
        k->open = b;
    }
    if (b->count == b->rcap && sl_grow(&b->refs, &b->rcap, sizeof *b->refs, 64))
            return SL_ENOMEM;
    if (sl_buf_reserve(&b->body, len + 1) != 0)
        return SL_ENOMEM;
    sl_buf_append(&b->body, ev, len);
    sl_buf_append(&b->body, "\n", 1);
    b->refs[b->count++] = (ag_ref){c, seq};
    c->pending++;
    k->mem_bytes += len + 1;
    a->mem_total += len + 1;
    return 0;
}

/* Writes memory batch b to the spool and answers its lines: ok once the
 * file is synced, SpoolFull when it does not fit or cannot be written (then
 * the batch is dropped from k). Returns true when b is still in k. */
static bool spool_batch(sl_agent *a, ag_key *k, ag_batch *b, ag_batch *prev)
{
    uint64_t fb = 0;
    sl_error err = {0};
    int rc;
    uint64_t need = b->body.len + SL_SPOOL_HEADER + strlen(k->set) + strlen(k->lane);
    if (a->spool_bytes + need > a->o.spool_max)
        rc = sl_error_set(&err, SL_ENOSPC,
                          "upstream %s is unreachable and the local spool is full: %" PRIu64
                          " bytes used of the %" PRIu64 " byte limit (--spool-max); retry later",
                          a->o.upstream, a->spool_bytes, a->o.spool_max);
    else
        rc = sl__spool_write(a->o.spool_dir, b->seq, k->set, k->lane, b->count, b->body.data,
                             b->body.len, &fb, &err);
    if (rc) {
        answer_all(a, b, "SpoolFull", err.msg);
        sl__agent_log(a, "spool: %u events of set %s refused: %s", b->count, k->set, err.msg);
        mem_release(a, b);
        if (prev)
            prev->next = b->next;
        else
            k->head = b->next;
        if (k->tail == b)
            k->tail = prev;
        batch_free(a, b);
        return false;
    }
    answer_all(a, b, NULL, NULL);
    mem_release(a, b);
    sl_buf_free(&b->body);
    free(b->refs);
    b->refs = NULL;
    b->rcap = 0;
    b->spooled = true;
    b->file_bytes = fb;
    a->spool_bytes += fb;
    a->n_spooled_batches++;
    return true;
}

/* Spools every memory batch of k that is not being sent, in order. */
static void spool_key(sl_agent *a, ag_key *k)
{
    ag_batch *prev = NULL, *b = k->head;
    while (b) {
        ag_batch *next = b->next;
        bool keep = true;
        if (!b->spooled && !(b == k->head && k->inflight))
            keep = spool_batch(a, k, b, prev);
        if (keep)
            prev = b;
        b = next;
    }
}

/* ---- requests ---------------------------------------------------------------- */

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
    sl_buf *b = ud;
    if (b->len + sz * n > (64u << 20) || sl_buf_append(b, p, sz * n) != 0)
        return 0;
    return sz * n;
}

static int64_t backoff_ns(int attempt)
{
    int64_t ms = BACKOFF_MIN_MS;
    for (int i = 1; i < attempt && ms < BACKOFF_MAX_MS; i++)
        ms *= 2;
    if (ms > BACKOFF_MAX_MS)
        ms = BACKOFF_MAX_MS;
    /* ±20 % jitter so that many agents do not hammer a recovering server
     * in step. */
    ms = ms * (80 + rand() % 41) / 100;
    return ms * MS;
}

/* Starts sending k's head. A spooled head is read back first; a damaged
 * file is set aside and the next batch tried. */
static void start_send(sl_agent *a, ag_key *k)
{
    ag_batch *b;
    const void *body;
    size_t len;
    for (;;) {
        b = k->head;
        if (!b)
            return;
        if (!b->spooled) {
            body = b->body.data;
            len = b->body.len;
            break;
        }
        sl_spool_hdr h;
        sl_error err = {0};
        k->fbody.len = 0;
        int rc = sl__spool_read(a->o.spool_dir, b->seq, &h, &k->fbody, &err);
        if (rc == 0) {
            body = k->fbody.data;
            len = k->fbody.len;
            break;
        }
        if (rc == SL_ECORRUPT) {
            sl_error e2 = {0};
            sl__agent_log(a, "spool: %s; moved to %s/corrupt/", err.msg, a->o.spool_dir);
            if (sl__spool_set_aside(a->o.spool_dir, b->seq, "corrupt", &e2))
                sl__agent_log(a, "%s", e2.msg);
        } else if (rc == SL_ENOENT) {
            /* Removed by hand: there is nothing left to send. */
            sl__agent_log(a, "spool: %s; the file is gone, batch skipped", err.msg);
        } else {
            /* Out of descriptors or memory, an I/O error: the file may be
             * fine, and its lines were acknowledged. It stays at the head
             * of its stream and is read again after the back-off. */
            k->attempt++;
            k->retry_at_ns = sl_clock_mono_ns() + backoff_ns(k->attempt);
            sl__agent_log(a, "spool: %s; retrying with back-off", err.msg);
            return;
        }
        a->spool_bytes -= b->file_bytes < a->spool_bytes ? b->file_bytes : a->spool_bytes;
        batch_free(a, pop_head(a, k));
    }
    CURL *e = k->easy;
    if (!e) {
        e = k->easy = curl_easy_init();
        if (!e) {
            k->retry_at_ns = sl_clock_mono_ns() + backoff_ns(3);
            return;
        }
        /* "Expect:" turns off libcurl's 100-continue wait on large bodies:
         * a round trip per batch that buys nothing against a sluice server. */
        k->hdrs = curl_slist_append(NULL, "Content-Type: application/x-ndjson");
        k->hdrs = curl_slist_append(k->hdrs, "Expect:");
        if (k->lane[0]) {
            char h[64];
            snprintf(h, sizeof h, "X-Sluice-Lane: %s", k->lane);
            k->hdrs = curl_slist_append(k->hdrs, h);
        }
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, k->hdrs);
        curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(e, CURLOPT_WRITEDATA, &k->resp);
        curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
        curl_easy_setopt(e, CURLOPT_PRIVATE, k);
    }
    char url[SL_AGENT_URL_MAX + 200];
    snprintf(url, sizeof url, "%s/v1/sets/%s/events", a->o.upstream, k->set);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)a->o.request_ms);
    k->resp.len = 0;
    if (curl_multi_add_handle(a->multi, e) != CURLM_OK) {
        k->retry_at_ns = sl_clock_mono_ns() + backoff_ns(3);
        return;
    }
    k->inflight = true;
}

/* The "error" and "message" of an upstream JSON object (or defaults). */
static void error_of(const sl_json_tok *obj, char *code, size_t ccap, char *msg, size_t mcap)
{
    sl_json_tok v;
    code[0] = msg[0] = '\0';
    if (sl_json_get(obj, "error", &v))
        sl_httpc_json_str(&v, code, ccap);
    if (sl_json_get(obj, "message", &v))
        sl_httpc_json_str(&v, msg, mcap);
}

/* Whether upstream's 200 answer is exactly the usual all-accepted one for
 * count events: {"accepted":count,"failed":0,… (docs/http-api.md), which
 * needs no scan of the per-entry results (that scan was a sixth of the
 * agent's CPU). */
static bool all_accepted(const sl_buf *resp, uint32_t count)
{
    static const char pre[] = "{\"accepted\":", f0[] = ",\"failed\":0,";
    const char *r = (const char *)resp->data, *re = r + resp->len;
    if (resp->len < sizeof pre || memcmp(r, pre, sizeof pre - 1) != 0)
        return false;
    const char *q = r + sizeof pre - 1, *d = q;
    uint64_t n = 0;
    while (q < re && *q >= '0' && *q <= '9' && q - d < 10)
        n = n * 10 + (uint64_t)(*q++ - '0');
    if (q == d || (*d == '0' && q - d > 1))
        return false;
    if (re[-1] != '}' && !(re - r > 1 && re[-1] == '\n' && re[-2] == '}'))
        return false;
    return n == count && (size_t)(re - q) >= sizeof f0 - 1 && memcmp(q, f0, sizeof f0 - 1) == 0;
}

/* Whether upstream's 200 answer is a sluice ingest answer for b: a JSON
 * object whose "results" is an array of exactly b->count objects. Anything
 * else (an HTML page from a proxy, an empty body, a short array) leaves the
 * outcome unknown. */
static bool results_valid(const sl_buf *resp, uint32_t count, sl_json_tok *res)
{
    sl_json_tok top;
    if (sl_json_validate((const char *)resp->data, resp->len, 64, &top, NULL) != 0 ||
        top.type != SL_JSON_OBJECT || !sl_json_get(&top, "results", res) ||
        res->type != SL_JSON_ARRAY)
        return false;
    sl_json_iter it;
    sl_json_iter_init(&it, res);
    sl_json_tok ent;
    uint32_t n = 0;
    while (sl_json_iter_elem(&it, &ent)) {
        if (ent.type != SL_JSON_OBJECT || n == count)
            return false;
        n++;
    }
    return n == count;
}

/* Upstream answered 200 with a valid ingest answer: answers each line from
 * its entry of "results" (entries without an "error" were stored). */
static void answer_results(sl_agent *a, ag_batch *b, bool fast, const sl_json_tok *res)
{
    ag_key *k = b->k;
    if (fast) {
        if (!b->spooled)
            answer_all(a, b, NULL, NULL);
        return;
    }
    sl_json_iter it;
    sl_json_iter_init(&it, res);
    uint32_t failed = 0;
    char code[64], msg[1024];
    for (uint32_t i = 0; i < b->count; i++) {
        sl_json_tok ent, v;
        bool err = false;
        if (sl_json_iter_elem(&it, &ent) && sl_json_get(&ent, "error", &v)) {
            error_of(&ent, code, sizeof code, msg, sizeof msg);
            /* One spelling for clients, whether the agent or the server
             * found the bad JSON. */
            if (strcmp(code, "InvalidJson") == 0)
                snprintf(code, sizeof code, "InvalidJSON");
            if (!code[0])
                snprintf(code, sizeof code, "Upstream");
            err = true;
        }
        if (err)
            failed++;
        if (!b->spooled)
            answer_ref(a, &b->refs[i], err ? code : NULL, msg);
        else if (err && failed <= 3)
            sl__agent_log(a, "spooled event %u of set %s refused by upstream: %s: %s", i + 1,
                          k->set, code, msg);
    }
    if (b->spooled && failed)
        sl__agent_log(a, "spooled batch %" PRIu64 " of set %s: %u of %u events refused upstream",
                      b->seq, k->set, failed, b->count);
}

/* Retire k's head after upstream answered (any final answer). */
static void retire_head(sl_agent *a, ag_key *k)
{
    ag_batch *b = pop_head(a, k);
    if (b->spooled) {
        sl_error err = {0};
        if (sl__spool_remove(a->o.spool_dir, b->seq, &err))
            sl__agent_log(a, "%s", err.msg);
        a->spool_bytes -= b->file_bytes < a->spool_bytes ? b->file_bytes : a->spool_bytes;
        a->n_drained_batches++;
        if (!k->head || !k->head->spooled) {
            bool any = false;
            for (ag_key *x = a->keys; x && !any; x = x->next)
                any = x->head && x->head->spooled;
            if (!any)
                sl__agent_log(a, "spool drained");
        }
    } else {
        mem_release(a, b);
    }
    batch_free(a, b);
}

/* A final answer came for k: k is up again (and, logged, upstream). */
static void upstream_up(sl_agent *a, ag_key *k)
{
    k->attempt = 0;
    k->retry_at_ns = 0;
    k->down_since_ns = 0;
    k->warn_ns = 0;
    if (!a->down_since_ns)
        return;
    /* Upstream is back once no key is failing any more: one set answered
     * 5xx while others go through is logged as failing, not as flapping. */
    for (ag_key *x = a->keys; x; x = x->next)
        if (x->down_since_ns)
            return;
    sl__agent_log(a, "upstream %s is back%s", a->o.upstream,
                  a->spool_bytes ? ", draining the spool" : "");
    a->down_since_ns = 0;
    a->spooling = false;
}

/* A whole-request refusal that retrying cannot change: one of the statuses
 * a sluice server gives for a bad request (docs/http-api.md) with its JSON
 * error answer, or 507 SetLimit. A 401/403 (a proxy's login), a 3xx or a 404 page from a
 * wrong host are not the server's verdict on the batch: they are retried. */
static bool final_refusal(long status, const sl_buf *resp, char *code, size_t ccap, char *msg,
                          size_t mcap)
{
    if (status != 400 && status != 404 && status != 413 && status != 415 && status != 422 &&
        status != 507)
        return false;
    sl_json_tok top, e, m;
    if (sl_json_validate((const char *)resp->data, resp->len, 64, &top, NULL) != 0 ||
        top.type != SL_JSON_OBJECT || !sl_json_get(&top, "error", &e) || e.type != SL_JSON_STRING ||
        !sl_json_get(&top, "message", &m) || m.type != SL_JSON_STRING)
        return false;
    error_of(&top, code, ccap, msg, mcap);
    /* 507 is final only as SetLimit (no more sets may be created on first
     * use); InsufficientStorage (a full disk) passes. */
    return code[0] != '\0' && (status != 507 || strcmp(code, "SetLimit") == 0);
}

static void finished(sl_agent *a, ag_key *k, CURLcode cc)
{
    long status = 0;
    curl_easy_getinfo(k->easy, CURLINFO_RESPONSE_CODE, &status);
    curl_multi_remove_handle(a->multi, k->easy);
    k->inflight = false;
    ag_batch *b = k->head;
    int64_t now = sl_clock_mono_ns();
    char code[64] = "", msg[1024] = "";
    sl_json_tok res = {0};
    bool fast = false, ok200 = false, refused = false;
    if (cc == CURLE_OK && status == 200) {
        fast = all_accepted(&k->resp, b->count);
        ok200 = fast || results_valid(&k->resp, b->count, &res);
    } else if (cc == CURLE_OK) {
        refused = final_refusal(status, &k->resp, code, sizeof code, msg, sizeof msg);
    }
    if (!ok200 && !refused) {
        /* Retryable: nothing was stored, or the outcome is unknown (an
         * answer that is not a sluice server's: a duplicate is the price of
         * never losing an acknowledged event). */
        char why[160];
        if (cc != CURLE_OK)
            snprintf(why, sizeof why, "%s", curl_easy_strerror(cc));
        else if (status >= 200 && status < 300)
            snprintf(why, sizeof why,
                     "HTTP %ld with an answer that is not a sluice ingest "
                     "answer for the batch",
                     status);
        else
            snprintf(why, sizeof why, "HTTP %ld", status);
        k->attempt++;
        k->retry_at_ns = now + backoff_ns(k->attempt);
        if (!k->down_since_ns)
            k->down_since_ns = now;
        if (!a->down_since_ns) {
            a->down_since_ns = now;
            sl__agent_log(a, "upstream %s failing (%s); retrying with back-off", a->o.upstream,
                          why);
        }
        /* A batch that fails for long keeps its stream waiting (order):
         * say so once a minute, so that it is seen. */
        if (now - k->down_since_ns >= 60000 * MS && now - k->warn_ns >= 60000 * MS) {
            k->warn_ns = now;
            sl__agent_log(a,
                          "batch %" PRIu64 " of set %s lane \"%s\" failing for %" PRId64
                          " s (%s); retrying, later batches of its stream wait behind it",
                          b->seq, k->set, k->lane, (now - k->down_since_ns) / (1000 * MS), why);
        }
        return;
    }
    upstream_up(a, k);
    if (ok200) {
        answer_results(a, b, fast, &res);
    } else {
        /* A whole-request refusal (404 NoSuchSet, 413, 400 …): retrying
         * cannot help, so every line gets upstream's code. */
        if (!msg[0])
            snprintf(msg, sizeof msg, "upstream answered HTTP %ld", status);
        if (b->spooled) {
            sl_error err = {0};
            sl__agent_log(a,
                          "spooled batch %" PRIu64 " of set %s refused (%ld %s: %s); moved to "
                          "%s/rejected/",
                          b->seq, k->set, status, code, msg, a->o.spool_dir);
            if (sl__spool_set_aside(a->o.spool_dir, b->seq, "rejected", &err))
                sl__agent_log(a, "%s", err.msg);
            a->spool_bytes -= b->file_bytes < a->spool_bytes ? b->file_bytes : a->spool_bytes;
            batch_free(a, pop_head(a, k));
            return;
        }
        answer_all(a, b, code, msg);
    }
    retire_head(a, k);
}

void sl__agent_done(sl_agent *a)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(a->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        ag_key *k = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&k);
        if (k)
            finished(a, k, m->data.result);
    }
}

/* ---- timers ------------------------------------------------------------------ */

/* Whether k must wait because spool files of an earlier run for its (set,
 * lane) are still to be sent: they have no live stream, so they go before
 * every new batch of any stream. */
static bool waits_for_leftovers(sl_agent *a, const ag_key *k)
{
    if (!a->left_batches || k->stream < 0)
        return false;
    for (const ag_key *x = a->keys; x; x = x->next)
        if (x->stream < 0 && x->head && strcmp(x->set, k->set) == 0 &&
            strcmp(x->lane, k->lane) == 0)
            return true;
    return false;
}

long sl__agent_tick(sl_agent *a, int64_t now, long max_ms)
{
    int64_t next = now + (int64_t)max_ms * MS;
    int64_t after = a->o.spool_after_ms * MS;
    bool all_down = a->down_since_ns && now - a->down_since_ns >= after;
    for (ag_key **kp = &a->keys; *kp;) {
        ag_key *k = *kp;
        /* A key idle for a minute is freed: set names come and go, and
         * each key holds a connection handle. */
        if (!k->open && !k->head && !k->inflight && now - k->used_ns > 60000 * MS) {
            *kp = k->next;
            if (a->last_key == k)
                a->last_key = NULL;
            key_free(a, k);
            continue;
        }
        kp = &k->next;
        if (!k->head && !k->inflight && k->down_since_ns) {
            /* Its failing batch was set aside (a damaged spool file): the
             * next one starts afresh. */
            k->down_since_ns = 0;
            k->attempt = 0;
        }
        ag_batch *o = k->open;
        if (o && (a->stopping || o->body.len >= a->o.batch_bytes ||
                  now - o->first_ns >= a->o.linger_ms * MS))
            seal(a, k);
        else if (o && o->first_ns + a->o.linger_ms * MS < next)
            next = o->first_ns + a->o.linger_ms * MS;
        bool waits = k->head && waits_for_leftovers(a, k);
        /* Down is per key: another set's success says nothing about this
         * one (a set that keeps failing must reach the spool rather than
         * fill the memory bound). A key that failed during a long outage
         * spools at once; a key failing alone (5xx on its batches) does so
         * after spool_after_ms of its own. Its head stays its head, so the
         * order is kept: the stream waits behind it (logged once a minute),
         * while new lines are acknowledged from the spool. */
        bool down_long = k->down_since_ns && (now - k->down_since_ns >= after || all_down);
        if (down_long && !a->spooling) {
            a->spooling = true;
            sl__agent_log(a, "upstream %s down for %" PRId64 " ms for set %s: spooling to %s",
                          a->o.upstream, (now - k->down_since_ns) / MS, k->set, a->o.spool_dir);
        }
        /* Spool while upstream is down for long, or down at all and this
         * key's memory is full; a healthy but slower upstream only slows
         * the readers down (back-pressure), it does not cost disk writes.
         * Stopping, a key that may not send now (a spooled head, or an
         * earlier run's files of its (set, lane) ahead of it) spools the
         * rest behind it, in order, rather than wait for the deadline. */
        if ((k->down_since_ns && (down_long || a->stopping || k->mem_bytes > a->o.key_max)) ||
            (a->stopping && k->head && (k->head->spooled || waits) && !k->inflight))
            spool_key(a, k);
        if (k->head && !k->inflight && !waits && !(a->stopping && k->head->spooled)) {
            if (now >= k->retry_at_ns)
                start_send(a, k);
            else if (k->retry_at_ns < next)
                next = k->retry_at_ns;
        }
    }
    long ms = (long)((next - now + MS - 1) / MS);
    return ms < 0 ? 0 : ms;
}

/* ---- start and stop ------------------------------------------------------------ */

int sl__agent_load_spool(sl_agent *a, sl_error *err)
{
    uint64_t *seqs;
    size_t n;
    int rc = sl__spool_list(a->o.spool_dir, &seqs, &n, err);
    if (rc)
        return rc;
    size_t loaded = 0;
    for (size_t i = 0; i < n; i++) {
        sl_spool_hdr h;
        sl_error e = {0};
        /* Only a damaged file is set aside. Any other error (out of
         * descriptors or memory, I/O) may be passing and the file fine: try
         * again a few times, then refuse to start, keeping the file. */
        for (int t = 0; t < 5; t++) {
            e = (sl_error){0};
            rc = sl__spool_read(a->o.spool_dir, seqs[i], &h, NULL, &e);
            if (rc == 0 || rc == SL_ECORRUPT || rc == SL_ENOENT)
                break;
            struct timespec ts = {0, 100000000L * (t + 1)};
            nanosleep(&ts, NULL);
        }
        if (rc == SL_ECORRUPT) {
            sl_error e2 = {0};
            sl__agent_log(a, "spool: %s; moved to %s/corrupt/", e.msg, a->o.spool_dir);
            if (sl__spool_set_aside(a->o.spool_dir, seqs[i], "corrupt", &e2))
                sl__agent_log(a, "%s", e2.msg);
            continue;
        }
        if (rc == SL_ENOENT)
            continue;
        if (rc) {
            free(seqs);
            return sl_error_set(err, rc, "%s (the file is kept; not starting)", e.msg);
        }
        ag_key *k = key_get(a, h.set, h.lane, -1);
        ag_batch *b = k ? calloc(1, sizeof *b) : NULL;
        if (!b) {
            free(seqs);
            return sl_error_set(err, SL_ENOMEM, "spool: out of memory");
        }
        b->k = k;
        b->seq = h.seq;
        b->count = h.count;
        b->spooled = true;
        b->file_bytes = h.file_bytes;
        if (k->tail)
            k->tail->next = b;
        else
            k->head = b;
        k->tail = b;
        a->left_batches++;
        a->spool_bytes += h.file_bytes;
        if (h.seq >= a->next_batch_seq)
            a->next_batch_seq = h.seq + 1;
        loaded++;
    }
    free(seqs);
    if (loaded)
        sl__agent_log(a,
                      "spool: %zu batches (%" PRIu64 " bytes) left by a previous run; "
                      "draining them first",
                      loaded, a->spool_bytes);
    return 0;
}

bool sl__agent_mem_left(sl_agent *a)
{
    for (ag_key *k = a->keys; k; k = k->next) {
        if (k->open)
            return true;
        for (ag_batch *b = k->head; b; b = b->next)
            if (!b->spooled)
                return true;
    }
    return false;
}

void sl__agent_spool_all(sl_agent *a)
{
    for (ag_key *k = a->keys; k; k = k->next) {
        if (k->inflight) {
            /* Its outcome stays unknown: spooling it may send it twice,
             * which at-least-once allows; dropping it would not. */
            curl_multi_remove_handle(a->multi, k->easy);
            k->inflight = false;
        }
        if (k->open)
            seal(a, k);
        spool_key(a, k);
    }
}

void sl__agent_free_keys(sl_agent *a)
{
    ag_key *k = a->keys;
    while (k) {
        ag_key *next = k->next;
        key_free(a, k);
        k = next;
    }
    a->keys = a->last_key = NULL;
    while (a->npool) {
        a->npool--;
        sl_buf_free(&a->pool[a->npool].body);
        free(a->pool[a->npool].refs);
    }
    a->pool_bytes = 0;
}
