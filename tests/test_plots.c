/*
 * The README's charts are what scripts/plot makes of the committed run records (`make plots`):
 * rendered again into a scratch directory, each must equal its committed file byte for byte, and
 * a file that is not a run record is refused with a message naming it; the op-by-op chart is drawn
 * for a record with a profiled step, and only then. Skipped where no python3
 * has matplotlib (CI installs Debian's python3-matplotlib); the comparison is skipped where the
 * matplotlib or FreeType differs from the ones that drew the committed charts (rendered-with.txt):
 * those draw other bytes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

static const char *const charts[] = {"loss.png", "step-time.png", "bench-moe.png", "ops.png"};

/* A shell command running `python3 ARGS` with the first python3 that has matplotlib (the Makefile's
 * PLOT_PYTHON finds it the same way); exit 1 where none has it. */
static const char *with_matplotlib(char *cmd, size_t len, const char *args) {
    snprintf(cmd, len, "for p in python3 /usr/bin/python3; do $p -c 'import matplotlib' 2>/dev/null && exec $p %s; "
             "done; exit 1", args);
    return cmd;
}

static int have_matplotlib(void) {
    char cmd[512], out[256];
    return test_run(with_matplotlib(cmd, sizeof cmd, "-c pass"), out, sizeof out) == 0;
}

static void test_committed_charts_render_from_records(void) {
    if (!have_matplotlib()) {
        test_skip("no python3 with matplotlib (Debian: apt-get install python3-matplotlib)");
        return;
    }
    const char *dir = test_tmpdir();
    char cmd[4400], out[16384];
    snprintf(cmd, sizeof cmd, "make --no-print-directory -s plots PLOT_OUT=%s", dir);
    int rc = test_run(cmd, out, sizeof out);
    CHECK_MSG(rc == 0, "make plots failed (%d): %s", rc, out);
    char here[4400], versions[256];
    snprintf(here, sizeof here, "cat %s/rendered-with.txt", dir);
    test_run(here, versions, sizeof versions);
    snprintf(here, sizeof here, "cmp -s %s/rendered-with.txt docs/charts/rendered-with.txt", dir);
    if (test_run(here, out, sizeof out) != 0) {
        static char why[512];
        versions[strcspn(versions, "\n")] = 0;
        snprintf(why, sizeof why, "this machine draws with %s, not what drew docs/charts (rendered-with.txt)",
                 versions);
        test_skip(why);
        return;
    }
    for (size_t i = 0; i < sizeof charts / sizeof charts[0]; i++) {
        char a[4400], b[256];
        snprintf(a, sizeof a, "cmp %s/%s docs/charts/%s", dir, charts[i], charts[i]);
        CHECK_MSG(test_run(a, b, sizeof b) == 0,
                  "docs/charts/%s is not what the committed records render (run `make plots` and commit): %s",
                  charts[i], b);
    }
}

static void test_plot_refuses_a_file_that_is_not_a_record(void) {
    if (!have_matplotlib()) {
        test_skip("no python3 with matplotlib (Debian: apt-get install python3-matplotlib)");
        return;
    }
    const char *dir = test_tmpdir();
    char path[4300], args[9000], cmd[9200], out[4096];
    snprintf(path, sizeof path, "%s/not-a-record.jsonl", dir);
    test_write_file(path, "{\"step\": 1, \"loss\": 2.5}\n");
    snprintf(args, sizeof args, "scripts/plot --out %s/charts %s", dir, path);
    CHECK_EQ_INT(test_run(with_matplotlib(cmd, sizeof cmd, args), out, sizeof out), 1);
    CHECK_STR_CONTAINS(out, "not-a-record.jsonl has no header line");
}

/* ops.png: drawn from a training record whose profiled step carries op_ms, and not from one without. */
static void test_plot_draws_the_profiled_step(void) {
    if (!have_matplotlib()) {
        test_skip("no python3 with matplotlib (Debian: apt-get install python3-matplotlib)");
        return;
    }
    static const char *const header =
        "{\"record\": \"mokc run\", \"command\": \"train\", \"argv\": [\"mokc\", \"train\", \"tiny.json\"], "
        "\"backend\": \"cuda\", \"world\": {\"ranks\": 1}}\n";
    static const char *const step1 = "{\"step\": 1, \"loss\": 3.5}\n";
    static const char *const step2 =
        "{\"step\": 2, \"loss\": 3.25, \"op_ms\": {\"moe bwd\": {\"part\": \"moe\", \"calls\": 2, \"ms\": 5.5}, "
        "\"adamw\": {\"part\": \"optimizer\", \"calls\": 1, \"ms\": 2.0}}}\n";
    const char *dir = test_tmpdir();
    for (int profiled = 0; profiled < 2; profiled++) {
        char path[4300], text[1024], args[9000], cmd[9200], out[4096];
        snprintf(path, sizeof path, "%s/train-%d.jsonl", dir, profiled);
        snprintf(text, sizeof text, "%s%s%s", header, step1, profiled ? step2 : "{\"step\": 2, \"loss\": 3.25}\n");
        test_write_file(path, "%s", text);
        snprintf(args, sizeof args, "scripts/plot --out %s/charts-%d %s", dir, profiled, path);
        CHECK_EQ_INT(test_run(with_matplotlib(cmd, sizeof cmd, args), out, sizeof out), 0);
        snprintf(cmd, sizeof cmd, "test -s %s/charts-%d/ops.png", dir, profiled);
        CHECK_MSG((test_run(cmd, out, sizeof out) == 0) == profiled, "ops.png %s for a record %s op_ms",
                  profiled ? "missing" : "drawn", profiled ? "with" : "without");
    }
}

/* A record cut short or edited (a field a chart reads missing) and an --out that cannot be made each
 * stop with one message naming them and exit 1, never a Python traceback. */
static void test_plot_refuses_missing_fields_and_an_unwritable_out(void) {
    if (!have_matplotlib()) {
        test_skip("no python3 with matplotlib (Debian: apt-get install python3-matplotlib)");
        return;
    }
    static const char *const train = "{\"record\": \"mokc run\", \"command\": \"train\"}\n";
    static const char *const bench = "{\"record\": \"mokc run\", \"command\": \"bench moe\"}\n";
    static const struct {
        const char *header, *row, *says;
    } cases[] = {
        {train, "{\"step\": 1, \"loss\": 2.5, \"gpu_ms\": {\"attention\": 1.0}}",
         ":2: step 1 has no usable \"gpu_ms.moe\""},
        {train, "{\"step\": 1, \"loss\": 2.5, \"op_ms\": {\"adamw\": {\"part\": \"optimizer\"}}}",
         "step 1 has no usable \"op_ms.adamw.ms\""},
        {bench, "{\"bench\": \"moe\", \"ep\": 1, \"impl\": \"mok\", \"fwd_tflops\": 400}",
         ":2: a bench moe row has no usable \"shape\""},
        {bench, "{\"bench\": \"moe\", \"shape\": \"q\", \"ep\": 1, \"impl\": \"mok\", \"fwd_tflops\": \"fast\"}",
         "has no usable \"fwd_tflops\""},
    };
    const char *dir = test_tmpdir();
    char path[4300], args[9000], cmd[9200], out[4096];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(path, sizeof path, "%s/cut-%zu.jsonl", dir, i);
        test_write_file(path, "%s%s\n", cases[i].header, cases[i].row);
        snprintf(args, sizeof args, "scripts/plot --out %s/charts %s", dir, path);
        CHECK_EQ_INT(test_run(with_matplotlib(cmd, sizeof cmd, args), out, sizeof out), 1);
        CHECK_STR_CONTAINS(out, cases[i].says);
        CHECK_MSG(strstr(out, "Traceback") == NULL, "case %zu: a traceback, not a message: %s", i, out);
    }
    /* --out names a file: the directory cannot be made */
    snprintf(path, sizeof path, "%s/good.jsonl", dir);
    test_write_file(path, "%s{\"step\": 1, \"loss\": 2.5}\n", train);
    snprintf(args, sizeof args, "scripts/plot --out %s %s", path, path);
    CHECK_EQ_INT(test_run(with_matplotlib(cmd, sizeof cmd, args), out, sizeof out), 1);
    CHECK_STR_CONTAINS(out, "cannot write the charts into");
    CHECK_MSG(strstr(out, "Traceback") == NULL, "a traceback, not a message: %s", out);
}

TEST_SUITE(plots, TEST_CASE(test_committed_charts_render_from_records),
           TEST_CASE(test_plot_refuses_a_file_that_is_not_a_record), TEST_CASE(test_plot_draws_the_profiled_step),
           TEST_CASE(test_plot_refuses_missing_fields_and_an_unwritable_out));
