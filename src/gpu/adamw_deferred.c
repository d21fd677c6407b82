#include "gpu/experts_deferred.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

/* Calls between two settlements: a longer run settles every expert once every so many steps. Every owed call is
 * replayed once whenever it is, so this bounds the bursts, not the work: a catch-up of an expert owing all of them
 * (≈ 2 ms at mokc-small's sizes, ≈ 8 µs a call) that an EP peer's megakernel waits for, and a settlement's stall. */
enum { DEFERRED_CALLS = 256 };

void experts_deferred_reset(ExpertsDeferred *x, cudaStream_t stream) {
    cudaCheck(cudaMemsetAsync(x->updated, 0, sizeof(int) * (size_t)x->layers * x->El, stream));
    x->calls = 0;
}

void experts_deferred_init(ExpertsDeferred *x, int layers, int El, long per, int state_bf16, double beta1,
                           double beta2, double eps, cudaStream_t stream) {
    memset(x, 0, sizeof *x);
    x->layers = layers, x->El = El, x->per = per, x->cap = DEFERRED_CALLS;
    x->state_bf16 = state_bf16, x->beta1 = beta1, x->beta2 = beta2, x->eps = eps;
    x->t = callocCheck((size_t)layers * DEFERRED_TENSORS, sizeof(AdamWTensor));
    cudaCheck(cudaMalloc((void **)&x->updated, sizeof(int) * (size_t)layers * El));
    cudaCheck(cudaMalloc((void **)&x->owed, sizeof(int) * (1 + 2 * (size_t)El)));
    cudaCheck(cudaMalloc((void **)&x->sched, sizeof(float) * 3 * (size_t)(DEFERRED_CALLS + 1)));
    experts_deferred_reset(x, stream);
}

void experts_deferred_settle_every(ExpertsDeferred *x, int calls) {
    x->cap = calls >= 1 && calls <= DEFERRED_CALLS ? calls : DEFERRED_CALLS;
}

void experts_deferred_free(ExpertsDeferred *x) {
    free(x->t);
    cudaCheck(cudaFree(x->updated));
    cudaCheck(cudaFree(x->owed));
    cudaCheck(cudaFree(x->sched));
    memset(x, 0, sizeof *x);
}

int *experts_deferred_updated(const ExpertsDeferred *x, int layer) { return x->updated + (size_t)layer * x->El; }

void experts_deferred_catch_up(const ExpertsDeferred *x, int layer, const int *rows_at, cudaStream_t stream) {
    gpu_adamw_owed(x->owed, experts_deferred_updated(x, layer), rows_at, x->El, x->calls, stream);
    gpu_adamw_catch_up(x->t + (size_t)layer * DEFERRED_TENSORS, DEFERRED_TENSORS, x->state_bf16, x->per, x->owed,
                       x->calls, x->sched, x->beta1, x->beta2, x->eps, stream);
}

void experts_deferred_settle(const ExpertsDeferred *x, cudaStream_t stream) {
    for (int l = 0; l < x->layers; l++) experts_deferred_catch_up(x, l, NULL, stream);
}

int experts_deferred_call(ExpertsDeferred *x, double lr, long t_step, cudaStream_t stream) {
    if (x->calls == x->cap) {
        experts_deferred_settle(x, stream);
        experts_deferred_reset(x, stream);
    }
    x->calls++;
    gpu_adamw_record(x->sched, x->calls, lr, x->beta1, x->beta2, t_step, stream);
    return x->calls;
}
