/*
 * kafka/koffsets.c — committed offsets (kcoord.h): OffsetCommit v2-7,
 * OffsetFetch v1-5, their files and GET /v1/groups.
 *
 * Each group's offsets are one JSON file, DATA/kafka/groups/NAME.json
 * ({"group", "offsets": [{"topic", "partition", "offset", "leader_epoch",
 * "metadata"}]}), rewritten whole on every commit through a temporary file,
 * fsync and rename, before the commit is answered: a commit that was
 * answered survives a crash, as Kafka's does once written to its offsets
 * topic. A commit is a few hundred bytes per partition and consumers commit
 * every few seconds, so a whole-file rewrite costs less than a log would to
 * compact. Offsets are kept until the group or its topic is deleted (Kafka's
 * 7-day expiry of an empty group's offsets is not applied: docs say so).
 */
#include "kafka/kcoord.h"

#include "core/base/clock.h"
#include "core/base/json.h"
#include "core/base/slog.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the offsets table -------------------------------------------------- */

static int koff_cmp(const char *topic, int32_t part, const koff *o)
{
    int c = strcmp(topic, o->topic);
    return c ? c : (part > o->part) - (part < o->part);
}

/* The index of (topic, part) in g->off, or where it goes (*found false). */
static size_t koff_find(const kgroup *g, const char *topic, int32_t part, bool *found)
{
    size_t lo = 0, hi = g->noff;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = koff_cmp(topic, part, &g->off[mid]);
        if (!c) {
            *found = true;
            return mid;
        }
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    *found = false;
    return lo;
}

static int koff_put(kgroup *g, const char *topic, int32_t part, int64_t offset, int32_t epoch,
                    const char *meta, size_t meta_len)
{
    bool found;
    size_t i = koff_find(g, topic, part, &found);
    char *m = NULL;
    if (meta) {
        m = malloc(meta_len + 1);
        if (!m)
            return -1;
        memcpy(m, meta, meta_len);
        m[meta_len] = '\0';
    }
    if (!found) {
        char *t = strdup(topic);
        if (!t || (g->noff == g->offcap && SL_GROW(g->off, g->offcap, 16))) {
            free(t);
            free(m);
            return -1;
        }
        memmove(&g->off[i + 1], &g->off[i], (g->noff - i) * sizeof *g->off);
        g->noff++;
        g->off[i] = (koff){.topic = t, .part = part};
    }
    koff *o = &g->off[i];
    free(o->meta);
    o->meta = m;
    o->offset = offset;
    o->epoch = epoch;
    return 0;
}

void sl__koffsets_free(kgroup *g)
{
    for (size_t i = 0; i < g->noff; i++) {
        free(g->off[i].topic);
        free(g->off[i].meta);
    }
    free(g->off);
    g->off = NULL;
    g->noff = g->offcap = 0;
}

/* ---- files ------------------------------------------------------------------ */

/* The file of group id: its id with every byte outside [A-Za-z0-9._-]
 * as %XX, and for a long id a prefix and a hash (names stay under
 * NAME_MAX; the file holds the id itself). */
static void group_path(const sl_kcoord *c, const char *id, char *out, size_t cap)
{
    char name[256];
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)id; *p && n < 200; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '_' || *p == '-' || (*p == '.' && p != (const unsigned char *)id))
            name[n++] = (char)*p;
        else
            n += (size_t)snprintf(name + n, sizeof name - n, "%%%02X", *p);
    }
    name[n] = '\0';
    if (strlen(id) * 3 > 200) {
        uint64_t h = 1469598103934665603ull;
        for (const unsigned char *p = (const unsigned char *)id; *p; p++)
            h = (h ^ *p) * 1099511628211ull;
        snprintf(name + (n > 180 ? 180 : n), sizeof name - 180, "~%016llx",
                 (unsigned long long)h);
    }
    snprintf(out, cap, "%s/%s.json", c->dir, name);
}

static void fsync_path(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f) {
        fsync(fileno(f));
        fclose(f);
    }
}

/* Writes g's offsets (temp file, fsync, rename, fsync of the folder). */
static int group_save(const sl_kcoord *c, const kgroup *g, sl_error *err)
{
    json_t *arr = json_array();
    json_t *j = json_pack("{s:s, s:o}", "group", g->id, "offsets", arr);
    if (!j)
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    for (size_t i = 0; i < g->noff; i++) {
        const koff *o = &g->off[i];
        json_t *e = json_pack("{s:s, s:i, s:I, s:i}", "topic", o->topic, "partition", o->part,
                              "offset", (json_int_t)o->offset, "leader_epoch", o->epoch);
        if (e && o->meta)
            json_object_set_new(e, "metadata", json_stringn(o->meta, strlen(o->meta)));
        if (!e || json_array_append_new(arr, e)) {
            json_decref(j);
            return sl_error_set(err, SL_ENOMEM, "out of memory");
        }
    }
    char path[4400], tmp[4410];
    group_path(c, g->id, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int rc = json_dump_file(j, tmp, JSON_COMPACT);
    json_decref(j);
    if (rc)
        return sl_error_set(err, SL_EIO, "write %s failed", tmp);
    fsync_path(tmp);
    if (rename(tmp, path))
        return sl_error_errno(err, errno, "rename %s", tmp);
    fsync_path(c->dir);
    return 0;
}

static int group_load(sl_kcoord *c, const char *path, sl_error *err)
{
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    const char *id = j ? json_string_value(json_object_get(j, "group")) : NULL;
    json_t *offs = j ? json_object_get(j, "offsets") : NULL;
    if (!id || !json_is_array(offs)) {
        json_decref(j);
        return sl_error_set(err, SL_EINVAL, "%s: not a group offsets file (%s)", path,
                            j ? "no group or offsets" : je.text);
    }
    kgroup *g = sl__kcoord_group(c, id, true);
    size_t i;
    json_t *o;
    int rc = g ? 0 : SL_ENOMEM;
    json_array_foreach(offs, i, o)
    {
        const char *topic = json_string_value(json_object_get(o, "topic"));
        json_t *part = json_object_get(o, "partition"), *off = json_object_get(o, "offset");
        const char *meta = json_string_value(json_object_get(o, "metadata"));
        if (rc || !topic || !json_is_integer(part) || !json_is_integer(off) ||
            json_integer_value(part) < 0 || json_integer_value(part) > INT32_MAX)
            continue;
        if (koff_put(g, topic, (int32_t)json_integer_value(part), json_integer_value(off),
                     (int32_t)json_integer_value(json_object_get(o, "leader_epoch")), meta,
                     meta ? strlen(meta) : 0))
            rc = SL_ENOMEM;
    }
    json_decref(j);
    return rc ? sl_error_set(err, rc, "out of memory loading %s", path) : 0;
}

int sl__koffsets_load(sl_kcoord *c, sl_error *err)
{
    int rc = sl__kafka_mkdirs(c->dir, err);
    if (rc)
        return rc;
    DIR *d = opendir(c->dir);
    if (!d)
        return sl_error_errno(err, errno, "open %s", c->dir);
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".json"))
            continue;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", c->dir, e->d_name);
        rc = group_load(c, path, err);
    }
    closedir(d);
    return rc;
}

/* ---- OffsetCommit v2-7 ----------------------------------------------------- */

/* Whether the committer may commit to g: a member of its current
 * generation, or (generation -1, no member id) anyone while the group has
 * no members (consumers that assign partitions themselves). */
static int16_t commit_check(sl_kcoord *c, kgroup *g, const char *member, int32_t gen)
{
    if (c->stop)
        return SL_KERR_NOT_COORDINATOR;
    if (gen < 0 && !member[0]) /* Kafka: no member of a group that has members */
        return g && sl__kcoord_active(g) ? SL_KERR_UNKNOWN_MEMBER_ID : SL_KERR_NONE;
    kmember *m = g ? sl__kcoord_member(g, member) : NULL;
    if (!m || m->pending)
        return SL_KERR_UNKNOWN_MEMBER_ID;
    m->seen_ms = sl_clock_mono_ms();
    if (gen != g->gen)
        return SL_KERR_ILLEGAL_GENERATION;
    /* Commits of the current generation are taken while it rebalances
     * (consumers commit what they processed before giving partitions up),
     * not before the new assignment went out. */
    if (g->state == KG_COMPLETING)
        return SL_KERR_REBALANCE_IN_PROGRESS;
    return SL_KERR_NONE;
}

int sl__kafka_offset_commit(sl_kreq *r)
{
    sl_kr *b = &r->body;
    int16_t v = r->h.version;
    kmember_ref ref;
    sl__kcoord_read_ref(b, v, 7, &ref);
    const char *group = ref.group, *member = ref.member;
    bool gok = ref.group_ok, mok = ref.member_ok;
    int32_t gen = ref.gen;
    if (v <= 4)
        sl_kr_i64(b); /* retention_time_ms: offsets are kept (see above) */
    int32_t nt = sl_kr_array(b, false, 6);
    const uint8_t *at = b->p;
    size_t total = 0;
    for (int32_t t = 0; t < nt; t++) {
        sl_kr_str(b, false);
        int32_t np = sl_kr_array(b, false, 14);
        for (int32_t p = 0; p < np; p++) {
            sl_kr_i32(b);
            sl_kr_i64(b);
            if (v >= 6)
                sl_kr_i32(b);
            sl_kr_str(b, false);
        }
        total += (size_t)(np > 0 ? np : 0);
    }
    if (!sl_kr_ok(b)) {
        sl__kafka_log_once(r, "malformed OffsetCommit v%d request", v);
        return SL_KREQ_CLOSE;
    }
    int16_t *errs = calloc(total + 1, sizeof *errs);
    if (!errs)
        return SL_KREQ_CLOSE;
    sl_kcoord *c = r->k->coord;
    int16_t gerr = !gok                     ? SL_KERR_INVALID_GROUP_ID
                   : !mok                   ? SL_KERR_UNKNOWN_MEMBER_ID
                   : !sl__kcoord_allowed(r) ? SL_KERR_GROUP_AUTHORIZATION_FAILED
                                            : SL_KERR_NONE;

    /* First every partition is checked and stored in memory, then the
     * group's file is saved once, then the answer is written: a partition
     * is answered NONE only once its offset is on disk. */
    pthread_mutex_lock(&c->mu);
    kgroup *g = gok ? sl__kcoord_group(c, group, false) : NULL;
    if (!gerr)
        gerr = commit_check(c, g, member, gen);
    if (!gerr && !g && !(g = sl__kcoord_group(c, group, true)))
        gerr = SL_KERR_COORDINATOR_NOT_AVAILABLE;
    bool stored = false;
    sl_kr rr;
    sl_kr_init(&rr, at, (size_t)(b->p - at));
    size_t k = 0;
    for (int32_t t = 0; t < nt; t++) {
        sl_kstr name = sl_kr_str(&rr, false);
        sl_set *set = NULL;
        int16_t terr = gerr;
        if (!terr)
            terr = sl__kafka_topic(r, name, false, &set);
        if (!terr && !sl__kafka_allowed(r, SL_AUTH_READ, set->name))
            terr = SL_KERR_TOPIC_AUTHORIZATION_FAILED;
        int32_t np = sl_kr_array(&rr, false, 14);
        for (int32_t p = 0; p < np; p++, k++) {
            int32_t part = sl_kr_i32(&rr);
            int64_t off = sl_kr_i64(&rr);
            int32_t epoch = v >= 6 ? sl_kr_i32(&rr) : -1;
            sl_kstr meta = sl_kr_str(&rr, false);
            int16_t e = terr;
            if (!e && (part < 0 || part >= set->nparts))
                e = SL_KERR_UNKNOWN_TOPIC_OR_PARTITION;
            else if (!e && meta.len > KCOORD_METADATA_MAX)
                e = 12; /* OFFSET_METADATA_TOO_LARGE */
            else if (!e && meta.p && !sl_json_utf8_valid(meta.p, (size_t)meta.len))
                e = SL_KERR_INVALID_REQUEST; /* a STRING is UTF-8; the file keeps JSON */
            else if (!e && off < 0)
                e = SL_KERR_OFFSET_OUT_OF_RANGE;
            else if (!e && koff_put(g, set->name, part, off, epoch, meta.p,
                                    meta.p ? (size_t)meta.len : 0))
                e = SL_KERR_COORDINATOR_NOT_AVAILABLE;
            errs[k] = e;
            stored |= !e;
        }
    }
    sl_error err = {0};
    bool lost = stored && group_save(c, g, &err) != 0;
    if (lost) /* what is in memory stays and goes out with the next save */
        sl__kafka_log_once(r, "kafka: group \"%s\": offsets not saved: %s", g->id, err.msg);
    pthread_mutex_unlock(&c->mu);

    if (v >= 3)
        sl_kw_i32(&r->w, 0);
    sl_kw_array(&r->w, false, nt < 0 ? 0 : nt);
    sl_kr_init(&rr, at, (size_t)(b->p - at));
    k = 0;
    for (int32_t t = 0; t < nt; t++) {
        sl_kstr name = sl_kr_str(&rr, false);
        sl_kw_str(&r->w, false, name.p ? name.p : "", name.p ? name.len : 0);
        int32_t np = sl_kr_array(&rr, false, 14);
        sl_kw_array(&r->w, false, np < 0 ? 0 : np);
        for (int32_t p = 0; p < np; p++, k++) {
            sl_kw_i32(&r->w, sl_kr_i32(&rr));
            sl_kr_i64(&rr);
            if (v >= 6)
                sl_kr_i32(&rr);
            sl_kr_str(&rr, false);
            sl_kw_i16(&r->w, lost && !errs[k] ? SL_KERR_KAFKA_STORAGE_ERROR : errs[k]);
        }
    }
    free(errs);
    return SL_KREQ_DONE;
}

/* ---- OffsetFetch v1-5 -------------------------------------------------------- */

static void fetch_one(sl_kreq *r, const koff *o, int32_t part, int16_t err)
{
    sl_kw_i32(&r->w, part);
    sl_kw_i64(&r->w, o && !err ? o->offset : -1);
    if (r->h.version >= 5)
        sl_kw_i32(&r->w, o && !err ? o->epoch : -1);
    sl_kw_str(&r->w, false, o && !err ? o->meta : "", -1);
    sl_kw_i16(&r->w, err);
}

int sl__kafka_offset_fetch(sl_kreq *r)
{
    sl_kr *b = &r->body;
    int16_t v = r->h.version;
    char group[KCOORD_GROUP_ID_MAX + 1];
    bool gok = sl__kcoord_group_id(sl_kr_str(b, false), group, sizeof group);
    int32_t nt = sl_kr_array(b, false, 6);
    const uint8_t *at = b->p;
    for (int32_t t = 0; t < nt; t++) {
        sl_kr_str(b, false);
        int32_t np = sl_kr_array(b, false, 4);
        for (int32_t p = 0; p < np; p++)
            sl_kr_i32(b);
    }
    if (!sl_kr_ok(b) || (nt < 0 && v < 2)) {
        sl__kafka_log_once(r, "malformed OffsetFetch v%d request", v);
        return SL_KREQ_CLOSE;
    }
    int16_t gerr = !gok ? SL_KERR_INVALID_GROUP_ID
                   : !sl__kcoord_allowed(r) ? SL_KERR_GROUP_AUTHORIZATION_FAILED
                                            : SL_KERR_NONE;
    if (v >= 3)
        sl_kw_i32(&r->w, 0);
    sl_kcoord *c = r->k->coord;
    pthread_mutex_lock(&c->mu);
    kgroup *g = gok && !gerr ? sl__kcoord_group(c, group, false) : NULL;
    if (nt < 0) {
        /* Every committed offset of the group the principal may read. */
        size_t count_at = sl_kw_pos(&r->w);
        sl_kw_array(&r->w, false, 0);
        int32_t topics = 0;
        for (size_t i = 0; g && i < g->noff;) {
            size_t j = i;
            while (j < g->noff && !strcmp(g->off[j].topic, g->off[i].topic))
                j++;
            if (sl__kafka_allowed(r, SL_AUTH_READ, g->off[i].topic)) {
                sl_kw_str(&r->w, false, g->off[i].topic, -1);
                sl_kw_array(&r->w, false, (int32_t)(j - i));
                for (size_t k = i; k < j; k++)
                    fetch_one(r, &g->off[k], g->off[k].part, SL_KERR_NONE);
                topics++;
            }
            i = j;
        }
        sl_kw_i32_at(&r->w, count_at, topics);
    } else {
        sl_kw_array(&r->w, false, nt);
        sl_kr rr;
        sl_kr_init(&rr, at, (size_t)(b->p - at));
        for (int32_t t = 0; t < nt; t++) {
            sl_kstr name = sl_kr_str(&rr, false);
            char topic[SL_SET_NAME_MAX + 1];
            bool tok = sl_kstr_copy(name, topic, sizeof topic);
            /* Before v2 errors are per partition only. */
            int16_t terr = v < 2 ? gerr : SL_KERR_NONE;
            if (!terr && tok && !sl__kafka_allowed(r, SL_AUTH_READ, topic))
                terr = SL_KERR_TOPIC_AUTHORIZATION_FAILED;
            sl_kw_str(&r->w, false, name.p ? name.p : "", name.p ? name.len : 0);
            int32_t np = sl_kr_array(&rr, false, 4);
            sl_kw_array(&r->w, false, np);
            for (int32_t p = 0; p < np; p++) {
                int32_t part = sl_kr_i32(&rr);
                bool found = false;
                size_t i = g && tok ? koff_find(g, topic, part, &found) : 0;
                fetch_one(r, found ? &g->off[i] : NULL, part, terr);
            }
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (v >= 2)
        sl_kw_i16(&r->w, gerr);
    return SL_KREQ_DONE;
}

/* ---- GET /v1/groups ------------------------------------------------------- */

/* The topics and partitions of a consumer-protocol assignment
 * (ConsumerProtocolAssignment: version, [topic [partition]], user data). */
static json_t *assignment_json(const kmember *m, bool consumer)
{
    json_t *arr = json_array();
    if (!arr || !consumer || !m->assign)
        return arr;
    sl_kr rr;
    sl_kr_init(&rr, m->assign, (size_t)m->assign_len);
    sl_kr_i16(&rr);
    int32_t nt = sl_kr_array(&rr, false, 6);
    for (int32_t t = 0; t < nt && sl_kr_ok(&rr); t++) {
        sl_kstr name = sl_kr_str(&rr, false);
        int32_t np = sl_kr_array(&rr, false, 4);
        json_t *parts = json_array();
        for (int32_t p = 0; p < np; p++)
            json_array_append_new(parts, json_integer(sl_kr_i32(&rr)));
        if (!sl_kr_ok(&rr) || !name.p) {
            json_decref(parts);
            break;
        }
        json_array_append_new(arr, json_pack("{s:s%, s:o}", "topic", name.p, (size_t)name.len,
                                             "partitions", parts));
    }
    return arr;
}

/* A client's string for GET /v1/groups: JSON null for NULL, and a
 * placeholder for bytes that are not UTF-8 (protocol names are the
 * client's). */
static json_t *jstr(const char *s)
{
    if (!s)
        return json_null();
    json_t *j = json_string(s);
    return j ? j : json_string("(not UTF-8)");
}

static json_t *group_json(sl_kafka *k, const kgroup *g)
{
    json_t *members = json_array(), *offsets = json_array();
    bool consumer = g->ptype && !strcmp(g->ptype, "consumer");
    for (size_t i = 0; i < g->nm; i++) {
        const kmember *m = g->m[i];
        if (m->pending)
            continue;
        json_array_append_new(members,
                              json_pack("{s:s, s:s, s:s, s:o}", "member_id", m->id, "client_id",
                                        m->client_id, "host", m->host, "assignment",
                                        assignment_json(m, consumer)));
    }
    for (size_t i = 0; i < g->noff; i++) {
        const koff *o = &g->off[i];
        sl_set *set = NULL;
        sl_error err = {0};
        int64_t end = -1;
        if (!sl_sets_get(k->sets, o->topic, false, &set, &err) && !atomic_load(&set->deleted) &&
            !sl_set_remote(set) && o->part >= 0 && o->part < set->nparts)
            end = sl_store_end_offset(&set->parts[o->part]);
        json_t *e = json_pack("{s:s, s:i, s:I}", "topic", o->topic, "partition", o->part,
                              "committed", (json_int_t)o->offset);
        if (e && end >= 0) {
            json_object_set_new(e, "end", json_integer(end));
            json_object_set_new(e, "lag", json_integer(end > o->offset ? end - o->offset : 0));
        }
        json_array_append_new(offsets, e);
    }
    return json_pack("{s:o, s:s, s:o, s:o, s:i, s:o, s:o, s:o}", "group", jstr(g->id), "state",
                     sl__kcoord_state_name(g->state), "protocol_type", jstr(g->ptype), "protocol",
                     jstr(g->proto), "generation", g->gen, "leader", jstr(g->leader), "members",
                     members, "offsets", offsets);
}

int sl__kgroups_json(sl_kafka *k, sl_buf *out)
{
    sl_kcoord *c = k->coord;
    json_t *arr = json_array();
    if (!arr)
        return SL_ENOMEM;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->ng; i++) {
        json_t *g = group_json(k, c->g[i]);
        if (!g || json_array_append_new(arr, g)) {
            pthread_mutex_unlock(&c->mu);
            json_decref(arr);
            return SL_ENOMEM;
        }
    }
    pthread_mutex_unlock(&c->mu);
    json_t *j = json_pack("{s:o}", "groups", arr);
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    int rc = s ? sl_buf_append(out, s, strlen(s)) : SL_ENOMEM;
    free(s);
    return rc;
}
