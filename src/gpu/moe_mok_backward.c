/*
 * The MoE layer's backward through the megakernel (contract in moe_mok.h: moe_mok_backward,
 * protocol in kernels/mok/mok.h: MokBwdParams): the launches in stream order. The numerics are the
 * unfused backward's (src/gpu/moe_unfused.c): dy rounded to bf16, scaled by the slot's gate and
 * rounded again (the owners scale the rows as they pull them),
 * dh in fp32 into the SwiGLU backward, bf16 dpg and dpu, fp32 dx rows rounded to bf16 for the
 * trip back, fp32 weight gradients, the router's gradient in fp32 from bf16 operands.
 */
#include <string.h>

#include "../../kernels/cast.h"
#include "../../kernels/moe_combine.h"
#include "../../kernels/moe_route.h"
#include "common.h"
#include "gpu/check.h"
#include "gpu/moe_mok.h"
#include "gpu/moe_router.h"

void moe_mok_backward(float *dx, const MoeGpuGrads *g, const float *dy, double daux, MoeMokSaved *sv, MoeMok *m,
                      const bf16_t *x, const MoeGpuWeights *wt, int N, cudaStream_t stream) {
    const MoeGpuDims *d = &m->d;
    if (m->tile != MOK_TILE_WGMMA)
        mokc_die(MOKC_EXIT_RUNTIME, "use moe_impl \"unfused\" on this GPU and build",
                 "moe_mok_backward: the megakernel's backward exists for the wgmma tile (sm_90a) only");
    if (sv->N != N)
        mokc_die(MOKC_EXIT_RUNTIME, "call the MoE backward after its forward, with the same tokens",
                 "moe_mok_backward: %d tokens but the saved forward had %d", N, sv->N);
    const int C = d->C, E = d->E, k = d->k;
    const MokState *st = &sv->st;
    bf16_t *win_y = moe_mok_win_y(m, sv);
    cublasCheck(cublasSetStream(m->blas, stream));
    moe_mok_phase_mark(m, MOK_FWD_MARKS + 0, stream);

    /* dy's bf16 rows and the slots' gates into the window (the owners pull and scale them); the
     * gate gradients from the expert outputs still in this layer's combine slots */
    gpu_moe_combine_backward(NULL, m->win_dy, m->dgates, dy, win_y, st->gates, m->slot_iota, N, k, C, stream);
    if (N > 0)
        cudaCheck(cudaMemcpyAsync(m->win_gates, st->gates, (size_t)N * k * sizeof(float), cudaMemcpyDeviceToDevice,
                                  stream));
    moe_mok_phase_mark(m, MOK_FWD_MARKS + 1, stream);
    const int dx_written = moe_shared_backward(m->blas, dx, g, m->win_dy, x, wt, st->s_gate, st->s_up, &m->shared,
                                               N, C, d->n_shared * d->I, stream);
    /* every rank's dy rows and gates are written and its gate gradients read its combine slots:
     * the kernel may pull the former and push dx rows over the latter */
    moe_mok_ep_barrier(m, stream);

    MokBwdParams p;
    memset(&p, 0, sizeof p);
    p.dyr = m->dyr;
    p.dpg = m->dpg;
    p.dpu = m->dpu;
    p.xr = st->xr;
    p.h = st->h;
    p.pre_gate = st->pre_gate;
    p.pre_up = st->pre_up;
    p.w_gate = wt->w_gate;
    p.w_up = wt->w_up;
    p.w_down = wt->w_down;
    p.g_gate = g->w_gate;
    p.g_up = g->w_up;
    p.g_down = g->w_down;
    p.peer_base = mok_symm_peer_table(m->symm);
    p.dy_off = m->win.dy_off;
    p.gate_off = m->win.gate_off;
    p.y_off = moe_mok_y_off(m, sv);
    p.row_slot_all = st->row_slot_all;
    p.expert_offset_all = st->eo_all;
    p.mt_start = st->mt_start;
    p.total_mt = st->total_mt;
    p.arrive = m->arrive;
    p.dpg_done = m->gu_done;
    p.ticket = m->ticket;
    p.err = m->err_dev;
    p.budget_ns = (long long)(m->budget_s * 1e9);
    p.R_max = m->R_max;
    p.e0 = d->ep_rank * m->El;
    p.El = m->El;
    p.NK = N * k;
    p.k = k;
    p.C = C;
    p.I = d->I;
    p.mt_max = m->mt_max;
    p.tile_m = mok_tile_m(m->tile);
    p.n_comm = m->n_comm;
    p.skip_dispatch = m->skip_dispatch;
    p.overwrite = g->overwrite_experts;
    p.rows_before = g->idle_unwritten ? sv->rows_step : NULL;
    p.sq = g->sq;
    p.trace = m->trace;
    moe_mok_phase_mark(m, MOK_FWD_MARKS + 2, stream);
    mok_backward_launch(&p, m->grid, stream);
    mok_expert_sq_rest(g->sq, sv->rows_step, st->eo_all, p.e0, m->El, g->w_gate, g->w_up, g->w_down, C, d->I,
                       g->overwrite_experts, g->idle_unwritten, stream);
    moe_mok_phase_mark(m, MOK_FWD_MARKS + 3, stream);
    moe_mok_ep_barrier(m, stream); /* every dx row has landed in its source's slots */
    moe_mok_phase_mark(m, MOK_FWD_MARKS + 4, stream);

    gpu_moe_scatter_rows(dx, win_y, m->slot_iota, N, k, C, dx_written, stream); /* onto the shared experts' dx */
    moe_mok_phase_mark(m, MOK_FWD_MARKS + 5, stream);
    if (N > 0)
        gpu_moe_route_backward(m->logits, m->dgates, st->scores, st->topk, st->stat_counts, daux,
                               (double)N * m->stats_ranks, N, E, k, d->sigmoid, d->norm_topk, d->scaling, stream);
    moe_mok_phase_mark(m, MOK_FWD_MARKS + 6, stream);
    moe_router_backward(g->router, dx, m->logits, x, wt->router, N, C, E, m->router_scratch, stream);
    moe_mok_phase_mark(m, MOK_FWD_MARKS + 7, stream);
}
