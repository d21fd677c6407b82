/*
 * The megakernel's forward state as the unfused backward's saved activations (see
 * moe_mok_bridge.h): device copies, the plan placement and the ye permutation on the stream, then
 * one synchronisation and the host plan.
 */
#include "gpu/moe_mok_bridge.h"


#include "../../kernels/moe_plan.h"
#include "../../kernels/moe_rows.h"
#include "common.h"
#include "gpu/check.h"

static int same_dims(const MoeGpuDims *x, const MoeGpuDims *y) {
    return x->C == y->C && x->E == y->E && x->k == y->k && x->I == y->I && x->n_shared == y->n_shared &&
           x->sigmoid == y->sigmoid && x->norm_topk == y->norm_topk && x->scaling == y->scaling && x->ep == y->ep &&
           x->ep_rank == y->ep_rank;
}

static void copy(void *dst, const void *src, size_t bytes, cudaStream_t stream) {
    if (bytes) cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
}

void moe_mok_bridge(MoeUnfusedActs *a, MoeUnfusedWork *w, MoeMok *m, cudaStream_t stream) {
    const MoeGpuDims *d = &m->d;
    if (!same_dims(&a->d, d) || !same_dims(&w->d, d))
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "moe_mok_bridge: the activations, the work and the megakernel layer were "
                 "created for different shapes (internal)");
    const int N = m->N;
    if (N < 0 || N > a->N_max)
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "moe_mok_bridge: the last forward had %d tokens, the activations hold %d "
                 "(internal)", N, a->N_max);
    const int C = d->C, E = d->E, k = d->k, I = d->I, SI = d->n_shared * d->I, ep = d->ep, El = E / ep;
    const long nslots = (long)N * k;

    /* routing and this rank's plan */
    copy(a->scores, m->scores, (size_t)N * E * sizeof(float), stream);
    copy(a->topk, m->topk, (size_t)nslots * sizeof(int), stream);
    copy(a->gates, m->gates, (size_t)nslots * sizeof(float), stream);
    copy(a->counts, m->counts, (size_t)E * sizeof(int), stream);
    copy(a->stat_counts, m->stat_counts, (size_t)E * sizeof(long long), stream);
    copy(a->expert_offset, m->expert_offset, (size_t)(E + 1) * sizeof(int), stream);
    gpu_moe_plan_place(a->slot_row, a->row_slot, m->topk, m->slot_rank, m->chunk_counts, m->expert_offset, nslots, E,
                       stream);
    /* expert outputs: combine slots (token, j) -> expert order */
    gpu_moe_gather_rows(a->ye, m->win_y, a->row_slot, 1, nslots, C, stream);
    copy(a->s_gate, m->s_gate, (size_t)N * SI * sizeof(bf16_t), stream);
    copy(a->s_up, m->s_up, (size_t)N * SI * sizeof(bf16_t), stream);

    /* recv_counts[p * El + el] = rows source p sent to my local expert el */
    if (ep > 1) {
        ncclCheck(ncclGroupStart());
        for (int p = 0; p < ep; p++) {
            if (p == d->ep_rank) continue;
            ncclCheck(ncclSend(a->counts + (size_t)p * El, (size_t)El, ncclInt32, p, w->comms.ep, stream));
            ncclCheck(ncclRecv(w->recv_counts + (size_t)p * El, (size_t)El, ncclInt32, p, w->comms.ep, stream));
        }
        ncclCheck(ncclGroupEnd());
        copy(w->recv_counts + (size_t)d->ep_rank * El, a->counts + (size_t)d->ep_rank * El, (size_t)El * sizeof(int),
             stream);
        cudaCheck(cudaMemcpyAsync(w->pin_i + 1 + E, w->recv_counts, (size_t)E * sizeof(int), cudaMemcpyDeviceToHost,
                                  stream));
    }
    cudaCheck(cudaMemcpyAsync(w->pin_i + 1, a->counts, (size_t)E * sizeof(int), cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaMemcpyAsync(w->pin_d, m->aux, sizeof(double), cudaMemcpyDeviceToHost, stream));

    /* the one synchronisation */
    const long rows = moe_mok_rows_in(m, stream);
    a->aux_loss = w->pin_d[0];
    a->N = N;
    moe_unfused_host_plan(a, w, stream);
    if (rows != a->rows_in)
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "moe_mok_bridge: the megakernel received %ld rows but the counts say %d "
                 "(internal)", rows, a->rows_in);

    /* owner-side rows, already in the unfused owner order */
    copy(a->xr, m->xr, (size_t)rows * C * sizeof(bf16_t), stream);
    copy(a->pre_gate, m->pre_gate, (size_t)rows * I * sizeof(bf16_t), stream);
    copy(a->pre_up, m->pre_up, (size_t)rows * I * sizeof(bf16_t), stream);
}
