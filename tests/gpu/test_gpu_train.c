/*
 * Training on the GPU backend through the binary, against the CPU reference: 20 steps on 1 GPU,
 * and on 2 GPUs with ep = 2 and with dp = 2 (same global batch), track the CPU's losses within
 * 2e-2; two identical GPU runs give identical losses and weights, bit for bit, and so does a run
 * resumed from a checkpoint.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../h5_compare.h"
#include "gpu_test.h"

#define STEPS 20

static const char *spec_json =
    "{\"model\": {\"vocab_size\": 256, \"hidden_size\": 128, \"num_layers\": 3, \"num_heads\": 4,"
    " \"num_kv_heads\": 2, \"max_seq_len\": 128, \"intermediate_size\": 256, \"first_k_dense_replace\": 1},"
    " \"moe\": {\"num_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 64,"
    " \"n_shared_experts\": 1, \"router_aux_loss_coef\": 0.01, \"expert_bias_update_rate\": 0.001},"
    " \"train\": {\"seq_len\": 64, \"micro_batch\": 8, \"steps\": %d, \"lr\": 0.001, \"min_lr\": 0.0001,"
    " \"warmup_steps\": 10, \"seed\": 5},"
    " \"data\": {\"train\": \"%s/corpus.h5\"}, \"log\": {\"every\": 5}, \"moe_impl\": \"unfused\"}";

static char dir[4200], spec[4300];

static void setup_corpus(void) {
    snprintf(dir, sizeof dir, "%s", test_tmpdir());
    snprintf(spec, sizeof spec, "%s/spec.json", dir);
    test_prepare_corpus(dir, 0);
    test_write_file(spec, spec_json, STEPS, dir);
}

static int gpus(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    return n;
}

/* Runs np ranks (np = 0: no mpirun) and returns the loss curve; extra is appended. */
static int run(int np, const char *tag, const char *extra, double *loss) {
    char cmd[16000], out[65536], metrics[4400], launcher[256] = "";
    snprintf(metrics, sizeof metrics, "%s/%s.jsonl", dir, tag);
    if (np > 0)
        snprintf(launcher, sizeof launcher, "timeout 300 mpirun -np %d %s", np, geteuid() == 0 ? "--allow-run-as-root" : "");
    snprintf(cmd, sizeof cmd, "NCCL_NVLS_ENABLE=0 %s %s train %s --set log.metrics_path=%s %s", launcher,
             test_mokc_binary(), spec, metrics, extra);
    int rc = test_run(cmd, out, sizeof out);
    CHECK_MSG(rc == 0, "%s failed (%d): %s", tag, rc, out);
    return test_read_metric(metrics, "loss", loss, STEPS);
}

static void check_tracks(const double *ref, const double *loss, int n, const char *tag) {
    CHECK_EQ_INT(n, STEPS);
    double worst = 0;
    int at = 0;
    for (int i = 0; i < n; i++) {
        double rel = fabs(loss[i] - ref[i]) / fabs(ref[i]);
        if (rel > worst) worst = rel, at = i;
    }
    printf("      %s: worst relative loss difference to the CPU %.3g at step %d (%.5f vs %.5f)\n", tag, worst, at + 1,
           loss[at], ref[at]);
    CHECK_MSG(worst < 2e-2, "%s: loss differs from the CPU reference by %.3g relative at step %d (%.5f vs %.5f)", tag,
              worst, at + 1, loss[at], ref[at]);
}

static void test_gpu_tracks_cpu(void) {
    if (!gpu_test_begin()) return;
    setup_corpus();
    double ref[STEPS], loss[STEPS];
    CHECK_EQ_INT(run(0, "cpu", "--set backend=cpu", ref), STEPS);
    CHECK_MSG(ref[STEPS - 1] < ref[0] - 1.0, "the CPU curve must fall: %.4f -> %.4f", ref[0], ref[STEPS - 1]);
    check_tracks(ref, loss, run(0, "gpu1", "--set backend=cuda", loss), "1 GPU");
    if (gpus() < 2) {
        test_skip("the 2-GPU layouts need 2 GPUs (1 GPU checked)");
        return;
    }
    check_tracks(ref, loss, run(2, "gpu_ep2", "--set backend=cuda --set parallel.ep=2 --set train.micro_batch=4", loss),
                 "2 GPUs, ep=2");
    check_tracks(ref, loss, run(2, "gpu_dp2", "--set backend=cuda --set parallel.ep=1 --set train.micro_batch=4", loss),
                 "2 GPUs, dp=2");
}

static void test_gpu_runs_repeat_bitwise(void) {
    if (!gpu_test_begin()) return;
    setup_corpus();
    double a[STEPS], b[STEPS];
    char extra[2][9000];
    for (int r = 0; r < 2; r++)
        snprintf(extra[r], sizeof extra[r], "--set backend=cuda --set checkpoint.dir=%s/ck%d", dir, r);
    CHECK_EQ_INT(run(0, "rep_a", extra[0], a), STEPS);
    CHECK_EQ_INT(run(0, "rep_b", extra[1], b), STEPS);
    CHECK_MSG(memcmp(a, b, sizeof a) == 0, "two identical GPU runs gave different losses");
    char ma[9000], mb[9000];
    snprintf(ma, sizeof ma, "%s/ck0/step_%08d/model.h5", dir, STEPS);
    snprintf(mb, sizeof mb, "%s/ck1/step_%08d/model.h5", dir, STEPS);
    CHECK(test_h5_same_group(ma, mb, "params") > 10);
}

/* 20 steps straight (checkpoints at 10 and 20) vs resuming the step-10 checkpoint into another
 * directory: the same losses and final weights, bit for bit (optimizer state, expert biases and
 * data position all restored). The resumed run keeps its metrics lines up to step 10 and appends. */
static void test_gpu_resume_bitwise(void) {
    if (!gpu_test_begin()) return;
    setup_corpus();
    double a[STEPS], b[STEPS];
    char straight[9000], resumed[9000], cmd[9000], out[1024];
    snprintf(straight, sizeof straight, "--set backend=cuda --set checkpoint.dir=%s/s --set checkpoint.every=10", dir);
    snprintf(resumed, sizeof resumed, "--set backend=cuda --set checkpoint.dir=%s/r --set checkpoint.every=10 "
             "--set checkpoint.resume=%s/s/step_00000010", dir, dir);
    CHECK_EQ_INT(run(0, "straight", straight, a), STEPS);
    snprintf(cmd, sizeof cmd, "cp %s/straight.jsonl %s/resumed.jsonl", dir, dir);
    CHECK(test_run(cmd, out, sizeof out) == 0);
    CHECK_EQ_INT(run(0, "resumed", resumed, b), STEPS);
    CHECK_MSG(memcmp(a, b, sizeof a) == 0, "a resumed GPU run's losses differ from the straight run's");
    char ma[9000], mb[9000];
    snprintf(ma, sizeof ma, "%s/s/step_%08d/model.h5", dir, STEPS);
    snprintf(mb, sizeof mb, "%s/r/step_%08d/model.h5", dir, STEPS);
    CHECK(test_h5_same_group(ma, mb, "params") > 10);
}

TEST_SUITE(gpu_train, TEST_CASE(test_gpu_tracks_cpu), TEST_CASE(test_gpu_runs_repeat_bitwise),
           TEST_CASE(test_gpu_resume_bitwise));
