/*
 * connectors/source_http_redrive.c — POST /v1/sets/{dlq}/redrive: moves the
 * events of a dead-letter set back into a live set (core/redrive.h), through
 * the server's redrive hook. Parameters `to` (required) and `max` come from
 * the query string (?to=SET&max=N) or a JSON body {"to": "SET", "max": N};
 * the query string wins when both give one.
 */
#include "connectors/source_http_internal.h"
#include "core/json.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

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
        while (sl_json_iter_member(&it, &k, &v)) {
            if (k.len == 4 && memcmp(k.p, "\"to\"", 4) == 0) {
                size_t n = 0;
                if (v.type != SL_JSON_STRING || sl_json_unescape(&v, to, sizeof to - 1, &n))
                    return sl__http_error(r, 400, "InvalidParameter",
                                          "to must be the name of a set ([A-Za-z0-9._-]{1,128})");
                to[n] = '\0';
                have_to = true;
            } else if (k.len == 5 && memcmp(k.p, "\"max\"", 5) == 0) {
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

    sl_buf out = SL_BUF_INIT;
    sl_error err = {0};
    int rc = h->hooks.redrive(h->hooks.ctx, set_name, to, max, &out, &err);
    if (!rc)
        return sl__http_reply(r, 200, &out, "application/json", 0);
    sl_buf_free(&out);
    const char *msg = err.msg[0] ? err.msg : sl_strerror(rc);
    switch (rc) {
    case SL_ENOENT:
        return sl__http_error(r, 404, "NoSuchSet", "%s", msg);
    case SL_EINVAL:
        return sl__http_error(r, 400, "InvalidRequest", "%s", msg);
    case SL_EFULL:
    case SL_ESHUTDOWN:
        return sl__http_error(r, 503, "Unavailable", "%s", msg);
    default:
        return sl__http_error(r, 500, "RedriveFailed", "%s", msg);
    }
}
