/*
 * http/aws_rules.c — rules, targets, connections and API destinations of
 * the EventBridge API: checked here in EventBridge's terms, kept in the
 * state (aws_state.c), which makes them config declarations.
 *
 * Differences from AWS (docs/eventbridge-api.md): rule names are unique
 * across buses (a sluice rule has one name); a name the config file
 * declares is the file's; the targets are API destinations, event buses and
 * the arn:sluice: forms (file, Kafka); a dead-letter queue is an event bus.
 */
#include "http/aws_internal.h"

#include "core/base/clock.h"
#include "core/base/cron.h"
#include "rules/input.h"
#include "rules/pattern.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RULE_MAX_TARGETS 5

/* EventBridge's names: 1-64 of . - _ A-Z a-z 0-9. */
static bool name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n < 1 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '.' || s[i] == '-' || s[i] == '_'))
            return false;
    return true;
}

static void rule_arn(const sl_aws *a, const char *bus, const char *name, char *out, size_t cap)
{
    char n[512];
    if (strcmp(bus, "default"))
        snprintf(n, sizeof n, "%s/%s", bus, name);
    else
        snprintf(n, sizeof n, "%s", name);
    sl__aws_arn(a, "rule", n, out, cap);
}

/* The rule Name of the request on its bus: the rule object of st, or NULL
 * with the error answer in *ret. */
static json_t *find_rule(aws_call *c, json_t *st, const char *key, char *bus, size_t cap,
                         enum MHD_Result *ret)
{
    const char *name = sl__aws_str(c->in, key);
    if (!sl__aws_bus(c, json_object_get(c->in, "EventBusName"), bus, cap, ret))
        return NULL;
    if (!name) {
        *ret = sl__aws_error(c, 400, "ValidationException", "%s is required", key);
        return NULL;
    }
    json_t *rule = json_object_get(json_object_get(st, "rules"), name);
    if (!rule || strcmp(sl__aws_str(rule, "EventBusName"), bus)) {
        *ret = sl__aws_error(c, 400, "ResourceNotFoundException",
                             "Rule %.64s does not exist on EventBus %s.", name, bus);
        return NULL;
    }
    return rule;
}

static enum MHD_Result denied(aws_call *c, const char *what)
{
    return sl__aws_error(c, 400, "AccessDeniedException", "credential %s may not %s",
                         c->cred ? c->cred->akid : "?", what);
}

/* Commits next and answers out (taken), or answers the failure. */
static enum MHD_Result commit(aws_call *c, json_t *next, json_t *out)
{
    sl_error err = {0};
    int rc = sl__aws_commit(c->a, next, &err);
    sl__aws_end(c->a, next);
    if (rc) {
        json_decref(out);
        return sl__aws_error(c, rc == SL_EUNSUPPORTED || rc == SL_EINVAL ? 400 : 500,
                             rc == SL_EUNSUPPORTED || rc == SL_EINVAL ? "ValidationException"
                                                                     : "InternalException",
                             "%s", err.msg[0] ? err.msg : sl_strerror(rc));
    }
    return sl__aws_reply(c, out);
}

static json_t *describe(const sl_aws *a, const char *name, const json_t *rule)
{
    const char *bus = sl__aws_str(rule, "EventBusName");
    char arn[512];
    rule_arn(a, bus, name, arn, sizeof arn);
    json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:s}", "Name", name, "Arn", arn, "EventBusName", bus,
                          "State", sl__aws_str(rule, "State"), "CreatedBy", a->account);
    const char *keys[] = {"EventPattern", "ScheduleExpression", "Description", "RoleArn"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (sl__aws_str(rule, keys[i]))
            json_object_set_new(o, keys[i], json_string(sl__aws_str(rule, keys[i])));
    return o;
}

/* ---- rules --------------------------------------------------------------------------- */

enum MHD_Result sl__aws_put_rule(aws_call *c)
{
    const char *name = sl__aws_str(c->in, "Name");
    const char *pat = sl__aws_str(c->in, "EventPattern");
    const char *sched = sl__aws_str(c->in, "ScheduleExpression");
    const char *state = sl__aws_str(c->in, "State");
    char bus[SL_SET_NAME_MAX + 1];
    enum MHD_Result ret;
    if (!sl__aws_bus(c, json_object_get(c->in, "EventBusName"), bus, sizeof bus, &ret))
        return ret;
    if (!sl__aws_allowed(c, AWS_ADMIN, bus))
        return denied(c, "make rules");
    if (!name_ok(name))
        return sl__aws_error(c, 400, "ValidationException",
                             "1 validation error detected: Value at 'name' failed to satisfy "
                             "constraint: Member must satisfy regular expression pattern: "
                             "[\\.\\-_A-Za-z0-9]+ (1-64 characters)");
    if (!pat && !sched)
        return sl__aws_error(c, 400, "ValidationException",
                             "Parameter(s) EventPattern or ScheduleExpression must be specified.");
    if (state && strcmp(state, "ENABLED") && strcmp(state, "DISABLED"))
        return sl__aws_error(c, 400, "ValidationException",
                             "State must be ENABLED or DISABLED, not %.40s", state);
    sl_error err = {0};
    if (pat) {
        sl_pattern *p = NULL;
        if (sl_pattern_compile(pat, strlen(pat), &p, &err))
            return sl__aws_error(c, 400, "InvalidEventPatternException",
                                 "Event pattern is not valid. Reason: %s", err.msg);
        sl_pattern_free(p);
    }
    if (sched) {
        if (strcmp(bus, "default"))
            return sl__aws_error(c, 400, "ValidationException",
                                 "ScheduleExpression is supported only on the default event bus.");
        sl_sched *s = NULL;
        if (strncmp(sched, "at(", 3) == 0 || sl_sched_new_expression(sched, NULL, &s, &err))
            return sl__aws_error(c, 400, "ValidationException",
                                 "Parameter ScheduleExpression is not valid: %s",
                                 err.msg[0] ? err.msg : "want cron(…) or rate(…)");
        sl_sched_free(s);
    }
    if (c->a->file_rule && c->a->file_rule(c->a->ctx, name))
        return sl__aws_error(c, 400, "ResourceAlreadyExistsException",
                             "Rule %s is declared in the config file; the API cannot change it "
                             "(pick another name)",
                             name);
    json_t *next = sl__aws_begin(c->a);
    json_t *rules = sl__aws_section(next, "rules");
    json_t *old = json_object_get(rules, name);
    if (old && strcmp(sl__aws_str(old, "EventBusName"), bus)) {
        sl__aws_end(c->a, next);
        return sl__aws_error(c, 400, "ResourceAlreadyExistsException",
                             "Rule %s exists on event bus %s; in sluice a rule name is unique "
                             "across buses",
                             name, sl__aws_str(old, "EventBusName"));
    }
    json_t *rule = json_pack("{s:s,s:s}", "EventBusName", bus, "State", state ? state : "ENABLED");
    const char *keys[] = {"EventPattern", "ScheduleExpression", "Description", "RoleArn"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        if (sl__aws_str(c->in, keys[i]))
            json_object_set_new(rule, keys[i], json_string(sl__aws_str(c->in, keys[i])));
    json_t *kept = old ? json_object_get(old, "Targets") : NULL;
    json_object_set_new(rule, "Targets", kept ? json_incref(kept) : json_array());
    json_object_set_new(rules, name, rule);
    char arn[512];
    rule_arn(c->a, bus, name, arn, sizeof arn);
    return commit(c, next, json_pack("{s:s}", "RuleArn", arn));
}

enum MHD_Result sl__aws_describe_rule(aws_call *c)
{
    char bus[SL_SET_NAME_MAX + 1];
    enum MHD_Result ret;
    json_t *st = sl__aws_begin(c->a);
    json_t *rule = find_rule(c, st, "Name", bus, sizeof bus, &ret);
    if (rule && !sl__aws_allowed(c, AWS_READ, bus))
        ret = denied(c, "read the rules of this bus");
    else if (rule)
        ret = sl__aws_reply(c, describe(c->a, sl__aws_str(c->in, "Name"), rule));
    sl__aws_end(c->a, st);
    return ret;
}

enum MHD_Result sl__aws_list_rules(aws_call *c)
{
    char bus[SL_SET_NAME_MAX + 1];
    enum MHD_Result ret;
    if (!sl__aws_bus(c, json_object_get(c->in, "EventBusName"), bus, sizeof bus, &ret))
        return ret;
    if (!sl__aws_allowed(c, AWS_READ, bus))
        return denied(c, "read the rules of this bus");
    const char *prefix = sl__aws_str(c->in, "NamePrefix");
    json_t *st = sl__aws_begin(c->a);
    json_t *names = json_array();
    const char *name;
    json_t *rule;
    json_object_foreach(json_object_get(st, "rules"), name, rule)
    {
        if (strcmp(sl__aws_str(rule, "EventBusName"), bus) == 0 &&
            (!prefix || strncmp(name, prefix, strlen(prefix)) == 0))
            json_array_append_new(names, json_string(name));
    }
    char next[128];
    const char *tok;
    json_t *page = sl__aws_page(c, names, &tok, next, sizeof next);
    json_t *out = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(page, i, v)
    {
        const char *n = json_string_value(v);
        json_array_append_new(out, describe(c->a, n, json_object_get(json_object_get(st, "rules"), n)));
    }
    json_decref(page);
    json_decref(names);
    sl__aws_end(c->a, st);
    json_t *o = json_pack("{s:o}", "Rules", out);
    if (tok)
        json_object_set_new(o, "NextToken", json_string(tok));
    return sl__aws_reply(c, o);
}

enum MHD_Result sl__aws_delete_rule(aws_call *c)
{
    char bus[SL_SET_NAME_MAX + 1];
    enum MHD_Result ret;
    json_t *next = sl__aws_begin(c->a);
    json_t *rule = find_rule(c, next, "Name", bus, sizeof bus, &ret);
    if (!rule) {
        sl__aws_end(c->a, next);
        return ret;
    }
    if (!sl__aws_allowed(c, AWS_ADMIN, bus)) {
        sl__aws_end(c->a, next);
        return denied(c, "delete rules");
    }
    if (json_array_size(json_object_get(rule, "Targets")) &&
        !json_is_true(json_object_get(c->in, "Force"))) {
        sl__aws_end(c->a, next);
        return sl__aws_error(c, 400, "ValidationException",
                             "Rule can't be deleted since it has targets.");
    }
    json_object_del(sl__aws_section(next, "rules"), sl__aws_str(c->in, "Name"));
    return commit(c, next, json_object());
}

static enum MHD_Result set_state(aws_call *c, const char *state)
{
    char bus[SL_SET_NAME_MAX + 1];
    enum MHD_Result ret;
    json_t *next = sl__aws_begin(c->a);
    json_t *rule = find_rule(c, next, "Name", bus, sizeof bus, &ret);
    if (!rule) {
        sl__aws_end(c->a, next);
        return ret;
    }
    if (!sl__aws_allowed(c, AWS_ADMIN, bus)) {
        sl__aws_end(c->a, next);
        return denied(c, "change rules");
    }
    json_object_set_new(rule, "State", json_string(state));
    return commit(c, next, json_object());
}

enum MHD_Result sl__aws_enable_rule(aws_call *c)
{
    return set_state(c, "ENABLED");
}

enum MHD_Result sl__aws_disable_rule(aws_call *c)
{
    return set_state(c, "DISABLED");
}

enum MHD_Result sl__aws_list_rule_names_by_target(aws_call *c)
{
    const char *arn = sl__aws_str(c->in, "TargetArn");
    char bus[SL_SET_NAME_MAX + 1];
    enum MHD_Result ret;
    if (!arn)
        return sl__aws_error(c, 400, "ValidationException", "TargetArn is required");
    if (!sl__aws_bus(c, json_object_get(c->in, "EventBusName"), bus, sizeof bus, &ret))
        return ret;
    if (!sl__aws_allowed(c, AWS_READ, bus))
        return denied(c, "read the rules of this bus");
    json_t *st = sl__aws_begin(c->a);
    json_t *names = json_array();
    const char *name;
    json_t *rule;
    json_object_foreach(json_object_get(st, "rules"), name, rule)
    {
        if (strcmp(sl__aws_str(rule, "EventBusName"), bus))
            continue;
        size_t i;
        json_t *t;
        bool hit = false;
        json_array_foreach(json_object_get(rule, "Targets"), i, t) hit |=
            strcmp(sl__aws_str(t, "Arn"), arn) == 0;
        if (hit)
            json_array_append_new(names, json_string(name));
    }
    sl__aws_end(c->a, st);
    char next[128];
    const char *tok;
    json_t *page = sl__aws_page(c, names, &tok, next, sizeof next);
    json_decref(names);
    json_t *o = json_pack("{s:o}", "RuleNames", page);
    if (tok)
        json_object_set_new(o, "NextToken", json_string(tok));
    return sl__aws_reply(c, o);
}

/* ---- targets ------------------------------------------------------------------------- */

/* Why target t cannot be one (NULL: it can). st gives the API
 * destinations. */
static const char *target_problem(const json_t *st, const json_t *t, char *why, size_t cap)
{
    const char *id = sl__aws_str(t, "Id"), *arn = sl__aws_str(t, "Arn");
    if (!name_ok(id))
        return "Id must be 1-64 of . - _ A-Z a-z 0-9";
    if (!arn)
        return "Arn is required";
    const char *dest = strstr(arn, ":api-destination/");
    if (strncmp(arn, "arn:aws:events:", 15) == 0 && dest) {
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)strcspn(dest + 17, "/"), dest + 17);
        if (!json_object_get(json_object_get(st, "destinations"), name)) {
            snprintf(why, cap, "API destination %s does not exist", name);
            return why;
        }
    } else if (strncmp(arn, "arn:aws:events:", 15) == 0 && strstr(arn, ":event-bus/")) {
        if (!sl_set_name_valid(strstr(arn, ":event-bus/") + 11))
            return "the event bus of Arn is not a valid bus name";
    } else if (strncmp(arn, "arn:sluice:file:::/", 19) == 0) {
    } else if (strncmp(arn, "arn:sluice:kafka:::", 19) == 0) {
        const char *slash = strrchr(arn + 19, '/');
        if (!slash || slash == arn + 19 || !slash[1])
            return "a Kafka target is arn:sluice:kafka:::BROKERS/TOPIC";
    } else {
        snprintf(why, cap,
                 "sluice delivers to API destinations, event buses, arn:sluice:file:::/PATH and "
                 "arn:sluice:kafka:::BROKERS/TOPIC; %.200s is none of them",
                 arn);
        return why;
    }
    const char *dlq = sl__aws_str(json_object_get(t, "DeadLetterConfig"), "Arn");
    if (dlq && strncmp(dlq, "arn:aws:sqs:", 12) == 0)
        return "sluice has no SQS: a dead-letter queue is an event bus here "
               "(DeadLetterConfig.Arn = arn:aws:events:REGION:ACCOUNT:event-bus/NAME)";
    if (dlq && (strncmp(dlq, "arn:aws:events:", 15) || !strstr(dlq, ":event-bus/")))
        return "DeadLetterConfig.Arn must be an event bus ARN";
    const json_t *rp = json_object_get(t, "RetryPolicy");
    const json_t *n = json_object_get(rp, "MaximumRetryAttempts");
    const json_t *age = json_object_get(rp, "MaximumEventAgeInSeconds");
    if (n && (!json_is_integer(n) || json_integer_value(n) < 0 || json_integer_value(n) > 185))
        return "RetryPolicy.MaximumRetryAttempts must be 0-185";
    if (age && (!json_is_integer(age) || json_integer_value(age) < 60 ||
                json_integer_value(age) > 86400))
        return "RetryPolicy.MaximumEventAgeInSeconds must be 60-86400";
    int given = !!json_object_get(t, "Input") + !!json_object_get(t, "InputPath") +
                !!json_object_get(t, "InputTransformer");
    if (given > 1)
        return "only one of Input, InputPath and InputTransformer may be given";
    sl_error err = {0};
    sl_input *in = NULL;
    const char *input = sl__aws_str(t, "Input"), *path = sl__aws_str(t, "InputPath");
    const json_t *tr = json_object_get(t, "InputTransformer");
    json_t *parsed = input ? json_loads(input, JSON_DECODE_ANY, NULL) : NULL;
    json_decref(parsed);
    if (input && !parsed)
        return "Input must be valid JSON text";
    if (path && sl_input_compile_path(path, &in, &err)) {
        snprintf(why, cap, "InputPath: %s", err.msg);
        return why;
    }
    if (tr) {
        const json_t *map = json_object_get(tr, "InputPathsMap");
        const char *tmpl = sl__aws_str(tr, "InputTemplate");
        const char *names[SL_INPUT_MAX_VARS], *paths[SL_INPUT_MAX_VARS];
        size_t k = 0;
        const char *key;
        const json_t *v;
        json_object_foreach((json_t *)map, key, v)
        {
            if (k == SL_INPUT_MAX_VARS || !json_is_string(v))
                return "InputTransformer.InputPathsMap maps at most 100 names to path strings";
            names[k] = key;
            paths[k++] = json_string_value(v);
        }
        if (!tmpl)
            return "InputTransformer.InputTemplate is required";
        if (sl_input_compile_template(names, paths, k, tmpl, &in, &err)) {
            snprintf(why, cap, "InputTransformer: %s", err.msg);
            return why;
        }
    }
    sl_input_free(in);
    return NULL;
}

enum MHD_Result sl__aws_put_targets(aws_call *c)
{
    char bus[SL_SET_NAME_MAX + 1];
    enum MHD_Result ret;
    const json_t *targets = json_object_get(c->in, "Targets");
    if (!json_is_array(targets) || json_array_size(targets) < 1 || json_array_size(targets) > 10)
        return sl__aws_error(c, 400, "ValidationException",
                             "Targets must be a list of 1 to 10 targets");
    json_t *next = sl__aws_begin(c->a);
    json_t *rule = find_rule(c, next, "Rule", bus, sizeof bus, &ret);
    if (!rule) {
        sl__aws_end(c->a, next);
        return ret;
    }
    if (!sl__aws_allowed(c, AWS_ADMIN, bus)) {
        sl__aws_end(c->a, next);
        return denied(c, "change targets");
    }
    json_t *have = json_object_get(rule, "Targets");
    json_t *failed = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(targets, i, t)
    {
        char why[512];
        const char *p = json_is_object(t) ? target_problem(next, t, why, sizeof why)
                                          : "a target is an object";
        if (p) {
            json_array_append_new(failed, json_pack("{s:s?,s:s,s:s}", "TargetId",
                                                    sl__aws_str(t, "Id"), "ErrorCode",
                                                    "ValidationException", "ErrorMessage", p));
            continue;
        }
        size_t j;
        json_t *h;
        bool replaced = false;
        json_array_foreach(have, j, h)
        {
            if (!replaced && strcmp(sl__aws_str(h, "Id"), sl__aws_str(t, "Id")) == 0) {
                json_array_set(have, j, t);
                replaced = true;
            }
        }
        if (!replaced)
            json_array_append(have, t);
    }
    if (json_array_size(have) > RULE_MAX_TARGETS) {
        sl__aws_end(c->a, next);
        json_decref(failed);
        return sl__aws_error(c, 400, "LimitExceededException",
                             "The requested resource exceeds the maximum number allowed: a rule "
                             "has at most %d targets.",
                             RULE_MAX_TARGETS);
    }
    json_t *out = json_pack("{s:I,s:o}", "FailedEntryCount", (json_int_t)json_array_size(failed),
                            "FailedEntries", failed);
    return commit(c, next, out);
}

enum MHD_Result sl__aws_remove_targets(aws_call *c)
{
    char bus[SL_SET_NAME_MAX + 1];
    enum MHD_Result ret;
    const json_t *ids = json_object_get(c->in, "Ids");
    if (!json_is_array(ids) || !json_array_size(ids))
        return sl__aws_error(c, 400, "ValidationException", "Ids must be a non-empty list");
    json_t *next = sl__aws_begin(c->a);
    json_t *rule = find_rule(c, next, "Rule", bus, sizeof bus, &ret);
    if (!rule) {
        sl__aws_end(c->a, next);
        return ret;
    }
    if (!sl__aws_allowed(c, AWS_ADMIN, bus)) {
        sl__aws_end(c->a, next);
        return denied(c, "change targets");
    }
    json_t *have = json_object_get(rule, "Targets");
    json_t *failed = json_array();
    size_t i;
    json_t *id;
    json_array_foreach(ids, i, id)
    {
        bool found = false;
        for (size_t j = 0; j < json_array_size(have) && !found; j++)
            if (json_is_string(id) &&
                strcmp(sl__aws_str(json_array_get(have, j), "Id"), json_string_value(id)) == 0) {
                json_array_remove(have, j);
                found = true;
            }
        if (!found)
            json_array_append_new(failed, json_pack("{s:s?,s:s,s:s}", "TargetId",
                                                    json_string_value(id), "ErrorCode",
                                                    "ResourceNotFoundException", "ErrorMessage",
                                                    "the rule has no target with this Id"));
    }
    json_t *out = json_pack("{s:I,s:o}", "FailedEntryCount", (json_int_t)json_array_size(failed),
                            "FailedEntries", failed);
    return commit(c, next, out);
}

enum MHD_Result sl__aws_list_targets_by_rule(aws_call *c)
{
    char bus[SL_SET_NAME_MAX + 1];
    enum MHD_Result ret;
    json_t *st = sl__aws_begin(c->a);
    json_t *rule = find_rule(c, st, "Rule", bus, sizeof bus, &ret);
    if (rule && !sl__aws_allowed(c, AWS_READ, bus))
        ret = denied(c, "read the rules of this bus");
    else if (rule)
        ret = sl__aws_reply(c, json_pack("{s:O}", "Targets", json_object_get(rule, "Targets")));
    sl__aws_end(c->a, st);
    return ret;
}

/* ---- connections and API destinations ------------------------------------------------- */

static json_t *stamp(json_t *o)
{
    double now = (double)sl_clock_now_ms() / 1000.0;
    json_object_set_new(o, "CreationTime", json_real(now));
    json_object_set_new(o, "LastModifiedTime", json_real(now));
    return o;
}

enum MHD_Result sl__aws_create_connection(aws_call *c)
{
    const char *name = sl__aws_str(c->in, "Name"), *type = sl__aws_str(c->in, "AuthorizationType");
    const json_t *auth = json_object_get(c->in, "AuthParameters");
    if (!sl__aws_allowed(c, AWS_ADMIN, NULL))
        return denied(c, "make connections");
    if (!name_ok(name))
        return sl__aws_error(c, 400, "ValidationException", "Name must be 1-64 of . - _ A-Z a-z 0-9");
    const char *need = !type                                         ? NULL
                       : strcmp(type, "API_KEY") == 0                  ? "ApiKeyAuthParameters"
                       : strcmp(type, "BASIC") == 0                    ? "BasicAuthParameters"
                       : strcmp(type, "OAUTH_CLIENT_CREDENTIALS") == 0 ? "OAuthParameters"
                                                                       : NULL;
    if (!need)
        return sl__aws_error(c, 400, "ValidationException",
                             "AuthorizationType must be API_KEY, BASIC or "
                             "OAUTH_CLIENT_CREDENTIALS");
    const json_t *p = json_object_get(auth, need);
    bool ok = json_is_object(p);
    if (ok && strcmp(need, "ApiKeyAuthParameters") == 0)
        ok = sl__aws_str(p, "ApiKeyName") && sl__aws_str(p, "ApiKeyValue");
    else if (ok && strcmp(need, "BasicAuthParameters") == 0)
        ok = sl__aws_str(p, "Username") && sl__aws_str(p, "Password");
    else if (ok)
        ok = sl__aws_str(p, "AuthorizationEndpoint") &&
             sl__aws_str(json_object_get(p, "ClientParameters"), "ClientID") &&
             sl__aws_str(json_object_get(p, "ClientParameters"), "ClientSecret");
    if (!ok)
        return sl__aws_error(c, 400, "ValidationException",
                             "AuthParameters.%s is missing or incomplete", need);
    json_t *next = sl__aws_begin(c->a);
    json_t *conns = sl__aws_section(next, "connections");
    if (json_object_get(conns, name)) {
        sl__aws_end(c->a, next);
        return sl__aws_error(c, 400, "ResourceAlreadyExistsException",
                             "Connection %s already exists.", name);
    }
    json_t *conn = stamp(json_pack("{s:s,s:O}", "AuthorizationType", type, "AuthParameters", auth));
    if (sl__aws_str(c->in, "Description"))
        json_object_set_new(conn, "Description", json_string(sl__aws_str(c->in, "Description")));
    json_object_set_new(conns, name, conn);
    char arn[512];
    sl__aws_arn(c->a, "connection", name, arn, sizeof arn);
    return commit(c, next, stamp(json_pack("{s:s,s:s}", "ConnectionArn", arn, "ConnectionState",
                                           "AUTHORIZED")));
}

static json_t *conn_json(const sl_aws *a, const char *name, const json_t *conn)
{
    char arn[512];
    sl__aws_arn(a, "connection", name, arn, sizeof arn);
    json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:O,s:O}", "Name", name, "ConnectionArn", arn,
                          "ConnectionState", "AUTHORIZED", "AuthorizationType",
                          sl__aws_str(conn, "AuthorizationType"), "CreationTime",
                          json_object_get(conn, "CreationTime"), "LastModifiedTime",
                          json_object_get(conn, "LastModifiedTime"));
    if (sl__aws_str(conn, "Description"))
        json_object_set_new(o, "Description", json_string(sl__aws_str(conn, "Description")));
    return o;
}

static enum MHD_Result describe_named(aws_call *c, const char *section,
                                      json_t *(*fmt)(const sl_aws *, const char *, const json_t *),
                                      const char *what)
{
    const char *name = sl__aws_str(c->in, "Name");
    if (!sl__aws_allowed(c, AWS_READ, NULL))
        return denied(c, "read connections and API destinations");
    json_t *st = sl__aws_begin(c->a);
    json_t *o = name ? json_object_get(json_object_get(st, section), name) : NULL;
    enum MHD_Result ret = o ? sl__aws_reply(c, fmt(c->a, name, o))
                            : sl__aws_error(c, 400, "ResourceNotFoundException",
                                            "%s %.64s does not exist.", what, name ? name : "");
    sl__aws_end(c->a, st);
    return ret;
}

static enum MHD_Result list_named(aws_call *c, const char *section,
                                  json_t *(*fmt)(const sl_aws *, const char *, const json_t *),
                                  const char *key)
{
    if (!sl__aws_allowed(c, AWS_READ, NULL))
        return denied(c, "read connections and API destinations");
    const char *prefix = sl__aws_str(c->in, "NamePrefix");
    json_t *st = sl__aws_begin(c->a);
    json_t *names = json_array();
    const char *name;
    json_t *v;
    json_object_foreach(json_object_get(st, section), name, v) if (!prefix ||
                                                                   strncmp(name, prefix,
                                                                           strlen(prefix)) == 0)
        json_array_append_new(names, json_string(name));
    char next[128];
    const char *tok;
    json_t *page = sl__aws_page(c, names, &tok, next, sizeof next);
    json_t *out = json_array();
    size_t i;
    json_array_foreach(page, i, v)
    {
        const char *n = json_string_value(v);
        json_array_append_new(out, fmt(c->a, n, json_object_get(json_object_get(st, section), n)));
    }
    json_decref(page);
    json_decref(names);
    sl__aws_end(c->a, st);
    json_t *o = json_pack("{s:o}", key, out);
    if (tok)
        json_object_set_new(o, "NextToken", json_string(tok));
    return sl__aws_reply(c, o);
}

/* Deletes Name from section unless in_use says something uses it. */
static enum MHD_Result delete_named(aws_call *c, const char *section, const char *what,
                                    const char *(*in_use)(json_t *st, const sl_aws *a,
                                                          const char *name))
{
    const char *name = sl__aws_str(c->in, "Name");
    if (!sl__aws_allowed(c, AWS_ADMIN, NULL))
        return denied(c, "delete connections and API destinations");
    json_t *next = sl__aws_begin(c->a);
    json_t *sec = sl__aws_section(next, section);
    if (!name || !json_object_get(sec, name)) {
        sl__aws_end(c->a, next);
        return sl__aws_error(c, 400, "ResourceNotFoundException", "%s %.64s does not exist.",
                             what, name ? name : "");
    }
    const char *user = in_use(next, c->a, name);
    if (user) {
        char u[256];
        snprintf(u, sizeof u, "%s", user);
        sl__aws_end(c->a, next);
        return sl__aws_error(c, 400, "ValidationException", "%s %s is in use by %s.", what, name,
                             u);
    }
    json_object_del(sec, name);
    return commit(c, next, json_object());
}

static const char *conn_in_use(json_t *st, const sl_aws *a, const char *name)
{
    char arn[512];
    sl__aws_arn(a, "connection", name, arn, sizeof arn);
    const char *d;
    json_t *v;
    json_object_foreach(json_object_get(st, "destinations"), d, v) if (
        strcmp(sl__aws_str(v, "ConnectionArn"), arn) == 0) return d;
    return NULL;
}

enum MHD_Result sl__aws_describe_connection(aws_call *c)
{
    return describe_named(c, "connections", conn_json, "Connection");
}

enum MHD_Result sl__aws_list_connections(aws_call *c)
{
    return list_named(c, "connections", conn_json, "Connections");
}

enum MHD_Result sl__aws_delete_connection(aws_call *c)
{
    return delete_named(c, "connections", "Connection", conn_in_use);
}

static json_t *dest_json(const sl_aws *a, const char *name, const json_t *d)
{
    char arn[512];
    sl__aws_arn(a, "api-destination", name, arn, sizeof arn);
    json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:O,s:O}", "Name", name, "ApiDestinationArn",
                          arn, "ApiDestinationState", "ACTIVE", "ConnectionArn",
                          sl__aws_str(d, "ConnectionArn"), "InvocationEndpoint",
                          sl__aws_str(d, "InvocationEndpoint"), "HttpMethod",
                          sl__aws_str(d, "HttpMethod"), "CreationTime",
                          json_object_get(d, "CreationTime"), "LastModifiedTime",
                          json_object_get(d, "LastModifiedTime"));
    if (json_object_get(d, "InvocationRateLimitPerSecond"))
        json_object_set(o, "InvocationRateLimitPerSecond",
                        json_object_get(d, "InvocationRateLimitPerSecond"));
    return o;
}

enum MHD_Result sl__aws_create_api_destination(aws_call *c)
{
    const char *name = sl__aws_str(c->in, "Name"), *conn = sl__aws_str(c->in, "ConnectionArn");
    const char *url = sl__aws_str(c->in, "InvocationEndpoint");
    const char *method = sl__aws_str(c->in, "HttpMethod");
    const json_t *rate = json_object_get(c->in, "InvocationRateLimitPerSecond");
    static const char *const methods[] = {"POST", "GET", "HEAD", "OPTIONS", "PUT", "PATCH",
                                          "DELETE"};
    bool mok = false;
    for (size_t i = 0; method && i < sizeof methods / sizeof *methods; i++)
        mok |= strcmp(method, methods[i]) == 0;
    if (!sl__aws_allowed(c, AWS_ADMIN, NULL))
        return denied(c, "make API destinations");
    if (!name_ok(name))
        return sl__aws_error(c, 400, "ValidationException", "Name must be 1-64 of . - _ A-Z a-z 0-9");
    if (!url || (strncmp(url, "https://", 8) && strncmp(url, "http://", 7)))
        return sl__aws_error(c, 400, "ValidationException",
                             "InvocationEndpoint must be an http:// or https:// URL");
    if (!mok)
        return sl__aws_error(c, 400, "ValidationException",
                             "HttpMethod must be one of POST, GET, HEAD, OPTIONS, PUT, PATCH, "
                             "DELETE");
    if (rate && (!json_is_integer(rate) || json_integer_value(rate) < 1 ||
                 json_integer_value(rate) > 300))
        return sl__aws_error(c, 400, "ValidationException",
                             "InvocationRateLimitPerSecond must be 1-300");
    json_t *next = sl__aws_begin(c->a);
    char cname[128] = "";
    const char *cp = conn ? strstr(conn, ":connection/") : NULL;
    if (cp)
        snprintf(cname, sizeof cname, "%.*s", (int)strcspn(cp + 12, "/"), cp + 12);
    if (!json_object_get(json_object_get(next, "connections"), cname)) {
        sl__aws_end(c->a, next);
        return sl__aws_error(c, 400, "ResourceNotFoundException",
                             "Connection %.200s does not exist.", conn ? conn : "(none given)");
    }
    json_t *dests = sl__aws_section(next, "destinations");
    if (json_object_get(dests, name)) {
        sl__aws_end(c->a, next);
        return sl__aws_error(c, 400, "ResourceAlreadyExistsException",
                             "API destination %s already exists.", name);
    }
    char carn[512];
    sl__aws_arn(c->a, "connection", cname, carn, sizeof carn);
    json_t *d = stamp(json_pack("{s:s,s:s,s:s}", "ConnectionArn", carn, "InvocationEndpoint", url,
                                "HttpMethod", method));
    if (rate)
        json_object_set(d, "InvocationRateLimitPerSecond", (json_t *)rate);
    json_object_set_new(dests, name, d);
    char arn[512];
    sl__aws_arn(c->a, "api-destination", name, arn, sizeof arn);
    return commit(c, next, stamp(json_pack("{s:s,s:s}", "ApiDestinationArn", arn,
                                           "ApiDestinationState", "ACTIVE")));
}

static const char *dest_in_use(json_t *st, const sl_aws *a, const char *name)
{
    char arn[512];
    sl__aws_arn(a, "api-destination", name, arn, sizeof arn);
    const char *r;
    json_t *v;
    json_object_foreach(json_object_get(st, "rules"), r, v)
    {
        size_t i;
        json_t *t;
        size_t n = strlen(arn);
        json_array_foreach(json_object_get(v, "Targets"), i, t)
        {
            /* the ARN itself, or with AWS's "/UUID" after the name */
            const char *ta = sl__aws_str(t, "Arn");
            if (strncmp(ta, arn, n) == 0 && (ta[n] == '\0' || ta[n] == '/'))
                return r;
        }
    }
    return NULL;
}

enum MHD_Result sl__aws_describe_api_destination(aws_call *c)
{
    return describe_named(c, "destinations", dest_json, "API destination");
}

enum MHD_Result sl__aws_list_api_destinations(aws_call *c)
{
    return list_named(c, "destinations", dest_json, "ApiDestinations");
}

enum MHD_Result sl__aws_delete_api_destination(aws_call *c)
{
    return delete_named(c, "destinations", "API destination", dest_in_use);
}
