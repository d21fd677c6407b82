/* Learning-rate schedule, deterministic gradient norm, AdamW. */
#include "optim.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

double lr_at_step(const TrainConfig *tc, int step) {
    if (step < tc->warmup_steps) return tc->lr * (double)(step + 1) / (double)tc->warmup_steps;
    if (tc->lr_schedule == LR_CONSTANT) return tc->lr;
    int decay_steps = tc->steps - tc->warmup_steps;
    double progress = decay_steps > 1 ? (double)(step - tc->warmup_steps) / (double)(decay_steps - 1) : 1.0;
    if (progress > 1.0) progress = 1.0;
    double frac = tc->lr_schedule == LR_COSINE ? 0.5 * (1.0 + cos(M_PI * progress)) : 1.0 - progress;
    return tc->min_lr + frac * (tc->lr - tc->min_lr);
}

#define SQ_BLOCK 16384

double sum_of_squares(const float *x, size_t n) {
    size_t nblocks = (n + SQ_BLOCK - 1) / SQ_BLOCK;
    double *partial = mallocCheck(sizeof(double) * (nblocks ? nblocks : 1));
#pragma omp parallel for schedule(static)
    for (size_t b = 0; b < nblocks; b++) {
        size_t end = (b + 1) * SQ_BLOCK < n ? (b + 1) * SQ_BLOCK : n;
        double s = 0;
        for (size_t i = b * SQ_BLOCK; i < end; i++) s += (double)x[i] * x[i];
        partial[b] = s;
    }
    double total = 0;
    for (size_t b = 0; b < nblocks; b++) total += partial[b];
    free(partial);
    return total;
}

float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) u = 0x7fff0000u;
    else u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&x, &u, sizeof x);
    return x;
}

void optim_round_state(float *m, float *v, size_t n, const TrainConfig *tc) {
    if (tc->optimizer_state != OPT_STATE_BF16) return;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) m[i] = bf16_round(m[i]), v[i] = bf16_round(v[i]);
}

void adamw_step(float *params, const float *grads, float *m, float *v, const ParamTable *t,
                const TrainConfig *tc, double lr, double grad_scale, long t_step) {
    const float b1 = (float)tc->beta1, b2 = (float)tc->beta2, eps = (float)tc->eps;
    /* the bias corrections' reciprocals: a multiply a moment, not a division (adamw.h) */
    const float ic1 = (float)(1.0 / (1.0 - pow(tc->beta1, (double)t_step)));
    const float ic2 = (float)(1.0 / (1.0 - pow(tc->beta2, (double)t_step)));
    const float flr = (float)lr, gs = (float)grad_scale;
    const int bf16_state = tc->optimizer_state == OPT_STATE_BF16;
    for (int i = 0; i < t->count; i++) {
        const ParamInfo *p = &t->items[i];
        const float wd = p->decay ? (float)tc->weight_decay : 0.0f;
        float *w = params + p->offset, *mm = m + p->offset, *vv = v + p->offset;
        const float *g = grads + p->offset;
#pragma omp parallel for schedule(static)
        for (size_t j = 0; j < p->numel; j++) {
            float gj = g[j] * gs;
            mm[j] = b1 * mm[j] + (1.0f - b1) * gj;
            vv[j] = b2 * vv[j] + (1.0f - b2) * gj * gj;
            if (bf16_state) mm[j] = bf16_round(mm[j]), vv[j] = bf16_round(vv[j]); /* kept as stored */
            float mhat = mm[j] * ic1, vhat = vv[j] * ic2;
            w[j] -= flr * (mhat / (sqrtf(vhat) + eps) + wd * w[j]);
        }
    }
}
