/*
 * tests/fuzz/replay.c — main() for replaying a fuzz harness's inputs in
 * `make test`, without libFuzzer: the harness tests/fuzz/fuzz_NAME.c is
 * linked with this file under gcc ASan+UBSan into build/san/tests/
 * test_fuzz_NAME. Two cmocka tests: every committed seed
 * (tests/fuzz/corpus/NAME/) and every regression input (tests/fuzz/regress/
 * NAME/, one per fixed finding) goes through LLVMFuzzerTestOneInput() once.
 * A crash, a sanitizer report, a failed oracle or an input running longer
 * than REPLAY_TIMEOUT seconds kills the process (scripts/run-tests.sh counts
 * that as a failure and shows the output, whose last "replay:" line names
 * the input). Paths are relative to the repository root, where run-tests.sh
 * runs; SLUICE_FUZZ_ROOT overrides it.
 */
#include "tests/fuzz/fuzzutil.h"

#include <dirent.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#ifndef FUZZ_NAME
#error "build with -DFUZZ_NAME=\"name\""
#endif

#define REPLAY_TIMEOUT 60

/* Optional in a harness, as in libFuzzer. */
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static char current[1024];

static void on_alarm(int sig)
{
    (void)sig;
    static const char m[] = "replay: timed out (a hang) on the input named above\n";
    if (write(2, m, sizeof m - 1) < 0) {
    }
    abort();
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every regular file of dir through the harness, in name order.
 * Returns how many ran; a missing directory fails the test unless
 * may_be_empty. */
static int replay_dir(const char *dir, bool may_be_empty)
{
    DIR *d = opendir(dir);
    if (!d) {
        if (may_be_empty)
            return 0;
        fail_msg("replay: cannot open %s (run from the repository root)", dir);
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || strcmp(e->d_name, "README.md") == 0)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            names = realloc(names, cap * sizeof *names);
            assert_non_null(names);
        }
        names[n] = strdup(e->d_name);
        assert_non_null(names[n]);
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, by_name);
    int ran = 0;
    for (size_t i = 0; i < n; i++) {
        snprintf(current, sizeof current, "%s/%s", dir, names[i]);
        struct stat st;
        if (stat(current, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        FILE *f = fopen(current, "rb");
        assert_non_null(f);
        uint8_t *buf = malloc((size_t)st.st_size + 1);
        assert_non_null(buf);
        size_t got = fread(buf, 1, (size_t)st.st_size, f);
        fclose(f);
        assert_int_equal(got, (size_t)st.st_size);
        /* An exact-size copy: a read past the input is an ASan report. */
        uint8_t *in = got ? malloc(got) : NULL;
        if (got)
            memcpy(in, buf, got);
        free(buf);
        printf("replay: %s\n", current);
        fflush(stdout);
        alarm(REPLAY_TIMEOUT);
        LLVMFuzzerTestOneInput(in, got);
        alarm(0);
        free(in);
        ran++;
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return ran;
}

static const char *root(void)
{
    const char *r = getenv("SLUICE_FUZZ_ROOT");
    return r && *r ? r : ".";
}

static void test_corpus(void **state)
{
    (void)state;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/%s", root(), FUZZ_NAME);
    int ran = replay_dir(dir, false);
    printf("replay: %d seed inputs of %s\n", ran, FUZZ_NAME);
    assert_true(ran > 0);
}

static void test_regress(void **state)
{
    (void)state;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/regress/%s", root(), FUZZ_NAME);
    int ran = replay_dir(dir, true);
    printf("replay: %d regression inputs of %s\n", ran, FUZZ_NAME);
}

int main(int argc, char **argv)
{
    signal(SIGALRM, on_alarm);
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_corpus),
        cmocka_unit_test(test_regress),
    };
    return cmocka_run_group_tests_name("fuzz_" FUZZ_NAME, tests, NULL, NULL);
}
