/*
 * http/http_console.c — GET /ui/…: the read-only web console, static
 * files (http/ui/) compiled into the binary by scripts/embed-files.sh.
 * The page itself only calls the JSON API, with the caller's API key when
 * the server asks for one (docs/operations.md#the-web-console).
 *
 * /ui redirects to /ui/ (so that the page's relative URLs resolve), /ui/ is
 * index.html, /ui/NAME one of the files; anything else is 404. Every answer
 * forbids loading anything from elsewhere (Content-Security-Policy
 * default-src 'self') and framing; files carry an ETag so that a reload
 * costs a 304.
 */
#include "http/http_internal.h"
#include "core/base/buf.h"

#include <stdio.h>
#include <string.h>

/* Made by scripts/embed-files.sh (build/…/gen/ui_embed.c). */
extern const char *const sl_ui_files_names[];
extern const unsigned char *const sl_ui_files_data[];
extern const size_t sl_ui_files_sizes[];
extern const size_t sl_ui_files_count;

#define CSP "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'"

static const char *content_type(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (!dot)
        return "application/octet-stream";
    if (strcmp(dot, ".html") == 0)
        return "text/html; charset=utf-8";
    if (strcmp(dot, ".js") == 0)
        return "text/javascript; charset=utf-8";
    if (strcmp(dot, ".css") == 0)
        return "text/css; charset=utf-8";
    if (strcmp(dot, ".svg") == 0)
        return "image/svg+xml";
    if (strcmp(dot, ".json") == 0)
        return "application/json";
    return "application/octet-stream";
}

/* FNV-1a of the file: the same build serves the same tag. */
static void etag_of(size_t i, char out[24])
{
    uint64_t h = 1469598103934665603ull;
    for (size_t k = 0; k < sl_ui_files_sizes[i]; k++)
        h = (h ^ sl_ui_files_data[i][k]) * 1099511628211ull;
    snprintf(out, 24, "\"%016llx\"", (unsigned long long)h);
}

static enum MHD_Result not_found(sl_http_req *r, const char *rest)
{
    return sl__http_error(r, 404, "NotFound", "no such file in the console: /ui%s", rest);
}

enum MHD_Result sl__http_ui(sl_http_req *r, const char *rest)
{
    const char *sec[] = {"Content-Security-Policy",
                         CSP,
                         "X-Content-Type-Options",
                         "nosniff",
                         "Referrer-Policy",
                         "no-referrer",
                         NULL};
    if (!*rest) { /* "/ui": the page's relative URLs need the slash */
        sl_buf b = SL_BUF_INIT;
        sl_buf_printf(&b, "moved to /ui/\n");
        const char *h[] = {"Location", "/ui/", NULL};
        return sl__http_reply_hdrs(r, 301, &b, "text/plain; charset=utf-8", h);
    }
    const char *name = rest[1] ? rest + 1 : "index.html";
    if (rest[0] != '/' || strchr(name, '/'))
        return not_found(r, rest);
    for (size_t i = 0; i < sl_ui_files_count; i++) {
        if (strcmp(sl_ui_files_names[i], name) != 0)
            continue;
        char etag[24];
        etag_of(i, etag);
        const char *hdrs[] = {sec[0], sec[1], sec[2],          sec[3],     sec[4], sec[5],
                              "ETag", etag,   "Cache-Control", "no-cache", NULL};
        const char *inm =
            MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
        sl_buf b = SL_BUF_INIT;
        if (inm && strstr(inm, etag))
            return sl__http_reply_hdrs(r, 304, &b, content_type(name), hdrs);
        if (sl_buf_append(&b, sl_ui_files_data[i], sl_ui_files_sizes[i])) {
            sl_buf_free(&b);
            return sl__http_error(r, 503, "OutOfMemory", "no memory for /ui/%s", name);
        }
        return sl__http_reply_hdrs(r, 200, &b, content_type(name), hdrs);
    }
    return not_found(r, rest);
}
