/*
 * `mokc check` through the binary on a GPU: configs/tiny.json passes with each MoE layer (the megakernel, the unfused
 * layer) and with a tied head and sigmoid routing, and so does configs/mokc-small-1gpu.json (151936-token vocabulary,
 * hidden 2048, 128 experts of width 768, top-8) cut to its dense layer and first MoE layer, and to 4 layers; with 2
 * GPUs, the tiny spec at ep = 2 and at dp = 2 under mpirun. What check finds wrong is tested on the CPU
 * (tests/test_model_check.c).
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "gpu_test.h"

static char out[65536];

/* `mokc check ARGS` on np ranks (0: without mpirun) passes; prints its summary lines. */
static void expect_check_passes(int np, const char *args) {
    char cmd[2048], launcher[128] = "";
    if (np > 0)
        snprintf(launcher, sizeof launcher, "mpirun -np %d %s", np, geteuid() == 0 ? "--allow-run-as-root" : "");
    snprintf(cmd, sizeof cmd, "NCCL_NVLS_ENABLE=0 timeout 900 %s %s check %s", launcher, test_mokc_binary(), args);
    const int rc = test_run(cmd, out, sizeof out);
    const char *passed = strstr(out, "check passed");
    CHECK_MSG(rc == 0 && passed, "`%s` exited %d:\n%s", cmd, rc, out);
    const char *moe = strstr(out, "MoE layers:");
    const char *routing = strstr(out, "expert choices:");
    printf("      %s:\n      %.*s      %.*s      %.*s", args, moe ? (int)strcspn(moe, "\n") + 1 : 0, moe ? moe : "",
           routing ? (int)strcspn(routing, "\n") + 1 : 0, routing ? routing : "",
           passed ? (int)strcspn(passed, "\n") + 1 : 0, passed ? passed : "");
}

static void test_check_tiny(void) {
    if (!gpu_test_begin()) return;
    expect_check_passes(0, "configs/tiny.json --set moe_impl=mok");
    CHECK_MSG(strstr(out, "MoE layers: mok") != NULL, "moe_impl mok did not check the megakernel:\n%s", out);
    expect_check_passes(0, "configs/tiny.json --set moe_impl=unfused");
    CHECK_MSG(strstr(out, "MoE layers: unfused") != NULL, "moe_impl unfused checked another layer:\n%s", out);
    expect_check_passes(0, "configs/tiny.json --layers 4 --tokens 100 --set model.tie_word_embeddings=true "
                           "--set moe.scoring_func=sigmoid --set moe_impl=mok");
    CHECK_MSG(strstr(out, "cut to 4 of its layers and 1 x 100 tokens") != NULL, "--layers/--tokens not taken:\n%s",
              out);
}

static void test_check_mokc_small_shapes(void) {
    if (!gpu_test_begin()) return;
    expect_check_passes(0, "configs/mokc-small-1gpu.json");
    CHECK_MSG(strstr(out, "cut to 2 of its layers and 1 x 256 tokens") != NULL, "not the default cut:\n%s", out);
    expect_check_passes(0, "configs/mokc-small-1gpu.json --layers 4"); /* three MoE layers: their near-ties add up */
}

static void test_check_two_gpus(void) {
    if (!gpu_test_begin()) return;
    int n = 0;
    cudaGetDeviceCount(&n);
    if (n < 2) {
        test_skip("needs 2 GPUs");
        return;
    }
    expect_check_passes(2, "configs/tiny.json --set parallel.ep=2 --set moe_impl=mok");
    CHECK_MSG(strstr(out, "2 ranks (ep 2)") != NULL, "not at ep = 2:\n%s", out);
    expect_check_passes(2, "configs/tiny.json --set parallel.ep=1");
    CHECK_MSG(strstr(out, "2 ranks (ep 1)") != NULL, "not at dp = 2:\n%s", out);
}

TEST_SUITE(gpu_check, TEST_CASE(test_check_tiny), TEST_CASE(test_check_mokc_small_shapes),
           TEST_CASE(test_check_two_gpus));
