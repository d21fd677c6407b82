/*
 * GPU causal grouped-query attention (kernels/attention.h), both implementations (flash, with each
 * forward and each backward kernel that runs here: wgmma and mma.sync on an H100/H200, forward at
 * D = 128, backward at D = 64 and 128; and cuBLAS),
 * against the CPU reference attention_forward/attention_backward (src/cpu/ops.c), which gets the
 * same bf16-rounded q, k, v and dout: out, dq, dk, dv within 1e-2 relative, the saved state too
 * (flash: the log-sum-exps; cuBLAS: the probabilities); every output element written (NaN
 * poison); bitwise run-to-run; causal (a later position's k/v leaves earlier rows bit-identical).
 * Timing: `mokc bench attn`.
 */
#include <cublas_v2.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/attention.h"
#include "../../kernels/flash_attention.h"
#include "cpu/ops.h"
#include "gpu/check.h"
#include "gpu_test.h"

#define ATT_TOL 1e-2
/* The log-sum-exps are fp32 on both sides from the same bf16 inputs: only summation order differs. */
#define LSE_TOL 1e-4

typedef struct {
    int B, T, Hq, Hkv, D;
} AttShape;

/* One way to run attention: the implementation and, for flash, the forward and backward kernels
 * (the values of MOKC_FLASH_FWD and MOKC_FLASH_BWD; NULL: unset, the default kernel). */
typedef struct {
    AttnImpl impl;
    const char *fwd, *bwd;
    char name[40];
} Variant;

#define MAX_VARIANTS 4

/* Every variant that runs here for head dim D: flash with its default kernels ("flash(fwd/bwd)"),
 * flash with the mma.sync backward when that is not the default, flash with both mma.sync when
 * the forward's default is not, cuBLAS. Returns how many (at most MAX_VARIANTS). */
static int variants(Variant v[MAX_VARIANTS], int D) {
    unsetenv("MOKC_FLASH_FWD");
    unsetenv("MOKC_FLASH_BWD");
    const char *fwd = flash_attention_forward_kernel(D), *bwd = flash_attention_backward_kernel(D);
    int n = 0;
    v[n] = (Variant){ATTN_FLASH, NULL, NULL, ""};
    snprintf(v[n++].name, sizeof v->name, "flash(%s/%s)", fwd, bwd);
    if (strcmp(bwd, "mma")) {
        v[n] = (Variant){ATTN_FLASH, NULL, "mma", ""};
        snprintf(v[n++].name, sizeof v->name, "flash(%s/mma)", fwd);
    }
    if (strcmp(fwd, "mma")) v[n++] = (Variant){ATTN_FLASH, "mma", "mma", "flash(mma/mma)"};
    v[n++] = (Variant){ATTN_CUBLAS, NULL, NULL, "cublas"};
    return n;
}
static void variant_select(const Variant *v) {
    if (v->fwd) setenv("MOKC_FLASH_FWD", v->fwd, 1);
    else unsetenv("MOKC_FLASH_FWD");
    if (v->bwd) setenv("MOKC_FLASH_BWD", v->bwd, 1);
    else unsetenv("MOKC_FLASH_BWD");
}

/* Every T of 1, 127, 128, 4097 with every GQA ratio of 1, 4, 8, at head dims 128 and 64 (the
 * wgmma backward's: 64-row query blocks, 128-row kv blocks; T = 4097 is a chain of 33 kv blocks
 * adding into each dQ); T = 257 crosses the flash kernels' blocks (128-row query and kv blocks,
 * 32- and 64-row key blocks) with a one-row tail; D = 16 and 32 are the other head dims the flash
 * kernels are built for (the small models'). Few heads at T = 4097: the CPU reference is O(T^2). */
static const AttShape shapes[] = {
    {3, 1, 8, 8, 128},     {2, 1, 8, 2, 128},    {3, 1, 8, 1, 128},    {2, 127, 8, 8, 128},
    {2, 127, 8, 2, 128},   {1, 127, 8, 1, 128},  {2, 128, 4, 4, 128},  {2, 128, 16, 4, 128},
    {2, 128, 8, 1, 128},   {1, 4097, 2, 2, 128}, {1, 4097, 4, 1, 128}, {1, 4097, 8, 1, 128},
    {2, 1, 8, 8, 64},      {2, 1, 4, 1, 64},     {1, 1, 8, 1, 64},     {1, 127, 8, 8, 64},
    {2, 127, 8, 2, 64},    {1, 127, 8, 1, 64},   {2, 128, 8, 8, 64},   {2, 128, 8, 2, 64},
    {2, 128, 8, 1, 64},    {1, 4097, 4, 4, 64},  {1, 4097, 4, 1, 64},  {1, 4097, 8, 1, 64},
    {1, 257, 16, 2, 128},  {2, 257, 8, 2, 64},   {2, 24, 4, 2, 16},    {1, 130, 4, 1, 32},
};
#define N_SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

#define SHAPE_FMT "%s B=%d T=%d Hq=%d Hkv=%d D=%d"
#define SHAPE_ARGS(name, s) (name), (s).B, (s).T, (s).Hq, (s).Hkv, (s).D

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
    long nq, nkv, nrow;          /* elements of q (and out, dout, dq), of k (v, dk, dv); B*Hq*T */
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
    c->nrow = (long)s.B * s.Hq * s.T;
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

/* The CPU reference of one case: out, att, and lse[(b*Hq + h)*T + t] = log sum_u exp(s_tu * scale),
 * recovered from the largest probability of the row: lse = s_tu * scale - log(att_tu) at its u. */
typedef struct {
    float *out, *att, *dq, *dk, *dv;
    double *lse;
} AttRef;

static void ref_compute(AttRef *r, const AttCase *c) {
    const AttShape s = c->s;
    const long natt = c->nrow * s.T;
    r->out = malloc(c->nq * sizeof(float)), r->att = malloc(natt * sizeof(float));
    r->dq = calloc(c->nq, sizeof(float)), r->dk = calloc(c->nkv, sizeof(float));
    r->dv = calloc(c->nkv, sizeof(float)); /* the CPU reference accumulates: start from 0 */
    r->lse = malloc(c->nrow * sizeof(double));
    attention_forward(r->out, r->att, c->qf, c->kf, c->vf, s.B, s.T, s.Hq, s.Hkv, s.D);
    attention_backward(r->dq, r->dk, r->dv, c->doutf, r->att, c->qf, c->kf, c->vf, s.B, s.T, s.Hq, s.Hkv, s.D);
    const double scale = 1.0 / sqrt((double)s.D);
    for (long row = 0; row < c->nrow; row++) {
        const long b = row / ((long)s.Hq * s.T), h = (row / s.T) % s.Hq, t = row % s.T;
        const float *a = r->att + row * s.T;
        long u = 0;
        for (long w = 1; w <= t; w++)
            if (a[w] > a[u]) u = w;
        const float *qt = c->qf + (b * s.T + t) * s.Hq * s.D + h * s.D;
        const float *ku = c->kf + (b * s.T + u) * s.Hkv * s.D + (h / (s.Hq / s.Hkv)) * s.D;
        double dot = 0;
        for (int d = 0; d < s.D; d++) dot += (double)qt[d] * ku[d];
        r->lse[row] = dot * scale - log((double)a[u]);
    }
}

static void ref_free(AttRef *r) { free(r->out), free(r->att), free(r->dq), free(r->dk), free(r->dv), free(r->lse); }

/* GPU outputs of one forward + backward, in poisoned buffers. */
typedef struct {
    bf16_t *out, *dqkv; /* dqkv: a token's dq, dk, dv in one row (attention.h) */
    void *saved;
    size_t saved_bytes;
} AttOut;

static void outputs_alloc(AttOut *o, const AttCase *c, AttnImpl impl) {
    o->out = gpu_poisoned(c->nq * sizeof(bf16_t));
    o->saved_bytes = attention_saved_bytes(impl, c->s.B, c->s.T, c->s.Hq);
    o->saved = gpu_poisoned(o->saved_bytes);
    o->dqkv = gpu_poisoned((c->nq + 2 * c->nkv) * sizeof(bf16_t));
}
static void outputs_free(AttOut *o) {
    cudaCheck(cudaFree(o->out)), cudaCheck(cudaFree(o->saved)), cudaCheck(cudaFree(o->dqkv));
}

static void run_gpu(cublasHandle_t h, AttentionWorkspace *ws, const AttCase *c, AttOut *o, cudaStream_t stream) {
    attention_forward_gpu(h, ws, o->out, o->saved, c->d_q, c->d_k, c->d_v, stream);
    attention_backward_gpu(h, ws, o->dqkv, c->d_dout, o->out, o->saved, c->d_q, c->d_k, c->d_v, stream);
}

/* The part of each gradient row (dq: part 0, dk: 1, dv: 2) as a packed (B*T, H*D) array of `elem`-byte
 * elements (the bf16 bits, or floats). */
static void *grad_part(const void *rows, const AttShape *s, int part, size_t elem) {
    const long n = (long)s->B * s->T, ld = (long)(s->Hq + 2 * s->Hkv) * s->D;
    long at, w;
    attention_grad_part(s->Hq, s->Hkv, s->D, part, &at, &w);
    char *out = malloc((size_t)(n * w) * elem);
    for (long r = 0; r < n; r++) memcpy(out + (size_t)(r * w) * elem, (const char *)rows + (size_t)(r * ld + at) * elem,
                                        (size_t)w * elem);
    return out;
}

static float *download_f(const bf16_t *dev, long n) {
    bf16_t *tmp = malloc(n * sizeof(bf16_t));
    float *f = malloc(n * sizeof(float));
    gpu_download(tmp, dev, n * sizeof(bf16_t));
    for (long i = 0; i < n; i++) f[i] = host_from_bf16(tmp[i]);
    free(tmp);
    return f;
}
static void *download_raw(const void *dev, size_t bytes) {
    void *tmp = malloc(bytes);
    gpu_download(tmp, dev, bytes);
    return tmp;
}

/* ---- checks with diagnostics that point at the broken rows and heads ---- */

/* gpu vs ref over a (B*T, H*D) activation: relative error < ATT_TOL and no NaN. On failure names
 * the first token row over tolerance and, in the worst row, the worst head. */
static void check_act(const char *what, const char *name, const AttShape *s, int H, const float *gpu,
                      const float *ref) {
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
              SHAPE_ARGS(name, *s), what, err, ATT_TOL, nan, n, first < 0 ? -1 : first / s->T,
              first < 0 ? -1 : first % s->T, worst / s->T, worst % s->T, worst_err, worst_head, head_err, g[0],
              s->D > 1 ? g[1] : 0.f, s->D > 2 ? g[2] : 0.f, rf[0], s->D > 1 ? rf[1] : 0.f, s->D > 2 ? rf[2] : 0.f);
}

/* cuBLAS att (B, Hq, T, T): close to the CPU's, no NaN, exact zeros above the diagonal. */
static void check_att(const AttShape *s, const bf16_t *raw, const float *ref) {
    long n = (long)s->B * s->Hq * s->T * s->T, nan = 0, nonzero_above = 0, first_above = -1;
    float *gpu = malloc(n * sizeof(float));
    for (long i = 0; i < n; i++) {
        gpu[i] = host_from_bf16(raw[i]);
        nan += isnan(gpu[i]) != 0;
        long t = (i / s->T) % s->T, u = i % s->T;
        if (u > t && raw[i] != 0) {
            nonzero_above++;
            if (first_above < 0) first_above = i;
        }
    }
    double err = rel_error_f(gpu, ref, n);
    free(gpu);
    CHECK_MSG(nan == 0 && err < ATT_TOL, SHAPE_FMT ": att rel error %.3g (tol %.0e), %ld NaN of %ld",
              SHAPE_ARGS("cublas", *s), err, ATT_TOL, nan, n);
    CHECK_MSG(nonzero_above == 0,
              SHAPE_FMT ": att has %ld entries above the diagonal that are not +0 "
                        "(first: z=%ld t=%ld u=%ld, bits 0x%04x)",
              SHAPE_ARGS("cublas", *s), nonzero_above, first_above < 0 ? -1 : first_above / ((long)s->T * s->T),
              first_above < 0 ? -1 : (first_above / s->T) % s->T, first_above < 0 ? -1 : first_above % s->T,
              first_above < 0 ? 0u : (unsigned)raw[first_above]);
}

/* flash lse (B, Hq, T) fp32: close to the reference's, no NaN; names the worst row. */
static void check_lse(const char *name, const AttShape *s, const float *gpu, const double *ref, long n) {
    double num = 0, den = 0, worst = -1;
    long nan = 0, at = 0;
    for (long i = 0; i < n; i++) {
        if (isnan(gpu[i])) {
            nan++;
            continue;
        }
        double d = fabs(gpu[i] - ref[i]);
        num += d * d, den += ref[i] * ref[i];
        if (d > worst) worst = d, at = i;
    }
    double err = sqrt(num / (den > 0 ? den : 1));
    CHECK_MSG(nan == 0 && err < LSE_TOL,
              SHAPE_FMT ": lse rel error %.3g (tol %.0e), %ld NaN of %ld; worst z=%ld t=%ld: gpu %.7g cpu %.7g",
              SHAPE_ARGS(name, *s), err, LSE_TOL, nan, n, at / s->T, at % s->T, gpu[at], ref[at]);
}

/* ---- tests ---- */

typedef struct {
    cublasHandle_t cublas;
    cudaStream_t stream;
    char *fwd_env, *bwd_env; /* MOKC_FLASH_FWD / _BWD as the test found them (restored at the end), or NULL */
} AttEnv;

static void env_init(AttEnv *e) {
    cublasCheck(cublasCreate(&e->cublas));
    cudaCheck(cudaStreamCreate(&e->stream));
    cublasCheck(cublasSetStream(e->cublas, e->stream));
    const char *fwd = getenv("MOKC_FLASH_FWD"), *bwd = getenv("MOKC_FLASH_BWD");
    e->fwd_env = fwd ? strdup(fwd) : NULL;
    e->bwd_env = bwd ? strdup(bwd) : NULL;
}
static void env_restore(const char *name, char *value) {
    if (value) setenv(name, value, 1);
    else unsetenv(name);
    free(value);
}
static void env_free(AttEnv *e) {
    cudaCheck(cudaStreamDestroy(e->stream));
    cublasCheck(cublasDestroy(e->cublas));
    env_restore("MOKC_FLASH_FWD", e->fwd_env);
    env_restore("MOKC_FLASH_BWD", e->bwd_env);
}

/* Forward and backward of every variant against one CPU reference per shape. */
static void test_attention_matches_cpu(void) {
    if (!gpu_test_begin()) return;
    AttEnv env;
    env_init(&env);
    for (int i = 0; i < N_SHAPES; i++) {
        AttShape s = shapes[i];
        AttCase c;
        case_init(&c, s, 1000 + i);
        AttRef ref;
        ref_compute(&ref, &c);
        Variant vs[MAX_VARIANTS];
        const int nv = variants(vs, s.D);
        for (int m = 0; m < nv; m++) {
            const AttnImpl impl = vs[m].impl;
            const char *name = vs[m].name;
            variant_select(&vs[m]);
            AttentionWorkspace *ws = attention_workspace_create(impl, s.B, s.T, s.Hq, s.Hkv, s.D);
            AttOut o;
            outputs_alloc(&o, &c, impl); /* dqkv poisoned: an accumulate instead of an overwrite shows */
            run_gpu(env.cublas, ws, &c, &o, env.stream);
            float *out = download_f(o.out, c.nq), *grads = download_f(o.dqkv, c.nq + 2 * c.nkv);
            float *dq = grad_part(grads, &s, 0, 4), *dk = grad_part(grads, &s, 1, 4), *dv = grad_part(grads, &s, 2, 4);
            void *saved = download_raw(o.saved, o.saved_bytes);
            check_act("out", name, &s, s.Hq, out, ref.out);
            check_act("dq", name, &s, s.Hq, dq, ref.dq);
            check_act("dk", name, &s, s.Hkv, dk, ref.dk);
            check_act("dv", name, &s, s.Hkv, dv, ref.dv);
            if (impl == ATTN_FLASH) check_lse(name, &s, saved, ref.lse, c.nrow);
            else check_att(&s, saved, ref.att);
            free(out), free(grads), free(dq), free(dk), free(dv), free(saved);
            outputs_free(&o);
            attention_workspace_free(ws);
        }
        ref_free(&ref);
        case_free(&c);
    }
    env_free(&env);
}

/* Two runs into different buffers give the same bits; a third run back in the first buffers,
 * after a run of another case through the same workspace, too. */
static void test_attention_bitwise_run_to_run(void) {
    if (!gpu_test_begin()) return;
    AttEnv env;
    env_init(&env);
    /* the last: 16 kv blocks adding into each late dQ block, a chain the CPU reference would be slow for */
    const AttShape cases[] = {{1, 257, 8, 2, 128}, {2, 128, 8, 1, 64}, {2, 130, 8, 8, 64}, {1, 1031, 16, 4, 128},
                              {2, 2048, 8, 1, 128}};
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        const AttShape s = cases[i];
        Variant vs[MAX_VARIANTS];
        const int nv = variants(vs, s.D);
        for (int m = 0; m < nv; m++) {
            const AttnImpl impl = vs[m].impl;
            const char *name = vs[m].name;
            variant_select(&vs[m]);
            AttCase c, other;
            case_init(&c, s, 3000 + i);
            case_init(&other, s, 3100 + i);
            AttentionWorkspace *ws = attention_workspace_create(impl, s.B, s.T, s.Hq, s.Hkv, s.D);
            AttOut o1, o2, o3;
            outputs_alloc(&o1, &c, impl), outputs_alloc(&o2, &c, impl), outputs_alloc(&o3, &c, impl);
            run_gpu(env.cublas, ws, &c, &o1, env.stream);
            run_gpu(env.cublas, ws, &c, &o2, env.stream);
            run_gpu(env.cublas, ws, &other, &o3, env.stream); /* different inputs through the workspace */
            void *first[3], *again;
            void *bufs1[3] = {o1.out, o1.saved, o1.dqkv};
            const void *bufs2[3] = {o2.out, o2.saved, o2.dqkv};
            const size_t bytes[3] = {c.nq * sizeof(bf16_t), o1.saved_bytes, (c.nq + 2 * c.nkv) * sizeof(bf16_t)};
            const char *names[3] = {"out", "saved", "dq, dk, dv"};
            for (int b = 0; b < 3; b++) first[b] = download_raw(bufs1[b], bytes[b]);
            /* re-poison the first buffers and run again into them */
            for (int b = 0; b < 3; b++) cudaCheck(cudaMemset(bufs1[b], 0xff, bytes[b]));
            run_gpu(env.cublas, ws, &c, &o1, env.stream);
            for (int b = 0; b < 3; b++) {
                again = download_raw(bufs2[b], bytes[b]);
                CHECK_MSG(memcmp(first[b], again, bytes[b]) == 0,
                          SHAPE_FMT ": %s differs between two runs into different buffers", SHAPE_ARGS(name, s),
                          names[b]);
                free(again);
                again = download_raw(bufs1[b], bytes[b]);
                CHECK_MSG(memcmp(first[b], again, bytes[b]) == 0,
                          SHAPE_FMT ": %s differs when rerun into the same buffers after another case",
                          SHAPE_ARGS(name, s), names[b]);
                free(again), free(first[b]);
            }
            outputs_free(&o1), outputs_free(&o2), outputs_free(&o3);
            attention_workspace_free(ws);
            case_free(&c), case_free(&other);
        }
    }
    env_free(&env);
}

/* The first t < ts at which buffers a and b (groups of T rows of row_bytes each) differ in some
 * group; -1 if none. */
static long first_changed_row(const void *a, const void *b, long groups, int T, int ts, size_t row_bytes) {
    for (long z = 0; z < groups; z++)
        for (int t = 0; t < ts; t++) {
            size_t off = ((size_t)z * T + t) * row_bytes;
            if (memcmp((const char *)a + off, (const char *)b + off, row_bytes) != 0) return t;
        }
    return -1;
}

/* Changing k and v at position ts (every batch and kv head) leaves out, the saved state and dq of
 * every row t < ts bit-identical, and does change row ts. */
static void test_attention_causal(void) {
    if (!gpu_test_begin()) return;
    AttEnv env;
    env_init(&env);
    const AttShape cases[] = {{2, 257, 8, 2, 64}, {1, 128, 16, 4, 128}, {1, 300, 8, 1, 128}};
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        const AttShape s = cases[i];
        Variant vs[MAX_VARIANTS];
        const int nv = variants(vs, s.D);
        for (int m = 0; m < nv; m++) {
            const AttnImpl impl = vs[m].impl;
            const char *name = vs[m].name;
            variant_select(&vs[m]);
            int ts = s.T * 2 / 3; /* inside a block, not at its edge */
            AttCase c;
            case_init(&c, s, 4000 + i);
            AttentionWorkspace *ws = attention_workspace_create(impl, s.B, s.T, s.Hq, s.Hkv, s.D);
            AttOut o1, o2;
            outputs_alloc(&o1, &c, impl), outputs_alloc(&o2, &c, impl);
            run_gpu(env.cublas, ws, &c, &o1, env.stream);

            long kv_row = (long)s.Hkv * s.D;
            uint64_t st = 4500 + i;
            for (int b = 0; b < s.B; b++) {
                long off = ((long)b * s.T + ts) * kv_row;
                fill_bf16(c.k + off, NULL, kv_row, 2.0f, &st);
                fill_bf16(c.v + off, NULL, kv_row, 1.0f, &st);
            }
            cudaCheck(cudaMemcpy(c.d_k, c.k, c.nkv * sizeof(bf16_t), cudaMemcpyHostToDevice));
            cudaCheck(cudaMemcpy(c.d_v, c.v, c.nkv * sizeof(bf16_t), cudaMemcpyHostToDevice));
            run_gpu(env.cublas, ws, &c, &o2, env.stream);

            const size_t qb = c.nq * sizeof(bf16_t), q_row = (size_t)s.Hq * s.D * sizeof(bf16_t);
            void *out1 = download_raw(o1.out, qb), *out2 = download_raw(o2.out, qb);
            const size_t gb = (c.nq + 2 * c.nkv) * sizeof(bf16_t);
            void *g1 = download_raw(o1.dqkv, gb), *g2 = download_raw(o2.dqkv, gb);
            void *dq1 = grad_part(g1, &s, 0, 2), *dq2 = grad_part(g2, &s, 0, 2);
            free(g1), free(g2);
            void *sv1 = download_raw(o1.saved, o1.saved_bytes), *sv2 = download_raw(o2.saved, o2.saved_bytes);
            long bad_out = first_changed_row(out1, out2, s.B, s.T, ts, q_row);
            long bad_dq = first_changed_row(dq1, dq2, s.B, s.T, ts, q_row);
            long bad_saved = first_changed_row(sv1, sv2, (long)s.B * s.Hq, s.T, ts, o1.saved_bytes / c.nrow);
            long changed = 0;
            for (int b = 0; b < s.B; b++) {
                size_t off = ((size_t)b * s.T + ts) * q_row;
                changed += memcmp((char *)out1 + off, (char *)out2 + off, q_row) != 0;
            }
            CHECK_MSG(bad_out < 0, SHAPE_FMT ": out row t=%ld changed when only position %d's k/v changed",
                      SHAPE_ARGS(name, s), bad_out, ts);
            CHECK_MSG(bad_dq < 0, SHAPE_FMT ": dq row t=%ld changed when only position %d's k/v changed",
                      SHAPE_ARGS(name, s), bad_dq, ts);
            CHECK_MSG(bad_saved < 0, SHAPE_FMT ": saved row t=%ld changed when only position %d's k/v changed",
                      SHAPE_ARGS(name, s), bad_saved, ts);
            CHECK_MSG(changed == s.B,
                      SHAPE_FMT ": out row %d did not change with its own k/v (%ld of %d batches changed)",
                      SHAPE_ARGS(name, s), ts, changed, s.B);
            free(out1), free(out2), free(dq1), free(dq2), free(sv1), free(sv2);
            outputs_free(&o1), outputs_free(&o2);
            attention_workspace_free(ws);
            case_free(&c);
        }
    }
    env_free(&env);
}

/* The size formulas (host only: runs without a GPU too). */
static void test_attention_workspace_bytes(void) {
    /* cuBLAS, B=4 T=4096 Hq=16 Hkv=4 D=128: blocks of 256 rows, 16 of them. */
    size_t z = 4 * 16, expect = z * 4096 * 4096 * 4 + z * 4096 * 128 * 4 + 12 * 16 * z * 8;
    CHECK_EQ_INT(attention_workspace_bytes(ATTN_CUBLAS, 4, 4096, 16, 4, 128), expect);
    CHECK_EQ_INT(attention_saved_bytes(ATTN_CUBLAS, 4, 4096, 16), z * 4096 * 4096 * 2);
    /* MHA has no per-head scratch; T = 7 is one block; the table rounds up to 256 bytes. */
    size_t mha = (size_t)2 * 8 * 7 * 7 * 4; /* 3136 -> 3328 */
    CHECK_EQ_INT(attention_workspace_bytes(ATTN_CUBLAS, 2, 7, 8, 8, 64), ((mha + 255) / 256) * 256 + 1536);
    /* flash: nothing of size T x T, at T = 8192 too: one fp32 per (b, h, t) saved; the workspace
     * holds delta (one fp32 per (b, h, t)) and, for the wgmma backward (D = 64, 128), a counter per
     * 64-row query block (and the ticket) and the fp32 dQ sums of whole 64-row blocks. */
    size_t nq = 8192 / 64, ctr = ((1 + z * nq) * 4 + 255) / 256 * 256;
    CHECK_EQ_INT(attention_workspace_bytes(ATTN_FLASH, 4, 8192, 16, 4, 128),
                 z * 8192 * 4 + ctr + z * nq * 64 * 128 * 4);
    CHECK_EQ_INT(attention_saved_bytes(ATTN_FLASH, 4, 8192, 16), z * 8192 * 4);
    CHECK_EQ_INT(attention_workspace_bytes(ATTN_FLASH, 1, 7, 3, 1, 64), 256 + 256 + 3 * 64 * 64 * 4);
    CHECK_EQ_INT(attention_workspace_bytes(ATTN_FLASH, 1, 7, 3, 1, 16), 256);
    CHECK_EQ_INT(attention_default_impl(128), ATTN_FLASH);
    CHECK_EQ_INT(attention_default_impl(16), ATTN_FLASH);
    CHECK_EQ_INT(attention_default_impl(96), ATTN_CUBLAS);
}

TEST_SUITE(gpu_attention, TEST_CASE(test_attention_workspace_bytes), TEST_CASE(test_attention_matches_cpu),
           TEST_CASE(test_attention_bitwise_run_to_run), TEST_CASE(test_attention_causal));
