/*
 * The optimizer: learning-rate schedule, global gradient norm with a fixed reduction order,
 * and AdamW with decoupled weight decay on the tensors the parameter table marks as decayed.
 */
#ifndef MOKC_OPTIM_H
#define MOKC_OPTIM_H

#include <stddef.h>

#include "config.h"
#include "model.h"

/* Learning rate of optimizer step `step` (0-based): linear warmup to lr over warmup_steps, then
 * cosine or linear decay to min_lr at the last step, or constant. */
double lr_at_step(const TrainConfig *tc, int step);

/* Sum of squares of x[0..n) in double, summed over fixed-size blocks in a fixed order, so the
 * result does not depend on the thread count. */
double sum_of_squares(const float *x, size_t n);

/* x rounded to the nearest bf16, ties to even, as the GPU's __float2bfloat16_rn (a NaN: its canonical 0x7fff). */
float bf16_round(float x);

/* With tc->optimizer_state bf16, m and v (n each) rounded to bf16 as adamw_step keeps them (a checkpoint
 * written with fp32 moments, resumed with bf16 ones: both backends then start from the same values); else
 * nothing. */
void optim_round_state(float *m, float *v, size_t n, const TrainConfig *tc);

/* One AdamW step (t = 1-based step count for bias correction) over every tensor of the table.
 * grads are multiplied by grad_scale first (clipping). With tc->optimizer_state bf16, m and v are
 * rounded to bf16 after their update (in these fp32 arrays, as the GPU stores them) and the step
 * uses the rounded values. */
void adamw_step(float *params, const float *grads, float *m, float *v, const ParamTable *t,
                const TrainConfig *tc, double lr, double grad_scale, long t_step);

#endif
