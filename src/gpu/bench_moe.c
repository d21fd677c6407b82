/*
 * `mokc bench moe` (usage and method in bench_moe.h): MPI + NCCL setup, one MoE layer per rank
 * with random device-side weights, CUDA-event timing, and the EP consistency check.
 */
#include "gpu/bench_moe.h"

#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/cast.h"
#include "../../kernels/moe_fill.h"
#include "common.h"
#include "config.h"
#include "cpu/moe.h"
#include "dist.h"
#include "gpu/bench_util.h"
#include "gpu/check.h"
#include "gpu/comms.h"
#include "gpu/device.h"
#include "gpu/moe_mok.h"
#include "gpu/moe_unfused.h"

static const char *bench_help =
    "usage: mokc bench moe --config SPEC.json [--impl unfused|mok|all] [--tokens N] [--iters 20]\n"
    "                      [--warmup 5] [--ep N] [--seed S] [--comm-blocks N] [--accumulate] [--collapse]\n"
    "                      [--set key.path=value ...]\n"
    "       mokc bench moe --check --config SPEC.json [--impl unfused|mok|all] [--tokens N] [--skew | --collapse]\n"
    "                      [--set ...]\n"
    "\n"
    "Times one MoE layer (the model and moe sections of SPEC.json) on every rank's GPU: forward and\n"
    "forward + backward, median of --iters after --warmup, the slowest rank per iteration. Prints a\n"
    "JSON line per implementation and a table. Run under mpirun with one rank per GPU; EP = all\n"
    "ranks unless --ep. Tokens per GPU: train.micro_batch * train.seq_len unless --tokens. Timed\n"
    "layers get their input in bf16, as training's norm writes it.\n"
    "--check compares the layer at EP = world with a single-rank run of the same global problem\n"
    "(--skew: every token's first pick is expert 0) and exits non-zero on a mismatch; with mok (or all)\n"
    "it also compares the megakernel's forward (y, top-k, aux loss) and, with the wgmma tile, its\n"
    "backward (dx, every gradient; a second run, replayed from a CUDA graph, bitwise equal) at\n"
    "EP = world with that run. When\n"
    "the global forward is at most 20 GFLOP, rank 0 also runs the CPU reference (float) of it and holds\n"
    "y of every implementation to it (rel err < 1e-2) and the top-k picks equal.\n"
    "mok times the forward, forward + backward (wgmma tile) and the dispatch alone (GB/s per GPU,\n"
    "rows pulled including this rank's own), forward and forward + backward also replayed from CUDA\n"
    "graphs, alternating with the eager calls (fwd_graph_ms, fwdbwd_graph_ms), and reports the share\n"
    "of its GEMM rows that pad the experts' rows to whole M tiles (pad_share); --comm-blocks: its\n"
    "dispatch blocks. Timed backwards write the routed experts' gradients, as the first micro-batch of\n"
    "a training step does; with --accumulate they add into them, as its later micro-batches do.\n"
    "--collapse: every token picks the same k experts (E/k apart, so spread evenly over the EP ranks), as\n"
    "a router that has collapsed does (mokc-small's early steps on byte-level data: load max/mean E/k).\n"
    "--set overrides a spec key as in `mokc train` (e.g. --set moe.moe_intermediate_size=128).\n"
    "example: mpirun -np 2 ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json\n";

typedef struct {
    const char *config;
    const char *impl;
    int tokens, iters, warmup, ep, check, skew, collapse, comm_blocks, accumulate;
    unsigned long long seed;
    const char *sets[64]; /* --set key.path=value overrides of the spec */
    int n_sets;
} BenchArgs;

static int usage(const char *fmt, const char *arg) {
    if (dist_launcher_rank() == 0) {
        fprintf(stderr, "mokc: error: ");
        fprintf(stderr, fmt, arg);
        fprintf(stderr, "\n\n%s", bench_help);
    }
    return dist_pre_init_exit(MOKC_EXIT_USAGE);
}

static int parse_int(const char *s, int lo, int *out) {
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (!s[0] || *end || v < lo || v > 1 << 30) return 0;
    *out = (int)v;
    return 1;
}

/* Returns -1 when the arguments are fine, else the exit code. */
static int parse_args(int argc, char **argv, BenchArgs *a) {
    memset(a, 0, sizeof *a);
    a->impl = "all";
    a->iters = 20;
    a->warmup = 5;
    int seed = 1234;
    /* the options with an integer value (as bench gemm's); --set, --config and --impl take text */
    const struct {
        const char *name;
        int *dst, min;
    } ints[] = {{"--tokens", &a->tokens, 1},           {"--iters", &a->iters, 1}, {"--warmup", &a->warmup, 0},
                {"--comm-blocks", &a->comm_blocks, 1}, {"--ep", &a->ep, 1},       {"--seed", &seed, 0}};
    const int n_ints = (int)(sizeof ints / sizeof ints[0]);
    for (int i = 2; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            if (dist_launcher_rank() == 0) fputs(bench_help, stdout);
            return 0;
        }
        int *flag = !strcmp(o, "--check")        ? &a->check
                    : !strcmp(o, "--skew")       ? &a->skew
                    : !strcmp(o, "--collapse")   ? &a->collapse
                    : !strcmp(o, "--accumulate") ? &a->accumulate
                                                 : NULL;
        if (flag) {
            *flag = 1;
            continue;
        }
        int k = 0;
        while (k < n_ints && strcmp(o, ints[k].name)) k++;
        const int text = !strcmp(o, "--set") || !strcmp(o, "--config") || !strcmp(o, "--impl");
        if (k == n_ints && !text) return usage("unknown option '%s' for `mokc bench moe`", o);
        if (!v) return usage("option '%s' needs a value", o);
        i++;
        if (k < n_ints) {
            if (!parse_int(v, ints[k].min, ints[k].dst)) {
                char fmt[80];
                snprintf(fmt, sizeof fmt, "%s needs %s, not '%%s'", o,
                         ints[k].min > 0 ? "a positive integer" : "an integer >= 0");
                return usage(fmt, v);
            }
        } else if (!strcmp(o, "--set")) {
            if (a->n_sets == 64) return usage("%s", "at most 64 --set options");
            a->sets[a->n_sets++] = v;
        } else if (!strcmp(o, "--config")) {
            a->config = v;
        } else { /* --impl */
            a->impl = v;
            if (strcmp(v, "unfused") && strcmp(v, "mok") && strcmp(v, "all"))
                return usage("--impl must be unfused, mok or all, not '%s'", v);
        }
    }
    a->seed = (unsigned long long)seed;
    if (!a->config) return usage("%s", "--config SPEC.json is required");
    if (a->skew && !a->check) return usage("%s", "--skew is a routing of --check (a timed layer takes --collapse)");
    if (a->skew && a->collapse) return usage("%s", "--skew and --collapse are two routings: give one");
    return -1;
}

/* ------------------------------------------------------------------------------------------------
 * One layer's device state on this rank
 * ---------------------------------------------------------------------------------------------- */

enum { T_ROUTER, T_GATE, T_UP, T_DOWN, T_SGATE, T_SUP, T_SDOWN, T_COUNT };
static const char *tensor_names[T_COUNT] = {"router", "w_gate", "w_up", "w_down", "shared_gate", "shared_up",
                                            "shared_down"};

typedef struct {
    MoeGpuDims d;
    int N;
    long n[T_COUNT];      /* elements of each weight on this rank */
    void *w[T_COUNT];     /* router fp32, the rest bf16 */
    float *g[T_COUNT];    /* fp32 gradients */
    float *dy, *y, *dx, *bias;
    bf16_t *x; /* the layer's input, bf16 as training's norm writes it */
    MoeUnfusedActs a;
    MoeUnfusedWork work;
    size_t weight_bytes;
} Layer;

/* How the bench steers the router's picks, through the routing bias: not at all, every token's first pick
 * expert 0 (--skew), or every token's k picks the same k experts E/k apart (--collapse). */
enum { ROUTE_SCORED, ROUTE_SKEW, ROUTE_COLLAPSE };
static int routing_of(const BenchArgs *a) {
    return a->skew ? ROUTE_SKEW : a->collapse ? ROUTE_COLLAPSE : ROUTE_SCORED;
}

/* Fills the layer's tensors as slices of the global problem: this rank's tokens start at global
 * token tok0, its experts at global expert e0. quant: quantise the router and x (the check). */
static void layer_create(Layer *L, const MoeGpuDims *d, int N, const MoeGpuComms *comms, long tok0, long e0,
                         float dy_scale, int routing, int quant, unsigned long long seed, cudaStream_t s) {
    memset(L, 0, sizeof *L);
    L->d = *d;
    L->N = N;
    const long C = d->C, E = d->E, I = d->I, El = d->E / d->ep, SI = (long)d->n_shared * d->I;
    L->n[T_ROUTER] = C * E;
    L->n[T_GATE] = L->n[T_UP] = El * C * I;
    L->n[T_DOWN] = El * I * C;
    L->n[T_SGATE] = L->n[T_SUP] = C * SI;
    L->n[T_SDOWN] = SI * C;
    const long woff[T_COUNT] = {0, e0 * C * I, e0 * C * I, e0 * I * C, 0, 0, 0};
    const float wscale[T_COUNT] = {(quant ? 3.0f : 1.0f) / sqrtf((float)C), 1.0f / sqrtf((float)C),
                                   1.0f / sqrtf((float)C), 1.0f / sqrtf((float)I), 1.0f / sqrtf((float)C),
                                   1.0f / sqrtf((float)C), 1.0f / sqrtf((float)(SI > 0 ? SI : 1))};
    for (int t = 0; t < T_COUNT; t++) {
        const size_t es = t == T_ROUTER ? sizeof(float) : sizeof(bf16_t);
        cudaCheck(cudaMalloc(&L->w[t], (size_t)L->n[t] * es + 16));
        cudaCheck(cudaMalloc((void **)&L->g[t], (size_t)L->n[t] * sizeof(float) + 16));
        cudaCheck(cudaMemsetAsync(L->g[t], 0, (size_t)L->n[t] * sizeof(float), s));
        L->weight_bytes += (size_t)L->n[t] * (es + sizeof(float));
        if (t == T_ROUTER)
            gpu_moe_fill_f32(L->w[t], L->n[t], seed * 16 + (unsigned)t, woff[t], wscale[t], quant ? 1.0f / 256 : 0.0f, s);
        else
            gpu_moe_fill_bf16(L->w[t], L->n[t], seed * 16 + (unsigned)t, woff[t], wscale[t], 0.0f, s);
    }
    const size_t nx = (size_t)N * C;
    cudaCheck(cudaMalloc((void **)&L->x, nx * sizeof(bf16_t) + 16));
    cudaCheck(cudaMalloc((void **)&L->dy, nx * sizeof(float) + 16));
    cudaCheck(cudaMalloc((void **)&L->y, nx * sizeof(float) + 16));
    cudaCheck(cudaMalloc((void **)&L->dx, nx * sizeof(float) + 16));
    gpu_moe_fill_f32(L->y, (long)nx, seed * 16 + 8, tok0 * C, 1.0f, quant ? 1.0f / 16 : 0.0f, s); /* y: scratch */
    gpu_cast_f32_to_bf16(L->x, L->y, (long)nx, s); /* exact where quantised (steps of 1/16 below 16) */
    gpu_moe_fill_f32(L->dy, (long)nx, seed * 16 + 9, tok0 * C, dy_scale, 0.0f, s);
    float *h_bias = NULL;
    if (routing != ROUTE_SCORED) {
        h_bias = callocCheck((size_t)E, sizeof(float));
        if (routing == ROUTE_SKEW) h_bias[0] = 100.0f; /* every token's first pick: expert 0 */
        else
            for (int j = 0; j < d->k; j++) h_bias[(long)j * E / d->k] = 100.0f;
        cudaCheck(cudaMalloc((void **)&L->bias, (size_t)E * sizeof(float)));
        cudaCheck(cudaMemcpyAsync(L->bias, h_bias, (size_t)E * sizeof(float), cudaMemcpyHostToDevice, s));
    }
    moe_unfused_acts_create(&L->a, d, N);
    moe_unfused_work_create(&L->work, d, N, comms);
    cudaCheck(cudaStreamSynchronize(s));
    free(h_bias); /* after the copy that reads it */
}

static void layer_destroy(Layer *L) {
    for (int t = 0; t < T_COUNT; t++) {
        cudaCheck(cudaFree(L->w[t]));
        cudaCheck(cudaFree(L->g[t]));
    }
    cudaCheck(cudaFree(L->x));
    cudaCheck(cudaFree(L->dy));
    cudaCheck(cudaFree(L->y));
    cudaCheck(cudaFree(L->dx));
    if (L->bias) cudaCheck(cudaFree(L->bias));
    moe_unfused_acts_destroy(&L->a);
    moe_unfused_work_destroy(&L->work);
    memset(L, 0, sizeof *L);
}

static MoeGpuWeights layer_weights(const Layer *L) {
    const int S = L->d.n_shared > 0;
    MoeGpuWeights w = {.router = L->w[T_ROUTER], .w_gate = L->w[T_GATE], .w_up = L->w[T_UP],
                       .w_down = L->w[T_DOWN], .shared_gate = S ? L->w[T_SGATE] : NULL,
                       .shared_up = S ? L->w[T_SUP] : NULL, .shared_down = S ? L->w[T_SDOWN] : NULL};
    return w;
}

static void layer_forward(Layer *L, cudaStream_t s) {
    MoeGpuWeights w = layer_weights(L);
    moe_unfused_forward(L->y, NULL, &L->a, &L->work, L->x, &w, L->bias, L->N, s);
}

/* overwrite: the routed experts' gradients written, as in the first (or only) micro-batch of a
 * training step, else added into (MoeGpuGrads.overwrite_experts). */
static void layer_backward(Layer *L, double daux, int overwrite, cudaStream_t s) {
    MoeGpuWeights w = layer_weights(L);
    MoeGpuGrads g = {L->g[T_ROUTER], L->g[T_GATE], L->g[T_UP], L->g[T_DOWN], L->g[T_SGATE], L->g[T_SUP],
                     L->g[T_SDOWN], overwrite, NULL, 0};
    moe_unfused_backward(L->dx, &g, L->dy, daux, &L->a, &L->work, L->x, &w, L->N, s);
}

/* ------------------------------------------------------------------------------------------------
 * Timing
 * ---------------------------------------------------------------------------------------------- */

/* Median over iterations of the per-iteration max over ranks. Sorts t. */
static double median_of_max(double *t, int n) {
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, t, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    return bench_median(t, n);
}

static void time_layer(Layer *L, const BenchArgs *args, double daux, cudaStream_t s, double *fwd_ms,
                       double *fwdbwd_ms) {
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    for (int it = 0; it < args->warmup; it++) {
        layer_forward(L, s);
        layer_backward(L, daux, !args->accumulate, s);
    }
    cudaCheck(cudaStreamSynchronize(s));
    double *tf = callocCheck((size_t)args->iters, sizeof(double)), *tb = callocCheck((size_t)args->iters, sizeof(double));
    for (int it = 0; it < args->iters; it++) {
        mpiCheck(MPI_Barrier(MPI_COMM_WORLD));
        cudaCheck(cudaEventRecord(e0, s));
        layer_forward(L, s);
        cudaCheck(cudaEventRecord(e1, s));
        cudaCheck(cudaEventSynchronize(e1));
        float ms = 0;
        cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
        tf[it] = ms;
    }
    for (int it = 0; it < args->iters; it++) {
        mpiCheck(MPI_Barrier(MPI_COMM_WORLD));
        cudaCheck(cudaEventRecord(e0, s));
        layer_forward(L, s);
        layer_backward(L, daux, !args->accumulate, s);
        cudaCheck(cudaEventRecord(e1, s));
        cudaCheck(cudaEventSynchronize(e1));
        float ms = 0;
        cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
        tb[it] = ms;
    }
    *fwd_ms = median_of_max(tf, args->iters);
    *fwdbwd_ms = median_of_max(tb, args->iters);
    free(tf);
    free(tb);
    cudaCheck(cudaEventDestroy(e0));
    cudaCheck(cudaEventDestroy(e1));
}

/* What time_mok times, each iteration between two events: the forward as training runs it (its
 * state kept in a MoeMokSaved; a forward-only call stores less), the dispatch alone, forward +
 * backward, and the forward and forward + backward replayed from CUDA graphs (the same calls
 * captured once: no host launches inside the step). */
enum { MOK_T_FWD, MOK_T_DISPATCH, MOK_T_FWDBWD, MOK_T_FWD_GRAPH, MOK_T_FWDBWD_GRAPH, MOK_T_COUNT };

typedef struct {
    Layer *L;
    MoeMok *m;
    MoeMokSaved *sv;
    MoeGpuWeights w;
    MoeGpuGrads g;
    double daux;
    cudaStream_t s;
} MokStep;

static void mok_step(const MokStep *t, int backward) {
    Layer *L = t->L;
    moe_mok_forward(L->y, NULL, t->m, t->sv, L->x, &t->w, L->bias, L->N, t->s);
    if (backward) moe_mok_backward(L->dx, &t->g, L->dy, t->daux, t->sv, t->m, L->x, &t->w, L->N, t->s);
}

/* Ends the capture begun on s (global mode: any call that cannot be captured fails it) and
 * returns what it captured, ready to launch. */
static cudaGraphExec_t capture_end(cudaStream_t s) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    cudaCheck(cudaStreamEndCapture(s, &graph));
    cudaCheck(cudaGraphInstantiate(&exec, graph, 0));
    cudaCheck(cudaGraphDestroy(graph));
    return exec;
}

static cudaGraphExec_t mok_capture(const MokStep *t, int backward) {
    cudaCheck(cudaStreamBeginCapture(t->s, cudaStreamCaptureModeGlobal));
    mok_step(t, backward);
    return capture_end(t->s);
}

/* ms[MOK_T_*]: the median over iterations of the slowest rank's time; -1 for the backward's where
 * there is none (the mma.sync tiles). Then, apart from the timed runs (the marks synchronise), the
 * mean ms of each phase (moe_mok.h), the slowest rank's, into phase_ms (zeros where there is no
 * backward). */
static void time_mok(Layer *L, MoeMok *m, const BenchArgs *args, double daux, cudaStream_t s, double ms[MOK_T_COUNT],
                     long *rows, long *rows_computed, double *phase_ms) {
    const int S = L->d.n_shared > 0, with_bwd = m->tile == MOK_TILE_WGMMA;
    MoeMokSaved sv;
    moe_mok_saved_create(&sv, &L->d, L->N, 0);
    const MokStep t = {L, m, &sv, layer_weights(L),
                       (MoeGpuGrads){L->g[T_ROUTER], L->g[T_GATE], L->g[T_UP], L->g[T_DOWN],
                                     S ? L->g[T_SGATE] : NULL, S ? L->g[T_SUP] : NULL, S ? L->g[T_SDOWN] : NULL,
                                     !args->accumulate, NULL, 0},
                       daux, s};
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    moe_mok_forward(L->y, NULL, m, NULL, L->x, &t.w, L->bias, L->N, s);
    moe_mok_sync(m, s); /* a watchdog record surfaces here */
    double *tm[MOK_T_COUNT];
    for (int i = 0; i < MOK_T_COUNT; i++) tm[i] = callocCheck((size_t)args->iters, sizeof(double));
    /* A graph's replays alternate with the eager calls, each going first in turn: the GPU's clocks
     * under its power limit depend on what ran before, so both see the same history. */
    for (int pass = MOK_T_FWD; pass <= MOK_T_FWDBWD; pass++) {
        const int backward = pass == MOK_T_FWDBWD;
        if (backward && !with_bwd) continue;
        if (backward) { /* the backward's first call sets kernel attributes and cuBLAS up: not while capturing */
            mok_step(&t, 1);
            moe_mok_sync(m, s);
        }
        cudaGraphExec_t graph = pass == MOK_T_DISPATCH ? NULL : mok_capture(&t, backward);
        for (int it = -args->warmup; it < args->iters; it++) {
            for (int j = 0; j < (graph ? 2 : 1); j++) {
                const int replay = graph && ((it + j) & 1);
                mpiCheck(MPI_Barrier(MPI_COMM_WORLD));
                cudaCheck(cudaEventRecord(e0, s));
                if (pass == MOK_T_DISPATCH) moe_mok_dispatch_only(m, s);
                else if (replay) cudaCheck(cudaGraphLaunch(graph, s));
                else mok_step(&t, backward);
                cudaCheck(cudaEventRecord(e1, s));
                moe_mok_sync(m, s);
                float e = 0;
                cudaCheck(cudaEventElapsedTime(&e, e0, e1));
                if (it >= 0) tm[replay ? (backward ? MOK_T_FWDBWD_GRAPH : MOK_T_FWD_GRAPH) : pass][it] = e;
            }
        }
        if (graph) cudaCheck(cudaGraphExecDestroy(graph));
    }
    for (int i = 0; i < MOK_T_COUNT; i++) {
        const int backward = i == MOK_T_FWDBWD || i == MOK_T_FWDBWD_GRAPH;
        ms[i] = backward && !with_bwd ? -1.0 : median_of_max(tm[i], args->iters);
        free(tm[i]);
    }
    double sum[MOK_PH_COUNT] = {0};
    int calls[2] = {0, 0};
    if (with_bwd) {
        moe_mok_set_phases(m, 1);
        for (int it = 0; it < args->iters; it++) {
            mpiCheck(MPI_Barrier(MPI_COMM_WORLD));
            mok_step(&t, 1);
            moe_mok_phases_collect(m, sum, calls);
        }
        moe_mok_set_phases(m, 0);
        moe_mok_trace_print(m, s);
    }
    for (int i = 0; i < MOK_PH_COUNT; i++) {
        const int n = calls[i < MOK_FWD_MARKS - 1 ? 0 : 1];
        if (n > 0) sum[i] /= n;
    }
    mpiCheck(MPI_Allreduce(sum, phase_ms, MOK_PH_COUNT, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    moe_mok_rows(m, s, rows, rows_computed);
    moe_mok_saved_destroy(&sv);
    cudaCheck(cudaEventDestroy(e0));
    cudaCheck(cudaEventDestroy(e1));
}

/* ------------------------------------------------------------------------------------------------
 * The EP consistency check
 * ---------------------------------------------------------------------------------------------- */

static float *fetch(const void *dev, long n) {
    float *h = mallocCheck((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (n > 0) cudaCheck(cudaMemcpy(h, dev, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

/* ||a * scale - b|| / ||b|| in double. */
static double rel_err(const float *a, double scale, const float *b, long n) {
    double num = 0, den = 0;
    for (long i = 0; i < n; i++) {
        const double d = (double)a[i] * scale - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* ||sum over ranks of a, * scale - b|| / ||b||: a summed over the world in double. */
static double rel_err_summed(const float *a, double scale, const float *b, long n) {
    double *s = mallocCheck((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (long i = 0; i < n; i++) s[i] = a[i];
    if (n > 0) mpiCheck(MPI_Allreduce(MPI_IN_PLACE, s, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    double num = 0, den = 0;
    for (long i = 0; i < n; i++) {
        const double d = s[i] * scale - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    free(s);
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* The CPU reference runs on one rank's cores (one core, under mpirun's default binding): checks
 * whose forward is larger than this go without it. */
#define CPU_REF_MAX_GFLOP 20.0

/* A bf16 device tensor as host floats (exact). */
static float *fetch_bf16(const void *dev, long n, cudaStream_t s) {
    float *tmp;
    cudaCheck(cudaMalloc((void **)&tmp, (size_t)(n > 0 ? n : 1) * sizeof(float)));
    gpu_cast_bf16_to_f32(tmp, dev, n, s);
    cudaCheck(cudaStreamSynchronize(s));
    float *h = fetch(tmp, n);
    cudaCheck(cudaFree(tmp));
    return h;
}

/* Every rank's n floats in rank order, on rank 0 (NULL elsewhere). n fits an int: the CPU
 * reference's shapes are small. */
static float *gather(const float *a, long n, int rank, int world) {
    float *all = rank == 0 ? mallocCheck((size_t)world * n * sizeof(float)) : NULL;
    mpiCheck(MPI_Gather(a, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD));
    return all;
}

/* The CPU reference's part of the check: rank 0 runs the float forward (src/cpu/moe.c, ep = 1) of
 * the single-rank layer's whole problem from that layer's own tensors (bf16 experts cast back
 * exactly; router and x are quantised, so the router GEMM is exact and the picks must agree) and
 * compares y of each implementation, gathered from the ranks: err[0] unfused on one rank (y_one,
 * tk_one: the whole problem), err[1] unfused at EP = world (y_ep), err[2] mok at EP = world (y_mok,
 * NULL when it did not run), err[3] the top-k picks of y_one's run that differ. On every rank. */
static void cpu_check(double err[4], const Layer *one, const float *y_one, const int *tk_one, const float *y_ep,
                      const float *y_mok, long nx, int rank, int world, cudaStream_t s) {
    float *all_ep = gather(y_ep, nx, rank, world), *all_mok = y_mok ? gather(y_mok, nx, rank, world) : NULL;
    memset(err, 0, 4 * sizeof(double));
    if (rank == 0) {
        const MoeGpuDims *g = &one->d;
        const MoeDims d = {.C = g->C, .E = g->E, .k = g->k, .I = g->I, .n_shared = g->n_shared, .sigmoid = g->sigmoid,
                           .norm_topk = g->norm_topk, .scaling = g->scaling, .ep = 1, .ep_rank = 0, .comm = NULL};
        float *w[T_COUNT];
        for (int t = 0; t < T_COUNT; t++)
            w[t] = t == T_ROUTER ? fetch(one->w[t], one->n[t]) : fetch_bf16(one->w[t], one->n[t], s);
        const int S = g->n_shared > 0;
        const MoeWeights cw = {w[T_ROUTER], w[T_GATE], w[T_UP], w[T_DOWN], S ? w[T_SGATE] : NULL,
                               S ? w[T_SUP] : NULL, S ? w[T_SDOWN] : NULL};
        const long n_all = (long)one->N * g->C, slots = (long)one->N * g->k;
        float *x = fetch_bf16(one->x, n_all, s), *bias = one->bias ? fetch(one->bias, g->E) : NULL;
        float *y = mallocCheck((size_t)n_all * sizeof(float));
        MoeActs a;
        moe_acts_alloc(&a, &d, one->N);
        moe_forward(y, &a, x, &cw, bias, &d, one->N);
        err[0] = rel_err(y_one, 1.0, y, n_all);
        err[1] = rel_err(all_ep, 1.0, y, n_all);
        if (all_mok) err[2] = rel_err(all_mok, 1.0, y, n_all);
        long bad = 0;
        for (long i = 0; i < slots; i++) bad += tk_one[i] != a.topk[i];
        err[3] = (double)bad;
        moe_acts_free(&a);
        for (int t = 0; t < T_COUNT; t++) free(w[t]);
        free(x);
        free(bias);
        free(y);
    }
    mpiCheck(MPI_Bcast(err, 4, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    free(all_ep);
    free(all_mok);
}

/* Whether to run the megakernel (collective over the EP group): where it runs (moe_mok_available);
 * otherwise --impl all goes on without it ("mok: skipped, mok unavailable: ...") and --impl mok
 * stops with that reason. */
static int mok_runs(const BenchArgs *args, const MoeGpuDims *d, const MoeGpuComms *comms, int rank) {
    char why[256];
    if (moe_mok_available(d, comms->ep, 0, why, sizeof why)) return 1;
    if (!strcmp(args->impl, "mok"))
        mokc_die(MOKC_EXIT_USAGE, "run --impl unfused (or all) here, or keep the EP group in one NVLink domain",
                 "bench moe --impl mok: mok unavailable: %s", why);
    if (rank == 0) printf("mok: skipped, mok unavailable: %s\n", why);
    return 0;
}

/* This rank's dx (N tokens) and weight gradients (device, shaped like ep's) against the single-rank
 * run: e_dx, and e_g[t] per tensor (expert tensors: this owner's slice; the rest summed over
 * ranks). The EP run's loss is the single rank's over world, hence the 1 / world. */
static void grad_errors(double *e_dx, double *e_g, const Layer *one, const Layer *ep, const float *dx_dev,
                        float *const *g_dev, int rank, int world) {
    const long nx = (long)ep->N * ep->d.C;
    float *dx1 = fetch(one->dx, (long)world * nx), *dx2 = fetch(dx_dev, nx);
    *e_dx = rel_err(dx2, 1.0 / world, dx1 + (long)rank * nx, nx);
    free(dx1);
    free(dx2);
    for (int t = 0; t < T_COUNT; t++) {
        float *g1 = fetch(one->g[t], one->n[t]), *g2 = fetch(g_dev[t], ep->n[t]);
        if (t == T_GATE || t == T_UP || t == T_DOWN)
            e_g[t] = rel_err(g2, 1.0 / world, g1 + (long)ep->d.ep_rank * ep->n[t], ep->n[t]);
        else
            e_g[t] = rel_err_summed(g2, 1.0 / world, g1, ep->n[t]);
        free(g1);
        free(g2);
    }
}

/* The megakernel's backward at EP = world (after a forward that keeps its state), twice from zeroed
 * gradients, the second time forward and backward replayed from a CUDA graph: err[0] dx, err[1 + t]
 * each gradient against the single-rank run; 1e30 where the two runs differ in any bit. */
static void mok_backward_errors(double *err, MoeMok *m, const Layer *one, const Layer *ep, double daux, int rank,
                                int world, cudaStream_t s) {
    MoeGpuWeights w = layer_weights(ep);
    MoeMokSaved sv;
    moe_mok_saved_create(&sv, &ep->d, ep->N, 0);
    const long nx = (long)ep->N * ep->d.C;
    float *y, *dx[2], *g[2][T_COUNT];
    cudaCheck(cudaMalloc((void **)&y, (size_t)nx * sizeof(float) + 16));
    for (int r = 0; r < 2; r++) {
        cudaCheck(cudaMalloc((void **)&dx[r], (size_t)nx * sizeof(float) + 16));
        for (int t = 0; t < T_COUNT; t++) {
            cudaCheck(cudaMalloc((void **)&g[r][t], (size_t)ep->n[t] * sizeof(float) + 16));
            cudaCheck(cudaMemsetAsync(g[r][t], 0, (size_t)ep->n[t] * sizeof(float), s));
        }
        const int S = ep->d.n_shared > 0;
        MoeGpuGrads gg = {g[r][T_ROUTER], g[r][T_GATE], g[r][T_UP], g[r][T_DOWN], S ? g[r][T_SGATE] : NULL,
                          S ? g[r][T_SUP] : NULL, S ? g[r][T_SDOWN] : NULL, 0, NULL, 0};
        if (r == 1) cudaCheck(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        moe_mok_forward(y, NULL, m, &sv, ep->x, &w, ep->bias, ep->N, s);
        moe_mok_backward(dx[r], &gg, ep->dy, daux, &sv, m, ep->x, &w, ep->N, s);
        cudaGraphExec_t graph = r == 1 ? capture_end(s) : NULL;
        if (graph) cudaCheck(cudaGraphLaunch(graph, s));
        moe_mok_sync(m, s);
        if (graph) cudaCheck(cudaGraphExecDestroy(graph));
    }
    grad_errors(&err[0], &err[1], one, ep, dx[0], g[0], rank, world);
    float *a = fetch(dx[0], nx), *b = fetch(dx[1], nx);
    if (memcmp(a, b, (size_t)nx * sizeof(float))) err[0] = 1e30;
    free(a);
    free(b);
    for (int t = 0; t < T_COUNT; t++) {
        a = fetch(g[0][t], ep->n[t]);
        b = fetch(g[1][t], ep->n[t]);
        if (memcmp(a, b, (size_t)ep->n[t] * sizeof(float))) err[1 + t] = 1e30;
        free(a);
        free(b);
    }
    for (int r = 0; r < 2; r++) {
        cudaCheck(cudaFree(dx[r]));
        for (int t = 0; t < T_COUNT; t++) cudaCheck(cudaFree(g[r][t]));
    }
    cudaCheck(cudaFree(y));
    moe_mok_saved_destroy(&sv);
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, err, 1 + T_COUNT, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
}

static int run_check(const BenchArgs *args, const MoeGpuDims *d_ep, int N, const Dist *dist, const GpuComms *gc,
                     cudaStream_t s) {
    const double tol = 1e-3, daux = 0.01;
    const int world = dist->world, rank = dist->rank, C = d_ep->C, k = d_ep->k, El = d_ep->E / d_ep->ep;
    if (d_ep->ep != world)
        mokc_die(MOKC_EXIT_USAGE, "run --check with one EP group: leave out --ep or set it to the number of ranks",
                 "bench moe --check: ep = %d but %d ranks", d_ep->ep, world);
    /* the single-rank run of the whole problem */
    MoeGpuDims d1 = *d_ep;
    d1.ep = 1;
    d1.ep_rank = 0;
    Layer one, ep;
    layer_create(&one, &d1, world * N, NULL, 0, 0, 1.0f, routing_of(args), 1, args->seed, s);
    layer_forward(&one, s);
    layer_backward(&one, daux, 1, s);
    cudaCheck(cudaStreamSynchronize(s));
    /* this rank's share with EP = world */
    MoeGpuComms comms = {.ep = gc->ep, .stats = gc->world};
    layer_create(&ep, d_ep, N, &comms, (long)rank * N, (long)d_ep->ep_rank * El, (float)world, routing_of(args), 1,
                 args->seed, s);
    layer_forward(&ep, s);
    layer_backward(&ep, daux, 1, s);
    cudaCheck(cudaStreamSynchronize(s));

    const long nx = (long)N * C, off = (long)rank * nx;
    double err[4 + T_COUNT];
    const char *what[4 + T_COUNT] = {"y", "dx", "aux loss", "top-k picks that differ"};
    float *y1 = fetch(one.y, (long)world * nx), *y2 = fetch(ep.y, nx);
    err[0] = rel_err(y2, 1.0, y1 + off, nx);
    grad_errors(&err[1], &err[4], &one, &ep, ep.dx, ep.g, rank, world);
    err[2] = fabs(ep.a.aux_loss - one.a.aux_loss) / (fabs(one.a.aux_loss) > 0 ? fabs(one.a.aux_loss) : 1.0);
    int *tk1 = mallocCheck((size_t)world * N * k * sizeof(int)), *tk2 = mallocCheck((size_t)N * k * sizeof(int));
    cudaCheck(cudaMemcpy(tk1, one.a.topk, (size_t)world * N * k * sizeof(int), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(tk2, ep.a.topk, (size_t)N * k * sizeof(int), cudaMemcpyDeviceToHost));
    long bad = 0;
    for (long i = 0; i < (long)N * k; i++) bad += tk2[i] != tk1[(long)rank * N * k + i];
    err[3] = (double)bad;
    for (int t = 0; t < T_COUNT; t++) what[4 + t] = tensor_names[t];
    mpiCheck(MPI_Allreduce(MPI_IN_PLACE, err, 4 + T_COUNT, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    int fail = 0;
    const int with_mok = strcmp(args->impl, "unfused") != 0 && mok_runs(args, d_ep, &comms, rank);
    double mok_err[3] = {0, 0, 0}, mok_bwd[1 + T_COUNT];
    int with_mok_bwd = 0;
    float *y3 = NULL; /* the megakernel's y, this rank's tokens */
    if (with_mok) { /* the megakernel's forward at EP = world against the single-rank unfused run */
        MoeMok m;
        moe_mok_create(&m, d_ep, N, &comms, args->comm_blocks, 1);
        MoeGpuWeights w = layer_weights(&ep);
        float *ym;
        cudaCheck(cudaMalloc((void **)&ym, (size_t)nx * sizeof(float) + 16));
        cudaCheck(cudaMemsetAsync(ym, 0xff, (size_t)nx * sizeof(float), s)); /* before the forward writes it */
        moe_mok_forward(ym, NULL, &m, NULL, ep.x, &w, ep.bias, N, s);
        const double aux = moe_mok_aux_loss(&m, s);
        y3 = fetch(ym, nx);
        long nan = 0;
        for (long i = 0; i < nx; i++) nan += y3[i] != y3[i];
        mok_err[0] = nan ? 1e30 : rel_err(y3, 1.0, y1 + off, nx);
        cudaCheck(cudaMemcpy(tk2, m.st.topk, (size_t)N * k * sizeof(int), cudaMemcpyDeviceToHost));
        long badm = 0;
        for (long i = 0; i < (long)N * k; i++) badm += tk2[i] != tk1[(long)rank * N * k + i];
        mok_err[1] = (double)badm;
        mok_err[2] = fabs(aux - one.a.aux_loss) / (fabs(one.a.aux_loss) > 0 ? fabs(one.a.aux_loss) : 1.0);
        /* a second forward must give the same bits */
        moe_mok_forward(ym, NULL, &m, NULL, ep.x, &w, ep.bias, N, s);
        moe_mok_sync(&m, s);
        float *y4 = fetch(ym, nx);
        if (memcmp(y3, y4, (size_t)nx * sizeof(float))) mok_err[0] = 1e30;
        free(y4);
        cudaCheck(cudaFree(ym));
        mpiCheck(MPI_Allreduce(MPI_IN_PLACE, mok_err, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
        with_mok_bwd = m.tile == MOK_TILE_WGMMA; /* the backward exists for the wgmma tile */
        if (with_mok_bwd) mok_backward_errors(mok_bwd, &m, &one, &ep, daux, rank, world, s);
        moe_mok_destroy(&m);
    }
    const double cpu_gflop =
        2.0 * world * N * ((double)C * d_ep->E + 3.0 * C * d_ep->I * (k + d_ep->n_shared)) / 1e9;
    const int with_cpu = cpu_gflop <= CPU_REF_MAX_GFLOP;
    double cpu_err[4];
    if (with_cpu) cpu_check(cpu_err, &one, y1, tk1, y2, y3, nx, rank, world, s);
    if (rank == 0) printf("ep check: %d ranks x %d tokens, ep = %d%s; max over ranks:\n", world, N, d_ep->ep,
                          args->skew ? ", skewed routing" : args->collapse ? ", collapsed routing" : "");
    for (int i = 0; i < 4 + T_COUNT; i++) {
        if (i >= 4 && ep.n[i - 4] == 0) continue;
        const int ok = i == 3 ? err[i] == 0 : err[i] < tol;
        fail |= !ok;
        if (rank == 0) {
            char label[64];
            snprintf(label, sizeof label, "%s%s", i >= 4 ? "d" : "", what[i]);
            if (i == 3) printf("  %-24s %9.0f  %s\n", label, err[i], ok ? "ok" : "FAIL");
            else printf("  %-24s %9.2e  %s (rel err, tolerance %g)\n", label, err[i], ok ? "ok" : "FAIL", tol);
        }
    }
    if (with_mok) {
        const double mtol = 1e-2;
        const int ok_y = mok_err[0] < mtol, ok_t = mok_err[1] == 0, ok_a = mok_err[2] < tol;
        fail |= !ok_y || !ok_t || !ok_a;
        if (rank == 0) {
            printf("  %-24s %9.2e  %s (rel err vs unfused 1 rank, tolerance %g; 1e30: NaN left or not bitwise "
                   "run to run)\n",
                   "mok y", mok_err[0], ok_y ? "ok" : "FAIL", mtol);
            printf("  %-24s %9.0f  %s\n", "mok top-k picks differ", mok_err[1], ok_t ? "ok" : "FAIL");
            printf("  %-24s %9.2e  %s (rel err, tolerance %g)\n", "mok aux loss", mok_err[2], ok_a ? "ok" : "FAIL",
                   tol);
        }
    }
    if (with_mok_bwd) {
        const double mtol = 1e-2;
        for (int i = 0; i < 1 + T_COUNT; i++) {
            if (i >= 1 && ep.n[i - 1] == 0) continue;
            const int ok = mok_bwd[i] < mtol;
            fail |= !ok;
            if (rank == 0)
                printf("  mok d%-19s %9.2e  %s (rel err vs unfused 1 rank, tolerance %g; 1e30: a CUDA graph's "
                       "replay not bitwise equal to the eager run)\n",
                       i == 0 ? "x" : tensor_names[i - 1], mok_bwd[i], ok ? "ok" : "FAIL", mtol);
        }
    }
    if (with_cpu) {
        const double ctol = 1e-2;
        const char *impl[3] = {"unfused 1 rank y vs cpu", "unfused ep y vs cpu", "mok ep y vs cpu"};
        if (rank == 0)
            printf("  cpu reference (float, 1 rank, %d tokens), rel err of y over all tokens, tolerance %g:\n",
                   world * N, ctol);
        for (int i = 0; i < 3; i++) {
            if (i == 2 && !with_mok) continue;
            const int ok = cpu_err[i] < ctol;
            fail |= !ok;
            if (rank == 0) printf("  %-24s %9.2e  %s\n", impl[i], cpu_err[i], ok ? "ok" : "FAIL");
        }
        fail |= cpu_err[3] != 0;
        if (rank == 0)
            printf("  %-24s %9.0f  %s\n", "top-k differ from cpu", cpu_err[3], cpu_err[3] == 0 ? "ok" : "FAIL");
    } else if (rank == 0) {
        printf("  cpu reference: skipped (a %.1f GFLOP forward; it runs up to %.0f: fewer --tokens or a narrower "
               "--set model.hidden_size / moe.moe_intermediate_size)\n",
               cpu_gflop, CPU_REF_MAX_GFLOP);
    }
    if (rank == 0) printf("ep check: %s\n", fail ? "FAIL" : "PASS");
    free(y1);
    free(y2);
    free(tk1);
    free(tk2);
    free(y3);
    layer_destroy(&one);
    layer_destroy(&ep);
    return fail ? MOKC_EXIT_RUNTIME : 0;
}

/* ------------------------------------------------------------------------------------------------
 * The command
 * ---------------------------------------------------------------------------------------------- */

static const char *shape_name(const char *path, char *buf, size_t len) {
    const char *base = strrchr(path, '/');
    snprintf(buf, len, "%s", base ? base + 1 : path);
    char *dot = strrchr(buf, '.');
    if (dot && !strcmp(dot, ".json")) *dot = 0;
    return buf;
}

int cmd_bench(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "moe") != 0) {
        if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
            fputs(bench_help, stdout);
            return 0;
        }
        return usage("`mokc bench` needs a benchmark: moe, attn or gemm (got '%s')", argc >= 2 ? argv[1] : "nothing");
    }
    BenchArgs args;
    int rc = parse_args(argc, argv, &args);
    if (rc >= 0) return rc;
    ConfigErrors errors;
    MokcConfig cfg;
    if (!config_load(args.config, args.sets, args.n_sets, &cfg, &errors)) {
        if (dist_launcher_rank() == 0) config_errors_print(&errors, args.config, stderr);
        config_errors_free(&errors);
        return dist_pre_init_exit(MOKC_EXIT_USAGE);
    }
    if (cfg.moe.num_experts <= 0) return usage("%s has no MoE layer (moe.num_experts = 0)", args.config);
    setenv("NCCL_NVLS_ENABLE", "0", 0); /* never NVLink multicast on shared machines */

    Dist dist;
    dist_init(&dist, &argc, &argv);
    const int ep = args.ep > 0 ? args.ep : dist.world;
    char msg[512];
    if (!dist_make_groups(&dist, ep, msg, sizeof msg))
        mokc_die(MOKC_EXIT_USAGE, "pass --ep with a divisor of the number of ranks", "%s", msg);
    if (cfg.moe.num_experts % ep != 0)
        mokc_die(MOKC_EXIT_USAGE, "pass --ep with a divisor of moe.num_experts",
                 "ep = %d does not divide moe.num_experts = %d", ep, cfg.moe.num_experts);
    if (gpu_device_count() == 0)
        mokc_die(MOKC_EXIT_RUNTIME, "run the benchmark on a machine with NVIDIA GPUs", "bench moe: no GPU found");
    const int dev = gpu_take_device(&dist, NULL);
    GpuComms gc;
    gpu_comms_init(&gc, &dist);
    cudaStream_t s;
    cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    MoeGpuDims d = {.C = cfg.model.hidden_size, .E = cfg.moe.num_experts, .k = cfg.moe.num_experts_per_tok,
                    .I = cfg.moe.moe_intermediate_size, .n_shared = cfg.moe.n_shared_experts,
                    .sigmoid = cfg.moe.scoring_func == SCORING_SIGMOID, .norm_topk = cfg.moe.norm_topk_prob,
                    .scaling = cfg.moe.routed_scaling_factor, .ep = dist.ep, .ep_rank = dist.ep_rank};
    const int N = args.tokens > 0 ? args.tokens : cfg.train.micro_batch * cfg.train.seq_len;
    moe_gpu_dims_check(&d, N, "bench moe");
    char gpu[256], shape[256];
    gpu_describe(dev, gpu, sizeof gpu);
    shape_name(args.config, shape, sizeof shape);
    if (dist.rank == 0)
        printf("bench moe: %s  E=%d H=%d I=%d k=%d shared=%d %s | %d rank(s), ep %d, %d tokens/GPU | %s\n", shape, d.E,
               d.C, d.I, d.k, d.n_shared, d.sigmoid ? "sigmoid" : "softmax", dist.world, dist.ep, N, gpu);

    if (args.check) {
        rc = run_check(&args, &d, N, &dist, &gc, s);
    } else {
        MoeGpuComms comms = {.ep = gc.ep, .stats = gc.world};
        Layer L;
        layer_create(&L, &d, N, &comms, (long)dist.rank * N, (long)dist.ep_rank * (d.E / d.ep), 1.0f,
                     routing_of(&args), 0, args.seed, s);
        const int do_unfused = strcmp(args.impl, "mok") != 0, do_mok = strcmp(args.impl, "unfused") != 0;
        const double acts_mib = moe_unfused_acts_bytes(&d, N) / 1048576.0;
        const double work_mib = moe_unfused_work_bytes(&d, N) / 1048576.0;
        const int mok_ok = do_mok && mok_runs(&args, &d, &comms, dist.rank);
        const double mok_mib = mok_ok ? (moe_mok_bytes(&d, N, 1) + moe_mok_saved_bytes(&d, N)) / 1048576.0 : 0.0;
        if (dist.rank == 0)
            printf("memory per GPU: weights + fp32 grads %.1f MiB, layer activations %.1f MiB, scratch %.1f MiB, "
                   "mok layer (symmetric window included) %.1f MiB\n",
                   L.weight_bytes / 1048576.0, acts_mib, work_mib, mok_mib);
        const double flops = 2.0 * N * d.k * 3.0 * d.C * d.I;
        double fwd = 0, fb = 0, mt[MOK_T_COUNT] = {0}, gbs = 0;
        double phase_ms[MOK_PH_COUNT] = {0};
        int mok_ran = 0, n_comm = 0;
        if (do_unfused) {
            time_layer(&L, &args, cfg.moe.router_aux_loss_coef, s, &fwd, &fb);
            const double tf_f = flops / (fwd * 1e-3) / 1e12, tf_fb = 3.0 * flops / (fb * 1e-3) / 1e12;
            if (dist.rank == 0)
                bench_emit(
                    "{\"bench\": \"moe\", \"impl\": \"unfused\", \"shape\": \"%s\", \"E\": %d, \"H\": %d, \"I\": %d, "
                    "\"k\": %d, \"shared\": %d, \"ep\": %d, \"world\": %d, \"tokens_per_gpu\": %d, \"iters\": %d, "
                    "\"accumulate\": %d, \"collapse\": %d, \"fwd_ms\": %.4f, \"fwdbwd_ms\": %.4f, "
                    "\"fwd_tflops\": %.2f, \"fwdbwd_tflops\": %.2f, \"acts_mib\": %.1f, \"work_mib\": %.1f}",
                    shape, d.E, d.C, d.I, d.k, d.n_shared, dist.ep, dist.world, N, args.iters, args.accumulate,
                    args.collapse, fwd, fb, tf_f, tf_fb, acts_mib, work_mib);
        }
        if (mok_ok) {
            MoeMok m;
            moe_mok_create(&m, &d, N, &comms, args.comm_blocks, 1);
            n_comm = m.n_comm;
            long rows = 0, computed = 0;
            time_mok(&L, &m, &args, cfg.moe.router_aux_loss_coef, s, mt, &rows, &computed, phase_ms);
            /* per GPU: the bytes this owner pulled (its own rows included), slowest rank's time */
            gbs = (double)rows * d.C * 2.0 / (mt[MOK_T_DISPATCH] * 1e-3) / 1e9;
            double g = gbs;
            mpiCheck(MPI_Allreduce(&g, &gbs, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD));
            /* the share of the GEMM rows computed (whole or half M tiles) that pad the rows received */
            long both[2] = {rows, computed};
            mpiCheck(MPI_Allreduce(MPI_IN_PLACE, both, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD));
            const double pad = both[1] > 0 ? 1.0 - (double)both[0] / both[1] : 0.0;
            moe_mok_destroy(&m);
            mok_ran = 1;
            if (dist.rank == 0) {
                /* "null" where there is no backward */
                char ms_s[MOK_T_COUNT][32], tf_s[MOK_T_COUNT][32];
                for (int i = 0; i < MOK_T_COUNT; i++) {
                    const double fl = i == MOK_T_FWDBWD || i == MOK_T_FWDBWD_GRAPH ? 3.0 * flops : flops;
                    snprintf(ms_s[i], sizeof ms_s[i], mt[i] > 0 ? "%.4f" : "null", mt[i]);
                    snprintf(tf_s[i], sizeof tf_s[i], mt[i] > 0 ? "%.2f" : "null", fl / (mt[i] * 1e-3) / 1e12);
                }
                bench_emit(
                    "{\"bench\": \"moe\", \"impl\": \"mok\", \"shape\": \"%s\", \"E\": %d, \"H\": %d, \"I\": %d, "
                    "\"k\": %d, \"shared\": %d, \"ep\": %d, \"world\": %d, \"tokens_per_gpu\": %d, \"iters\": %d, "
                    "\"comm_blocks\": %d, \"accumulate\": %d, \"collapse\": %d, \"fwd_ms\": %s, \"fwdbwd_ms\": %s, "
                    "\"fwd_tflops\": %s, \"fwdbwd_tflops\": %s, \"fwd_graph_ms\": %s, \"fwdbwd_graph_ms\": %s, "
                    "\"fwd_graph_tflops\": %s, \"fwdbwd_graph_tflops\": %s, \"dispatch_ms\": %s, "
                    "\"dispatch_gbs_per_gpu\": %.1f, \"pad_share\": %.4f, \"mok_mib\": %.1f}",
                    shape, d.E, d.C, d.I, d.k, d.n_shared, dist.ep, dist.world, N, args.iters, n_comm, args.accumulate,
                    args.collapse,
                    ms_s[MOK_T_FWD], ms_s[MOK_T_FWDBWD], tf_s[MOK_T_FWD], tf_s[MOK_T_FWDBWD], ms_s[MOK_T_FWD_GRAPH],
                    ms_s[MOK_T_FWDBWD_GRAPH], tf_s[MOK_T_FWD_GRAPH], tf_s[MOK_T_FWDBWD_GRAPH], ms_s[MOK_T_DISPATCH],
                    gbs, pad, mok_mib);
                if (mt[MOK_T_FWDBWD] > 0) {
                    char phases[1024];
                    int len = 0;
                    for (int i = 0; i < MOK_PH_COUNT && len < (int)sizeof phases; i++)
                        len += snprintf(phases + len, sizeof phases - len, ", \"%s_ms\": %.4f", mok_phase_names[i],
                                        phase_ms[i]);
                    bench_emit("{\"bench\": \"moe_phases\", \"impl\": \"mok\", \"shape\": \"%s\", \"ep\": %d, "
                               "\"tokens_per_gpu\": %d, \"iters\": %d%s}",
                               shape, dist.ep, N, args.iters, phases);
                }
            }
        }
        if (dist.rank == 0) {
            printf("\n%-10s %4s %11s %9s %12s %11s %16s\n", "impl", "ep", "tokens/GPU", "fwd ms", "fwd TFLOP/s",
                   "fwd+bwd ms", "fwd+bwd TFLOP/s");
            if (do_unfused)
                printf("%-10s %4d %11d %9.3f %12.1f %11.3f %16.1f\n", "unfused", dist.ep, N, fwd,
                       flops / (fwd * 1e-3) / 1e12, fb, 3.0 * flops / (fb * 1e-3) / 1e12);
            for (int graph = 0; mok_ran && graph < 2; graph++) {
                const double f = mt[graph ? MOK_T_FWD_GRAPH : MOK_T_FWD];
                const double b = mt[graph ? MOK_T_FWDBWD_GRAPH : MOK_T_FWDBWD];
                printf("%-10s %4d %11d %9.3f %12.1f %11.3f %16.1f", graph ? "mok graph" : "mok", dist.ep, N, f,
                       flops / (f * 1e-3) / 1e12, b, b > 0 ? 3.0 * flops / (b * 1e-3) / 1e12 : 0.0);
                if (graph) printf("   (the same calls replayed from CUDA graphs)\n");
                else
                    printf("   (%d comm blocks; dispatch alone %.3f ms, %.0f GB/s per GPU)\n", n_comm,
                           mt[MOK_T_DISPATCH], gbs);
            }
            fflush(stdout);
        }
        layer_destroy(&L);
        rc = 0;
    }
    cudaCheck(cudaStreamDestroy(s));
    gpu_comms_destroy(&gc);
    dist_finalize(&dist);
    return rc;
}
