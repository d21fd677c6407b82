/*
 * Ranks under mpirun on the CPU backend: the same global batch gives the same training whatever
 * the layout (1 rank, ep=2, dp=2, ep=2 x dp=2), runs repeat bit for bit, bad layouts stop every
 * rank with one message, and a rank that fails brings the whole job down without a hang.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "test.h"

#define STEPS 20

static const char *spec_json =
    "{\"model\": {\"vocab_size\": 256, \"hidden_size\": 32, \"num_layers\": 2, \"num_heads\": 4,"
    " \"num_kv_heads\": 2, \"max_seq_len\": 64, \"intermediate_size\": 64, \"first_k_dense_replace\": 1},"
    " \"moe\": {\"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32,"
    " \"n_shared_experts\": 1, \"router_aux_loss_coef\": 0.01, \"expert_bias_update_rate\": 0.001},"
    " \"train\": {\"seq_len\": 32, \"micro_batch\": 8, \"steps\": %d, \"lr\": 0.01, \"min_lr\": 0.001,"
    " \"warmup_steps\": 5, \"seed\": 3},"
    " \"data\": {\"train\": \"%s/corpus.h5\"}, \"log\": {\"every\": 10}, \"backend\": \"cpu\"}";

static char dir[4200], spec[4300];

static void setup_corpus(void) {
    snprintf(dir, sizeof dir, "%s", test_tmpdir());
    snprintf(spec, sizeof spec, "%s/spec.json", dir);
    test_prepare_corpus(dir, 0);
    test_write_file(spec, spec_json, STEPS, dir);
}

/* mpirun with what a container or CI needs: more ranks than cores, and root if we are root. */
static const char *mpirun(void) {
    return geteuid() == 0 ? "OMP_NUM_THREADS=1 timeout 120 mpirun --oversubscribe --allow-run-as-root"
                          : "OMP_NUM_THREADS=1 timeout 120 mpirun --oversubscribe";
}

/* Trains with np ranks, parallel.ep = ep, the given micro-batch and extra settings; returns the loss curve. */
static int losses_with(int np, int ep, int micro_batch, const char *extra, const char *tag, double *loss) {
    char cmd[12000], out[32768], metrics[4400];
    snprintf(metrics, sizeof metrics, "%s/%s.jsonl", dir, tag);
    snprintf(cmd, sizeof cmd,
             "%s -np %d %s train %s --set parallel.ep=%d --set train.micro_batch=%d --set log.metrics_path=%s %s",
             mpirun(), np, test_mokc_binary(), spec, ep, micro_batch, metrics, extra);
    int rc = test_run(cmd, out, sizeof out);
    CHECK_MSG(rc == 0, "%s failed (%d): %s", tag, rc, out);
    /* a run of several ranks compares their replicas at its end (it writes no checkpoint) */
    char said[128];
    snprintf(said, sizeof said, "replicas after step %d: bitwise equal, ", STEPS);
    CHECK_MSG((strstr(out, said) != NULL) == (np > 1), "%s (%d ranks): \"%s\" %s", tag, np, said,
              np > 1 ? "not said" : "said at one rank");
    return test_read_metric(metrics, "loss", loss, STEPS);
}

static int losses_for(int np, int ep, int micro_batch, const char *tag, double *loss) {
    return losses_with(np, ep, micro_batch, "", tag, loss);
}

/* The worst relative difference of two loss curves of STEPS steps. */
static double worst_rel(const double *a, const double *ref) {
    double worst = 0;
    for (int i = 0; i < STEPS; i++) {
        double rel = fabs(a[i] - ref[i]) / fabs(ref[i]);
        if (rel > worst) worst = rel;
    }
    return worst;
}

/* Run `tag`'s record: every step line gives each MoE layer's busiest EP rank over the mean rank
 * (ep_rank_load_max_over_mean_by_layer) where ep > 1, and none at ep = 1. It lies in [1, ep]; with one replica
 * (dp = 1) also at most the busiest expert's figure, since a rank holds E_local experts. */
static void check_rank_load(const char *tag, int ep, int dp) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s.jsonl", dir, tag);
    char *text = test_read_text(path);
    CHECK_MSG(text != NULL, "%s: no run record at %s", tag, path);
    if (!text) return;
    int steps = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        if (!o || !cJSON_GetObjectItemCaseSensitive(o, "step")) { /* the header */
            cJSON_Delete(o);
            continue;
        }
        steps++;
        const cJSON *by_rank = cJSON_GetObjectItemCaseSensitive(o, "ep_rank_load_max_over_mean_by_layer");
        const cJSON *by_expert = cJSON_GetObjectItemCaseSensitive(o, "load_max_over_mean_by_layer");
        if (ep == 1) {
            CHECK_MSG(by_rank == NULL, "%s step %d: an EP-rank load at ep = 1", tag, steps);
        } else {
            const cJSON *r = cJSON_GetArrayItem(by_rank, 0), *e = cJSON_GetArrayItem(by_expert, 0);
            const int below_expert = dp > 1 || (cJSON_IsNumber(r) && cJSON_IsNumber(e) &&
                                                  r->valuedouble <= e->valuedouble + 1e-9);
            CHECK_MSG(cJSON_GetArraySize(by_rank) == 1 && cJSON_IsNumber(r) && r->valuedouble >= 1 &&
                          r->valuedouble <= ep && below_expert,
                      "%s step %d: EP-rank load %g against ep %d and the busiest expert's %g", tag, steps,
                      cJSON_IsNumber(r) ? r->valuedouble : -1, ep, cJSON_IsNumber(e) ? e->valuedouble : -1);
        }
        cJSON_Delete(o);
    }
    CHECK_EQ_INT(steps, STEPS);
    free(text);
}

static void test_layouts_train_alike(void) {
    setup_corpus();
    struct { int np, ep, mb; const char *tag; } runs[] = {
        {1, 1, 8, "r1"}, {2, 2, 4, "ep2"}, {2, 1, 4, "dp2"}, {4, 2, 2, "ep2dp2"},
    };
    double ref[STEPS], loss[STEPS];
    CHECK_EQ_INT(losses_for(1, 1, 8, "r1", ref), STEPS);
    for (int r = 1; r < 4; r++) {
        int n = losses_for(runs[r].np, runs[r].ep, runs[r].mb, runs[r].tag, loss);
        CHECK_EQ_INT(n, STEPS);
        double worst = worst_rel(loss, ref);
        CHECK_MSG(worst < 1e-5, "%s: loss curve differs from 1 rank by %.3g relative", runs[r].tag, worst);
    }
    /* The curve is a real one: it falls. */
    CHECK(ref[STEPS - 1] < ref[0] - 1.0);
    for (int r = 0; r < 4; r++) check_rank_load(runs[r].tag, runs[r].ep, runs[r].np / runs[r].ep);
}

/* Issue 13's layouts on eight ranks (the GPU runs need 8 GPUs; the layouts' arithmetic does not): EP8 and
 * EP4 x DP2 on the same global batch train as one rank does, with 8 experts (one a rank at EP8). */
static void test_eight_rank_layouts_train_alike(void) {
    setup_corpus();
    const char *experts = "--set moe.num_experts=8";
    double ref[STEPS], loss[STEPS];
    CHECK_EQ_INT(losses_with(1, 1, 8, experts, "e8-r1", ref), STEPS);
    const struct { int ep; const char *tag; } runs[] = {{8, "ep8"}, {4, "ep4dp2"}};
    for (int r = 0; r < 2; r++) {
        CHECK_EQ_INT(losses_with(8, runs[r].ep, 1, experts, runs[r].tag, loss), STEPS);
        double worst = worst_rel(loss, ref);
        CHECK_MSG(worst < 1e-5, "%s: loss curve differs from 1 rank by %.3g relative", runs[r].tag, worst);
    }
}

static void test_same_command_bitwise(void) {
    setup_corpus();
    double a[STEPS], b[STEPS];
    CHECK_EQ_INT(losses_for(4, 2, 2, "a", a), STEPS);
    CHECK_EQ_INT(losses_for(4, 2, 2, "b", b), STEPS);
    CHECK_MSG(memcmp(a, b, sizeof a) == 0, "two identical 4-rank runs gave different losses");
}

static void test_bad_layout_stops_every_rank(void) {
    setup_corpus();
    char cmd[12000], out[32768];
    /* ep = 2 cannot divide a world of 3. */
    snprintf(cmd, sizeof cmd, "%s -np 3 %s train %s --set parallel.ep=2", mpirun(), test_mokc_binary(), spec);
    int rc = test_run(cmd, out, sizeof out);
    CHECK_MSG(rc != 0 && rc != 124, "ep=2 on 3 ranks: exit %d (124 = hung): %s", rc, out);
    CHECK_STR_CONTAINS(out, "parallel.ep = 2 does not divide the world size 3; valid: 1, 3");
    /* ep = 3 cannot divide 4 experts: a spec error, reported once, before MPI starts. */
    snprintf(cmd, sizeof cmd, "%s -np 3 %s train %s --set parallel.ep=3", mpirun(), test_mokc_binary(), spec);
    rc = test_run(cmd, out, sizeof out);
    CHECK_MSG(rc != 0 && rc != 124, "ep=3 with 4 experts: exit %d: %s", rc, out);
    CHECK_STR_CONTAINS(out, "parallel.ep: 3 does not divide moe.num_experts = 4");
    const char *first = strstr(out, "parallel.ep: 3");
    CHECK_MSG(first && !strstr(first + 1, "parallel.ep: 3"), "the spec error was printed more than once: %s", out);
}

/* Rank 1 alone gets a missing data file (mpirun's MPMD syntax): the job ends with its message. */
static void test_one_failing_rank_ends_the_job(void) {
    setup_corpus();
    char cmd[16000], out[32768];
    snprintf(cmd, sizeof cmd, "%s -np 1 %s train %s : -np 1 %s train %s --set data.train=%s/missing.h5", mpirun(),
             test_mokc_binary(), spec, test_mokc_binary(), spec, dir);
    int rc = test_run(cmd, out, sizeof out);
    CHECK_MSG(rc != 0 && rc != 124, "exit %d (124 = hung): %s", rc, out);
    CHECK_STR_CONTAINS(out, "missing.h5");
    CHECK_STR_CONTAINS(out, "rank 1");
}

TEST_SUITE(dist, TEST_CASE(test_layouts_train_alike), TEST_CASE(test_eight_rank_layouts_train_alike),
           TEST_CASE(test_same_command_bitwise),
           TEST_CASE(test_bad_layout_stops_every_rank), TEST_CASE(test_one_failing_rank_ends_the_job));
