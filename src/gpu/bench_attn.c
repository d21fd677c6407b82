/*
 * `mokc bench attn` (usage and method in bench_attn.h): one GPU, random device-side inputs, the
 * two attention implementations timed with CUDA events, then compared with each other.
 */
#include "gpu/bench_attn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/attention.h"
#include "../../kernels/copy_rows.h"
#include "../../kernels/flash_attention.h"
#include "../../kernels/mok/gemm_sm90.h"
#include "../../kernels/mok/mok.h"
#include "../../kernels/moe_fill.h"
#include "../../kernels/rope.h"
#include "common.h"
#include "gpu/bench_util.h"
#include "gpu/check.h"
#include "gpu/device.h"
#include "gpu/gemm.h"

static const char *attn_help =
    "usage: mokc bench attn [--impl flash|cublas|all] [--batch 4] [--heads 16] [--kv-heads 4]\n"
    "                       [--head-dim 128] [--seq 4096] [--hidden 2048] [--iters 20] [--warmup 5]\n"
    "                       [--seed S]\n"
    "\n"
    "Times causal grouped-query attention on GPU 0, forward and backward, median of --iters after\n"
    "--warmup: the flash kernels (MOKC_FLASH_FWD, MOKC_FLASH_BWD = mma|wgmma pick them) and the\n"
    "cuBLAS + softmax path. TFLOP/s count the causal half of the products: forward 2*B*Hq*T^2*D,\n"
    "backward 2.5x that. Prints a JSON line per implementation and a table; with both, the flash\n"
    "outputs' relative error against cuBLAS (> 1e-2 fails the run). Last (impl \"rope\"), RoPE around\n"
    "attention: the rope kernels alone (q, k; dq, dk back), and the q, k projections from --hidden\n"
    "as cuBLAS + rope kernels against the Hopper tile with RoPE in its epilogue (> 1e-2 apart fails).\n"
    "example: ./mokc bench attn --seq 8192 --batch 2\n";

typedef struct {
    const char *impl;
    int B, Hq, Hkv, D, T, hidden, iters, warmup, seed;
} AttnArgs;

static int usage(const char *fmt, const char *arg) {
    fprintf(stderr, "mokc: error: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n%s", attn_help);
    return MOKC_EXIT_USAGE;
}

/* Returns -1 when the arguments are fine, else the exit code. */
static int parse_args(int argc, char **argv, AttnArgs *a) {
    *a = (AttnArgs){
        .impl = "all", .B = 4, .Hq = 16, .Hkv = 4, .D = 128, .T = 4096, .hidden = 2048, .iters = 20, .warmup = 5,
        .seed = 1234};
    const struct {
        const char *name;
        int *dst, min;
    } ints[] = {{"--batch", &a->B, 1}, {"--heads", &a->Hq, 1},    {"--kv-heads", &a->Hkv, 1},  {"--head-dim", &a->D, 2},
                {"--seq", &a->T, 1},   {"--iters", &a->iters, 1}, {"--warmup", &a->warmup, 0}, {"--seed", &a->seed, 0},
                {"--hidden", &a->hidden, 8}};
    for (int i = 2; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            fputs(attn_help, stdout);
            return 0;
        }
        if (!v) return usage("option '%s' needs a value", o);
        i++;
        if (!strcmp(o, "--impl")) {
            if (strcmp(v, "flash") && strcmp(v, "cublas") && strcmp(v, "all"))
                return usage("--impl must be flash, cublas or all, not '%s'", v);
            a->impl = v;
            continue;
        }
        int k = 0, n = (int)(sizeof ints / sizeof ints[0]);
        while (k < n && strcmp(o, ints[k].name)) k++;
        if (k == n) return usage("unknown option '%s' for `mokc bench attn`", o);
        char *end = NULL;
        long x = strtol(v, &end, 10);
        if (!v[0] || *end || x < ints[k].min || x > 1 << 30) {
            fprintf(stderr, "mokc: error: %s needs an integer >= %d, not '%s'\n", o, ints[k].min, v);
            return MOKC_EXIT_USAGE;
        }
        *ints[k].dst = (int)x;
    }
    if (a->Hq % a->Hkv) return usage("%s", "--heads must be a multiple of --kv-heads");
    return -1;
}

typedef struct {
    bf16_t *q, *k, *v, *dout; /* inputs, shared by the implementations */
    long nq, nkv;
} Inputs;

typedef struct {
    AttnImpl impl;
    AttentionWorkspace *ws;
    bf16_t *out, *dqkv; /* dqkv: a token's dq, dk, dv in one row (attention.h) */
    void *saved;
    size_t saved_bytes, work_bytes;
    double fwd_ms, bwd_ms;
} Run;

/* The forward's and the backward's kernels: flash's (flash_attention_forward_kernel,
 * flash_attention_backward_kernel), or "cublas". */
static const char *fwd_kernel(AttnImpl impl, int D) {
    return impl == ATTN_FLASH ? flash_attention_forward_kernel(D) : "cublas";
}
static const char *bwd_kernel(AttnImpl impl, int D) {
    return impl == ATTN_FLASH ? flash_attention_backward_kernel(D) : "cublas";
}

static bf16_t *dev_alloc(long n) {
    bf16_t *p = NULL;
    cudaCheck(cudaMalloc((void **)&p, (size_t)n * sizeof(bf16_t)));
    return p;
}

/* The relative error between two runs' part of the gradient rows (0: dq, 1: dk, 2: dv), from packed copies. */
static double grad_part_err(const Run runs[2], const AttnArgs *a, int part) {
    const long rows = (long)a->B * a->T, ld = (long)(a->Hq + 2 * a->Hkv) * a->D;
    long at, w;
    attention_grad_part(a->Hq, a->Hkv, a->D, part, &at, &w);
    bf16_t *packed[2];
    for (int i = 0; i < 2; i++) {
        packed[i] = dev_alloc(rows * w);
        gpu_copy_rows_bf16(packed[i], w, runs[i].dqkv + at, ld, rows, w, 0); /* bench_rel_err_bf16 syncs first */
    }
    const double err = bench_rel_err_bf16(packed[0], packed[1], rows * w, NULL);
    cudaCheck(cudaFree(packed[0])), cudaCheck(cudaFree(packed[1]));
    return err;
}

static void time_run(Run *r, const AttnArgs *a, const Inputs *in, cublasHandle_t blas, cudaStream_t s) {
    r->work_bytes = attention_workspace_bytes(r->impl, a->B, a->T, a->Hq, a->Hkv, a->D);
    r->saved_bytes = attention_saved_bytes(r->impl, a->B, a->T, a->Hq);
    r->ws = attention_workspace_create(r->impl, a->B, a->T, a->Hq, a->Hkv, a->D);
    r->out = dev_alloc(in->nq), r->dqkv = dev_alloc(in->nq + 2 * in->nkv);
    cudaCheck(cudaMalloc(&r->saved, r->saved_bytes));
    cudaEvent_t e[3];
    for (int i = 0; i < 3; i++) cudaCheck(cudaEventCreate(&e[i]));
    double *tf = callocCheck((size_t)a->iters, sizeof(double)), *tb = callocCheck((size_t)a->iters, sizeof(double));
    for (int it = -a->warmup; it < a->iters; it++) {
        cudaCheck(cudaEventRecord(e[0], s));
        attention_forward_gpu(blas, r->ws, r->out, r->saved, in->q, in->k, in->v, s);
        cudaCheck(cudaEventRecord(e[1], s));
        attention_backward_gpu(blas, r->ws, r->dqkv, in->dout, r->out, r->saved, in->q, in->k, in->v, s);
        cudaCheck(cudaEventRecord(e[2], s));
        cudaCheck(cudaEventSynchronize(e[2]));
        if (it < 0) continue;
        float f = 0, b = 0;
        cudaCheck(cudaEventElapsedTime(&f, e[0], e[1]));
        cudaCheck(cudaEventElapsedTime(&b, e[1], e[2]));
        tf[it] = f, tb[it] = b;
    }
    r->fwd_ms = bench_median(tf, a->iters);
    r->bwd_ms = bench_median(tb, a->iters);
    free(tf), free(tb);
    for (int i = 0; i < 3; i++) cudaCheck(cudaEventDestroy(e[i]));
}

/* RoPE around attention: the training step's q and k projections and rotations, timed three ways
 * (issue 10's "measure which"): cuBLAS GEMMs then the rope kernels (rotate q, k; backward: dq, dk
 * back), the megakernel's Hopper tile without and with RoPE in its epilogue. */
typedef struct {
    const AttnArgs *a;
    cublasHandle_t blas;
    const float *table;
    const bf16_t *x, *wq, *wk;
    bf16_t *q, *k;
    int M, C;
} Proj;

static void rope_qk(const Proj *p, int inverse, cudaStream_t s) {
    gpu_rope(p->q, p->table, p->a->B, p->a->T, p->a->Hq, p->a->D, (long)p->a->Hq * p->a->D, inverse, s);
    gpu_rope(p->k, p->table, p->a->B, p->a->T, p->a->Hkv, p->a->D, (long)p->a->Hkv * p->a->D, inverse, s);
}
static void proj_rope_fwd(void *c, cudaStream_t s) { rope_qk(c, 0, s); }
static void proj_rope_bwd(void *c, cudaStream_t s) { rope_qk(c, 1, s); }
static void proj_cublas(void *c, cudaStream_t s) {
    (void)s; /* the handle's stream */
    Proj *p = c;
    const int QD = p->a->Hq * p->a->D, KD = p->a->Hkv * p->a->D;
    gemm_rm(p->blas, 0, 0, p->M, QD, p->C, p->x, GEMM_BF16, p->wq, GEMM_BF16, p->q, GEMM_BF16, 1, 0);
    gemm_rm(p->blas, 0, 0, p->M, KD, p->C, p->x, GEMM_BF16, p->wk, GEMM_BF16, p->k, GEMM_BF16, 1, 0);
}
static void proj_cublas_rope(void *c, cudaStream_t s) {
    proj_cublas(c, s);
    proj_rope_fwd(c, s);
}
static void proj_sm90(void *c, cudaStream_t s) {
    Proj *p = c;
    const int QD = p->a->Hq * p->a->D, KD = p->a->Hkv * p->a->D;
    gemm_sm90_grouped(p->q, p->x, p->wq, 1, p->M, QD, p->C, s);
    gemm_sm90_grouped(p->k, p->x, p->wk, 1, p->M, KD, p->C, s);
}
static void proj_sm90_rope(void *c, cudaStream_t s) {
    Proj *p = c;
    const int QD = p->a->Hq * p->a->D, KD = p->a->Hkv * p->a->D;
    gemm_sm90_rope(p->q, p->x, p->wq, p->M, QD, p->C, p->table, p->a->T, p->a->D, s);
    gemm_sm90_rope(p->k, p->x, p->wk, p->M, KD, p->C, p->table, p->a->T, p->a->D, s);
}

/* Prints one JSON line; returns 0, or MOKC_EXIT_RUNTIME when the fused output disagrees with
 * cuBLAS + rope (relative error > 1e-2). */
static int time_rope(const AttnArgs *a, cublasHandle_t blas, cudaStream_t s) {
    Proj p = {.a = a, .blas = blas, .M = a->B * a->T, .C = a->hidden};
    const long nx = (long)p.M * p.C, nq = (long)p.M * a->Hq * a->D, nk = (long)p.M * a->Hkv * a->D;
    float *table = NULL;
    cudaCheck(cudaMalloc((void **)&table, sizeof(float) * (size_t)gpu_rope_table_floats(a->T, a->D)));
    gpu_rope_table_init(table, a->T, a->D, 10000.0f, s);
    p.table = table;
    bf16_t *x = dev_alloc(nx), *wq = dev_alloc((long)p.C * a->Hq * a->D), *wk = dev_alloc((long)p.C * a->Hkv * a->D);
    bf16_t *q = dev_alloc(nq), *k = dev_alloc(nk), *q_ref = dev_alloc(nq), *k_ref = dev_alloc(nk);
    const unsigned long long seed = (unsigned long long)a->seed * 4 + 100;
    gpu_moe_fill_bf16(x, nx, seed, 0, 1.0f, 0.0f, s);
    gpu_moe_fill_bf16(wq, (long)p.C * a->Hq * a->D, seed + 1, 0, 0.02f, 0.0f, s);
    gpu_moe_fill_bf16(wk, (long)p.C * a->Hkv * a->D, seed + 2, 0, 0.02f, 0.0f, s);
    p.x = x, p.wq = wq, p.wk = wk, p.q = q, p.k = k;
    const double fwd = bench_time_ms(proj_rope_fwd, &p, a->iters, a->warmup, s);
    const double bwd = bench_time_ms(proj_rope_bwd, &p, a->iters, a->warmup, s);
    const double cublas = bench_time_ms(proj_cublas, &p, a->iters, a->warmup, s);
    const double cublas_rope = bench_time_ms(proj_cublas_rope, &p, a->iters, a->warmup, s);
    double sm90 = NAN, sm90_rope = NAN, err_q = NAN, err_k = NAN;
    const char *why = NULL;
    int rc = 0;
    if (mok_sm90_available() && gemm_sm90_rope_ok(p.M, a->Hq * a->D, p.C, a->D, &why) &&
        gemm_sm90_rope_ok(p.M, a->Hkv * a->D, p.C, a->D, &why)) {
        sm90 = bench_time_ms(proj_sm90, &p, a->iters, a->warmup, s);
        sm90_rope = bench_time_ms(proj_sm90_rope, &p, a->iters, a->warmup, s);
        p.q = q_ref, p.k = k_ref;
        proj_cublas_rope(&p, s);
        err_q = bench_rel_err_bf16(q, q_ref, nq, NULL), err_k = bench_rel_err_bf16(k, k_ref, nk, NULL);
        rc = err_q < 1e-2 && err_k < 1e-2 ? 0 : MOKC_EXIT_RUNTIME; /* false for NaN */
    } else {
        printf("qk projection on the Hopper tile: skipped (%s)\n", why ? why : "needs an SM 9.0 GPU and sm_90a");
    }
    char js[4][32]; /* null where the Hopper tile did not run */
    const double jv[4] = {sm90, sm90_rope, err_q, err_k};
    for (int i = 0; i < 4; i++) snprintf(js[i], sizeof js[i], isnan(jv[i]) ? "null" : i < 2 ? "%.4f" : "%.2e", jv[i]);
    bench_emit("{\"bench\": \"attn\", \"impl\": \"rope\", \"B\": %d, \"T\": %d, \"Hq\": %d, \"Hkv\": %d, \"D\": %d, "
               "\"hidden\": %d, \"iters\": %d, \"rope_fwd_ms\": %.4f, \"rope_bwd_ms\": %.4f, \"qk_cublas_ms\": %.4f, "
               "\"qk_cublas_rope_ms\": %.4f, \"qk_sm90_ms\": %s, \"qk_sm90_rope_ms\": %s, \"rel_err_q\": %s, "
               "\"rel_err_k\": %s}",
               a->B, a->T, a->Hq, a->Hkv, a->D, a->hidden, a->iters, fwd, bwd, cublas, cublas_rope, js[0], js[1], js[2],
               js[3]);
    printf("\nq, k projection (hidden %d) and RoPE, ms: cuBLAS %.3f, + rope kernels %.3f (rope alone %.3f, its "
           "backward %.3f); Hopper tile %.3f, with RoPE in its epilogue %.3f (rel err vs cuBLAS + rope: q %.2e, k "
           "%.2e)%s\n",
           a->hidden, cublas, cublas_rope, fwd, bwd, sm90, sm90_rope, err_q, err_k, rc ? "  FAIL" : "");
    cudaCheck(cudaFree(table)), cudaCheck(cudaFree(x)), cudaCheck(cudaFree(wq)), cudaCheck(cudaFree(wk));
    cudaCheck(cudaFree(q)), cudaCheck(cudaFree(k)), cudaCheck(cudaFree(q_ref)), cudaCheck(cudaFree(k_ref));
    return rc;
}

static void run_free(Run *r) {
    attention_workspace_free(r->ws);
    cudaCheck(cudaFree(r->out)), cudaCheck(cudaFree(r->dqkv));
    cudaCheck(cudaFree(r->saved));
}

int cmd_bench_attn(int argc, char **argv) {
    AttnArgs a;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    if (gpu_device_count() == 0)
        mokc_die(MOKC_EXIT_RUNTIME, "run the benchmark on a machine with NVIDIA GPUs", "bench attn: no GPU found");
    const int dev = gpu_select_device(0);
    char gpu[256];
    gpu_describe(dev, gpu, sizeof gpu);
    printf("bench attn: causal B=%d T=%d Hq=%d Hkv=%d D=%d | %s\n", a.B, a.T, a.Hq, a.Hkv, a.D, gpu);

    cudaStream_t s;
    cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cublasHandle_t blas;
    cublasCheck(cublasCreate(&blas));
    cublasCheck(cublasSetStream(blas, s));
    Inputs in = {.nq = (long)a.B * a.T * a.Hq * a.D, .nkv = (long)a.B * a.T * a.Hkv * a.D};
    in.q = dev_alloc(in.nq), in.dout = dev_alloc(in.nq), in.k = dev_alloc(in.nkv), in.v = dev_alloc(in.nkv);
    const unsigned long long seed = (unsigned long long)a.seed * 4;
    gpu_moe_fill_bf16(in.q, in.nq, seed, 0, 2.0f, 0.0f, s); /* scores * scale of order 1 */
    gpu_moe_fill_bf16(in.k, in.nkv, seed + 1, 0, 2.0f, 0.0f, s);
    gpu_moe_fill_bf16(in.v, in.nkv, seed + 2, 0, 1.0f, 0.0f, s);
    gpu_moe_fill_bf16(in.dout, in.nq, seed + 3, 0, 1.0f, 0.0f, s);

    Run runs[2];
    memset(runs, 0, sizeof runs);
    int n = 0;
    if (!strcmp(a.impl, "all") && attention_default_impl(a.D) != ATTN_FLASH)
        printf("flash: skipped, its kernels are not built for head dim %d\n", a.D);
    else if (strcmp(a.impl, "cublas")) runs[n++].impl = ATTN_FLASH;
    if (strcmp(a.impl, "flash")) runs[n++].impl = ATTN_CUBLAS;
    const double fwd_flop = 2.0 * a.B * a.Hq * (double)a.T * a.T * a.D, bwd_flop = 2.5 * fwd_flop;
    for (int i = 0; i < n; i++) {
        Run *r = &runs[i];
        time_run(r, &a, &in, blas, s);
        bench_emit("{\"bench\": \"attn\", \"impl\": \"%s\", \"fwd_kernel\": \"%s\", \"bwd_kernel\": \"%s\", \"B\": %d, "
                   "\"T\": %d, \"Hq\": %d, \"Hkv\": %d, \"D\": %d, \"iters\": %d, \"fwd_ms\": %.4f, \"bwd_ms\": %.4f, "
                   "\"fwd_tflops\": %.1f, \"bwd_tflops\": %.1f, \"saved_mib\": %.1f, \"work_mib\": %.1f}",
                   attention_impl_name(r->impl), fwd_kernel(r->impl, a.D), bwd_kernel(r->impl, a.D), a.B, a.T, a.Hq,
                   a.Hkv, a.D, a.iters, r->fwd_ms, r->bwd_ms, fwd_flop / (r->fwd_ms * 1e9),
                   bwd_flop / (r->bwd_ms * 1e9), r->saved_bytes / 1048576.0, r->work_bytes / 1048576.0);
        fflush(stdout);
    }
    printf("\n%-8s %-8s %-8s %9s %12s %9s %12s %11s %14s\n", "impl", "fwd", "bwd", "fwd ms", "fwd TFLOP/s", "bwd ms",
           "bwd TFLOP/s", "saved MiB", "workspace MiB");
    for (int i = 0; i < n; i++)
        printf("%-8s %-8s %-8s %9.3f %12.1f %9.3f %12.1f %11.1f %14.1f\n", attention_impl_name(runs[i].impl),
               fwd_kernel(runs[i].impl, a.D), bwd_kernel(runs[i].impl, a.D), runs[i].fwd_ms,
               fwd_flop / (runs[i].fwd_ms * 1e9), runs[i].bwd_ms, bwd_flop / (runs[i].bwd_ms * 1e9),
               runs[i].saved_bytes / 1048576.0, runs[i].work_bytes / 1048576.0);
    if (n == 2) {
        const double tol = 1e-2;
        double err[4] = {bench_rel_err_bf16(runs[0].out, runs[1].out, in.nq, NULL)};
        for (int part = 0; part < 3; part++) err[1 + part] = grad_part_err(runs, &a, part);
        int ok = 1;
        for (int i = 0; i < 4; i++) ok &= err[i] < tol; /* false for NaN */
        printf("\nflash vs cublas, rel err: out %.2e  dq %.2e  dk %.2e  dv %.2e  %s (tolerance %g)\n", err[0], err[1],
               err[2], err[3], ok ? "ok" : "FAIL", tol);
        rc = ok ? 0 : MOKC_EXIT_RUNTIME;
    } else {
        rc = 0;
    }
    const int rope_rc = time_rope(&a, blas, s);
    if (rc == 0) rc = rope_rc;
    for (int i = 0; i < n; i++) run_free(&runs[i]);
    cudaCheck(cudaFree(in.q)), cudaCheck(cudaFree(in.k)), cudaCheck(cudaFree(in.v)), cudaCheck(cudaFree(in.dout));
    cublasCheck(cublasDestroy(blas));
    cudaCheck(cudaStreamDestroy(s));
    return rc;
}
