/* Runs every test case, or those whose "suite.case" starts with argv[1]; exits 1 on any failure. */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test.h"
#include "suites.h"

static int current_failures;
static const char *skip_reason;
static char mokc_binary[4096] = "./mokc";
static char scratch_root[4096];
static int tmp_counter;

void test_fail(const char *file, int line, const char *fmt, ...) {
    current_failures++;
    if (current_failures > 20) return; /* one broken loop should not bury the report */
    fprintf(stderr, "    FAIL %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void test_skip(const char *why) { skip_reason = why; }
const char *test_mokc_binary(void) { return mokc_binary; }

const char *test_tmpdir(void) {
    static char path[4200];
    snprintf(path, sizeof path, "%s/t%03d", scratch_root, tmp_counter++);
    if (mkdir(path, 0755) != 0) {
        fprintf(stderr, "cannot create scratch directory %s\n", path);
        exit(1);
    }
    return path;
}

int test_run(const char *command, char *out, size_t outlen) {
    char wrapped[8192];
    snprintf(wrapped, sizeof wrapped, "( %s ) 2>&1", command);
    FILE *p = popen(wrapped, "r");
    if (!p) return -1;
    size_t n = 0;
    int c;
    while ((c = fgetc(p)) != EOF)
        if (n + 1 < outlen) out[n++] = (char)c;
    if (outlen) out[n] = 0;
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int test_read_metric(const char *path, const char *key, double *values, int max) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[4096], pattern[128];
    snprintf(pattern, sizeof pattern, "\"%s\": ", key);
    int n = 0;
    while (n < max && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, pattern);
        if (p) values[n++] = strtod(p + strlen(pattern), NULL);
    }
    fclose(f);
    return n;
}

int test_prepare_corpus(const char *dir, double val_fraction) {
    char cmd[8000], out[4096]; /* test_run wraps the command in a buffer of 8192 */
    snprintf(cmd, sizeof cmd, "%s prepare --text LICENSE --out %s/corpus.h5 --val-fraction %g", mokc_binary, dir,
             val_fraction);
    int rc = test_run(cmd, out, sizeof out);
    if (rc == 0) return 0;
    test_fail(__FILE__, __LINE__, "prepare into %s failed (%d): %s", dir, rc, out);
    return -1;
}

char *test_read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *s = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (s = malloc((size_t)n + 1)) != NULL) s[fread(s, 1, (size_t)n, f)] = 0;
    fclose(f);
    return s;
}

int test_json_lines(const char *path) {
    char *text = test_read_text(path);
    if (!text) {
        test_fail(__FILE__, __LINE__, "cannot read %s", path);
        return -1;
    }
    const size_t len = strlen(text);
    int lines = 0, bad = len > 0 && text[len - 1] != '\n';
    if (bad) test_fail(__FILE__, __LINE__, "%s ends in a part of a line", path);
    for (char *line = strtok(text, "\n"); line && !bad; line = strtok(NULL, "\n"), lines++) {
        cJSON *o = cJSON_Parse(line);
        if (!cJSON_IsObject(o))
            bad = 1, test_fail(__FILE__, __LINE__, "line %d of %s is not a whole JSON object: %.200s", lines + 1, path,
                               line);
        cJSON_Delete(o);
    }
    free(text);
    return bad ? -1 : lines;
}

bool test_have(const char *tool) {
    char cmd[256], out[256];
    snprintf(cmd, sizeof cmd, "command -v '%s'", tool);
    return test_run(cmd, out, sizeof out) == 0;
}

const char *test_mpirun_capped_rank(char *cmd, size_t len, const char *others, int kib, const char *capped) {
    snprintf(cmd, len, TEST_MPIRUN " --mca btl self,tcp %s%s%s -np 1 bash -c \"trap '' XFSZ; ulimit -f %d; exec %s\"", others ? "-np 1 " : "",
             others ? others : "", others ? " :" : "", kib, capped); /* bash's ulimit -f counts KiB */
    return cmd;
}

int test_write_file(const char *path, const char *fmt, ...) {
    FILE *f = fopen(path, "w");
    if (!f) {
        test_fail(__FILE__, __LINE__, "cannot write %s", path);
        return -1;
    }
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    if (fclose(f) != 0) {
        test_fail(__FILE__, __LINE__, "cannot write %s", path);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *filter = argc > 1 ? argv[1] : "";
    const char *bin = getenv("MOKC_BIN");
    if (bin) snprintf(mokc_binary, sizeof mokc_binary, "%s", bin);
    char templ[] = "/tmp/mokc-test-XXXXXX";
    if (!mkdtemp(templ)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(scratch_root, sizeof scratch_root, "%s", templ);
    int passed = 0, failed = 0, skipped = 0;
    for (int s = 0; s < n_all_suites; s++) {
        const TestSuite *suite = all_suites[s];
        for (int c = 0; c < suite->count; c++) {
            char full[256];
            snprintf(full, sizeof full, "%s.%s", suite->name, suite->cases[c].name);
            if (strncmp(full, filter, strlen(filter)) != 0) continue;
            current_failures = 0;
            skip_reason = NULL;
            fflush(stdout);
            suite->cases[c].fn();
            if (current_failures) {
                printf("FAIL  %s (%d failed checks)\n", full, current_failures);
                failed++;
            } else if (skip_reason) {
                printf("skip  %s: %s\n", full, skip_reason);
                skipped++;
            } else {
                printf("ok    %s\n", full);
                passed++;
            }
        }
    }
    if (passed + failed + skipped == 0) {
        fprintf(stderr, "no test matches '%s'\n", filter);
        return 2;
    }
    if (!failed) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch_root);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", scratch_root);
    } else {
        fprintf(stderr, "scratch files kept in %s\n", scratch_root);
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
