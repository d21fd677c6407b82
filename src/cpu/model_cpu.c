#include "real.h"
/*
 * The whole model on the CPU, forward and backward over one micro-batch. Exact and plain: each
 * layer is a sequence of op calls with its activations saved for the backward. The routed
 * experts' token exchange (expert parallelism) happens inside the MoE block.
 */
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cpu/model_cpu.h"
#include "cpu/ops.h"

#define W(off) (params + (off))
#define G(off) (grads + (off))

static real *alloc_real(size_t n) { return callocCheck(n, sizeof(real)); }

static MoeDims moe_dims(const OP(CpuModel) *m) {
    const ModelDims *d = &m->d;
    MoeDims md = {.C = d->C, .E = d->E, .k = d->k, .I = d->Im, .n_shared = d->S, .sigmoid = d->sigmoid,
                  .norm_topk = d->norm_topk, .scaling = d->scaling, .ep = d->ep, .ep_rank = d->ep_rank,
                  .comm = m->has_comm ? &m->comm : NULL};
    return md;
}

static OP(MoeWeights) moe_weights(const LayerOffsets *o, real *base, int has_shared) {
    OP(MoeWeights) w = {.router = base + o->router, .w_gate = base + o->e_gate, .w_up = base + o->e_up,
                        .w_down = base + o->e_down};
    if (has_shared) {
        w.shared_gate = base + o->s_gate;
        w.shared_up = base + o->s_up;
        w.shared_down = base + o->s_down;
    }
    return w;
}

void OP(cpu_model_init)(OP(CpuModel) *m, const ModelDims *d, const ParamTable *t, int B, int T,
                        const MoeComms *comm) {
    memset(m, 0, sizeof *m);
    m->d = *d;
    m->t = t;
    if (comm) m->comm = *comm;
    m->has_comm = comm != NULL;
    m->B = B;
    m->T = T;
    size_t N = (size_t)B * T, L = (size_t)d->L, C = (size_t)d->C;
    size_t QD = (size_t)d->Hq * d->D, KD = (size_t)d->Hkv * d->D, I = (size_t)(d->I > 0 ? d->I : 1);
    m->N = (int)N;
    m->inputs = callocCheck(N, sizeof(int));
    m->targets = callocCheck(N, sizeof(int));
    m->x_in = alloc_real(L * N * C);
    m->ln1 = alloc_real(L * N * C);
    m->rstd1 = alloc_real(L * N);
    m->q = alloc_real(L * N * QD);
    m->k = alloc_real(L * N * KD);
    m->v = alloc_real(L * N * KD);
    m->att = alloc_real(L * (size_t)B * d->Hq * T * T);
    m->atty = alloc_real(L * N * QD);
    m->x_mid = alloc_real(L * N * C);
    m->ln2 = alloc_real(L * N * C);
    m->rstd2 = alloc_real(L * N);
    size_t dense_layers = (size_t)(d->E > 0 ? d->first_dense : d->L);
    m->pre_g = alloc_real(dense_layers * N * I);
    m->pre_u = alloc_real(dense_layers * N * I);
    m->h = alloc_real(dense_layers * N * I);
    m->moe = callocCheck(L, sizeof(OP(MoeActs)));
    MoeDims md = moe_dims(m);
    for (int l = 0; l < d->L; l++)
        if (model_layer_is_moe(d, l)) OP(moe_acts_alloc)(&m->moe[l], &md, (int)N);
    m->x_final = alloc_real(N * C);
    m->lnf = alloc_real(N * C);
    m->rstdf = alloc_real(N);
    m->logits = alloc_real(N * (size_t)d->V);
    m->dres = alloc_real(N * C);
    m->dln = alloc_real(N * C);
    m->datty = alloc_real(N * QD);
    m->dq = alloc_real(N * QD);
    m->dk = alloc_real(N * KD);
    m->dv = alloc_real(N * KD);
    m->dh = alloc_real(N * I);
    m->dg = alloc_real(N * I);
    m->du = alloc_real(N * I);
    m->dlogits = alloc_real(N * (size_t)d->V);
}

void OP(cpu_model_free)(OP(CpuModel) *m) {
    for (int l = 0; l < m->d.L; l++)
        if (model_layer_is_moe(&m->d, l)) OP(moe_acts_free)(&m->moe[l]);
    real *bufs[] = {m->x_in, m->ln1, m->rstd1, m->q, m->k, m->v, m->att, m->atty, m->x_mid, m->ln2,
                    m->rstd2, m->pre_g, m->pre_u, m->h, m->x_final, m->lnf, m->rstdf, m->logits,
                    m->dres, m->dln, m->datty, m->dq, m->dk, m->dv, m->dh, m->dg, m->du, m->dlogits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(m->moe);
    free(m->inputs);
    free(m->targets);
    memset(m, 0, sizeof *m);
}

/* Offsets of layer l's slice in a per-layer activation array of `width` per token. */
static size_t slice(const OP(CpuModel) *m, int l, size_t width) { return (size_t)l * (size_t)m->N * width; }

double OP(cpu_model_forward)(OP(CpuModel) *m, const real *params, const float *expert_bias, const int *inputs,
                             const int *targets) {
    const ModelDims *d = &m->d;
    const ParamTable *t = m->t;
    const int N = m->N, C = d->C, QD = d->Hq * d->D, KD = d->Hkv * d->D, I = d->I;
    memcpy(m->inputs, inputs, sizeof(int) * (size_t)N);
    if (targets) memcpy(m->targets, targets, sizeof(int) * (size_t)N);
    MoeDims md = moe_dims(m);
    m->aux_loss = 0;
    OP(embedding_forward)(m->x_in, inputs, W(t->tok_emb), N, C);
    for (int l = 0; l < d->L; l++) {
        const LayerOffsets *o = &t->layers[l];
        real *x = m->x_in + slice(m, l, C), *ln1 = m->ln1 + slice(m, l, C), *rstd1 = m->rstd1 + slice(m, l, 1);
        real *q = m->q + slice(m, l, QD), *k = m->k + slice(m, l, KD), *v = m->v + slice(m, l, KD);
        real *att = m->att + (size_t)l * m->B * d->Hq * m->T * m->T, *atty = m->atty + slice(m, l, QD);
        real *x_mid = m->x_mid + slice(m, l, C), *ln2 = m->ln2 + slice(m, l, C), *rstd2 = m->rstd2 + slice(m, l, 1);
        real *x_next = l + 1 < d->L ? m->x_in + slice(m, l + 1, C) : m->x_final;

        OP(rmsnorm_forward)(ln1, rstd1, x, W(o->attn_norm), N, C, (real)d->eps);
        OP(matmul_nn)(q, ln1, W(o->wq), N, C, QD, 0);
        OP(matmul_nn)(k, ln1, W(o->wk), N, C, KD, 0);
        OP(matmul_nn)(v, ln1, W(o->wv), N, C, KD, 0);
        OP(rope_apply)(q, m->B, m->T, d->Hq, d->D, (real)d->rope_theta, 0);
        OP(rope_apply)(k, m->B, m->T, d->Hkv, d->D, (real)d->rope_theta, 0);
        OP(attention_forward)(atty, att, q, k, v, m->B, m->T, d->Hq, d->Hkv, d->D);
        memcpy(x_mid, x, sizeof(real) * (size_t)N * C);
        OP(matmul_nn)(x_mid, atty, W(o->wo), N, QD, C, 1);

        OP(rmsnorm_forward)(ln2, rstd2, x_mid, W(o->ffn_norm), N, C, (real)d->eps);
        if (!model_layer_is_moe(d, l)) {
            real *pg = m->pre_g + slice(m, l, I), *pu = m->pre_u + slice(m, l, I), *h = m->h + slice(m, l, I);
            OP(matmul_nn)(pg, ln2, W(o->w_gate), N, C, I, 0);
            OP(matmul_nn)(pu, ln2, W(o->w_up), N, C, I, 0);
            OP(swiglu_forward)(h, pg, pu, (long)N * I);
            memcpy(x_next, x_mid, sizeof(real) * (size_t)N * C);
            OP(matmul_nn)(x_next, h, W(o->w_down), N, I, C, 1);
        } else {
            OP(MoeWeights) w = moe_weights(o, (real *)params, d->S > 0);
            const float *bias = expert_bias ? expert_bias + (size_t)l * d->E : NULL;
            OP(moe_forward)(x_next, &m->moe[l], ln2, &w, bias, &md, N);
            for (size_t i = 0; i < (size_t)N * C; i++) x_next[i] += x_mid[i];
            m->aux_loss += m->moe[l].aux_loss;
        }
    }
    OP(rmsnorm_forward)(m->lnf, m->rstdf, m->x_final, W(t->final_norm), N, C, (real)d->eps);
    OP(matmul_nt)(m->logits, m->lnf, W(t->lm_head), N, C, d->V, 0);
    m->loss = targets ? OP(cross_entropy)(NULL, NULL, m->logits, targets, N, d->V, 1) : 0.0;
    return m->loss;
}

void OP(cpu_model_backward)(OP(CpuModel) *m, const real *params, real *grads, double dloss) {
    const ModelDims *d = &m->d;
    const ParamTable *t = m->t;
    const int N = m->N, C = d->C, QD = d->Hq * d->D, KD = d->Hkv * d->D, I = d->I;
    const size_t NC = (size_t)N * C;
    MoeDims md = moe_dims(m);

    OP(cross_entropy)(m->dlogits, NULL, m->logits, m->targets, N, d->V, (real)dloss);
    OP(matmul_nn)(m->dln, m->dlogits, W(t->lm_head), N, d->V, C, 0);
    OP(matmul_tn)(G(t->lm_head), m->dlogits, m->lnf, N, d->V, C, 1);
    memset(m->dres, 0, sizeof(real) * NC);
    OP(rmsnorm_backward)(m->dres, G(t->final_norm), m->dln, m->x_final, W(t->final_norm), m->rstdf, N, C);

    for (int l = d->L - 1; l >= 0; l--) {
        const LayerOffsets *o = &t->layers[l];
        real *x = m->x_in + slice(m, l, C), *ln1 = m->ln1 + slice(m, l, C), *rstd1 = m->rstd1 + slice(m, l, 1);
        real *q = m->q + slice(m, l, QD), *k = m->k + slice(m, l, KD), *v = m->v + slice(m, l, KD);
        real *att = m->att + (size_t)l * m->B * d->Hq * m->T * m->T, *atty = m->atty + slice(m, l, QD);
        real *x_mid = m->x_mid + slice(m, l, C), *ln2 = m->ln2 + slice(m, l, C), *rstd2 = m->rstd2 + slice(m, l, 1);

        /* FFN: x_next = x_mid + ffn(ln2); dres holds d x_next and becomes d x_mid. */
        if (!model_layer_is_moe(d, l)) {
            real *pg = m->pre_g + slice(m, l, I), *pu = m->pre_u + slice(m, l, I), *h = m->h + slice(m, l, I);
            OP(matmul_nt)(m->dh, m->dres, W(o->w_down), N, C, I, 0);
            OP(matmul_tn)(G(o->w_down), h, m->dres, N, I, C, 1);
            memset(m->dg, 0, sizeof(real) * (size_t)N * I);
            memset(m->du, 0, sizeof(real) * (size_t)N * I);
            OP(swiglu_backward)(m->dg, m->du, m->dh, pg, pu, (long)N * I);
            OP(matmul_nt)(m->dln, m->dg, W(o->w_gate), N, I, C, 0);
            OP(matmul_nt)(m->dln, m->du, W(o->w_up), N, I, C, 1);
            OP(matmul_tn)(G(o->w_gate), ln2, m->dg, N, C, I, 1);
            OP(matmul_tn)(G(o->w_up), ln2, m->du, N, C, I, 1);
        } else {
            OP(MoeWeights) w = moe_weights(o, (real *)params, d->S > 0);
            OP(MoeWeights) dw = moe_weights(o, grads, d->S > 0);
            memset(m->dln, 0, sizeof(real) * NC);
            OP(moe_backward)(m->dln, &dw, m->dres, dloss * d->aux_coef, &m->moe[l], ln2, &w, &md, N);
        }
        OP(rmsnorm_backward)(m->dres, G(o->ffn_norm), m->dln, x_mid, W(o->ffn_norm), rstd2, N, C);

        /* Attention: x_mid = x + atty @ wo; dres becomes d x. */
        OP(matmul_nt)(m->datty, m->dres, W(o->wo), N, C, QD, 0);
        OP(matmul_tn)(G(o->wo), atty, m->dres, N, QD, C, 1);
        memset(m->dq, 0, sizeof(real) * (size_t)N * QD);
        memset(m->dk, 0, sizeof(real) * (size_t)N * KD);
        memset(m->dv, 0, sizeof(real) * (size_t)N * KD);
        OP(attention_backward)(m->dq, m->dk, m->dv, m->datty, att, q, k, v, m->B, m->T, d->Hq, d->Hkv, d->D);
        OP(rope_apply)(m->dq, m->B, m->T, d->Hq, d->D, (real)d->rope_theta, 1);
        OP(rope_apply)(m->dk, m->B, m->T, d->Hkv, d->D, (real)d->rope_theta, 1);
        OP(matmul_nt)(m->dln, m->dq, W(o->wq), N, QD, C, 0);
        OP(matmul_nt)(m->dln, m->dk, W(o->wk), N, KD, C, 1);
        OP(matmul_nt)(m->dln, m->dv, W(o->wv), N, KD, C, 1);
        OP(matmul_tn)(G(o->wq), ln1, m->dq, N, C, QD, 1);
        OP(matmul_tn)(G(o->wk), ln1, m->dk, N, C, KD, 1);
        OP(matmul_tn)(G(o->wv), ln1, m->dv, N, C, KD, 1);
        OP(rmsnorm_backward)(m->dres, G(o->attn_norm), m->dln, x, W(o->attn_norm), rstd1, N, C);
    }
    OP(embedding_backward)(G(t->tok_emb), m->dres, m->inputs, N, C, d->V);
}
