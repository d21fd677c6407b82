/*
 * The CPU backend's threads a rank (src/cpu/threads.c): when a rank counts as narrowed by its launcher, what the
 * note says, how a cpuset's CPU list is counted, and what `mokc train` prints on the CPU for a rank bound to one
 * CPU, for one the user sized with OMP_NUM_THREADS, and for two ranks of different sizes under mpirun.
 */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cpu/threads.h"
#include "test.h"

static void test_narrow_rule(void) {
    /* threads, ranks on the host, host CPUs, OMP_NUM_THREADS set: narrowed? */
    const struct {
        int threads, ranks, cpus;
        bool env, want;
    } cases[] = {
        {1, 1, 16, false, true},  /* mpirun -np 1 on a 16-core host: 15 cores idle */
        {1, 2, 16, false, true},  /* two ranks bound to a core each */
        {8, 2, 16, false, false}, /* --map-by slot:PE=8 */
        {1, 2, 2, false, false},  /* CI: two ranks on two cores, nothing idle */
        {1, 1, 1, false, false},  /* a one-CPU host */
        {2, 1, 4, false, true},   /* half the host: at the limit */
        {3, 1, 4, false, false},
        {1, 1, 16, true, false},  /* the user chose one thread */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK_MSG(cpu_threads_narrow(cases[i].threads, cases[i].ranks, cases[i].cpus, cases[i].env) == cases[i].want,
                  "case %zu: %d threads, %d ranks, %d CPUs, env %d: expected %s", i, cases[i].threads, cases[i].ranks,
                  cases[i].cpus, cases[i].env, cases[i].want ? "narrow" : "not narrow");
}

static void test_note_text(void) {
    char note[512];
    cpu_threads_format_note(note, sizeof note, 3, 1, 2, 16);
    CHECK_STR_CONTAINS(note, "rank 3 runs the CPU work on 1 thread,");
    CHECK_STR_CONTAINS(note, "16 CPUs are there for the 2 ranks of its host");
    CHECK_STR_CONTAINS(note, "mpirun --map-by slot:PE=8 --use-hwthread-cpus (srun: --cpus-per-task=8)");
    CHECK_STR_CONTAINS(note, "OMP_NUM_THREADS");
    cpu_threads_format_note(note, sizeof note, 0, 4, 1, 32);
    CHECK_STR_CONTAINS(note, "on 4 threads, while 32 CPUs are there for the 1 rank of its host:");
    CHECK_STR_CONTAINS(note, "PE=32");

    CpuThreads t = {.min = 1, .max = 1};
    cpu_threads_describe(&t, note, sizeof note);
    CHECK(strcmp(note, "1 thread a rank") == 0);
    t.max = 16;
    cpu_threads_describe(&t, note, sizeof note);
    CHECK(strcmp(note, "1-16 threads a rank") == 0);
    t.min = 16;
    cpu_threads_describe(&t, note, sizeof note);
    CHECK(strcmp(note, "16 threads a rank") == 0);
}

static void test_cpu_lists(void) {
    CHECK_EQ_INT(cpu_list_count("0-3,8,10-11\n"), 7);
    CHECK_EQ_INT(cpu_list_count("0-1\n"), 2);
    CHECK_EQ_INT(cpu_list_count("5"), 1);
    CHECK_EQ_INT(cpu_list_count("0-127"), 128);
    CHECK_EQ_INT(cpu_list_count(""), 0);
    CHECK_EQ_INT(cpu_list_count("\n"), 0);
    CHECK_EQ_INT(cpu_list_count("3-1"), 0);
    CHECK_EQ_INT(cpu_list_count("0-3;4"), 0);
    CHECK_EQ_INT(cpu_list_count("max"), 0);
}

static char spec[4300];

static int setup_spec(void) {
    static char dir[4200];
    if (spec[0]) return 0;
    snprintf(dir, sizeof dir, "%s", test_tmpdir());
    if (test_prepare_corpus(dir, 0)) return -1;
    snprintf(spec, sizeof spec, "%s/spec.json", dir);
    return test_write_file(spec,
                           "{\"model\": {\"vocab_size\": 256, \"hidden_size\": 32, \"num_layers\": 2, \"num_heads\": 2,"
                           " \"num_kv_heads\": 1, \"max_seq_len\": 32, \"intermediate_size\": 64},"
                           " \"moe\": {\"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32},"
                           " \"train\": {\"seq_len\": 32, \"micro_batch\": 2, \"steps\": 1, \"warmup_steps\": 0},"
                           " \"data\": {\"train\": \"%s/corpus.h5\"}, \"log\": {\"metrics_path\": \"\"},"
                           " \"backend\": \"cpu\"}",
                           dir);
}

/* One rank bound to one CPU of a host with more gets the note; sized by OMP_NUM_THREADS it does not. */
static void test_train_bound_rank(void) {
    cpu_set_t mine;
    int first = -1;
    if (sched_getaffinity(0, sizeof mine, &mine) != 0 || CPU_COUNT(&mine) < 2)
        return test_skip("this process has one CPU: no rank can be narrowed");
    for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
        if (CPU_ISSET(c, &mine)) first = c;
    if (!test_have("taskset")) return test_skip("taskset (util-linux) is not installed");
    if (setup_spec()) return;
    static char out[1 << 16];
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "env -u OMP_NUM_THREADS taskset -c %d '%s' train '%s'", first, test_mokc_binary(), spec);
    CHECK_EQ_INT(test_run(cmd, out, sizeof out), 0);
    CHECK_STR_CONTAINS(out, "backend: cpu (as the spec asks), 1 thread a rank\n");
    CHECK_STR_CONTAINS(out, "mokc: warning: rank 0 runs the CPU work on 1 thread, while ");
    CHECK_STR_CONTAINS(out, "--map-by slot:PE=");
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 taskset -c %d '%s' train '%s'", first, test_mokc_binary(), spec);
    CHECK_EQ_INT(test_run(cmd, out, sizeof out), 0);
    CHECK_STR_CONTAINS(out, "1 thread a rank\n");
    CHECK_MSG(!strstr(out, "warning: rank"), "a note though OMP_NUM_THREADS chose the count:\n%s", out);
}

/* Two ranks of 1 and 2 threads (mpirun's two app contexts): the range over the ranks, and no note. */
static void test_train_two_ranks(void) {
    if (!test_have("mpirun")) return test_skip("mpirun is not installed");
    if (setup_spec()) return;
    static char out[1 << 16];
    char cmd[20000];
    snprintf(cmd, sizeof cmd,
             TEST_MPIRUN " -np 1 env OMP_NUM_THREADS=1 '%s' train '%s' : -np 1 env OMP_NUM_THREADS=2 '%s' train '%s'",
             test_mokc_binary(), spec, test_mokc_binary(), spec);
    CHECK_EQ_INT(test_run(cmd, out, sizeof out), 0);
    CHECK_STR_CONTAINS(out, "backend: cpu (as the spec asks), 1-2 threads a rank\n");
    CHECK_MSG(!strstr(out, "warning: rank"), "a note though OMP_NUM_THREADS chose the counts:\n%s", out);
}

TEST_SUITE(threads, TEST_CASE(test_narrow_rule), TEST_CASE(test_note_text), TEST_CASE(test_cpu_lists),
           TEST_CASE(test_train_bound_rank),
           TEST_CASE(test_train_two_ranks));
