/*
 * Training end to end through the binary, as a user runs it: the loss falls on real text (the
 * repository's LICENSE, a fixed corpus), the same seed gives bitwise-identical losses, another
 * seed does not, and gradient accumulation matches a larger micro-batch; the run record (a header,
 * then a line a step) where log.metrics_path "auto" puts it.
 */
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "test.h"

#define MAX_STEPS 64

/* A small MoE spec over the prepared corpus; extra settings go on the command line. */
static const char *small_spec =
    "{\"model\": {\"vocab_size\": 256, \"hidden_size\": 32, \"num_layers\": 2, \"num_heads\": 4,"
    " \"num_kv_heads\": 2, \"max_seq_len\": 64, \"intermediate_size\": 64, \"first_k_dense_replace\": 1},"
    " \"moe\": {\"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32,"
    " \"n_shared_experts\": 1, \"router_aux_loss_coef\": 0.01, \"expert_bias_update_rate\": 0.001},"
    " \"train\": {\"seq_len\": 32, \"micro_batch\": 8, \"steps\": 50, \"lr\": 0.01, \"min_lr\": 0.001,"
    " \"warmup_steps\": 5, \"seed\": 1},"
    " \"data\": {\"train\": \"%s/corpus.h5\"}, \"log\": {\"every\": 10}, \"backend\": \"cpu\"}";

/* Prepares LICENSE into a fresh directory and writes the spec there; returns the directory. */
static const char *prepare_corpus(char *spec_path, size_t len) {
    const char *dir = test_tmpdir();
    snprintf(spec_path, len, "%s/spec.json", dir);
    test_prepare_corpus(dir, 0);
    test_write_file(spec_path, small_spec, dir);
    return dir;
}

/* Runs `mokc train spec extra` writing metrics to metrics_path; reads the per-step losses. */
static int train_losses(const char *spec, const char *extra, const char *metrics_path, double *loss, int max) {
    char cmd[9000], out[16384];
    snprintf(cmd, sizeof cmd, "%s train %s --set log.metrics_path=%s %s", test_mokc_binary(), spec, metrics_path, extra);
    int rc = test_run(cmd, out, sizeof out);
    CHECK_MSG(rc == 0, "train failed (%d): %s", rc, out);
    return test_read_metric(metrics_path, "loss", loss, max);
}

static void test_loss_falls_on_real_text(void) {
    char spec[4200], metrics[4300];
    const char *dir = prepare_corpus(spec, sizeof spec);
    snprintf(metrics, sizeof metrics, "%s/m.jsonl", dir);
    double loss[MAX_STEPS];
    int n = train_losses(spec, "", metrics, loss, MAX_STEPS);
    CHECK_EQ_INT(n, 50);
    if (n != 50) return;
    CHECK_NEAR(loss[0], 5.545, 0.1); /* ln 256: uniform over bytes at initialisation */
    double tail = 0;
    for (int i = n - 5; i < n; i++) tail += loss[i] / 5;
    /* The stated margin: 50 steps take the loss at least 2.0 nats below its start (measured: about 2.7). */
    CHECK_MSG(tail < loss[0] - 2.0, "loss fell only from %.3f to %.3f", loss[0], tail);
}

static void test_same_seed_bitwise_other_seed_differs(void) {
    char spec[4200], m1[4300], m2[4300], m3[4300];
    const char *dir = prepare_corpus(spec, sizeof spec);
    snprintf(m1, sizeof m1, "%s/a.jsonl", dir);
    snprintf(m2, sizeof m2, "%s/b.jsonl", dir);
    snprintf(m3, sizeof m3, "%s/c.jsonl", dir);
    double a[MAX_STEPS], b[MAX_STEPS], c[MAX_STEPS];
    int na = train_losses(spec, "--set train.steps=8", m1, a, MAX_STEPS);
    int nb = train_losses(spec, "--set train.steps=8", m2, b, MAX_STEPS);
    int nc = train_losses(spec, "--set train.steps=8 --set train.seed=2", m3, c, MAX_STEPS);
    CHECK_EQ_INT(na, 8);
    CHECK_EQ_INT(nb, 8);
    CHECK_EQ_INT(nc, 8);
    if (na != 8 || nb != 8 || nc != 8) return;
    CHECK_MSG(memcmp(a, b, sizeof(double) * 8) == 0, "same seed, different losses");
    int differ = 0;
    for (int i = 0; i < 8; i++) differ += a[i] != c[i];
    CHECK_MSG(differ == 8, "another seed gave %d identical losses of 8", 8 - differ);
}

/* micro_batch 8 equals micro_batch 4 x grad_accum 2: same sequences, same mean gradient. */
static void test_grad_accum_matches_larger_batch(void) {
    char spec[4200], m1[4300], m2[4300];
    const char *dir = prepare_corpus(spec, sizeof spec);
    snprintf(m1, sizeof m1, "%s/a.jsonl", dir);
    snprintf(m2, sizeof m2, "%s/b.jsonl", dir);
    double a[MAX_STEPS], b[MAX_STEPS];
    int na = train_losses(spec, "--set train.steps=6", m1, a, MAX_STEPS);
    int nb = train_losses(spec, "--set train.steps=6 --set train.micro_batch=4 --set train.grad_accum=2", m2, b, MAX_STEPS);
    CHECK_EQ_INT(na, 6);
    CHECK_EQ_INT(nb, 6);
    if (na != 6 || nb != 6) return;
    CHECK_NEAR(a[0], b[0], 1e-5);
    for (int i = 1; i < 6; i++) CHECK_NEAR(a[i], b[i], 2e-3);
}

/* The number at a path of object keys (NAN where it is missing). */
static double json_number(const cJSON *o, const char *a, const char *b) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, a);
    if (b) v = cJSON_GetObjectItemCaseSensitive(v, b);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* With log.metrics_path left at "auto", a 3-step run from the spec's directory writes runs/spec.jsonl
 * there: a header (what ran, on what, with which config) and one line a step (with each MoE layer's
 * expert load and busiest expert); the progress lines carry an ETA and the run ends with its summary of steps 2-3. */
static void test_run_record(void) {
    char spec[4200], bin[PATH_MAX], cmd[9000], out[16384];
    const char *dir = prepare_corpus(spec, sizeof spec);
    CHECK_MSG(realpath(test_mokc_binary(), bin) != NULL, "no binary at %s", test_mokc_binary());
    snprintf(cmd, sizeof cmd, "cd %s && %s train spec.json --set train.steps=3 --set train.warmup_steps=1", dir, bin);
    int rc = test_run(cmd, out, sizeof out);
    CHECK_MSG(rc == 0, "train failed (%d): %s", rc, out);
    CHECK_STR_CONTAINS(out, "| ETA ");
    CHECK_STR_CONTAINS(out, "steps 2-3: ");
    CHECK_STR_CONTAINS(out, "run record: runs/spec.jsonl\n");
    char path[4300];
    snprintf(path, sizeof path, "%s/runs/spec.jsonl", dir);
    char *text = test_read_text(path);
    CHECK_MSG(text != NULL, "no run record at %s", path);
    if (!text) return;
    int lines = 0, steps = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        cJSON *o = cJSON_Parse(line);
        CHECK_MSG(o != NULL, "line %d of the record is not JSON: %.200s", lines + 1, line);
        if (!o) continue;
        if (lines == 0) {
            const cJSON *rec = cJSON_GetObjectItemCaseSensitive(o, "record");
            CHECK_MSG(cJSON_IsString(rec) && strcmp(rec->valuestring, "mokc run") == 0, "no header first: %.200s", line);
            const char *keys[] = {"git", "build", "started", "backend", "command"};
            for (int k = 0; k < 5; k++) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, keys[k]);
                CHECK_MSG(cJSON_IsString(v) && v->valuestring[0], "the header has no \"%s\"", keys[k]);
            }
            const cJSON *config = cJSON_GetObjectItemCaseSensitive(o, "config");
            CHECK_MSG(json_number(config, "train", "steps") == 3, "the header's config is not the resolved one");
            CHECK_MSG(json_number(o, "world", "ranks") == 1 && json_number(o, "seed", NULL) == 1, "world or seed");
            const cJSON *hdf5 = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "libraries"), "hdf5");
            CHECK_MSG(cJSON_IsString(hdf5) && strncmp(hdf5->valuestring, "HDF5 ", 5) == 0, "the header's libraries");
            /* the GPUs: none on the CPU backend, said so rather than left out */
            const char *backend = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "backend"));
            const bool cpu = backend && strcmp(backend, "cpu") == 0;
            const cJSON *gpu = cJSON_GetObjectItemCaseSensitive(o, "gpu");
            CHECK_MSG(json_number(o, "gpus", NULL) == (cpu ? 0 : 1), "the header's \"gpus\" is not %d", cpu ? 0 : 1);
            CHECK_MSG(cJSON_IsString(gpu) && (strcmp(gpu->valuestring, "none") == 0) == cpu,
                      "the header's \"gpu\" does not say %s", cpu ? "none" : "which");
        } else {
            steps++;
            CHECK_MSG(json_number(o, "step", NULL) == steps, "line %d is not step %d: %.200s", lines + 1, steps, line);
            CHECK_MSG(json_number(o, "loss", NULL) > 0, "step %d has no loss", steps);
            /* the spec has one MoE layer: its busiest expert over the mean, in [1, E / k = 2] */
            const cJSON *by_layer = cJSON_GetObjectItemCaseSensitive(o, "load_max_over_mean_by_layer");
            const cJSON *first = cJSON_GetArrayItem(by_layer, 0);
            CHECK_MSG(cJSON_GetArraySize(by_layer) == 1 && cJSON_IsNumber(first) && first->valuedouble >= 1 &&
                          first->valuedouble <= 2,
                      "step %d: load_max_over_mean_by_layer is not one layer's figure in [1, 2]", steps);
            /* and that expert's id, one of the 4 */
            const cJSON *busiest = cJSON_GetObjectItemCaseSensitive(o, "busiest_expert_by_layer");
            const cJSON *id = cJSON_GetArrayItem(busiest, 0);
            CHECK_MSG(cJSON_GetArraySize(busiest) == 1 && cJSON_IsNumber(id) &&
                          id->valuedouble == (int)id->valuedouble && id->valueint >= 0 && id->valueint < 4,
                      "step %d: busiest_expert_by_layer is not one layer's expert id in [0, 4)", steps);
            /* how many of the 4 no token chose: at most E - k = 2 */
            const cJSON *idle = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "idle_experts_by_layer"), 0);
            CHECK_MSG(cJSON_IsNumber(idle) && idle->valuedouble == (int)idle->valuedouble && idle->valueint >= 0 &&
                          idle->valueint <= 2,
                      "step %d: idle_experts_by_layer is not one layer's count in [0, 2]", steps);
        }
        cJSON_Delete(o);
    }
    CHECK_EQ_INT(steps, 3);
    free(text);
}

/* A disk that fills: a run record whose header cannot be written stops the run before its first step (exit 1, the
 * path named), leaving an empty record, or a resumed run's earlier lines as they were; one that fills mid-run is cut
 * back to its last whole line with one warning, the training goes on, and the run's last line says where the record
 * stops. The files are capped under mpirun (test_mpirun_capped_rank). */
static void test_run_record_on_a_full_disk(void) {
    if (!test_have("mpirun")) {
        test_skip("mpirun not found");
        return;
    }
    char spec[4200], train[9000], cmd[20000], out[16384], record[4300];
    const char *dir = prepare_corpus(spec, sizeof spec);
    snprintf(record, sizeof record, "%s/full.jsonl", dir);
    snprintf(train, sizeof train, "%s train %s --set train.steps=40 --set log.metrics_path=%s", test_mokc_binary(),
             spec, record);
    int rc = test_run(test_mpirun_capped_rank(cmd, sizeof cmd, NULL, 1, train), out, sizeof out);
    CHECK_MSG(rc == 1, "a header that cannot be written: exit %d, expected 1: %s", rc, out);
    CHECK_STR_CONTAINS(out, "cannot write the run record");
    CHECK_STR_CONTAINS(out, "File too large");
    CHECK_MSG(strstr(out, "step     1/") == NULL, "a step ran without its record: %s", out);
    CHECK_EQ_INT(test_json_lines(record), 0);

    rc = test_run(test_mpirun_capped_rank(cmd, sizeof cmd, NULL, 8, train), out, sizeof out);
    CHECK_MSG(rc == 0, "a record that fills mid-run: exit %d, expected 0: %s", rc, out);
    CHECK_STR_CONTAINS(out, "mokc: warning: cannot write the run record");
    CHECK_STR_CONTAINS(out, "final: train loss");
    const char *cut = strstr(out, "(incomplete: it stops before step ");
    CHECK_MSG(cut != NULL, "the last line does not say where the record stops: %s", out);
    const int stop = cut ? atoi(cut + strlen("(incomplete: it stops before step ")) : 0;
    double loss[MAX_STEPS];
    CHECK_MSG(stop > 1, "the record stops at step %d", stop);
    CHECK_EQ_INT(test_read_metric(record, "loss", loss, MAX_STEPS), stop - 1); /* steps 1 .. stop - 1 */
    CHECK_EQ_INT(test_json_lines(record), stop);                             /* and the header */

    /* resumed from step 6 with room for the kept lines but not the new header: the kept lines stay */
    snprintf(train, sizeof train, "%s train %s --set train.steps=6 --set log.metrics_path=%s "
             "--set checkpoint.dir=%s/ck", test_mokc_binary(), spec, record, dir);
    rc = test_run(train, out, sizeof out);
    CHECK_MSG(rc == 0, "6 steps with a checkpoint: exit %d: %s", rc, out);
    char *before = test_read_text(record);
    const int kib = before ? (int)(strlen(before) / 1024 + 1) : 1; /* a header is longer than 1 KiB */
    snprintf(train, sizeof train, "%s train %s --set train.steps=8 --set log.metrics_path=%s "
             "--set checkpoint.dir=%s/ck --set checkpoint.resume=auto", test_mokc_binary(), spec, record, dir);
    rc = test_run(test_mpirun_capped_rank(cmd, sizeof cmd, NULL, kib, train), out, sizeof out);
    CHECK_MSG(rc == 1, "a resumed run's header that cannot be written: exit %d, expected 1: %s", rc, out);
    char *after = test_read_text(record);
    CHECK_MSG(before && after && strcmp(before, after) == 0, "the resumed run's record lost its earlier lines: %s",
              after ? after : "(none)");
    free(before), free(after);
}

TEST_SUITE(train, TEST_CASE(test_run_record), TEST_CASE(test_run_record_on_a_full_disk),
           TEST_CASE(test_loss_falls_on_real_text), TEST_CASE(test_same_seed_bitwise_other_seed_differs),
           TEST_CASE(test_grad_accum_matches_larger_batch));
