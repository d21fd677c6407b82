/*
 * AdamW's updates of the parts of the state a step left with a zero gradient, owed until the part is read (adamw.h:
 * gpu_adamw's `updated`, gpu_adamw_catch_up, gpu_adamw_rows). Such a part's update depends on nothing but its own
 * masters and moments and the step's constants: replayed in the same float operations before it is read, it leaves
 * the bits the step-by-step updates would have. A part idle for c steps then costs one pass over its state (16 to 22
 * bytes a parameter) and c calls' arithmetic in registers, about half what c passes cost (docs/perf-notes.md, s42).
 * Two kinds of parts, each optional:
 * - the routed experts no token of a step chose (blocks of an MoE layer's w_gate, w_up, w_down): caught up by the
 *   megakernel's forward once it knows its experts' rows (moe_mok_forward);
 * - the rows of an embedding table untied from the LM head that no token of the step used on any rank: a forward
 *   catches up the rows of its tokens before the embedding reads them, and AdamW updates the step's rows alone.
 * A read of the whole state (a checkpoint, a download) settles every part.
 */
#ifndef MOKC_GPU_ADAMW_DEFERRED_H
#define MOKC_GPU_ADAMW_DEFERRED_H

#include <cuda_runtime.h>

#include "../../kernels/adamw.h"

enum { DEFERRED_TENSORS = 3 }; /* a layer's w_gate, w_up, w_down */

typedef struct AdamWDeferred {
    /* routed experts (layers 0: none deferred) */
    int layers, El;       /* MoE layers, local experts */
    long per;             /* a tensor's elements an expert */
    AdamWTensor *t;       /* [layers][DEFERRED_TENSORS] */
    int *updated;         /* (layers, El): the AdamW call each expert's state holds, counted since the last reset */
    int *owed;            /* gpu_adamw_owed's list */
    /* embedding table rows (rows 0: none deferred) */
    long rows, row_n;     /* the table's rows and their elements */
    AdamWTensor table;
    int *row_updated;     /* (rows): the AdamW call each row's state holds */
    /* the calls */
    float *sched;         /* (default cap + 1, 3): each call's (lr, ic1, ic2), gpu_adamw_record */
    int calls, cap;       /* calls since the last reset; at cap the next call settles and resets first */
    int state_bf16;
    double beta1, beta2, eps;
} AdamWDeferred;

/* Nothing deferred yet; adamw_deferred_experts and adamw_deferred_table add the parts. The optimizer's settings are
 * fixed from here (as the run's are). The call count lives on the host and is baked into each launch: one stream, no
 * graph capture. */
void adamw_deferred_init(AdamWDeferred *x, int state_bf16, double beta1, double beta2, double eps);
/* The routed experts of `layers` MoE layers, El local experts each, `per` elements an expert and tensor; their
 * tensors (x->t) are the caller's to fill. */
void adamw_deferred_experts(AdamWDeferred *x, int layers, int El, long per);
/* An embedding table of `rows` rows of row_n elements. */
void adamw_deferred_table(AdamWDeferred *x, AdamWTensor table, long rows, long row_n);
void adamw_deferred_free(AdamWDeferred *x);
/* Tests: settle every `calls` calls (1 .. the default; else the default), from the next reset. */
void adamw_deferred_settle_every(AdamWDeferred *x, int calls);
/* The state was replaced (uploaded, initialised): nothing is owed, calls count from 0. */
void adamw_deferred_reset(AdamWDeferred *x, cudaStream_t stream);
/* Before an AdamW call with these lr and 1-based step: records its constants and returns its call number, for
 * gpu_adamw's `call` with adamw_deferred_updated(layer) and for adamw_deferred_update_rows. When the table is full,
 * what is owed is paid first. */
int adamw_deferred_call(AdamWDeferred *x, double lr, long t_step, cudaStream_t stream);
int *adamw_deferred_updated(const AdamWDeferred *x, int layer);
/* Brings layer's experts with rows up to date: rows_at (El + 1) offsets, expert el's rows at [el, el + 1). */
void adamw_deferred_catch_up(const AdamWDeferred *x, int layer, const int *rows_at, cudaStream_t stream);
/* Brings the table's rows ids (device, n distinct; NULL: all rows) up to date. */
void adamw_deferred_catch_up_rows(const AdamWDeferred *x, const int *ids, long n, cudaStream_t stream);
/* The table's part of the AdamW call `call` (adamw_deferred_call's): the rows ids (device, n distinct; NULL: all
 * rows), those whose gradient may be nonzero, brought up to date and updated with grads (the table's, fp32) at
 * grad_scale; the other rows' updates are owed. */
void adamw_deferred_update_rows(const AdamWDeferred *x, const int *ids, long n, const float *grads,
                                double grad_scale, int call, cudaStream_t stream);
/* Brings every part up to date (before the state is read whole). */
void adamw_deferred_settle(const AdamWDeferred *x, cudaStream_t stream);

#endif
