/*
 * GPU causal grouped-query attention (kernels/attention.h) against the CPU reference
 * attention_forward/attention_backward (src/cpu/ops.c), which gets the same bf16-rounded q, k, v
 * and dout: out, att, dq, dk, dv within 1e-2 relative; every output element written (NaN poison);
 * bitwise run-to-run; causal (a later position's k/v leaves earlier rows bit-identical).
 * A timing printout runs only with MOKC_GPU_BENCH=1.
 */
#include <cublas_v2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/attention.h"
#include "cpu/ops.h"
#include "gpu/check.h"
#include "gpu_test.h"

#define ATT_TOL 1e-2

typedef struct {
    int B, T, Hq, Hkv, D;
} AttShape;

/* T = 1, 7 and 257 take the scalar kernel path (T % 8 != 0), 128 the vector path; T = 128 is two
 * causal row blocks of 64 and T = 257 five (the last one row). GQA ratios 1, 4, 8; D 64 and 128. */
static const AttShape shapes[] = {
    {2, 1, 8, 8, 64},     {1, 7, 8, 2, 64},   {2, 128, 8, 1, 64}, {1, 257, 8, 8, 128},
    {2, 128, 16, 4, 128}, {1, 257, 16, 2, 128}, {2, 7, 8, 1, 128},
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

#define SHAPE_FMT "B=%d T=%d Hq=%d Hkv=%d D=%d"
#define SHAPE_ARGS(s) (s).B, (s).T, (s).Hq, (s).Hkv, (s).D

/* ---- inputs ---- */

static uint64_t rng_next(uint64_t *state) { /* splitmix64 */
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
/* Uniform in [-amp, amp), rounded to bf16; f receives the exact same value as float. */
static void fill_bf16(bf16_t *h, float *f, long n, float amp, uint64_t *state) {
    for (long i = 0; i < n; i++) {
        float x = amp * (float)((double)(rng_next(state) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
        h[i] = host_to_bf16(x);
        if (f) f[i] = host_from_bf16(h[i]);
    }
}

typedef struct {
    AttShape s;
    long nq, nkv, natt;          /* elements of q (and out, dout, dq), of k (v, dk, dv), of att */
    bf16_t *q, *k, *v, *dout;    /* host, bf16 */
    float *qf, *kf, *vf, *doutf; /* the same values as float: what the CPU reference gets */
    bf16_t *d_q, *d_k, *d_v, *d_dout;
} AttCase;

/* q, k in [-2, 2) so the softmax is neither flat nor one-hot (scores * scale of order 1). */
static void case_init(AttCase *c, AttShape s, uint64_t seed) {
    memset(c, 0, sizeof *c);
    c->s = s;
    c->nq = (long)s.B * s.T * s.Hq * s.D;
    c->nkv = (long)s.B * s.T * s.Hkv * s.D;
    c->natt = (long)s.B * s.Hq * s.T * s.T;
    c->q = malloc(c->nq * sizeof(bf16_t)), c->qf = malloc(c->nq * sizeof(float));
    c->dout = malloc(c->nq * sizeof(bf16_t)), c->doutf = malloc(c->nq * sizeof(float));
    c->k = malloc(c->nkv * sizeof(bf16_t)), c->kf = malloc(c->nkv * sizeof(float));
    c->v = malloc(c->nkv * sizeof(bf16_t)), c->vf = malloc(c->nkv * sizeof(float));
    uint64_t st = seed;
    fill_bf16(c->q, c->qf, c->nq, 2.0f, &st);
    fill_bf16(c->k, c->kf, c->nkv, 2.0f, &st);
    fill_bf16(c->v, c->vf, c->nkv, 1.0f, &st);
    fill_bf16(c->dout, c->doutf, c->nq, 1.0f, &st);
    c->d_q = gpu_upload(c->q, c->nq * sizeof(bf16_t));
    c->d_k = gpu_upload(c->k, c->nkv * sizeof(bf16_t));
    c->d_v = gpu_upload(c->v, c->nkv * sizeof(bf16_t));
    c->d_dout = gpu_upload(c->dout, c->nq * sizeof(bf16_t));
}

static void case_free(AttCase *c) {
    free(c->q), free(c->k), free(c->v), free(c->dout);
    free(c->qf), free(c->kf), free(c->vf), free(c->doutf);
    cudaCheck(cudaFree(c->d_q)), cudaCheck(cudaFree(c->d_k));
    cudaCheck(cudaFree(c->d_v)), cudaCheck(cudaFree(c->d_dout));
}

/* GPU outputs of one forward + backward, in poisoned buffers. */
typedef struct {
    bf16_t *out, *att, *dq, *dk, *dv;
} AttOut;

static void outputs_alloc(AttOut *o, const AttCase *c) {
    o->out = gpu_poisoned(c->nq * sizeof(bf16_t));
    o->att = gpu_poisoned(c->natt * sizeof(bf16_t));
    o->dq = gpu_poisoned(c->nq * sizeof(bf16_t));
    o->dk = gpu_poisoned(c->nkv * sizeof(bf16_t));
    o->dv = gpu_poisoned(c->nkv * sizeof(bf16_t));
}
static void outputs_free(AttOut *o) {
    cudaCheck(cudaFree(o->out)), cudaCheck(cudaFree(o->att)), cudaCheck(cudaFree(o->dq));
    cudaCheck(cudaFree(o->dk)), cudaCheck(cudaFree(o->dv));
}

static void run_gpu(cublasHandle_t h, AttentionWorkspace *ws, const AttCase *c, AttOut *o, int backward,
                    cudaStream_t stream) {
    attention_forward_gpu(h, ws, o->out, o->att, c->d_q, c->d_k, c->d_v, stream);
    if (backward) attention_backward_gpu(h, ws, o->dq, o->dk, o->dv, c->d_dout, o->att, c->d_q, c->d_k, c->d_v, stream);
}

static float *download_f(const bf16_t *dev, long n) {
    bf16_t *tmp = malloc(n * sizeof(bf16_t));
    float *f = malloc(n * sizeof(float));
    gpu_download(tmp, dev, n * sizeof(bf16_t));
    for (long i = 0; i < n; i++) f[i] = host_from_bf16(tmp[i]);
    free(tmp);
    return f;
}
static bf16_t *download_raw(const bf16_t *dev, long n) {
    bf16_t *tmp = malloc(n * sizeof(bf16_t));
    gpu_download(tmp, dev, n * sizeof(bf16_t));
    return tmp;
}

/* ---- checks with diagnostics that point at the broken rows and heads ---- */

/* gpu vs ref over a (B*T, H*D) activation: relative error < ATT_TOL and no NaN. On failure names
 * the first token row over tolerance and, in the worst row, the worst head. */
static void check_act(const char *what, const AttShape *s, int H, const float *gpu, const float *ref) {
    long rows = (long)s->B * s->T, width = (long)H * s->D, n = rows * width;
    long nan = count_nan(gpu, n);
    double err = rel_error_f(gpu, ref, n);
    if (nan == 0 && err < ATT_TOL) return;
    long first = -1, worst = 0;
    double worst_err = -1;
    for (long r = 0; r < rows; r++) {
        double e = rel_error_f(gpu + r * width, ref + r * width, width);
        if (!(e < ATT_TOL) && first < 0) first = r;
        if (!(e <= worst_err)) worst_err = e, worst = r;
    }
    int worst_head = 0;
    double head_err = -1;
    for (int hd = 0; hd < H; hd++) {
        double e = rel_error_f(gpu + worst * width + (long)hd * s->D, ref + worst * width + (long)hd * s->D, s->D);
        if (!(e <= head_err)) head_err = e, worst_head = hd;
    }
    const float *g = gpu + worst * width + (long)worst_head * s->D, *rf = ref + worst * width + (long)worst_head * s->D;
    test_fail(__FILE__, __LINE__,
              SHAPE_FMT ": %s rel error %.3g (tol %.0e), %ld NaN (unwritten or poisoned) of %ld; first bad token "
                        "row b=%ld t=%ld; worst b=%ld t=%ld (row err %.3g) head %d (err %.3g): gpu[0..2] = %g %g %g, "
                        "cpu = %g %g %g",
              SHAPE_ARGS(*s), what, err, ATT_TOL, nan, n, first < 0 ? -1 : first / s->T, first < 0 ? -1 : first % s->T,
              worst / s->T, worst % s->T, worst_err, worst_head, head_err, g[0], s->D > 1 ? g[1] : 0.f,
              s->D > 2 ? g[2] : 0.f, rf[0], s->D > 1 ? rf[1] : 0.f, s->D > 2 ? rf[2] : 0.f);
}

/* att (B, Hq, T, T): close to the CPU's, no NaN, exact zeros above the diagonal. */
static void check_att(const AttShape *s, const bf16_t *raw, const float *gpu, const float *ref) {
    long n = (long)s->B * s->Hq * s->T * s->T, nan = count_nan(gpu, n), nonzero_above = 0, first_above = -1;
    for (long i = 0; i < n; i++) {
        long t = (i / s->T) % s->T, u = i % s->T;
        if (u > t && raw[i] != 0) {
            nonzero_above++;
            if (first_above < 0) first_above = i;
        }
    }
    double err = rel_error_f(gpu, ref, n);
    CHECK_MSG(nan == 0 && err < ATT_TOL, SHAPE_FMT ": att rel error %.3g (tol %.0e), %ld NaN of %ld", SHAPE_ARGS(*s),
              err, ATT_TOL, nan, n);
    CHECK_MSG(nonzero_above == 0,
              SHAPE_FMT ": att has %ld entries above the diagonal that are not +0 "
                        "(first: z=%ld t=%ld u=%ld, bits 0x%04x)",
              SHAPE_ARGS(*s), nonzero_above, first_above < 0 ? -1 : first_above / ((long)s->T * s->T),
              first_above < 0 ? -1 : (first_above / s->T) % s->T, first_above < 0 ? -1 : first_above % s->T,
              first_above < 0 ? 0u : (unsigned)raw[first_above]);
}

/* ---- tests ---- */

typedef struct {
    cublasHandle_t cublas;
    cudaStream_t stream;
} AttEnv;

static void env_init(AttEnv *e) {
    cublasCheck(cublasCreate(&e->cublas));
    cudaCheck(cudaStreamCreate(&e->stream));
    cublasCheck(cublasSetStream(e->cublas, e->stream));
}
static void env_free(AttEnv *e) {
    cudaCheck(cudaStreamDestroy(e->stream));
    cublasCheck(cublasDestroy(e->cublas));
}

static void test_attention_forward_matches_cpu(void) {
    if (!gpu_test_begin()) return;
    AttEnv env;
    env_init(&env);
    for (int i = 0; i < N_SHAPES; i++) {
        AttShape s = shapes[i];
        AttCase c;
        case_init(&c, s, 1000 + i);
        float *out_ref = malloc(c.nq * sizeof(float)), *att_ref = malloc(c.natt * sizeof(float));
        attention_forward(out_ref, att_ref, c.qf, c.kf, c.vf, s.B, s.T, s.Hq, s.Hkv, s.D);

        AttentionWorkspace *ws = attention_workspace_create(s.B, s.T, s.Hq, s.Hkv, s.D);
        AttOut o;
        outputs_alloc(&o, &c);
        run_gpu(env.cublas, ws, &c, &o, 0, env.stream);
        float *out = download_f(o.out, c.nq), *att = download_f(o.att, c.natt);
        bf16_t *att_raw = download_raw(o.att, c.natt);
        check_act("out", &s, s.Hq, out, out_ref);
        check_att(&s, att_raw, att, att_ref);

        free(out), free(att), free(att_raw), free(out_ref), free(att_ref);
        outputs_free(&o);
        attention_workspace_free(ws);
        case_free(&c);
    }
    env_free(&env);
}

static void test_attention_backward_matches_cpu(void) {
    if (!gpu_test_begin()) return;
    AttEnv env;
    env_init(&env);
    for (int i = 0; i < N_SHAPES; i++) {
        AttShape s = shapes[i];
        AttCase c;
        case_init(&c, s, 2000 + i);
        float *out_ref = malloc(c.nq * sizeof(float)), *att_ref = malloc(c.natt * sizeof(float));
        float *dq_ref = calloc(c.nq, sizeof(float)), *dk_ref = calloc(c.nkv, sizeof(float));
        float *dv_ref = calloc(c.nkv, sizeof(float)); /* the CPU reference accumulates: start from 0 */
        attention_forward(out_ref, att_ref, c.qf, c.kf, c.vf, s.B, s.T, s.Hq, s.Hkv, s.D);
        attention_backward(dq_ref, dk_ref, dv_ref, c.doutf, att_ref, c.qf, c.kf, c.vf, s.B, s.T, s.Hq, s.Hkv, s.D);

        AttentionWorkspace *ws = attention_workspace_create(s.B, s.T, s.Hq, s.Hkv, s.D);
        AttOut o;
        outputs_alloc(&o, &c); /* dq, dk, dv poisoned: an accumulate instead of an overwrite shows as NaN */
        run_gpu(env.cublas, ws, &c, &o, 1, env.stream);
        float *dq = download_f(o.dq, c.nq), *dk = download_f(o.dk, c.nkv), *dv = download_f(o.dv, c.nkv);
        check_act("dq", &s, s.Hq, dq, dq_ref);
        check_act("dk", &s, s.Hkv, dk, dk_ref);
        check_act("dv", &s, s.Hkv, dv, dv_ref);

        free(dq), free(dk), free(dv), free(dq_ref), free(dk_ref), free(dv_ref), free(out_ref), free(att_ref);
        outputs_free(&o);
        attention_workspace_free(ws);
        case_free(&c);
    }
    env_free(&env);
}

/* Two runs into different buffers (so the pointer tables are rebuilt) give the same bits; a third
 * run back in the first buffers, after a run of another case through the same workspace, too. */
static void test_attention_bitwise_run_to_run(void) {
    if (!gpu_test_begin()) return;
    AttEnv env;
    env_init(&env);
    const AttShape cases[] = {{1, 257, 8, 2, 128}, {2, 128, 8, 1, 64}, {2, 128, 8, 8, 64}};
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        AttShape s = cases[i];
        AttCase c, other;
        case_init(&c, s, 3000 + i);
        case_init(&other, s, 3100 + i);
        AttentionWorkspace *ws = attention_workspace_create(s.B, s.T, s.Hq, s.Hkv, s.D);
        AttOut o1, o2, o3;
        outputs_alloc(&o1, &c), outputs_alloc(&o2, &c), outputs_alloc(&o3, &c);
        run_gpu(env.cublas, ws, &c, &o1, 1, env.stream);
        run_gpu(env.cublas, ws, &c, &o2, 1, env.stream);
        run_gpu(env.cublas, ws, &other, &o3, 1, env.stream); /* different inputs through the workspace */
        bf16_t *first[5], *again[5];
        const bf16_t *bufs1[5] = {o1.out, o1.att, o1.dq, o1.dk, o1.dv};
        const bf16_t *bufs2[5] = {o2.out, o2.att, o2.dq, o2.dk, o2.dv};
        const long counts[5] = {c.nq, c.natt, c.nq, c.nkv, c.nkv};
        const char *names[5] = {"out", "att", "dq", "dk", "dv"};
        for (int b = 0; b < 5; b++) first[b] = download_raw(bufs1[b], counts[b]);
        /* re-poison the first buffers and run again into them */
        for (int b = 0; b < 5; b++) cudaCheck(cudaMemset((void *)bufs1[b], 0xff, counts[b] * sizeof(bf16_t)));
        run_gpu(env.cublas, ws, &c, &o1, 1, env.stream);
        for (int b = 0; b < 5; b++) {
            again[b] = download_raw(bufs2[b], counts[b]);
            CHECK_MSG(memcmp(first[b], again[b], counts[b] * sizeof(bf16_t)) == 0,
                      SHAPE_FMT ": %s differs between two runs into different buffers", SHAPE_ARGS(s), names[b]);
            free(again[b]);
            again[b] = download_raw(bufs1[b], counts[b]);
            CHECK_MSG(memcmp(first[b], again[b], counts[b] * sizeof(bf16_t)) == 0,
                      SHAPE_FMT ": %s differs when rerun into the same buffers after another case", SHAPE_ARGS(s),
                      names[b]);
            free(again[b]), free(first[b]);
        }
        outputs_free(&o1), outputs_free(&o2), outputs_free(&o3);
        attention_workspace_free(ws);
        case_free(&c), case_free(&other);
    }
    env_free(&env);
}

/* Changing k and v at position ts (every batch and kv head) leaves out, att and dq of every row
 * t < ts bit-identical, and does change row ts. */
static void test_attention_causal(void) {
    if (!gpu_test_begin()) return;
    AttEnv env;
    env_init(&env);
    const AttShape cases[] = {{2, 257, 8, 2, 64}, {1, 128, 16, 4, 128}};
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        AttShape s = cases[i];
        int ts = s.T * 2 / 3; /* inside a causal block, not at its edge */
        AttCase c;
        case_init(&c, s, 4000 + i);
        AttentionWorkspace *ws = attention_workspace_create(s.B, s.T, s.Hq, s.Hkv, s.D);
        AttOut o1, o2;
        outputs_alloc(&o1, &c), outputs_alloc(&o2, &c);
        run_gpu(env.cublas, ws, &c, &o1, 1, env.stream);

        long kv_row = (long)s.Hkv * s.D;
        uint64_t st = 4500 + i;
        for (int b = 0; b < s.B; b++) {
            long off = ((long)b * s.T + ts) * kv_row;
            fill_bf16(c.k + off, NULL, kv_row, 2.0f, &st);
            fill_bf16(c.v + off, NULL, kv_row, 1.0f, &st);
        }
        cudaCheck(cudaMemcpy(c.d_k, c.k, c.nkv * sizeof(bf16_t), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(c.d_v, c.v, c.nkv * sizeof(bf16_t), cudaMemcpyHostToDevice));
        run_gpu(env.cublas, ws, &c, &o2, 1, env.stream);

        bf16_t *out1 = download_raw(o1.out, c.nq), *out2 = download_raw(o2.out, c.nq);
        bf16_t *dq1 = download_raw(o1.dq, c.nq), *dq2 = download_raw(o2.dq, c.nq);
        bf16_t *att1 = download_raw(o1.att, c.natt), *att2 = download_raw(o2.att, c.natt);
        long q_row = (long)s.Hq * s.D;
        long bad_out = -1, bad_dq = -1, bad_att = -1, changed = 0;
        for (int b = 0; b < s.B; b++) {
            for (int t = 0; t < ts; t++) {
                long off = ((long)b * s.T + t) * q_row;
                if (bad_out < 0 && memcmp(out1 + off, out2 + off, q_row * sizeof(bf16_t)) != 0) bad_out = t;
                if (bad_dq < 0 && memcmp(dq1 + off, dq2 + off, q_row * sizeof(bf16_t)) != 0) bad_dq = t;
            }
            long off = ((long)b * s.T + ts) * q_row;
            changed += memcmp(out1 + off, out2 + off, q_row * sizeof(bf16_t)) != 0;
            for (int h = 0; h < s.Hq; h++)
                for (int t = 0; t < ts; t++) {
                    long a = (((long)b * s.Hq + h) * s.T + t) * s.T;
                    if (bad_att < 0 && memcmp(att1 + a, att2 + a, (size_t)s.T * sizeof(bf16_t)) != 0) bad_att = t;
                }
        }
        CHECK_MSG(bad_out < 0, SHAPE_FMT ": out row t=%ld changed when only position %d's k/v changed", SHAPE_ARGS(s),
                  bad_out, ts);
        CHECK_MSG(bad_dq < 0, SHAPE_FMT ": dq row t=%ld changed when only position %d's k/v changed", SHAPE_ARGS(s),
                  bad_dq, ts);
        CHECK_MSG(bad_att < 0, SHAPE_FMT ": att row t=%ld changed when only position %d's k/v changed", SHAPE_ARGS(s),
                  bad_att, ts);
        CHECK_MSG(changed == s.B, SHAPE_FMT ": out row %d did not change with its own k/v (%ld of %d batches changed)",
                  SHAPE_ARGS(s), ts, changed, s.B);
        free(out1), free(out2), free(dq1), free(dq2), free(att1), free(att2);
        outputs_free(&o1), outputs_free(&o2);
        attention_workspace_free(ws);
        case_free(&c);
    }
    env_free(&env);
}

/* The workspace size formula (host only: runs without a GPU too). */
static void test_attention_workspace_bytes(void) {
    /* B=4 T=4096 Hq=16 Hkv=4 D=128: blocks of 256 rows, 16 of them. */
    size_t z = 4 * 16, expect = z * 4096 * 4096 * 4 + z * 4096 * 128 * 4 + 12 * 16 * z * 8;
    CHECK_EQ_INT(attention_workspace_bytes(4, 4096, 16, 4, 128), expect);
    /* MHA has no per-head scratch; T = 7 is one block; the table rounds up to 256 bytes. */
    size_t mha = (size_t)2 * 8 * 7 * 7 * 4; /* 3136 -> 3328 */
    CHECK_EQ_INT(attention_workspace_bytes(2, 7, 8, 8, 64), ((mha + 255) / 256) * 256 + 1536);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Timing (not pass/fail), only with MOKC_GPU_BENCH=1: B=4 Hq=16 Hkv=4 D=128 T=4096, median of 10
 * after warm-up, CUDA events. Causal FLOPs: forward 2*B*Hq*T*T*D (half of 4*B*Hq*T*T*D), backward
 * 2.5x that. */
static void test_attention_bench(void) {
    const char *flag = getenv("MOKC_GPU_BENCH");
    if (!flag || strcmp(flag, "1") != 0) {
        test_skip("timing only with MOKC_GPU_BENCH=1");
        return;
    }
    if (!gpu_test_begin()) return;
    AttEnv env;
    env_init(&env);
    AttShape s = {4, 4096, 16, 4, 128};
    long nq = (long)s.B * s.T * s.Hq * s.D, nkv = (long)s.B * s.T * s.Hkv * s.D, natt = (long)s.B * s.Hq * s.T * s.T;
    bf16_t *hq = malloc(nq * sizeof(bf16_t)), *hkv = malloc(nkv * sizeof(bf16_t));
    uint64_t st = 77;
    fill_bf16(hq, NULL, nq, 2.0f, &st);
    fill_bf16(hkv, NULL, nkv, 2.0f, &st);
    bf16_t *q = gpu_upload(hq, nq * sizeof(bf16_t)), *k = gpu_upload(hkv, nkv * sizeof(bf16_t));
    fill_bf16(hkv, NULL, nkv, 1.0f, &st);
    bf16_t *v = gpu_upload(hkv, nkv * sizeof(bf16_t));
    fill_bf16(hq, NULL, nq, 1.0f, &st);
    bf16_t *dout = gpu_upload(hq, nq * sizeof(bf16_t));
    bf16_t *out = gpu_poisoned(nq * sizeof(bf16_t)), *att = gpu_poisoned(natt * sizeof(bf16_t));
    bf16_t *dq = gpu_poisoned(nq * sizeof(bf16_t)), *dk = gpu_poisoned(nkv * sizeof(bf16_t));
    bf16_t *dv = gpu_poisoned(nkv * sizeof(bf16_t));
    AttentionWorkspace *ws = attention_workspace_create(s.B, s.T, s.Hq, s.Hkv, s.D);

    for (int w = 0; w < 3; w++) {
        attention_forward_gpu(env.cublas, ws, out, att, q, k, v, env.stream);
        attention_backward_gpu(env.cublas, ws, dq, dk, dv, dout, att, q, k, v, env.stream);
    }
    cudaCheck(cudaStreamSynchronize(env.stream));
    enum { REPS = 10 };
    float fwd_ms[REPS], bwd_ms[REPS];
    cudaEvent_t e0, e1, e2;
    cudaCheck(cudaEventCreate(&e0)), cudaCheck(cudaEventCreate(&e1)), cudaCheck(cudaEventCreate(&e2));
    for (int r = 0; r < REPS; r++) {
        cudaCheck(cudaEventRecord(e0, env.stream));
        attention_forward_gpu(env.cublas, ws, out, att, q, k, v, env.stream);
        cudaCheck(cudaEventRecord(e1, env.stream));
        attention_backward_gpu(env.cublas, ws, dq, dk, dv, dout, att, q, k, v, env.stream);
        cudaCheck(cudaEventRecord(e2, env.stream));
        cudaCheck(cudaEventSynchronize(e2));
        cudaCheck(cudaEventElapsedTime(&fwd_ms[r], e0, e1));
        cudaCheck(cudaEventElapsedTime(&bwd_ms[r], e1, e2));
    }
    qsort(fwd_ms, REPS, sizeof(float), cmp_float);
    qsort(bwd_ms, REPS, sizeof(float), cmp_float);
    double f_med = 0.5 * (fwd_ms[REPS / 2 - 1] + fwd_ms[REPS / 2]);
    double b_med = 0.5 * (bwd_ms[REPS / 2 - 1] + bwd_ms[REPS / 2]);
    double flops_fwd = 2.0 * s.B * s.Hq * (double)s.T * s.T * s.D, flops_bwd = 2.5 * flops_fwd;
    float *o = download_f(out, nq), *g = download_f(dk, nkv);
    long nan = count_nan(o, nq) + count_nan(g, nkv);
    printf("    attention bench " SHAPE_FMT ": forward %.3f ms = %.1f TFLOP/s, backward %.3f ms = %.1f TFLOP/s "
           "(median of %d; workspace %.0f MiB + att %.0f MiB)%s\n",
           SHAPE_ARGS(s), f_med, flops_fwd / (f_med * 1e9), b_med, flops_bwd / (b_med * 1e9), REPS,
           attention_workspace_bytes(s.B, s.T, s.Hq, s.Hkv, s.D) / 1048576.0, natt * 2 / 1048576.0,
           nan ? " -- NaN in the outputs!" : "");
    CHECK_MSG(nan == 0, "bench: %ld NaN in out/dk", nan);
    free(o), free(g), free(hq), free(hkv);
    cudaCheck(cudaEventDestroy(e0)), cudaCheck(cudaEventDestroy(e1)), cudaCheck(cudaEventDestroy(e2));
    attention_workspace_free(ws);
    bf16_t *bufs[] = {q, k, v, dout, out, att, dq, dk, dv};
    for (int b = 0; b < 9; b++) cudaCheck(cudaFree(bufs[b]));
    env_free(&env);
}

TEST_SUITE(gpu_attention, TEST_CASE(test_attention_workspace_bytes), TEST_CASE(test_attention_forward_matches_cpu),
           TEST_CASE(test_attention_backward_matches_cpu), TEST_CASE(test_attention_bitwise_run_to_run),
           TEST_CASE(test_attention_causal), TEST_CASE(test_attention_bench));
