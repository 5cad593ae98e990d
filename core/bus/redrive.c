/*
 * core/bus/redrive.c — dead-letter redrive (see redrive.h): read a dead-letter
 * set from its redrive position, strip the failure attributes, publish to the
 * destination set, and move the position once the destination confirmed.
 */
#include "core/bus/redrive.h"

#include "core/base/clock.h"
#include "core/bus/event.h"
#include "core/base/json.h"
#include "core/base/buf.h"
#include "core/bus/cursor.h"
#include "core/base/slog.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One publish and one position commit per chunk of events. */
#define CHUNK_EVENTS 256
#define CHUNK_BYTES (1u << 20)
/* How long a full destination may refuse events before the redrive gives up
 * (ms without any event accepted). */
#define FULL_WAIT_MS 30000
/* How long the Databus writer may take to append buffered events (ms
 * without progress) before the redrive gives up without moving the position. */
#define WRITE_WAIT_MS 30000
/* Skipped events listed in the answer (all are counted). */
#define SKIP_LIST_MAX 20

/* The attributes a dead-letter set adds, and those sluice adds on read. */
static const char *const strip_names[] = {
    "sluiceerror",  "sluiceattempts", "sluicerule",      "sluicetarget", "sluicefailedat",
    "sluicereplay", "sluiceset",      "sluicepartition", "sluiceoffset",
};

/* ---- one redrive per dead-letter set at a time ------------------------------------- */

typedef struct active {
    struct active *next;
    const char *dlq;
} active;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static active *g_active;

static bool is_active(const char *dlq)
{
    for (active *a = g_active; a; a = a->next)
        if (strcmp(a->dlq, dlq) == 0)
            return true;
    return false;
}

/* Registers a redrive of dlq; false when one is running already. A second
 * redrive does not wait for the first: an HTTP caller gets 409 at once. */
static bool claim(active *me, const char *dlq)
{
    pthread_mutex_lock(&g_lock);
    bool ok = !is_active(dlq);
    if (ok) {
        me->dlq = dlq;
        me->next = g_active;
        g_active = me;
    }
    pthread_mutex_unlock(&g_lock);
    return ok;
}

static void release(active *me)
{
    pthread_mutex_lock(&g_lock);
    for (active **p = &g_active; *p; p = &(*p)->next) {
        if (*p == me) {
            *p = me->next;
            break;
        }
    }
    pthread_mutex_unlock(&g_lock);
}

/* ---- stopping ---------------------------------------------------------------------- */

/* The stop flag of the redrives this thread runs (sl_redrive_set_stop()). */
static _Thread_local const _Atomic bool *t_stop;

void sl_redrive_set_stop(const _Atomic bool *stop)
{
    t_stop = stop;
}

static bool stopping(void)
{
    return t_stop && atomic_load(t_stop);
}

/* ---- waiting for the destination's acknowledgements --------------------------------- */

typedef struct waiter {
    pthread_mutex_t m;
    pthread_cond_t c;
    int pending; /* durable publishes not completed yet */
    int status;  /* the first failure among them */
} waiter;

static void publish_done(void *ctx, int status)
{
    waiter *w = ctx;
    pthread_mutex_lock(&w->m);
    if (status && !w->status)
        w->status = status;
    w->pending--;
    pthread_cond_broadcast(&w->c);
    pthread_mutex_unlock(&w->m);
}

static void add_pending(waiter *w, int n)
{
    pthread_mutex_lock(&w->m);
    w->pending += n;
    pthread_mutex_unlock(&w->m);
}

/* Waits for every durable publish; returns the first failure (and clears it). */
static int wait_all(waiter *w)
{
    pthread_mutex_lock(&w->m);
    while (w->pending > 0)
        pthread_cond_wait(&w->c, &w->m);
    int rc = w->status;
    w->status = 0;
    pthread_mutex_unlock(&w->m);
    return rc;
}

/* ---- the redrive ------------------------------------------------------------------ */

/* Where one encoded event sits in the arena (which moves as it grows). */
typedef struct staged {
    size_t off, len, key_off, key_len;
    bool has_key;
    char lane[SL_EVENT_LANE_MAX + 1];
    int64_t src; /* its offset in the dead-letter partition */
} staged;

typedef struct redrive {
    sl_set *dlq, *to;
    sl_databus *bus;
    sl_lanes *lanes; /* admits each event's lane; NULL: any lane */
    sl_buf tmp;      /* one event with the failure attributes stripped */
    sl_buf arena;    /* the encoded events of the chunk, and their keys */
    staged sv[CHUNK_EVENTS];
    size_t nsv;
    sl_databus_event evs[CHUNK_EVENTS];
    sl_databus_result res[CHUNK_EVENTS];
    waiter w;
    int64_t *need; /* per destination partition: end offset a buffered publish awaits, or 0 */
    uint64_t redriven, skipped;
    sl_buf skips; /* the first SKIP_LIST_MAX skipped events, JSON objects joined by ',' */
    sl_event ev;  /* last: large */
} redrive;

/* Counts a skipped event and lists the first ones. Returns 0 or SL_ENOMEM. */
static int skip(redrive *rd, int32_t part, int64_t offset, const char *why)
{
    rd->skipped++;
    if (rd->skipped > SKIP_LIST_MAX)
        return 0;
    sl_slog(SL_SLOG_WARN, "redrive",
            "redrive %s -> %s: skipping partition %d offset %" PRId64 ": %s", rd->dlq->name,
            rd->to->name, part, offset, why);
    size_t mark = rd->skips.len;
    int rc = sl_buf_printf(&rd->skips, "%s{\"partition\":%d,\"offset\":%" PRId64 ",\"reason\":",
                           rd->skipped > 1 ? "," : "", part, offset);
    if (!rc && (rc = sl_json_put_string(&rd->skips, why, strlen(why))) == SL_EINVAL)
        rc = sl_json_put_string(&rd->skips, "(not UTF-8)", 11);
    if (!rc)
        rc = sl_buf_append(&rd->skips, "}", 1);
    if (rc)
        rd->skips.len = mark;
    return rc;
}

static bool stripped(const sl_json_tok *key)
{
    char name[SL_EVENT_NAME_MAX];
    size_t len = 0;
    if (sl_json_unescape(key, name, sizeof name, &len))
        return false; /* longer than any name we strip */
    for (size_t i = 0; i < sizeof strip_names / sizeof *strip_names; i++)
        if (strlen(strip_names[i]) == len && memcmp(strip_names[i], name, len) == 0)
            return true;
    return false;
}

/* Turns one dead-letter record into an event for the destination, staged in
 * the arena. Returns 0 (staged or skipped) or SL_ENOMEM. */
static int stage(redrive *rd, const sl_record *rec, int32_t part, int64_t now_ms)
{
    char why[SL_ERROR_MAX + 64];
    sl_error e = {0};
    sl_json_tok obj, k, v;
    if (!rec->value)
        return skip(rd, part, rec->offset, "the record holds no event");
    if (rec->lane_len > SL_EVENT_LANE_MAX) {
        snprintf(why, sizeof why, "its lane is longer than %d bytes", SL_EVENT_LANE_MAX);
        return skip(rd, part, rec->offset, why);
    }
    if (sl_json_validate((const char *)rec->value, rec->value_len, SL_JSON_DEPTH_LIMIT, &obj, &e) ||
        obj.type != SL_JSON_OBJECT) {
        snprintf(why, sizeof why, "not a JSON object%s%s", e.msg[0] ? ": " : "", e.msg);
        return skip(rd, part, rec->offset, why);
    }
    rd->tmp.len = 0;
    int rc = sl_buf_append(&rd->tmp, "{", 1);
    sl_json_iter it;
    sl_json_iter_init(&it, &obj);
    while (!rc && sl_json_iter_member(&it, &k, &v)) {
        if (stripped(&k))
            continue;
        if (rd->tmp.len > 1)
            rc = sl_buf_append(&rd->tmp, ",", 1);
        if (!rc)
            rc = sl_buf_append(&rd->tmp, k.p, k.len);
        if (!rc)
            rc = sl_buf_append(&rd->tmp, ":", 1);
        if (!rc)
            rc = sl_buf_append(&rd->tmp, v.p, v.len);
    }
    if (!rc)
        rc = sl_buf_append(&rd->tmp, "}", 1);
    if (rc)
        return rc;

    sl_event_limits lim = {.max_bytes = rd->to->cfg.max_event_bytes,
                           .generate_ids = rd->to->cfg.generate_ids};
    char lane[SL_EVENT_LANE_MAX + 1];
    if (rec->lane_len)
        memcpy(lane, rec->lane, rec->lane_len);
    lane[rec->lane_len] = '\0';
    sl_event *ev = &rd->ev;
    sl_event_status st = sl_event_parse((const char *)rd->tmp.data, rd->tmp.len, &lim, ev, &e);
    if (st == SL_EVENT_OK)
        st = sl_event_apply_lane(ev, lane, &e);
    /* A lane dropped (or unknown) since: its events would be stored with no
     * consumer to deliver them; they stay in the dead-letter set. */
    if (st == SL_EVENT_OK && rd->lanes)
        st = sl_lanes_admit(rd->lanes, ev->lane, &e);
    if (st != SL_EVENT_OK) {
        snprintf(why, sizeof why, "not a valid CloudEvent for set %s: %s (%s)", rd->to->name, e.msg,
                 sl_event_status_name(st));
        return skip(rd, part, rec->offset, why);
    }
    staged *s = &rd->sv[rd->nsv];
    s->off = rd->arena.len;
    if ((rc = sl_event_encode(ev, &(sl_event_fill){.now_ms = now_ms}, &rd->arena)))
        return rc;
    s->len = rd->arena.len - s->off;
    s->has_key = ev->key != NULL;
    s->key_off = rd->arena.len;
    s->key_len = ev->key_len;
    if (s->has_key && (rc = sl_buf_append(&rd->arena, ev->key, ev->key_len)))
        return rc;
    snprintf(s->lane, sizeof s->lane, "%s", ev->lane);
    s->src = rec->offset;
    rd->nsv++;
    return 0;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts))
        ;
}

static int stopped_error(sl_error *err)
{
    return sl_error_set(err, SL_ESHUTDOWN, "the server is stopping");
}

/* Publishes evs[0..n), waiting while the destination is full. Returns 0
 * (queued: durable completions are counted in rd->w, buffered events noted
 * in rd->need), SL_ETOOBIG, or another error with err. */
static int publish(redrive *rd, sl_databus_event *evs, size_t n, sl_error *err)
{
    int64_t idle_since = sl_clock_mono_ns();
    for (;;) {
        sl_error e = {0};
        add_pending(&rd->w, 1);
        int rc = sl_databus_publish(rd->bus, rd->to, evs, n, rd->res, publish_done, &rd->w, &e);
        if (rc != 1)
            add_pending(&rd->w, -1);
        if (rc == 0) { /* ack = "buffer": only queued in memory so far */
            for (size_t i = 0; i < n; i++) {
                int64_t *need = &rd->need[rd->res[i].partition];
                if (rd->res[i].offset + 1 > *need)
                    *need = rd->res[i].offset + 1;
            }
        }
        if (rc == 0 || rc == 1)
            return 0;
        if (rc != SL_EFULL || sl_clock_mono_ns() - idle_since > (int64_t)FULL_WAIT_MS * 1000000)
            return sl_error_set(err, rc, "publishing to set %s: %s", rd->to->name,
                                e.msg[0] ? e.msg : sl_strerror(rc));
        if (stopping()) /* nothing of this call was queued */
            return stopped_error(err);
        sleep_ms(2); /* the writer drains the buffer meanwhile */
    }
}

/* Waits until everything published since the last call is on disk. Durable
 * publishes are complete after their fsync (the Databus calls publish_done).
 * sl_databus_publish() confirms an ack = "buffer" publish as soon as the
 * events are queued in memory, and the syncer syncs such sets only every
 * buffer_sync_ms: committing the position then could lose the events in a
 * crash. So for those, wait until the writer appended them (the partition's
 * end offset passes them), then sync the partition ourselves. Returns 0 or an
 * SL_E… code with err. */
static int confirm(redrive *rd, sl_error *err)
{
    int rc = 0;
    int st = wait_all(&rd->w);
    if (st)
        rc = sl_error_set(err, st, "set %s did not confirm the events: %s", rd->to->name,
                          sl_strerror(st));
    for (int32_t p = 0; p < rd->to->nparts; p++) {
        int64_t need = rd->need[p];
        if (!need)
            continue;
        rd->need[p] = 0;
        if (rc)
            continue;
        const sl_store *store = &rd->to->parts[p];
        int64_t end = sl_store_end_offset(store), idle_since = sl_clock_mono_ns();
        while (end < need) {
            /* The writer retries a failing disk; it stops only with the bus,
             * whose drain writes everything queued. A stopping server waits
             * for this thread only briefly: give up sooner then (the chunk
             * is not committed, so it is published again next time). */
            int64_t limit_ms = stopping() ? 1000 : WRITE_WAIT_MS;
            if (sl_clock_mono_ns() - idle_since > limit_ms * 1000000) {
                rc = sl_error_set(err, SL_EIO,
                                  "set %s partition %d did not write the events within %d s",
                                  rd->to->name, p, WRITE_WAIT_MS / 1000);
                break;
            }
            sleep_ms(1);
            int64_t now_end = sl_store_end_offset(store);
            if (now_end != end) {
                end = now_end;
                idle_since = sl_clock_mono_ns();
            }
        }
        sl_error e = {0};
        int r = rc ? 0 : sl_store_sync(store, &e);
        if (r)
            rc = sl_error_set(err, r, "syncing set %s partition %d: %s", rd->to->name, p,
                              e.msg[0] ? e.msg : sl_strerror(r));
    }
    return rc;
}

/* Moves the position of a partition to next (if ahead of *pos). */
static int commit(sl_cursor *cur, int64_t next, int64_t *pos, sl_error *err)
{
    if (next <= *pos)
        return 0;
    sl_error e = {0};
    int rc = sl_cursor_commit(cur, next, 0, &e);
    if (rc)
        return sl_error_set(err, rc, "%s", e.msg);
    *pos = next;
    return 0;
}

/* Publishes the staged events and waits until they are on disk in the
 * destination. Returns 0 or an SL_E… code with err. */
static int flush(redrive *rd, int32_t part, sl_cursor *cur, int64_t *pos, sl_error *err)
{
    size_t n = rd->nsv;
    for (size_t i = 0; i < n; i++) {
        const staged *s = &rd->sv[i];
        rd->evs[i] = (sl_databus_event){
            .value = rd->arena.data + s->off,
            .value_len = s->len,
            .key = s->has_key ? rd->arena.data + s->key_off : NULL,
            .key_len = s->key_len,
            .lane = s->lane,
            .ts_ms = sl_clock_now_ms(),
        };
    }
    int rc = n ? publish(rd, rd->evs, n, err) : 0;
    if (rc == SL_ETOOBIG && n > 1) {
        /* More than a partition's whole buffer of the destination at once:
         * one event at a time. Each event's position is committed once it is
         * on disk, so that an error later in the chunk does not publish the
         * earlier ones again on the next run. */
        rc = 0;
        for (size_t i = 0; !rc && i < n; i++) {
            sl_error e1 = {0};
            if (i && stopping()) {
                rc = stopped_error(err);
                break;
            }
            rc = publish(rd, &rd->evs[i], 1, &e1);
            if (rc == SL_ETOOBIG) {
                rc = skip(rd, part, rd->sv[i].src,
                          "larger than a whole partition buffer of the "
                          "destination set");
            } else if (rc) {
                sl_error_set(err, rc, "%s", e1.msg);
            } else if (!(rc = confirm(rd, err))) {
                rd->redriven++;
            }
            if (!rc)
                rc = commit(cur, rd->sv[i].src + 1, pos, err);
        }
    } else if (rc == SL_ETOOBIG) {
        rc = skip(rd, part, rd->sv[0].src,
                  "larger than a whole partition buffer of the destination set");
    } else if (!rc && n) {
        if (!(rc = confirm(rd, err)))
            rd->redriven += n;
    }
    rd->nsv = 0;
    rd->arena.len = 0;
    return rc;
}

/* Redrives one partition from its position; appends its JSON entry. */
static int do_partition(redrive *rd, const char *data_dir, int32_t p, uint64_t max, sl_buf *parts,
                        sl_error *err)
{
    const sl_store *st = &rd->dlq->parts[p];
    sl_cursor cur;
    bool found = false;
    sl_error e = {0};
    int rc = sl_cursor_open(&cur, data_dir, SL_REDRIVE_CURSOR_NAME, rd->dlq->name, p, &found, &e);
    if (rc == SL_ECORRUPT) {
        sl_slog(SL_SLOG_WARN, "redrive",
                "redrive %s: %s; starting again at the oldest event of partition "
                "%d",
                rd->dlq->name, e.msg, p);
        rc = 0; /* the cursor is open: its first commit repairs it */
    } else if (rc) {
        return sl_error_set(err, rc, "%s", e.msg);
    }
    int64_t start = sl_store_start_offset(st), end = sl_store_end_offset(st);
    int64_t pos = found ? cur.offset : start;
    if (pos < start) {
        sl_slog(SL_SLOG_WARN, "redrive",
                "redrive %s: retention deleted %" PRId64 " events of partition "
                "%d before they were redriven",
                rd->dlq->name, start - pos, p);
        pos = start;
        if ((rc = sl_cursor_commit(&cur, pos, 0, &e)))
            sl_error_set(err, rc, "%s", e.msg);
    } else if (pos > end) {
        /* The partition lost an unsynced tail in a crash. New dead letters
         * get the offsets [end, pos) again: the position must move back on
         * disk too, or every later redrive would skip them. */
        sl_slog(SL_SLOG_WARN, "redrive",
                "redrive %s: partition %d ends at offset %" PRId64
                " but its redrive position was %" PRId64
                " (a tail lost in a crash); moving the position back to %" PRId64,
                rd->dlq->name, p, end, pos, end);
        pos = end;
        if ((rc = sl_cursor_commit(&cur, pos, 0, &e)))
            sl_error_set(err, rc, "%s", e.msg);
    }
    int64_t from = pos;
    void *reader = NULL;
    int64_t now = sl_clock_now_ms();
    while (!rc && pos < end && (max == 0 || rd->redriven < max)) {
        if (stopping()) { /* between chunks: everything before pos is moved */
            rc = stopped_error(err);
            break;
        }
        if (!reader && (rc = sl_store_reader_open(st, pos, NULL, &reader, &e))) {
            sl_error_set(err, rc, "reading set %s partition %d: %s", rd->dlq->name, p, e.msg);
            break;
        }
        int64_t next = pos;
        bool eof = false;
        while (rd->nsv < CHUNK_EVENTS && rd->arena.len < CHUNK_BYTES &&
               (max == 0 || rd->redriven + rd->nsv < max)) {
            sl_record rec;
            int r = sl_store_reader_next(st, reader, &rec, &e);
            if (r == SL_EEOF || (!r && rec.offset >= end)) {
                eof = true;
                break;
            }
            if (r) {
                rc = sl_error_set(err, r, "reading set %s partition %d: %s", rd->dlq->name, p,
                                  e.msg);
                break;
            }
            if ((r = stage(rd, &rec, p, now))) {
                rc = sl_error_set(err, r, "redrive: %s", sl_strerror(r));
                break;
            }
            next = rec.offset + 1;
        }
        if (rc)
            break;
        if ((rc = flush(rd, p, &cur, &pos, err)))
            break;
        if ((rc = commit(&cur, next, &pos, err)))
            break;
        if (eof)
            break;
    }
    rd->nsv = 0;
    rd->arena.len = 0;
    if (reader)
        sl_store_reader_close(st, reader);
    sl_cursor_close(&cur);
    if (!rc)
        rc = sl_buf_printf(parts, "%s{\"partition\":%d,\"from\":%" PRId64 ",\"to\":%" PRId64 "}",
                           p ? "," : "", p, from, pos);
    return rc;
}

static int find_set(sl_sets *sets, const char *name, const char *role, sl_set **out, sl_error *err)
{
    if (!name || !sl_set_name_valid(name))
        return sl_error_set(err, SL_EINVAL,
                            "invalid %s set name \"%s\" (want "
                            "[A-Za-z0-9._-]{1,128})",
                            role, name ? name : "");
    int rc = sl_sets_get(sets, name, false, out, NULL);
    if (rc == SL_ENOENT)
        return sl_error_set(err, rc, "%s set \"%s\" does not exist", role, name);
    if (rc)
        return sl_error_set(err, rc, "%s set \"%s\": %s", role, name, sl_strerror(rc));
    return 0;
}

int sl_redrive(sl_sets *sets, sl_databus *bus, sl_lanes *lanes, const char *data_dir,
               const char *dlq, const char *to, uint64_t max, sl_buf *out_json, sl_error *err)
{
    sl_set *from_set, *to_set;
    int rc = find_set(sets, dlq, "dead-letter", &from_set, err);
    if (!rc)
        rc = find_set(sets, to, "destination", &to_set, err);
    if (rc)
        return rc;
    if (strcmp(dlq, to) == 0)
        return sl_error_set(err, SL_EINVAL, "cannot redrive set %s into itself", dlq);
    redrive *rd = calloc(1, sizeof *rd);
    int64_t *need = calloc((size_t)to_set->nparts, sizeof *need);
    if (!rd || !need) {
        free(rd);
        free(need);
        return sl_error_set(err, SL_ENOMEM, "redrive: out of memory");
    }
    rd->need = need;
    rd->dlq = from_set;
    rd->to = to_set;
    rd->bus = bus;
    rd->lanes = lanes;
    pthread_mutex_init(&rd->w.m, NULL);
    pthread_cond_init(&rd->w.c, NULL);
    sl_buf parts = SL_BUF_INIT;
    active me;
    bool mine = claim(&me, dlq);
    if (!mine)
        rc = sl_error_set(err, SL_EDEFERRED, "a redrive of %s is running", dlq);
    for (int32_t p = 0; !rc && p < from_set->nparts; p++)
        rc = do_partition(rd, data_dir, p, max, &parts, err);
    if (mine)
        release(&me);
    if (rc) {
        if (rd->redriven)
            sl_slog(SL_SLOG_ERROR, "redrive",
                    "redrive %s -> %s stopped after %" PRIu64 " events: %s", dlq, to, rd->redriven,
                    err ? err->msg : sl_strerror(rc));
        if (err && rd->redriven) {
            char msg[SL_ERROR_MAX];
            snprintf(msg, sizeof msg, "%s (%" PRIu64 " events were moved before)", err->msg,
                     rd->redriven);
            sl_error_set(err, rc, "%s", msg);
        }
    } else {
        size_t mark = out_json->len;
        rc = sl_buf_printf(out_json,
                           "{\"dlq\":\"%s\",\"to\":\"%s\",\"redriven\":%" PRIu64
                           ",\"skipped\":%" PRIu64 ",\"partitions\":[",
                           dlq, to, rd->redriven, rd->skipped);
        if (!rc)
            rc = sl_buf_append(out_json, parts.data ? (const char *)parts.data : "", parts.len);
        if (!rc)
            rc = sl_buf_append(out_json, "],\"skipped_events\":[", 20);
        if (!rc)
            rc = sl_buf_append(out_json, rd->skips.data ? (const char *)rd->skips.data : "",
                               rd->skips.len);
        if (!rc)
            rc = sl_buf_append(out_json, "]}\n", 3);
        if (rc) {
            out_json->len = mark;
            sl_error_set(err, rc, "redrive: out of memory");
        }
        sl_slog(SL_SLOG_INFO, "redrive",
                "redrive %s -> %s: %" PRIu64 " events moved, %" PRIu64 " skipped", dlq, to,
                rd->redriven, rd->skipped);
    }
    pthread_mutex_destroy(&rd->w.m);
    pthread_cond_destroy(&rd->w.c);
    sl_buf_free(&rd->tmp);
    sl_buf_free(&rd->arena);
    sl_buf_free(&rd->skips);
    sl_buf_free(&parts);
    free(rd->need);
    free(rd);
    return rc;
}

int sl_redrive_hook(void *ctx, const char *dlq, const char *to, uint64_t max, sl_buf *out_json,
                    sl_error *err)
{
    const sl_redrive_env *env = ctx;
    return sl_redrive(env->sets, env->bus, NULL, env->data_dir, dlq, to, max, out_json, err);
}
