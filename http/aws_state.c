/*
 * http/aws_state.c — the EventBridge API's durable state and the config
 * declarations it stands for (see http/aws.h).
 *
 * DATA/aws/state.json holds what the API was told, in the API's own words
 * (a rule as PutRule and PutTargets gave it, connections with their secrets:
 * the file is 0600, as AWS keeps them in Secrets Manager). From it come Lua
 * declarations in the config's vocabulary:
 *
 *   rule "orders" { set = "default", shape = "eventbridge", ordered = false,
 *                   match = "{…}", targets = { target.http { … } }, … }
 *
 * so the config loader checks them, the router runs them, and nothing in
 * the rule runner knows the API exists. A rule's targets share one rule
 * when they share Input, InputPath, InputTransformer, RetryPolicy and
 * DeadLetterConfig (what a sluice rule has once); targets that differ get a
 * rule each, NAME.TARGETID. A schedule rule also gets a schedule that puts
 * EventBridge's "Scheduled Event" on its bus, and the rule matches exactly
 * those (plus its EventPattern, if it has one).
 *
 * A change is made on a copy: applied (the server reloads with the new
 * declarations), then saved (write, fsync, rename, fsync the folder), then
 * put in force; a failure at any step leaves the old state running and
 * answered as it was.
 */
#include "http/aws_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- Lua text ---------------------------------------------------------------------- */

/* s as a Lua string literal: quotes, backslashes and every byte outside
 * printable ASCII escaped as \ddd, so no input can end the literal. */
static int lua_str(sl_buf *b, const char *s)
{
    int rc = sl_buf_append(b, "\"", 1);
    for (; !rc && s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\')
            rc = sl_buf_append(b, s, 1);
        else
            rc = sl_buf_printf(b, "\\%03u", ch);
    }
    return rc ? rc : sl_buf_append(b, "\"", 1);
}

json_t *sl__aws_section(json_t *st, const char *name)
{
    json_t *o = json_object_get(st, name);
    if (!json_is_object(o)) {
        o = json_object();
        json_object_set_new(st, name, o);
    }
    return o;
}

/* "arn:aws:events:R:A:api-destination/NAME[/…]" -> NAME into out. */
static bool arn_name(const char *arn, const char *kind, char *out, size_t cap)
{
    char k[64];
    snprintf(k, sizeof k, ":%s/", kind);
    const char *p = arn && strncmp(arn, "arn:aws:events:", 15) == 0 ? strstr(arn, k) : NULL;
    if (!p)
        return false;
    p += strlen(k);
    size_t n = strcspn(p, "/");
    if (!n || n >= cap)
        return false;
    memcpy(out, p, n);
    out[n] = '\0';
    return true;
}

/* target.http of an API destination (and its connection's auth). */
static int http_target(const json_t *st, const char *dest, sl_buf *b)
{
    const json_t *d = json_object_get(json_object_get(st, "destinations"), dest);
    char cname[256] = "";
    arn_name(sl__aws_str(d, "ConnectionArn"), "connection", cname, sizeof cname);
    const json_t *conn = json_object_get(json_object_get(st, "connections"), cname);
    const json_t *auth = json_object_get(conn, "AuthParameters");
    const char *type = sl__aws_str(conn, "AuthorizationType");
    int rc = sl_buf_printf(b, "target.http { url = ");
    rc = rc ? rc : lua_str(b, sl__aws_str(d, "InvocationEndpoint"));
    rc = rc ? rc : sl_buf_printf(b, ", method = ");
    rc = rc ? rc : lua_str(b, sl__aws_str(d, "HttpMethod") ? sl__aws_str(d, "HttpMethod") : "POST");
    rc = rc ? rc : sl_buf_printf(b, ", body = \"data\"");
    json_int_t rate = json_integer_value(json_object_get(d, "InvocationRateLimitPerSecond"));
    if (!rc && rate > 0)
        rc = sl_buf_printf(b, ", rate = %lld", (long long)rate);
    /* The connection's invocation header parameters, then its auth. */
    const json_t *hp = json_object_get(json_object_get(auth, "InvocationHttpParameters"),
                                       "HeaderParameters");
    if (!rc && json_array_size(hp)) {
        rc = sl_buf_printf(b, ", headers = {");
        size_t i;
        const json_t *h;
        json_array_foreach(hp, i, h)
        {
            rc = rc ? rc : sl_buf_printf(b, " [");
            rc = rc ? rc : lua_str(b, sl__aws_str(h, "Key"));
            rc = rc ? rc : sl_buf_printf(b, "] = ");
            rc = rc ? rc : lua_str(b, sl__aws_str(h, "Value"));
            rc = rc ? rc : sl_buf_printf(b, ",");
        }
        rc = rc ? rc : sl_buf_printf(b, " }");
    }
    if (!rc && type && strcmp(type, "API_KEY") == 0) {
        const json_t *k = json_object_get(auth, "ApiKeyAuthParameters");
        rc = sl_buf_printf(b, ", auth = { api_key = { header = ");
        rc = rc ? rc : lua_str(b, sl__aws_str(k, "ApiKeyName"));
        rc = rc ? rc : sl_buf_printf(b, ", value = ");
        rc = rc ? rc : lua_str(b, sl__aws_str(k, "ApiKeyValue"));
        rc = rc ? rc : sl_buf_printf(b, " } }");
    } else if (!rc && type && strcmp(type, "BASIC") == 0) {
        const json_t *k = json_object_get(auth, "BasicAuthParameters");
        rc = sl_buf_printf(b, ", auth = { basic = { user = ");
        rc = rc ? rc : lua_str(b, sl__aws_str(k, "Username"));
        rc = rc ? rc : sl_buf_printf(b, ", password = ");
        rc = rc ? rc : lua_str(b, sl__aws_str(k, "Password"));
        rc = rc ? rc : sl_buf_printf(b, " } }");
    } else if (!rc && type && strcmp(type, "OAUTH_CLIENT_CREDENTIALS") == 0) {
        const json_t *k = json_object_get(auth, "OAuthParameters");
        const json_t *cp = json_object_get(k, "ClientParameters");
        rc = sl_buf_printf(b, ", auth = { oauth = { token_url = ");
        rc = rc ? rc : lua_str(b, sl__aws_str(k, "AuthorizationEndpoint"));
        rc = rc ? rc : sl_buf_printf(b, ", client_id = ");
        rc = rc ? rc : lua_str(b, sl__aws_str(cp, "ClientID"));
        rc = rc ? rc : sl_buf_printf(b, ", client_secret = ");
        rc = rc ? rc : lua_str(b, sl__aws_str(cp, "ClientSecret"));
        rc = rc ? rc : sl_buf_printf(b, ", method = ");
        rc = rc ? rc : lua_str(b, sl__aws_str(k, "HttpMethod") ? sl__aws_str(k, "HttpMethod") : "POST");
        /* OAuthHttpParameters.BodyParameters go with the token request. */
        const json_t *bp = json_object_get(json_object_get(k, "OAuthHttpParameters"),
                                           "BodyParameters");
        if (!rc && json_array_size(bp)) {
            sl_buf form = SL_BUF_INIT;
            size_t i;
            const json_t *p;
            json_array_foreach(bp, i, p)
            {
                for (int part = 0; part < 2 && !rc; part++) {
                    const char *v = sl__aws_str(p, part ? "Value" : "Key");
                    rc = sl_buf_printf(&form, "%s", part ? "=" : form.len ? "&" : "");
                    for (const char *q = v ? v : ""; !rc && *q; q++) {
                        unsigned char ch = (unsigned char)*q;
                        rc = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                                     (ch >= '0' && ch <= '9') || strchr("-_.~", ch)
                                 ? sl_buf_append(&form, q, 1)
                                 : sl_buf_printf(&form, "%%%02X", ch);
                    }
                }
            }
            rc = rc ? rc : sl_buf_append(&form, "", 1);
            rc = rc ? rc : sl_buf_printf(b, ", params = ");
            rc = rc ? rc : lua_str(b, (const char *)form.data);
            sl_buf_free(&form);
        }
        rc = rc ? rc : sl_buf_printf(b, " } }");
    }
    return rc ? rc : sl_buf_printf(b, " }");
}

/* One target of a rule, as a target.KIND value (the ARN was checked by
 * PutTargets: sl__aws_target_kind()). */
static int target_lua(const json_t *st, const json_t *t, sl_buf *b)
{
    const char *arn = sl__aws_str(t, "Arn");
    char name[1024];
    if (arn_name(arn, "api-destination", name, sizeof name))
        return http_target(st, name, b);
    if (arn_name(arn, "event-bus", name, sizeof name)) {
        int rc = sl_buf_printf(b, "target.set { set = ");
        rc = rc ? rc : lua_str(b, name);
        return rc ? rc : sl_buf_printf(b, ", shape = \"eventbridge\" }");
    }
    if (arn && strncmp(arn, "arn:sluice:file:::", 18) == 0) {
        int rc = sl_buf_printf(b, "target.file { path = ");
        rc = rc ? rc : lua_str(b, arn + 18);
        return rc ? rc : sl_buf_printf(b, " }");
    }
    if (arn && strncmp(arn, "arn:sluice:kafka:::", 19) == 0) {
        const char *rest = arn + 19, *slash = strrchr(rest, '/');
        char brokers[1024];
        snprintf(brokers, sizeof brokers, "%.*s", slash ? (int)(slash - rest) : 0, rest);
        int rc = sl_buf_printf(b, "target.kafka { brokers = ");
        rc = rc ? rc : lua_str(b, brokers);
        rc = rc ? rc : sl_buf_printf(b, ", topic = ");
        rc = rc ? rc : lua_str(b, slash ? slash + 1 : "");
        return rc ? rc : sl_buf_printf(b, ", body = \"data\" }");
    }
    return SL_EINVAL; /* PutTargets refuses every other ARN */
}

/* What the targets of one sluice rule share. */
static char *settings_of(const json_t *t)
{
    json_t *k = json_object();
    const char *keys[] = {"Input", "InputPath", "InputTransformer", "RetryPolicy",
                          "DeadLetterConfig"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (json_object_get(t, keys[i]))
            json_object_set(k, keys[i], json_object_get(t, keys[i]));
    char *s = json_dumps(k, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(k);
    return s;
}

/* input, retry and dlq of a group of targets (those of t). */
static int settings_lua(const json_t *t, sl_buf *b)
{
    int rc = 0;
    const char *input = sl__aws_str(t, "Input"), *path = sl__aws_str(t, "InputPath");
    const json_t *tr = json_object_get(t, "InputTransformer");
    if (input) {
        rc = sl_buf_printf(b, "  input = { template = ");
        rc = rc ? rc : lua_str(b, input);
        rc = rc ? rc : sl_buf_printf(b, " },\n");
    } else if (path) {
        rc = sl_buf_printf(b, "  input = ");
        rc = rc ? rc : lua_str(b, path);
        rc = rc ? rc : sl_buf_printf(b, ",\n");
    } else if (tr) {
        rc = sl_buf_printf(b, "  input = { paths = {");
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)json_object_get(tr, "InputPathsMap"), k, v)
        {
            rc = rc ? rc : sl_buf_printf(b, " [");
            rc = rc ? rc : lua_str(b, k);
            rc = rc ? rc : sl_buf_printf(b, "] = ");
            rc = rc ? rc : lua_str(b, json_string_value(v));
            rc = rc ? rc : sl_buf_printf(b, ",");
        }
        rc = rc ? rc : sl_buf_printf(b, " }, template = ");
        rc = rc ? rc : lua_str(b, sl__aws_str(tr, "InputTemplate"));
        rc = rc ? rc : sl_buf_printf(b, " },\n");
    }
    const json_t *rp = json_object_get(t, "RetryPolicy");
    if (!rc && rp) {
        /* EventBridge counts retries; sluice counts deliveries. */
        const json_t *n = json_object_get(rp, "MaximumRetryAttempts");
        const json_t *age = json_object_get(rp, "MaximumEventAgeInSeconds");
        rc = sl_buf_printf(b, "  retry = {");
        if (!rc && json_is_integer(n))
            rc = sl_buf_printf(b, " attempts = %lld,", (long long)json_integer_value(n) + 1);
        if (!rc && json_is_integer(age))
            rc = sl_buf_printf(b, " max_age = \"%llds\",", (long long)json_integer_value(age));
        rc = rc ? rc : sl_buf_printf(b, " },\n");
    }
    char dlq[256];
    if (!rc &&
        arn_name(sl__aws_str(json_object_get(t, "DeadLetterConfig"), "Arn"), "event-bus", dlq,
                 sizeof dlq)) {
        rc = sl_buf_printf(b, "  dlq = ");
        rc = rc ? rc : lua_str(b, dlq);
        rc = rc ? rc : sl_buf_printf(b, ",\n");
    }
    return rc;
}

/* The pattern a rule runs: its EventPattern, its schedule's events, or
 * either. */
static char *match_of(const sl_aws *a, const char *name, const json_t *rule)
{
    const char *pat = sl__aws_str(rule, "EventPattern");
    if (!sl__aws_str(rule, "ScheduleExpression"))
        return pat ? strdup(pat) : NULL;
    char arn[512];
    sl__aws_arn(a, "rule", name, arn, sizeof arn);
    json_t *sched = json_pack("{s:[s],s:[s],s:[s]}", "source", "aws.events", "detail-type",
                              "Scheduled Event", "resources", arn);
    json_t *m = sched;
    json_t *p = pat ? json_loads(pat, 0, NULL) : NULL;
    if (p)
        m = json_pack("{s:[o,o]}", "$or", p, sched);
    char *s = json_dumps(m, JSON_COMPACT);
    json_decref(m);
    return s;
}

/* schedule "aws.NAME" { … }: the Scheduled Event of a schedule rule. */
static int schedule_lua(const sl_aws *a, const char *name, const json_t *rule, sl_buf *b)
{
    const char *e = sl__aws_str(rule, "ScheduleExpression");
    bool cron = strncmp(e, "cron(", 5) == 0;
    char expr[512];
    size_t n = strlen(e);
    /* "cron(…)" and "rate(…)": five bytes before, one after */
    snprintf(expr, sizeof expr, "%.*s", n > 6 ? (int)(n - 6) : 0, e + 5);
    char arn[512];
    sl__aws_arn(a, "rule", name, arn, sizeof arn);
    json_t *res = json_pack("[s]", arn);
    char *rtxt = json_dumps(res, JSON_COMPACT);
    json_decref(res);
    int rc = sl_buf_printf(b, "schedule \"aws.%s\" { %s = ", name, cron ? "cron" : "rate");
    rc = rc ? rc : lua_str(b, expr);
    rc = rc ? rc : sl_buf_printf(b, ", set = ");
    rc = rc ? rc : lua_str(b, sl__aws_str(rule, "EventBusName"));
    rc = rc ? rc
            : sl_buf_printf(b, ", enabled = %s, event = { type = \"Scheduled Event\", source = "
                               "\"aws.events\", awsresources = ",
                            strcmp(sl__aws_str(rule, "State") ? sl__aws_str(rule, "State") : "",
                                   "DISABLED")
                                ? "true"
                                : "false");
    rc = rc ? rc : lua_str(b, rtxt ? rtxt : "[]");
    rc = rc ? rc : sl_buf_printf(b, ", data = {} } }\n");
    free(rtxt);
    return rc;
}

/* One sluice rule: rname over targets[from..] with settings key key. */
static int rule_lua(const sl_aws *a, const json_t *st, const char *name, const char *rname,
                    const json_t *rule, const json_t *targets, const char *key, sl_buf *b)
{
    char *match = match_of(a, name, rule);
    bool enabled = !sl__aws_str(rule, "State") || strcmp(sl__aws_str(rule, "State"), "DISABLED");
    int rc = sl_buf_printf(b, "rule ");
    rc = rc ? rc : lua_str(b, rname);
    rc = rc ? rc : sl_buf_printf(b, " {\n  set = ");
    rc = rc ? rc : lua_str(b, sl__aws_str(rule, "EventBusName"));
    rc = rc ? rc
            : sl_buf_printf(b, ", shape = \"eventbridge\", ordered = false, enabled = %s,\n",
                            enabled ? "true" : "false");
    if (!rc && sl__aws_str(rule, "Description")) {
        rc = sl_buf_printf(b, "  description = ");
        rc = rc ? rc : lua_str(b, sl__aws_str(rule, "Description"));
        rc = rc ? rc : sl_buf_printf(b, ",\n");
    }
    if (!rc && match) {
        rc = sl_buf_printf(b, "  match = ");
        rc = rc ? rc : lua_str(b, match);
        rc = rc ? rc : sl_buf_printf(b, ",\n");
    }
    free(match);
    rc = rc ? rc : sl_buf_printf(b, "  targets = {\n");
    size_t i;
    const json_t *t, *first = NULL;
    json_array_foreach(targets, i, t)
    {
        char *k = settings_of(t);
        bool mine = k && strcmp(k, key) == 0;
        free(k);
        if (!mine)
            continue;
        first = first ? first : t;
        rc = rc ? rc : sl_buf_printf(b, "    ");
        rc = rc ? rc : target_lua(st, t, b);
        rc = rc ? rc : sl_buf_printf(b, ",\n");
    }
    rc = rc ? rc : sl_buf_printf(b, "  },\n");
    rc = rc || !first ? rc : settings_lua(first, b);
    return rc ? rc : sl_buf_printf(b, "}\n");
}

int sl__aws_state_lua(const sl_aws *a, const json_t *st, sl_buf *out)
{
    int rc = sl_buf_printf(out, "-- made by the EventBridge API from %s; do not edit\n",
                           a->state_path);
    /* Buses the rules name that the file does not declare (the sets exist:
     * CreateEventBus or PutEvents made them). */
    json_t *seen = json_object();
    const char *name;
    const json_t *rule;
    json_object_foreach((json_t *)json_object_get(st, "rules"), name, rule)
    {
        const char *bus = sl__aws_str(rule, "EventBusName");
        const json_t *targets = json_object_get(rule, "Targets");
        size_t i;
        const json_t *t;
        char ref[256];
        json_array_foreach(targets, i, t)
        {
            const char *arns[2] = {sl__aws_str(t, "Arn"),
                                   sl__aws_str(json_object_get(t, "DeadLetterConfig"), "Arn")};
            for (int k = 0; k < 2; k++)
                if (arn_name(arns[k], "event-bus", ref, sizeof ref))
                    json_object_set_new(seen, ref, json_true());
        }
        if (bus && (json_array_size(targets) || sl__aws_str(rule, "ScheduleExpression")))
            json_object_set_new(seen, bus, json_true());
    }
    const json_t *v;
    json_object_foreach(seen, name, v)
    {
        if (rc || (a->file_set && a->file_set(a->ctx, name)))
            continue;
        rc = sl_buf_printf(out, "set ");
        rc = rc ? rc : lua_str(out, name);
        rc = rc ? rc : sl_buf_printf(out, " {}\n");
    }
    json_decref(seen);
    json_object_foreach((json_t *)json_object_get(st, "rules"), name, rule)
    {
        if (rc)
            break;
        if (sl__aws_str(rule, "ScheduleExpression"))
            rc = schedule_lua(a, name, rule, out);
        /* One sluice rule per group of targets with the same settings; the
         * first group keeps the rule's name. A rule without targets
         * delivers nothing and has no sluice rule. */
        const json_t *targets = json_object_get(rule, "Targets");
        json_t *keys = json_array();
        size_t i;
        const json_t *t;
        json_array_foreach(targets, i, t)
        {
            char *k = settings_of(t);
            bool known = false;
            size_t j;
            const json_t *kv;
            json_array_foreach(keys, j, kv) known |= k && strcmp(json_string_value(kv), k) == 0;
            if (k && !known) {
                char rname[512];
                if (json_array_size(keys))
                    snprintf(rname, sizeof rname, "%s.%s", name, sl__aws_str(t, "Id"));
                else
                    snprintf(rname, sizeof rname, "%s", name);
                json_array_append_new(keys, json_string(k));
                rc = rc ? rc : rule_lua(a, st, name, rname, rule, targets, k, out);
            }
            free(k);
        }
        json_decref(keys);
    }
    return rc;
}

int sl_aws_lua(sl_aws *a, sl_buf *out)
{
    pthread_mutex_lock(&a->lock);
    int rc = json_object_size(json_object_get(a->state, "rules")) ? sl__aws_state_lua(a, a->state, out)
                                                                   : 0;
    pthread_mutex_unlock(&a->lock);
    return rc;
}

const char *sl_aws_lua_name(const sl_aws *a)
{
    return a->lua_name;
}

size_t sl_aws_creds(const sl_aws *a)
{
    return a ? a->ncreds : 0;
}

/* ---- the file ------------------------------------------------------------------------ */

static int save(sl_aws *a, const json_t *st, sl_error *err)
{
    if (mkdir(a->dir, 0700) < 0 && errno != EEXIST)
        return sl_error_set(err, SL_EIO, "%s: %s", a->dir, strerror(errno));
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", a->state_path);
    char *s = json_dumps(st, JSON_INDENT(1) | JSON_SORT_KEYS);
    if (!s)
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    size_t n = strlen(s);
    bool ok = fd >= 0 && write(fd, s, n) == (ssize_t)n && fsync(fd) == 0;
    int e = errno;
    if (fd >= 0)
        close(fd);
    free(s);
    if (!ok || rename(tmp, a->state_path) < 0) {
        e = ok ? errno : e;
        unlink(tmp);
        return sl_error_set(err, SL_EIO, "cannot save %s: %s", a->state_path, strerror(e));
    }
    int dfd = open(a->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

json_t *sl__aws_begin(sl_aws *a)
{
    pthread_mutex_lock(&a->lock);
    return json_deep_copy(a->state);
}

int sl__aws_commit(sl_aws *a, json_t *next, sl_error *err)
{
    if (!next)
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    sl_buf lua = SL_BUF_INIT;
    int rc = sl__aws_state_lua(a, next, &lua);
    if (rc)
        sl_error_set(err, rc, "out of memory");
    bool rules_changed = true;
    if (!rc) {
        sl_buf old = SL_BUF_INIT;
        rc = sl__aws_state_lua(a, a->state, &old);
        rules_changed = rc || old.len != lua.len || memcmp(old.data, lua.data, lua.len);
        sl_buf_free(&old);
        rc = 0;
    }
    if (!rc && rules_changed && !a->apply)
        rc = sl_error_set(err, SL_EUNSUPPORTED,
                          "sluice runs without a config file (-c FILE): rules made through the "
                          "EventBridge API need one to join (an empty file will do)");
    if (!rc && rules_changed)
        rc = a->apply(a->ctx, (const char *)lua.data, lua.len, err);
    if (!rc && (rc = save(a, next, err)) && rules_changed) {
        /* Saving failed: the running config goes back to the state in force. */
        sl_buf old = SL_BUF_INIT;
        sl_error e2 = {0};
        if (!sl__aws_state_lua(a, a->state, &old))
            a->apply(a->ctx, (const char *)old.data, old.len, &e2);
        sl_buf_free(&old);
    }
    sl_buf_free(&lua);
    if (!rc) {
        json_decref(a->state);
        a->state = json_incref(next);
    }
    return rc;
}

void sl__aws_end(sl_aws *a, json_t *next)
{
    json_decref(next);
    pthread_mutex_unlock(&a->lock);
}

/* ---- life -------------------------------------------------------------------------------- */

int sl_aws_open(const sl_aws_options *o, sl_aws **out, sl_error *err)
{
    sl_aws *a = calloc(1, sizeof *a);
    if (!a)
        return sl_error_set(err, SL_ENOMEM, "out of memory");
    pthread_mutex_init(&a->lock, NULL);
    snprintf(a->region, sizeof a->region, "%s", o->region ? o->region : "us-east-1");
    snprintf(a->account, sizeof a->account, "%s", o->account ? o->account : "000000000000");
    size_t dl = strlen(o->data_dir) + 32;
    a->dir = malloc(dl);
    a->state_path = malloc(dl);
    a->lua_name = malloc(dl);
    a->creds = o->ncreds ? calloc(o->ncreds, sizeof *a->creds) : NULL;
    int rc = a->dir && a->state_path && a->lua_name && (!o->ncreds || a->creds) ? 0 : SL_ENOMEM;
    for (size_t i = 0; !rc && i < o->ncreds; i++) {
        sl_aws_cred *c = &a->creds[a->ncreds++];
        *c = (sl_aws_cred){.admin = o->creds[i].admin};
        c->akid = strdup(o->creds[i].akid);
        c->secret = strdup(o->creds[i].secret);
        c->publish = calloc(o->creds[i].npublish + 1, sizeof *c->publish);
        c->read = calloc(o->creds[i].nread + 1, sizeof *c->read);
        rc = c->akid && c->secret && c->publish && c->read ? 0 : SL_ENOMEM;
        for (size_t k = 0; !rc && k < o->creds[i].npublish; k++)
            rc = (c->publish[c->npublish++] = strdup(o->creds[i].publish[k])) ? 0 : SL_ENOMEM;
        for (size_t k = 0; !rc && k < o->creds[i].nread; k++)
            rc = (c->read[c->nread++] = strdup(o->creds[i].read[k])) ? 0 : SL_ENOMEM;
    }
    if (rc) {
        sl_aws_free(a);
        return sl_error_set(err, rc, "out of memory");
    }
    snprintf(a->dir, dl, "%s/aws", o->data_dir);
    snprintf(a->state_path, dl, "%s/aws/state.json", o->data_dir);
    snprintf(a->lua_name, dl, "%s/aws/rules.lua", o->data_dir);
    sl_aws_set_hooks(a, o->apply, o->file_rule, o->file_set, o->ctx);
    json_error_t je;
    if (access(a->state_path, F_OK) == 0) {
        a->state = json_load_file(a->state_path, JSON_REJECT_DUPLICATES, &je);
        if (!json_is_object(a->state)) {
            sl_error_set(err, SL_EINVAL, "%s: %s (line %d)", a->state_path, je.text, je.line);
            sl_aws_free(a);
            return SL_EINVAL;
        }
    } else {
        a->state = json_object();
    }
    *out = a;
    return 0;
}

void sl_aws_set_hooks(sl_aws *a, int (*apply)(void *, const char *, size_t, sl_error *),
                      bool (*file_rule)(void *, const char *),
                      bool (*file_set)(void *, const char *), void *ctx)
{
    pthread_mutex_lock(&a->lock);
    a->apply = apply;
    a->file_rule = file_rule;
    a->file_set = file_set;
    a->ctx = ctx;
    pthread_mutex_unlock(&a->lock);
}

void sl_aws_free(sl_aws *a)
{
    if (!a)
        return;
    for (size_t i = 0; i < a->ncreds; i++) {
        sl_aws_cred *c = &a->creds[i];
        free((char *)c->akid);
        free((char *)c->secret);
        for (size_t k = 0; k < c->npublish; k++)
            free(c->publish[k]);
        for (size_t k = 0; k < c->nread; k++)
            free(c->read[k]);
        free(c->publish);
        free(c->read);
    }
    free(a->creds);
    free(a->dir);
    free(a->state_path);
    free(a->lua_name);
    json_decref(a->state);
    pthread_mutex_destroy(&a->lock);
    free(a);
}
