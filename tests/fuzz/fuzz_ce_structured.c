/*
 * tests/fuzz/fuzz_ce_structured.c — CloudEvents structured mode
 * (Content-Type: application/cloudevents+json): the input is the request
 * body, one event, run through ingest's steps (fz_ingest_event: parse, lane,
 * encode, re-parse of the stored and read-back forms, binding helpers) with
 * the default limits, then with small ones (4 KiB, depth 8, generated ids)
 * and a request lane.
 */
#include "tests/fuzz/fuzzutil.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *json = fz_dup(data, size, false);
    sl_event_limits def = {.max_bytes = SL_EVENT_MAX_BYTES_DEFAULT,
                           .max_depth = SL_EVENT_MAX_DEPTH_DEFAULT};
    sl_event_limits small = {.max_bytes = 4096, .max_depth = 8, .generate_ids = true};
    fz_ingest_event(json, size, &def, NULL);
    fz_ingest_event(json, size, &small, "feature-x");
    free(json);
    return 0;
}
