/*
 * core/set.c — the event-set registry: names, per-set configuration in
 * set.json, and one open log per partition (see core/set.h).
 */
#include "core/set.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct sl_sets {
    char *root; /* DATA/sets */
    sl_sets_options opts;
    pthread_rwlock_t lock;
    pthread_mutex_t create_lock; /* one creator at a time; lookups go on */
    sl_set **v;
    size_t n, cap;
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
}

int sl_set_name_valid(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > SL_SET_NAME_MAX || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

int sl_parse_duration_ms(const char *s, int64_t *ms)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0)
        return SL_EINVAL;
    static const struct {
        const char *unit;
        double ms;
    } units[] = {{"", 1}, {"ms", 1}, {"s", 1e3}, {"m", 60e3}, {"h", 3600e3}, {"d", 86400e3},
                 {"w", 7 * 86400e3}};
    for (size_t i = 0; i < sizeof units / sizeof *units; i++) {
        if (strcmp(end, units[i].unit) == 0) {
            double r = v * units[i].ms;
            if (r > (double)INT64_MAX / 2)
                return SL_EINVAL;
            *ms = (int64_t)r;
            return 0;
        }
    }
    return SL_EINVAL;
}

int sl_parse_bytes(const char *s, uint64_t *bytes)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0)
        return SL_EINVAL;
    static const struct {
        const char *unit;
        double mult;
    } units[] = {{"", 1},          {"B", 1},           {"KiB", 1024.0},     {"MiB", 1048576.0},
                 {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}, {"KB", 1e3}, {"MB", 1e6},
                 {"GB", 1e9},      {"TB", 1e12}};
    for (size_t i = 0; i < sizeof units / sizeof *units; i++) {
        if (strcmp(end, units[i].unit) == 0) {
            double r = v * units[i].mult;
            if (r > 9.0e18)
                return SL_EINVAL;
            *bytes = (uint64_t)r;
            return 0;
        }
    }
    return SL_EINVAL;
}

/* ---- set.json ----------------------------------------------------------- */

static json_t *config_to_json(const sl_set_config *c)
{
    return json_pack("{s:i, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:I, s:I, s:I}",
                     "partitions", (int)c->partitions,
                     "ack", c->ack == SL_ACK_DURABLE ? "durable" : "buffer",
                     "compression", sl_codec_name(c->compression),
                     "segment_bytes", (json_int_t)c->log.segment_bytes,
                     "segment_ms", (json_int_t)c->log.segment_ms,
                     "index_interval_bytes", (json_int_t)c->log.index_interval_bytes,
                     "retention_ms", (json_int_t)c->log.retention_ms,
                     "retention_bytes", (json_int_t)c->log.retention_bytes,
                     "max_event_bytes", (json_int_t)c->max_event_bytes,
                     "generate_ids", c->generate_ids,
                     "linger_ms", (json_int_t)c->linger_ms,
                     "batch_bytes", (json_int_t)c->batch_bytes,
                     "buffer_bytes", (json_int_t)c->buffer_bytes);
}

/* Reads what set.json says over the defaults in *c; unknown keys are kept
 * out (a newer version may add some). */
static int config_from_json(json_t *j, sl_set_config *c, const char *path, sl_error *err)
{
    json_t *v;
    const char *key;
    json_object_foreach(j, key, v) {
        json_int_t i = json_integer_value(v);
        if (strcmp(key, "partitions") == 0 && json_is_integer(v) && i >= 1 && i <= 1024)
            c->partitions = (int32_t)i;
        else if (strcmp(key, "ack") == 0 && json_is_string(v))
            c->ack = strcmp(json_string_value(v), "buffer") == 0 ? SL_ACK_BUFFER : SL_ACK_DURABLE;
        else if (strcmp(key, "compression") == 0 && json_is_string(v) &&
                 sl_codec_parse(json_string_value(v), &c->compression) == 0)
            ;
        else if (strcmp(key, "segment_bytes") == 0 && i > 0)
            c->log.segment_bytes = (uint64_t)i;
        else if (strcmp(key, "segment_ms") == 0 && json_is_integer(v))
            c->log.segment_ms = i;
        else if (strcmp(key, "index_interval_bytes") == 0 && i > 0)
            c->log.index_interval_bytes = (uint32_t)i;
        else if (strcmp(key, "retention_ms") == 0 && json_is_integer(v))
            c->log.retention_ms = i;
        else if (strcmp(key, "retention_bytes") == 0 && json_is_integer(v))
            c->log.retention_bytes = i;
        else if (strcmp(key, "max_event_bytes") == 0 && i > 0)
            c->max_event_bytes = (uint32_t)i;
        else if (strcmp(key, "generate_ids") == 0 && json_is_boolean(v))
            c->generate_ids = json_is_true(v);
        else if (strcmp(key, "linger_ms") == 0 && i >= 0)
            c->linger_ms = (uint32_t)i;
        else if (strcmp(key, "batch_bytes") == 0 && i > 0)
            c->batch_bytes = (uint32_t)i;
        else if (strcmp(key, "buffer_bytes") == 0 && i > 0)
            c->buffer_bytes = (uint64_t)i;
        else
            return sl_error_set(err, SL_EPARSE, "%s: bad value for \"%s\"", path, key);
    }
    return 0;
}

/* Writes set.json atomically: temp file, fsync, rename, fsync dir. */
static int config_save(const char *dir, const sl_set_config *c, sl_error *err)
{
    char path[4200], tmp[4200];
    snprintf(path, sizeof path, "%s/set.json", dir);
    snprintf(tmp, sizeof tmp, "%s/set.json.tmp", dir);
    json_t *j = config_to_json(c);
    if (!j)
        return SL_ENOMEM;
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

static void set_free(sl_set *s)
{
    if (!s)
        return;
    for (int32_t p = 0; p < s->nparts; p++)
        sl_log_close(s->parts[p]);
    free(s->parts);
    free(s);
}

/* Opens (creating as needed) the set in root/name with configuration c. */
static int set_open(sl_sets *sets, const char *name, const sl_set_config *c, bool save,
                    sl_set **out, sl_error *err)
{
    sl_set *s = calloc(1, sizeof *s);
    if (!s)
        return SL_ENOMEM;
    snprintf(s->name, sizeof s->name, "%s", name);
    s->cfg = *c;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/%s", sets->root, name);
    int rc = 0;
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        rc = sl_error_errno(err, errno, "create %s", dir);
    if (!rc && save)
        rc = config_save(dir, c, err);
    if (!rc && !(s->parts = calloc((size_t)c->partitions, sizeof *s->parts)))
        rc = SL_ENOMEM;
    sl_log_open_options lo = {.create = true, .notify = sets->opts.notify,
                              .notify_ctx = sets->opts.notify_ctx};
    for (int32_t p = 0; !rc && p < c->partitions; p++) {
        char pdir[4300];
        snprintf(pdir, sizeof pdir, "%s/%d", dir, p);
        rc = sl_log_open(pdir, &c->log, &lo, &s->parts[p], err);
        if (!rc)
            s->nparts++;
    }
    if (!rc && sets->opts.on_open)
        rc = sets->opts.on_open(s, sets->opts.ctx, err);
    if (rc) {
        set_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

static int push(sl_sets *sets, sl_set *s)
{
    int rc = 0;
    pthread_rwlock_wrlock(&sets->lock);
    if (sets->n == sets->cap) {
        size_t cap = sets->cap ? sets->cap * 2 : 16;
        sl_set **v = realloc(sets->v, cap * sizeof *v);
        if (v) {
            sets->v = v;
            sets->cap = cap;
        } else {
            rc = SL_ENOMEM;
        }
    }
    if (!rc) { /* kept in name order, so listings are stable across restarts */
        size_t i = sets->n;
        while (i > 0 && strcmp(sets->v[i - 1]->name, s->name) > 0) {
            sets->v[i] = sets->v[i - 1];
            i--;
        }
        sets->v[i] = s;
        sets->n++;
    }
    pthread_rwlock_unlock(&sets->lock);
    return rc;
}

static sl_set *find(sl_sets *sets, const char *name)
{
    sl_set *found = NULL;
    pthread_rwlock_rdlock(&sets->lock);
    for (size_t i = 0; i < sets->n && !found; i++)
        if (strcmp(sets->v[i]->name, name) == 0)
            found = sets->v[i];
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
    sl_set_config c = sets->opts.defaults;
    int rc = config_from_json(j, &c, path, err);
    json_decref(j);
    sl_set *s;
    if (!rc)
        rc = set_open(sets, name, &c, false, &s, err);
    if (!rc && (rc = push(sets, s)))
        set_free(s);
    return rc;
}

int sl_sets_open(const sl_sets_options *opts, sl_sets **out, sl_error *err)
{
    sl_sets *sets = calloc(1, sizeof *sets);
    if (!sets)
        return SL_ENOMEM;
    sets->opts = *opts;
    pthread_rwlock_init(&sets->lock, NULL);
    pthread_mutex_init(&sets->create_lock, NULL);
    size_t n = strlen(opts->data_dir) + 6;
    int rc = 0;
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
    DIR *d = opendir(sets->root);
    if (!d) {
        rc = sl_error_errno(err, errno, "open %s", sets->root);
        goto fail;
    }
    struct dirent *e;
    while (!rc && (e = readdir(d)))
        if (sl_set_name_valid(e->d_name))
            rc = load_existing(sets, e->d_name, err);
    closedir(d);
    if (rc)
        goto fail;
    *out = sets;
    return 0;
fail:
    sl_sets_close(sets);
    return rc;
}

static int get_or_create(sl_sets *sets, const char *name, const sl_set_config *cfg,
                         bool allowed, sl_set **out, sl_error *err)
{
    if (!sl_set_name_valid(name))
        return sl_error_set(err, SL_EINVAL, "invalid set name \"%.140s\": use 1 to 128 of "
                            "A-Z a-z 0-9 . _ - (not \".\" or \"..\")", name);
    sl_set *s = find(sets, name);
    if (s) {
        *out = s;
        return 0;
    }
    if (!allowed)
        return sl_error_set(err, SL_ENOENT, "no event set \"%s\"", name);
    pthread_mutex_lock(&sets->create_lock);
    int rc = 0;
    if (!(s = find(sets, name))) {
        rc = set_open(sets, name, cfg ? cfg : &sets->opts.defaults, true, &s, err);
        if (!rc && (rc = push(sets, s)))
            set_free(s);
    }
    pthread_mutex_unlock(&sets->create_lock);
    if (!rc)
        *out = s;
    return rc;
}

int sl_sets_get(sl_sets *sets, const char *name, bool create, sl_set **out, sl_error *err)
{
    return get_or_create(sets, name, NULL, create && sets->opts.auto_create, out, err);
}

int sl_sets_define(sl_sets *sets, const char *name, const sl_set_config *cfg, sl_set **out,
                   sl_error *err)
{
    return get_or_create(sets, name, cfg, true, out, err);
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
        sl_log_retain(s->parts[p], now, NULL, NULL);
}

void sl_sets_retain(sl_sets *sets, int64_t now_ms)
{
    sl_sets_each(sets, retain_one, &now_ms);
}

void sl_sets_close(sl_sets *sets)
{
    if (!sets)
        return;
    for (size_t i = 0; i < sets->n; i++)
        set_free(sets->v[i]);
    free(sets->v);
    free(sets->root);
    pthread_rwlock_destroy(&sets->lock);
    pthread_mutex_destroy(&sets->create_lock);
    free(sets);
}
