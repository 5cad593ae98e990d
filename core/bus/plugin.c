/*
 * core/bus/plugin.c — loads connector plugins (core/bus/plugin.h; plugins/README.md
 * is the ABI for their authors).
 *
 * Each *.so of a plugin_dir is opened once per process (identified by its
 * realpath), with RTLD_NOW so that a missing symbol shows at load time and
 * RTLD_LOCAL so that two plugins cannot see each other's symbols. The ABI
 * symbol is read before anything of the plugin is called; then its register
 * function adds its tables through a registry that checks each one. Kinds
 * live in one global, append-only table guarded by a mutex; plugins are
 * never unloaded, so the tables they point to stay valid.
 */
#include "core/bus/plugin.h"

#include "core/base/buf.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define NAME_MAX_LEN 32
#define KEYS_MAX 64 /* the config loader tracks required keys in 64 slots */

/* One registered kind. */
typedef struct kind {
    bool target;
    const void *ops; /* sl_source_ops or sl_target_ops, the plugin's own table */
    const char *name;
    const char *file; /* the plugin's path (owned by its file entry) */
} kind;

/* One plugin file that was opened and whose register function ran. */
typedef struct file {
    char *path;  /* realpath */
    char *shown; /* the path it was found at, for messages */
    char *error; /* NULL: loaded; else the problem, reported again on later loads */
} file;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static kind *kinds;
static size_t nkinds;
static file *files;
static size_t nfiles;

/* Names no plugin may take: the built-in kinds of either family, as the
 * caller of sl_plugin_load_dir() knows them (the bus does not). Under mu. */
static sl_plugin_builtin_fn *builtin;

/* Keys every source block takes (server/config.c reads them itself). */
static const char *const common_source_keys[] = {"name", "set", "lane", "type", "source", "start"};

/* While a plugin's register function runs: where its kinds go. */
typedef struct loading {
    const char *path;
    sl_buf *diag; /* its own problems */
    size_t first; /* its first entry in kinds (they are dropped if register fails) */
} loading;

static bool valid_name(const char *s)
{
    size_t n = 0;
    if (!s)
        return false;
    for (; s[n]; n++)
        if (!((s[n] >= 'a' && s[n] <= 'z') || (s[n] >= '0' && s[n] <= '9') || s[n] == '_'))
            return false;
    return n >= 1 && n <= NAME_MAX_LEN;
}

static const kind *find_locked(const char *name, bool target)
{
    for (size_t i = 0; i < nkinds; i++)
        if (kinds[i].target == target && strcmp(kinds[i].name, name) == 0)
            return &kinds[i];
    return NULL;
}

/* Checks a key table; a sentence in why (cap bytes) when it is bad. */
static bool valid_keys(const sl_plugin_key *keys, size_t nkeys, bool source, char *why, size_t cap)
{
    if (nkeys && !keys) {
        snprintf(why, cap, "nkeys is %zu but keys is NULL", nkeys);
        return false;
    }
    if (nkeys > KEYS_MAX) {
        snprintf(why, cap, "%zu keys (at most %d)", nkeys, KEYS_MAX);
        return false;
    }
    for (size_t i = 0; i < nkeys; i++) {
        const sl_plugin_key *k = &keys[i];
        if (!valid_name(k->name)) {
            snprintf(why, cap, "key %zu: name \"%s\" is not [a-z0-9_]{1,%d}", i,
                     k->name ? k->name : "(null)", NAME_MAX_LEN);
            return false;
        }
        if ((unsigned)k->type > (unsigned)SL_PKEY_STRINGS) {
            snprintf(why, cap, "key \"%s\": unknown type %d", k->name, (int)k->type);
            return false;
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp(keys[j].name, k->name) == 0) {
                snprintf(why, cap, "key \"%s\" is declared twice", k->name);
                return false;
            }
        for (size_t j = 0; source && j < sizeof common_source_keys / sizeof *common_source_keys;
             j++)
            if (strcmp(common_source_keys[j], k->name) == 0) {
                snprintf(why, cap, "key \"%s\" is one every source takes (sluice reads it)",
                         k->name);
                return false;
            }
    }
    return true;
}

/* The checks add_source and add_target share; 0 or SL_EINVAL with a line
 * in the diagnostics. */
static int add_kind(loading *ld, bool target, uint32_t abi, const char *name, const void *ops,
                    const sl_plugin_key *keys, size_t nkeys, const char *missing)
{
    const char *family = target ? "target" : "source";
    char why[256] = "";
    if (!ops) {
        snprintf(why, sizeof why, "a NULL %s table", family);
    } else if (abi != SL_CONNECTOR_ABI_VERSION) {
        snprintf(why, sizeof why, "%s table \"%s\" has abi_version %u, this sluice speaks ABI %d",
                 family, valid_name(name) ? name : "?", (unsigned)abi, SL_CONNECTOR_ABI_VERSION);
    } else if (!valid_name(name)) {
        snprintf(why, sizeof why, "%s name \"%s\" is not [a-z0-9_]{1,%d}", family,
                 name ? name : "(null)", NAME_MAX_LEN);
    } else if (missing) {
        snprintf(why, sizeof why, "%s.%s has no %s callback", family, name, missing);
    } else if (!valid_keys(keys, nkeys, !target, why, sizeof why)) {
        char inner[256];
        snprintf(inner, sizeof inner, "%s", why);
        snprintf(why, sizeof why, "%s.%s: %s", family, name, inner);
    } else {
        if (builtin && builtin(name))
            snprintf(why, sizeof why, "%s.%s is a built-in kind", family, name);
    }
    if (!why[0]) {
        const kind *k = find_locked(name, target);
        if (k)
            snprintf(why, sizeof why, "%s.%s is already registered by %s", family, name,
                     strcmp(k->file, ld->path) == 0 ? "this plugin" : k->file);
    }
    if (!why[0]) {
        kind *grown = realloc(kinds, (nkinds + 1) * sizeof *grown);
        if (!grown)
            return SL_ENOMEM;
        kinds = grown;
        kinds[nkinds++] = (kind){target, ops, name, ld->path};
        return 0;
    }
    sl_buf_printf(ld->diag, "plugin %s: table refused: %s\n", ld->path, why);
    return SL_EINVAL;
}

/* The registry works only during the register call, on its thread. */
static _Thread_local loading *current;

static bool registering(void *ctx)
{
    return ctx && ctx == current;
}

/* A table's other fields are read only when its version says they exist. */
static int add_source(void *ctx, const sl_source_ops *ops)
{
    if (!registering(ctx))
        return SL_EINVAL;
    if (!ops || ops->abi_version != SL_CONNECTOR_ABI_VERSION)
        return add_kind(ctx, false, ops ? ops->abi_version : 0, ops ? ops->name : NULL, ops, NULL,
                        0, NULL);
    const char *missing = !ops->open ? "open" : !ops->stop ? "stop" : !ops->close ? "close" : NULL;
    return add_kind(ctx, false, ops->abi_version, ops->name, ops, ops->keys, ops->nkeys, missing);
}

static int add_target(void *ctx, const sl_target_ops *ops)
{
    if (!registering(ctx))
        return SL_EINVAL;
    if (!ops || ops->abi_version != SL_CONNECTOR_ABI_VERSION)
        return add_kind(ctx, true, ops ? ops->abi_version : 0, ops ? ops->name : NULL, ops, NULL, 0,
                        NULL);
    const char *missing = !ops->open      ? "open"
                          : !ops->deliver ? "deliver"
                          : !ops->close   ? "close"
                                          : NULL;
    return add_kind(ctx, true, ops->abi_version, ops->name, ops, ops->keys, ops->nkeys, missing);
}

/* Makes room for one more entry in files, before a register function runs
 * (so that a plugin whose code ran is always remembered). 0 or SL_ENOMEM. */
static int files_reserve(void)
{
    file *grown = realloc(files, (nfiles + 1) * sizeof *grown);
    if (!grown)
        return SL_ENOMEM;
    files = grown;
    return 0;
}

/* Loads one file (mu held). Returns 0, SL_EINVAL after a diag line, or
 * SL_ENOMEM. */
static int load_file(const char *shown, sl_buf *diag)
{
    char *path = realpath(shown, NULL);
    if (!path) {
        if (diag)
            sl_buf_printf(diag, "plugin %s: %s\n", shown, strerror(errno));
        return SL_EINVAL;
    }
    for (size_t i = 0; i < nfiles; i++)
        if (strcmp(files[i].path, path) == 0) {
            int rc = 0;
            if (files[i].error) {
                if (diag)
                    sl_buf_printf(diag, "%s", files[i].error);
                rc = SL_EINVAL;
            }
            free(path);
            return rc;
        }

    /* Until register is called the plugin can be closed again (and is
     * retried on the next load, so that a rebuilt file is picked up). */
    char msg[1024];
    char *shown_copy = strdup(shown);
    if (!shown_copy) {
        free(path);
        return SL_ENOMEM;
    }
    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(msg, sizeof msg, "plugin %s: cannot load it: %s\n", shown,
                 e ? e : "dlopen failed");
        goto refuse;
    }
    dlerror();
    const uint32_t *abi = dlsym(h, SL_PLUGIN_ABI_SYMBOL);
    if (!abi) {
        const char *e = dlerror();
        snprintf(msg, sizeof msg,
                 "plugin %s: no symbol %s (%s); is it a sluice plugin? (plugins/README.md)\n",
                 shown, SL_PLUGIN_ABI_SYMBOL, e ? e : "it is NULL");
        goto refuse;
    }
    if (*abi != SL_CONNECTOR_ABI_VERSION) {
        snprintf(msg, sizeof msg,
                 "plugin %s: built for sluice plugin ABI %u, this sluice speaks ABI %d; rebuild "
                 "it against this sluice's headers\n",
                 shown, (unsigned)*abi, SL_CONNECTOR_ABI_VERSION);
        goto refuse;
    }
    dlerror();
    /* POSIX guarantees that a data pointer from dlsym() converts to a
     * function pointer; the union says so without a cast warning. */
    union {
        void *p;
        sl_plugin_register_fn *fn;
    } reg = {.p = dlsym(h, SL_PLUGIN_REGISTER_SYMBOL)};
    if (!reg.p) {
        const char *e = dlerror();
        snprintf(msg, sizeof msg, "plugin %s: no symbol %s (%s); it cannot register its kinds\n",
                 shown, SL_PLUGIN_REGISTER_SYMBOL, e ? e : "it is NULL");
        goto refuse;
    }

    if (files_reserve()) {
        snprintf(msg, sizeof msg, "plugin %s: out of memory\n", shown);
        goto refuse;
    }
    sl_buf own = SL_BUF_INIT; /* this plugin's problems, given again on later loads */
    loading ld = {shown_copy, &own, nkinds};
    sl_plugin_registry r = {SL_CONNECTOR_ABI_VERSION, &ld, add_source, add_target};
    current = &ld;
    int rc = reg.fn(SL_CONNECTOR_ABI_VERSION, &r);
    current = NULL;
    if (rc) {
        /* Its kinds are dropped; the library stays (it may have started
         * something), and the same message is given on later loads. */
        nkinds = ld.first;
        sl_buf_printf(&own, "plugin %s: %s returned %d (%s); none of its kinds is used\n", shown,
                      SL_PLUGIN_REGISTER_SYMBOL, rc, sl_strerror(rc));
    } else if (nkinds == ld.first) {
        sl_buf_printf(&own, "plugin %s: registered no source or target kind\n", shown);
    }
    /* A plugin with problems keeps its good kinds, and the same lines are
     * given on every later load (a reload must not accept what the first
     * load refused). */
    char *e = NULL;
    if (own.len && (sl_buf_append(&own, "", 1) || !(e = strdup((const char *)own.data))))
        e = (char *)"plugin: out of memory\n"; /* never freed: files live until exit */
    sl_buf_free(&own);
    if (e && diag)
        sl_buf_printf(diag, "%s", e);
    files[nfiles++] = (file){path, shown_copy, e};
    return e ? SL_EINVAL : 0;

refuse:
    if (diag)
        sl_buf_printf(diag, "%s", msg);
    if (h)
        dlclose(h);
    free(shown_copy);
    free(path);
    return SL_EINVAL;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_plugin_name(const char *n)
{
    size_t len = strlen(n);
    return n[0] != '.' && len > 3 && strcmp(n + len - 3, ".so") == 0;
}

int sl_plugin_load_dir(const char *dir, sl_plugin_builtin_fn *is_builtin, sl_buf *diag)
{
    DIR *d = opendir(dir);
    if (!d) {
        if (diag)
            sl_buf_printf(diag, "plugin_dir %s: %s\n", dir, strerror(errno));
        return SL_EINVAL;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!is_plugin_name(e->d_name))
            continue;
        if (n == cap && sl_grow(&names, &cap, sizeof *names, 16)) {
            rc = SL_ENOMEM;
            break;
        }
        if (!(names[n] = strdup(e->d_name))) {
            rc = SL_ENOMEM;
            break;
        }
        n++;
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof *names, cmp_names);

    pthread_mutex_lock(&mu);
    builtin = is_builtin;
    for (size_t i = 0; rc != SL_ENOMEM && i < n; i++) {
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", dir, names[i]) >= (int)sizeof path) {
            if (diag)
                sl_buf_printf(diag, "plugin %s/%s: path too long\n", dir, names[i]);
            rc = SL_EINVAL;
            continue;
        }
        struct stat st;
        if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
            continue; /* a folder called x.so */
        int r = load_file(path, diag);
        if (r == SL_ENOMEM)
            rc = r;
        else if (r)
            rc = rc ? rc : r;
    }
    pthread_mutex_unlock(&mu);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    if (rc == SL_ENOMEM && diag)
        sl_buf_printf(diag, "plugin_dir %s: out of memory\n", dir);
    return rc;
}

/* Whether kind k came from a file directly in dir (the path it was found
 * at is "DIR/NAME.so"). */
static bool in_dir(const kind *k, const char *dir)
{
    size_t dl = dir ? strlen(dir) : 0;
    return dl && strncmp(k->file, dir, dl) == 0 && k->file[dl] == '/' &&
           !strchr(k->file + dl + 1, '/');
}

const sl_source_ops *sl_plugin_source(const char *name, const char *dir)
{
    pthread_mutex_lock(&mu);
    const kind *k = name ? find_locked(name, false) : NULL;
    if (k && !in_dir(k, dir))
        k = NULL;
    const sl_source_ops *ops = k ? k->ops : NULL;
    pthread_mutex_unlock(&mu);
    return ops;
}

const sl_target_ops *sl_plugin_target(const char *name, const char *dir)
{
    pthread_mutex_lock(&mu);
    const kind *k = name ? find_locked(name, true) : NULL;
    if (k && !in_dir(k, dir))
        k = NULL;
    const sl_target_ops *ops = k ? k->ops : NULL;
    pthread_mutex_unlock(&mu);
    return ops;
}

void sl_plugin_kinds(const char *dir, char *out, size_t cap)
{
    if (!cap)
        return;
    out[0] = '\0';
    size_t o = 0;
    pthread_mutex_lock(&mu);
    for (int target = 0; target < 2; target++)
        for (size_t i = 0; i < nkinds; i++) {
            if (kinds[i].target != (bool)target || !in_dir(&kinds[i], dir))
                continue;
            int w = snprintf(out + o, cap - o, "%s%s.%s", o ? ", " : "",
                             target ? "target" : "source", kinds[i].name);
            if (w < 0 || (size_t)w >= cap - o) {
                out[o] = '\0'; /* whole names only */
                goto done;
            }
            o += (size_t)w;
        }
done:
    pthread_mutex_unlock(&mu);
}
