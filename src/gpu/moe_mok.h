/*
 * The MoE layer through the MoK megakernel (`"moe_impl": "mok"`, issue 7), forward. Same function
 * and contract as moe_unfused_forward (y overwritten, fp32), but no host synchronisation inside
 * the step (CUDA-graph capturable), and dispatch + expert GEMMs + the push of expert outputs run
 * in ONE persistent kernel (kernels/mok/mok.h has the protocol). In order on one stream:
 *   1. x (bf16) into this rank's symmetric window (x region); router GEMM (fp32 on tensor cores), scores,
 *      top-k, gates (kernels/moe_route.h); this rank's counts (kernels/moe_plan.h) and the aux
 *      statistic over comms.stats, as the unfused layer;
 *   2. ncclAllGather of the (N, k) top-k ids over the EP group (ep > 1). It also orders: when it
 *      completes, every peer's x rows are in its window;
 *   3. schedule on the GPU: the dispatch plan over all ep * N * k gathered slots in (source rank,
 *      token, j) order = the unfused owner-side row order, then M tiles per local expert;
 *   4. the persistent kernel: dispatch blocks pull rows from the peers' windows, compute blocks run
 *      gate/up (+ SwiGLU) and down tiles and push each output row into its source rank's combine
 *      slot (token * k + j) in the source's window;
 *   5. ep > 1: a 1-element ncclAllReduce over the EP group as a barrier (every push has landed);
 *   6. shared experts (cuBLAS, as the unfused layer), then the fixed-order combine
 *      (kernels/moe_combine.h) from the window's combine slots.
 * Symmetric memory: one window per rank on comms.ep, N_max*C*2 + N_max*k*C*2 bytes (x rows, then
 * combine slots), allocated once (ep == 1: plain device memory).
 * Watchdog: every spin-wait in the kernel is bounded (budget: MOKC_MOK_WATCHDOG_S seconds, default
 * 10, or moe_mok_set_debug); on expiry the kernel fills a host-mapped record and traps;
 * moe_mok_sync prints the record and exits non-zero. Debug: MOKC_MOK_SKIP_DISPATCH=<ep_rank> makes
 * that rank's dispatch blocks do nothing (the watchdog test). Tuning: MOKC_MOK_GROUP_ROUNDS
 * (moe_mok_set_group_mt).
 * GEMM tile (env MOKC_MOK_TILE=wgmma|mma|simple or moe_mok_set_tile): MOK_TILE_WGMMA (wgmma + TMA,
 * warp-specialised; the default on SM 9.0 with an sm_90a build; C % 8 == 0 and I % 8 == 0) or the
 * mma.sync tiles (any GPU; C % 64 == 0 and I % 64 == 0): MOK_TILE_PIPE (cp.async + ldmatrix) and
 * MOK_TILE_SIMPLE (plain shared-memory loads, its reference: same bits). M is masked: any token count.
 * Determinism: bitwise reproducible for a fixed shape, GPU and rank count, independent of the
 * number of communication blocks (each output element is computed by one tile with a fixed K
 * order; no floating-point atomics); the two mma.sync tiles give the same bits, wgmma other ones.
 * Memory (besides cuBLAS's workspace): moe_mok_bytes, and moe_mok_saved_bytes per forward kept for a
 * backward; the owner-side buffers (xr, h; pre_gate, pre_up in the saved state only) are sized for
 * R_max = ep * N_max * min(k, E_local) rows: dropless, never overflowing.
 */
#ifndef MOKC_GPU_MOE_MOK_H
#define MOKC_GPU_MOE_MOK_H

#include <cublas_v2.h>
#include <nccl.h>
#include <stddef.h>

#include "../../kernels/common.h"
#include "../../kernels/mok/mok.h"
#include "gpu/moe_shared.h"
#include "gpu/moe_unfused.h"

/* The symmetric window's regions (byte offsets, the same on every EP rank): x rows (N_max, C) bf16;
 * the backward's dy rows (N_max, C) bf16 and the slots' gates (N_max * k) fp32, which the owners
 * pull and scale; then n_saved regions of combine slots (N_max * k, C) bf16, y_stride apart: one per
 * layer whose forward is kept for its backward (its expert outputs stay there for the gate
 * gradients; the backward's dx rows land there). */
typedef struct {
    size_t x_off, dy_off, gate_off, y_off, y_stride;
} MokWindow;

/* What a forward leaves for its backward (the routing, the schedule, the owner-side rows) and
 * where: the layer's own buffers for forward-only calls (without pre_gate and pre_up, NULL there:
 * only a backward reads them), a MoeMokSaved per layer in training. */
typedef struct {
    float *scores, *gates;       /* (N, E), (N, k) */
    int *topk, *counts;          /* (N, k), (E) this rank's slots per expert */
    long long *stat_counts;      /* (E) summed over comms.stats */
    int *row_slot_all, *eo_all;  /* the schedule: (ep N k), (E + 1) */
    int *mt_start, *total_mt;    /* (El + 1), (1) */
    bf16_t *xr, *h, *pre_gate, *pre_up; /* owner rows (R_max, C | I): by local expert, (source, token, j) order */
    bf16_t *s_gate, *s_up;       /* (N, S*I) shared experts' pre-activations */
} MokState;

/* Where a forward's and a backward's time goes, on the stream's own clock (benchmarks): events at
 * marks between the phases (moe_mok_phase_mark), summed per phase by moe_mok_phases_collect.
 * Forward phases: the router GEMM (x into the window first); routing (top-k, counts, aux statistic
 * and its all-reduce); the ids all-gather; the schedule; the kernel (counters zeroed + the
 * persistent launch); the barrier (every push landed); the combine (shared experts + the
 * fixed-order combine). Backward: dy's bf16 rows and the gates into the window, and the gate
 * gradients; the shared experts and the barrier; the kernel; the barrier; the sum over j into dx;
 * the router's score backward; its two GEMMs. Phase i of the forward runs from mark i to mark
 * i + 1 (MOK_FWD_MARKS marks), the backward's from mark MOK_FWD_MARKS + i. */
enum { MOK_FWD_MARKS = 8, MOK_BWD_MARKS = 8, MOK_PH_COUNT = MOK_FWD_MARKS - 1 + MOK_BWD_MARKS - 1 };
extern const char *const mok_phase_names[MOK_PH_COUNT];

typedef struct MokPhases MokPhases;

typedef struct {
    MoeGpuDims d;
    int N_max, El, mt_max;
    long R_max;
    MoeGpuComms comms;
    int stats_ranks;
    cublasHandle_t blas;
    int grid, n_comm;           /* persistent grid (SMs x resident blocks per SM) and its dispatch blocks */
    double budget_s;            /* watchdog budget per spin-wait */
    int skip_dispatch;          /* debug */
    int tile;                   /* MOK_TILE_* (see above) */
    int group_rounds, group_mt; /* the forward's ticket order (wgmma tile): see moe_mok_set_group_mt */
    int sms;
    int n_saved;                /* combine-slot regions in the window (one per saved layer), >= 1 used */
    MokSymm *symm;
    MokWindow win;              /* the window's layout */
    bf16_t *win_x, *win_dy;     /* local pointers into the window */
    float *win_gates;
    MokState st;                /* forward-only calls */
    /* routing scratch, this rank's tokens (same meaning as MoeUnfusedActs / Work) */
    float *logits;
    float *router_scratch;      /* the router GEMMs' partials and planes (moe_router.h) */
    int *fail, *slot_iota;
    double *pnorm, *aux_partial, *psum, *aux;
    /* the EP group's slots, counters */
    int *topk_all, *chunk_counts_all, *slot_rank_all, *slot_row_all, *counts_all;
    long long *stat_all;
    unsigned *arrive, *gu_done, *ticket;
    float *barrier;
    MoeSharedScratch shared;
    /* the backward's scratch */
    bf16_t *dyr, *dpg, *dpu;
    float *dgates;
    /* host */
    MokError *err_host, *err_dev;
    int *pin;                   /* fail flag */
    double *pin_aux;
    int N;                      /* tokens of the last forward, -1 before */
    MokFwdParams last;          /* the last forward's kernel parameters (moe_mok_dispatch_only) */
    MokPhases *phases;          /* NULL unless moe_mok_set_phases (benchmarks) */
    unsigned long long *trace;  /* the kernels' traces, backward then forward (MOKC_MOK_TRACE=1, a
                                   diagnostic: its ~270 KB are not in the memory plan), else NULL */
} MoeMok;

/* One layer's forward kept for its backward (training): the state in its own buffers and the
 * combine-slot region `slot` of the MoeMok's window. */
typedef struct {
    MoeGpuDims d;
    MokState st;
    int slot, N_max, N;         /* N: the last forward's tokens */
    double *h_aux;              /* (1) pinned host: the forward's unweighted aux loss, once the stream is past it */
    int *h_counts;              /* (E) pinned host: this rank's slots per expert (the step's load), same */
    int *h_fail;                /* (1) pinned host: the forward's top-k found no candidate (non-finite scores), same */
    int *rows_step;             /* (El) each local expert's rows in the step's backwards so far (mok_expert_sq_rest):
                                   0 after a step's last, the expert's gradient is zeros (MoeGpuGrads.idle_unwritten) */
} MoeMokSaved;

size_t moe_mok_saved_bytes(const MoeGpuDims *d, int N_max);
void moe_mok_saved_create(MoeMokSaved *s, const MoeGpuDims *d, int N_max, int slot);
void moe_mok_saved_destroy(MoeMokSaved *s);

/* The combine-slot region a forward uses: sv's, or the first; its offset in the window. */
bf16_t *moe_mok_win_y(const MoeMok *m, const MoeMokSaved *sv);
size_t moe_mok_y_off(const MoeMok *m, const MoeMokSaved *sv);

/* Every EP rank has reached this point on the stream (a 1-element all-reduce over comms.ep). */
void moe_mok_ep_barrier(MoeMok *m, cudaStream_t stream);

/* 1 if the megakernel handles the shape (C % 64 == 0 and I % 64 == 0). */
int moe_mok_supported(const MoeGpuDims *d);

/* Whether the megakernel runs here: the shape on this GPU and build (moe_mok_supported), with
 * `backward` its backward too (the wgmma tile), then the EP group in one NVLink (LSA) domain with
 * symmetric memory (kernels/mok/mok.h: mok_symm_lsa_check, collective over ep_comm when ep > 1:
 * every EP rank calls it and all get the same answer). Returns 1, or 0 with one sentence in why. */
int moe_mok_available(const MoeGpuDims *d, ncclComm_t ep_comm, int backward, char *why, size_t len);

/* Device bytes of the layer (window included, n_saved combine-slot regions), for the memory plan. */
size_t moe_mok_bytes(const MoeGpuDims *d, int N_max, int n_saved);
/* Of those, the symmetric window's, listed apart in the memory plan. */
size_t moe_mok_window_bytes(const MoeGpuDims *d, int N_max, int n_saved);

/* Collective over comms->ep when ep > 1 (every EP rank creates together). n_comm_blocks <= 0:
 * the default (mma.sync: an eighth of the persistent grid; wgmma: every block). n_saved: layers
 * whose forward is kept for a backward (MoeMokSaved slots 0..n_saved-1; 0 for forward-only use).
 * Dies with a message on unsupported shapes. */
void moe_mok_create(MoeMok *m, const MoeGpuDims *d, int N_max, const MoeGpuComms *comms, int n_comm_blocks,
                    int n_saved);
void moe_mok_destroy(MoeMok *m);

/* Selects the GEMM tile variant (MOK_TILE_*) and resizes the persistent grid to match. */
void moe_mok_set_tile(MoeMok *m, int tile);

/* The wgmma forward's ticket order: M tiles in groups of group_mt, the down tasks of group j after
 * the gate/up tasks of group j + 1, so that the down tasks' pushes overlap gate/up products.
 * group_mt <= 0: the layer's choice, groups whose gate/up tasks span 2 rounds of the grid where a
 * tile's gate/up products outlast the dispatch of its rows (large I), else every gate/up task
 * first; env MOKC_MOK_GROUP_ROUNDS=<rounds> overrides (0: every gate/up task first). Any order
 * gives the same bits (tests set small groups). */
void moe_mok_set_group_mt(MoeMok *m, int group_mt);

/* Watchdog budget (seconds) and the skip-dispatch debug switch (this rank). */
void moe_mok_set_debug(MoeMok *m, double budget_s, int skip_dispatch);

/* y (N, C) fp32 = MoE(x), overwritten, + residual where not NULL (as moe_unfused_forward); x (N, C) bf16, copied
 * into the window; expert_bias (E) or NULL. sv: where to keep the state for
 * moe_mok_backward (NULL: a forward only, its routing and rows in the layer's own m->st, the gate/up
 * pre-activations not stored). Every EP rank calls it together with the same N. No host synchronisation: it can be
 * captured in a CUDA graph (with phase timing off), which replays it with the pointers, N and sv it
 * was captured with; so can moe_mok_backward (tests/gpu/test_mok.c: test_mok_graph).
 * After it: the state's topk, gates, counts, stat_counts and m->aux (device). */
void moe_mok_forward(float *y, const float *residual, MoeMok *m, MoeMokSaved *sv, const bf16_t *x,
                     const MoeGpuWeights *wt, const float *expert_bias, int N, cudaStream_t stream);

/* The backward of the forward kept in sv (the wgmma tile: sm_90a), same contract as
 * moe_unfused_backward: given dy (N, C) fp32 and daux, WRITES dx (N, C) fp32 and ADDS every weight
 * gradient into g. In order on the stream: dy's bf16 rows and the gates into this rank's window,
 * and the gate gradients; the shared experts (cuBLAS); a barrier over the EP group; one persistent
 * launch (kernels/mok/mok.h: MokBwdParams) that pulls the gate-scaled dy rows to their owners, runs the expert
 * GEMMs and the SwiGLU backward, pushes the dx rows back to their sources' slots and adds the
 * experts' weight gradients; a barrier; dx (+)= the fixed-order sum of the rows over j; the router.
 * No host synchronisation. Every EP rank calls it together. (src/gpu/moe_mok_backward.c) */
void moe_mok_backward(float *dx, const MoeGpuGrads *g, const float *dy, double daux, MoeMokSaved *sv, MoeMok *m,
                      const bf16_t *x, const MoeGpuWeights *wt, int N, cudaStream_t stream);

/* Synchronises the stream; on a kernel error prints the watchdog record (if any) and exits
 * non-zero; dies as the unfused layer on non-finite router scores. */
void moe_mok_sync(MoeMok *m, cudaStream_t stream);

/* Once the stream has passed the forward kept in sv: dies as moe_mok_sync does if its top-k found
 * no candidate (each layer's forward resets the layer object's flag, so training reads each
 * layer's copy). */
void moe_mok_saved_check(const MoeMok *m, const MoeMokSaved *sv);

/* moe_mok_sync, then the last forward's unweighted aux loss. */
double moe_mok_aux_loss(MoeMok *m, cudaStream_t stream);

/* Benchmark: relaunches the last forward's persistent kernel with idle compute blocks (the
 * dispatch alone: rows pulled into xr, nothing else written). Requires a forward before. */
void moe_mok_dispatch_only(MoeMok *m, cudaStream_t stream);

/* Phase timing on (creates the events) or off. */
void moe_mok_set_phases(MoeMok *m, int on);
/* Records mark i (forward 0 .. MOK_FWD_MARKS - 1, then the backward's) on the stream. */
void moe_mok_phase_mark(MoeMok *m, int i, cudaStream_t stream);
/* Synchronises on the marks and adds the elapsed ms of each phase of the last forward and
 * backward (those that ran since the previous collect) into ms[MOK_PH_COUNT], counting calls
 * in n[2] (forwards, backwards). */
void moe_mok_phases_collect(MoeMok *m, double *ms, int *n);

/* With MOKC_MOK_TRACE=1 (diagnostic: the kernels built with timers, mok.h MOK_TRACE_SLOTS):
 * synchronises and prints to stderr where the last forward (wgmma tile) and backward kernels'
 * time went, per task kind. */
void moe_mok_trace_print(MoeMok *m, cudaStream_t stream);

/* Synchronises; rows this owner received in the last forward (local ones included), and the rows
 * its GEMM tiles computed for them (each expert's rows padded to whole M tiles, or half tiles). */
void moe_mok_rows(MoeMok *m, cudaStream_t stream, long *rows_in, long *rows_computed);

/* Formats the watchdog record into buf; returns 1 if the kernel filled it. */
int moe_mok_error_string(const MoeMok *m, char *buf, size_t len);

#endif
