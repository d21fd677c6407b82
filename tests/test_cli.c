/*
 * The command line as a user meets it: runs the built binary (test_mokc_binary(), so `make asan`
 * checks the sanitized one) and checks exit codes and messages. Usage errors and bad specs exit 2
 * with the problem named on stderr; nothing ever crashes or trips a sanitizer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "test.h"

/* What one run of mokc left behind. */
typedef struct {
    int rc;    /* exit status; 128 + signal when killed; -1 if it could not be run */
    char *out; /* stdout */
    char *err; /* stderr */
} Run;

static char *slurp(FILE *f) {
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 1024 + 1 > cap) buf = realloc(buf, cap *= 2);
        size_t r = f ? fread(buf + len, 1, 1024, f) : 0;
        if (r == 0) break;
        len += r;
    }
    buf[len] = 0;
    return buf;
}

/* Runs `mokc ARGS` through the shell, stdout through a pipe and stderr into a scratch file. */
static Run run_mokc(const char *args) {
    static char err_path[4400];
    if (!err_path[0]) snprintf(err_path, sizeof err_path, "%s/stderr.txt", test_tmpdir());
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>'%s' </dev/null", test_mokc_binary(), args, err_path);
    Run r = {-1, NULL, NULL};
    FILE *p = popen(cmd, "r");
    r.out = slurp(p);
    if (p) {
        int st = pclose(p);
        if (st != -1) r.rc = WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
    }
    FILE *f = fopen(err_path, "r");
    r.err = slurp(f);
    if (f) fclose(f);
    return r;
}

static void run_free(Run *r) {
    free(r->out);
    free(r->err);
}

/* Runs, then checks: no crash or sanitizer report in either stream; the exit code (want_rc, or
 * -1 for "any failure"); every needle in stderr (and the usage errors print nothing on stdout). */
static Run expect_run_at(const char *file, int line, const char *args, int want_rc, const char *const *needles) {
    static const char *const bad[] = {"Segmentation", "AddressSanitizer", "runtime error", "LeakSanitizer",
                                      "core dumped", "Aborted", "free(): ", "double free"};
    Run r = run_mokc(args);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (strstr(r.out, bad[i]) || strstr(r.err, bad[i]))
            test_fail(file, line, "`mokc %s` printed \"%s\":\n%s%s", args, bad[i], r.out, r.err);
    if (r.rc >= 128 || r.rc < 0) test_fail(file, line, "`mokc %s` died (status %d):\n%s", args, r.rc, r.err);
    else if (want_rc >= 0 && r.rc != want_rc)
        test_fail(file, line, "`mokc %s` exited %d, expected %d; stderr:\n%s", args, r.rc, want_rc, r.err);
    else if (want_rc < 0 && r.rc == 0)
        test_fail(file, line, "`mokc %s` exited 0, expected a failure; stderr:\n%s", args, r.err);
    for (int i = 0; needles && needles[i]; i++)
        if (!strstr(r.err, needles[i]))
            test_fail(file, line, "`mokc %s`: expected \"%s\" on stderr:\n%s", args, needles[i], r.err);
    return r;
}
/* EXPECT_FAIL(args, exit code or -1 for "non-zero", stderr needles...): a failing command. */
#define EXPECT_FAIL(args, rc, ...)                                                    \
    do {                                                                              \
        const char *const _needles[] = {__VA_ARGS__, NULL};                           \
        Run _r = expect_run_at(__FILE__, __LINE__, args, rc, _needles);               \
        run_free(&_r);                                                                \
    } while (0)
/* EXPECT_OUTPUT(args, stdout needles...): a command that succeeds and prints on stdout. */
#define EXPECT_OUTPUT(args, ...)                                                      \
    do {                                                                              \
        const char *const _needles[] = {__VA_ARGS__, NULL};                           \
        Run _r = expect_run_at(__FILE__, __LINE__, args, 0, NULL);                    \
        for (int _i = 0; _needles[_i]; _i++)                                          \
            CHECK_MSG(strstr(_r.out, _needles[_i]) != NULL, "`mokc %s`: expected \"%s\" on stdout:\n%s", \
                      args, _needles[_i], _r.out);                                    \
        run_free(&_r);                                                                \
    } while (0)

static const char *write_spec(const char *dir, const char *name, const char *json) {
    static char path[8][4400];
    static int slot;
    char *p = path[slot++ % 8];
    snprintf(p, sizeof path[0], "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (!f) {
        test_fail(__FILE__, __LINE__, "cannot write %s", p);
        return p;
    }
    fputs(json, f);
    fclose(f);
    return p;
}

/* ---------- commands ---------- */

static void no_command(void) {
    const char *const needles[] = {"usage: mokc <command>", "no command", NULL};
    Run r = expect_run_at(__FILE__, __LINE__, "", 2, needles);
    CHECK_MSG(r.out[0] == 0, "a usage error wrote to stdout: %s", r.out);
    run_free(&r);
}

static void unknown_command(void) {
    EXPECT_FAIL("frobnicate", 2, "unknown command", "frobnicate", "usage: mokc <command>");
    EXPECT_FAIL("--frobnicate", 2, "unknown command");
    EXPECT_FAIL("TRAIN configs/tiny.json", 2, "unknown command");
}

static void version(void) {
    EXPECT_OUTPUT("version", "mokc ", "cJSON", "HDF5", "MPI");
    EXPECT_OUTPUT("--version", "mokc ");
}

static void help(void) {
    EXPECT_OUTPUT("help", "usage: mokc <command>", "train", "prepare", "bench", "check", "version");
    EXPECT_OUTPUT("--help", "usage: mokc <command>");
    EXPECT_OUTPUT("help train", "mokc train SPEC.json", "--set");
    EXPECT_OUTPUT("train --help", "mokc train SPEC.json");
    EXPECT_OUTPUT("help config", "model.vocab_size", "model.num_kv_heads", "moe.num_experts", "num_local_experts",
                  "moe.scoring_func", "\"softmax\", \"sigmoid\"", "parallel.ep", "train.lr_schedule", "train.seed",
                  "data.train", "data.val_every", "checkpoint.resume", "log.metrics_path", "backend", "moe_impl",
                  "required");
    EXPECT_OUTPUT("help config --markdown", "| key | type | default |", "| `model.hidden_size` |");
    EXPECT_FAIL("help frobnicate", 2, "frobnicate");
}

/* Whether this mokc has the CUDA backend (its version line says cuda=off where not). */
static bool built_with_cuda(void) {
    Run v = run_mokc("version");
    const bool with_cuda = strstr(v.out, "cuda=off") == NULL;
    run_free(&v);
    return with_cuda;
}

static bool have_gpu(void) { return system("nvidia-smi -L >/dev/null 2>&1") == 0; }

static void not_built_yet(void) {
    /* Plainly unavailable: non-zero, says so, prints no results on stdout. `mokc bench` exists only in builds with
     * the CUDA backend. */
    const bool with_cuda = built_with_cuda();
    const char *const not_built[] = {"not built yet", NULL};
    const char *cmds[] = {"bench", "bench moe --config configs/tiny.json"};
    if (!with_cuda) {
        for (int i = 0; i < 2; i++) {
            Run r = expect_run_at(__FILE__, __LINE__, cmds[i], -1, not_built);
            CHECK_MSG(r.out[0] == 0, "`mokc %s` printed on stdout: %s", cmds[i], r.out);
            run_free(&r);
        }
        return;
    }
    const char *const which[] = {"needs a benchmark", NULL};
    Run r = expect_run_at(__FILE__, __LINE__, "bench", 2, which);
    run_free(&r);
    const char *const misspelt[] = {"unknown option '--acumulate'", NULL}; /* not "needs a value" */
    r = expect_run_at(__FILE__, __LINE__, "bench moe --config configs/tiny.json --acumulate", 2, misspelt);
    run_free(&r);
    /* a routing the timed layer does not take is refused, not ignored */
    const char *const skew_alone[] = {"--skew is a routing of --check", "--collapse", NULL};
    r = expect_run_at(__FILE__, __LINE__, "bench moe --config configs/tiny.json --skew", 2, skew_alone);
    run_free(&r);
    const char *const two_routings[] = {"--skew and --collapse", "give one", NULL};
    r = expect_run_at(__FILE__, __LINE__, "bench moe --check --skew --collapse --config configs/tiny.json", 2,
                      two_routings);
    run_free(&r);
    if (!have_gpu()) { /* without a GPU the benchmark says so instead of printing numbers (its flags parsed first) */
        const char *const no_gpu[] = {"no GPU", NULL};
        const char *const benches[] = {"bench moe --config configs/tiny.json",
                                       "bench moe --config configs/tiny.json --accumulate --comm-blocks 4",
                                       "bench moe --config configs/tiny.json --collapse"};
        for (int i = 0; i < 3; i++) {
            r = expect_run_at(__FILE__, __LINE__, benches[i], 1, no_gpu);
            CHECK_MSG(r.out[0] == 0, "`mokc %s` printed on stdout without a GPU: %s", benches[i], r.out);
            run_free(&r);
        }
    }
}

/* ---------- check ---------- */

static void check_usage_errors(void) {
    EXPECT_FAIL("check", 2, "no spec", "usage: mokc check");
    EXPECT_FAIL("check configs/tiny.json --bogus", 2, "unknown option '--bogus'", "usage: mokc check");
    EXPECT_FAIL("check configs/tiny.json configs/tiny.json", 2, "more than one spec");
    EXPECT_FAIL("check configs/tiny.json --layers", 2, "--layers needs a value");
    EXPECT_FAIL("check configs/tiny.json --set", 2, "--set needs a value");
    EXPECT_FAIL("check configs/tiny.json --layers 0", 2, "--layers 0: give a whole number from 1 to 4",
                "model.num_layers");
    EXPECT_FAIL("check configs/tiny.json --layers 5", 2, "--layers 5: give a whole number from 1 to 4");
    EXPECT_FAIL("check configs/tiny.json --tokens 3x", 2, "--tokens 3x", "model.max_seq_len");
    EXPECT_FAIL("check configs/tiny.json --tokens 129", 2, "--tokens 129: give a whole number from 1 to 128");
    /* the spec is validated as `mokc train` validates it, every problem named */
    EXPECT_FAIL("check configs/tiny.json --set moe.num_experts_per_tok=9 --set model.bogus=1", 2,
                "moe.num_experts_per_tok", "model.bogus");
    EXPECT_FAIL("check /nonexistent/spec.json", 2, "/nonexistent/spec.json");
    EXPECT_OUTPUT("help check", "usage: mokc check SPEC.json", "--layers", "--tokens", "twice the loss");
    EXPECT_OUTPUT("check --help", "usage: mokc check SPEC.json");
    /* what it needs, said before anything runs: a CUDA build, and a GPU */
    const bool with_cuda = built_with_cuda();
    if (with_cuda && have_gpu()) return; /* tests/gpu/test_gpu_check.c runs it */
    const char *const needs_cuda[] = {"built without the CUDA backend", "build with nvcc", NULL};
    const char *const needs_gpu[] = {"no GPU visible", "nvidia-smi", NULL};
    Run r = expect_run_at(__FILE__, __LINE__, "check configs/tiny.json", 2, with_cuda ? needs_gpu : needs_cuda);
    CHECK_MSG(r.out[0] == 0, "`mokc check` printed on stdout without a GPU: %s", r.out);
    run_free(&r);
}

/* ---------- train: argument errors ---------- */

static void train_usage_errors(void) {
    EXPECT_FAIL("train", 2, "no spec", "usage: mokc train");
    EXPECT_FAIL("train configs/tiny.json --bogus", 2, "--bogus", "usage: mokc train");
    EXPECT_FAIL("train --steps=3 configs/tiny.json", 2, "--steps=3");
    EXPECT_FAIL("train configs/tiny.json --set", 2, "--set", "key.path=value");
    EXPECT_FAIL("train configs/tiny.json configs/tiny.json", 2, "more than one spec");
    /* an op profile needs the GPU backend: said before any data is read */
    EXPECT_FAIL("train configs/tiny.json --set backend=cpu --set log.profile_step=1", 2, "log.profile_step",
                "trains on the CPU", "set log.profile_step to 0");
}

static void train_missing_spec(void) {
    EXPECT_FAIL("train /nonexistent/dir/spec.json", 2, "/nonexistent/dir/spec.json", "No such file");
    EXPECT_FAIL("train configs", 2, "configs", "directory");
}

/* ---------- train: invalid specs ---------- */

/* Each spec has several independent problems; every one must be printed with its JSON path. */
static void train_invalid_specs(void) {
    const char *dir = test_tmpdir();
    struct {
        const char *name, *json;
        const char *paths[7];
    } cases[] = {
        {"types.json",
         "{\"model\": {\"vocab_size\": 256, \"hiden_size\": 64, \"num_layers\": 2.5, \"num_heads\": \"4\"},\n"
         " \"train\": {\"seq_len\": 32, \"steps\": 10, \"beta1\": 1, \"lr_schedule\": \"cosin\"},\n"
         " \"backend\": \"gpu\"}\n",
         {"model.hiden_size", "model.hidden_size", "model.num_layers", "model.num_heads", "train.beta1",
          "train.lr_schedule", "backend"}},
        {"shapes.json",
         "{\"model\": {\"vocab_size\": 256, \"hidden_size\": 64, \"num_layers\": 2, \"num_heads\": 4,\n"
         "           \"num_kv_heads\": 3, \"first_k_dense_replace\": 1},\n"
         " \"moe\": {\"num_experts\": 6, \"num_experts_per_tok\": 8, \"moe_intermediate_size\": 32},\n"
         " \"parallel\": {\"ep\": 4},\n"
         " \"train\": {\"seq_len\": 32, \"steps\": 10, \"warmup_steps\": 20},\n"
         " \"data\": {\"val_every\": 5}}\n",
         {"model.num_kv_heads", "model.intermediate_size", "moe.num_experts_per_tok", "parallel.ep",
          "train.warmup_steps", "data.val_every"}},
        {"sections.json",
         "{\"model\": 7, \"trian\": {\"steps\": 3}, \"checkpoint\": {\"every\": \"often\"}, \"log\": []}\n",
         {"model", "trian", "checkpoint.every", "log", "train.seq_len", "train.steps", "model.vocab_size"}},
        {"syntax.json", "{\n  \"model\": {\n    \"vocab_size\": 256,\n  }\n", {"line 4", NULL}},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        const char *spec = write_spec(dir, cases[i].name, cases[i].json);
        char args[4600];
        snprintf(args, sizeof args, "train '%s'", spec);
        Run r = expect_run_at(__FILE__, __LINE__, args, 2, NULL);
        CHECK_MSG(strstr(r.err, spec) != NULL, "%s: the spec path is not named:\n%s", cases[i].name, r.err);
        int count = 0;
        for (int j = 0; j < 7 && cases[i].paths[j]; j++, count++) {
            /* "  path: ..." on its own line, as config_errors_print writes it; free text otherwise */
            char want[256];
            bool is_path = strchr(cases[i].paths[j], ' ') == NULL;
            snprintf(want, sizeof want, is_path ? "\n  %s: " : "%s", cases[i].paths[j]);
            CHECK_MSG(strstr(r.err, want) != NULL, "%s: \"%s\" not reported:\n%s", cases[i].name,
                      cases[i].paths[j], r.err);
        }
        if (count > 1) CHECK_MSG(strstr(r.err, " problems in "), "%s: no count line:\n%s", cases[i].name, r.err);
        /* nothing but the problems: no config table, no training output */
        CHECK_MSG(r.out[0] == 0, "%s: an invalid spec printed on stdout:\n%s", cases[i].name, r.out);
        run_free(&r);
    }
    /* The problem count is exact for a spec with a known number of problems. */
    const char *spec = write_spec(dir, "three.json",
                                  "{\"model\": {\"vocab_size\": 256, \"hidden_size\": 64, \"num_layers\": 2,"
                                  " \"num_heads\": 4, \"intermediate_size\": -1, \"rope_theta\": false},"
                                  " \"train\": {\"seq_len\": 32, \"steps\": 10, \"frobnicate\": 1}}");
    char args[4600];
    snprintf(args, sizeof args, "train '%s'", spec);
    EXPECT_FAIL(args, 2, "3 problems", "\n  model.intermediate_size: ", "\n  model.rope_theta: ",
                "\n  train.frobnicate: ");
}

/* --set values go through the same validation, with the same paths. */
static void train_bad_overrides(void) {
    EXPECT_FAIL("train configs/tiny.json --set train.beta1=1 --set=model.num_heads=four --set moe.scoring=x",
                2, "3 problems", "\n  train.beta1: ", "\n  model.num_heads: ", "\n  moe.scoring: ", "did you mean 'moe.scoring_func'");
    EXPECT_FAIL("train configs/tiny.json --set notakeypath", 2, "key.path=value");
}

/* ---------- train: runtime input errors ---------- */

static void train_missing_data(void) {
    /* A valid spec whose token file does not exist: exit 2, naming data.train and the path. */
    EXPECT_FAIL("train configs/tiny.json --set data.train=/nonexistent/train.h5 --set log.metrics_path=", 2,
                "data.train", "/nonexistent/train.h5");
    /* No token file at all. */
    EXPECT_FAIL("train configs/tiny.json --set data.train= --set log.metrics_path=", 2, "data.train");
}

/* `mokc bench --record` on a disk that fills (the file capped at 1 KiB, under mpirun: test_mpirun_capped_rank): its
 * results stop fitting, and the run stops (exit 1) naming the record, which keeps whole lines only. On a GPU. */
static void bench_record_on_a_full_disk(void) {
    if (!have_gpu() || !test_have("mpirun")) {
        test_skip("needs a GPU and mpirun");
        return;
    }
    char record[4300], bench[9000], cmd[20000], out[16384];
    snprintf(record, sizeof record, "%s/bench.jsonl", test_tmpdir());
    snprintf(bench, sizeof bench, "%s bench moe --config configs/tiny.json --record %s", test_mokc_binary(), record);
    const int rc = test_run(test_mpirun_capped_rank(cmd, sizeof cmd, NULL, 1, bench), out, sizeof out);
    CHECK_MSG(rc == 1, "bench with its record on a full disk: exit %d, expected 1: %s", rc, out);
    CHECK_STR_CONTAINS(out, "cannot write the run record");
    CHECK_STR_CONTAINS(out, "File too large");
    /* what it keeps is whole lines: the header and the results that fit (r4: the first) */
    CHECK_MSG(test_json_lines(record) >= 1, "the record at %s lost its header", record);
}

TEST_SUITE(cli,
    TEST_CASE(no_command),
    TEST_CASE(unknown_command),
    TEST_CASE(version),
    TEST_CASE(help),
    TEST_CASE(not_built_yet),
    TEST_CASE(bench_record_on_a_full_disk),
    TEST_CASE(check_usage_errors),
    TEST_CASE(train_usage_errors),
    TEST_CASE(train_missing_spec),
    TEST_CASE(train_invalid_specs),
    TEST_CASE(train_bad_overrides),
    TEST_CASE(train_missing_data),
);
