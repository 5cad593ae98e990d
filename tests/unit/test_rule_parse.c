/*
 * tests/unit/test_rule_parse.c — source.file's parse = function(line) through
 * the rule VM (rules/rule.h: sl_rule_vm_parse): each source finds its own
 * function by its place among the sources; nil/false skip, strings are
 * text, tables JSON data or (with specversion) a whole event; errors,
 * budgets and bad results are refused with the output left as it was;
 * lines with any bytes reach Lua whole.
 */
#include "testutil.h"

#include "server/config.h"
#include "rules/rule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fixture {
    char *dir;
    sl_config *cfg;
    sl_rule_vm *vm;
} fixture;

static const char *CONFIG =
    "server { lua_instructions = 100000 }\n"
    "set \"logs\" { partitions = 1 }\n"
    "source.file { name = \"plain\", path = \"/tmp/x/*.log\", set = \"logs\" }\n"
    "source.file { name = \"fn\", path = \"/tmp/y/*.log\", set = \"logs\",\n"
    "  parse = function(line)\n"
    "    if line == 'skip' then return nil end\n"
    "    if line == 'false' then return false end\n"
    "    if line == 'boom' then error('boom') end\n"
    "    if line == 'loop' then while true do end end\n"
    "    if line == 'num' then return 42 end\n"
    "    if line == 'fn' then return { f = print } end\n"
    "    if line == 'ce' then return { specversion = '1.0', id = 'i', source = '/s', type = 't' } "
    "end\n"
    "    if line:sub(1, 2) == 't:' then return { text = line:sub(3), n = #line } end\n"
    "    return 'S' .. line\n"
    "  end }\n"
    "source.file { name = \"other\", path = \"/tmp/z/*.log\", set = \"logs\",\n"
    "  parse = function(line) return { other = line } end }\n";

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->dir = tu_tmpdir();
    char path[4096];
    snprintf(path, sizeof path, "%s/sluice.lua", f->dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(CONFIG, fp);
    fclose(fp);
    sl_buf d = SL_BUF_INIT;
    int rc = sl_config_load(path, &f->cfg, &d);
    if (rc)
        fail_msg("config: %.*s", (int)d.len, d.data ? (char *)d.data : "");
    sl_buf_free(&d);
    sl_error err = {0};
    sl_ruleset rs;
    sl_config_ruleset(f->cfg, &rs);
    if (sl_rule_vm_new(&rs, &f->vm, &err))
        fail_msg("vm: %s", err.msg);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    sl_rule_vm_free(f->vm);
    sl_config_free(f->cfg);
    tu_rmdir(f->dir);
    free(f);
    return 0;
}

/* Parses line with source i; returns the code, *kind and out as a string. */
static int parse(fixture *f, size_t i, const char *line, size_t len, sl_rule_parsed *kind,
                 sl_buf *out, sl_error *err)
{
    int rc = sl_rule_vm_parse(f->vm, i, line, len, out, kind, err);
    sl_buf_append(out, "", 1);
    out->len--;
    return rc;
}

static void test_results(void **state)
{
    fixture *f = *state;
    assert_false(sl_rule_vm_has_parse(f->vm, 0));
    assert_true(sl_rule_vm_has_parse(f->vm, 1));
    assert_true(sl_rule_vm_has_parse(f->vm, 2));
    assert_false(sl_rule_vm_has_parse(f->vm, 3));
    sl_buf out = SL_BUF_INIT;
    sl_rule_parsed k;
    sl_error err = {0};
    assert_int_equal(parse(f, 1, "hello", 5, &k, &out, &err), 0);
    assert_int_equal(k, SL_PARSED_TEXT);
    assert_string_equal((char *)out.data, "Shello");
    out.len = 0;
    assert_int_equal(parse(f, 1, "skip", 4, &k, &out, &err), 0);
    assert_int_equal(k, SL_PARSED_SKIP);
    assert_int_equal(out.len, 0);
    assert_int_equal(parse(f, 1, "false", 5, &k, &out, &err), 0);
    assert_int_equal(k, SL_PARSED_SKIP);
    assert_int_equal(parse(f, 1, "t:abc", 5, &k, &out, &err), 0);
    assert_int_equal(k, SL_PARSED_DATA);
    /* Key order is the table's: check both members rather than the text. */
    assert_non_null(strstr((char *)out.data, "\"text\":\"abc\""));
    assert_non_null(strstr((char *)out.data, "\"n\":5"));
    out.len = 0;
    assert_int_equal(parse(f, 1, "ce", 2, &k, &out, &err), 0);
    assert_int_equal(k, SL_PARSED_EVENT);
    assert_non_null(strstr((char *)out.data, "\"specversion\":\"1.0\""));
    out.len = 0;
    /* Each source has its own function. */
    assert_int_equal(parse(f, 2, "x", 1, &k, &out, &err), 0);
    assert_int_equal(k, SL_PARSED_DATA);
    assert_string_equal((char *)out.data, "{\"other\":\"x\"}");
    /* Appends: what was there stays. */
    assert_int_equal(parse(f, 1, "y", 1, &k, &out, &err), 0);
    assert_string_equal((char *)out.data, "{\"other\":\"x\"}Sy");
    /* Any bytes reach Lua (NUL included). */
    out.len = 0;
    assert_int_equal(parse(f, 1, "a\0b", 3, &k, &out, &err), 0);
    assert_int_equal(out.len, 4);
    assert_memory_equal(out.data, "Sa\0b", 4);
    sl_buf_free(&out);
}

static void test_failures(void **state)
{
    fixture *f = *state;
    sl_buf out = SL_BUF_INIT;
    sl_buf_append(&out, "keep", 4);
    sl_rule_parsed k;
    sl_error err = {0};
    assert_int_equal(parse(f, 1, "boom", 4, &k, &out, &err), SL_ESCRIPT);
    assert_non_null(strstr(err.msg, "boom"));
    assert_non_null(strstr(err.msg, "\"fn\""));
    assert_int_equal(parse(f, 1, "loop", 4, &k, &out, &err), SL_EBUDGET);
    assert_int_equal(parse(f, 1, "num", 3, &k, &out, &err), SL_EINVAL);
    assert_non_null(strstr(err.msg, "number"));
    assert_int_equal(parse(f, 1, "fn", 2, &k, &out, &err), SL_EINVAL);
    assert_int_equal(parse(f, 0, "x", 1, &k, &out, &err), SL_EINVAL);
    assert_int_equal(parse(f, 9, "x", 1, &k, &out, &err), SL_EINVAL);
    assert_string_equal((char *)out.data, "keep");
    /* The state is still good. */
    assert_int_equal(parse(f, 1, "ok", 2, &k, &out, &err), 0);
    assert_string_equal((char *)out.data, "keepSok");
    sl_buf_free(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_results, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failures, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
