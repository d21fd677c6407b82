/*
 * AdamW's updates of the routed experts no token of a step chose, owed until their state is read (adamw.h:
 * gpu_adamw's `updated`, gpu_adamw_catch_up). An idle expert's gradient is zeros, so its update depends on nothing
 * but its own masters and moments and the step's constants: replayed when a forward routes tokens to it
 * (moe_mok_forward, once it knows its experts' rows) or when the whole state is read (a checkpoint, a download), in
 * the same float operations, it leaves the bits the step-by-step updates would have. An expert idle for c steps then
 * costs one pass over its state (16 bytes a parameter with split masters and bf16 moments) and c calls' arithmetic
 * in registers, about half what c passes cost (docs/perf-notes.md, s42).
 */
#ifndef MOKC_GPU_EXPERTS_DEFERRED_H
#define MOKC_GPU_EXPERTS_DEFERRED_H

#include <cuda_runtime.h>

#include "../../kernels/adamw.h"

enum { DEFERRED_TENSORS = 3 }; /* a layer's w_gate, w_up, w_down */

typedef struct ExpertsDeferred {
    int layers, El;       /* MoE layers, local experts */
    long per;             /* a tensor's elements an expert */
    AdamWTensor *t;       /* [layers][DEFERRED_TENSORS] */
    int *updated;         /* (layers, El): the AdamW call each expert's state holds, counted since the last reset */
    int *owed;            /* gpu_adamw_owed's list */
    float *sched;         /* (default cap + 1, 3): each call's (lr, ic1, ic2), gpu_adamw_record */
    int calls, cap;       /* calls since the last reset; at cap the next call settles and resets first */
    int state_bf16;
    double beta1, beta2, eps;
} ExpertsDeferred;

/* Nothing owed yet; the tensors (x->t) are the caller's to fill. The optimizer's settings are fixed from here (as
 * the run's are). The call count lives on the host and is baked into each launch: one stream, no graph capture. */
void experts_deferred_init(ExpertsDeferred *x, int layers, int El, long per, int state_bf16, double beta1,
                           double beta2, double eps, cudaStream_t stream);
void experts_deferred_free(ExpertsDeferred *x);
/* Tests: settle every `calls` calls (1 .. the default; else the default), from the next reset. */
void experts_deferred_settle_every(ExpertsDeferred *x, int calls);
/* The state was replaced (uploaded, initialised): nothing is owed, calls count from 0. */
void experts_deferred_reset(ExpertsDeferred *x, cudaStream_t stream);
/* Before an AdamW call with these lr and 1-based step: records its constants and returns its call number, for
 * gpu_adamw's `call` with experts_deferred_updated(layer). When the table is full, what is owed is paid first. */
int experts_deferred_call(ExpertsDeferred *x, double lr, long t_step, cudaStream_t stream);
int *experts_deferred_updated(const ExpertsDeferred *x, int layer);
/* Brings layer's experts with rows up to date: rows_at (El + 1) offsets, expert el's rows at [el, el + 1). */
void experts_deferred_catch_up(const ExpertsDeferred *x, int layer, const int *rows_at, cudaStream_t stream);
/* Brings every expert up to date (before the state is read whole). */
void experts_deferred_settle(const ExpertsDeferred *x, cudaStream_t stream);

#endif
