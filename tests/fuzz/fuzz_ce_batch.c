/*
 * tests/fuzz/fuzz_ce_batch.c — CloudEvents batched mode
 * (application/cloudevents-batch+json): the body is a JSON array of events.
 * As http/http_ingest.c parse_batch does: the whole body is validated with
 * the event depth + 1, must be an array, and each element goes through
 * ingest's steps (fz_ingest_event) on its own.
 */
#include "tests/fuzz/fuzzutil.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *body = fz_dup(data, size, false);
    sl_event_limits lim = {.max_bytes = SL_EVENT_MAX_BYTES_DEFAULT,
                           .max_depth = SL_EVENT_MAX_DEPTH_DEFAULT};
    sl_json_tok arr, el;
    sl_error err = {0};
    if (sl_json_validate(body, size, lim.max_depth + 1, &arr, &err) == 0 &&
        arr.type == SL_JSON_ARRAY) {
        sl_json_iter it;
        sl_json_iter_init(&it, &arr);
        size_t n = 0;
        while (sl_json_iter_elem(&it, &el)) {
            FZ_CHECK(el.p >= body && el.p + el.len <= body + size, "element outside the body");
            fz_ingest_event(el.p, el.len, &lim, n & 1 ? "lane-b" : NULL);
            n++;
        }
    }
    free(body);
    return 0;
}
