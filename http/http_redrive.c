/*
 * http/http_redrive.c — POST /v1/sets/{dlq}/redrive: moves the
 * events of a dead-letter set back into a live set (core/bus/redrive.h), through
 * the server's redrive hook. Parameters `to` (required) and `max` come from
 * the query string (?to=SET&max=N) or a JSON body {"to": "SET", "max": N};
 * the query string wins when both give one.
 *
 * A redrive takes a while (minutes for a large set, plus waits while the
 * destination is full), far too long for one of libmicrohttpd's few pool
 * threads: the request is suspended, the redrive runs on a thread of its
 * own, and the answer is queued when the thread resumes the connection (the
 * path a durable ingest takes, http_ingest.c). The thread holds a reference
 * to the request and counts in the server's active requests until it is
 * done, so that sl_http_stop() waits for it; it gives the redrive the
 * server's stopping flag, so that a stopping server ends the redrive at the
 * next chunk and answers 503.
 */
#include "http/http_internal.h"
#include "core/base/json.h"
#include "core/base/buf.h"
#include "core/bus/redrive.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One redrive handed to its thread. */
typedef struct job {
    sl_http_req *r;
    char dlq[SL_SET_NAME_MAX + 1];
    char to[SL_SET_NAME_MAX + 1];
    uint64_t max;
} job;

/* {"error":code,"message":msg} into out (emptied first); returns the status. */
static unsigned error_body(sl_buf *out, int rc, const char *msg)
{
    unsigned status;
    const char *code;
    switch (rc) {
    case SL_ENOENT:
        status = 404, code = "NoSuchSet";
        break;
    case SL_EINVAL:
        status = 400, code = "InvalidRequest";
        break;
    case SL_EDEFERRED: /* another redrive of the set is running */
        status = 409, code = "Conflict";
        break;
    case SL_EFULL:
    case SL_ESHUTDOWN:
        status = 503, code = "Unavailable";
        break;
    default:
        status = 500, code = "RedriveFailed";
        break;
    }
    out->len = 0;
    int e = sl_buf_printf(out, "{\"error\":\"%s\",\"message\":", code);
    size_t mark = out->len;
    if (!e && sl_json_put_string(out, msg, strlen(msg))) { /* not UTF-8 */
        out->len = mark;
        e = sl_buf_append(out, "\"\"", 2);
    }
    if (!e)
        e = sl_buf_append(out, "}\n", 2);
    if (e) /* out of memory: an empty body still carries the status */
        out->len = 0;
    return status;
}

static void *job_main(void *arg)
{
    job *j = arg;
    sl_http_req *r = j->r;
    sl_http *h = r->h;
    sl_redrive_set_stop(&h->stopping);
    sl_buf out = SL_BUF_INIT;
    sl_error err = {0};
    int rc = h->hooks.redrive(h->hooks.ctx, j->dlq, j->to, j->max, &out, &err);
    unsigned status = 200;
    if (rc)
        status = error_body(&out, rc, err.msg[0] ? err.msg : sl_strerror(rc));
    free(j);
    /* Answered by on_request() once resumed (r->ready), like a durable
     * ingest; the lock orders this after the suspend. */
    pthread_mutex_lock(&r->lock);
    sl_buf_free(&r->resp);
    r->resp = out;
    r->resp_status = (int)status;
    r->wait_status = 0;
    sl__http_req_answered(r);
    /* Last: from here on, sl_http_stop() may return and sl_http_free() free h. */
    atomic_fetch_sub(&h->active, 1);
    return NULL;
}

/* Starts the redrive on its own thread and suspends the request until the
 * thread answers it. */
static enum MHD_Result start_job(sl_http_req *r, const char *dlq, const char *to, uint64_t max)
{
    sl_http *h = r->h;
    if (atomic_load(&h->stopping))
        return sl__http_error(r, 503, "ShuttingDown", "the server is shutting down");
    job *j = calloc(1, sizeof *j);
    if (!j)
        return sl__http_error(r, 500, "Internal", "out of memory");
    j->r = r;
    snprintf(j->dlq, sizeof j->dlq, "%s", dlq);
    snprintf(j->to, sizeof j->to, "%s", to);
    j->max = max;
    atomic_fetch_add(&r->refs, 1); /* the thread's */
    atomic_fetch_add(&h->active, 1);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    pthread_mutex_lock(&r->lock);
    int e = pthread_create(&t, &attr, job_main, j);
    if (!e) {
        r->suspended = true;
        MHD_suspend_connection(r->conn);
    }
    pthread_mutex_unlock(&r->lock);
    pthread_attr_destroy(&attr);
    if (e) {
        free(j);
        atomic_fetch_sub(&h->active, 1);
        sl__http_req_release(r);
        return sl__http_error(r, 503, "Unavailable", "cannot start the redrive: %s", strerror(e));
    }
    return MHD_YES;
}

/* Parses a non-negative decimal integer (max=0 means all). */
static bool parse_max(const char *s, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return false;
    *out = v;
    return true;
}

enum MHD_Result sl__http_redrive(sl_http_req *r, const char *set_name)
{
    sl_http *h = r->h;
    if (!h->hooks.redrive)
        return sl__http_error(r, 503, "NotAvailable", "redrive is not available on this server");
    const char *to_q = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "to");
    const char *max_q = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "max");

    char to[SL_SET_NAME_MAX + 2] = "";
    bool have_to = false;
    uint64_t max = 0;
    const char *p = r->body.data ? (const char *)r->body.data : "";
    size_t len = r->body.len;
    while (len && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) {
        p++;
        len--;
    }
    if (len) {
        sl_json_tok body, k, v;
        sl_error e = {0};
        if (sl_json_validate(p, len, 8, &body, &e))
            return sl__http_error(r, 400, "InvalidJson", "the body is not JSON: %s", e.msg);
        if (body.type != SL_JSON_OBJECT)
            return sl__http_error(r, 400, "InvalidRequest", "want {\"to\": \"SET\", \"max\": N}");
        sl_json_iter it;
        sl_json_iter_init(&it, &body);
        bool have_max = false;
        while (sl_json_iter_member(&it, &k, &v)) {
            /* Members by their unescaped names ("t\u006f" is "to"); a name
             * given twice is refused, not resolved: a check that read one
             * and a use that read the other would disagree. */
            char name[8];
            size_t kn = 0;
            if (sl_json_unescape(&k, name, sizeof name - 1, &kn))
                continue; /* long or odd: not one of ours */
            name[kn] = '\0';
            bool is_to = strcmp(name, "to") == 0, is_max = strcmp(name, "max") == 0;
            if ((is_to && have_to) || (is_max && have_max))
                return sl__http_error(r, 400, "InvalidRequest",
                                      "the body gives \"%s\" more than once", name);
            if (is_to) {
                size_t n = 0;
                if (v.type != SL_JSON_STRING || sl_json_unescape(&v, to, sizeof to - 1, &n))
                    return sl__http_error(r, 400, "InvalidParameter",
                                          "to must be the name of a set ([A-Za-z0-9._-]{1,128})");
                to[n] = '\0';
                have_to = true;
            } else if (is_max) {
                have_max = true;
                char num[32];
                if (v.type != SL_JSON_NUMBER || !(v.flags & SL_JSON_INTEGER) || v.len >= sizeof num)
                    return sl__http_error(r, 400, "InvalidParameter",
                                          "max must be a non-negative integer (0: all)");
                memcpy(num, v.p, v.len);
                num[v.len] = '\0';
                if (!parse_max(num, &max))
                    return sl__http_error(r, 400, "InvalidParameter",
                                          "max must be a non-negative integer (0: all)");
            }
        }
    }
    if (to_q) {
        if (strlen(to_q) >= sizeof to - 1)
            return sl__http_error(r, 400, "InvalidParameter",
                                  "to must be the name of a set ([A-Za-z0-9._-]{1,128})");
        strcpy(to, to_q);
        have_to = true;
    }
    if (max_q) {
        if (!parse_max(max_q, &max))
            return sl__http_error(r, 400, "InvalidParameter",
                                  "max \"%s\" is not a non-negative integer (0: all)", max_q);
    }
    if (!have_to || !to[0])
        return sl__http_error(r, 400, "InvalidParameter",
                              "to is required: the set to move the events to (?to=SET or "
                              "{\"to\": \"SET\"})");
    if (!sl_set_name_valid(to))
        return sl__http_error(r, 400, "InvalidParameter",
                              "to \"%s\" is not a set name ([A-Za-z0-9._-]{1,128})", to);
    if (!sl_set_name_valid(set_name))
        return sl__http_error(r, 400, "InvalidSetName",
                              "\"%s\" is not a set name ([A-Za-z0-9._-]{1,128})", set_name);
    /* The key needs publish on the destination actually used (publish on
     * the DLQ was checked with the headers). */
    enum MHD_Result denied;
    if (!sl__http_redrive_allowed(r, to, &denied))
        return denied;

    return start_job(r, set_name, to, max);
}
