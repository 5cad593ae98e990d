/*
 * core/bus/set.c — the event-set registry: names, per-set configuration in
 * set.json, and one open log per partition (see core/bus/set.h).
 */
#include "core/bus/set.h"

#include "core/bus/databus.h"
#include "core/log/store_kafka.h"
#include "core/base/slog.h"

#include "core/base/clock.h"
#include "core/base/metrics.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stddef.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

struct sl_sets {
    char *root; /* DATA/sets */
    sl_sets_options opts;
    pthread_rwlock_t lock;
    pthread_mutex_t create_lock; /* one creator at a time; lookups go on */
    sl_set **v;                  /* in name order */
    size_t n, cap;
    _Atomic size_t nauto; /* auto-created sets among v (changed under the write lock) */
    int lock_fd;          /* DATA/.lock, flock'ed while the registry is open */
    sl_store_pool *pool;  /* every partition: the open ones and the parked */
    sl_set **dead;        /* deleted (sl_sets_delete), freed at close */
    size_t ndead, dead_cap;
};

void sl_set_config_default(sl_set_config *cfg)
{
    cfg->partitions = 4;
    cfg->ack = SL_ACK_DURABLE;
    cfg->compression = SL_CODEC_NONE;
    sl_log_config_default(&cfg->log);
    cfg->max_event_bytes = 1u << 20;
    cfg->generate_ids = false;
    cfg->linger_ms = 2;
    cfg->batch_bytes = 1u << 20;
    cfg->buffer_bytes = 8ull << 20;
    cfg->backend = SL_BACKEND_LOG;
    cfg->topic[0] = '\0';
    cfg->replication = -1;
}

int sl_set_name_valid(const char *name)
{
    size_t n = strlen(name);
    /* A leading "." makes a hidden directory (and covers "." and ".."). */
    if (n == 0 || n > SL_SET_NAME_MAX || name[0] == '.')
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* ---- set.json ----------------------------------------------------------- */

/* Every key of set.json, once: the same table writes and reads the file, so
 * the two cannot drift. Integers are range-checked; types are strict. */
typedef enum key_kind { KEY_INT, KEY_BOOL, KEY_ACK, KEY_CODEC } key_kind;

typedef struct set_key {
    const char *name;
    key_kind kind;
    size_t off, size;
    int64_t min, max;
} set_key;

#define KEY(n, k, field, lo, hi)                                                                   \
    {                                                                                              \
        n, k, offsetof(sl_set_config, field), sizeof(((sl_set_config *)0)->field), lo, hi          \
    }

static const set_key keys[] = {
    KEY("partitions", KEY_INT, partitions, 1, 1024),
    KEY("ack", KEY_ACK, ack, 0, 0),
    KEY("compression", KEY_CODEC, compression, 0, 0),
    KEY("segment_bytes", KEY_INT, log.segment_bytes, 1024, UINT32_MAX),
    KEY("segment_ms", KEY_INT, log.segment_ms, 0, INT64_MAX),
    KEY("index_interval_bytes", KEY_INT, log.index_interval_bytes, 1, 1 << 30),
    KEY("retention_ms", KEY_INT, log.retention_ms, -1, INT64_MAX),
    KEY("retention_bytes", KEY_INT, log.retention_bytes, -1, INT64_MAX),
    KEY("max_event_bytes", KEY_INT, max_event_bytes, 256, 16 << 20),
    KEY("generate_ids", KEY_BOOL, generate_ids, 0, 1),
    KEY("linger_ms", KEY_INT, linger_ms, 0, 60000),
    KEY("batch_bytes", KEY_INT, batch_bytes, 1024, 64 << 20),
    KEY("buffer_bytes", KEY_INT, buffer_bytes, 1024, INT64_MAX),
};

static int64_t key_get(const sl_set_config *c, const set_key *k)
{
    const char *p = (const char *)c + k->off;
    if (k->kind == KEY_BOOL)
        return *(const bool *)p;
    if (k->size == 8) {
        int64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    uint32_t v; /* every 4-byte field (ints and enums) is non-negative */
    memcpy(&v, p, 4);
    return v;
}

static void key_set(sl_set_config *c, const set_key *k, int64_t v)
{
    char *p = (char *)c + k->off;
    if (k->kind == KEY_BOOL) {
        *(bool *)p = v != 0;
    } else if (k->size == 8) {
        memcpy(p, &v, 8);
    } else {
        uint32_t u = (uint32_t)v;
        memcpy(p, &u, 4);
    }
}

bool sl_set_config_equal(const sl_set_config *a, const sl_set_config *b)
{
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (key_get(a, &keys[i]) != key_get(b, &keys[i]))
            return false;
    return a->backend == b->backend && strcmp(a->topic, b->topic) == 0 &&
           a->replication == b->replication;
}

static json_t *config_to_json(const sl_set_config *c)
{
    json_t *j = json_object();
    for (size_t i = 0; j && i < sizeof keys / sizeof *keys; i++) {
        const set_key *k = &keys[i];
        int64_t v = key_get(c, k);
        json_t *jv = k->kind == KEY_BOOL  ? json_boolean(v)
                     : k->kind == KEY_ACK ? json_string(v == SL_ACK_DURABLE ? "durable" : "buffer")
                     : k->kind == KEY_CODEC ? json_string(sl_codec_name((sl_codec)v))
                                            : json_integer((json_int_t)v);
        json_object_set_new(j, k->name, jv);
    }
    return j;
}

/* Reads set.json over the defaults in *c. Every key must be known and of its
 * type: a typo must not silently become a default. */
static int config_from_json(json_t *j, sl_set_config *c, const char *path, sl_error *err)
{
    if (!json_is_object(j))
        return sl_error_set(err, SL_EPARSE, "%s: not a JSON object", path);
    json_t *v;
    const char *name;
    json_object_foreach(j, name, v)
    {
        const set_key *k = NULL;
        for (size_t i = 0; !k && i < sizeof keys / sizeof *keys; i++)
            if (strcmp(keys[i].name, name) == 0)
                k = &keys[i];
        if (!k)
            return sl_error_set(err, SL_EPARSE, "%s: unknown key \"%s\"", path, name);
        const char *sv = json_string_value(v);
        sl_codec codec;
        if (k->kind == KEY_BOOL && json_is_boolean(v))
            key_set(c, k, json_is_true(v));
        else if (k->kind == KEY_ACK && sv && (!strcmp(sv, "buffer") || !strcmp(sv, "durable")))
            key_set(c, k, strcmp(sv, "durable") == 0 ? SL_ACK_DURABLE : SL_ACK_BUFFER);
        else if (k->kind == KEY_CODEC && sv && sl_codec_parse(sv, &codec) == 0)
            key_set(c, k, codec);
        else if (k->kind == KEY_INT && json_is_integer(v) && json_integer_value(v) >= k->min &&
                 json_integer_value(v) <= k->max)
            key_set(c, k, json_integer_value(v));
        else
            return sl_error_set(err, SL_EPARSE, "%s: bad value for \"%s\"%s", path, name,
                                k->kind == KEY_ACK     ? " (want \"buffer\" or \"durable\")"
                                : k->kind == KEY_CODEC ? " (want \"none\" or \"zstd\")"
                                : k->kind == KEY_BOOL  ? " (want true or false)"
                                                       : " (want an integer in range)");
    }
    return 0;
}

/* Writes set.json atomically: temp file, fsync, rename, fsync dir. An
 * auto-created set (auto_client not NULL) also gets "auto_created_by", so
 * that the cap still counts it after a restart. */
static int config_save(const char *dir, const sl_set_config *c, const char *auto_client,
                       sl_error *err)
{
    char path[4200], tmp[4200];
    snprintf(path, sizeof path, "%s/set.json", dir);
    snprintf(tmp, sizeof tmp, "%s/set.json.tmp", dir);
    json_t *j = config_to_json(c);
    if (!j)
        return SL_ENOMEM;
    if (auto_client)
        json_object_set_new(j, "auto_created_by", json_string(auto_client));
    /* Declared sets are defined again at every start: a file that already
     * says the same costs no write and no fsync (thousands of sets). */
    json_t *old = json_load_file(path, 0, NULL);
    bool same = old && json_equal(old, j);
    json_decref(old);
    if (same) {
        json_decref(j);
        return 0;
    }
    int rc = json_dump_file(j, tmp, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(j);
    if (rc)
        return sl_error_set(err, SL_EIO, "write %s failed", tmp);
    FILE *f = fopen(tmp, "r+");
    if (f) {
        fsync(fileno(f));
        fclose(f);
    }
    if (rename(tmp, path) < 0)
        return sl_error_errno(err, errno, "rename %s", tmp);
    FILE *d = fopen(dir, "r");
    if (d) {
        fsync(fileno(d));
        fclose(d);
    }
    return 0;
}

/* ---- sets ---------------------------------------------------------------- */

static void set_free(sl_sets *sets, sl_set *s)
{
    if (!s)
        return;
    if (s->opened && sets->opts.on_close)
        sets->opts.on_close(s, sets->opts.ctx);
    for (int32_t p = 0; p < s->nparts; p++)
        sl_store_close(&s->parts[p]);
    free(s->parts);
    free(s);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0; /* go on: remove as much as can be removed */
}

/* After a failed creation: removes what set_open() made, the set's
 * directory when it made it, else the partition directories it made
 * (made[p]), so that no half-made set is left (nor found at the next start). */
static void unmake(const char *dir, bool made_dir, const bool *made, int32_t n)
{
    if (made_dir) {
        nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
        return;
    }
    for (int32_t p = 0; made && p < n; p++) {
        char pdir[4300];
        snprintf(pdir, sizeof pdir, "%s/%d", dir, p);
        if (made[p])
            nftw(pdir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    }
}

/* Opens (creating as needed, and saving set.json when save) the set in
 * root/name with configuration c; auto_client not NULL marks it
 * auto-created. A failed creation removes what it made. */
static int set_open(sl_sets *sets, const char *name, const sl_set_config *c, bool save,
                    const char *auto_client, sl_set **out, sl_error *err)
{
    sl_set *s = calloc(1, sizeof *s);
    if (!s)
        return SL_ENOMEM;
    snprintf(s->name, sizeof s->name, "%s", name);
    s->cfg = *c;
    s->auto_created = auto_client != NULL;
    snprintf(s->auto_client, sizeof s->auto_client, "%s", auto_client ? auto_client : "");
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/%s", sets->root, name);
    int rc = 0;
    bool made_dir = false, *made = NULL; /* what to remove should the creation fail */
    if (mkdir(dir, 0755) == 0)
        made_dir = save;
    else if (errno != EEXIST)
        rc = sl_error_errno(err, errno, "create %s", dir);
    if (!rc && !(s->parts = calloc((size_t)c->partitions, sizeof *s->parts)))
        rc = SL_ENOMEM;
    if (!rc && save && !made_dir && !(made = calloc((size_t)c->partitions, sizeof *made)))
        rc = SL_ENOMEM;
    sl_log_open_options lo = {
        .create = true, .notify = sets->opts.notify, .notify_ctx = sets->opts.notify_ctx};
    for (int32_t p = 0; !rc && p < c->partitions; p++) {
        char pdir[4300];
        snprintf(pdir, sizeof pdir, "%s/%d", dir, p);
        if (made)
            made[p] = access(pdir, F_OK) != 0;
        /* An existing set (!save) starts with its cleanly closed
         * partitions parked: a restart costs no descriptor per set. */
        rc = sl_store_open_pooled(&s->parts[p], pdir, &c->log, &lo, !save, sets->pool, err);
        if (!rc)
            s->nparts++;
    }
    if (!rc && sets->opts.on_open && !(rc = sets->opts.on_open(s, sets->opts.ctx, err)))
        s->opened = true;
    else if (!rc)
        s->opened = true;
    /* set.json last: a set refused above must not come back at the next start. */
    if (!rc && save)
        rc = config_save(dir, c, auto_client, err);
    if (rc) {
        set_free(sets, s);
        if (save)
            unmake(dir, made_dir, made, c->partitions);
        free(made);
        return rc;
    }
    free(made);
    *out = s;
    return 0;
}

/* ---- Kafka-backed sets --------------------------------------------------- */

static void kafka_durable(void *ctx, int32_t partition, int64_t seq_end)
{
    sl_databus_remote_durable(ctx, partition, seq_end);
}

static void kafka_data(void *ctx, int32_t partition)
{
    sl_set *s = ctx;
    if (s->reg->opts.on_remote_data)
        s->reg->opts.on_remote_data(s, partition, s->reg->opts.remote_ctx);
}

/* Opens set name on its topic: nothing on disk. */
static int set_open_kafka(sl_sets *sets, const char *name, const sl_set_config *c, sl_set **out,
                          sl_error *err)
{
    const sl_kafka_cluster *cl = sets->opts.kafka;
    if (!cl)
        return sl_error_set(err, SL_EINVAL,
                            "set %s: backend \"kafka\" needs server { kafka = { brokers = … } }",
                            name);
    sl_set *s = calloc(1, sizeof *s);
    if (!s)
        return SL_ENOMEM;
    snprintf(s->name, sizeof s->name, "%s", name);
    s->cfg = *c;
    s->reg = sets;
    if (!c->topic[0])
        snprintf(s->cfg.topic, sizeof s->cfg.topic, "%s%s",
                 cl->topic_prefix ? cl->topic_prefix : "sluice.", name);
    sl_kstore_options ko = {
        .set = s->name,
        .topic = s->cfg.topic,
        .partitions = c->partitions,
        .replication = c->replication,
        .durable = c->ack == SL_ACK_DURABLE,
        .compression = c->compression,
        .linger_ms = c->linger_ms,
        .batch_bytes = c->batch_bytes,
        .on_durable = kafka_durable,
        .on_data = kafka_data,
        .ctx = s,
    };
    int rc = sl_kstore_open(cl, &ko, &s->ktopic, err);
    if (!rc && !(s->parts = calloc((size_t)c->partitions, sizeof *s->parts)))
        rc = SL_ENOMEM;
    for (int32_t p = 0; !rc && p < c->partitions; p++)
        if (!(rc = sl_kstore_partition(s->ktopic, p, &s->parts[p], err)))
            s->nparts++;
    if (!rc && sets->opts.on_open && !(rc = sets->opts.on_open(s, sets->opts.ctx, err)))
        s->opened = true;
    else if (!rc)
        s->opened = true;
    if (rc) {
        struct sl_kstore_topic *t = s->ktopic;
        set_free(sets, s); /* the partitions' references */
        sl_kstore_release(t);
        return rc;
    }
    sl_kstore_release(s->ktopic); /* the partitions hold it now */
    sl_slog(SL_SLOG_INFO, "sets", "set %s: on Kafka topic %s (%d partitions)", name,
            s->cfg.topic, (int)s->nparts);
    *out = s;
    return 0;
}

static int push(sl_sets *sets, sl_set *s)
{
    int rc = 0;
    pthread_rwlock_wrlock(&sets->lock);
    if (sets->n == sets->cap)
        rc = SL_GROW(sets->v, sets->cap, 16);
    if (!rc) { /* kept in name order, so listings are stable across restarts */
        size_t i = sets->n;
        while (i > 0 && strcmp(sets->v[i - 1]->name, s->name) > 0) {
            sets->v[i] = sets->v[i - 1];
            i--;
        }
        sets->v[i] = s;
        sets->n++;
        if (s->auto_created)
            atomic_fetch_add(&sets->nauto, 1);
    }
    pthread_rwlock_unlock(&sets->lock);
    return rc;
}

/* Binary search: the list is kept in name order, and every request looks its
 * set up (ten thousand sets must cost no more than a few). */
static sl_set *find(sl_sets *sets, const char *name)
{
    sl_set *found = NULL;
    pthread_rwlock_rdlock(&sets->lock);
    size_t lo = 0, hi = sets->n;
    while (lo < hi && !found) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(sets->v[mid]->name, name);
        if (c == 0)
            found = sets->v[mid];
        else if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    pthread_rwlock_unlock(&sets->lock);
    return found;
}

/* Opens an existing set directory: its set.json over the defaults. */
static int load_existing(sl_sets *sets, const char *name, sl_error *err)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/%s/set.json", sets->root, name);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) {
        if (access(path, F_OK) != 0)
            return 0; /* not a set: ignore the directory */
        return sl_error_set(err, SL_EPARSE, "%s:%d: %s", path, je.line, je.text);
    }
    /* "auto_created_by" is the registry's, not a setting: a set.json
     * without it (declared, or written before the key existed) is declared. */
    char client[SL_SET_CLIENT_MAX + 1] = "";
    bool autoc = false;
    int rc = 0;
    json_t *a = json_is_object(j) ? json_object_get(j, "auto_created_by") : NULL;
    if (a && !json_is_string(a))
        rc = sl_error_set(err, SL_EPARSE, "%s: bad value for \"auto_created_by\" (want a string)",
                          path);
    else if (a) {
        autoc = true;
        snprintf(client, sizeof client, "%s", json_string_value(a));
        json_object_del(j, "auto_created_by");
    }
    sl_set_config c = sets->opts.defaults;
    if (!rc)
        rc = config_from_json(j, &c, path, err);
    json_decref(j);
    sl_set *s;
    if (!rc)
        rc = set_open(sets, name, &c, false, autoc ? client : NULL, &s, err);
    if (!rc && (rc = push(sets, s)))
        set_free(sets, s);
    return rc;
}

static bool has_set_json(const char *root, const char *name)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/%s/set.json", root, name);
    return access(path, F_OK) == 0;
}

/* Partitions park (and let go of their own .lock) when idle, so the data
 * directory as a whole is what a second server must not share. */
static int lock_data_dir(sl_sets *sets, const char *data_dir, sl_error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/.lock", data_dir);
    if ((sets->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0)
        return sl_error_errno(err, errno, "open %s", path);
    if (flock(sets->lock_fd, LOCK_EX | LOCK_NB) == 0)
        return 0;
    if (errno == EWOULDBLOCK)
        return sl_error_set(err, SL_EEXIST,
                            "data directory %s is in use by another process (a running "
                            "`sluice serve`, or `sluice log` on one of its partitions; %s is "
                            "locked)",
                            data_dir, path);
    return sl_error_errno(err, errno, "lock %s", path);
}

size_t sl_sets_default_max_open(void)
{
    struct rlimit rl;
    rlim_t lim = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur : 1024;
    if (lim == RLIM_INFINITY || lim > (rlim_t)1 << 24)
        lim = (rlim_t)1 << 24;
    size_t n = (size_t)lim / SL_SETS_FDS_PER_PARTITION;
    return n < 16 ? 16 : n;
}

int sl_sets_open(const sl_sets_options *opts, sl_sets **out, sl_error *err)
{
    sl_sets *sets = calloc(1, sizeof *sets);
    if (!sets)
        return SL_ENOMEM;
    sets->opts = *opts;
    sets->lock_fd = -1;
    pthread_rwlock_init(&sets->lock, NULL);
    pthread_mutex_init(&sets->create_lock, NULL);
    size_t n = strlen(opts->data_dir) + 6;
    int rc = sl_store_pool_new(opts->max_open_partitions ? opts->max_open_partitions
                                                         : sl_sets_default_max_open(),
                               &sets->pool);
    if (rc)
        goto fail;
    if (!(sets->root = malloc(n))) {
        rc = SL_ENOMEM;
        goto fail;
    }
    snprintf(sets->root, n, "%s/sets", opts->data_dir);
    if ((mkdir(opts->data_dir, 0755) < 0 && errno != EEXIST) ||
        (mkdir(sets->root, 0755) < 0 && errno != EEXIST)) {
        rc = sl_error_errno(err, errno, "create %s", sets->root);
        goto fail;
    }
    if ((rc = lock_data_dir(sets, opts->data_dir, err)))
        goto fail;
    DIR *d = opendir(sets->root);
    if (!d) {
        rc = sl_error_errno(err, errno, "open %s", sets->root);
        goto fail;
    }
    struct dirent *e;
    while (!rc && (e = readdir(d))) {
        if (sl_set_name_valid(e->d_name)) {
            rc = load_existing(sets, e->d_name, err);
        } else if (e->d_name[0] == '.' && strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
                   opts->notify && has_set_json(sets->root, e->d_name)) {
            /* Made by a version that allowed leading dots: kept on disk,
             * not served, and said so rather than silently missing. */
            char msg[600];
            snprintf(msg, sizeof msg,
                     "%s/%.300s: not opened: set names may not begin with \".\" (rename the "
                     "directory to serve it)",
                     sets->root, e->d_name);
            opts->notify(opts->notify_ctx, msg);
        }
    }
    closedir(d);
    if (rc)
        goto fail;
    *out = sets;
    return 0;
fail:
    sl_sets_close(sets);
    return rc;
}

/* How get_or_create() may make a missing set. */
typedef enum make_mode {
    MAKE_NONE,    /* look up only */
    MAKE_AUTO,    /* auto-create (auto_create and the caps permitting) */
    MAKE_DECLARE, /* create as declared, with the defaults */
    MAKE_DEFINE,  /* create as declared with cfg, or give an existing set cfg */
} make_mode;

/* Auto-created sets charged to client (under the read lock). */
static size_t auto_count_of(sl_sets *sets, const char *client)
{
    size_t n = 0;
    pthread_rwlock_rdlock(&sets->lock);
    for (size_t i = 0; i < sets->n; i++)
        n += sets->v[i]->auto_created && strcmp(sets->v[i]->auto_client, client) == 0;
    pthread_rwlock_unlock(&sets->lock);
    return n;
}

/* Whether one more set may be auto-created for client (create_lock held):
 * 0, or SL_ELIMIT with err naming the limit that was reached. */
static int auto_admit(sl_sets *sets, const char *name, const char *client, sl_error *err)
{
    size_t cap = sets->opts.max_auto_sets, share = sets->opts.max_auto_sets_per_client;
    size_t n = atomic_load(&sets->nauto);
    if (cap && n >= cap)
        return sl_error_set(err, SL_ELIMIT,
                            "set \"%s\" was not created: %zu sets were created on first use "
                            "already, the limit (server.max_auto_sets = %zu); retrying does not "
                            "help: declare the set (set \"%s\" { }) or raise the limit",
                            name, n, cap, name);
    if (share && client[0] && (n = auto_count_of(sets, client)) >= share)
        return sl_error_set(err, SL_ELIMIT,
                            "set \"%s\" was not created: %s created %zu sets on first use "
                            "already, its share (server.max_auto_sets_per_client = %zu); "
                            "retrying does not help: declare the set (set \"%s\" { }) or raise "
                            "the limit",
                            name, client, n, share, name);
    return 0;
}

static int get_or_create(sl_sets *sets, const char *name, const sl_set_config *cfg, make_mode mode,
                         const char *client, sl_set **out, sl_error *err)
{
    if (!sl_set_name_valid(name))
        return sl_error_set(err, SL_EINVAL,
                            "invalid set name \"%.140s\": use 1 to 128 of "
                            "A-Z a-z 0-9 . _ - , not beginning with \".\"",
                            name);
    if (!client)
        client = "";
    sl_set *s = find(sets, name);
    bool kafka = mode == MAKE_DEFINE && cfg->backend == SL_BACKEND_KAFKA;
    if (s && (kafka != sl_set_remote(s)) && mode == MAKE_DEFINE)
        return sl_error_set(err, SL_EEXIST,
                            kafka ? "set %s: declared with backend \"kafka\", but %s/%s holds it "
                                    "as a local set; a set does not change backend in place "
                                    "(migrate it: docs/scale-out.md)"
                                  : "set %s: declared as a local set, but it is Kafka-backed "
                                    "(%s/%s: a set does not change backend in place)",
                            name, sets->root, name);
    if (s && kafka) { /* defined again: settings that need no reopening */
        pthread_mutex_lock(&sets->create_lock);
        char topic[SL_SET_TOPIC_MAX + 1];
        memcpy(topic, s->cfg.topic, sizeof topic);
        s->cfg = *cfg;
        s->cfg.partitions = s->nparts;
        memcpy(s->cfg.topic, topic, sizeof topic);
        pthread_mutex_unlock(&sets->create_lock);
        *out = s;
        return 0;
    }
    if (!s && kafka) {
        pthread_mutex_lock(&sets->create_lock);
        int rc = 0;
        if (!(s = find(sets, name)) && !(rc = set_open_kafka(sets, name, cfg, &s, err)) &&
            (rc = push(sets, s)))
            set_free(sets, s);
        pthread_mutex_unlock(&sets->create_lock);
        if (!rc)
            *out = s;
        return rc;
    }
    if (s && mode == MAKE_DEFINE) { /* over an existing set: new settings, same partitions */
        pthread_mutex_lock(&sets->create_lock);
        sl_set_config c = *cfg;
        c.partitions = s->nparts;
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/%s", sets->root, name);
        int rc = config_save(dir, &c, NULL, err);
        if (!rc) {
            s->cfg = c;
            pthread_rwlock_wrlock(&sets->lock);
            if (s->auto_created) { /* the config names it now: declared */
                s->auto_created = false;
                s->auto_client[0] = '\0';
                atomic_fetch_sub(&sets->nauto, 1);
            }
            pthread_rwlock_unlock(&sets->lock);
        }
        pthread_mutex_unlock(&sets->create_lock);
        if (!rc)
            *out = s;
        return rc;
    }
    if (s) {
        *out = s;
        return 0;
    }
    if (mode == MAKE_NONE || (mode == MAKE_AUTO && !sets->opts.auto_create))
        return sl_error_set(err, SL_ENOENT, "no event set \"%s\"", name);
    pthread_mutex_lock(&sets->create_lock);
    int rc = 0;
    if (!(s = find(sets, name)) &&
        !(mode == MAKE_AUTO && (rc = auto_admit(sets, name, client, err)))) {
        rc = set_open(sets, name, mode == MAKE_DEFINE ? cfg : &sets->opts.defaults, true,
                      mode == MAKE_AUTO ? client : NULL, &s, err);
        if (!rc && (rc = push(sets, s)))
            set_free(sets, s);
    }
    pthread_mutex_unlock(&sets->create_lock);
    if (!rc)
        *out = s;
    return rc;
}

int sl_sets_get(sl_sets *sets, const char *name, bool create, sl_set **out, sl_error *err)
{
    return get_or_create(sets, name, NULL, create ? MAKE_AUTO : MAKE_NONE, NULL, out, err);
}

int sl_sets_create_auto(sl_sets *sets, const char *name, const char *client, sl_set **out,
                        sl_error *err)
{
    return get_or_create(sets, name, NULL, MAKE_AUTO, client, out, err);
}

int sl_sets_declare(sl_sets *sets, const char *name, sl_set **out, sl_error *err)
{
    return get_or_create(sets, name, NULL, MAKE_DECLARE, NULL, out, err);
}

int sl_sets_define(sl_sets *sets, const char *name, const sl_set_config *cfg, sl_set **out,
                   sl_error *err)
{
    return get_or_create(sets, name, cfg, MAKE_DEFINE, NULL, out, err);
}

const sl_set_config *sl_sets_defaults(const sl_sets *sets)
{
    return &sets->opts.defaults;
}

bool sl_sets_auto_creates(const sl_sets *sets)
{
    return sets->opts.auto_create;
}

size_t sl_sets_auto_count(sl_sets *sets)
{
    return atomic_load(&sets->nauto);
}

void sl_sets_each(sl_sets *sets, void (*fn)(sl_set *set, void *ctx), void *ctx)
{
    pthread_rwlock_rdlock(&sets->lock);
    for (size_t i = 0; i < sets->n; i++)
        fn(sets->v[i], ctx);
    pthread_rwlock_unlock(&sets->lock);
}

size_t sl_sets_count(sl_sets *sets)
{
    pthread_rwlock_rdlock(&sets->lock);
    size_t n = sets->n;
    pthread_rwlock_unlock(&sets->lock);
    return n;
}

static void retain_one(sl_set *s, void *ctx)
{
    int64_t now = *(const int64_t *)ctx;
    for (int32_t p = 0; p < s->nparts; p++)
        sl_store_retain(&s->parts[p], now, NULL);
}

void sl_sets_retain(sl_sets *sets, int64_t now_ms)
{
    sl_sets_each(sets, retain_one, &now_ms);
}

size_t sl_sets_park_idle(sl_sets *sets, int64_t idle_ms)
{
    return sl_store_pool_sweep(sets->pool, idle_ms);
}

void sl_sets_fd_stats(sl_sets *sets, sl_sets_fd_info *out)
{
    memset(out, 0, sizeof *out);
    out->sets = sl_sets_count(sets);
    sl_store_pool_stats st;
    sl_store_pool_stats_get(sets->pool, &st);
    out->partitions_open = st.open;
    out->partitions_parked = st.stores - st.open;
    out->parks = st.parks;
    out->reopens = st.reopens;
    out->max_open_partitions = sl_store_pool_max(sets->pool);
    struct rlimit rl;
    out->fd_limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                        ? (uint64_t)rl.rlim_cur
                        : 0;
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)))
            out->open_fds += e->d_name[0] != '.';
        closedir(d);
        out->open_fds--; /* the directory stream's own descriptor */
    }
}

int sl_sets_metrics(sl_sets *sets, sl_buf *out)
{
    sl_sets_fd_info f;
    sl_sets_fd_stats(sets, &f);
    const struct {
        const char *name;
        sl_metric_type type;
        const char *help;
        uint64_t v;
    } m[] = {
        {"sluice_open_fds", SL_METRIC_GAUGE, "Open file descriptors of the process.", f.open_fds},
        {"sluice_fd_limit", SL_METRIC_GAUGE,
         "Limit on open file descriptors (RLIMIT_NOFILE, soft).", f.fd_limit},
        {"sluice_sets", SL_METRIC_GAUGE, "Event sets in the registry.", f.sets},
        {"sluice_sets_auto_created", SL_METRIC_GAUGE,
         "Sets created on first use, counted against server.max_auto_sets.",
         sl_sets_auto_count(sets)},
        {"sluice_sets_auto_max", SL_METRIC_GAUGE,
         "Most sets created on first use (server.max_auto_sets).", sets->opts.max_auto_sets},
        {"sluice_partitions_open", SL_METRIC_GAUGE,
         "Partitions whose log is open (descriptors held).", f.partitions_open},
        {"sluice_partitions_parked", SL_METRIC_GAUGE,
         "Idle partitions closed until their next use.", f.partitions_parked},
        {"sluice_partitions_open_max", SL_METRIC_GAUGE,
         "Most partitions kept open at once (server.max_open_partitions).", f.max_open_partitions},
        {"sluice_partition_parks_total", SL_METRIC_COUNTER, "Partitions parked since start.",
         f.parks},
        {"sluice_partition_reopens_total", SL_METRIC_COUNTER,
         "Parked partitions reopened since start.", f.reopens},
    };
    int rc = 0;
    for (size_t i = 0; !rc && i < sizeof m / sizeof *m; i++) {
        rc = sl_metrics_family(out, m[i].name, m[i].type, m[i].help);
        rc = rc ? rc : sl_metrics_u64(out, m[i].name, m[i].v, NULL);
    }
    return rc;
}

void sl_sets_close(sl_sets *sets)
{
    if (!sets)
        return;
    for (size_t i = 0; i < sets->n; i++)
        set_free(sets, sets->v[i]);
    for (size_t i = 0; i < sets->ndead; i++)
        set_free(sets, sets->dead[i]);
    free(sets->dead);
    free(sets->v);
    free(sets->root);
    sl_store_pool_free(sets->pool);
    if (sets->lock_fd >= 0)
        close(sets->lock_fd); /* last: every partition is closed */
    pthread_rwlock_destroy(&sets->lock);
    pthread_mutex_destroy(&sets->create_lock);
    free(sets);
}

int sl_sets_delete(sl_sets *sets, const char *name, sl_error *err)
{
    pthread_mutex_lock(&sets->create_lock); /* not while one is being made */
    pthread_rwlock_wrlock(&sets->lock);
    size_t i = 0;
    while (i < sets->n && strcmp(sets->v[i]->name, name) != 0)
        i++;
    int rc = 0;
    sl_set *s = i < sets->n ? sets->v[i] : NULL;
    if (!s)
        rc = sl_error_set(err, SL_ENOENT, "no set %s", name);
    else if (s->nparts > 0 && sl_store_remote(&s->parts[0]))
        rc = sl_error_set(err, SL_EINVAL, "set %s is Kafka-backed: its topic %s is the cluster's",
                          name, s->cfg.topic);
    else if (sets->ndead == sets->dead_cap && SL_GROW(sets->dead, sets->dead_cap, 8))
        rc = SL_ENOMEM;
    if (!rc) {
        /* Out of the registry at once; the sl_set and its open stores live
         * on (in dead) until sl_sets_close(), so a pointer someone still holds
         * stays valid and sees deleted. */
        memmove(&sets->v[i], &sets->v[i + 1], (sets->n - i - 1) * sizeof *sets->v);
        sets->n--;
        if (s->auto_created)
            atomic_fetch_sub(&sets->nauto, 1);
        sets->dead[sets->ndead++] = s;
        atomic_store(&s->deleted, true);
    }
    pthread_rwlock_unlock(&sets->lock);
    if (!rc) {
        /* Renamed first so the name is free for a new set at once, even if
         * removing the files takes long or fails half-way. */
        char dir[4200], tomb[4300];
        snprintf(dir, sizeof dir, "%s/%s", sets->root, name);
        snprintf(tomb, sizeof tomb, "%s/.deleted-%s-%lld", sets->root, name,
                 (long long)sl_clock_mono_ns());
        if (rename(dir, tomb) != 0)
            rc = sl_error_errno(err, errno, "remove %s", dir);
        else
            nftw(tomb, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    }
    pthread_mutex_unlock(&sets->create_lock);
    return rc;
}
