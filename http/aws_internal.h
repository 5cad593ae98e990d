/*
 * http/aws_internal.h — what the files of the EventBridge API share
 * (http/aws.c: protocol, SigV4, errors, the operation table;
 * aws_events.c: PutEvents, TestEventPattern, buses; aws_state.c: the
 * durable state and its Lua; aws_rules.c: rules, targets, connections,
 * API destinations).
 */
#ifndef SL_AWS_INTERNAL_H
#define SL_AWS_INTERNAL_H

#include "http/aws.h"
#include "http/http_internal.h"

#include <jansson.h>
#include <pthread.h>

#define AWS_JSON "application/x-amz-json-1.1"

struct sl_aws {
    char region[64], account[16];
    sl_aws_cred *creds; /* copied */
    size_t ncreds;
    char *dir;        /* DATA/aws */
    char *state_path; /* DATA/aws/state.json */
    char *lua_name;   /* DATA/aws/rules.lua (messages only) */
    int (*apply)(void *ctx, const char *lua, size_t len, sl_error *err);
    bool (*file_rule)(void *ctx, const char *name);
    bool (*file_set)(void *ctx, const char *name);
    void *ctx;
    /* The state: {"rules": {NAME: rule}, "connections": {NAME: …},
     * "destinations": {NAME: …}}; changed only under lock, by a copy that
     * replaces it once applied and saved (aws_state.c). */
    pthread_mutex_t lock;
    json_t *state;
};

/* The rights of a call, as api_keys has them. */
enum {
    AWS_PUBLISH, /* PutEvents on the bus */
    AWS_READ,    /* its rules and targets; connections, API destinations */
    AWS_SEE,     /* DescribeEventBus, ListEventBuses: read or publish */
    AWS_ADMIN,   /* every change */
};

/* One call being answered. */
typedef struct aws_call {
    sl_http_req *r;
    sl_aws *a;
    const sl_aws_cred *cred; /* NULL: an open loopback server (everything allowed) */
    const char *op;
    json_t *in; /* the request object */
} aws_call;

/* Answers out (taken: freed here) as 200 AWS JSON. */
enum MHD_Result sl__aws_reply(aws_call *c, json_t *out);

/* Answers an error as AWS does: status, x-amzn-ErrorType: type, body
 * {"__type": type, "message": …}. */
enum MHD_Result sl__aws_error(aws_call *c, unsigned status, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The same answers, into r's prepared response (a suspended PutEvents). */
void sl__aws_body(json_t *out, sl_buf *b);

/* Whether the call's credential has right on bus (NULL: any bus). */
bool sl__aws_allowed(const aws_call *c, int right, const char *bus);

/* The event set an EventBusName (a name or an event-bus ARN; NULL or
 * missing: default) stands for, into out. False (with an answer queued in
 * *ret) when it is neither. */
bool sl__aws_bus(aws_call *c, json_t *v, char *out, size_t cap, enum MHD_Result *ret);

/* The ARN of a resource: arn:aws:events:REGION:ACCOUNT:KIND/NAME. */
void sl__aws_arn(const sl_aws *a, const char *kind, const char *name, char *out, size_t cap);

/* A page of the sorted names (a JSON array of strings): those after the
 * call's NextToken, at most its Limit (default and most 100); *next_out is
 * the next page's token (in next) or NULL. */
json_t *sl__aws_page(aws_call *c, json_t *names, const char **next_out, char *next, size_t cap);

/* A string member of the request, or NULL. */
const char *sl__aws_str(const json_t *o, const char *key);

/* aws_put.c: reads the body itself (c->in is NULL) */
enum MHD_Result sl__aws_put_events(aws_call *c);

/* aws_events.c (TestEventPattern reads its body itself too) */
enum MHD_Result sl__aws_test_event_pattern(aws_call *c);
enum MHD_Result sl__aws_create_bus(aws_call *c);
enum MHD_Result sl__aws_describe_bus(aws_call *c);
enum MHD_Result sl__aws_list_buses(aws_call *c);
enum MHD_Result sl__aws_delete_bus(aws_call *c);

/* aws_rules.c */
enum MHD_Result sl__aws_put_rule(aws_call *c);
enum MHD_Result sl__aws_describe_rule(aws_call *c);
enum MHD_Result sl__aws_list_rules(aws_call *c);
enum MHD_Result sl__aws_delete_rule(aws_call *c);
enum MHD_Result sl__aws_enable_rule(aws_call *c);
enum MHD_Result sl__aws_disable_rule(aws_call *c);
enum MHD_Result sl__aws_list_rule_names_by_target(aws_call *c);
enum MHD_Result sl__aws_put_targets(aws_call *c);
enum MHD_Result sl__aws_remove_targets(aws_call *c);
enum MHD_Result sl__aws_list_targets_by_rule(aws_call *c);
enum MHD_Result sl__aws_create_connection(aws_call *c);
enum MHD_Result sl__aws_describe_connection(aws_call *c);
enum MHD_Result sl__aws_list_connections(aws_call *c);
enum MHD_Result sl__aws_delete_connection(aws_call *c);
enum MHD_Result sl__aws_create_api_destination(aws_call *c);
enum MHD_Result sl__aws_describe_api_destination(aws_call *c);
enum MHD_Result sl__aws_list_api_destinations(aws_call *c);
enum MHD_Result sl__aws_delete_api_destination(aws_call *c);

/* aws_state.c: a change to the state. sl__aws_begin() takes the lock and
 * gives a copy to change; sl__aws_commit() applies it (the server's
 * reload), saves it and puts it in force, or leaves everything as it was
 * with err; sl__aws_end() drops the lock (and the copy if not committed). */
json_t *sl__aws_begin(sl_aws *a);
int sl__aws_commit(sl_aws *a, json_t *next, sl_error *err);
void sl__aws_end(sl_aws *a, json_t *next);

/* The Lua of a state object (sl_aws_lua() of the one in force). */
int sl__aws_state_lua(const sl_aws *a, const json_t *state, sl_buf *out);

/* A state section ("rules", …) of st, made when missing. */
json_t *sl__aws_section(json_t *st, const char *name);

#endif
