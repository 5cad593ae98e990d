/*
 * http/aws_events.c — TestEventPattern and the buses (event sets) of the
 * EventBridge API (PutEvents is http/aws_put.c).
 */
#include "http/aws_internal.h"

#include "core/base/json.h"
#include "rules/pattern.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- TestEventPattern ----------------------------------------------------------------- */

/* A string member of a validated object, decoded into out (NUL-terminated);
 * false when absent or not a string. */
static bool text_member(const sl_json_tok *obj, const char *key, sl_buf *out)
{
    sl_json_tok v;
    size_t n = 0;
    if (!sl_json_get(obj, key, &v) || v.type != SL_JSON_STRING || sl_buf_reserve(out, v.len + 1) ||
        sl_json_unescape(&v, (char *)out->data, v.len, &n))
        return false;
    out->data[n] = '\0';
    out->len = n;
    return true;
}

enum MHD_Result sl__aws_test_event_pattern(aws_call *c)
{
    /* Read with the JSON scanner, as PutEvents is: a call is two texts. */
    sl_http_req *r = c->r;
    sl_json_tok root, evt;
    sl_error err = {0};
    if (sl_json_validate(r->body.data ? (const char *)r->body.data : "{}",
                         r->body.len ? r->body.len : 2, 16, &root, &err) ||
        root.type != SL_JSON_OBJECT)
        return sl__aws_error(c, 400, "SerializationException",
                             "the request body is not a JSON object: %s", err.msg);
    sl_buf pat = SL_BUF_INIT, ev = SL_BUF_INIT;
    enum MHD_Result ret;
    if (!text_member(&root, "EventPattern", &pat) || !text_member(&root, "Event", &ev)) {
        ret = sl__aws_error(c, 400, "ValidationException",
                            "TestEventPattern needs EventPattern and Event (JSON texts)");
        goto out;
    }
    /* EventBridge checks the event has its shape's required fields; a
     * repeated member is the event's business (the engine takes the first,
     * as rules do). */
    if (sl_json_validate((const char *)ev.data, ev.len, SL_JSON_DEPTH_LIMIT, &evt, &err)) {
        ret = sl__aws_error(c, 400, "ValidationException",
                            "Parameter Event is not valid: not JSON: %s", err.msg);
        goto out;
    }
    if (evt.type != SL_JSON_OBJECT) {
        ret = sl__aws_error(c, 400, "ValidationException",
                            "Parameter Event is not valid: not a JSON object.");
        goto out;
    }
    static const char *const required[] = {"id", "account", "source", "time", "region",
                                           "detail-type"};
    for (size_t i = 0; i < sizeof required / sizeof *required; i++) {
        sl_json_tok v;
        if (!sl_json_get(&evt, required[i], &v)) {
            ret = sl__aws_error(c, 400, "ValidationException",
                                "Parameter Event is not valid. Reason: Provided Event must have "
                                "mandatory field %s.",
                                required[i]);
            goto out;
        }
    }
    sl_pattern *cp = NULL;
    if (sl_pattern_compile((const char *)pat.data, pat.len, &cp, &err)) {
        ret = sl__aws_error(c, 400, "InvalidEventPatternException",
                            "Event pattern is not valid. Reason: %s", err.msg);
        goto out;
    }
    bool matched = false;
    int rc = sl_pattern_match(cp, (const char *)ev.data, ev.len, &matched, &err);
    sl_pattern_free(cp);
    if (rc) {
        ret = sl__aws_error(c, 400, "ValidationException", "Parameter Event is not valid: %s",
                            err.msg);
        goto out;
    }
    sl_buf b = SL_BUF_INIT;
    sl_buf_printf(&b, "{\"Result\":%s}", matched ? "true" : "false");
    const char *hdrs[] = {"x-amzn-RequestId", r->request_id, NULL};
    ret = sl__http_reply_hdrs(r, 200, &b, AWS_JSON, hdrs);
out:
    sl_buf_free(&pat);
    sl_buf_free(&ev);
    return ret;
}

/* ---- buses ---------------------------------------------------------------------------- */

static json_t *bus_json(const sl_aws *a, const char *name)
{
    char arn[512];
    sl__aws_arn(a, "event-bus", name, arn, sizeof arn);
    return json_pack("{s:s,s:s}", "Name", name, "Arn", arn);
}

enum MHD_Result sl__aws_create_bus(aws_call *c)
{
    char name[SL_SET_NAME_MAX + 1];
    enum MHD_Result ret;
    const json_t *nv = json_object_get(c->in, "Name");
    if (!json_is_string(nv))
        return sl__aws_error(c, 400, "ValidationException", "CreateEventBus needs a Name");
    if (!sl__aws_bus(c, (json_t *)nv, name, sizeof name, &ret))
        return ret;
    if (!sl__aws_allowed(c, AWS_ADMIN, name))
        return sl__aws_error(c, 400, "AccessDeniedException",
                             "credential %s may not create buses", c->cred->akid);
    sl_set *set = NULL;
    sl_error err = {0};
    if (sl_sets_get(c->r->h->sets, name, false, &set, &err) == 0)
        return sl__aws_error(c, 400, "ResourceAlreadyExistsException",
                             "Event bus %s already exists.", name);
    int rc = sl_sets_declare(c->r->h->sets, name, &set, &err);
    if (rc)
        return sl__aws_error(c, 500, "InternalException", "cannot create bus %s: %s", name,
                             err.msg);
    char arn[512];
    sl__aws_arn(c->a, "event-bus", name, arn, sizeof arn);
    return sl__aws_reply(c, json_pack("{s:s}", "EventBusArn", arn));
}

enum MHD_Result sl__aws_describe_bus(aws_call *c)
{
    char name[SL_SET_NAME_MAX + 1];
    enum MHD_Result ret;
    if (!sl__aws_bus(c, json_object_get(c->in, "Name"), name, sizeof name, &ret))
        return ret;
    if (!sl__aws_allowed(c, AWS_SEE, name))
        return sl__aws_error(c, 400, "AccessDeniedException", "credential %s may not read bus %s",
                             c->cred->akid, name);
    sl_set *set = NULL;
    sl_error err = {0};
    if (sl_sets_get(c->r->h->sets, name, false, &set, &err))
        return sl__aws_error(c, 400, "ResourceNotFoundException", "Event bus %s does not exist.",
                             name);
    return sl__aws_reply(c, bus_json(c->a, name));
}

typedef struct bus_list {
    const aws_call *c;
    json_t *names;
    const char *prefix;
} bus_list;

static void add_bus(sl_set *set, void *ctx)
{
    bus_list *l = ctx;
    if ((!l->prefix || strncmp(set->name, l->prefix, strlen(l->prefix)) == 0) &&
        sl__aws_allowed(l->c, AWS_SEE, set->name))
        json_array_append_new(l->names, json_string(set->name));
}

static int cmp_str(const void *x, const void *y)
{
    return strcmp(json_string_value(*(json_t *const *)x), json_string_value(*(json_t *const *)y));
}

/* A page of names (sorted), from NextToken (the last name given) on, at
 * most Limit (default 100): out gets the page's names, *next the token. */
json_t *sl__aws_page(aws_call *c, json_t *names, const char **next_out, char *next, size_t cap)
{
    size_t n = json_array_size(names);
    json_t **v = calloc(n + 1, sizeof *v);
    for (size_t i = 0; v && i < n; i++)
        v[i] = json_array_get(names, i);
    if (v)
        qsort(v, n, sizeof *v, cmp_str);
    const char *from = sl__aws_str(c->in, "NextToken");
    json_int_t limit = json_integer_value(json_object_get(c->in, "Limit"));
    if (limit <= 0 || limit > 100)
        limit = 100;
    json_t *page = json_array();
    *next_out = NULL;
    for (size_t i = 0; v && i < n; i++) {
        const char *s = json_string_value(v[i]);
        if (from && strcmp(s, from) <= 0)
            continue;
        if ((json_int_t)json_array_size(page) == limit) {
            snprintf(next, cap, "%s", json_string_value(json_array_get(page, (size_t)limit - 1)));
            *next_out = next;
            break;
        }
        json_array_append(page, v[i]);
    }
    free(v);
    return page;
}

enum MHD_Result sl__aws_list_buses(aws_call *c)
{
    bus_list l = {c, json_array(), sl__aws_str(c->in, "NamePrefix")};
    sl_sets_each(c->r->h->sets, add_bus, &l);
    /* default is there before anything was put on it. */
    bool has_default = false;
    size_t i;
    json_t *v;
    json_array_foreach(l.names, i, v) has_default |= strcmp(json_string_value(v), "default") == 0;
    if (!has_default && (!l.prefix || strncmp("default", l.prefix, strlen(l.prefix)) == 0) &&
        sl__aws_allowed(c, AWS_SEE, "default"))
        json_array_append_new(l.names, json_string("default"));
    char next[SL_SET_NAME_MAX + 1];
    const char *tok;
    json_t *page = sl__aws_page(c, l.names, &tok, next, sizeof next);
    json_decref(l.names);
    json_t *buses = json_array();
    json_array_foreach(page, i, v) json_array_append_new(buses, bus_json(c->a, json_string_value(v)));
    json_decref(page);
    json_t *o = json_pack("{s:o}", "EventBuses", buses);
    if (tok)
        json_object_set_new(o, "NextToken", json_string(tok));
    return sl__aws_reply(c, o);
}

enum MHD_Result sl__aws_delete_bus(aws_call *c)
{
    char name[SL_SET_NAME_MAX + 1];
    enum MHD_Result ret;
    if (!sl__aws_bus(c, json_object_get(c->in, "Name"), name, sizeof name, &ret))
        return ret;
    if (!sl__aws_allowed(c, AWS_ADMIN, name))
        return sl__aws_error(c, 400, "AccessDeniedException",
                             "credential %s may not delete buses", c->cred->akid);
    if (strcmp(name, "default") == 0)
        return sl__aws_error(c, 400, "ValidationException", "Cannot delete event bus default.");
    sl_set *set = NULL;
    sl_error err = {0};
    if (sl_sets_get(c->r->h->sets, name, false, &set, &err))
        return sl__aws_reply(c, json_object()); /* AWS: deleting a missing bus succeeds */
    const sl_http_hooks *hk = &c->r->h->hooks;
    if (hk->may_delete && hk->may_delete(hk->ctx, set, &err))
        return sl__aws_error(c, 400, "ValidationException", "Cannot delete event bus %s: %s",
                             name, err.msg);
    if (sl_sets_delete(c->r->h->sets, name, &err))
        return sl__aws_error(c, 500, "InternalException", "Cannot delete event bus %s: %s", name,
                             err.msg);
    return sl__aws_reply(c, json_object());
}
