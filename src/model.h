/*
 * Model shapes and the parameter table. Every parameter lives in one flat buffer; the table
 * names each tensor with its shape, offset, owner (replicated or sharded over the EP group) and
 * whether weight decay applies. Gradients, AdamW moments and checkpoints use the same layout;
 * the GPU backend will too. Offsets are in elements, independent of the scalar type.
 */
#ifndef MOKC_MODEL_H
#define MOKC_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "rng.h"

typedef struct {
    int V, C, L;             /* vocab, hidden, layers */
    int Hq, Hkv, D;          /* query heads, kv heads, head dim */
    int I;                   /* dense SwiGLU width */
    int first_dense;         /* layers [0, first_dense) are dense (all of them without experts) */
    int E, k, Im, S;         /* experts, top-k, expert width, shared experts */
    int ep, ep_rank;         /* expert-parallel group and this rank's place in it */
    int E_local;             /* experts on this rank = E / ep */
    int tie;                 /* LM head = token embedding */
    double rope_theta, eps;
    int sigmoid, norm_topk;
    double scaling, aux_coef;
} ModelDims;

void model_dims_from_config(ModelDims *d, const MokcConfig *cfg, int ep, int ep_rank);
static inline bool model_layer_is_moe(const ModelDims *d, int l) { return d->E > 0 && l >= d->first_dense; }

enum param_kind { PARAM_REPLICATED, PARAM_EXPERT };

typedef struct {
    char name[64];           /* e.g. "layers.3.experts.w_up" */
    int ndim;
    int64_t shape[3];        /* local shape (expert tensors: E_local first) */
    size_t offset, numel;    /* in elements of the flat buffer */
    bool decay;              /* AdamW weight decay applies (matrices, not norms) */
    enum param_kind kind;    /* expert tensors are sharded over EP and averaged over DP */
    int layer;               /* -1 for embedding, final norm, LM head */
} ParamInfo;

/* Offsets of one layer's tensors; SIZE_MAX where the layer has no such tensor. */
typedef struct {
    size_t attn_norm, wq, wk, wv, wo, ffn_norm;
    size_t w_gate, w_up, w_down;                 /* dense FFN */
    size_t router, e_gate, e_up, e_down;         /* routed experts (local) */
    size_t s_gate, s_up, s_down;                 /* shared experts as one SwiGLU of width S*Im */
} LayerOffsets;

typedef struct {
    ParamInfo *items;
    int count;
    size_t total;            /* elements in the flat buffer on this rank */
    size_t tok_emb, final_norm, lm_head;   /* lm_head == tok_emb when tied */
    LayerOffsets *layers;    /* [L] */
} ParamTable;

void param_table_build(ParamTable *t, const ModelDims *d);
void param_table_free(ParamTable *t);
/* Index of the tensor named `name`, or -1. */
int param_table_find(const ParamTable *t, const char *name);

/* Deterministic initialisation from the seed: every tensor (and every expert, by its global id)
 * draws from its own stream, so the result does not depend on tensor order or on EP sharding.
 * Matrices ~ N(0, 0.02); output projections into the residual (wo, w_down, expert and shared
 * down) ~ N(0, 0.02 / sqrt(2 L)) (GPT-2's scaling: the residual sum has 2L terms); norms = 1. */
void model_init_params(float *params, const ParamTable *t, const ModelDims *d, uint64_t seed);

/* How tensor p is initialised (model_init_params; the GPU's gpu_model_init_state follows it):
 * ones, or `blocks` blocks of per_block values (one per expert, else one), value j of block b =
 * mokc_init_value(model_init_block_state(p, d, seed, b), j, std). */
typedef struct {
    int ones;
    double std;
    int blocks;
    size_t per_block;
} ParamInit;
ParamInit model_param_init(const ParamInfo *p, const ModelDims *d);
uint64_t model_init_block_state(const ParamInfo *p, const ModelDims *d, uint64_t seed, int b);

/* Parameter counts: total in the model (all experts), and active per token (k of E experts). */
int64_t model_param_count(const ModelDims *d);
int64_t model_active_param_count(const ModelDims *d);
/* Training FLOPs per token: 6 * active matmul parameters + causal attention (fwd+bwd). */
double model_flops_per_token(const ModelDims *d, int seq_len);

#endif
