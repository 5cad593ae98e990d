/*
 * core/base/httpc.h — the small HTTP client layer shared by the commands that
 * talk to a server (cli/: put, tail, status, lane, replay, redrive, schema
 * infer, and the --api-key/--cacert flags they all take) and the Databus
 * agent (agent/: upstream's answers, the config set it polls): server URL
 * resolution, one keep-alive libcurl handle per request stream, Retry-After
 * and back-off, and reading the server's JSON answers (error bodies, integer
 * members) with the core/base/json.h scanner.
 */
#ifndef SL_HTTPC_H
#define SL_HTTPC_H

#include "core/base/buf.h"
#include "core/base/err.h"
#include "core/base/json.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct curl_slist;

#define SL_HTTPC_DEFAULT_SERVER "http://127.0.0.1:8080"

/* Largest response body accepted; a bigger one fails with SL_ETOOBIG. */
#define SL_HTTPC_MAX_RESPONSE (256u << 20)

/* Classes of failure for one request, so callers can decide about retries. */
typedef enum sl_httpc_fail {
    SL_HTTPC_OK = 0,      /* an HTTP answer arrived (any status) */
    SL_HTTPC_UNREACHABLE, /* nothing was sent: DNS, refused, connect timeout */
    SL_HTTPC_BROKEN,      /* the request may have reached the server: reset, timeout */
    SL_HTTPC_LOCAL,       /* out of memory, response too large, bad URL */
} sl_httpc_fail;

/* One libcurl easy handle plus its response. Reusing it for successive
 * requests keeps the connection alive. */
typedef struct sl_httpc {
    void *curl;                 /* CURL *, owned */
    struct curl_slist *headers; /* headers of the current request, owned */
    sl_buf body;                /* the response body of the last request */
    long status;                /* its HTTP status, 0 when none arrived */
    int64_t retry_after_ms;     /* its Retry-After header in ms, -1 when absent */
    bool too_big;               /* the body passed SL_HTTPC_MAX_RESPONSE */
    char curl_err[256];         /* libcurl's CURLOPT_ERRORBUFFER */
    void *data;                 /* user field */
} sl_httpc;

/* Returns the server base URL: opt when non-NULL, else $SLUICE_SERVER, else
 * SL_HTTPC_DEFAULT_SERVER; "http://" is prefixed when there is no scheme
 * and trailing slashes are dropped. Writes into out (cap bytes). Returns 0, or
 * SL_EINVAL with err set when the URL is empty, too long or not http(s). */
int sl_httpc_server(const char *opt, char *out, size_t cap, sl_error *err);

/* Takes the options every command that talks to the server shares out of
 * argv (argv[0] is the command's name): `--api-key TOKEN` (else
 * $SLUICE_API_KEY), sent as `Authorization: Bearer TOKEN` with every request,
 * and `--cacert FILE` (else $SLUICE_CA_FILE), the CA bundle that verifies an
 * https:// server. Both also as --name=value. Later handles use them;
 * argv keeps the other arguments in order (everything after "--" is left
 * alone). Returns 0, or 2 after a usage message on stderr. */
int sl_httpc_take_flags(int *argc, char **argv);

/* Initialises h with a new easy handle (calling curl_global_init once per
 * process). Returns 0 or SL_ENOMEM; h needs no close on failure. */
int sl_httpc_init(sl_httpc *h, sl_error *err);

/* Releases the handle, its headers and the response body. */
void sl_httpc_close(sl_httpc *h);

/* Prepares h for a request without performing it (for curl multi): method
 * "GET", "POST" or "DELETE"; body/len is the POST body (not copied: must outlive the
 * request); content_type and lane (X-Sluice-Lane) may be NULL; timeout_ms
 * bounds the whole request. The previous response is cleared. Returns 0 or
 * SL_ENOMEM. */
int sl_httpc_prepare(sl_httpc *h, const char *method, const char *url,
                        const char *content_type, const char *lane, const void *body, size_t len,
                        long timeout_ms);

/* Records the outcome of a finished transfer (curl result code `result`,
 * a CURLcode) into h->status and h->retry_after_ms; on failure writes into
 * msg a sentence naming server (the base URL). Returns the failure class. */
sl_httpc_fail sl_httpc_finish(sl_httpc *h, int result, const char *server, char *msg,
                                    size_t cap);

/* sl_httpc_prepare() + curl_easy_perform() + sl_httpc_finish(). */
sl_httpc_fail sl_httpc_request(sl_httpc *h, const char *server, const char *method,
                                     const char *url, const char *content_type, const char *lane,
                                     const void *body, size_t len, long timeout_ms, char *msg,
                                     size_t cap);

/* Writes a one-line description of an HTTP error answer into out: "404
 * NotFound: set \"x\" does not exist" from a JSON {"error","message"} body,
 * else "HTTP 502" followed by the start of the body, printable bytes only. */
void sl_httpc_describe(long status, const sl_buf *body, char *out, size_t cap);

/* Back-off before attempt number `attempt` (0-based) of a retried request:
 * 250 ms doubling up to 8 s, with ±20 % jitter, and never shorter than
 * retry_after_ms (when >= 0). */
int64_t sl_httpc_backoff_ms(int attempt, int64_t retry_after_ms);

/* Sleeps ms milliseconds (resuming after signals). */
void sl_httpc_sleep_ms(int64_t ms);

/* Decodes a string token into out as a NUL-terminated string, truncated to
 * cap - 1 bytes. Writes "" when tok is not a string. */
void sl_httpc_json_str(const sl_json_tok *tok, char *out, size_t cap);

/* Parses "--name value" or "--name=value" at argv[*i] (moving *i past the
 * value); returns true when argv[*i] is that option, with *missing set when
 * its value is absent. Shared by the client commands' option parsers. */
bool sl_httpc_opt(int argc, char **argv, int *i, const char *name, const char **out,
                     bool *missing);

#endif
