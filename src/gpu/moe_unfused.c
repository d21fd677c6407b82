/*
 * The unfused MoE layer on the GPU (design and memory in moe_unfused.h): host orchestration of the
 * router GEMM, routing and plan kernels, the NCCL exchange, per-expert cuBLAS GEMMs, SwiGLU, the
 * combine and the shared experts, forward and backward.
 */
#include "gpu/moe_unfused.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/cast.h"
#include "../../kernels/moe_combine.h"
#include "../../kernels/moe_plan.h"
#include "../../kernels/moe_route.h"
#include "../../kernels/moe_rows.h"
#include "../../kernels/swiglu.h"
#include "common.h"
#include "gpu/buf_list.h"
#include "gpu/check.h"
#include "gpu/gemm.h"
#include "gpu/moe_shared.h"
#include "gpu/moe_router.h"

/* ------------------------------------------------------------------------------------------------
 * Shapes and the buffer layout (one table drives both the byte counts and the allocation)
 * ---------------------------------------------------------------------------------------------- */

static long r_max(const MoeGpuDims *d, int N) {
    const int El = d->E / d->ep;
    return (long)d->ep * N * (d->k < El ? d->k : El);
}

void moe_gpu_dims_check(const MoeGpuDims *d, int N_max, const char *who) {
    if (d->C <= 0 || d->E <= 0 || d->I <= 0 || d->k < 1 || d->k > d->E || d->n_shared < 0 || N_max < 0)
        mokc_die(MOKC_EXIT_USAGE, "need C, E, I > 0, 1 <= k <= E, n_shared >= 0, N >= 0",
                 "%s: invalid MoE shape C=%d E=%d k=%d I=%d n_shared=%d N=%d", who, d->C, d->E, d->k, d->I,
                 d->n_shared, N_max);
    if (d->ep < 1 || d->E % d->ep != 0 || d->ep_rank < 0 || d->ep_rank >= d->ep)
        mokc_die(MOKC_EXIT_USAGE, "parallel.ep must divide moe.num_experts",
                 "%s: ep = %d, ep_rank = %d with E = %d experts", who, d->ep, d->ep_rank, d->E);
    if ((long)N_max * d->k > INT_MAX / 2 || r_max(d, N_max) > INT_MAX / 2)
        mokc_die(MOKC_EXIT_USAGE, "use a smaller micro-batch (tokens per rank) or fewer experts per token",
                 "%s: %d tokens x k = %d (x ep = %d at an owner) rows overflow 32-bit row indices", who, N_max, d->k,
                 d->ep);
}

int moe_gpu_comms_take(MoeGpuComms *out, const MoeGpuComms *comms, const MoeGpuDims *d, const char *who) {
    memset(out, 0, sizeof *out);
    if (comms) *out = *comms;
    if (d->ep > 1) {
        int n = 0, r = -1;
        if (!out->ep)
            mokc_die(MOKC_EXIT_RUNTIME, "create the NCCL EP communicator (gpu_comms_init) before the MoE layer",
                     "%s: ep = %d but no EP communicator", who, d->ep);
        ncclCheck(ncclCommCount(out->ep, &n));
        ncclCheck(ncclCommUserRank(out->ep, &r));
        if (n != d->ep || r != d->ep_rank)
            mokc_die(MOKC_EXIT_RUNTIME, "the EP communicator must hold the ep ranks of one group, ordered by ep_rank",
                     "%s: ep = %d, ep_rank = %d but the EP communicator has %d ranks and this rank is %d there", who,
                     d->ep, d->ep_rank, n, r);
    } else {
        out->ep = NULL;
    }
    int stats_ranks = 1;
    if (out->stats) ncclCheck(ncclCommCount(out->stats, &stats_ranks));
    return stats_ranks;
}

static void acts_layout(GpuBufList *l, MoeUnfusedActs *a, const MoeGpuDims *d, int N) {
    const size_t T = (size_t)N, E = (size_t)d->E, k = (size_t)d->k, C = (size_t)d->C, I = (size_t)d->I;
    const size_t SI = (size_t)d->n_shared * I, R = (size_t)r_max(d, N), nseg = E; /* (E/ep) * ep */
    gpu_buf_init(l, "moe_unfused activations");
    gpu_buf_add(l, &a->scores, T * E * 4);
    gpu_buf_add(l, &a->topk, T * k * 4);
    gpu_buf_add(l, &a->gates, T * k * 4);
    gpu_buf_add(l, &a->slot_row, T * k * 4);
    gpu_buf_add(l, &a->row_slot, T * k * 4);
    gpu_buf_add(l, &a->counts, E * 4);
    gpu_buf_add(l, &a->stat_counts, E * 8);
    gpu_buf_add(l, &a->expert_offset, (E + 1) * 4);
    gpu_buf_add(l, &a->seg, (2 * nseg + 1) * 4);
    gpu_buf_add(l, &a->xr, R * C * 2);
    gpu_buf_add(l, &a->pre_gate, R * I * 2);
    gpu_buf_add(l, &a->pre_up, R * I * 2);
    gpu_buf_add(l, &a->ye, T * k * C * 2);
    gpu_buf_add(l, &a->s_gate, T * SI * 2);
    gpu_buf_add(l, &a->s_up, T * SI * 2);
}

static void work_layout(GpuBufList *l, MoeUnfusedWork *w, const MoeGpuDims *d, int N) {
    const size_t T = (size_t)N, E = (size_t)d->E, k = (size_t)d->k, C = (size_t)d->C, I = (size_t)d->I;
    const size_t SI = (size_t)d->n_shared * I, R = (size_t)r_max(d, N);
    gpu_buf_init(l, "moe_unfused workspace");
    gpu_buf_add(l, &w->logits, T * E * 4);
    gpu_buf_add(l, &w->router_scratch, moe_router_scratch_bytes(N, d->C, d->E));
    gpu_buf_add(l, &w->pnorm, T * 8);
    gpu_buf_add(l, &w->aux_partial, (size_t)gpu_moe_aux_chunks(N) * E * 8);
    gpu_buf_add(l, &w->psum, E * 8);
    gpu_buf_add(l, &w->aux, 8);
    gpu_buf_add(l, &w->fail, 4);
    gpu_buf_add(l, &w->chunk_counts, (size_t)gpu_moe_plan_chunks((long)N * d->k) * E * 4);
    gpu_buf_add(l, &w->slot_rank, T * k * 4);
    gpu_buf_add(l, &w->recv_counts, E * 4);
    gpu_buf_add(l, &w->xe, T * k * C * 2);
    gpu_buf_add(l, &w->h, R * I * 2);
    moe_shared_scratch_add(l, &w->shared, T, SI);
    gpu_buf_add(l, &w->dgates, T * k * 4);
    gpu_buf_add(l, &w->dye, T * k * C * 2);
    gpu_buf_add(l, &w->dh, R * I * 4);
    gpu_buf_add(l, &w->dpg, R * I * 2);
    gpu_buf_add(l, &w->dpu, R * I * 2);
    gpu_buf_add(l, &w->dxr, R * C * 4);
    gpu_buf_add(l, &w->dy_bf16, T * C * 2);
    const size_t ex = d->ep > 1 ? R * C * 2 : 0;
    gpu_buf_add(l, &w->stage, ex);
    gpu_buf_add(l, &w->rows_out, ex);
    gpu_buf_add(l, &w->dyr, ex);
}

size_t moe_unfused_acts_bytes(const MoeGpuDims *d, int N_max) {
    moe_gpu_dims_check(d, N_max, "moe_unfused_acts_bytes");
    MoeUnfusedActs a;
    GpuBufList l;
    acts_layout(&l, &a, d, N_max);
    return gpu_buf_total(&l);
}

size_t moe_unfused_work_bytes(const MoeGpuDims *d, int N_max) {
    moe_gpu_dims_check(d, N_max, "moe_unfused_work_bytes");
    MoeUnfusedWork w;
    GpuBufList l;
    work_layout(&l, &w, d, N_max);
    return gpu_buf_total(&l);
}

void moe_unfused_acts_create(MoeUnfusedActs *a, const MoeGpuDims *d, int N_max) {
    moe_gpu_dims_check(d, N_max, "moe_unfused_acts_create");
    memset(a, 0, sizeof *a);
    a->d = *d;
    a->N_max = N_max;
    a->R_max = r_max(d, N_max);
    GpuBufList l;
    acts_layout(&l, a, d, N_max);
    gpu_buf_alloc(&l);
    const int El = d->E / d->ep;
    a->h_counts = callocCheck((size_t)d->E, sizeof(int));
    a->h_recv_counts = callocCheck((size_t)d->E, sizeof(int));
    a->h_recv_offset = callocCheck((size_t)El + 1, sizeof(int));
    a->h_send_rows = callocCheck((size_t)d->ep, sizeof(int));
    a->h_send_start = callocCheck((size_t)d->ep, sizeof(int));
    a->h_recv_rows = callocCheck((size_t)d->ep, sizeof(int));
    a->h_stage_start = callocCheck((size_t)d->ep, sizeof(int));
    a->N = -1; /* no forward yet */
}

void moe_unfused_acts_destroy(MoeUnfusedActs *a) {
    GpuBufList l;
    acts_layout(&l, a, &a->d, a->N_max);
    gpu_buf_free(&l);
    free(a->h_counts);
    free(a->h_recv_counts);
    free(a->h_recv_offset);
    free(a->h_send_rows);
    free(a->h_send_start);
    free(a->h_recv_rows);
    free(a->h_stage_start);
    memset(a, 0, sizeof *a);
}

void moe_unfused_work_create(MoeUnfusedWork *w, const MoeGpuDims *d, int N_max, const MoeGpuComms *comms) {
    moe_gpu_dims_check(d, N_max, "moe_unfused_work_create");
    memset(w, 0, sizeof *w);
    w->d = *d;
    w->N_max = N_max;
    w->R_max = r_max(d, N_max);
    w->stats_ranks = moe_gpu_comms_take(&w->comms, comms, d, "moe_unfused_work_create");
    GpuBufList l;
    work_layout(&l, w, d, N_max);
    gpu_buf_alloc(&l);
    cublasCheck(cublasCreate(&w->blas));
    const size_t nseg = (size_t)d->E;
    cudaCheck(cudaMallocHost((void **)&w->pin_i, (1 + 2 * (size_t)d->E + 2 * nseg + 1) * sizeof(int)));
    cudaCheck(cudaMallocHost((void **)&w->pin_d, sizeof(double)));
}

void moe_unfused_work_destroy(MoeUnfusedWork *w) {
    GpuBufList l;
    work_layout(&l, w, &w->d, w->N_max);
    gpu_buf_free(&l);
    if (w->blas) cublasCheck(cublasDestroy(w->blas));
    if (w->pin_i) cudaCheck(cudaFreeHost(w->pin_i));
    if (w->pin_d) cudaCheck(cudaFreeHost(w->pin_d));
    memset(w, 0, sizeof *w);
}

/* ------------------------------------------------------------------------------------------------
 * The exchange between this rank (as a source) and the owners (as an owner)
 * ---------------------------------------------------------------------------------------------- */

/* Source-side rows in expert order (owner p's block at send_start[p], send_rows[p] rows) <->
 * owner-side staging in source-rank order (source p's block at stage_start[p], recv_rows[p] rows).
 * to_owners: send = src rows, recv = stage; else send = stage, recv = src rows. The rows to and
 * from oneself are a device copy. */
static void exchange_rows(bf16_t *src_rows, bf16_t *stage, const MoeUnfusedActs *a, const MoeUnfusedWork *w,
                          int to_owners, cudaStream_t stream) {
    const MoeGpuDims *d = &w->d;
    const size_t C = (size_t)d->C;
    const int me = d->ep_rank;
    ncclCheck(ncclGroupStart());
    for (int p = 0; p < d->ep; p++) {
        if (p == me) continue;
        bf16_t *src_p = src_rows + (size_t)a->h_send_start[p] * C;
        bf16_t *stage_p = stage + (size_t)a->h_stage_start[p] * C;
        const size_t n_src = (size_t)a->h_send_rows[p] * C, n_stage = (size_t)a->h_recv_rows[p] * C;
        if (to_owners) {
            if (n_src) ncclCheck(ncclSend(src_p, n_src, ncclBfloat16, p, w->comms.ep, stream));
            if (n_stage) ncclCheck(ncclRecv(stage_p, n_stage, ncclBfloat16, p, w->comms.ep, stream));
        } else {
            if (n_stage) ncclCheck(ncclSend(stage_p, n_stage, ncclBfloat16, p, w->comms.ep, stream));
            if (n_src) ncclCheck(ncclRecv(src_p, n_src, ncclBfloat16, p, w->comms.ep, stream));
        }
    }
    ncclCheck(ncclGroupEnd());
    const size_t bytes = (size_t)a->h_send_rows[me] * C * sizeof(bf16_t); /* == recv_rows[me] rows */
    if (bytes) {
        bf16_t *src_me = src_rows + (size_t)a->h_send_start[me] * C;
        bf16_t *stage_me = stage + (size_t)a->h_stage_start[me] * C;
        if (to_owners) cudaCheck(cudaMemcpyAsync(stage_me, src_me, bytes, cudaMemcpyDeviceToDevice, stream));
        else cudaCheck(cudaMemcpyAsync(src_me, stage_me, bytes, cudaMemcpyDeviceToDevice, stream));
    }
}

/* Everything the host learns from this forward's routing: the per-peer row counts, the owner-side
 * grouping and the segment tables (uploaded to a->seg). Runs after the synchronisation. */
static void host_plan(MoeUnfusedActs *a, MoeUnfusedWork *w, cudaStream_t stream) {
    const MoeGpuDims *d = &w->d;
    const int ep = d->ep, El = d->E / d->ep, nseg = d->E, me = d->ep_rank;
    const int *pin_counts = w->pin_i + 1, *pin_recv = w->pin_i + 1 + d->E;
    memcpy(a->h_counts, pin_counts, (size_t)d->E * sizeof(int));
    memcpy(a->h_recv_counts, ep > 1 ? pin_recv : pin_counts, (size_t)d->E * sizeof(int));
    int send = 0, stage = 0;
    for (int p = 0; p < ep; p++) {
        int s = 0, r = 0;
        for (int el = 0; el < El; el++) {
            s += a->h_counts[p * El + el];
            r += a->h_recv_counts[p * El + el];
        }
        a->h_send_rows[p] = s;
        a->h_send_start[p] = send;
        a->h_recv_rows[p] = r;
        a->h_stage_start[p] = stage;
        send += s;
        stage += r;
    }
    if (a->h_send_rows[me] != a->h_recv_rows[me])
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "moe_unfused: rows to self %d != rows from self %d (internal)",
                 a->h_send_rows[me], a->h_recv_rows[me]);
    if ((long)stage > a->R_max)
        mokc_die(MOKC_EXIT_RUNTIME, "every rank must call the MoE layer with the same number of tokens",
                 "moe_unfused: %d rows arrived at this owner, more than the %ld it was sized for", stage, a->R_max);
    a->rows_in = stage;
    /* owner order: segment s = el * ep + p; source p's rows for local expert el follow its rows for
     * the experts before el in its staging block */
    int *owner_start = w->pin_i + 1 + 2 * d->E, *stage_start = owner_start + nseg + 1;
    int *next = mallocCheck((size_t)ep * sizeof(int));
    memcpy(next, a->h_stage_start, (size_t)ep * sizeof(int));
    int row = 0;
    for (int el = 0; el < El; el++) {
        a->h_recv_offset[el] = row;
        for (int p = 0; p < ep; p++) {
            const int s = el * ep + p, n = a->h_recv_counts[p * El + el];
            owner_start[s] = row;
            stage_start[s] = next[p];
            next[p] += n;
            row += n;
        }
    }
    free(next);
    a->h_recv_offset[El] = row;
    owner_start[nseg] = row;
    if (ep > 1)
        cudaCheck(cudaMemcpyAsync(a->seg, owner_start, (size_t)(2 * nseg + 1) * sizeof(int), cudaMemcpyHostToDevice,
                                  stream));
}

/* ------------------------------------------------------------------------------------------------
 * Forward
 * ---------------------------------------------------------------------------------------------- */

static void check_call(const MoeUnfusedActs *a, const MoeUnfusedWork *w, int N, const char *who) {
    const MoeGpuDims *x = &a->d, *y = &w->d;
    if (x->C != y->C || x->E != y->E || x->k != y->k || x->I != y->I || x->n_shared != y->n_shared ||
        x->sigmoid != y->sigmoid || x->norm_topk != y->norm_topk || x->scaling != y->scaling || x->ep != y->ep ||
        x->ep_rank != y->ep_rank)
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "%s: the activations and the work were created for different shapes", who);
    if (N < 0 || N > a->N_max || N > w->N_max)
        mokc_die(MOKC_EXIT_RUNTIME, "size the MoE buffers for the largest micro-batch",
                 "%s: %d tokens but the buffers hold %d", who, N, a->N_max < w->N_max ? a->N_max : w->N_max);
}

void moe_unfused_forward(float *y, const float *residual, MoeUnfusedActs *a, MoeUnfusedWork *w, const bf16_t *x,
                         const MoeGpuWeights *wt, const float *expert_bias, int N, cudaStream_t stream) {
    check_call(a, w, N, "moe_unfused_forward");
    const MoeGpuDims *d = &w->d;
    const int C = d->C, E = d->E, k = d->k, I = d->I, SI = d->n_shared * d->I, ep = d->ep, El = E / ep;
    const long nslots = (long)N * k;
    cublasCheck(cublasSetStream(w->blas, stream));

    /* 1. router and routing */
    moe_router_forward(w->logits, x, wt->router, N, C, E, w->router_scratch, stream);
    cudaCheck(cudaMemsetAsync(w->fail, 0, sizeof(int), stream));
    gpu_moe_route(a->scores, a->topk, a->gates, w->pnorm, w->fail, w->logits, expert_bias, N, E, k, d->sigmoid,
                  d->norm_topk, d->scaling, stream);
    /* 2. dispatch plan */
    gpu_moe_plan_count(w->chunk_counts, w->slot_rank, a->topk, nslots, E, stream);
    gpu_moe_plan_scan(w->chunk_counts, a->counts, a->stat_counts, a->expert_offset, nslots, E, stream);
    gpu_moe_plan_place(a->slot_row, a->row_slot, a->topk, w->slot_rank, w->chunk_counts, a->expert_offset, nslots, E,
                       stream);
    /* 3. aux statistic over the stats group */
    const int chunks = gpu_moe_aux_chunks(N);
    gpu_moe_aux_partial(w->aux_partial, a->scores, w->pnorm, N, E, stream);
    gpu_moe_aux_psum(w->psum, w->aux_partial, chunks, E, stream);
    if (w->comms.stats && w->stats_ranks > 1) {
        ncclCheck(ncclGroupStart());
        ncclCheck(ncclAllReduce(a->stat_counts, a->stat_counts, (size_t)E, ncclInt64, ncclSum, w->comms.stats, stream));
        ncclCheck(ncclAllReduce(w->psum, w->psum, (size_t)E, ncclFloat64, ncclSum, w->comms.stats, stream));
        ncclCheck(ncclGroupEnd());
    }
    gpu_moe_aux_loss(w->aux, w->psum, a->stat_counts, E, k, (double)N * w->stats_ranks, stream);
    /* 4. the peers' counts: recv_counts[p * El + el] = rows source p sends to my local expert el */
    if (ep > 1) {
        ncclCheck(ncclGroupStart());
        for (int p = 0; p < ep; p++) {
            if (p == d->ep_rank) continue;
            ncclCheck(ncclSend(a->counts + (size_t)p * El, (size_t)El, ncclInt32, p, w->comms.ep, stream));
            ncclCheck(ncclRecv(w->recv_counts + (size_t)p * El, (size_t)El, ncclInt32, p, w->comms.ep, stream));
        }
        ncclCheck(ncclGroupEnd());
        cudaCheck(cudaMemcpyAsync(w->recv_counts + (size_t)d->ep_rank * El, a->counts + (size_t)d->ep_rank * El,
                                  (size_t)El * sizeof(int), cudaMemcpyDeviceToDevice, stream));
    }
    /* 5. the one host synchronisation */
    cudaCheck(cudaMemcpyAsync(w->pin_i, w->fail, sizeof(int), cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaMemcpyAsync(w->pin_i + 1, a->counts, (size_t)E * sizeof(int), cudaMemcpyDeviceToHost, stream));
    if (ep > 1)
        cudaCheck(cudaMemcpyAsync(w->pin_i + 1 + E, w->recv_counts, (size_t)E * sizeof(int), cudaMemcpyDeviceToHost,
                                  stream));
    cudaCheck(cudaMemcpyAsync(w->pin_d, w->aux, sizeof(double), cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaStreamSynchronize(stream));
    if (w->pin_i[0])
        mokc_die(MOKC_EXIT_RUNTIME, "the router weights, the input or expert_bias contain NaN; lower the learning rate",
                 "moe_unfused_forward: top-%d selection found no candidate (non-finite router scores)", k);
    a->aux_loss = w->pin_d[0];
    a->N = N;
    host_plan(a, w, stream);

    /* 6. dispatch: rows in expert order, then (ep > 1) to the owners, regrouped by local expert */
    bf16_t *xe = ep > 1 ? w->xe : a->xr; /* ep == 1: the owner rows are the dispatched rows */
    gpu_moe_gather_rows(xe, x, a->row_slot, k, nslots, C, stream);
    if (ep > 1) {
        exchange_rows(w->xe, w->stage, a, w, 1, stream);
        gpu_moe_regroup_rows(a->xr, w->stage, a->seg, a->seg + E + 1, E, a->rows_in, C, 1, stream);
    }

    /* 7. experts over contiguous row ranges of each local expert */
    const size_t CI = (size_t)C * I;
    for (int el = 0; el < El; el++) {
        const int r0 = a->h_recv_offset[el], M = a->h_recv_offset[el + 1] - r0;
        if (M == 0) continue;
        gemm_rm_dynamic(w->blas, 0, 0, M, I, C, a->xr + (size_t)r0 * C, GEMM_BF16, wt->w_gate + el * CI, GEMM_BF16,
                        a->pre_gate + (size_t)r0 * I, GEMM_BF16, 1.0f, 0.0f);
        gemm_rm_dynamic(w->blas, 0, 0, M, I, C, a->xr + (size_t)r0 * C, GEMM_BF16, wt->w_up + el * CI, GEMM_BF16,
                        a->pre_up + (size_t)r0 * I, GEMM_BF16, 1.0f, 0.0f);
    }
    gpu_swiglu_forward(w->h, a->pre_gate, a->pre_up, (long)a->rows_in * I, stream);
    bf16_t *out = ep > 1 ? w->rows_out : a->ye;
    for (int el = 0; el < El; el++) {
        const int r0 = a->h_recv_offset[el], M = a->h_recv_offset[el + 1] - r0;
        if (M == 0) continue;
        gemm_rm_dynamic(w->blas, 0, 0, M, C, I, w->h + (size_t)r0 * I, GEMM_BF16, wt->w_down + el * CI, GEMM_BF16,
                        out + (size_t)r0 * C, GEMM_BF16, 1.0f, 0.0f);
    }

    /* 8. outputs back to their sources, in their expert order */
    if (ep > 1) {
        gpu_moe_regroup_rows(w->rows_out, w->stage, a->seg, a->seg + E + 1, E, a->rows_in, C, 0, stream);
        exchange_rows(a->ye, w->stage, a, w, 0, stream);
    }

    /* 9. shared experts, 10. combine */
    moe_shared_forward(w->blas, y, a->s_gate, a->s_up, x, wt, &w->shared, N, C, SI, stream);
    gpu_moe_combine(y, a->ye, a->gates, a->slot_row, N, k, C, SI > 0, residual, stream);
}

/* ------------------------------------------------------------------------------------------------
 * Backward
 * ---------------------------------------------------------------------------------------------- */

void moe_unfused_backward(float *dx, const MoeGpuGrads *g, const float *dy, double daux, MoeUnfusedActs *a,
                          MoeUnfusedWork *w, const bf16_t *x, const MoeGpuWeights *wt, int N, cudaStream_t stream) {
    check_call(a, w, N, "moe_unfused_backward");
    if (g->sq || g->idle_unwritten)
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "moe_unfused_backward: the experts' squares and idle experts left unwritten "
                 "(MoeGpuGrads.sq, idle_unwritten) are the megakernel's (internal)");
    if (a->N != N)
        mokc_die(MOKC_EXIT_RUNTIME, "call the MoE backward after its forward, with the same tokens",
                 "moe_unfused_backward: %d tokens but the last forward had %d", N, a->N);
    const MoeGpuDims *d = &w->d;
    const int C = d->C, E = d->E, k = d->k, I = d->I, SI = d->n_shared * d->I, ep = d->ep, El = E / ep;
    cublasCheck(cublasSetStream(w->blas, stream));

    /* 4'. combine: dye rows in expert order, dgates; dy's bf16 rows for the shared experts */
    gpu_moe_combine_backward(w->dye, SI > 0 ? w->dy_bf16 : NULL, w->dgates, dy, a->ye, a->gates, a->slot_row, N, k, C,
                             stream);

    /* shared experts */
    const int dx_written =
        moe_shared_backward(w->blas, dx, g, w->dy_bf16, x, wt, a->s_gate, a->s_up, &w->shared, N, C, SI, stream);

    /* dy rows to the owners */
    bf16_t *dyr = w->dye;
    if (ep > 1) {
        exchange_rows(w->dye, w->stage, a, w, 1, stream);
        gpu_moe_regroup_rows(w->dyr, w->stage, a->seg, a->seg + E + 1, E, a->rows_in, C, 1, stream);
        dyr = w->dyr;
    }

    /* 3'. experts: dh and dW_down, SwiGLU backward, dW_gate / dW_up and dx rows */
    const size_t CI = (size_t)C * I;
    const float beta_w = g->overwrite_experts ? 0.0f : 1.0f;
    gpu_swiglu_forward(w->h, a->pre_gate, a->pre_up, (long)a->rows_in * I, stream);
    for (int el = 0; el < El; el++) {
        const int r0 = a->h_recv_offset[el], M = a->h_recv_offset[el + 1] - r0;
        if (M == 0 && g->overwrite_experts) {
            float *zero[3] = {g->w_gate + el * CI, g->w_up + el * CI, g->w_down + el * CI};
            for (int t = 0; t < 3; t++) cudaCheck(cudaMemsetAsync(zero[t], 0, CI * sizeof(float), stream));
        }
        if (M == 0) continue;
        gemm_rm_dynamic(w->blas, 0, 1, M, I, C, dyr + (size_t)r0 * C, GEMM_BF16, wt->w_down + el * CI, GEMM_BF16,
                        w->dh + (size_t)r0 * I, GEMM_F32, 1.0f, 0.0f);
        gemm_rm_dynamic(w->blas, 1, 0, I, C, M, w->h + (size_t)r0 * I, GEMM_BF16, dyr + (size_t)r0 * C, GEMM_BF16,
                        g->w_down + el * CI, GEMM_F32, 1.0f, beta_w);
    }
    gpu_swiglu_backward(w->dpg, w->dpu, w->dh, a->pre_gate, a->pre_up, (long)a->rows_in * I, stream);
    for (int el = 0; el < El; el++) {
        const int r0 = a->h_recv_offset[el], M = a->h_recv_offset[el + 1] - r0;
        if (M == 0) continue;
        const bf16_t *xr = a->xr + (size_t)r0 * C, *dpg = w->dpg + (size_t)r0 * I, *dpu = w->dpu + (size_t)r0 * I;
        gemm_rm_dynamic(w->blas, 1, 0, C, I, M, xr, GEMM_BF16, dpg, GEMM_BF16, g->w_gate + el * CI, GEMM_F32, 1.0f,
                        beta_w);
        gemm_rm_dynamic(w->blas, 1, 0, C, I, M, xr, GEMM_BF16, dpu, GEMM_BF16, g->w_up + el * CI, GEMM_F32, 1.0f,
                        beta_w);
        float *dxr = w->dxr + (size_t)r0 * C;
        gemm_rm_dynamic(w->blas, 0, 1, M, C, I, dpg, GEMM_BF16, wt->w_gate + el * CI, GEMM_BF16, dxr, GEMM_F32, 1.0f, 0.0f);
        gemm_rm_dynamic(w->blas, 0, 1, M, C, I, dpu, GEMM_BF16, wt->w_up + el * CI, GEMM_BF16, dxr, GEMM_F32, 1.0f, 1.0f);
    }

    /* dx rows (bf16) back to their sources, in their expert order: w->xe */
    if (ep > 1) {
        gpu_cast_f32_to_bf16(w->rows_out, w->dxr, (long)a->rows_in * C, stream);
        gpu_moe_regroup_rows(w->rows_out, w->stage, a->seg, a->seg + E + 1, E, a->rows_in, C, 0, stream);
        exchange_rows(w->xe, w->stage, a, w, 0, stream);
    } else {
        gpu_cast_f32_to_bf16(w->xe, w->dxr, (long)a->rows_in * C, stream);
    }

    /* 2'. dx (+)= sum over j of the token's rows: added to the shared experts' dx where they wrote it */
    gpu_moe_scatter_rows(dx, w->xe, a->slot_row, N, k, C, dx_written, stream);

    /* 1'. router: dlogits from the gates and the aux loss, then dW_router and dx (moe_router.h) */
    if (N > 0) {
        float *dlogits = w->logits;
        gpu_moe_route_backward(dlogits, w->dgates, a->scores, a->topk, a->stat_counts, daux,
                               (double)N * w->stats_ranks, N, E, k, d->sigmoid, d->norm_topk, d->scaling, stream);
        moe_router_backward(g->router, dx, dlogits, x, wt->router, N, C, E, w->router_scratch, stream);
    }
}
