/*
 * http/http_read.c — the read side of the HTTP API: events
 * from a partition (with long-polling), set listings, and /metrics.
 */
#include "http/http_internal.h"

#include "core/bus/record_event.h"
#include "core/log/store_kafka.h"
#include "core/base/lane_name.h"
#include "core/base/clock.h"
#include "core/bus/event.h"
#include "core/base/buf.h"
#include "core/base/metrics.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define READ_DEFAULT_MAX 100
#define READ_LIMIT_MAX 1000000
/* A response is built in memory up to this size; a bigger one (a large
 * `max`) is streamed: the rest is read from the log while it is sent, a
 * chunk at a time, so a reader asking for a million events costs the
 * server READ_CHUNK_BYTES, not the whole answer. */
#define READ_MAX_BYTES (1u << 20)
#define READ_CHUNK_BYTES (256u << 10)
#define WAIT_MAX_MS 60000

/* The state of a streamed read (one per response, used only by the thread
 * sending it): the text not yet sent, and the open log reader. */
typedef struct read_stream {
    sl_buf text;
    size_t sent;         /* bytes of text already handed to libmicrohttpd */
    const sl_store *log; /* lives as long as the server */
    void *rd;
    sl_set *set;
    int32_t part;
    int64_t n, max;
    bool done; /* the closing "]…}" is in text */
} read_stream;

/* Appends one stored record as the event rules see (a Kafka client's
 * plain or binary-mode record gets its CloudEvent built,
 * core/bus/record_event.h), decorated with its set, partition and offset,
 * to b (with the separating comma after the first). A record that is no
 * event at all (a structured one whose value is not a JSON object) goes
 * out as a JSON string, so the answer stays JSON. */
static void put_event(sl_buf *b, const sl_set *set, int32_t part, const sl_record *rec, bool first)
{
    if (!first)
        sl_buf_append(b, ",", 1);
    if (sl_record_kind_of(rec) == SL_RECORD_STRUCTURED &&
        !sl_event_decorate((const char *)rec->value, rec->value_len, set->name, part, rec->offset,
                           b))
        return;
    if (sl_record_event(rec, set->name, part, b, NULL))
        sl_json_put_string(b, rec->value ? (const char *)rec->value : "", rec->value_len);
}

/* Reads events into s->text until READ_CHUNK_BYTES, max or the end of the
 * log; at the end closes the JSON with next_offset. A read error mid-way
 * ends the answer there: next_offset points at the event that failed, so
 * the client's next request gets the error. */
static void stream_fill(read_stream *s)
{
    sl_record rec;
    sl_error err = {0};
    int rc = 0;
    size_t start = s->text.len;
    while (s->n < s->max && s->text.len - start < READ_CHUNK_BYTES &&
           (rc = sl_store_reader_next(s->log, s->rd, &rec, &err)) == 0) {
        put_event(&s->text, s->set, s->part, &rec, s->n == 0);
        s->n++;
    }
    if (s->n >= s->max || rc != 0) { /* else the chunk is full: more later */
        sl_buf_printf(&s->text, "],\"next_offset\":%" PRId64 "}\n",
                      sl_store_reader_position(s->log, s->rd));
        s->done = true;
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    read_stream *s = cls;
    if (s->sent == s->text.len) {
        if (s->done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        s->text.len = s->sent = 0;
        stream_fill(s);
        if (s->text.len == 0)
            return MHD_CONTENT_READER_END_OF_STREAM;
    }
    size_t n = s->text.len - s->sent < max ? s->text.len - s->sent : max;
    memcpy(buf, s->text.data + s->sent, n);
    s->sent += n;
    return (ssize_t)n;
}

static void stream_free(void *cls)
{
    read_stream *s = cls;
    sl_store_reader_close(s->log, s->rd);
    sl_buf_free(&s->text);
    free(s);
}

static const char *arg(sl_http_req *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}

/* Parses a non-negative integer argument; def when absent. */
static int int_arg(sl_http_req *r, const char *name, int64_t def, int64_t max, int64_t *out)
{
    const char *s = arg(r, name);
    if (!s) {
        *out = def;
        return 0;
    }
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || v < 0 || v > max)
        return -1;
    *out = v;
    return 0;
}

/* Where to start: offset=N, or from=beginning|end|RFC 3339 time. An offset
 * already given to a publisher but not yet written (ack = "buffer" answers
 * before the append) is valid: reading it waits or returns nothing yet. */
static enum MHD_Result start_offset(sl_http_req *r, sl_set *set, int32_t part, int64_t *offset,
                                    bool *ok)
{
    const sl_store *log = &set->parts[part];
    *ok = false;
    const char *from = arg(r, "from"), *off = arg(r, "offset");
    int64_t start = sl_store_start_offset(log), end = sl_store_end_offset(log);
    if (off && from)
        return sl__http_error(r, 400, "InvalidParameter", "give offset or from, not both");
    if (off) {
        if (int_arg(r, "offset", 0, INT64_MAX, offset))
            return sl__http_error(r, 400, "InvalidParameter",
                                  "offset \"%s\" is not a "
                                  "non-negative integer",
                                  off);
        if (*offset < start || (*offset > end && *offset > sl_databus_next_offset(set, part)))
            return sl__http_error(r, 416, "OffsetOutOfRange",
                                  "offset %" PRId64 " is outside "
                                  "the partition's offsets %" PRId64 "..%" PRId64,
                                  *offset, start, end);
    } else if (!from || strcmp(from, "beginning") == 0) {
        *offset = start;
    } else if (strcmp(from, "end") == 0) {
        *offset = end;
    } else {
        int64_t ts;
        sl_error err = {0};
        if (sl_time_parse_rfc3339(from, strlen(from), &ts))
            return sl__http_error(r, 400, "InvalidParameter",
                                  "from must be beginning, end "
                                  "or an RFC 3339 time, not \"%s\"",
                                  from);
        if (sl_store_offset_for_time(log, ts, offset, &err))
            return sl__http_error(r, 500, "ReadFailed", "%s", err.msg);
    }
    *ok = true;
    return MHD_YES;
}

enum MHD_Result sl__http_read(sl_http_req *r, const char *set_name)
{
    sl_http *h = r->h;
    sl_set *set;
    sl_error err = {0};
    int rc = sl_sets_get(h->sets, set_name, false, &set, &err);
    if (rc)
        return sl__http_error(r, rc == SL_EINVAL ? 400 : 404,
                              rc == SL_EINVAL ? "InvalidSetName" : "NoSuchSet", "%s", err.msg);
    int64_t part, max, wait_ms;
    if (int_arg(r, "partition", 0, INT32_MAX, &part))
        return sl__http_error(r, 400, "InvalidParameter", "partition must be a number 0..%d",
                              set->nparts - 1);
    if (part >= set->nparts)
        return sl__http_error(r, 404, "NoSuchPartition", "set %s has partitions 0..%d", set->name,
                              set->nparts - 1);
    /* max is an upper bound: asking for more than a response carries gets
     * the most a response carries (the client follows next_offset). */
    if (int_arg(r, "max", READ_DEFAULT_MAX, INT64_MAX, &max) || max == 0)
        return sl__http_error(r, 400, "InvalidParameter", "max must be a positive integer");
    if (max > READ_LIMIT_MAX)
        max = READ_LIMIT_MAX;
    if (int_arg(r, "wait_ms", 0, WAIT_MAX_MS, &wait_ms))
        return sl__http_error(r, 400, "InvalidParameter", "wait_ms must be 0..%d", WAIT_MAX_MS);
    const char *lane = arg(r, "lane");
    if (!lane)
        lane = "";
    else if (strcmp(lane, "*") == 0)
        lane = NULL;
    else if (!sl_lane_valid(lane, strlen(lane)))
        return sl__http_error(r, 400, "InvalidLane", "lane \"%s\" is not [a-z0-9-]{1,32} or *",
                              lane);
    const sl_store *log = &set->parts[part];
    int64_t offset;
    if (r->poll_deadline_ns) {
        /* Woken from a long-poll: go on from where the first pass stopped
         * (re-resolving from=end now would skip what woke us). */
        offset = r->poll_pos;
    } else {
        bool ok;
        enum MHD_Result res = start_offset(r, set, (int32_t)part, &offset, &ok);
        if (!ok)
            return res;
    }

    sl_buf b = SL_BUF_INIT;
    sl_buf_append(&b, "{\"events\":[", 11);
    int64_t n = 0, next = offset;
    rc = 0;
    if (offset <= sl_store_end_offset(log)) { /* else: accepted, not written yet */
        void *rd;
        if ((rc = sl_store_reader_open(log, offset, lane, &rd, &err))) {
            sl_buf_free(&b);
            if (rc == SL_ERANGE) /* retention moved the start meanwhile */
                return sl__http_error(r, 416, "OffsetOutOfRange", "%s", err.msg);
            return sl__http_error(r, 500, "ReadFailed", "%s",
                                  err.msg[0] ? err.msg : sl_strerror(rc));
        }
        sl_record rec;
        while (n < max && b.len < READ_MAX_BYTES &&
               (rc = sl_store_reader_next(log, rd, &rec, &err)) == 0) {
            put_event(&b, set, (int32_t)part, &rec, n == 0);
            n++;
        }
        if (rc == 0 && n < max) { /* big: send the rest as it is read */
            read_stream *st = calloc(1, sizeof *st);
            struct MHD_Response *resp =
                st ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 << 10, stream_read, st,
                                                       stream_free)
                   : NULL;
            if (!resp) {
                free(st);
                sl_store_reader_close(log, rd);
                sl_buf_free(&b);
                return sl__http_error(r, 503, "OutOfMemory", "no memory for the answer; retry");
            }
            *st = (read_stream){.text = b,
                                .log = log,
                                .rd = rd,
                                .set = set,
                                .part = (int32_t)part,
                                .n = n,
                                .max = max};
            return sl__http_reply_stream(r, 200, resp, "application/json");
        }
        next = sl_store_reader_position(log, rd);
        sl_store_reader_close(log, rd);
    }
    if (rc != 0 && rc != SL_EEOF) {
        sl_buf_free(&b);
        return sl__http_error(r, 500, "ReadFailed", "%s", err.msg);
    }
    if (n == 0 && wait_ms > 0 && !h->stopping) {
        int64_t now = sl_clock_mono_ns();
        if (!r->poll_deadline_ns)
            r->poll_deadline_ns = now + wait_ms * 1000000;
        r->poll_pos = next;
        if (now < r->poll_deadline_ns &&
            sl__http_poll_wait(r, set, (int32_t)part, next, r->poll_deadline_ns)) {
            sl_buf_free(&b);
            return MHD_YES;
        }
        if (now < r->poll_deadline_ns) { /* data arrived meanwhile: read again */
            sl_buf_free(&b);
            return sl__http_read(r, set_name);
        }
    }
    sl_buf_printf(&b, "],\"next_offset\":%" PRId64 "}\n", next);
    return sl__http_reply(r, 200, &b, "application/json", 0);
}

/* ---- sets ------------------------------------------------------------------ */

static json_t *set_json(sl_set *s, bool detail)
{
    const sl_set_config *c = &s->cfg;
    json_t *j = json_pack("{s:s, s:i, s:s, s:s, s:I, s:I, s:I, s:b}", "name", s->name, "partitions",
                          (int)s->nparts, "ack", c->ack == SL_ACK_DURABLE ? "durable" : "buffer",
                          "compression", sl_codec_name(c->compression), "retention_ms",
                          (json_int_t)c->log.retention_ms, "retention_bytes",
                          (json_int_t)c->log.retention_bytes, "max_event_bytes",
                          (json_int_t)c->max_event_bytes, "generate_ids", c->generate_ids);
    json_int_t events = 0, bytes = 0;
    json_t *parts = detail ? json_array() : NULL;
    for (int32_t p = 0; p < s->nparts; p++) {
        const sl_store *log = &s->parts[p];
        int64_t start = sl_store_start_offset(log), end = sl_store_end_offset(log);
        uint64_t size, segments;
        sl_store_stat(log, &size, &segments);
        events += end - start;
        bytes += (json_int_t)size;
        if (parts)
            json_array_append_new(parts, json_pack("{s:i, s:I, s:I, s:I, s:I}", "partition", p,
                                                   "start_offset", (json_int_t)start, "end_offset",
                                                   (json_int_t)end, "bytes", (json_int_t)size,
                                                   "segments", (json_int_t)segments));
    }
    /* Where its partitions live (docs/scale-out.md): for a Kafka-backed
     * set, events and offsets are the topic's (its watermarks, every
     * router's writes), bytes 0 (the cluster keeps them). */
    json_object_set_new(j, "backend", json_string(sl_set_remote(s) ? "kafka" : "log"));
    if (sl_set_remote(s))
        json_object_set_new(j, "topic", json_string(c->topic));
    json_object_set_new(j, "auto_created", json_boolean(s->auto_created));
    json_object_set_new(j, "events", json_integer(events));
    json_object_set_new(j, "bytes", json_integer(bytes));
    if (parts) {
        json_object_set_new(j, "partition_info", parts);
        json_object_set_new(j, "linger_ms", json_integer(c->linger_ms));
        json_object_set_new(j, "batch_bytes", json_integer(c->batch_bytes));
        json_object_set_new(j, "buffer_bytes", json_integer((json_int_t)c->buffer_bytes));
        json_object_set_new(j, "segment_bytes", json_integer((json_int_t)c->log.segment_bytes));
    }
    return j;
}

static void add_set(sl_set *s, void *ctx)
{
    json_array_append_new(ctx, set_json(s, false));
}

static enum MHD_Result reply_json(sl_http_req *r, json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s)
        return sl__http_error(r, 500, "Internal", "out of memory");
    sl_buf b = {(uint8_t *)s, strlen(s), strlen(s) + 1};
    sl_buf_append(&b, "\n", 1);
    return sl__http_reply(r, 200, &b, "application/json", 0);
}

enum MHD_Result sl__http_list_sets(sl_http_req *r)
{
    json_t *arr = json_array();
    sl_sets_each(r->h->sets, add_set, arr);
    return reply_json(r, json_pack("{s:o, s:I}", "sets", arr, "auto_created",
                                   (json_int_t)sl_sets_auto_count(r->h->sets)));
}

enum MHD_Result sl__http_show_set(sl_http_req *r, const char *set_name)
{
    sl_set *set;
    sl_error err = {0};
    int rc = sl_sets_get(r->h->sets, set_name, false, &set, &err);
    if (rc)
        return sl__http_error(r, rc == SL_EINVAL ? 400 : 404,
                              rc == SL_EINVAL ? "InvalidSetName" : "NoSuchSet", "%s", err.msg);
    return reply_json(r, set_json(set, true));
}

/* ---- metrics ---------------------------------------------------------------- */

/* The per-set families, in the order written (one sl_sets_each per family:
 * sl_metrics_group would regroup them anyway, this keeps the text cheap). */
static const struct {
    const char *name, *help;
    sl_metric_type type;
} set_fams[] = {
    {"sluice_events_in_total", "Events accepted into each set.", SL_METRIC_COUNTER},
    {"sluice_bytes_in_total", "Bytes of record batches written for each set.", SL_METRIC_COUNTER},
    {"sluice_buffer_bytes", "Bytes waiting in the Databus buffers of each set.", SL_METRIC_GAUGE},
    {"sluice_buffer_limit_bytes",
     "Size of the Databus buffers of each set (a publish that finds "
     "them full waits or gets 503).",
     SL_METRIC_GAUGE},
    {"sluice_partition_end_offset", "Next offset of each partition.", SL_METRIC_GAUGE},
    /* Kafka-backed sets only (5…): this router's producer and readers. */
    {"sluice_kafka_produced_total", "Records this router handed to the Kafka producer of each "
     "Kafka-backed set.", SL_METRIC_COUNTER},
    {"sluice_kafka_delivered_total", "Records of each Kafka-backed set the cluster acknowledged.",
     SL_METRIC_COUNTER},
    {"sluice_kafka_delivery_failures_total", "Delivery reports with an error, per Kafka-backed "
     "set (durable sets: their publishers were told; buffer sets: produced again).",
     SL_METRIC_COUNTER},
    {"sluice_kafka_inflight_bytes", "Bytes produced to each Kafka-backed set and not yet "
     "acknowledged (past the limit, publishers get 503).", SL_METRIC_GAUGE},
    {"sluice_kafka_fetched_bytes_total", "Bytes of records this router fetched from each "
     "Kafka-backed set's topic (keys, values, headers).", SL_METRIC_COUNTER},
    {"sluice_kafka_fetched_records_total", "Records this router fetched from each Kafka-backed "
     "set's topic.", SL_METRIC_COUNTER},
};

typedef struct metrics_ctx {
    sl_buf *b;
    size_t fam;
} metrics_ctx;

static void set_metrics(sl_set *s, void *ctx)
{
    metrics_ctx *m = ctx;
    const char *name = set_fams[m->fam].name;
    uint64_t fill = 0, limit = 0;
    if (m->fam == 2 || m->fam == 3)
        sl_databus_fill(s, &fill, &limit);
    if (m->fam >= 5) {
        if (!sl_set_remote(s))
            return;
        sl_kstore_stats ks;
        sl_kstore_stats_get(s->ktopic, &ks);
        const uint64_t v[] = {ks.produced,       ks.delivered,       ks.failed,
                              ks.inflight_bytes, ks.fetched_bytes, ks.fetched_records};
        sl_metrics_u64(m->b, name, v[m->fam - 5], "set", s->name, NULL);
        return;
    }
    switch (m->fam) {
    case 0:
        sl_metrics_u64(m->b, name, atomic_load(&s->stats.events_in), "set", s->name, NULL);
        break;
    case 1:
        sl_metrics_u64(m->b, name, atomic_load(&s->stats.bytes_in), "set", s->name, NULL);
        break;
    case 2:
    case 3:
        sl_metrics_u64(m->b, name, m->fam == 2 ? fill : limit, "set", s->name, NULL);
        break;
    default:
        for (int32_t p = 0; p < s->nparts; p++) {
            char pn[16];
            snprintf(pn, sizeof pn, "%d", p);
            sl_metrics_i64(m->b, name, sl_store_end_offset(&s->parts[p]), "set", s->name,
                           "partition", pn, NULL);
        }
    }
}

/* GET /metrics: every writer appends its families (sl_metrics_family
 * headers, then samples) to one text; sl_metrics_group makes each family
 * one group behind one HELP and one TYPE, whatever order they came in, and
 * leaves out what Prometheus would refuse, counted in
 * sluice_metrics_dropped_lines (0 unless a writer is broken). */
enum MHD_Result sl__http_metrics(sl_http_req *r)
{
    sl_http *h = r->h;
    sl_buf b = SL_BUF_INIT, out = SL_BUF_INIT;
    for (size_t f = 0; f < sizeof set_fams / sizeof *set_fams; f++) {
        sl_metrics_family(&b, set_fams[f].name, set_fams[f].type, set_fams[f].help);
        metrics_ctx m = {&b, f};
        sl_sets_each(h->sets, set_metrics, &m);
    }
    sl_metrics_family(&b, "sluice_events_rejected_total", SL_METRIC_COUNTER,
                      "Events refused at ingest, by reason.");
    for (int i = 1; i < SL_EVENT_STATUS_COUNT; i++)
        sl_metrics_u64(&b, "sluice_events_rejected_total", atomic_load(&h->rejected[i]), "reason",
                       sl_event_status_name((sl_event_status)i), NULL);
    const sl_databus_stats *st = sl_databus_get_stats(h->bus);
    sl_metrics_family(&b, "sluice_databus_full_total", SL_METRIC_COUNTER,
                      "Publishes refused with 503 because a buffer was full.");
    sl_metrics_u64(&b, "sluice_databus_full_total", atomic_load(&st->full), NULL);
    sl_histogram_write(&st->append, "sluice_append_seconds", "Time to append one record batch.", "",
                       1, &b);
    sl_histogram_write(&st->fsync, "sluice_fsync_seconds",
                       "Time of one fdatasync of a partition (group commit).", "", 1, &b);
    sl_metrics_family(&b, "sluice_http_requests_total", SL_METRIC_COUNTER,
                      "HTTP responses by status.");
    for (int code = 100; code < SL_HTTP_STATUS_MAX; code++) {
        uint64_t v = atomic_load(&h->status[code]);
        char cs[8];
        snprintf(cs, sizeof cs, "%d", code);
        if (v)
            sl_metrics_u64(&b, "sluice_http_requests_total", v, "code", cs, NULL);
    }
    sl_sets_metrics(h->sets, &b); /* descriptors, sets, open and parked partitions */
    if (h->hooks.metrics)
        h->hooks.metrics(h->hooks.ctx, &b);
    if (h->hooks.kafka_metrics)
        h->hooks.kafka_metrics(h->hooks.kafka_ctx, &b);
    size_t dropped = 0;
    int rc = sl_metrics_group(b.data, b.len, &out, &dropped);
    sl_buf_free(&b);
    rc = rc ? rc
            : sl_metrics_family(&out, "sluice_metrics_dropped_lines", SL_METRIC_GAUGE,
                                "Lines of this scrape left out because their family had no valid "
                                "HELP and TYPE or they repeated a series (0 unless a writer is "
                                "broken).");
    rc = rc ? rc : sl_metrics_u64(&out, "sluice_metrics_dropped_lines", dropped, NULL);
    if (rc) {
        sl_buf_free(&out);
        return sl__http_error(r, 500, "Internal", "out of memory writing the metrics");
    }
    return sl__http_reply(r, 200, &out, "text/plain; version=0.0.4", 0);
}
