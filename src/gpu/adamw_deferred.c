#include "gpu/adamw_deferred.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

/* Calls between two settlements: a longer run settles every part once every so many steps. Every owed call is
 * replayed once whenever it is, so this bounds the bursts, not the work: a catch-up of an expert owing all of them
 * (≈ 2 ms at mokc-small's sizes, ≈ 8 µs a call) that an EP peer's megakernel waits for, and a settlement's stall. */
enum { DEFERRED_CALLS = 256 };

void adamw_deferred_reset(AdamWDeferred *x, cudaStream_t stream) {
    if (x->layers) cudaCheck(cudaMemsetAsync(x->updated, 0, sizeof(int) * (size_t)x->layers * x->El, stream));
    if (x->rows) cudaCheck(cudaMemsetAsync(x->row_updated, 0, sizeof(int) * (size_t)x->rows, stream));
    x->calls = 0;
}

void adamw_deferred_init(AdamWDeferred *x, int state_bf16, double beta1, double beta2, double eps) {
    memset(x, 0, sizeof *x);
    x->cap = DEFERRED_CALLS;
    x->state_bf16 = state_bf16, x->beta1 = beta1, x->beta2 = beta2, x->eps = eps;
    cudaCheck(cudaMalloc((void **)&x->sched, sizeof(float) * 3 * (size_t)(DEFERRED_CALLS + 1)));
}

void adamw_deferred_experts(AdamWDeferred *x, int layers, int El, long per) {
    x->layers = layers, x->El = El, x->per = per;
    x->t = callocCheck((size_t)layers * DEFERRED_TENSORS, sizeof(AdamWTensor));
    cudaCheck(cudaMalloc((void **)&x->updated, sizeof(int) * (size_t)layers * El));
    cudaCheck(cudaMalloc((void **)&x->owed, sizeof(int) * (1 + 2 * (size_t)El)));
}

void adamw_deferred_table(AdamWDeferred *x, AdamWTensor table, long rows, long row_n) {
    x->table = table, x->rows = rows, x->row_n = row_n;
    cudaCheck(cudaMalloc((void **)&x->row_updated, sizeof(int) * (size_t)rows));
}

void adamw_deferred_settle_every(AdamWDeferred *x, int calls) {
    x->cap = calls >= 1 && calls <= DEFERRED_CALLS ? calls : DEFERRED_CALLS;
}

void adamw_deferred_free(AdamWDeferred *x) {
    free(x->t);
    cudaCheck(cudaFree(x->updated));
    cudaCheck(cudaFree(x->owed));
    cudaCheck(cudaFree(x->row_updated));
    cudaCheck(cudaFree(x->sched));
    memset(x, 0, sizeof *x);
}

int *adamw_deferred_updated(const AdamWDeferred *x, int layer) { return x->updated + (size_t)layer * x->El; }

void adamw_deferred_catch_up(const AdamWDeferred *x, int layer, const int *rows_at, cudaStream_t stream) {
    gpu_adamw_owed(x->owed, adamw_deferred_updated(x, layer), rows_at, x->El, x->calls, stream);
    gpu_adamw_catch_up(x->t + (size_t)layer * DEFERRED_TENSORS, DEFERRED_TENSORS, x->state_bf16, x->per, x->owed,
                       x->calls, x->sched, x->beta1, x->beta2, x->eps, stream);
}

/* The table's rows ids (NULL: all) up to call upto, then with grads the call after it. */
static void rows_to(const AdamWDeferred *x, const int *ids, long n, int upto, const float *grads, double grad_scale,
                    cudaStream_t stream) {
    gpu_adamw_rows(&x->table, x->state_bf16, x->row_n, ids, ids ? n : x->rows, x->row_updated, upto, grads,
                   grad_scale, x->sched, x->beta1, x->beta2, x->eps, stream);
}

void adamw_deferred_catch_up_rows(const AdamWDeferred *x, const int *ids, long n, cudaStream_t stream) {
    if (x->rows) rows_to(x, ids, n, x->calls, NULL, 1.0, stream);
}

void adamw_deferred_update_rows(const AdamWDeferred *x, const int *ids, long n, const float *grads,
                                double grad_scale, int call, cudaStream_t stream) {
    rows_to(x, ids, n, call - 1, grads, grad_scale, stream);
}

void adamw_deferred_settle(const AdamWDeferred *x, cudaStream_t stream) {
    for (int l = 0; l < x->layers; l++) adamw_deferred_catch_up(x, l, NULL, stream);
    adamw_deferred_catch_up_rows(x, NULL, 0, stream);
}

int adamw_deferred_call(AdamWDeferred *x, double lr, long t_step, cudaStream_t stream) {
    if (x->calls == x->cap) {
        adamw_deferred_settle(x, stream);
        adamw_deferred_reset(x, stream);
    }
    x->calls++;
    gpu_adamw_record(x->sched, x->calls, lr, x->beta1, x->beta2, t_step, stream);
    return x->calls;
}
