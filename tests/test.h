/*
 * The test harness: assertion macros that record a failure with file, line and values and go on,
 * suites of named cases, and a runner (runner.c) that runs everything or the cases whose
 * "suite.case" name starts with a filter, ending with the line "N passed, N failed, N skipped".
 */
#ifndef MOKC_TEST_H
#define MOKC_TEST_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    void (*fn)(void);
} TestCase;

typedef struct {
    const char *name;
    const TestCase *cases;
    int count;
} TestSuite;

/* Implemented in runner.c. */
void test_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void test_skip(const char *why);
/* Path of the built mokc binary (for tests that run it as a user would). */
const char *test_mokc_binary(void);
/* A fresh directory under the test scratch root, unique per call. */
const char *test_tmpdir(void);
/* Runs a shell command with stdout and stderr captured into out (NUL-terminated, truncated to
 * outlen); returns its exit status (-1 if it did not exit normally, e.g. a crash). */
int test_run(const char *command, char *out, size_t outlen);
/* Whether the shell finds the program `tool` (mpirun, taskset, ...). */
bool test_have(const char *tool);
/* The start of the tests' mpirun lines: as root too, more ranks than cores, 120 s at most (a hang fails, 124). */
#define TEST_MPIRUN "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 mpirun --oversubscribe"
/* A disk that fills on one rank: an mpirun line (120 s at most) of one rank running `others` (NULL: none) and then
 * one running `capped`, whose files may grow to `kib` KiB, its writes past that failing with EFBIG (SIGXFSZ
 * ignored). TCP between the ranks: shared memory's files (and a lone process's MPI start-up) need more room.
 * `capped` goes inside bash -c "...": no double quotes, dollar signs or backquotes in it. */
const char *test_mpirun_capped_rank(char *cmd, size_t len, const char *others, int kib, const char *capped);
/* The lines of a JSON-lines file (a run record) when each is a whole JSON object and the file ends with a whole
 * line (0: empty); otherwise records a failure naming the line and returns -1. */
int test_json_lines(const char *path);
/* Reads the number after "key": from each line of a JSON-lines metrics file (a train run's
 * log.metrics_path), up to max values; returns how many were read (0 if the file is missing). */
int test_read_metric(const char *path, const char *key, double *values, int max);
/* Runs `mokc prepare --text LICENSE --out DIR/corpus.h5 --val-fraction F` (F > 0: DIR/corpus-val.h5
 * too), the fixed corpus of the end-to-end tests; returns 0, or records a failure and returns -1. */
int test_prepare_corpus(const char *dir, double val_fraction);
/* The whole file at path, NUL-terminated (malloc'ed: the caller frees it), or NULL if it cannot be read. */
char *test_read_text(const char *path);
/* Writes printf-formatted text to path (a spec, a config); returns 0, or records a failure and
 * returns -1. */
int test_write_file(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));


#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);      \
    } while (0)

#define CHECK_MSG(cond, ...)                                                 \
    do {                                                                     \
        if (!(cond)) test_fail(__FILE__, __LINE__, __VA_ARGS__);             \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                   \
    do {                                                                     \
        long long _a = (long long)(a), _b = (long long)(b);                  \
        if (_a != _b) test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, _a, _b); \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                \
    do {                                                                     \
        double _a = (double)(a), _b = (double)(b);                           \
        if (!(fabs(_a - _b) <= (tol)))                                       \
            test_fail(__FILE__, __LINE__, "|%s - %s| = |%.9g - %.9g| > %g", #a, #b, _a, _b, (double)(tol)); \
    } while (0)

#define CHECK_STR_CONTAINS(haystack, needle)                                 \
    do {                                                                     \
        const char *_h = (haystack), *_n = (needle);                         \
        if (!_h || !strstr(_h, _n))                                          \
            test_fail(__FILE__, __LINE__, "expected \"%s\" in: %s", _n, _h ? _h : "(null)"); \
    } while (0)

/* ||a - b|| / ||b|| over n doubles. */
static inline double rel_error(const double *a, const double *b, long n) {
    double num = 0, den = 0;
    for (long i = 0; i < n; i++) {
        double d = a[i] - b[i];
        num += d * d;
        den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

#define TEST_SUITE(suite_name, ...)                                          \
    static const TestCase suite_name##_cases[] = {__VA_ARGS__};              \
    const TestSuite suite_##suite_name = {#suite_name, suite_name##_cases,   \
        (int)(sizeof(suite_name##_cases) / sizeof(TestCase))}
#define TEST_CASE(fn) {#fn, fn}

#endif
