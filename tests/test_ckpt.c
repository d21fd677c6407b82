/*
 * Checkpoints and resumption, through the binary as a user runs it (tiny MoE on the repository's
 * LICENSE): a resumed run is bitwise identical to an uninterrupted one (losses, weights, AdamW
 * moments, expert bias, loader position; also with bf16 moments), interruptions anywhere in the writer (fault injection
 * and kill -9) leave the newest complete checkpoint loadable, mismatched and damaged checkpoints
 * are refused with exit 2 and a message naming the problem, keep=N prunes, SIGTERM checkpoints
 * and exits 0. The multi-rank cases run under mpirun when it is installed. Every run uses one
 * OpenMP thread: the 2-core CI machine is shared by parallel ranks.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>

#include "ckpt.h"
#include "signals.h"
#include "h5_compare.h"
#include "test.h"

#define MPIRUN TEST_MPIRUN " -np"

/* A tiny MoE with every kind of state: experts (sharded under EP), a shared expert, a dense first
 * layer, a moving expert bias, validation. %d: vocab; %s: the directory of the token files. */
static const char *spec_text =
    "{\"model\": {\"vocab_size\": %d, \"hidden_size\": 32, \"num_layers\": 2, \"num_heads\": 4,"
    " \"num_kv_heads\": 2, \"max_seq_len\": 64, \"intermediate_size\": 64, \"first_k_dense_replace\": 1},"
    " \"moe\": {\"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32,"
    " \"n_shared_experts\": 1, \"router_aux_loss_coef\": 0.01, \"expert_bias_update_rate\": 0.001},"
    " \"train\": {\"seq_len\": 16, \"micro_batch\": 4, \"steps\": 8, \"lr\": 0.01, \"min_lr\": 0.001,"
    " \"warmup_steps\": 2, \"seed\": 1},"
    " \"data\": {\"train\": \"%s/corpus.h5\", \"val\": \"%s/corpus-val.h5\", \"val_every\": 3, \"val_batches\": 2},"
    " \"log\": {\"every\": 100, \"metrics_path\": \"%s/record.jsonl\"}, \"backend\": \"cpu\"}";

typedef struct {
    char dir[4096];
    char spec[4200];
} Setup;

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
/* Formats into one of 64 rotating buffers (enough for the paths one test holds at once; the
 * helpers below use their own). */
static char *fmt(const char *f, ...) {
    static char buf[64][4400];
    static int k;
    char tmp[4400]; /* an argument may be the buffer about to be reused */
    va_list ap;
    va_start(ap, f);
    vsnprintf(tmp, sizeof tmp, f, ap);
    va_end(ap);
    char *p = buf[k++ % 64];
    memcpy(p, tmp, strlen(tmp) + 1);
    return p;
}

/* A fresh directory with LICENSE prepared into corpus.h5 / corpus-val.h5 and spec.json. */
static Setup make_setup(int vocab) {
    Setup s;
    snprintf(s.dir, sizeof s.dir, "%s", test_tmpdir());
    snprintf(s.spec, sizeof s.spec, "%s/spec.json", s.dir);
    test_prepare_corpus(s.dir, 0.1);
    test_write_file(s.spec, spec_text, vocab, s.dir, s.dir, s.dir); /* the run record in the scratch directory too */
    return s;
}

/* Runs `[launcher] mokc train spec extra`; returns the exit status, output in out. */
static int train(const Setup *s, const char *launcher, const char *extra, char *out, size_t outlen) {
    /* "; exit $?": the shell that waits stays inside the captured output ("Killed" lines). */
    return test_run(fmt("OMP_NUM_THREADS=1 %s %s train %s %s; exit $?", launcher, test_mokc_binary(), s->spec, extra),
                    out, outlen);
}

static int train_ok(const Setup *s, const char *launcher, const char *extra) {
    static char out[65536];
    int rc = train(s, launcher, extra, out, sizeof out);
    CHECK_MSG(rc == 0, "train %s failed (%d): %s", extra, rc, out);
    return rc == 0;
}

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

/* Whether mpirun is here; a skip of the test otherwise. */
static int mpirun_or_skip(void) {
    if (test_have("mpirun")) return 1;
    test_skip("mpirun not found");
    return 0;
}

/* ---------- comparing runs ---------- */

/* Two runs logged the same numbers, bit for bit, for `expect` steps (timings aside). */
static void check_same_metrics(const char *a, const char *b, int expect) {
    static const char *const keys[] = {"step", "loss", "aux_loss", "grad_norm", "lr", "tokens_seen",
                                       "load_max_over_mean", "val_loss"};
    enum { MAX = 4096 };
    static double va[MAX], vb[MAX];
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        int na = test_read_metric(a, keys[k], va, MAX), nb = test_read_metric(b, keys[k], vb, MAX);
        if (k == 0) {
            CHECK_EQ_INT(na, expect);
            CHECK_EQ_INT(nb, expect);
        }
        CHECK_MSG(na == nb && memcmp(va, vb, sizeof(double) * (size_t)na) == 0, "\"%s\" differs between %s and %s",
                  keys[k], a, b);
    }
}

static int64_t attr_of(const char *file, const char *name) {
    int64_t v = -1;
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t a = f >= 0 ? H5Aopen(f, name, H5P_DEFAULT) : -1;
    if (a >= 0) H5Aread(a, H5T_NATIVE_INT64, &v);
    if (a >= 0) H5Aclose(a);
    if (f >= 0) H5Fclose(f);
    return v;
}

/* Two checkpoints hold the same weights, expert bias, AdamW moments and counters on every rank. */
static void check_same_checkpoint(const char *a, const char *b, int world) {
    char ma[4400], mb[4400], sa[4400], sb[4400];
    snprintf(ma, sizeof ma, "%s/model.h5", a);
    snprintf(mb, sizeof mb, "%s/model.h5", b);
    CHECK_MSG(test_h5_same_group(ma, mb, "params") >= 20, "too few tensors compared in %s", ma);
    CHECK_EQ_INT(test_h5_same_group(ma, mb, "buffers"), 1);
    for (int r = 0; r < world; r++) {
        snprintf(sa, sizeof sa, "%s/state_rank%05d.h5", a, r);
        snprintf(sb, sizeof sb, "%s/state_rank%05d.h5", b, r);
        CHECK(test_h5_same_group(sa, sb, "adam_m") >= 20);
        CHECK(test_h5_same_group(sa, sb, "adam_v") >= 20);
        const char *names[] = {"step", "tokens_seen", "loader_position"};
        for (int k = 0; k < 3; k++) CHECK_EQ_INT(attr_of(sa, names[k]), attr_of(sb, names[k]));
    }
}

/* ---------- resume equivalence ---------- */

/* Whether the checkpoint's expert bias has moved from zero (else resuming would not test it). */
static int bias_is_nonzero(const char *checkpoint) {
    hid_t f = H5Fopen(fmt("%s/model.h5", checkpoint), H5F_ACC_RDONLY, H5P_DEFAULT);
    hssize_t n = 0;
    float *b = f >= 0 ? test_h5_read_floats(f, "buffers/expert_bias", &n) : NULL;
    int nonzero = 0;
    for (hssize_t i = 0; b && i < n; i++) nonzero |= b[i] != 0;
    free(b);
    if (f >= 0) H5Fclose(f);
    return nonzero;
}

/* 7 steps straight (checkpoints at 3, 6 and the end) vs resuming the step-3 checkpoint into
 * another directory: the same numbers for all 7 steps (the resumed run keeps the metrics lines up
 * to its checkpoint and appends) and the same final state. Step 3 has a non-zero expert bias (the
 * sign-based updates of this run cancel out at even steps). */
static void resume_is_bitwise(void) {
    Setup s = make_setup(256);
    char *a = fmt("%s/a", s.dir), *b = fmt("%s/b", s.dir);
    char *ma = fmt("%s/a.jsonl", s.dir), *mb = fmt("%s/b.jsonl", s.dir);
    if (!train_ok(&s, "", fmt("--set train.steps=7 --set checkpoint.dir=%s --set checkpoint.every=3 --set "
                              "log.metrics_path=%s", a, ma)))
        return;
    CHECK(file_exists(fmt("%s/step_00000003/DONE", a)));
    CHECK(file_exists(fmt("%s/step_00000007/DONE", a)));
    CHECK(bias_is_nonzero(fmt("%s/step_00000003", a)));
    /* A crashed run logged steps past its checkpoint: the resumed run must drop them. */
    char out[9000];
    CHECK(test_run(fmt("cp %s %s", ma, mb), out, sizeof out) == 0);
    if (!train_ok(&s, "", fmt("--set train.steps=7 --set checkpoint.dir=%s --set checkpoint.resume=%s/step_00000003 "
                              "--set log.metrics_path=%s", b, a, mb)))
        return;
    check_same_metrics(ma, mb, 7);
    check_same_checkpoint(fmt("%s/step_00000007", a), fmt("%s/step_00000007", b), 1);
    /* Resumed inside its own directory, the run replaces checkpoints 6 and 7 with equal ones. */
    if (!train_ok(&s, "", fmt("--set train.steps=7 --set checkpoint.dir=%s --set checkpoint.every=3 --set "
                              "checkpoint.resume=%s/step_00000003", a, a)))
        return;
    CHECK_EQ_INT(test_run(fmt("ls %s", a), out, sizeof out), 0);
    CHECK_MSG(strcmp(out, "step_00000003\nstep_00000006\nstep_00000007\n") == 0, "left: %s", out);
    check_same_checkpoint(fmt("%s/step_00000007", a), fmt("%s/step_00000007", b), 1);
    /* Resuming a finished run trains nothing and succeeds. */
    static char big[65536];
    int rc = train(&s, "", fmt("--set train.steps=7 --set checkpoint.dir=%s --set checkpoint.resume=auto", b), big,
                   sizeof big);
    CHECK_EQ_INT(rc, 0);
    CHECK_STR_CONTAINS(big, "nothing left to train");
}

/* train.optimizer_state bf16: the checkpoint's moments are bf16 numbers (kept in the fp32 format),
 * and resuming from them is bitwise as with fp32 moments. */
static void resume_is_bitwise_with_bf16_moments(void) {
    Setup s = make_setup(256);
    char *a = fmt("%s/a", s.dir), *b = fmt("%s/b", s.dir);
    char *ma = fmt("%s/a.jsonl", s.dir), *mb = fmt("%s/b.jsonl", s.dir);
    const char *bf16 = "--set train.optimizer_state=bf16 --set train.steps=5";
    if (!train_ok(&s, "", fmt("%s --set checkpoint.dir=%s --set checkpoint.every=2 --set log.metrics_path=%s", bf16, a,
                              ma)))
        return;
    for (int m = 0; m < 2; m++) {
        const char *group = m ? "adam_v" : "adam_m";
        long values = 0, not_bf16 = test_h5_count_not_bf16(fmt("%s/step_00000005/state_rank00000.h5", a), group,
                                                           &values);
        CHECK_MSG(values > 1000 && not_bf16 == 0, "%s: %ld of %ld values are not bf16 numbers", group, not_bf16,
                  values);
    }
    char out[9000]; /* the resumed run keeps its metrics up to the checkpoint and appends */
    CHECK(test_run(fmt("cp %s %s", ma, mb), out, sizeof out) == 0);
    if (!train_ok(&s, "", fmt("%s --set checkpoint.dir=%s --set checkpoint.resume=%s/step_00000002 --set "
                              "log.metrics_path=%s", bf16, b, a, mb)))
        return;
    check_same_metrics(ma, mb, 5);
    check_same_checkpoint(fmt("%s/step_00000005", a), fmt("%s/step_00000005", b), 1);
}

/* ---------- running a process in the background ---------- */

/* Starts `[launcher] mokc train ...` (exec'ed, so pid is the launcher's or mokc's own) with output
 * into log. launcher: "" or a command such as "mpirun -np 2", without environment assignments. */
static pid_t spawn_train(const Setup *s, const char *launcher, const char *extra, const char *log) {
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "exec %s %s train %s %s > %s 2>&1", launcher, test_mokc_binary(), s->spec, extra, log);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("OMP_NUM_THREADS", "1", 1);
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* The steps a run record holds: its complete lines with a "step" (not its headers). */
static int count_steps(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[8192];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strchr(line, '\n') && strncmp(line, "{\"step\": ", 9) == 0;
    fclose(f);
    return n;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Waits until the run record has `steps` steps (the run is training); false after 30 s. */
static int wait_for_steps(const char *metrics, int steps) {
    for (int i = 0; i < 3000; i++) {
        if (count_steps(metrics) >= steps) return 1;
        sleep_ms(10);
    }
    return 0;
}

/* The exit status of pid (128 + signal if killed); SIGKILLs it after 30 s and returns -1. */
static int wait_exit(pid_t pid) {
    int status = 0;
    for (int i = 0; i < 3000; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

static char *slurp(const char *path) {
    static char buf[1 << 16];
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = '\0';
    if (f) fclose(f);
    return buf;
}

/* ---------- signals ---------- */

/* SIGTERM mid-run: the step finishes, a checkpoint of it is written, exit 0. Resuming it ("auto")
 * for 3 more steps equals a straight run of as many steps (a constant learning rate makes
 * train.steps irrelevant to the numbers), losses and state. */
static void sigterm_checkpoints_and_resumes(void) {
    Setup s = make_setup(256);
    const char *constant = "--set train.lr_schedule=constant --set train.warmup_steps=0";
    char *dir = fmt("%s/ck", s.dir), *m = fmt("%s/m.jsonl", s.dir), *log = fmt("%s/log", s.dir);
    pid_t pid = spawn_train(&s, "", fmt("%s --set train.steps=1000000 --set checkpoint.dir=%s --set log.metrics_path=%s",
                                    constant, dir, m), log);
    CHECK_MSG(wait_for_steps(m, 3), "the run did not start: %s", slurp(log));
    kill(pid, SIGTERM);
    int rc = wait_exit(pid);
    const char *out = slurp(log);
    CHECK_MSG(rc == 0, "exit %d after SIGTERM: %s", rc, out);
    CHECK_STR_CONTAINS(out, "SIGTERM received");
    const char *at = strstr(out, "stopped by SIGTERM after step ");
    CHECK_MSG(at != NULL, "no stop message: %s", out);
    int k = at ? atoi(at + strlen("stopped by SIGTERM after step ")) : 0;
    CHECK_MSG(file_exists(fmt("%s/step_%08d/DONE", dir, k)), "no checkpoint of step %d: %s", k, out);
    CHECK_EQ_INT(count_steps(m), k);
    if (k < 3) return;
    char *straight = fmt("%s/straight", s.dir), *ms = fmt("%s/straight.jsonl", s.dir);
    if (!train_ok(&s, "", fmt("%s --set train.steps=%d --set checkpoint.dir=%s --set checkpoint.resume=auto "
                              "--set log.metrics_path=%s", constant, k + 3, dir, m)) ||
        !train_ok(&s, "", fmt("%s --set train.steps=%d --set checkpoint.dir=%s --set log.metrics_path=%s", constant,
                              k + 3, straight, ms)))
        return;
    check_same_metrics(m, ms, k + 3);
    check_same_checkpoint(fmt("%s/step_%08d", dir, k + 3), fmt("%s/step_%08d", straight, k + 3), 1);
}

/* Without checkpoint.dir a stop signal cannot save anything: it says so and exits 128 + 15. */
static void sigterm_without_checkpoint_dir(void) {
    Setup s = make_setup(256);
    char *m = fmt("%s/m.jsonl", s.dir), *log = fmt("%s/log", s.dir);
    pid_t pid = spawn_train(&s, "", fmt("--set train.steps=1000000 --set train.lr_schedule=constant --set "
                                    "log.metrics_path=%s", m), log);
    CHECK_MSG(wait_for_steps(m, 2), "the run did not start: %s", slurp(log));
    kill(pid, SIGTERM);
    int rc = wait_exit(pid);
    const char *out = slurp(log);
    CHECK_MSG(rc == 128 + SIGTERM, "exit %d: %s", rc, out);
    CHECK_STR_CONTAINS(out, "checkpoint.dir is not set, so no checkpoint was written");
    CHECK_STR_CONTAINS(out, "---> HINT");
}

/* The first SIGINT only sets the flag; the second ends the process at once with 130. */
static void second_sigint_exits_at_once(void) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(13);
        signals_install(0);
        raise(SIGUSR1);
        if (signals_stop_requested() != SIGUSR1) _exit(10);
        raise(SIGTERM); /* ignored: the first signal is kept */
        if (signals_stop_requested() != SIGUSR1) _exit(11);
        raise(SIGINT);  /* a SIGINT after any stop signal exits */
        _exit(12);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGINT, "status %d", status);
}

/* ---------- crash safety ---------- */

/* The writer killed (SIGKILL) at each point of checkpoint 4 (keep = 1, so pruning removes step 2):
 * the newest complete checkpoint is 2 before the directory rename and 4 after it; the leftover is
 * cleaned up, and resuming reaches the same step-6 state as a run that never crashed. */
static void crash_at_every_writer_point(void) {
    static const struct {
        const char *point;
        int newest;
    } cases[] = {{"dir", 2}, {"state", 2}, {"model_partial", 2}, {"model", 2},
                 {"done", 2}, {"renamed", 4}, {"prune", 4}};
    Setup s = make_setup(256);
    char ref[4400];
    snprintf(ref, sizeof ref, "%s/ref", s.dir);
    const char *opts = "--set train.steps=6 --set checkpoint.every=2 --set checkpoint.keep=1";
    if (!train_ok(&s, "", fmt("%s --set checkpoint.dir=%s", opts, ref))) return;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[4400], out[65536], path[CKPT_PATH_MAX];
        snprintf(dir, sizeof dir, "%s/%s", s.dir, cases[i].point);
        int rc = train(&s, fmt("MOKC_CKPT_FAULT=%s:4", cases[i].point), fmt("%s --set checkpoint.dir=%s", opts, dir),
                       out, sizeof out);
        CHECK_MSG(rc == 128 + SIGKILL, "%s: exit %d, expected a kill: %s", cases[i].point, rc, out);
        CHECK_MSG(ckpt_find_latest(dir, path, sizeof path) == cases[i].newest, "%s: newest complete is %d, not %d",
                  cases[i].point, ckpt_find_latest(dir, path, sizeof path), cases[i].newest);
        rc = train(&s, "", fmt("%s --set checkpoint.dir=%s --set checkpoint.resume=auto", opts, dir), out, sizeof out);
        CHECK_MSG(rc == 0, "%s: resume failed (%d): %s", cases[i].point, rc, out);
        CHECK_STR_CONTAINS(out, fmt("resumed from %s/step_%08d", dir, cases[i].newest));
        check_same_checkpoint(fmt("%s/step_00000006", ref), fmt("%s/step_00000006", dir), 1);
        char cmd[9000];
        snprintf(cmd, sizeof cmd, "ls %s", dir);
        CHECK_EQ_INT(test_run(cmd, out, sizeof out), 0);
        CHECK_MSG(strcmp(out, "step_00000006\n") == 0, "%s: left behind: %s", cases[i].point, out);
    }
}

/* kill -9 at random moments of a run that checkpoints every step (so mostly inside the writer):
 * each time the newest complete checkpoint loads and the run continues. */
static void kill9_at_random_moments(void) {
    Setup s = make_setup(256);
    char dir[4400], log[4400], out[65536], path[CKPT_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/ck", s.dir);
    snprintf(log, sizeof log, "%s/log", s.dir);
    srand((unsigned)time(NULL));
    for (int round = 0; round < 3; round++) {
        char *m = fmt("%s/m%d.jsonl", s.dir, round);
        pid_t pid = spawn_train(&s, "", fmt("--set train.steps=1000000 --set train.lr_schedule=constant --set "
                                        "checkpoint.dir=%s --set checkpoint.every=1 --set checkpoint.keep=2 --set "
                                        "checkpoint.resume=auto --set log.metrics_path=%s", dir, m), log);
        CHECK_MSG(wait_for_steps(m, 2), "the run did not start: %s", slurp(log));
        int delay = rand() % 40;
        sleep_ms(delay);
        kill(pid, SIGKILL);
        CHECK_EQ_INT(wait_exit(pid), 128 + SIGKILL);
        int newest = ckpt_find_latest(dir, path, sizeof path);
        CHECK_MSG(newest >= 1, "round %d (killed %d ms after step 2): no complete checkpoint", round, delay);
        int rc = train(&s, "", fmt("--set train.steps=%d --set train.lr_schedule=constant --set checkpoint.dir=%s "
                                   "--set checkpoint.keep=2 --set checkpoint.resume=auto", newest + 1, dir),
                       out, sizeof out);
        CHECK_MSG(rc == 0, "round %d: resuming step %d failed (%d): %s", round, newest, rc, out);
        CHECK_STR_CONTAINS(out, fmt("resumed from %s", path));
    }
}

/* ---------- refusals ---------- */

static void expect_refusal(const Setup *s, const char *launcher, const char *extra, const char *n1, const char *n2) {
    static char out[65536];
    int rc = train(s, launcher, extra, out, sizeof out);
    CHECK_MSG(rc == 2, "exit %d (expected 2) for %s: %s", rc, extra, out);
    if (n1) CHECK_STR_CONTAINS(out, n1);
    if (n2) CHECK_STR_CONTAINS(out, n2);
    CHECK_STR_CONTAINS(out, "---> HINT");
}

/* A checkpoint of another model is refused with the setting that differs, never partly loaded. */
static void mismatched_model_refused(void) {
    Setup s = make_setup(256);
    char *dir = fmt("%s/ck", s.dir);
    if (!train_ok(&s, "", fmt("--set train.steps=2 --set checkpoint.dir=%s", dir))) return;
    char *resume = fmt("--set checkpoint.dir=%s --set checkpoint.resume=auto", dir);
    expect_refusal(&s, "", fmt("%s --set model.hidden_size=64", resume), "model.hidden_size is 32 in the checkpoint but 64 in the spec", NULL);
    expect_refusal(&s, "", fmt("%s --set moe.num_experts=8", resume), "moe.num_experts is 4 in the checkpoint but 8", NULL);
    expect_refusal(&s, "", fmt("%s --set model.num_layers=3", resume), "model.num_layers is 2", NULL);
    expect_refusal(&s, "", fmt("%s --set model.tie_word_embeddings=true", resume), "model.tie_word_embeddings", NULL);
    /* The vocabulary: a model over 512 token ids (imported raw ids), resumed by a 256-id model. */
    char out[65536];
    char *ids = fmt("%s/ids.u16", s.dir);
    FILE *f = fopen(ids, "wb");
    for (int i = 0; f && i < 6000; i++) {
        uint16_t t = (uint16_t)((i * 7919) % 512);
        fwrite(&t, 2, 1, f);
    }
    if (f) fclose(f);
    CHECK(test_run(fmt("%s prepare --raw-u16 %s --vocab 512 --out %s/v512.h5 --val-fraction 0", test_mokc_binary(),
                       ids, s.dir), out, sizeof out) == 0);
    char *d512 = fmt("%s/ck512", s.dir);
    if (!train_ok(&s, "", fmt("--set model.vocab_size=512 --set data.train=%s/v512.h5 --set data.val= --set data.val_every=0 --set "
                              "train.steps=2 --set checkpoint.dir=%s", s.dir, d512)))
        return;
    expect_refusal(&s, "", fmt("--set checkpoint.dir=%s --set checkpoint.resume=%s/step_00000002", dir, d512),
                   "model.vocab_size is 512 in the checkpoint but 256 in the spec", NULL);
    /* A tensor renamed inside the file: named, not silently skipped. */
    char *model = fmt("%s/step_00000002/model.h5", dir);
    hid_t h = H5Fopen(model, H5F_ACC_RDWR, H5P_DEFAULT);
    CHECK(h >= 0 && H5Lmove(h, "params/layers.0.attn.wq", h, "params/layers.0.attn.wq_old", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    if (h >= 0) H5Fclose(h);
    struct stat st;
    stat(model, &st);
    CHECK(test_run(fmt("sed -i 's/^file model.h5 .*/file model.h5 %lld/' %s/step_00000002/DONE", (long long)st.st_size,
                       dir), out, sizeof out) == 0);
    expect_refusal(&s, "", resume, "has no tensor 'layers.0.attn.wq'", model);
}

static void corrupt(const char *path, long offset, int nbytes) {
    FILE *f = fopen(path, "r+b");
    if (!f) return;
    fseek(f, offset, SEEK_SET);
    for (int i = 0; i < nbytes; i++) fputc(0x5a ^ i, f);
    fclose(f);
}

/* Truncated, corrupted and incomplete checkpoints: exit 2 and a message naming the file. */
static void damaged_checkpoints_refused(void) {
    Setup s = make_setup(256);
    char *dir = fmt("%s/ck", s.dir), out[65536];
    if (!train_ok(&s, "", fmt("--set train.steps=2 --set checkpoint.dir=%s", dir))) return;
    char *good = fmt("%s/step_00000002", dir), *bad = fmt("%s/bad", s.dir);
    char *resume = fmt("--set checkpoint.dir=%s/other --set checkpoint.resume=%s", s.dir, bad);
    char *model = fmt("%s/model.h5", bad), *state = fmt("%s/state_rank00000.h5", bad);
    struct stat st;
    stat(fmt("%s/model.h5", good), &st);
    long size = (long)st.st_size;
#define FRESH_COPY() CHECK(test_run(fmt("rm -rf %s && cp -r %s %s", bad, good, bad), out, sizeof out) == 0)
    FRESH_COPY();
    CHECK(truncate(model, size / 2) == 0);
    expect_refusal(&s, "", resume, "truncated", model);
    /* Truncated, with DONE edited to match: HDF5 itself notices. */
    CHECK(test_run(fmt("sed -i 's/^file model.h5 .*/file model.h5 %ld/' %s/DONE", size / 2, bad), out, sizeof out) == 0);
    expect_refusal(&s, "", resume, "truncated or corrupt", model);
    /* Bytes flipped inside the tensors: the checksums catch them. */
    FRESH_COPY();
    corrupt(model, size * 3 / 4, 16);
    expect_refusal(&s, "", resume, "corrupt", model);
    /* Flipped in the file's metadata (the superblock). */
    FRESH_COPY();
    corrupt(model, 20, 8);
    expect_refusal(&s, "", resume, "corrupt", model);
    /* A state file of random bytes. */
    FRESH_COPY();
    stat(state, &st);
    corrupt(state, 0, (int)(st.st_size < 4096 ? st.st_size : 4096));
    expect_refusal(&s, "", resume, "corrupt", state);
    /* No DONE: an interrupted write. */
    FRESH_COPY();
    unlink(fmt("%s/DONE", bad));
    expect_refusal(&s, "", resume, "no DONE marker", bad);
    /* A DONE that is not ours. */
    FRESH_COPY();
    FILE *f = fopen(fmt("%s/DONE", bad), "w");
    if (f) {
        fputs("garbage\n", f);
        fclose(f);
    }
    expect_refusal(&s, "", resume, "corrupt", "DONE");
    expect_refusal(&s, "", fmt("--set checkpoint.resume=%s/nowhere", s.dir), "does not exist", "nowhere");
    expect_refusal(&s, "", fmt("--set checkpoint.resume=%s", dir), "holds checkpoints but is not one", good);
#undef FRESH_COPY
}

/* keep = 2 leaves the newest two complete checkpoints; interrupted leftovers go, other files stay. */
static void keep_prunes_old_checkpoints(void) {
    Setup s = make_setup(256);
    char *dir = fmt("%s/ck", s.dir), out[65536];
    CHECK(test_run(fmt("mkdir -p %s/step_00000099.tmp-1 %s/step_00000050 %s/mine && touch %s/step_00000050/model.h5 "
                       "%s/notes.txt", dir, dir, dir, dir, dir), out, sizeof out) == 0);
    if (!train_ok(&s, "", fmt("--set train.steps=5 --set checkpoint.dir=%s --set checkpoint.every=1 --set "
                              "checkpoint.keep=2", dir)))
        return;
    CHECK_EQ_INT(test_run(fmt("ls %s", dir), out, sizeof out), 0);
    CHECK_MSG(strcmp(out, "mine\nnotes.txt\nstep_00000004\nstep_00000005\n") == 0, "left: %s", out);
    /* A fresh run into a directory with checkpoints warns that they will mix. */
    int rc = train(&s, "", fmt("--set train.steps=2 --set checkpoint.dir=%s", dir), out, sizeof out);
    CHECK_EQ_INT(rc, 0);
    CHECK_STR_CONTAINS(out, "already holds checkpoints");
}

/* Resuming an older checkpoint of a directory that holds newer ones warns that those outrank it,
 * and a save never prunes the checkpoint it just wrote (here keep = 1 with a newer one present). */
static void older_resume_into_same_dir(void) {
    Setup s = make_setup(256);
    char *dir = fmt("%s/ck", s.dir), out[65536];
    if (!train_ok(&s, "", fmt("--set train.steps=6 --set checkpoint.dir=%s --set checkpoint.every=2 --set "
                              "checkpoint.keep=2", dir)))
        return;
    int rc = train(&s, "", fmt("--set train.steps=5 --set checkpoint.dir=%s --set checkpoint.every=1 --set "
                               "checkpoint.keep=1 --set checkpoint.resume=%s/step_00000004", dir, dir), out, sizeof out);
    CHECK_EQ_INT(rc, 0);
    CHECK_STR_CONTAINS(out, "already holds the newer");
    CHECK_MSG(file_exists(fmt("%s/step_00000005/DONE", dir)), "the checkpoint just written was pruned: %s", out);
}

/* ---------- several ranks ---------- */

/* dp = 2: resume equivalence on two ranks (a state file per rank), and a layout mismatch. */
static void mpi_dp2_resume_and_layout(void) {
    if (!mpirun_or_skip()) return;
    Setup s = make_setup(256);
    char *a = fmt("%s/a", s.dir), *b = fmt("%s/b", s.dir), *ma = fmt("%s/a.jsonl", s.dir), *mb = fmt("%s/b.jsonl", s.dir);
    const char *np2 = MPIRUN " 2";
    char out[9000];
    if (!train_ok(&s, np2, fmt("--set train.steps=6 --set checkpoint.dir=%s --set checkpoint.every=3 --set "
                               "log.metrics_path=%s", a, ma)) ||
        test_run(fmt("cp %s %s", ma, mb), out, sizeof out) != 0 ||
        !train_ok(&s, np2, fmt("--set train.steps=6 --set checkpoint.dir=%s --set checkpoint.resume=%s/step_00000003 "
                               "--set log.metrics_path=%s", b, a, mb)))
        return;
    check_same_metrics(ma, mb, 6);
    check_same_checkpoint(fmt("%s/step_00000006", a), fmt("%s/step_00000006", b), 2);
    expect_refusal(&s, "", fmt("--set checkpoint.dir=%s --set checkpoint.resume=auto", a),
                   "written by 2 ranks (dp 2 x ep 1) but this run has 1", "mpirun -np 2");
    /* SIGUSR1 to every rank (as Slurm delivers it to every task): they stop together after one step
     * and checkpoint it. Ranks are mpirun's children; mpirun's own forwarding varies by version. */
    char *c = fmt("%s/c", s.dir), *mc = fmt("%s/c.jsonl", s.dir), *log = fmt("%s/log", s.dir);
    pid_t pid = spawn_train(&s, "mpirun --oversubscribe -np 2", fmt("--set train.steps=1000000 --set "
                            "train.lr_schedule=constant --set checkpoint.dir=%s --set log.metrics_path=%s", c, mc), log);
    CHECK_MSG(wait_for_steps(mc, 3), "the run did not start: %s", slurp(log));
    char out2[256];
    CHECK_MSG(test_run(fmt("pkill -USR1 -P %d", (int)pid), out2, sizeof out2) == 0, "no rank to signal: %s", out2);
    int rc = wait_exit(pid);
    const char *text = slurp(log);
    CHECK_MSG(rc == 0, "mpirun exit %d after SIGUSR1: %s", rc, text);
    const char *at = strstr(text, "stopped by SIGUSR1 after step ");
    CHECK_MSG(at != NULL, "no stop message: %s", text);
    int k = at ? atoi(at + strlen("stopped by SIGUSR1 after step ")) : 0;
    CHECK(file_exists(fmt("%s/step_%08d/state_rank00001.h5", c, k)));
    CHECK(file_exists(fmt("%s/step_%08d/DONE", c, k)));
}

/* ep = 2: each rank owns half the experts and writes its hyperslab of the model file in its turn.
 * With lr = 0 the weights stay at their (sharding-independent) initialisation, so the file must
 * equal a one-rank run's; and resuming on two EP ranks is bitwise. */
static void mpi_ep2_model_file_and_resume(void) {
    if (!mpirun_or_skip()) return;
    Setup s = make_setup(256);
    const char *np2 = MPIRUN " 2";
    static char out[65536];
    char *probe = fmt("%s/probe", s.dir);
    int rc = train(&s, np2, fmt("--set parallel.ep=2 --set train.steps=2 --set train.micro_batch=4 --set train.lr=0 "
                                "--set train.min_lr=0 --set checkpoint.dir=%s", probe), out, sizeof out);
    if (rc != 0 && strstr(out, "not built yet")) {
        test_skip("this mokc does not run parallel.ep > 1 yet");
        return;
    }
    CHECK_MSG(rc == 0, "ep=2 failed (%d): %s", rc, out);
    char *one = fmt("%s/one", s.dir);
    if (!train_ok(&s, "", fmt("--set train.steps=2 --set train.micro_batch=8 --set train.lr=0 --set train.min_lr=0 "
                              "--set checkpoint.dir=%s", one)))
        return;
    CHECK(test_h5_same_group(fmt("%s/step_00000002/model.h5", probe), fmt("%s/step_00000002/model.h5", one), "params") >= 20);

    char *a = fmt("%s/a", s.dir), *b = fmt("%s/b", s.dir), *ma = fmt("%s/a.jsonl", s.dir), *mb = fmt("%s/b.jsonl", s.dir);
    if (!train_ok(&s, np2, fmt("--set parallel.ep=2 --set train.steps=6 --set checkpoint.dir=%s --set "
                               "checkpoint.every=3 --set log.metrics_path=%s", a, ma)) ||
        test_run(fmt("cp %s %s", ma, mb), out, sizeof out) != 0 ||
        !train_ok(&s, np2, fmt("--set parallel.ep=2 --set train.steps=6 --set checkpoint.dir=%s --set "
                               "checkpoint.resume=%s/step_00000003 --set log.metrics_path=%s", b, a, mb)))
        return;
    check_same_metrics(ma, mb, 6);
    check_same_checkpoint(fmt("%s/step_00000006", a), fmt("%s/step_00000006", b), 2);
    expect_refusal(&s, np2, fmt("--set checkpoint.dir=%s --set checkpoint.resume=auto", a),
                   "written by 2 ranks (dp 1 x ep 2) but this run has 2 (dp 2 x ep 1)", NULL);
}

/* Adds 1e-3 to the first element of dataset `name` in the checkpoint's file `file` and records the file's new size
 * in DONE, as a damaged (or wrongly written) state file that still loads would be. */
static void nudge_dataset(const char *checkpoint, const char *file, const char *name) {
    char *path = fmt("%s/%s", checkpoint, file), out[4096];
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t d = f >= 0 ? H5Dopen2(f, name, H5P_DEFAULT) : -1;
    hssize_t n = 0;
    float *x = f >= 0 ? test_h5_read_floats(f, name, &n) : NULL;
    CHECK_MSG(d >= 0 && x && n > 0, "cannot read %s in %s", name, path);
    if (d >= 0 && x && n > 0) {
        x[0] += 1e-3f;
        CHECK(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x) >= 0);
    }
    free(x);
    if (d >= 0) H5Dclose(d);
    if (f >= 0) H5Fclose(f);
    struct stat st;
    CHECK(stat(path, &st) == 0);
    CHECK(test_run(fmt("sed -i 's/^file %s .*/file %s %lld/' %s/DONE", file, file, (long long)st.st_size, checkpoint),
                   out, sizeof out) == 0);
}

/* Three steps at `launcher` and `layout` into a checkpoint directory named `tag`, their output in out; returns the
 * step-3 checkpoint's path. */
static char *good_checkpoint(const Setup *s, const char *launcher, const char *layout, const char *tag, char *out,
                             size_t outlen) {
    char *dir = fmt("%s/%s", s->dir, tag);
    const int rc = train(s, launcher, fmt("%s --set train.steps=3 --set checkpoint.dir=%s", layout, dir), out, outlen);
    CHECK_MSG(rc == 0, "%s failed (%d): %s", tag, rc, out);
    return fmt("%s/step_00000003", dir);
}

/* The run at `launcher` and `layout`, resumed for one step from a copy (named `tag`) of the good checkpoint with one
 * dataset of one rank's state file changed, stops with exit 1 and `message`, the diverged step not saved. */
static void expect_diverged_stop(const Setup *s, const char *launcher, const char *layout, const char *good,
                                 const char *tag, const char *state_file, const char *dataset, const char *message) {
    static char out[65536];
    char *bad = fmt("%s/bad-%s", s->dir, tag), *c = fmt("%s/c-%s", s->dir, tag);
    CHECK(test_run(fmt("rm -rf %s && cp -r %s %s", bad, good, bad), out, sizeof out) == 0);
    nudge_dataset(bad, state_file, dataset);
    int rc = train(s, launcher, fmt("%s --set train.steps=4 --set checkpoint.dir=%s --set checkpoint.resume=%s", layout,
                                    c, bad), out, sizeof out);
    CHECK_MSG(rc == 1, "%s: a run with diverged replicas exited %d, expected 1: %s", tag, rc, out);
    CHECK_STR_CONTAINS(out, message);
    CHECK_STR_CONTAINS(out, "this step was not saved, the checkpoints written before are intact");
    CHECK_MSG(!file_exists(fmt("%s/step_00000004", c)), "%s: the diverged step 4 was saved in %s", tag, c);
}

/* Every checkpoint compares the replicas' bits across the ranks: equal after honest training at dp = 2; a rank
 * resumed from a state file whose moment of a replicated tensor (then of an expert, replicated over the
 * data-parallel ranks) was changed diverges at its next step, and the next checkpoint stops the run (exit 1)
 * naming that tensor and rank, without saving the diverged step; of four ranks, the one that differs from the three
 * others is named, rank 0 included; at ep = 2 x dp = 2 an expert's pair of copies is compared, and one pair's
 * difference stops every rank. */
static void mpi_diverged_replicas_stop(void) {
    if (!mpirun_or_skip()) return;
    Setup s = make_setup(256);
    const char *np2 = MPIRUN " 2", *np4 = MPIRUN " 4";
    static char out[65536];
    char *good = good_checkpoint(&s, np2, "", "dp2", out, sizeof out);
    CHECK_STR_CONTAINS(out, "; replicas bitwise equal: ");
    CHECK_STR_CONTAINS(out, " arrays over 2 ranks)");
    expect_diverged_stop(&s, np2, "", good, "dp2-wq", "state_rank00001.h5", "adam_m/layers.0.attn.wq",
                         "replicas differ: layers.0.attn.wq (weights) on rank 1, against rank 0's copy (held by 1 of 2 "
                         "ranks)");
    expect_diverged_stop(&s, np2, "", good, "dp2-expert", "state_rank00001.h5", "adam_v/layers.1.moe.experts.w_up",
                         "replicas differ: layers.1.moe.experts.w_up (weights) on rank 1, against rank 0's copy (held "
                         "by 1 of 2 ranks)");
    /* Four ranks, rank 0's state changed: the three that agree are the reference, rank 0 is named. */
    const char *dp4 = "--set train.micro_batch=2";
    good = good_checkpoint(&s, np4, dp4, "dp4", out, sizeof out);
    expect_diverged_stop(&s, np4, dp4, good, "dp4", "state_rank00000.h5", "adam_m/layers.0.attn.wq",
                         "replicas differ: layers.0.attn.wq (weights) on rank 0, against rank 1's copy (held by 3 of 4 "
                         "ranks)");
    /* ep = 2 x dp = 2: an expert is compared within its data-parallel pair only ({0, 2} and {1, 3}); rank 3's
     * differs, its pair's verdict stops all four. */
    const char *ep2dp2 = "--set parallel.ep=2 --set train.micro_batch=2";
    good = good_checkpoint(&s, np4, ep2dp2, "ep2dp2", out, sizeof out);
    expect_diverged_stop(&s, np4, ep2dp2, good, "ep2dp2", "state_rank00003.h5", "adam_v/layers.1.moe.experts.w_up",
                         "replicas differ: layers.1.moe.experts.w_up (weights) on rank 3, against rank 1's copy "
                         "(held by 1 of 2 ranks)");
}

/* A write that fails on one rank alone (rank 1's files capped at 8 KiB, so its state file's writes fail with
 * EFBIG): every rank stops with exit 1 and rank 1's message, none trains on as if the step were saved, and the
 * checkpoint directory keeps neither the step nor a leftover. */
static void mpi_one_rank_write_fails_stops_all(void) {
    if (!mpirun_or_skip()) return;
    Setup s = make_setup(256);
    char *dir = fmt("%s/ck", s.dir);
    char *args = fmt("train %s --set train.steps=6 --set checkpoint.every=3 --set checkpoint.dir=%s --set "
                     "log.every=1", s.spec, dir);
    const char *bin = test_mokc_binary();
    static char out[65536];
    static char cmd[20000];
    int rc = test_run(fmt("OMP_NUM_THREADS=1 %s", test_mpirun_capped_rank(cmd, sizeof cmd, fmt("%s %s", bin, args), 8,
                                                                       fmt("%s %s", bin, args))),
                      out, sizeof out);
    CHECK_MSG(rc == 1, "a failed write on rank 1 exited %d (124: a hang), expected 1: %s", rc, out);
    CHECK_STR_CONTAINS(out, "state_rank00001.h5");
    CHECK_STR_CONTAINS(out, "file write failed: File too large"); /* HDF5's driver message, told in one line */
    CHECK_STR_CONTAINS(out, "---> HINT: free disk space or fix checkpoint.dir");
    CHECK_MSG(strstr(out, "checkpoint: ") == NULL && strstr(out, "step     4/") == NULL,
              "a rank went on as if the checkpoint were saved: %s", out);
    char listing[1024];
    CHECK_MSG(test_run(fmt("ls -A %s 2>/dev/null; true", dir), listing, sizeof listing) == 0 && listing[0] == 0,
              "the checkpoint directory keeps: %s", listing);
}

TEST_SUITE(ckpt,
    TEST_CASE(resume_is_bitwise),
    TEST_CASE(resume_is_bitwise_with_bf16_moments),
    TEST_CASE(sigterm_checkpoints_and_resumes),
    TEST_CASE(sigterm_without_checkpoint_dir),
    TEST_CASE(second_sigint_exits_at_once),
    TEST_CASE(crash_at_every_writer_point),
    TEST_CASE(kill9_at_random_moments),
    TEST_CASE(mismatched_model_refused),
    TEST_CASE(damaged_checkpoints_refused),
    TEST_CASE(keep_prunes_old_checkpoints), TEST_CASE(older_resume_into_same_dir),
    TEST_CASE(mpi_dp2_resume_and_layout),
    TEST_CASE(mpi_ep2_model_file_and_resume),
    TEST_CASE(mpi_diverged_replicas_stop),
    TEST_CASE(mpi_one_rank_write_fails_stops_all),
);
