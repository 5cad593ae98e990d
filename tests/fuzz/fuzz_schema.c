/*
 * tests/fuzz/fuzz_schema.c — the JSON Schema subset (rules/schema.h). The
 * first line of the input is a schema; every further line is a data
 * document validated against it. Then schema discovery: the lines that are
 * JSON are fed to the inferrer, whose schema must compile and accept every
 * one of them ("the schema they all satisfy").
 */
#include "rules/schema.h"
#include "tests/fuzz/fuzzutil.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size, *line;
    size_t len;
    if (!fz_line(&p, end, &line, &len))
        return 0;
    char *text = fz_dup(line, len, false);
    sl_schema *s = NULL;
    sl_error err = {0};
    int rc = sl_schema_compile(text, len, &s, &err);
    free(text);
    FZ_CHECK(rc == 0 || rc == SL_EPARSE || rc == SL_EINVAL, "compile: %d", rc);
    if (rc)
        FZ_CHECK(s == NULL && err.msg[0], "compile error without a message or with a schema");
    const char *docs = p;
    while (s && fz_line(&p, end, &line, &len)) {
        char *doc = fz_dup(line, len, false);
        sl_error verr = {0};
        rc = sl_schema_validate(s, doc, len, &verr);
        FZ_CHECK(rc == 0 || rc == SL_EINVAL || rc == SL_EPARSE, "validate: %d", rc);
        if (rc)
            FZ_CHECK(strncmp(verr.msg, "/data", 5) == 0, "message \"%s\"", verr.msg);
        free(doc);
    }
    sl_schema_free(s);

    /* Discovery over the documents (the schema line is left out). */
    sl_schema_infer *inf = NULL;
    FZ_CHECK(sl_schema_infer_new(&inf) == 0, "infer_new");
    p = docs;
    size_t nlines = 0, cap = 0;
    bool *took = NULL; /* which lines the inferrer took as samples */
    while (fz_line(&p, end, &line, &len)) {
        char *doc = fz_dup(line, len, false);
        rc = sl_schema_infer_add(inf, doc, len, &err);
        FZ_CHECK(rc == 0 || rc == SL_EPARSE, "infer_add: %d", rc);
        if (nlines == cap) {
            cap = cap ? 2 * cap : 16;
            took = realloc(took, cap * sizeof *took);
            FZ_CHECK(took, "oom");
        }
        took[nlines++] = rc == 0;
        free(doc);
    }
    char *res = sl_schema_infer_result(inf);
    FZ_CHECK(res, "infer_result");
    sl_schema *is = NULL;
    rc = sl_schema_compile(res, strlen(res), &is, &err);
    FZ_CHECK(rc == 0, "the inferred schema does not compile: %s\n%s", err.msg, res);
    p = docs;
    for (size_t i = 0; fz_line(&p, end, &line, &len); i++) {
        if (!took[i])
            continue;
        char *doc = fz_dup(line, len, false);
        sl_error verr = {0};
        rc = sl_schema_validate(is, doc, len, &verr);
        FZ_CHECK(rc == 0, "a sample fails its inferred schema: %s\n%s\n%.*s", verr.msg, res,
                 (int)len, doc);
        free(doc);
    }
    free(took);
    sl_schema_free(is);
    free(res);
    sl_schema_infer_free(inf);
    return 0;
}
