/*
 * tests/fuzz/fuzz_ce_binary.c — CloudEvents binary mode: the input is
 * "Name: value" header lines, a blank line, then the body. The ce-* headers
 * (at most 64, as http/http_ingest.c collects them) and Content-Type go
 * through sl_event_from_binary(); the structured event it builds must be
 * valid JSON, and goes on through ingest's steps (fz_ingest_event).
 */
#include "tests/fuzz/fuzzutil.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static fz_binary b;
    fz_binary_split(&b, (const char *)data, size);
    sl_event_limits lim = {.max_bytes = 1 << 16, .max_depth = SL_EVENT_MAX_DEPTH_DEFAULT};
    sl_buf json = SL_BUF_INIT;
    sl_error err = {0};
    sl_event_status st =
        sl_event_from_binary(b.h, b.n, b.ctype, b.body, b.body_len, &lim, &json, &err);
    if (st == SL_EVENT_OK) {
        char *j = fz_dup(json.data, json.len, false);
        sl_json_tok tok;
        int rc = sl_json_validate(j, json.len, lim.max_depth, &tok, &err);
        FZ_CHECK(rc == 0 && tok.type == SL_JSON_OBJECT,
                 "binary mode built something that is not a JSON object: %s\n%.*s", err.msg,
                 (int)json.len, j);
        fz_ingest_event(j, json.len, &lim, NULL);
        free(j);
    } else {
        FZ_CHECK(json.len == 0, "json_out changed on error");
        FZ_CHECK(err.msg[0], "error without a message");
    }
    sl_buf_free(&json);
    fz_binary_free(&b);
    return 0;
}
