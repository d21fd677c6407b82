/* Model shapes, the parameter table, deterministic initialisation and FLOP counts. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

void model_dims_from_config(ModelDims *d, const MokcConfig *cfg, int ep, int ep_rank) {
    memset(d, 0, sizeof *d);
    const ModelConfig *m = &cfg->model;
    const MoeConfig *e = &cfg->moe;
    d->V = m->vocab_size;
    d->C = m->hidden_size;
    d->L = m->num_layers;
    d->Hq = m->num_heads;
    d->Hkv = m->num_kv_heads;
    d->D = m->head_dim;
    d->I = m->intermediate_size;
    d->E = e->num_experts;
    d->first_dense = d->E > 0 ? m->first_k_dense_replace : m->num_layers;
    d->k = e->num_experts_per_tok;
    d->Im = e->moe_intermediate_size;
    d->S = e->n_shared_experts;
    d->ep = ep;
    d->ep_rank = ep_rank;
    d->E_local = d->E > 0 ? d->E / ep : 0;
    d->tie = m->tie_word_embeddings;
    d->rope_theta = m->rope_theta;
    d->eps = m->rms_norm_eps;
    d->sigmoid = e->scoring_func == SCORING_SIGMOID;
    d->norm_topk = e->norm_topk_prob;
    d->scaling = e->routed_scaling_factor;
    d->aux_coef = e->router_aux_loss_coef;
}

static size_t add_param(ParamTable *t, const char *name, int layer, enum param_kind kind, bool decay,
                        int ndim, int64_t s0, int64_t s1, int64_t s2) {
    t->items = realloc(t->items, sizeof(ParamInfo) * (size_t)(t->count + 1));
    if (!t->items) mokc_die(MOKC_EXIT_RUNTIME, NULL, "out of memory building the parameter table");
    ParamInfo *p = &t->items[t->count++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->shape[0] = s0;
    p->shape[1] = ndim > 1 ? s1 : 1;
    p->shape[2] = ndim > 2 ? s2 : 1;
    p->numel = (size_t)(p->shape[0] * p->shape[1] * p->shape[2]);
    p->offset = t->total;
    p->decay = decay;
    p->kind = kind;
    p->layer = layer;
    t->total += p->numel;
    return p->offset;
}

void param_table_build(ParamTable *t, const ModelDims *d) {
    memset(t, 0, sizeof *t);
    t->layers = callocCheck((size_t)d->L, sizeof(LayerOffsets));
    char name[64];
    t->tok_emb = add_param(t, "tok_emb", -1, PARAM_REPLICATED, true, 2, d->V, d->C, 0);
    for (int l = 0; l < d->L; l++) {
        LayerOffsets *o = &t->layers[l];
        memset(o, 0xff, sizeof *o); /* SIZE_MAX = absent */
#define P(field, leaf, kind, decay, nd, a, b, c)                                   \
    do {                                                                          \
        snprintf(name, sizeof name, "layers.%d.%s", l, leaf);                     \
        o->field = add_param(t, name, l, kind, decay, nd, a, b, c);               \
    } while (0)
        P(attn_norm, "attn_norm", PARAM_REPLICATED, false, 1, d->C, 0, 0);
        P(wq, "attn.wq", PARAM_REPLICATED, true, 2, d->C, d->Hq * d->D, 0);
        P(wk, "attn.wk", PARAM_REPLICATED, true, 2, d->C, d->Hkv * d->D, 0);
        P(wv, "attn.wv", PARAM_REPLICATED, true, 2, d->C, d->Hkv * d->D, 0);
        P(wo, "attn.wo", PARAM_REPLICATED, true, 2, d->Hq * d->D, d->C, 0);
        P(ffn_norm, "ffn_norm", PARAM_REPLICATED, false, 1, d->C, 0, 0);
        if (!model_layer_is_moe(d, l)) {
            P(w_gate, "mlp.w_gate", PARAM_REPLICATED, true, 2, d->C, d->I, 0);
            P(w_up, "mlp.w_up", PARAM_REPLICATED, true, 2, d->C, d->I, 0);
            P(w_down, "mlp.w_down", PARAM_REPLICATED, true, 2, d->I, d->C, 0);
        } else {
            P(router, "moe.router", PARAM_REPLICATED, false, 2, d->C, d->E, 0);
            P(e_gate, "moe.experts.w_gate", PARAM_EXPERT, true, 3, d->E_local, d->C, d->Im);
            P(e_up, "moe.experts.w_up", PARAM_EXPERT, true, 3, d->E_local, d->C, d->Im);
            P(e_down, "moe.experts.w_down", PARAM_EXPERT, true, 3, d->E_local, d->Im, d->C);
            if (d->S > 0) {
                P(s_gate, "moe.shared.w_gate", PARAM_REPLICATED, true, 2, d->C, d->S * d->Im, 0);
                P(s_up, "moe.shared.w_up", PARAM_REPLICATED, true, 2, d->C, d->S * d->Im, 0);
                P(s_down, "moe.shared.w_down", PARAM_REPLICATED, true, 2, d->S * d->Im, d->C, 0);
            }
        }
#undef P
    }
    t->final_norm = add_param(t, "final_norm", -1, PARAM_REPLICATED, false, 1, d->C, 0, 0);
    t->lm_head = d->tie ? t->tok_emb : add_param(t, "lm_head", -1, PARAM_REPLICATED, true, 2, d->V, d->C, 0);
}

void param_table_free(ParamTable *t) {
    free(t->items);
    free(t->layers);
    memset(t, 0, sizeof *t);
}

int param_table_find(const ParamTable *t, const char *name) {
    for (int i = 0; i < t->count; i++)
        if (strcmp(t->items[i].name, name) == 0) return i;
    return -1;
}

static bool is_residual_output(const char *name) {
    const char *leaf = strrchr(name, '.');
    return leaf && (strcmp(leaf, ".wo") == 0 || strcmp(leaf, ".w_down") == 0);
}

ParamInit model_param_init(const ParamInfo *p, const ModelDims *d) {
    ParamInit in = {.ones = p->ndim == 1, .std = 0.02, .blocks = 1, .per_block = p->numel};
    if (in.ones) return in;
    if (is_residual_output(p->name)) in.std /= sqrt(2.0 * d->L);
    if (p->kind == PARAM_EXPERT) in.blocks = (int)p->shape[0], in.per_block = p->numel / (size_t)in.blocks;
    return in;
}

uint64_t model_init_block_state(const ParamInfo *p, const ModelDims *d, uint64_t seed, int b) {
    const int global_id = p->kind == PARAM_EXPERT ? d->ep_rank * d->E_local + b : 0;
    return mokc_hash_string(seed * MOKC_GOLDEN + (uint64_t)global_id, p->name);
}

void model_init_params(float *params, const ParamTable *t, const ModelDims *d, uint64_t seed) {
    for (int i = 0; i < t->count; i++) {
        const ParamInfo *p = &t->items[i];
        const ParamInit in = model_param_init(p, d);
        float *w = params + p->offset;
        if (in.ones) {
            for (size_t j = 0; j < p->numel; j++) w[j] = 1.0f;
            continue;
        }
        for (int b = 0; b < in.blocks; b++) {
            const uint64_t state = model_init_block_state(p, d, seed, b);
            float *wb = w + (size_t)b * in.per_block;
#pragma omp parallel for schedule(static)
            for (size_t j = 0; j < in.per_block; j++) wb[j] = mokc_init_value(state, j, in.std);
        }
    }
}

/* ---------- counts ---------- */

static int64_t attn_params(const ModelDims *d) {
    return (int64_t)d->C * d->Hq * d->D * 2 + (int64_t)d->C * d->Hkv * d->D * 2 + 2 * d->C;
}

/* Parameters counting `routed` routed experts per MoE layer (all E, or the k a token uses). */
static int64_t param_count(const ModelDims *d, int routed) {
    int64_t n = (int64_t)d->V * d->C * (d->tie ? 1 : 2) + d->C;
    for (int l = 0; l < d->L; l++) {
        n += attn_params(d);
        if (!model_layer_is_moe(d, l)) n += 3ll * d->C * d->I;
        else n += (int64_t)d->C * d->E + 3ll * d->C * d->Im * (routed + d->S);
    }
    return n;
}

int64_t model_param_count(const ModelDims *d) { return param_count(d, d->E); }

int64_t model_active_param_count(const ModelDims *d) { return param_count(d, d->k); }

double model_flops_per_token(const ModelDims *d, int seq_len) {
    /* Matmul parameters only: the embedding lookup is no matmul, the LM head is. */
    double matmul = (double)model_active_param_count(d) - (double)d->V * d->C * (d->tie ? 0 : 1);
    /* Causal attention: QK^T and PV, 2 * 2 * T * D per head per token forward, half masked. */
    double attn = 2.0 * 2.0 * seq_len * d->D * d->Hq * d->L * 0.5;
    return 6.0 * matmul + 3.0 * attn;
}
