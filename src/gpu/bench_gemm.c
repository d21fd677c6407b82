/*
 * `mokc bench gemm` (usage and method in bench_gemm.h): the mok Hopper tile as a grouped GEMM and
 * cuBLAS on the same random inputs, timed with CUDA events, then compared element by element.
 */
#include "gpu/bench_gemm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/mok/gemm_sm90.h"
#include "../../kernels/mok/mok.h"
#include "../../kernels/moe_fill.h"
#include "common.h"
#include "gpu/bench_util.h"
#include "gpu/check.h"
#include "gpu/device.h"
#include "gpu/gemm.h"

static const char *gemm_help =
    "usage: mokc bench gemm [--m M] [--n N] [--k K] [--groups G] [--iters 20] [--warmup 5] [--seed S]\n"
    "\n"
    "Times the megakernel's Hopper GEMM tile alone (a persistent grouped GEMM: groups x (M x K) @ (K x N),\n"
    "bf16 in and out) against cuBLAS (strided batched) on GPU 0, median of --iters (>= 20) after\n"
    "--warmup, and checks every output element against cuBLAS (relative error >= 1e-2 fails the run).\n"
    "With M <= 176 or 192 (an expert's tokens) also the token-side tiles (\"mok_sm90_tok\", \"mok_sm90_tok192\":\n"
    "192 columns of B by all M rows in tiles of 176 or 192, each slice of B read once per group), and always\n"
    "the 192 x 192 tiles in the 128 x 256 tiles' orientation (\"mok_sm90_r192\"; \"mok_sm90_r192_b32\": B in\n"
    "32-column panels with the 64-byte swizzle, two boxes of 96 columns a stage).\n"
    "Without --m/--n/--k/--groups: dense 8192 x 8192 x 8192, then 64 groups of 1024 x 1536 x 2048;\n"
    "with any of them, one case (the others default to 8192 and 1 group). N and K: multiples of 8.\n"
    "Prints a JSON line per implementation and case. Needs an SM 9.0 (Hopper) GPU and a sm_90a build.\n"
    "example: ./mokc bench gemm --m 4096 --n 7168 --k 2048 --groups 8\n";

#define TOLERANCE 1e-2

typedef struct {
    int M, N, K, G;
} Shape;

typedef struct {
    Shape one; /* the case of --m/--n/--k/--groups */
    int given; /* any of those was passed */
    int iters, warmup, seed;
} GemmArgs;

/* The megakernel tile's entry points (gemm_sm90.h), each with the most rows a group it takes (0:
 * any); cuBLAS, the reference, is the implementation after them. */
typedef void (*GemmSm90Fn)(bf16_t *, const bf16_t *, const bf16_t *, int, int, int, int, cudaStream_t);
static const struct {
    const char *name;
    GemmSm90Fn fn;
    int max_m;
} mok_impls[] = {{"mok_sm90", gemm_sm90_grouped, 0},
                 {"mok_sm90_tok", gemm_sm90_grouped_tok, 176},
                 {"mok_sm90_tok192", gemm_sm90_grouped_tok192, 192},
                 {"mok_sm90_r192", gemm_sm90_grouped_r192, 0},
                 {"mok_sm90_r192_b32", gemm_sm90_grouped_r192_b32, 0}};
enum { IMPL_CUBLAS = (int)(sizeof mok_impls / sizeof mok_impls[0]), IMPL_COUNT };

static const char *impl_name(int impl) { return impl < IMPL_CUBLAS ? mok_impls[impl].name : "cublas"; }

typedef struct {
    Shape s;
    bf16_t *A, *B, *C[IMPL_COUNT]; /* C per implementation (NULL: not run on this shape) */
} Problem;

static int usage(const char *fmt, const char *arg) {
    fprintf(stderr, "mokc: error: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n\n%s", gemm_help);
    return MOKC_EXIT_USAGE;
}

/* Returns -1 when the arguments are fine, else the exit code. */
static int parse_args(int argc, char **argv, GemmArgs *a) {
    *a = (GemmArgs){.one = {8192, 8192, 8192, 1}, .iters = 20, .warmup = 5, .seed = 1234};
    const struct {
        const char *name;
        int *dst, min, shape;
    } ints[] = {{"--m", &a->one.M, 1, 1},         {"--n", &a->one.N, 1, 1},         {"--k", &a->one.K, 1, 1},
                {"--groups", &a->one.G, 1, 1},    {"--iters", &a->iters, 20, 0},    {"--warmup", &a->warmup, 0, 0},
                {"--seed", &a->seed, 0, 0}};
    for (int i = 2; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            fputs(gemm_help, stdout);
            return 0;
        }
        int k = 0, n = (int)(sizeof ints / sizeof ints[0]);
        while (k < n && strcmp(o, ints[k].name)) k++;
        if (k == n) return usage("unknown option '%s' for `mokc bench gemm`", o);
        if (!v) return usage("option '%s' needs a value", o);
        i++;
        char *end = NULL;
        long x = strtol(v, &end, 10);
        if (!v[0] || *end || x < ints[k].min || x > 1 << 30) {
            fprintf(stderr, "mokc: error: %s needs an integer >= %d, not '%s'%s\n", o, ints[k].min, v,
                    !strcmp(o, "--iters") ? " (times are medians of at least 20 iterations)" : "");
            return MOKC_EXIT_USAGE;
        }
        *ints[k].dst = (int)x;
        a->given |= ints[k].shape;
    }
    const char *why = NULL;
    if (a->given && !gemm_sm90_shape_ok(a->one.G, a->one.M, a->one.N, a->one.K, &why))
        return usage("bench gemm: %s", why);
    return -1;
}

static bf16_t *dev_alloc(long n) {
    bf16_t *p = NULL;
    cudaCheck(cudaMalloc((void **)&p, (size_t)n * sizeof(bf16_t)));
    return p;
}

static void run_impl(int impl, const Problem *p, cublasHandle_t blas, cudaStream_t st) {
    const Shape s = p->s;
    if (impl < IMPL_CUBLAS)
        mok_impls[impl].fn(p->C[impl], p->A, p->B, s.G, s.M, s.N, s.K, st);
    else
        gemm_rm_strided(blas, 0, 0, s.M, s.N, s.K, p->A, GEMM_BF16, (long long)s.M * s.K, p->B, GEMM_BF16,
                        (long long)s.K * s.N, p->C[impl], GEMM_BF16, (long long)s.M * s.N, s.G, 1.0f, 0.0f);
}

/* Median ms of a->iters launches recorded back to back (the queue never drains, so host-side
 * costs such as encoding the tensor maps stay off the clock). The first call sets up, untimed. */
static double time_impl(int impl, const Problem *p, const GemmArgs *a, cublasHandle_t blas, cudaStream_t st) {
    for (int i = 0; i <= a->warmup; i++) run_impl(impl, p, blas, st);
    cudaEvent_t *ev = callocCheck((size_t)a->iters + 1, sizeof(cudaEvent_t));
    double *t = callocCheck((size_t)a->iters, sizeof(double));
    for (int i = 0; i <= a->iters; i++) cudaCheck(cudaEventCreate(&ev[i]));
    cudaCheck(cudaEventRecord(ev[0], st));
    for (int i = 0; i < a->iters; i++) {
        run_impl(impl, p, blas, st);
        cudaCheck(cudaEventRecord(ev[i + 1], st));
    }
    cudaCheck(cudaEventSynchronize(ev[a->iters]));
    for (int i = 0; i < a->iters; i++) {
        float ms = 0;
        cudaCheck(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
        t[i] = ms;
    }
    for (int i = 0; i <= a->iters; i++) cudaCheck(cudaEventDestroy(ev[i]));
    const double med = bench_median(t, a->iters);
    free(ev), free(t);
    return med;
}

static void report_watchdog(void *arg) {
    (void)arg;
    char msg[256];
    if (gemm_sm90_watchdog_report(msg, sizeof msg)) fprintf(stderr, "%s\n", msg);
}

/* One case: the implementations timed, then compared with cuBLAS. Returns 1 if every mok output passes. */
static int run_case(Shape s, const GemmArgs *a, unsigned long long seed, cublasHandle_t blas, cudaStream_t st) {
    const long nA = (long)s.G * s.M * s.K, nB = (long)s.G * s.K * s.N, nC = (long)s.G * s.M * s.N;
    int run[IMPL_COUNT], nrun = 0;
    for (int impl = 0; impl < IMPL_COUNT; impl++) {
        run[impl] = impl == IMPL_CUBLAS || mok_impls[impl].max_m == 0 || s.M <= mok_impls[impl].max_m;
        nrun += run[impl];
    }
    size_t free_b = 0, total_b = 0;
    cudaCheck(cudaMemGetInfo(&free_b, &total_b));
    const double need = 2.0 * (nA + nB + (double)nrun * nC);
    if (need > (double)free_b)
        mokc_die(MOKC_EXIT_USAGE, "lower --m, --n, --k or --groups",
                 "bench gemm: %d x (%d x %d x %d) needs %.1f GiB of GPU memory, %.1f GiB are free", s.G, s.M, s.N,
                 s.K, need / (1 << 30), (double)free_b / (1 << 30));
    printf("bench gemm: %d x (%d x %d x %d) bf16, B (K, N) row-major\n", s.G, s.M, s.N, s.K);
    Problem p = {.s = s, .A = dev_alloc(nA), .B = dev_alloc(nB)};
    for (int impl = 0; impl < IMPL_COUNT; impl++) p.C[impl] = run[impl] ? dev_alloc(nC) : NULL;
    gpu_moe_fill_bf16(p.A, nA, seed, 0, 1.0f, 0.0f, st);
    gpu_moe_fill_bf16(p.B, nB, seed + 1, 0, 1.0f, 0.0f, st);
    for (int impl = 0; impl < IMPL_CUBLAS; impl++) /* NaN: unwritten elements show */
        if (run[impl]) cudaCheck(cudaMemsetAsync(p.C[impl], 0xff, (size_t)nC * 2, st));
    double ms[IMPL_COUNT] = {0}, err[IMPL_COUNT] = {0};
    long nan[IMPL_COUNT] = {0};
    for (int impl = 0; impl < IMPL_COUNT; impl++)
        if (run[impl]) ms[impl] = time_impl(impl, &p, a, blas, st);
    for (int impl = 0; impl < IMPL_CUBLAS; impl++)
        if (run[impl]) err[impl] = bench_rel_err_bf16(p.C[impl], p.C[IMPL_CUBLAS], nC, &nan[impl]);
    const double flop = 2.0 * s.G * s.M * (double)s.N * s.K;
    for (int impl = 0; impl < IMPL_COUNT; impl++) {
        if (!run[impl]) continue;
        char e[32] = "null"; /* cuBLAS is the reference */
        if (impl != IMPL_CUBLAS) snprintf(e, sizeof e, "%.3e", err[impl]);
        if (impl != IMPL_CUBLAS && isnan(err[impl])) snprintf(e, sizeof e, "\"nan\""); /* JSON has no NaN */
        bench_emit("{\"bench\": \"gemm\", \"impl\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, \"groups\": %d, "
                   "\"iters\": %d, \"ms\": %.4f, \"tflops\": %.1f, \"rel_err\": %s}",
                   impl_name(impl), s.M, s.N, s.K, s.G, a->iters, ms[impl], flop / (ms[impl] * 1e9), e);
    }
    int ok = 1;
    for (int impl = 0; impl < IMPL_CUBLAS; impl++) {
        if (!run[impl]) continue;
        const int good = err[impl] < TOLERANCE; /* false for NaN */
        ok &= good;
        printf("%s vs cublas: rel err %.2e, %.1f%% of cuBLAS's speed: %s (tolerance %g)", impl_name(impl), err[impl],
               100.0 * ms[IMPL_CUBLAS] / ms[impl], good ? "ok" : "FAIL", TOLERANCE);
        if (nan[impl]) printf(", %ld elements never written (still NaN)", nan[impl]);
        printf("\n");
    }
    printf("\n");
    fflush(stdout);
    cudaCheck(cudaFree(p.A)), cudaCheck(cudaFree(p.B));
    for (int impl = 0; impl < IMPL_COUNT; impl++)
        if (p.C[impl]) cudaCheck(cudaFree(p.C[impl]));
    return ok;
}

int cmd_bench_gemm(int argc, char **argv) {
    GemmArgs a;
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) return rc;
    if (gpu_device_count() == 0)
        mokc_die(MOKC_EXIT_RUNTIME, "run the benchmark on a machine with NVIDIA GPUs", "bench gemm: no GPU found");
    const int dev = gpu_select_device(0);
    char gpu[256];
    gpu_describe(dev, gpu, sizeof gpu);
    if (!mok_sm90_available())
        mokc_die(MOKC_EXIT_RUNTIME, "run it on an H100/H200 with a build for sm_90a (make ARCH=sm_90a)",
                 "bench gemm: the mok tile is wgmma + TMA code for SM 9.0 (Hopper) built for sm_90a; this is "
                 "%s with a build for sm_%da",
                 gpu, MOKC_BUILD_CC);
    printf("bench gemm | %s\n", gpu);

    cudaStream_t st;
    cudaCheck(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cublasHandle_t blas;
    cublasCheck(cublasCreate(&blas));
    cublasCheck(cublasSetStream(blas, st));
    mokc_gpu_set_failure_report(report_watchdog, NULL);
    const Shape acceptance[2] = {{8192, 8192, 8192, 1}, {1024, 1536, 2048, 64}};
    const Shape *cases = a.given ? &a.one : acceptance;
    const int n_cases = a.given ? 1 : 2;
    int ok = 1;
    for (int c = 0; c < n_cases; c++) ok &= run_case(cases[c], &a, (unsigned long long)a.seed * 16 + 2 * c, blas, st);
    mokc_gpu_set_failure_report(NULL, NULL);
    cublasCheck(cublasDestroy(blas));
    cudaCheck(cudaStreamDestroy(st));
    return ok ? 0 : MOKC_EXIT_RUNTIME;
}
