/*
 * tests/fuzz/fuzz_kafka_frame.c — the Kafka listener's request path: the
 * request header (kafka/kproto.c, kafka/kreq.c), the API table and dispatch
 * (kafka/kapi.c) and every handler behind it (kmeta.c, kproduce.c, kidem.c,
 * kfetch.c, kcoord.c, koffsets.c), the way klisten.c drives them, but with
 * no connection (kafka_internal.h's detached requests).
 *
 * Input: one request frame after its 4-byte size (header + body), as the
 * listener hands it to sl__kreq_new(). The seeds (corpus/kafka_frame/) are
 * frames librdkafka 2.0.2 (kcat, confluent-kafka) sent to a sluice, captured
 * by a TCP proxy in front of it, plus a few encoded by hand for requests
 * those clients do not send (SASL, old versions, static group members).
 *
 * The fixture, made once per process: sets in a scratch directory
 * (fz_tmpdir()) with auto-create (at most 16 auto-created sets), a Databus
 * and a waits registry wired as the server wires them, the idempotent-
 * producer state and the group coordinator (with its timer thread), and the
 * set "orders" (2 partitions) holding an uncompressed batch, a zstd batch
 * and a batch in lane "eu", written by Produce requests at start. State
 * carries over from input to input as on a real server (groups, producers,
 * records); after an input, sets beyond 24 are deleted and "orders" is made
 * again if an input deleted it.
 *
 * A parked request (SL_KREQ_PENDING) is finished as the listener would:
 * Produce waits for its post (the Databus always completes it) and resumes;
 * any other (a Fetch long poll, a JoinGroup or follower's SyncGroup) gets
 * PARK_WAIT_MS to be posted and resumed (a Fetch with a tiny max_wait_ms
 * answers by its deadline), and is then cancelled as if its connection had
 * closed: cancel() true frees it at once; false promises a post, which must
 * come (the request is then freed without resume, as klisten.c does).
 *
 * Checks (FZ_CHECK): a handler returns DONE, PENDING or CLOSE; a parked
 * request has resume and cancel; a promised post comes within 10 s; no
 * post is left over once a request answered (posts belong to pending
 * periods, kafka_internal.h: the listener would resume it again); a done
 * response is not dropped for memory and is not empty (every response of
 * every API has fields) unless it is a silent acks=0 Produce; its file parts
 * (Fetch's zero-copy slices) lie in order within the response; and the
 * fixture's own Produce requests store their records.
 *
 * Inputs that would only cost time are skipped: CreateTopics asking for
 * more than 64 partitions in all (each is a directory and files).
 * FUZZ_KAFKA_TRACE=1 prints one line per input (API, version, outcome,
 * response size) to stderr, for checking what new seeds reach.
 */
#include "core/base/varint.h"
#include "core/bus/databus.h"
#include "core/bus/set.h"
#include "core/bus/waits.h"
#include "core/log/batch.h"
#include "kafka/kafka_internal.h"
#include "tests/fuzz/fuzzutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PARK_WAIT_MS 5
#define POST_WAIT_MS 10000
#define MAX_SETS 24
#define MAX_CREATE_PARTITIONS 64

static struct {
    bool ready;
    char dir[4200];
    sl_waits *ws;
    sl_databus *bus;
    sl_sets *sets;
    sl_kafka *k;
} fx;

/* ---- requests ------------------------------------------------------------------ */

static int after_cancel(sl_kreq *r)
{
    (void)r; /* klisten.c frees a cancelled request when its post comes */
    return SL_KREQ_DONE;
}

static void check_response(const sl_kreq *r)
{
    FZ_CHECK(sl_kw_ok(&r->w), "a response dropped for memory (%s v%d)",
             sl_kp_api_name(r->h.key, (char[16]){0}), r->h.version);
    FZ_CHECK(r->silent || sl_kreq_size(r) > 0, "an empty response body (api %d v%d)", r->h.key,
             r->h.version);
    FZ_CHECK(!r->silent || r->h.key == SL_KAPI_PRODUCE, "a silent answer to api %d", r->h.key);
    size_t at = 0;
    for (size_t i = 0; i < r->nfiles; i++) {
        FZ_CHECK(r->files[i].at >= at && r->files[i].at <= r->out.len,
                 "file part %zu at %zu (previous at %zu, response %zu bytes)", i, r->files[i].at,
                 at, r->out.len);
        FZ_CHECK(r->files[i].slice.fd >= 0, "file part %zu without a descriptor", i);
        at = r->files[i].at;
    }
}

/* Dispatches r and finishes it as the listener would (the top of the file).
 * Returns the last code: DONE, CLOSE, or PENDING for a cancelled request. */
static int run(sl_kreq *r)
{
    int code = sl__kapi_dispatch(r);
    for (int round = 0; code == SL_KREQ_PENDING; round++) {
        FZ_CHECK(round < 64, "api %d v%d still parked after %d resumes", r->h.key, r->h.version,
                 round);
        FZ_CHECK(r->resume != NULL, "api %d parked without resume", r->h.key);
        if (r->h.key == SL_KAPI_PRODUCE) {
            code = sl__kreq_wait(r, POST_WAIT_MS);
            FZ_CHECK(code != -1, "a parked Produce got no post in %d ms", POST_WAIT_MS);
            continue;
        }
        FZ_CHECK(r->cancel != NULL, "api %d parked without cancel", r->h.key);
        code = sl__kreq_wait(r, PARK_WAIT_MS);
        if (code != -1)
            continue; /* posted and resumed: done, closed or parked again */
        if (r->cancel(r))
            return SL_KREQ_PENDING;
        r->resume = after_cancel;
        code = sl__kreq_wait(r, POST_WAIT_MS);
        FZ_CHECK(code == SL_KREQ_DONE, "api %d: cancel() promised a post, none came in %d ms",
                 r->h.key, POST_WAIT_MS);
        return SL_KREQ_PENDING;
    }
    FZ_CHECK(code == SL_KREQ_DONE || code == SL_KREQ_CLOSE, "api %d v%d returned %d", r->h.key,
             r->h.version, code);
    /* Posts belong to pending periods: one for a request that answered
     * would make the listener resume (or free) it a second time. */
    r->resume = after_cancel;
    FZ_CHECK(sl__kreq_wait(r, 0) == -1, "api %d v%d: a post came after the handler answered",
             r->h.key, r->h.version);
    if (code == SL_KREQ_DONE)
        check_response(r);
    return code;
}

/* Whether the input is a CreateTopics asking for more than
 * MAX_CREATE_PARTITIONS partitions in all (kmeta.c's layout; -1: the
 * default of 2). */
static bool costly(const uint8_t *data, size_t size)
{
    sl_kr in;
    sl_kp_header h;
    sl_kr_init(&in, data, size);
    if (!sl_kp_header_read(&in, &h) || h.key != SL_KAPI_CREATE_TOPICS)
        return false;
    int64_t total = 0;
    int32_t n = sl_kr_array(&in, false, 2 + 4 + 2 + 4 + 4);
    for (int32_t i = 0; i < n && sl_kr_ok(&in); i++) {
        sl_kr_str(&in, false);
        int32_t parts = sl_kr_i32(&in);
        total += parts == -1 ? 2 : parts > 0 && parts <= 1024 ? parts : 0;
        sl_kr_i16(&in);
        int32_t na = sl_kr_array(&in, false, 8);
        for (int32_t a = 0; a < na; a++) {
            sl_kr_i32(&in);
            int32_t nb = sl_kr_array(&in, false, 4);
            sl_kr_skip(&in, 4 * (size_t)(nb > 0 ? nb : 0));
        }
        int32_t nc = sl_kr_array(&in, false, 4);
        for (int32_t c = 0; c < nc; c++) {
            sl_kr_str(&in, false);
            sl_kr_str(&in, false);
        }
    }
    return total > MAX_CREATE_PARTITIONS;
}

/* ---- the fixture ----------------------------------------------------------------- */

static void on_append(void *ctx, sl_set *set, int32_t partition, int64_t end, const char *lane)
{
    (void)lane;
    sl_waits_on_append(ctx, set, partition, end);
}

/* A record header (varint lengths, as in a record batch). */
static size_t put_header(uint8_t *h, const char *k, const char *v)
{
    size_t n = sl_varint_put(h, (int64_t)strlen(k));
    memcpy(h + n, k, strlen(k));
    n += strlen(k);
    n += sl_varint_put(h + n, (int64_t)strlen(v));
    memcpy(h + n, v, strlen(v));
    return n + strlen(v);
}

/* Produce v7, acks=-1, of one client batch of n records to orders/part:
 * stored, or the fixture is broken. */
static void fill(int32_t part, int n, sl_codec codec, const char *lane)
{
    sl_batch_builder b;
    sl_batch_builder_init(&b, codec, 1);
    FZ_CHECK(sl_batch_builder_reset(&b, lane ? lane : "") == 0, "builder reset");
    for (int i = 0; i < n; i++) {
        char key[16], val[64];
        uint8_t h[64];
        size_t hl = put_header(h, "h1", "x");
        int hn = 1;
        if (lane) {
            hl += put_header(h + hl, "lane", lane);
            hn++;
        }
        snprintf(key, sizeof key, "k%d", i);
        snprintf(val, sizeof val, "{\"n\":%d,\"lane\":\"%s\"}", i, lane ? lane : "");
        FZ_CHECK(sl_batch_builder_add_raw(&b, 1700000000000 + i, key, strlen(key), val,
                                          strlen(val), h, hl, hn) == 0,
                 "builder add");
    }
    sl_batch bt;
    sl_error err = {0};
    FZ_CHECK(sl_batch_builder_finish(&b, &bt, &err) == 0, "builder finish: %s", err.msg);

    sl_buf f = SL_BUF_INIT;
    sl_kw w;
    sl_kw_init(&w, &f);
    sl_kw_i16(&w, SL_KAPI_PRODUCE);
    sl_kw_i16(&w, 7);
    sl_kw_i32(&w, 1);
    sl_kw_str(&w, false, "fuzz-fixture", -1);
    sl_kw_str(&w, false, NULL, 0); /* transactional_id */
    sl_kw_i16(&w, -1);
    sl_kw_i32(&w, 30000);
    sl_kw_array(&w, false, 1);
    sl_kw_str(&w, false, "orders", -1);
    sl_kw_array(&w, false, 1);
    sl_kw_i32(&w, part);
    sl_kw_bytes(&w, false, bt.data, (int32_t)bt.len);
    FZ_CHECK(sl_kw_ok(&w), "encoding the fixture's Produce");
    sl_batch_builder_free(&b);

    sl_kreq *r = sl__kreq_new_detached(fx.k, f.data, f.len);
    sl_buf_free(&f);
    FZ_CHECK(r, "the fixture's Produce header");
    FZ_CHECK(run(r) == SL_KREQ_DONE, "the fixture's Produce was not answered");
    sl_kr in;
    sl_kr_init(&in, r->out.data, r->out.len);
    sl_kr_array(&in, false, 1);
    sl_kr_str(&in, false);
    sl_kr_array(&in, false, 1);
    sl_kr_i32(&in);
    int16_t code = sl_kr_i16(&in);
    FZ_CHECK(sl_kr_ok(&in) && code == 0, "the fixture's Produce to orders/%d: error %d", part,
             code);
    sl__kreq_free(r);
}

static void make_orders(void)
{
    sl_set_config c = *sl_sets_defaults(fx.sets);
    c.partitions = 2;
    c.log.retention_ms = -1;
    sl_set *s = NULL;
    sl_error err = {0};
    FZ_CHECK(sl_sets_define(fx.sets, "orders", &c, &s, &err) == 0, "define orders: %s", err.msg);
    fill(0, 3, SL_CODEC_NONE, NULL);
    fill(0, 4, SL_CODEC_ZSTD, NULL);
    fill(0, 2, SL_CODEC_NONE, "eu");
    fill(0, 1, SL_CODEC_NONE, NULL);
    fill(1, 5, SL_CODEC_NONE, NULL);
}

static void fixture_free(void)
{
    if (!fx.ready)
        return;
    fx.ready = false;
    sl__kcoord_stop(fx.k);
    sl__kidem_close(fx.k);
    sl__kcoord_close(fx.k);
    sl_databus_free(fx.bus);
    sl_waits_free(fx.ws);
    sl_sets_close(fx.sets);
    free(fx.k);
}

static void fixture(void)
{
    if (fx.ready)
        return;
    snprintf(fx.dir, sizeof fx.dir, "%s/kafka_frame", fz_tmpdir());
    sl_error err = {0};
    FZ_CHECK(sl_waits_start(&fx.ws, &err) == 0, "waits: %s", err.msg);
    sl_databus_options bo = {.on_append = on_append, .ctx = fx.ws};
    FZ_CHECK(sl_databus_start(&bo, &fx.bus, &err) == 0, "databus: %s", err.msg);
    sl_sets_options so = {.data_dir = fx.dir,
                          .auto_create = true,
                          .max_auto_sets = 16,
                          .on_open = sl_databus_attach,
                          .on_close = sl_databus_detach,
                          .ctx = fx.bus};
    sl_set_config_default(&so.defaults);
    so.defaults.partitions = 2;
    so.defaults.linger_ms = 0;
    so.defaults.ack = SL_ACK_BUFFER;
    so.defaults.buffer_bytes = 1 << 20;
    so.defaults.log.segment_bytes = 1 << 20;
    FZ_CHECK(sl_sets_open(&so, &fx.sets, &err) == 0, "sets: %s", err.msg);
    fx.k = calloc(1, sizeof *fx.k);
    FZ_CHECK(fx.k, "oom");
    sl_kafka *k = fx.k;
    k->sets = fx.sets;
    k->bus = fx.bus;
    k->waits = fx.ws;
    snprintf(k->data_dir, sizeof k->data_dir, "%s", fx.dir);
    snprintf(k->host, sizeof k->host, "127.0.0.1");
    snprintf(k->adv_host, sizeof k->adv_host, "127.0.0.1");
    k->port = k->adv_port = 9092;
    k->o.host = k->host;
    k->o.data_dir = k->data_dir;
    k->o.waits = fx.ws;
    k->o.max_request_bytes = 100u << 20;
    k->o.hooks = &k->hooks;
    FZ_CHECK(sl__kidem_open(k, &err) == 0, "kidem: %s", err.msg);
    FZ_CHECK(sl__kcoord_open(k, &err) == 0, "kcoord: %s", err.msg);
    fx.ready = true;
    make_orders();
    atexit(fixture_free);
}

typedef struct names {
    char (*v)[SL_SET_NAME_MAX + 1];
    size_t n, cap;
} names;

static void collect(sl_set *set, void *ctx)
{
    names *l = ctx;
    if (!strcmp(set->name, "orders") || atomic_load(&set->deleted))
        return;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 32;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        FZ_CHECK(l->v, "oom");
    }
    snprintf(l->v[l->n++], sizeof l->v[0], "%s", set->name);
}

/* After an input: at most MAX_SETS sets, and "orders" there. */
static void tidy(void)
{
    if (sl_sets_count(fx.sets) > MAX_SETS) {
        names l = {0};
        sl_sets_each(fx.sets, collect, &l);
        for (size_t i = 0; i < l.n; i++) {
            sl_error err = {0};
            int rc = sl_sets_delete(fx.sets, l.v[i], &err);
            FZ_CHECK(rc == 0 || rc == SL_ENOENT, "delete %s: %s", l.v[i], err.msg);
        }
        free(l.v);
    }
    sl_set *s = NULL;
    sl_error err = {0};
    if (sl_sets_get(fx.sets, "orders", false, &s, &err) != 0 || atomic_load(&s->deleted))
        make_orders();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int trace = -1;
    if (trace < 0)
        trace = getenv("FUZZ_KAFKA_TRACE") != NULL;
    fixture();
    if (costly(data, size))
        return 0;
    sl_kreq *r = sl__kreq_new_detached(fx.k, data, size);
    if (!r)
        return 0; /* a malformed header: the listener closes the connection */
    FZ_CHECK(r->in_len == size, "request of %zu bytes for a frame of %zu", r->in_len, size);
    int code = run(r);
    if (trace) {
        char api[16];
        fprintf(stderr, "kafka_frame: %s v%d: %s, %zu bytes, %zu file part(s)\n",
                sl_kp_api_name(r->h.key, api), r->h.version,
                code == SL_KREQ_DONE ? "done" : code == SL_KREQ_CLOSE ? "close" : "cancelled",
                sl_kreq_size(r), r->nfiles);
    }
    sl__kreq_free(r);
    tidy();
    return 0;
}
