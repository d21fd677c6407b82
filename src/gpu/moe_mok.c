/*
 * The MoE layer through the MoK megakernel, forward (design in moe_mok.h, protocol in
 * kernels/mok/mok.h): buffers, symmetric memory, and the launches in stream order.
 */
#include "gpu/moe_mok.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/cast.h"
#include "../../kernels/moe_combine.h"
#include "../../kernels/moe_plan.h"
#include "../../kernels/moe_route.h"
#include "common.h"
#include "gpu/buf_list.h"
#include "gpu/check.h"
#include "gpu/adamw_deferred.h"
#include "gpu/moe_router.h"

/* ------------------------------------------------------------------------------------------------
 * Buffers (one table drives the byte count and the allocation)
 * ---------------------------------------------------------------------------------------------- */

/* The watchdog budget's ceiling, seconds (in nanoseconds, doubled by the pipeline waits, it must
 * stay far from the 64-bit limit; an hour is "never" for a layer). */
#define MOK_MAX_BUDGET_S 3600.0

static long mok_r_max(const MoeGpuDims *d, int N) {
    const int El = d->E / d->ep;
    return (long)d->ep * N * (d->k < El ? d->k : El);
}

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* The window's bytes, and its layout into w where given (MokWindow). */
static size_t window_bytes(const MoeGpuDims *d, int N_max, int n_saved, MokWindow *w) {
    const size_t xb = align256((size_t)N_max * d->C * 2), gb = align256((size_t)N_max * d->k * 4);
    const size_t yb = align256((size_t)N_max * d->k * d->C * 2);
    if (w) *w = (MokWindow){.x_off = 0, .dy_off = xb, .gate_off = 2 * xb, .y_off = 2 * xb + gb, .y_stride = yb};
    return 2 * xb + gb + yb * (size_t)(n_saved > 1 ? n_saved : 1);
}

static void layout(GpuBufList *l, MoeMok *m, const MoeGpuDims *d, int N) {
    const size_t T = (size_t)N, E = (size_t)d->E, k = (size_t)d->k, C = (size_t)d->C, I = (size_t)d->I;
    const size_t SI = (size_t)d->n_shared * I, R = (size_t)mok_r_max(d, N), ep = (size_t)d->ep;
    const size_t El = E / ep, mt = (size_t)mok_mt_max((long)R, (int)El);
    gpu_buf_init(l, "moe_mok");
    gpu_buf_add(l, &m->logits, T * E * 4);
    gpu_buf_add(l, &m->router_scratch, moe_router_scratch_bytes(N, d->C, d->E));
    gpu_buf_add(l, &m->st.scores, T * E * 4);
    gpu_buf_add(l, &m->st.gates, T * k * 4);
    gpu_buf_add(l, &m->st.topk, T * k * 4);
    gpu_buf_add(l, &m->fail, 4);
    gpu_buf_add(l, &m->st.counts, E * 4);
    gpu_buf_add(l, &m->slot_iota, T * k * 4);
    gpu_buf_add(l, &m->st.stat_counts, E * 8);
    gpu_buf_add(l, &m->pnorm, T * 8);
    gpu_buf_add(l, &m->aux_partial, (size_t)gpu_moe_aux_chunks(N) * E * 8);
    gpu_buf_add(l, &m->psum, E * 8);
    gpu_buf_add(l, &m->aux, 8);
    gpu_buf_add(l, &m->topk_all, ep > 1 ? ep * T * k * 4 : 0);
    gpu_buf_add(l, &m->chunk_counts_all, (size_t)gpu_moe_plan_chunks((long)(ep * T * k)) * E * 4);
    gpu_buf_add(l, &m->slot_rank_all, ep * T * k * 4);
    gpu_buf_add(l, &m->slot_row_all, ep * T * k * 4);
    gpu_buf_add(l, &m->st.row_slot_all, ep * T * k * 4);
    gpu_buf_add(l, &m->counts_all, E * 4);
    gpu_buf_add(l, &m->st.eo_all, (E + 1) * 4);
    gpu_buf_add(l, &m->stat_all, E * 8);
    gpu_buf_add(l, &m->st.mt_start, (El + 1) * 4);
    gpu_buf_add(l, &m->st.total_mt, 4);
    gpu_buf_add(l, &m->arrive, mt * 4);
    gpu_buf_add(l, &m->gu_done, mt * 4);
    gpu_buf_add(l, &m->ticket, MOK_TICKETS * sizeof(unsigned));
    gpu_buf_add(l, &m->barrier, 4);
    gpu_buf_add(l, &m->st.xr, R * C * 2);
    gpu_buf_add(l, &m->st.h, R * I * 2);
    /* no st.pre_gate, st.pre_up: a forward-only call keeps nothing for a backward (the kernel skips
     * their stores when NULL); training's forwards store them in their MoeMokSaved */
    gpu_buf_add(l, &m->st.s_gate, T * SI * 2);
    gpu_buf_add(l, &m->st.s_up, T * SI * 2);
    moe_shared_scratch_add(l, &m->shared, T, SI); /* forward and backward */
    /* the backward's scratch */
    gpu_buf_add(l, &m->dyr, R * C * 2);
    gpu_buf_add(l, &m->dpg, R * I * 2);
    gpu_buf_add(l, &m->dpu, R * I * 2);
    gpu_buf_add(l, &m->dgates, T * k * 4);
}

/* The tile this process uses: MOKC_MOK_TILE=simple|mma|wgmma, else wgmma where it runs, else mma. */
static int chosen_tile(const MoeGpuDims *d) {
    const char *env = getenv("MOKC_MOK_TILE"), *why = NULL;
    if (env && env[0]) {
        if (!strcmp(env, "simple")) return MOK_TILE_SIMPLE;
        if (!strcmp(env, "mma")) return MOK_TILE_PIPE;
        if (!strcmp(env, "wgmma")) return MOK_TILE_WGMMA;
        mokc_die(MOKC_EXIT_USAGE, "set MOKC_MOK_TILE to simple, mma or wgmma, or unset it",
                 "MOKC_MOK_TILE='%s' is not a GEMM tile of the megakernel", env);
    }
    return mok_tile_supported(MOK_TILE_WGMMA, d->C, d->I, &why) ? MOK_TILE_WGMMA : MOK_TILE_PIPE;
}

static void check_shape(const MoeGpuDims *d, int N_max, const char *who) {
    moe_gpu_dims_check(d, N_max, who);
    const char *why = NULL;
    if (!mok_tile_supported(chosen_tile(d), d->C, d->I, &why))
        mokc_die(MOKC_EXIT_USAGE, "use moe_impl \"unfused\" for this shape or GPU",
                 "%s: %s (C = %d, I = %d)", who, why, d->C, d->I);
}

int moe_mok_supported(const MoeGpuDims *d) {
    const char *why = NULL;
    return mok_tile_supported(chosen_tile(d), d->C, d->I, &why);
}

int moe_mok_available(const MoeGpuDims *d, ncclComm_t ep_comm, int backward, char *why, size_t len) {
    const char *tile_why = NULL;
    const int tile = chosen_tile(d);
    if (!mok_tile_supported(tile, d->C, d->I, &tile_why)) {
        snprintf(why, len, "%s (hidden_size %d, moe_intermediate_size %d)", tile_why, d->C, d->I);
        return 0;
    }
    if (backward && tile != MOK_TILE_WGMMA) {
        snprintf(why, len, "the megakernel's backward exists for the wgmma tile only (an SM 9.0 GPU, a build for "
                           "sm_90a, MOKC_MOK_TILE unset or wgmma)");
        return 0;
    }
    return mok_symm_lsa_check(d->ep > 1 ? ep_comm : NULL, d->ep, why, len);
}

size_t moe_mok_bytes(const MoeGpuDims *d, int N_max, int n_saved) {
    check_shape(d, N_max, "moe_mok_bytes");
    MoeMok m;
    GpuBufList l;
    layout(&l, &m, d, N_max);
    return window_bytes(d, N_max, n_saved, NULL) + gpu_buf_total(&l);
}

size_t moe_mok_window_bytes(const MoeGpuDims *d, int N_max, int n_saved) {
    check_shape(d, N_max, "moe_mok_window_bytes");
    return window_bytes(d, N_max, n_saved, NULL);
}

/* ------------------------------------------------------------------------------------------------
 * Saved state (one per layer in training)
 * ---------------------------------------------------------------------------------------------- */

static void saved_layout(GpuBufList *l, MokState *st, int **rows_step, const MoeGpuDims *d, int N) {
    const size_t T = (size_t)N, E = (size_t)d->E, k = (size_t)d->k, C = (size_t)d->C, I = (size_t)d->I;
    const size_t SI = (size_t)d->n_shared * I, R = (size_t)mok_r_max(d, N), ep = (size_t)d->ep, El = E / ep;
    gpu_buf_init(l, "moe_mok saved state");
    gpu_buf_add(l, &st->scores, T * E * 4);
    gpu_buf_add(l, &st->gates, T * k * 4);
    gpu_buf_add(l, &st->topk, T * k * 4);
    gpu_buf_add(l, &st->counts, E * 4);
    gpu_buf_add(l, &st->stat_counts, E * 8);
    gpu_buf_add(l, &st->row_slot_all, ep * T * k * 4);
    gpu_buf_add(l, &st->eo_all, (E + 1) * 4);
    gpu_buf_add(l, &st->mt_start, (El + 1) * 4);
    gpu_buf_add(l, &st->total_mt, 4);
    gpu_buf_add(l, &st->xr, R * C * 2);
    gpu_buf_add(l, &st->h, R * I * 2);
    gpu_buf_add(l, &st->pre_gate, R * I * 2);
    gpu_buf_add(l, &st->pre_up, R * I * 2);
    gpu_buf_add(l, &st->s_gate, T * SI * 2);
    gpu_buf_add(l, &st->s_up, T * SI * 2);
    gpu_buf_add(l, rows_step, El * 4);
}

size_t moe_mok_saved_bytes(const MoeGpuDims *d, int N_max) {
    MokState st;
    int *rows_step;
    GpuBufList l;
    saved_layout(&l, &st, &rows_step, d, N_max);
    return gpu_buf_total(&l);
}

void moe_mok_saved_create(MoeMokSaved *s, const MoeGpuDims *d, int N_max, int slot) {
    memset(s, 0, sizeof *s);
    s->slot = slot;
    s->N_max = N_max;
    s->N = -1;
    GpuBufList l;
    saved_layout(&l, &s->st, &s->rows_step, d, N_max);
    gpu_buf_alloc(&l);
    cudaCheck(cudaMemset(s->rows_step, 0, sizeof(int) * (size_t)(d->E / d->ep))); /* no rows before a first step */
    cudaCheck(cudaMallocHost((void **)&s->h_aux, sizeof(double)));
    cudaCheck(cudaMallocHost((void **)&s->h_counts, (size_t)d->E * sizeof(int)));
    cudaCheck(cudaMallocHost((void **)&s->h_fail, sizeof(int)));
    s->h_fail[0] = 0;
    s->d = *d;
}

void moe_mok_saved_destroy(MoeMokSaved *s) {
    GpuBufList l;
    saved_layout(&l, &s->st, &s->rows_step, &s->d, s->N_max);
    gpu_buf_free(&l);
    if (s->h_aux) cudaCheck(cudaFreeHost(s->h_aux));
    if (s->h_counts) cudaCheck(cudaFreeHost(s->h_counts));
    if (s->h_fail) cudaCheck(cudaFreeHost(s->h_fail));
    memset(s, 0, sizeof *s);
}

size_t moe_mok_y_off(const MoeMok *m, const MoeMokSaved *sv) {
    return m->win.y_off + (sv ? (size_t)sv->slot : 0) * m->win.y_stride;
}

bf16_t *moe_mok_win_y(const MoeMok *m, const MoeMokSaved *sv) {
    return (bf16_t *)((char *)mok_symm_local(m->symm) + moe_mok_y_off(m, sv));
}

void moe_mok_ep_barrier(MoeMok *m, cudaStream_t stream) {
    if (m->d.ep > 1) ncclCheck(ncclAllReduce(m->barrier, m->barrier, 1, ncclFloat32, ncclSum, m->comms.ep, stream));
}

static void report_watchdog(void *arg);

/* Rounds of the grid a group of the forward's ticket order spans (MokFwdParams.group_mt):
 * MOKC_MOK_GROUP_ROUNDS (a whole number, 0: every gate/up task first), else 2 where a tile's gate/up
 * products outlast the dispatch of its rows by 1.3x or more, else 0. Per dispatched row the
 * products are 4 C I FLOPs and the pulls 2 C bytes, so the ratio is 2 I x (NVLink bytes per s /
 * tensor FLOPs per s) with the measured 364 GB/s and ~700 TFLOP/s: ~1.04e-3 I. Measured (s7,
 * docs/perf-notes.md): Kimi-like (I = 2048, 2.1) forward kernel -0.2 ms with 2 rounds; Qwen-like
 * (I = 768, 0.8) +0.05 ms with 1 or 2 (the down tasks' pushes slow the dispatch its gate/up tasks
 * wait on), no change with 4. */
static int group_rounds(const MoeGpuDims *d) {
    const char *env = getenv("MOKC_MOK_GROUP_ROUNDS");
    if (env && env[0]) {
        char *end = NULL;
        const long r = strtol(env, &end, 10);
        if (*end != '\0' || r < 0 || r > 64)
            mokc_die(MOKC_EXIT_USAGE, "set MOKC_MOK_GROUP_ROUNDS to a whole number from 0 to 64, or unset it",
                     "MOKC_MOK_GROUP_ROUNDS='%s' is not a number of grid rounds", env);
        return (int)r;
    }
    return 1.04e-3 * d->I >= 1.3 ? 2 : 0;
}

/* The forward's M tiles a group: moe_mok_set_group_mt's, else `group_rounds` rounds of the grid's
 * gate/up tasks (0: one group). */
static int forward_group_mt(const MoeMok *m) {
    if (m->group_mt > 0) return m->group_mt;
    const int nI = (m->d.I + 127) / 128;
    return m->group_rounds > 0 ? (m->group_rounds * m->grid + nI - 1) / nI : 0;
}

/* Trace words of one kernel (MOKC_MOK_TRACE=1): the grid grows with the tile, room for the largest. */
static size_t trace_region(const MoeMok *m) { return (size_t)m->sms * 4 * MOK_TRACE_SLOTS; }

void moe_mok_create(MoeMok *m, const MoeGpuDims *d, int N_max, const MoeGpuComms *comms, int n_comm_blocks,
                    int n_saved) {
    check_shape(d, N_max, "moe_mok_create");
    memset(m, 0, sizeof *m);
    m->d = *d;
    m->N_max = N_max;
    m->n_saved = n_saved > 0 ? n_saved : 0;
    m->El = d->E / d->ep;
    m->R_max = mok_r_max(d, N_max);
    m->mt_max = mok_mt_max(m->R_max, m->El);
    m->N = -1;
    mokc_gpu_set_failure_report(report_watchdog, m);
    m->stats_ranks = moe_gpu_comms_take(&m->comms, comms, d, "moe_mok_create");

    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&m->sms, cudaDevAttrMultiProcessorCount, dev));
    /* wgmma + TMA where the GPU and build allow (sm_90a); the mma.sync tiles elsewhere, the simple
     * one kept as their reference (same bits as the pipelined one). */
    m->tile = chosen_tile(d);
    m->grid = m->sms * mok_blocks_per_sm(m->tile);
    m->group_rounds = group_rounds(d);
    /* mma.sync: an eighth of the blocks dispatch; wgmma: every block's spare producer warps do */
    int nc = n_comm_blocks > 0 ? n_comm_blocks : m->tile == MOK_TILE_WGMMA ? m->grid : m->grid / 8;
    if (nc < 1) nc = 1;
    const int nc_max = m->tile == MOK_TILE_WGMMA ? m->grid : m->grid - 1;
    if (nc > nc_max)
        mokc_die(MOKC_EXIT_USAGE, "use fewer communication blocks",
                 "moe_mok_create: %d communication blocks but the persistent grid has %d blocks (at most %d may dispatch)",
                 nc, m->grid, nc_max);
    m->n_comm = nc;

    m->budget_s = 10.0;
    const char *env = getenv("MOKC_MOK_WATCHDOG_S");
    if (env && atof(env) > 0) m->budget_s = atof(env);
    if (m->budget_s > MOK_MAX_BUDGET_S) m->budget_s = MOK_MAX_BUDGET_S;
    env = getenv("MOKC_MOK_SKIP_DISPATCH");
    if (env && env[0] && atoi(env) == d->ep_rank) {
        m->skip_dispatch = 1;
        fprintf(stderr, "moe_mok: MOKC_MOK_SKIP_DISPATCH=%s: ep_rank %d skips its dispatch (watchdog test)\n", env,
                d->ep_rank);
    }
    env = getenv("MOKC_MOK_TRACE");
    if (env && strcmp(env, "1") == 0) /* the backward's trace, then the forward's */
        cudaCheck(cudaMalloc((void **)&m->trace, 2 * trace_region(m) * sizeof(unsigned long long)));

    GpuBufList l;
    layout(&l, m, d, N_max);
    gpu_buf_alloc(&l);
    const size_t wb = window_bytes(d, N_max, m->n_saved, &m->win);
    const char *msg = NULL;
    const ncclResult_t rc = mok_symm_create(&m->symm, m->comms.ep, d->ep, wb, &msg);
    if (rc != ncclSuccess)
        mokc_die(MOKC_EXIT_RUNTIME,
                 "the megakernel needs NCCL >= 2.28 symmetric windows on one NVLink domain; use moe_impl \"unfused\"",
                 "moe_mok_create: %s failed (%s)", msg ? msg : "symmetric memory", ncclGetErrorString(rc));
    char *win = mok_symm_local(m->symm);
    m->win_x = (bf16_t *)(win + m->win.x_off);
    m->win_dy = (bf16_t *)(win + m->win.dy_off);
    m->win_gates = (float *)(win + m->win.gate_off);
    cublasCheck(cublasCreate(&m->blas));
    cudaCheck(cudaHostAlloc((void **)&m->err_host, sizeof(MokError), cudaHostAllocMapped));
    memset((void *)m->err_host, 0, sizeof(MokError));
    cudaCheck(cudaHostGetDevicePointer((void **)&m->err_dev, m->err_host, 0));
    cudaCheck(cudaMallocHost((void **)&m->pin, sizeof(int)));
    cudaCheck(cudaMallocHost((void **)&m->pin_aux, sizeof(double)));
    mok_iota(m->slot_iota, (long)N_max * d->k, 0);
    cudaCheck(cudaMemset(m->barrier, 0, sizeof(float)));
    cudaCheck(cudaDeviceSynchronize());
}

/* ---------- phase timing ---------- */

#define MOK_MARKS (MOK_FWD_MARKS + MOK_BWD_MARKS)

struct MokPhases {
    cudaEvent_t ev[MOK_MARKS];
    int marked[MOK_MARKS];
};

const char *const mok_phase_names[MOK_PH_COUNT] = {
    "fwd_router_gemm", "fwd_route",   "fwd_gather",  "fwd_schedule", "fwd_kernel",     "fwd_barrier",   "fwd_combine",
    "bwd_dy_rows",     "bwd_shared",  "bwd_kernel",  "bwd_barrier",  "bwd_scatter",    "bwd_route",     "bwd_router_gemms"};

void moe_mok_set_phases(MoeMok *m, int on) {
    if (!on == !m->phases) return;
    if (on) {
        m->phases = callocCheck(1, sizeof *m->phases);
        for (int i = 0; i < MOK_MARKS; i++) cudaCheck(cudaEventCreate(&m->phases->ev[i]));
        return;
    }
    for (int i = 0; i < MOK_MARKS; i++) cudaCheck(cudaEventDestroy(m->phases->ev[i]));
    free(m->phases);
    m->phases = NULL;
}

void moe_mok_phase_mark(MoeMok *m, int i, cudaStream_t stream) {
    if (!m->phases) return;
    cudaCheck(cudaEventRecord(m->phases->ev[i], stream));
    m->phases->marked[i] = 1;
}

void moe_mok_phases_collect(MoeMok *m, double *ms, int *n) {
    MokPhases *p = m->phases;
    if (!p) return;
    for (int half = 0; half < 2; half++) {
        const int m0 = half ? MOK_FWD_MARKS : 0, marks = half ? MOK_BWD_MARKS : MOK_FWD_MARKS;
        const int ph0 = half ? MOK_FWD_MARKS - 1 : 0;
        int all = 1;
        for (int i = m0; i < m0 + marks; i++) all &= p->marked[i];
        if (!all) continue;
        for (int i = 0; i + 1 < marks; i++) {
            float t = 0;
            cudaCheck(cudaEventSynchronize(p->ev[m0 + i + 1]));
            cudaCheck(cudaEventElapsedTime(&t, p->ev[m0 + i], p->ev[m0 + i + 1]));
            ms[ph0 + i] += t;
        }
        n[half]++;
        for (int i = m0; i < m0 + marks; i++) p->marked[i] = 0;
    }
}

/* Per task kind: tasks, main loop and epilogue (ms per block, us per task), the producer's waits. */
static void trace_print_kinds(const double *s, int G, const char *const *kinds, int n_kinds) {
    for (int k = 0; k < n_kinds; k++) {
        const double n = s[1 + 3 * k] > 0 ? s[1 + 3 * k] : 1;
        fprintf(stderr,
                "  %-7s %7.0f tasks  main loop %.3f ms (%.2f us/task)  epilogue %.3f ms (%.2f us/task)  producer "
                "waiting on counters %.3f ms  consumers waiting for these tasks %.3f ms\n",
                kinds[k], s[1 + 3 * k], s[2 + 3 * k] / G * 1e-6, s[2 + 3 * k] / n * 1e-3, s[3 + 3 * k] / G * 1e-6,
                s[3 + 3 * k] / n * 1e-3, s[MOK_TRACE_PRODUCER + k] / G * 1e-6, s[MOK_TRACE_WAIT + k] / G * 1e-6);
    }
}

void moe_mok_trace_print(MoeMok *m, cudaStream_t stream) {
    if (!m->trace) return;
    cudaCheck(cudaStreamSynchronize(stream));
    const int G = m->grid;
    for (int fwd = 1; fwd >= 0; fwd--) {
        if (fwd && m->tile != MOK_TILE_WGMMA) continue;
        unsigned long long *h = mallocCheck((size_t)G * MOK_TRACE_SLOTS * sizeof *h);
        cudaCheck(cudaMemcpy(h, m->trace + (fwd ? trace_region(m) : 0), (size_t)G * MOK_TRACE_SLOTS * sizeof *h,
                             cudaMemcpyDeviceToHost));
        double s[MOK_TRACE_SLOTS] = {0}, span_max = 0; /* the last block */
        for (int b = 0; b < G; b++) {
            for (int i = 0; i < MOK_TRACE_SLOTS; i++) s[i] += (double)h[(size_t)b * MOK_TRACE_SLOTS + i];
            span_max = fmax(span_max, (double)h[(size_t)b * MOK_TRACE_SLOTS + MOK_TRACE_SPAN]);
        }
        free(h);
        fprintf(stderr, "mok %s trace, ep_rank %d, %d blocks (ms per block; us per task):\n  waiting for tasks %.3f ms\n",
                fwd ? "forward" : "backward", m->d.ep_rank, G, s[0] / G * 1e-6);
        double tasks = 0;
        for (int k = 0; k < (fwd ? 2 : 4); k++) tasks += s[1 + 3 * k];
        const double sent = tasks - s[MOK_TRACE_LATE];
        fprintf(stderr,
                "    for %.0f of %.0f tasks not yet sent when asked for %.3f ms; between the others %.3f ms (%.2f us "
                "each)\n",
                s[MOK_TRACE_LATE], tasks, s[MOK_TRACE_LATE + 1] / G * 1e-6, (s[0] - s[MOK_TRACE_LATE + 1]) / G * 1e-6,
                sent > 0 ? (s[0] - s[MOK_TRACE_LATE + 1]) / sent * 1e-3 : 0.0);
        if (fwd) {
            static const char *const kinds[2] = {"gate/up", "down"};
            trace_print_kinds(s, G, kinds, 2);
            const int nc = m->n_comm > 0 ? m->n_comm : 1;
            fprintf(stderr, "  dispatch warps %.3f ms per block of %d\n", s[MOK_TRACE_FWD_DISPATCH] / nc * 1e-6, m->n_comm);
        } else {
            static const char *const kinds[4] = {"dgrad", "wdown", "dx", "wgu"};
            trace_print_kinds(s, G, kinds, 4);
        }
        fprintf(stderr, "  consumers busy %.3f ms per block, the last %.3f ms\n", s[MOK_TRACE_SPAN] / G * 1e-6,
                span_max * 1e-6);
        static const char *const sections[2][4] = {{"staging", "SwiGLU", "stores", "release"},
                                                   {"staged", "pre_gate, pre_up stored", "SwiGLU", "h stored, release"}};
        const double n1 = s[1] > 0 ? s[1] : 1;
        fprintf(stderr, "  %s epilogue, us/task:", fwd ? "gate/up" : "dgrad");
        for (int i = 0; i < 4; i++) fprintf(stderr, "  %s %.2f", sections[fwd][i], s[MOK_TRACE_EPI + i] / n1 * 1e-3);
        static const char *const push_sections[3] = {"staging acquired", "rows staged", "copies issued"};
        const int push_kind = fwd ? 1 : 2; /* down, dx: their task counts at [1 + 3 kind], as trace_print_kinds */
        const double n_push = s[1 + 3 * push_kind] > 0 ? s[1 + 3 * push_kind] : 1;
        fprintf(stderr, "\n  %s epilogue (push), us/task:", fwd ? "down" : "dx");
        for (int i = 0; i < 3; i++) fprintf(stderr, "  %s %.2f", push_sections[i], s[MOK_TRACE_PUSH + i] / n_push * 1e-3);
        fprintf(stderr, "\n");
    }
}

void moe_mok_destroy(MoeMok *m) {
    moe_mok_set_phases(m, 0);
    if (m->trace) cudaCheck(cudaFree(m->trace));
    mokc_gpu_set_failure_report(NULL, NULL);
    GpuBufList l;
    layout(&l, m, &m->d, m->N_max);
    gpu_buf_free(&l);
    if (m->symm) mok_symm_destroy(m->symm);
    if (m->blas) cublasCheck(cublasDestroy(m->blas));
    if (m->err_host) cudaCheck(cudaFreeHost(m->err_host));
    if (m->pin) cudaCheck(cudaFreeHost(m->pin));
    if (m->pin_aux) cudaCheck(cudaFreeHost(m->pin_aux));
    memset(m, 0, sizeof *m);
}

void moe_mok_set_tile(MoeMok *m, int tile) {
    const char *why = NULL;
    if (!mok_tile_supported(tile, m->d.C, m->d.I, &why))
        mokc_die(MOKC_EXIT_USAGE, NULL, "moe_mok_set_tile: %s (C = %d, I = %d)", why, m->d.C, m->d.I);
    m->tile = tile;
    m->grid = m->sms * mok_blocks_per_sm(m->tile);
    const int nc_max = tile == MOK_TILE_WGMMA ? m->grid : m->grid - 1;
    if (m->n_comm > nc_max) m->n_comm = nc_max;
}

void moe_mok_set_group_mt(MoeMok *m, int group_mt) { m->group_mt = group_mt > 0 ? group_mt : 0; }

void moe_mok_set_debug(MoeMok *m, double budget_s, int skip_dispatch) {
    if (budget_s > 0) m->budget_s = budget_s < MOK_MAX_BUDGET_S ? budget_s : MOK_MAX_BUDGET_S;
    m->skip_dispatch = skip_dispatch;
}

/* ------------------------------------------------------------------------------------------------
 * Forward
 * ---------------------------------------------------------------------------------------------- */

void moe_mok_forward(float *y, const float *residual, MoeMok *m, MoeMokSaved *sv, const bf16_t *x,
                     const MoeGpuWeights *wt, const float *expert_bias, int N, cudaStream_t stream) {
    const MoeGpuDims *d = &m->d;
    if (N < 0 || N > m->N_max)
        mokc_die(MOKC_EXIT_RUNTIME, "size the MoE buffers for the largest micro-batch",
                 "moe_mok_forward: %d tokens but the buffers hold %d", N, m->N_max);
    /* the saved buffers must match the layer's (its TMA maps span R_max rows of them) */
    if (sv && (sv->slot < 0 || sv->slot >= (m->n_saved > 1 ? m->n_saved : 1) || sv->N_max != m->N_max))
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "moe_mok_forward: saved state slot %d of %d, for %d tokens (internal)",
                 sv->slot, m->n_saved, sv->N_max);
    /* What the backward reads goes to the saved state; forward-only calls use the layer's buffers. */
    MokState st = sv ? sv->st : m->st;
    bf16_t *win_y = moe_mok_win_y(m, sv);
    const int C = d->C, E = d->E, k = d->k, SI = d->n_shared * d->I, ep = d->ep, El = m->El;
    const long nslots = (long)N * k, nslots_all = (long)ep * nslots;
    cublasCheck(cublasSetStream(m->blas, stream));
    moe_mok_phase_mark(m, 0, stream);

    /* 1. x rows into the window; routing; this rank's counts; the aux statistic */
    if (N > 0)
        cudaCheck(cudaMemcpyAsync(m->win_x, x, (size_t)N * C * sizeof(bf16_t), cudaMemcpyDeviceToDevice, stream));
    moe_router_forward(m->logits, x, wt->router, N, C, E, m->router_scratch, stream);
    moe_mok_phase_mark(m, 1, stream);
    cudaCheck(cudaMemsetAsync(m->fail, 0, sizeof(int), stream));
    gpu_moe_route(st.scores, st.topk, st.gates, m->pnorm, m->fail, m->logits, expert_bias, N, E, k, d->sigmoid,
                  d->norm_topk, d->scaling, stream);
    gpu_moe_plan_histogram(st.counts, st.stat_counts, st.topk, nslots, E, stream);
    const int chunks = gpu_moe_aux_chunks(N);
    gpu_moe_aux_partial(m->aux_partial, st.scores, m->pnorm, N, E, stream);
    gpu_moe_aux_psum(m->psum, m->aux_partial, chunks, E, stream);
    if (m->comms.stats && m->stats_ranks > 1) {
        ncclCheck(ncclGroupStart());
        ncclCheck(ncclAllReduce(st.stat_counts, st.stat_counts, (size_t)E, ncclInt64, ncclSum, m->comms.stats, stream));
        ncclCheck(ncclAllReduce(m->psum, m->psum, (size_t)E, ncclFloat64, ncclSum, m->comms.stats, stream));
        ncclCheck(ncclGroupEnd());
    }
    gpu_moe_aux_loss(m->aux, m->psum, st.stat_counts, E, k, (double)N * m->stats_ranks, stream);

    moe_mok_phase_mark(m, 2, stream);

    /* 2. the EP group's top-k ids (and the ordering point for the x windows) */
    const int *topk_all = st.topk;
    if (ep > 1) {
        ncclCheck(ncclAllGather(st.topk, m->topk_all, (size_t)nslots, ncclInt32, m->comms.ep, stream));
        topk_all = m->topk_all;
    }

    moe_mok_phase_mark(m, 3, stream);

    /* 3. schedule: the plan over every source's slots, then M tiles per local expert */
    gpu_moe_plan_count(m->chunk_counts_all, m->slot_rank_all, topk_all, nslots_all, E, stream);
    gpu_moe_plan_scan(m->chunk_counts_all, m->counts_all, m->stat_all, st.eo_all, nslots_all, E, stream);
    gpu_moe_plan_place(m->slot_row_all, st.row_slot_all, topk_all, m->slot_rank_all, m->chunk_counts_all, st.eo_all,
                       nslots_all, E, stream);
    mok_schedule(st.mt_start, st.total_mt, st.eo_all, d->ep_rank * El, El, mok_tile_m(m->tile), stream);
    if (wt->deferred) adamw_deferred_catch_up(wt->deferred, wt->deferred_layer, st.eo_all + d->ep_rank * El, stream);

    /* 4. the persistent kernel */
    MokFwdParams p;
    memset(&p, 0, sizeof p);
    p.xr = st.xr;
    p.h = st.h;
    p.pre_gate = st.pre_gate;
    p.pre_up = st.pre_up;
    p.w_gate = wt->w_gate;
    p.w_up = wt->w_up;
    p.w_down = wt->w_down;
    p.peer_base = mok_symm_peer_table(m->symm);
    p.x_off = m->win.x_off;
    p.y_off = moe_mok_y_off(m, sv);
    p.row_slot_all = st.row_slot_all;
    p.expert_offset_all = st.eo_all;
    p.mt_start = st.mt_start;
    p.total_mt = st.total_mt;
    p.arrive = m->arrive;
    p.gu_done = m->gu_done;
    p.ticket = m->ticket;
    p.err = m->err_dev;
    p.budget_ns = (long long)(m->budget_s * 1e9);
    p.e0 = d->ep_rank * El;
    p.El = El;
    p.NK = (int)nslots;
    p.k = k;
    p.C = C;
    p.I = d->I;
    p.mt_max = m->mt_max;
    p.R_max = m->R_max;
    p.tile_m = mok_tile_m(m->tile);
    p.n_comm = m->n_comm;
    p.skip_dispatch = m->skip_dispatch;
    p.tile = m->tile;
    p.group_mt = forward_group_mt(m);
    p.trace = m->trace && m->tile == MOK_TILE_WGMMA ? m->trace + trace_region(m) : NULL;
    m->last = p;
    moe_mok_phase_mark(m, 4, stream);
    mok_forward_launch(&p, m->grid, stream);
    moe_mok_phase_mark(m, 5, stream);

    /* 5. every push has landed */
    moe_mok_ep_barrier(m, stream);
    moe_mok_phase_mark(m, 6, stream);

    /* 6. shared experts, combine */
    moe_shared_forward(m->blas, y, st.s_gate, st.s_up, x, wt, &m->shared, N, C, SI, stream);
    gpu_moe_combine(y, win_y, st.gates, m->slot_iota, N, k, C, SI > 0, residual, stream);
    moe_mok_phase_mark(m, 7, stream);
    if (sv) {
        sv->N = N;
        cudaCheck(cudaMemcpyAsync(sv->h_counts, st.counts, (size_t)E * sizeof(int), cudaMemcpyDeviceToHost, stream));
        cudaCheck(cudaMemcpyAsync(sv->h_aux, m->aux, sizeof(double), cudaMemcpyDeviceToHost, stream));
        cudaCheck(cudaMemcpyAsync(sv->h_fail, m->fail, sizeof(int), cudaMemcpyDeviceToHost, stream));
    }
    m->N = N;
}

/* ------------------------------------------------------------------------------------------------
 * Errors and results on the host
 * ---------------------------------------------------------------------------------------------- */

static const char *role_name(int role) {
    switch (role) {
    case MOK_ROLE_GATEUP_WAIT_DISPATCH: /* the Hopper kernels count a tile's dispatch parts, mma.sync the tile */
        return "gate/up tile waiting for its rows (dispatch arrival counter, in parts of the tile)";
    case MOK_ROLE_DOWN_WAIT_GATEUP: return "down tile waiting for its gate/up tiles (gate/up-done counter)";
    case MOK_ROLE_PIPELINE: return "a shared-memory pipeline stage that never filled (TMA)";
    case MOK_ROLE_BWD_WAIT_DISPATCH: return "backward task waiting for its dy rows (arrival counter, in tile parts)";
    case MOK_ROLE_BWD_WAIT_SWIGLU: return "backward task waiting for the SwiGLU backward of its rows (dpg-done counter)";
    default: return "unknown";
    }
}

int moe_mok_error_string(const MoeMok *m, char *buf, size_t len) {
    const volatile MokError *e = m->err_host;
    if (!e || !e->flag) {
        snprintf(buf, len, "no watchdog record");
        return 0;
    }
    snprintf(buf, len,
             "mok watchdog: ep_rank %d block %d role %d (%s) task %d counter[%d] expected %d seen %d after %.3f s "
             "(budget %.3f s)",
             m->d.ep_rank, e->block, e->role, role_name(e->role), e->tile, e->counter, e->expected, e->seen,
             e->waited_ns * 1e-9, m->budget_s);
    return 1;
}

/* Registered with the GPU checks: a watchdog trap surfaces as a failure of whatever GPU call comes
 * next (often cuBLAS), which then prints the record before stopping. */
static void report_watchdog(void *arg) {
    char msg[512];
    if (moe_mok_error_string(arg, msg, sizeof msg)) fprintf(stderr, "%s\n", msg);
}

static void die_no_candidate(const MoeMok *m) {
    mokc_die(MOKC_EXIT_RUNTIME, "the router weights, the input or expert_bias contain NaN; lower the learning rate",
             "moe_mok_forward: top-%d selection found no candidate (non-finite router scores)", m->d.k);
}

void moe_mok_sync(MoeMok *m, cudaStream_t stream) {
    const cudaError_t err = cudaStreamSynchronize(stream);
    if (err != cudaSuccess) {
        char msg[512];
        const int have = moe_mok_error_string(m, msg, sizeof msg);
        fprintf(stderr, "%s\n", msg);
        fflush(stderr);
        mokc_die(MOKC_EXIT_RUNTIME,
                 have ? "a counter of the megakernel stalled: a peer did not dispatch or a tile never finished"
                      : NULL,
                 "moe_mok: the megakernel failed: %s%s", cudaGetErrorString(err), have ? " (watchdog fired)" : "");
    }
    cudaCheck(cudaMemcpy(m->pin, m->fail, sizeof(int), cudaMemcpyDeviceToHost));
    if (m->pin[0]) die_no_candidate(m);
}

void moe_mok_saved_check(const MoeMok *m, const MoeMokSaved *sv) {
    if (sv->h_fail[0]) die_no_candidate(m);
}

double moe_mok_aux_loss(MoeMok *m, cudaStream_t stream) {
    moe_mok_sync(m, stream);
    cudaCheck(cudaMemcpy(m->pin_aux, m->aux, sizeof(double), cudaMemcpyDeviceToHost));
    return m->pin_aux[0];
}

void moe_mok_dispatch_only(MoeMok *m, cudaStream_t stream) {
    if (m->N < 0) mokc_die(MOKC_EXIT_RUNTIME, NULL, "moe_mok_dispatch_only: no forward before (internal)");
    MokFwdParams p = m->last;
    p.dispatch_only = 1;
    p.skip_dispatch = 0;
    mok_forward_launch(&p, m->grid, stream);
}

void moe_mok_rows(MoeMok *m, cudaStream_t stream, long *rows_in, long *rows_computed) {
    moe_mok_sync(m, stream);
    *rows_in = *rows_computed = 0;
    if (m->N < 0) return;
    const MokFwdParams *p = &m->last; /* the last forward's state, wherever it was kept */
    const int El = p->El, tile_m = p->tile_m;
    int *eo = mallocCheck((size_t)(El + 1) * sizeof(int));
    cudaCheck(cudaMemcpy(eo, p->expert_offset_all + p->e0, (size_t)(El + 1) * sizeof(int), cudaMemcpyDeviceToHost));
    *rows_in = (long)eo[El] - eo[0];
    /* the wgmma tile computes a tile of at most 64 rows as half a tile (consumer 0 alone) */
    const int least = p->tile == MOK_TILE_WGMMA ? tile_m / 2 : tile_m;
    for (int el = 0; el < El; el++)
        for (int left = eo[el + 1] - eo[el]; left > 0; left -= tile_m) *rows_computed += left <= least ? least : tile_m;
    free(eo);
}
