/*
 * Fused AdamW on the GPU over a flat range of parameters: exactly the per-element math of
 * src/optim.c adamw_step (same float operations in the same order, no FMA contraction, IEEE
 * division and square root), plus the bf16 copy of the updated weights written in the same pass.
 * Elementwise, so deterministic; matches the CPU to the last bit in practice (tests hold it to 1e-6).
 */
#ifndef MOKC_KERNELS_ADAMW_H
#define MOKC_KERNELS_ADAMW_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A tensor's optimizer state. */
typedef struct {
    float *params;        /* fp32 masters (a bf16 copy in params_bf16 if not NULL), or NULL: split masters */
    bf16_t *params_bf16;
    int16_t *params_lo;
    void *m, *v;
    double weight_decay;  /* the tensor's (0 if not decayed) */
} AdamWTensor;

/* For i < n, with the host-side constants of adamw_step
 *   b1 = (float)beta1, b2 = (float)beta2, ic1 = (float)(1 / (1 - beta1^t_step)),
 *   ic2 = (float)(1 / (1 - beta2^t_step)) (the bias corrections' reciprocals, in double),
 *   lr = (float)lr, wd = (float)t->weight_decay, gs = (float)grad_scale, eps = (float)eps, and t's
 *   params, params_bf16, params_lo, m, v:
 *     g = grads[i] * gs
 *     m[i] = b1 * m[i] + (1 - b1) * g
 *     v[i] = b2 * v[i] + (1 - b2) * g * g
 *     params[i] -= lr * ((m[i] * ic1) / (sqrtf(v[i] * ic2) + eps) + wd * params[i])
 *     params_bf16[i] = bf16(params[i])          (skipped when params_bf16 == NULL)
 * params NULL: the masters are the pairs (params_bf16, params_lo) of master_split.h, both required, read and
 * written: joined to the fp32 value before the update and split after it (the same fp32 arithmetic;
 * params_bf16's rounding is then the pair's, ties away from zero). Else params_lo is not read.
 * state_bf16: m and v are bf16 (n), each rounded to bf16 (nearest, ties to even) after its update and the
 * step taken with the rounded values (adamw_step with optimizer_state bf16); else fp32 (n).
 * live: NULL, or (n / block_n, at most 65535) flags of blocks of block_n elements: where live[b] is 0 the gradient
 * of block b is zeros and is not read (an idle expert's, MoeGpuGrads.idle_unwritten; the same bits as zeros read).
 * updated (needs live): NULL, or (n / block_n) call numbers: then a block with live[b] 0 is not touched at all, its
 * update owed until gpu_adamw_catch_up makes it good, and a live block sets updated[b] = call (its state holds the
 * updates of calls up to `call`; gpu_adamw_record(call) must hold this call's constants before a catch-up replays it).
 * The replay's bits are the eager update's for a finite positive grad_scale (a zero gradient scales to +0).
 * params fp32 (n) or params_bf16 bf16 and params_lo int16 (n), m, v updated in place; grads fp32 (n), read only;
 * with params, params_bf16 bf16 (n) overwritten. t_step is the 1-based step count. t->weight_decay: the config's
 * value for decayed tensors (ParamInfo.decay), 0 for the others: launch per tensor, or per run of tensors with the
 * same decay flag. n == 0 launches nothing.
 * Alignment: none required; with params, grads, fp32 m, v 16-byte aligned, bf16 m, v, params_bf16 and params_lo
 * 8-byte aligned the kernel moves 4 elements per access (flat-buffer offsets that are multiples of 4 elements),
 * otherwise 1 (same results). */
void gpu_adamw(const AdamWTensor *t, const float *grads, int state_bf16, long n, const int *live, long block_n,
               int *updated, int call, double lr, double beta1, double beta2, double eps, double grad_scale,
               long t_step, cudaStream_t stream);

/* Deferred updates (gpu_adamw's `updated`). An idle block's update depends on nothing but its own state and the
 * call's constants (its gradient is zeros), so it can wait until the state is read and be replayed then, in the same
 * float operations: a block idle for c calls costs one pass over its state, not c.
 *
 * gpu_adamw_record: sched[3 call .. 3 call + 2] = (lr, ic1, ic2) of gpu_adamw(lr, t_step) as floats.
 * gpu_adamw_owed: of blocks 0 .. blocks - 1, those wanted (rows_at NULL: all; else rows_at[b + 1] > rows_at[b], a
 * layer's expert offsets) whose updated[b] < upto: list[0] = their count, then (b, updated[b]) pairs in block order
 * (list: 1 + 2 blocks ints); updated[b] = upto for them.
 * gpu_adamw_catch_up: for each listed block of each tensor (the tensors share the blocks' calls: n_tensors of 1 to
 * 3, blocks of block_n elements, masters all fp32 or all split), gpu_adamw's updates of calls updated[b] + 1 .. upto
 * with zeros for the gradient and sched's constants of each call: the bits those calls would have left. */

void gpu_adamw_record(float *sched, int call, double lr, double beta1, double beta2, long t_step,
                      cudaStream_t stream);
void gpu_adamw_owed(int *list, int *updated, const int *rows_at, int blocks, int upto, cudaStream_t stream);
void gpu_adamw_catch_up(const AdamWTensor *tensors, int n_tensors, int state_bf16, long block_n, const int *list,
                        int upto, const float *sched, double beta1, double beta2, double eps, cudaStream_t stream);

/* Deferred updates by rows of one tensor (an embedding table's: rows of row_n elements, updated holding each row's
 * call): for each row r of ids (n_rows of them, distinct; ids NULL: rows 0 .. n_rows - 1), the calls updated[r] + 1
 * .. upto with zeros for the gradient, then, with grads, call upto + 1 with grads' row r at grad_scale (finite, not
 * negative) and the tensor's weight decay; updated[r] becomes the last call made, and a row already there is not
 * touched. Each call's lr and bias corrections come from sched (gpu_adamw_record). The bits are gpu_adamw's, call by
 * call. grads fp32 with the tensor's layout (row r at r row_n), or NULL. */
void gpu_adamw_rows(const AdamWTensor *t, int state_bf16, long row_n, const int *ids, long n_rows, int *updated,
                    int upto, const float *grads, double grad_scale, const float *sched, double beta1, double beta2,
                    double eps, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
