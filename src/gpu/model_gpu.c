/*
 * The whole model on the GPU (see model_gpu.h). Per layer, forward:
 *   ln1 = rmsnorm(x) (bf16) -> q, k, v = ln1 @ wq, wk, wv (bf16) -> RoPE -> attention -> atty (bf16)
 *   (on Hopper the q and k projections run on the megakernel's tile with RoPE in their epilogue)
 *   x_mid = x + atty @ wo (fp32) -> ln2 = rmsnorm(x_mid) (bf16; the router's input too)
 *   x_next = x_mid + swiglu(ln2 @ w_gate, ln2 @ w_up) @ w_down, or + MoE(ln2)
 *   (the residual adds inside other passes: the GEMMs' C operand, the MoE layer's combine)
 * then lnf = rmsnorm(x) and the LM head with the cross-entropy in chunks of rows: each chunk's
 * logits give its losses and dlogits at once; the head's backward runs once over the dlogits of as many
 * chunks as fit 3 GiB (a whole micro-batch at mokc-small's sizes).
 * The backward walks the layers in reverse (the attention's dq, dk, dv in one row a token, so d ln1 is one product
 * with the layer's wq, wk, wv side by side, wqkv_bf16); after layer l it records an event on which the
 * communication stream starts summing layer l's gradients over the ranks (NCCL) and then their
 * squares for the gradient norm, while the compute stream goes on with layer l-1.
 * MoE layers: the unfused layer, or (moe_impl "auto" or "mok" where the megakernel runs) the
 * megakernel, forward and backward: one MoeMok shared by the layers, a MoeMokSaved per layer.
 */
#include "gpu/model_gpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/adamw.h"
#include "../../kernels/attention.h"
#include "../../kernels/cast.h"
#include "../../kernels/copy_rows.h"
#include "../../kernels/cross_entropy.h"
#include "../../kernels/embedding.h"
#include "../../kernels/reduce.h"
#include "../../kernels/rmsnorm.h"
#include "../../kernels/init_params.h"
#include "../../kernels/master_split.h"
#include "../../kernels/mok/gemm_sm90.h"
#include "../../kernels/mok/mok.h"
#include "../../kernels/rope.h"
#include "../../kernels/swiglu.h"
#include "common.h"
#include "dist.h"
#include "gpu/check.h"
#include "gpu/adamw_deferred.h"
#include "gpu/gemm.h"
#include "gpu/memory_plan.h"
#include "gpu/moe_mok.h"
#include "gpu/moe_unfused.h"
#include "gpu/step_timer.h"

/* Rows of the LM head per chunk: the chunk's fp32 logits stay under this many bytes (a micro-batch of 8192 rows at
 * V = 151936 in 4 chunks of 2048: head_chunk_rows). */
#define HEAD_CHUNK_BYTES (1280ull << 20)
/* The bf16 dlogits the head's backward takes in one pass (whole chunks): under this many bytes, so fewer than 2^31
 * elements (all 8192 rows of a micro-batch at V = 151936 in one pass). */
#define HEAD_GRAD_BYTES (3072ull << 20)
/* The embedding gradient's rows summed over the ranks in one NCCL call at most (reduce_embedding). */
#define EMB_PACK_BYTES (64ull << 20)

/* The rows of a chunk of the head's logits for N rows of V: the fewest chunks under HEAD_CHUNK_BYTES, as even as whole
 * 128-row tiles allow (1664, 1664, 1664, 1664, 1536 had left the last GEMM with a short tail). */
static int head_chunk_rows(int N, int V) {
    size_t most = HEAD_CHUNK_BYTES / ((size_t)V * sizeof(float));
    if (most >= 128) most -= most % 128; /* whole 128-row tiles for the head's GEMMs */
    if (most < 1) most = 1;
    if (most >= (size_t)N) return N;
    const size_t chunks = ((size_t)N + most - 1) / most, even = ((size_t)N + chunks - 1) / chunks;
    const size_t rows = most >= 128 ? (even + 127) / 128 * 128 : even; /* <= most: most is a multiple of 128 */
    return (int)rows;
}

typedef struct {
    float *x_in, *rstd1, *x_mid, *rstd2;
    bf16_t *ln1, *q, *k, *v, *atty, *ln2, *g, *u, *h;
    void *attn_saved; /* the attention forward's state for its backward (attention_saved_bytes) */
} LayerActs;

struct GpuModel {
    const ModelDims *d;
    const ParamTable *t;
    const TrainConfig *tc;
    const Dist *dist;
    const GpuComms *comms;
    int B, T, N, head_rows, head_grad_rows; /* a chunk of logits; the rows of one pass of the head's backward */
    MemoryPlan plan;
    cudaStream_t stream, comm_stream;
    cublasHandle_t blas;
    cudaEvent_t *layer_done;      /* [L + 2]: then the head and final norm, then the embedding */
    cudaEvent_t reduce_done;
    /* Parameters. Their bf16 weights (params_bf16) and the gradients and moments keep the table's layout. The fp32
     * masters: in params for the tensors the GPU also reads in fp32 (master_fp32), else as the bf16 weights and their
     * remainders in params_lo (master_split.h: 4 bytes a parameter, not 6; AdamW's 30 bytes 28, 22 with bf16
     * moments 20). params and params_lo are packed: master_at[i] is tensor i's offset in its own. */
    float *params, *grads;
    int16_t *params_lo;
    size_t *master_at;
    void *adam_m, *adam_v; /* fp32 or bf16 (train.optimizer_state) */
    int grads_unwritten;          /* a step's first backward: it writes grad_written_first's gradients */
    int head_grad_unwritten;      /* the next pass of the head's backward writes its gradient */
    int norm_queued;              /* every tensor's squares are queued on the comm stream (norm_partials) */
    /* The routed experts' squares for the gradient norm from the megakernel's last backward of a step
     * (MoeGpuGrads.sq), where no all-reduce changes their gradients after it (one data-parallel replica): without the
     * norm's read of them (22 GB a step at mokc-small's sizes, 3.6 ms: docs/perf-notes.md, s36). */
    int experts_sq_fused;
    float *experts_sq;            /* a MoE layer's squares after another's, experts_sq_layer floats each */
    long experts_sq_layer;
    int experts_sq_now;           /* this backward is the step's last: the MoE layers leave their squares */
    /* The routed experts no token of the step chose are neither written by the megakernel's backward nor read by
     * AdamW (MoeGpuGrads.idle_unwritten): where their gradients are read by nothing else (as experts_sq_fused).
     * 8 bytes a parameter of an idle expert a step: mokc-small-1gpu leaves 106 of a layer's 128 idle at steps 11-20,
     * 43 at steps 81-100 (s41 r1). */
    int experts_idle_unwritten;
    /* AdamW's updates of their idle experts, and of the rows of an untied embedding table no token used, owed until a
     * forward reads them or the state is read whole (gpu/adamw_deferred.h; its parts: deferred.layers, .rows). on:
     * the updates are owed. */
    AdamWDeferred deferred;
    int deferred_on;
    bf16_t *params_bf16;
    bf16_t *wqkv_bf16;            /* (L, C, QD + 2 KD): each layer's bf16 wq, wk, wv side by side (qkv_weights_copy) */
    float *expert_bias;           /* (L, E) */
    /* inputs */
    int *tokens, *targets, *emb_plan;
    /* their host side (pinned): a micro-batch's are copied at its start, and the forward's loss waits for the
     * stream, so the next micro-batch may rewrite them while this one's backward runs */
    int *h_tokens, *h_targets, *h_emb_plan;
    EmbeddingBwdPlan emb; /* this micro-batch's embedding backward (its ints: h_emb_plan, emb_plan) */
    /* the rows of an embedding table untied from the LM head whose gradient a step leaves nonzero (reduce_embedding):
     * the ids this step touched here (bitmap), then on any rank (increasing; the pinned host list and its device
     * copy, emb_grad_rows of them: -1 before the first step and after the gradient buffer held staging), and on
     * several ranks those rows gathered emb_pack_rows at a time to be summed */
    uint64_t *emb_seen;
    int *h_emb_rows, *emb_rows, emb_grad_rows, emb_pack_rows;
    float *emb_pack;
    float *emb_runs; /* the embedding backward's run sums (gpu_embedding_backward's scratch) */
    /* activations */
    LayerActs *layers;
    float *x_final, *rstdf, *rope_table;
    bf16_t *lnf;
    float *logits, *losses;       /* a chunk's logits: fp32, or (head_fused) their codes and statistics */
    uint16_t *logit_codes;
    float *head_stats, *head_target_logit;
    bf16_t *dlogits;
    /* backward scratch */
    float *dres, *dln, *dh, *rms_scratch;
    bf16_t *dres_bf16, *datty, *dqkv, *dg, *du; /* dqkv: a token's dq, dk, dv in one row (attention.h) */
    double *partials, *scalars, *h_scalars;
    AttnImpl attn_impl;
    int qk_rope_fused;            /* q, k projections by gemm_sm90_rope, not cuBLAS + gpu_rope */
    int head_fused;               /* the head's logits by gemm_sm90_logits as codes with their rows' statistics and
                                   * target logits (gpu_cross_entropy_coded), not by cuBLAS in fp32 */
    AttentionWorkspace *attn;
    void *attn_mem;
    /* MoE */
    MoeUnfusedActs *moe_acts;     /* [L], MoE layers only: what the unfused backward reads */
    MoeUnfusedWork moe_work;      /* the unfused layer's scratch */
    MoeMok *moe_mok;              /* the megakernel; NULL: the unfused layer */
    MoeMokSaved *moe_saved;       /* [L], MoE layers only: what the megakernel's backward reads */
    char moe_why[256];            /* why not the megakernel, when moe_impl "auto" fell back */
    int has_moe;
    StepTimer timer;              /* the training step's parts, and a profiled step's ops (gpu_model_step_times) */
    int timing;                   /* a training step is running: mark its parts */
};

/* From here on the step's stream time counts to `part`, and in a profiled step to `op` (training steps only, not
 * validation). */
static void mark(GpuModel *g, StepPart part, const char *op) {
    if (g->timing) step_timer_mark(&g->timer, part, op);
}

#define W32(off) master32(g, off)
#define W16(off) (g->params_bf16 + (off))
#define G32(off) (g->grads + (off))

static int is_moe(const GpuModel *g, int l) { return model_layer_is_moe(g->d, l); }

/* ---------- construction ---------- */

#define PLAN(name, cls, count, type, ptr) memory_plan_add(&g->plan, name, cls, (size_t)(count) * sizeof(type), (void **)(ptr))

/* The MoE layer's shape as the GPU layers take it. */
static MoeGpuDims moe_gpu_dims(const ModelDims *d) {
    MoeGpuDims md = {.C = d->C, .E = d->E, .k = d->k, .I = d->Im, .n_shared = d->S, .sigmoid = d->sigmoid,
                     .norm_topk = d->norm_topk, .scaling = d->scaling, .ep = d->ep, .ep_rank = d->ep_rank};
    return md;
}

/* Whether the MoE layers run the megakernel, forward and backward. "auto": where it runs
 * (moe_mok_available), else the unfused layer, with the reason in g->moe_why; "mok": the
 * megakernel or stop. Collective over the EP group (every rank reaches the same answer). */
static int runs_mok(GpuModel *g, enum moe_impl requested) {
    if (requested == MOE_IMPL_UNFUSED || !g->has_moe) return 0;
    MoeGpuDims md = moe_gpu_dims(g->d);
    if (moe_mok_available(&md, g->comms->ep, 1, g->moe_why, sizeof g->moe_why)) return 1;
    if (requested == MOE_IMPL_MOK)
        mokc_die(MOKC_EXIT_USAGE,
                 "the megakernel needs an SM 9.0 GPU with an sm_90a build and the EP group in one NVLink domain "
                 "(one HGX node, or an NVL72 rack with NCCL_MNNVL_ENABLE=1; every rank seeing all GPUs of its node); "
                 "or set \"moe_impl\": \"auto\" or \"unfused\"",
                 "moe_impl \"mok\": mok unavailable: %s", g->moe_why);
    return 0;
}

const char *gpu_model_moe_why(const GpuModel *g) { return g->moe_why; }

enum moe_impl gpu_model_moe_impl(const GpuModel *g) { return g->moe_mok ? MOE_IMPL_MOK : MOE_IMPL_UNFUSED; }

static void plan_layer(GpuModel *g, int l) {
    const ModelDims *d = g->d;
    LayerActs *a = &g->layers[l];
    size_t N = (size_t)g->N, C = (size_t)d->C, QD = (size_t)d->Hq * d->D, KD = (size_t)d->Hkv * d->D;
    PLAN("x_in", MEM_ACTIVATIONS, N * C, float, &a->x_in);
    PLAN("ln1", MEM_ACTIVATIONS, N * C, bf16_t, &a->ln1);
    PLAN("rstd1", MEM_ACTIVATIONS, N, float, &a->rstd1);
    PLAN("q", MEM_ACTIVATIONS, N * QD, bf16_t, &a->q);
    PLAN("k", MEM_ACTIVATIONS, N * KD, bf16_t, &a->k);
    PLAN("v", MEM_ACTIVATIONS, N * KD, bf16_t, &a->v);
    PLAN("attn_saved", MEM_ACTIVATIONS, attention_saved_bytes(g->attn_impl, g->B, g->T, d->Hq), char, &a->attn_saved);
    PLAN("atty", MEM_ACTIVATIONS, N * QD, bf16_t, &a->atty);
    PLAN("x_mid", MEM_ACTIVATIONS, N * C, float, &a->x_mid);
    PLAN("ln2", MEM_ACTIVATIONS, N * C, bf16_t, &a->ln2);
    PLAN("rstd2", MEM_ACTIVATIONS, N, float, &a->rstd2);
    if (!is_moe(g, l)) {
        size_t I = (size_t)d->I;
        PLAN("g", MEM_ACTIVATIONS, N * I, bf16_t, &a->g);
        PLAN("u", MEM_ACTIVATIONS, N * I, bf16_t, &a->u);
        PLAN("h", MEM_ACTIVATIONS, N * I, bf16_t, &a->h);
    }
}

static int state_bf16(const GpuModel *g) { return g->tc->optimizer_state == OPT_STATE_BF16; }

/* Bytes of one element of a moment buffer (train.optimizer_state). */
static size_t moment_bytes(const GpuModel *g) { return state_bf16(g) ? sizeof(bf16_t) : sizeof(float); }

/* Element `o` of a moment buffer. */
static void *moment_at(const GpuModel *g, void *base, size_t o) { return (char *)base + o * moment_bytes(g); }

/* The GPU reads this tensor's master in fp32 (the W32 sites): the norms, the routers and the embedding table (tied to
 * the LM head or not). Every other tensor is read only as its bf16 weights. */
static int master_fp32(const GpuModel *g, const ParamInfo *p) {
    if (p->ndim == 1 || p->offset == g->t->tok_emb) return 1;
    return p->layer >= 0 && p->offset == g->t->layers[p->layer].router;
}

/* master_at, and the elements of params (*n32) and params_lo (*nlo): each tensor at a multiple of 8 elements, so
 * both arrays keep 16-byte alignment. */
static void layout_masters(GpuModel *g, size_t *n32, size_t *nlo) {
    g->master_at = callocCheck((size_t)g->t->count, sizeof(size_t));
    *n32 = *nlo = 0;
    for (int i = 0; i < g->t->count; i++) {
        const ParamInfo *p = &g->t->items[i];
        size_t *end = master_fp32(g, p) ? n32 : nlo;
        g->master_at[i] = *end;
        *end += (p->numel + 7) / 8 * 8;
    }
}

/* The fp32 master of the tensor at offset `off`, a master_fp32 one. */
static float *master32(const GpuModel *g, size_t off) {
    int lo = 0, hi = g->t->count - 1; /* the table's offsets increase */
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (g->t->items[mid].offset <= off) lo = mid;
        else hi = mid - 1;
    }
    const ParamInfo *p = &g->t->items[lo];
    if (p->offset != off || !master_fp32(g, p))
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "master32: no fp32 master at offset %zu (internal)", off);
    return g->params + g->master_at[lo];
}

static void plan_model(GpuModel *g) {
    const ModelDims *d = g->d;
    size_t P = g->t->total, N = (size_t)g->N, C = (size_t)d->C, V = (size_t)d->V;
    size_t QD = (size_t)d->Hq * d->D, KD = (size_t)d->Hkv * d->D, I = (size_t)(d->I > 0 ? d->I : 1);
    size_t n32, nlo;
    layout_masters(g, &n32, &nlo);
    memory_plan_init(&g->plan);
    PLAN("params", MEM_PARAMS, n32, float, &g->params);
    PLAN("params_lo", MEM_PARAMS, nlo, int16_t, &g->params_lo);
    PLAN("params_bf16", MEM_PARAMS, P, bf16_t, &g->params_bf16);
    PLAN("wqkv_bf16", MEM_PARAMS, (size_t)d->L * C * (QD + 2 * KD), bf16_t, &g->wqkv_bf16);
    PLAN("expert_bias", MEM_PARAMS, (size_t)d->L * (d->E > 0 ? d->E : 1), float, &g->expert_bias);
    PLAN("grads", MEM_GRADS, P, float, &g->grads);
    memory_plan_add(&g->plan, "adam_m", MEM_OPTIMIZER, P * moment_bytes(g), &g->adam_m);
    memory_plan_add(&g->plan, "adam_v", MEM_OPTIMIZER, P * moment_bytes(g), &g->adam_v);
    PLAN("tokens", MEM_ACTIVATIONS, N, int, &g->tokens);
    PLAN("targets", MEM_ACTIVATIONS, N, int, &g->targets);
    PLAN("emb_plan", MEM_ACTIVATIONS, embedding_bwd_plan_ints(g->N), int, &g->emb_plan);
    PLAN("emb_runs", MEM_WORKSPACE, embedding_bwd_scratch_floats(g->N, d->C), float, &g->emb_runs);
    PLAN("emb_rows", MEM_WORKSPACE, g->emb_seen ? V : 0, int, &g->emb_rows);
    PLAN("emb_pack", MEM_WORKSPACE, (size_t)g->emb_pack_rows * C, float, &g->emb_pack);
    for (int l = 0; l < d->L; l++) plan_layer(g, l);
    PLAN("x_final", MEM_ACTIVATIONS, N * C, float, &g->x_final);
    PLAN("lnf", MEM_ACTIVATIONS, N * C, bf16_t, &g->lnf);
    PLAN("rstdf", MEM_ACTIVATIONS, N, float, &g->rstdf);
    PLAN("rope_table", MEM_WORKSPACE, gpu_rope_table_floats(g->T, d->D), float, &g->rope_table);
    const size_t head_rows = (size_t)g->head_rows, coded = g->head_fused;
    PLAN("logits", MEM_WORKSPACE, coded ? 0 : head_rows * V, float, &g->logits);
    PLAN("logit_codes", MEM_WORKSPACE, coded ? head_rows * V : 0, uint16_t, &g->logit_codes);
    PLAN("head_stats", MEM_WORKSPACE, coded ? head_rows * gemm_sm90_logits_tiles(d->V) * 2 : 0, float, &g->head_stats);
    PLAN("head_target_logit", MEM_WORKSPACE, coded ? head_rows : 0, float, &g->head_target_logit);
    PLAN("dlogits", MEM_WORKSPACE, (size_t)g->head_grad_rows * V, bf16_t, &g->dlogits);
    PLAN("losses", MEM_WORKSPACE, N, float, &g->losses);
    PLAN("dres", MEM_WORKSPACE, N * C, float, &g->dres);
    PLAN("dres_bf16", MEM_WORKSPACE, N * C, bf16_t, &g->dres_bf16);
    PLAN("dln", MEM_WORKSPACE, N * C, float, &g->dln);
    PLAN("datty", MEM_WORKSPACE, N * QD, bf16_t, &g->datty);
    PLAN("dqkv", MEM_WORKSPACE, N * (QD + 2 * KD), bf16_t, &g->dqkv);
    PLAN("dh", MEM_WORKSPACE, N * I, float, &g->dh);
    PLAN("dg", MEM_WORKSPACE, N * I, bf16_t, &g->dg);
    PLAN("du", MEM_WORKSPACE, N * I, bf16_t, &g->du);
    PLAN("rmsnorm_scratch", MEM_WORKSPACE, gpu_rmsnorm_backward_scratch_floats(g->N, d->C), float, &g->rms_scratch);
    PLAN("norm_partials", MEM_WORKSPACE, (size_t)g->t->count * REDUCE_PARTIALS, double, &g->partials);
    PLAN("scalars", MEM_WORKSPACE, 4, double, &g->scalars);
    if (g->experts_sq_fused) {
        g->experts_sq_layer = mok_expert_sq_floats(d->E / d->ep, d->C, d->Im);
        PLAN("experts_sq", MEM_WORKSPACE, g->experts_sq_layer * (d->L - d->first_dense), float, &g->experts_sq);
    }
    size_t attn_bytes = attention_workspace_bytes(g->attn_impl, g->B, g->T, d->Hq, d->Hkv, d->D);
    memory_plan_add(&g->plan, "attention", MEM_WORKSPACE, attn_bytes, &g->attn_mem);
    if (g->has_moe) {
        MoeGpuDims md = moe_gpu_dims(d);
        const int layers = d->L - d->first_dense;
        if (g->moe_mok) {
            size_t window = moe_mok_window_bytes(&md, g->N, layers);
            memory_plan_note(&g->plan, "moe saved activations", MEM_ACTIVATIONS,
                             moe_mok_saved_bytes(&md, g->N) * (size_t)layers);
            memory_plan_note(&g->plan, "moe megakernel scratch", MEM_WORKSPACE,
                             moe_mok_bytes(&md, g->N, layers) - window);
            memory_plan_note(&g->plan, "moe symmetric window", MEM_WORKSPACE, window);
        } else {
            memory_plan_note(&g->plan, "moe saved activations", MEM_ACTIVATIONS,
                             moe_unfused_acts_bytes(&md, g->N) * (size_t)layers);
            memory_plan_note(&g->plan, "moe unfused scratch", MEM_WORKSPACE, moe_unfused_work_bytes(&md, g->N));
        }
    }
}

/* Tensor i's state as AdamW takes it. */
static AdamWTensor adamw_tensor(GpuModel *g, int i) {
    const ParamInfo *p = &g->t->items[i];
    const int fp32 = master_fp32(g, p);
    return (AdamWTensor){.params = fp32 ? g->params + g->master_at[i] : NULL, .params_bf16 = g->params_bf16 + p->offset,
                         .params_lo = fp32 ? NULL : g->params_lo + g->master_at[i],
                         .m = moment_at(g, g->adam_m, p->offset), .v = moment_at(g, g->adam_v, p->offset),
                         .weight_decay = p->decay ? g->tc->weight_decay : 0.0};
}

/* AdamW's deferred updates (gpu/adamw_deferred.h), on from the start: of the routed experts where their gradients
 * are left unwritten when idle, and of an embedding table untied from the head (whose gradient's rows are listed). */
static void create_deferred(GpuModel *g) {
    const ModelDims *d = g->d;
    if (!g->experts_idle_unwritten && !g->emb_seen) return;
    adamw_deferred_init(&g->deferred, state_bf16(g), g->tc->beta1, g->tc->beta2, g->tc->eps);
    if (g->experts_idle_unwritten)
        adamw_deferred_experts(&g->deferred, d->L - d->first_dense, d->E_local, (long)d->C * d->Im);
    for (int i = 0; i < g->t->count; i++) {
        const ParamInfo *p = &g->t->items[i];
        if (p->offset == g->t->tok_emb && g->emb_seen)
            adamw_deferred_table(&g->deferred, adamw_tensor(g, i), d->V, d->C);
        if (p->kind != PARAM_EXPERT || !g->experts_idle_unwritten) continue;
        const LayerOffsets *o = &g->t->layers[p->layer];
        const int layer = p->layer - d->first_dense, k = p->offset == o->e_gate ? 0 : p->offset == o->e_up ? 1 : 2;
        if ((long)(p->numel / p->shape[0]) != g->deferred.per)
            mokc_die(MOKC_EXIT_RUNTIME, NULL, "gpu_model: expert tensor %s does not fit the deferred updates "
                     "(internal)", p->name);
        g->deferred.t[layer * DEFERRED_TENSORS + k] = adamw_tensor(g, i);
    }
    adamw_deferred_reset(&g->deferred, g->stream);
    g->deferred_on = 1;
}

static void create_moe(GpuModel *g) {
    const ModelDims *d = g->d;
    MoeGpuDims md = moe_gpu_dims(d);
    MoeGpuComms mc = {.ep = g->comms->ep, .stats = g->comms->world};
    if (g->moe_mok) {
        moe_mok_create(g->moe_mok, &md, g->N, &mc, 0, d->L - d->first_dense);
        g->moe_saved = callocCheck((size_t)d->L, sizeof(MoeMokSaved));
        for (int l = d->first_dense; l < d->L; l++)
            moe_mok_saved_create(&g->moe_saved[l], &md, g->N, l - d->first_dense);
    } else {
        g->moe_acts = callocCheck((size_t)d->L, sizeof(MoeUnfusedActs));
        for (int l = d->first_dense; l < d->L; l++) moe_unfused_acts_create(&g->moe_acts[l], &md, g->N);
        moe_unfused_work_create(&g->moe_work, &md, g->N, &mc);
    }
}

GpuModel *gpu_model_create(const ModelDims *d, const ParamTable *t, const TrainConfig *tc, const Dist *dist,
                                const GpuComms *comms, int B, int T, enum moe_impl moe_impl) {
    GpuModel *g = callocCheck(1, sizeof *g);
    g->d = d, g->t = t, g->tc = tc, g->dist = dist, g->comms = comms;
    g->B = B, g->T = T, g->N = B * T;
    g->attn_impl = attention_default_impl(d->D);
    const char *why = NULL;
    g->qk_rope_fused = mok_sm90_available() && gemm_sm90_rope_ok(g->N, d->Hq * d->D, d->C, d->D, &why) &&
                       gemm_sm90_rope_ok(g->N, d->Hkv * d->D, d->C, d->D, &why);
    g->has_moe = d->E > 0 && d->first_dense < d->L;
    if (runs_mok(g, moe_impl)) g->moe_mok = callocCheck(1, sizeof(MoeMok));
    g->experts_sq_fused = g->moe_mok && dist->dp == 1;
    g->experts_idle_unwritten = g->experts_sq_fused;
    g->head_rows = head_chunk_rows(g->N, d->V);
    g->head_fused = mok_sm90_available() && gemm_sm90_shape_ok(1, g->head_rows, d->V, d->C, &why);
    size_t chunks = HEAD_GRAD_BYTES / ((size_t)d->V * sizeof(bf16_t)) / (size_t)g->head_rows;
    size_t grad_rows = (chunks < 1 ? 1 : chunks) * (size_t)g->head_rows;
    g->head_grad_rows = grad_rows > (size_t)g->N ? g->N : (int)grad_rows;
    g->layers = callocCheck((size_t)d->L, sizeof(LayerActs));
    cudaCheck(cudaMallocHost((void **)&g->h_tokens, sizeof(int) * (size_t)g->N));
    cudaCheck(cudaMallocHost((void **)&g->h_targets, sizeof(int) * (size_t)g->N));
    cudaCheck(cudaMallocHost((void **)&g->h_emb_plan, sizeof(int) * (size_t)embedding_bwd_plan_ints(g->N)));
    cudaCheck(cudaMallocHost((void **)&g->h_scalars, 4 * sizeof(double)));
    g->emb_grad_rows = -1;
    if (t->lm_head != t->tok_emb) {
        g->emb_seen = callocCheck((size_t)embedding_ids_words(d->V), sizeof(uint64_t));
        cudaCheck(cudaMallocHost((void **)&g->h_emb_rows, sizeof(int) * (size_t)d->V));
    }
    if (dist->world > 1 && g->emb_seen) {
        const size_t rows = EMB_PACK_BYTES / ((size_t)d->C * sizeof(float));
        g->emb_pack_rows = rows < 1 ? 1 : rows > (size_t)d->V ? d->V : (int)rows;
    }
    plan_model(g);
    memory_plan_allocate(&g->plan);
    cudaCheck(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
    cudaCheck(cudaStreamCreateWithFlags(&g->comm_stream, cudaStreamNonBlocking));
    cublasCheck(cublasCreate(&g->blas));
    cublasCheck(cublasSetStream(g->blas, g->stream));
    step_timer_init(&g->timer, g->stream);
    g->layer_done = callocCheck((size_t)d->L + 2, sizeof(cudaEvent_t));
    for (int l = 0; l <= d->L + 1; l++) cudaCheck(cudaEventCreateWithFlags(&g->layer_done[l], cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&g->reduce_done, cudaEventDisableTiming));
    g->attn = attention_workspace_create_at(g->attn_impl, g->attn_mem,
                                            attention_workspace_bytes(g->attn_impl, B, T, d->Hq, d->Hkv, d->D), B, T,
                                            d->Hq, d->Hkv, d->D);
    gpu_rope_table_init(g->rope_table, T, d->D, (float)d->rope_theta, g->stream);
    if (g->has_moe) create_moe(g);
    create_deferred(g);
    const char *eager = getenv("MOKC_ADAMW_EAGER"); /* a test hook: the deferred updates against the eager ones */
    if (eager && *eager && strcmp(eager, "0") != 0) {
        if (strcmp(eager, "1") != 0)
            mokc_die(MOKC_EXIT_USAGE, "set it to 1 (AdamW updates every tensor every step) or 0 / unset (the default)",
                     "MOKC_ADAMW_EAGER=%s is neither 0 nor 1", eager);
        gpu_model_set_deferred(g, 0, 0);
        if (dist->rank == 0) printf("AdamW: every tensor updated every step (MOKC_ADAMW_EAGER=1)\n");
    }
    cudaCheck(cudaStreamSynchronize(g->stream));
    return g;
}

void gpu_model_destroy(GpuModel *g) {
    if (!g) return;
    cudaCheck(cudaDeviceSynchronize());
    if (g->has_moe) {
        if (g->moe_mok) {
            for (int l = g->d->first_dense; l < g->d->L; l++) moe_mok_saved_destroy(&g->moe_saved[l]);
            moe_mok_destroy(g->moe_mok);
        } else {
            for (int l = g->d->first_dense; l < g->d->L; l++) moe_unfused_acts_destroy(&g->moe_acts[l]);
            moe_unfused_work_destroy(&g->moe_work);
        }
    }
    adamw_deferred_free(&g->deferred); /* nothing where none was made */
    free(g->moe_acts);
    free(g->moe_saved);
    free(g->moe_mok);
    attention_workspace_free(g->attn);
    for (int l = 0; l <= g->d->L + 1; l++) cudaEventDestroy(g->layer_done[l]);
    cudaEventDestroy(g->reduce_done);
    step_timer_free(&g->timer);
    free(g->layer_done);
    cublasDestroy(g->blas);
    cudaStreamDestroy(g->stream);
    cudaStreamDestroy(g->comm_stream);
    memory_plan_free(&g->plan);
    cudaFreeHost(g->h_scalars);
    cudaFreeHost(g->h_emb_rows);
    free(g->emb_seen);
    int *pinned[] = {g->h_tokens, g->h_targets, g->h_emb_plan};
    for (size_t i = 0; i < sizeof pinned / sizeof pinned[0]; i++) cudaFreeHost(pinned[i]);
    free(g->layers);
    free(g->master_at);
    free(g);
}

void gpu_model_print_plan(const GpuModel *g) { memory_plan_print(&g->plan); }

/* ---------- state ---------- */

/* A moment from the host's fp32 (checkpoints hold fp32): bf16 moments pass through the gradient buffer, free
 * between steps, and are rounded (exactly, when they came from a bf16 run). */
static void upload_moment(GpuModel *g, void *dev, const float *host) {
    const size_t n = g->t->total;
    if (!state_bf16(g)) {
        cudaCheck(cudaMemcpyAsync(dev, host, n * sizeof(float), cudaMemcpyHostToDevice, g->stream));
        return;
    }
    cudaCheck(cudaMemcpyAsync(g->grads, host, n * sizeof(float), cudaMemcpyHostToDevice, g->stream));
    gpu_cast_f32_to_bf16(dev, g->grads, (long)n, g->stream);
}

/* The tensors of `kinds` (a bit per param_kind) of the device array src, fp32 in the table's layout, to the same
 * places of host; the rest of host is not touched. */
static void copy_kinds_to_host(GpuModel *g, float *host, const float *src, unsigned kinds) {
    if (kinds == GPU_STATE_ALL) {
        cudaCheck(cudaMemcpyAsync(host, src, g->t->total * sizeof(float), cudaMemcpyDeviceToHost, g->stream));
    } else {
        for (int i = 0; i < g->t->count; i++) {
            const ParamInfo *p = &g->t->items[i];
            if (kinds >> p->kind & 1u)
                cudaCheck(cudaMemcpyAsync(host + p->offset, src + p->offset, p->numel * sizeof(float),
                                          cudaMemcpyDeviceToHost, g->stream));
        }
    }
    cudaCheck(cudaStreamSynchronize(g->stream));
}

/* A moment into the host's fp32 (its tensors of `kinds`), the same way back; the stream is idle when this runs. */
static void download_moment(GpuModel *g, float *host, const void *dev, unsigned kinds) {
    if (state_bf16(g)) {
        gpu_cast_bf16_to_f32(g->grads, dev, (long)g->t->total, g->stream);
        dev = g->grads;
    }
    copy_kinds_to_host(g, host, dev, kinds);
}

/* Each layer's bf16 wq, wk and wv side by side in one (C, QD + 2 KD) matrix, so the backward's input gradient of
 * the three projections is one product (dqkv's rows against it) instead of three adding into d ln1; copied from
 * params_bf16 whenever that changes. */
static void qkv_weights_copy(GpuModel *g) {
    const ModelDims *d = g->d;
    const size_t C = (size_t)d->C, QD = (size_t)d->Hq * d->D, KD = (size_t)d->Hkv * d->D, QKV = QD + 2 * KD;
    for (int l = 0; l < d->L; l++) {
        const LayerOffsets *o = &g->t->layers[l];
        const size_t off[3] = {o->wq, o->wk, o->wv};
        for (int i = 0; i < 3; i++) {
            long col, width;
            attention_grad_part(d->Hq, d->Hkv, d->D, i, &col, &width);
            gpu_copy_rows_bf16(g->wqkv_bf16 + l * C * QKV + col, (long)QKV, W16(off[i]), width, (long)C, width,
                               g->stream);
        }
    }
}

/* The masters and bf16 weights from fp32 values in the gradient buffer (the table's layout; free between steps). */
static void masters_from_grads(GpuModel *g) {
    for (int i = 0; i < g->t->count; i++) {
        const ParamInfo *p = &g->t->items[i];
        const float *x = g->grads + p->offset;
        bf16_t *w16 = g->params_bf16 + p->offset;
        if (master_fp32(g, p)) {
            float *w = g->params + g->master_at[i];
            cudaCheck(cudaMemcpyAsync(w, x, p->numel * sizeof(float), cudaMemcpyDeviceToDevice, g->stream));
            gpu_cast_f32_to_bf16(w16, w, (long)p->numel, g->stream);
        } else {
            gpu_master_split(w16, g->params_lo + g->master_at[i], x, (long)p->numel, g->stream);
        }
    }
    qkv_weights_copy(g);
}

/* A new state owes nothing. */
static void deferred_reset(GpuModel *g) {
    if (g->deferred_on) adamw_deferred_reset(&g->deferred, g->stream);
}

/* The fp32 masters into the gradient buffer (the table's layout), the way back. */
static void masters_to_grads(GpuModel *g) {
    for (int i = 0; i < g->t->count; i++) {
        const ParamInfo *p = &g->t->items[i];
        float *x = g->grads + p->offset;
        if (master_fp32(g, p))
            cudaCheck(cudaMemcpyAsync(x, g->params + g->master_at[i], p->numel * sizeof(float),
                                      cudaMemcpyDeviceToDevice, g->stream));
        else
            gpu_master_join(x, g->params_bf16 + p->offset, g->params_lo + g->master_at[i], (long)p->numel, g->stream);
    }
}

void gpu_model_upload_state(GpuModel *g, const float *params, const float *m, const float *v) {
    size_t bytes = g->t->total * sizeof(float);
    /* on the model's stream: a cudaMemcpy from pageable memory may return before its data has
     * landed, and the legacy stream it runs on does not order the non-blocking g->stream, so the
     * split below could read parameters still in flight (gpu_model's tied case, 1 run in 6) */
    cudaCheck(cudaMemcpyAsync(g->grads, params, bytes, cudaMemcpyHostToDevice, g->stream));
    g->emb_grad_rows = -1; /* the gradient buffer holds staging: the next zero_grads clears all of it */
    masters_from_grads(g);
    deferred_reset(g);
    if (m) upload_moment(g, g->adam_m, m); /* after: bf16 moments pass through the gradient buffer too */
    if (v) upload_moment(g, g->adam_v, v);
    cudaCheck(cudaStreamSynchronize(g->stream));
}

void gpu_model_init_state(GpuModel *g, uint64_t seed) {
    for (int i = 0; i < g->t->count; i++) {
        const ParamInfo *p = &g->t->items[i];
        const ParamInit in = model_param_init(p, g->d);
        float *w = g->grads + p->offset; /* masters_from_grads takes them from there (as upload: staging) */
        if (in.ones) {
            gpu_init_ones(w, p->numel, g->stream);
            continue;
        }
        for (int b = 0; b < in.blocks; b++)
            gpu_init_normal(w + (size_t)b * in.per_block, in.per_block, model_init_block_state(p, g->d, seed, b),
                            in.std, g->stream);
    }
    g->emb_grad_rows = -1;
    const size_t bytes = g->t->total * moment_bytes(g);
    cudaCheck(cudaMemsetAsync(g->adam_m, 0, bytes, g->stream));
    cudaCheck(cudaMemsetAsync(g->adam_v, 0, bytes, g->stream));
    masters_from_grads(g);
    deferred_reset(g);
    cudaCheck(cudaStreamSynchronize(g->stream));
}

void gpu_model_download_state_of(GpuModel *g, float *params, float *m, float *v, unsigned kinds) {
    cudaCheck(cudaDeviceSynchronize());
    if (g->deferred_on) adamw_deferred_settle(&g->deferred, g->stream);
    g->emb_grad_rows = -1;
    masters_to_grads(g);
    copy_kinds_to_host(g, params, g->grads, kinds);
    if (m) download_moment(g, m, g->adam_m, kinds);
    if (v) download_moment(g, v, g->adam_v, kinds);
}

void gpu_model_download_state(GpuModel *g, float *params, float *m, float *v) {
    gpu_model_download_state_of(g, params, m, v, GPU_STATE_ALL);
}

void gpu_model_download_grads(GpuModel *g, float *grads) {
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(grads, g->grads, g->t->total * sizeof(float), cudaMemcpyDeviceToHost));
    if (!g->experts_idle_unwritten) return;
    /* the idle experts' gradients are zeros the memory does not hold */
    int *rows = mallocCheck(sizeof(int) * (size_t)(g->d->E / g->d->ep));
    for (int i = 0; i < g->t->count; i++) {
        const ParamInfo *p = &g->t->items[i];
        if (p->kind != PARAM_EXPERT) continue;
        const size_t per = p->numel / p->shape[0];
        cudaCheck(cudaMemcpy(rows, g->moe_saved[p->layer].rows_step, sizeof(int) * p->shape[0],
                             cudaMemcpyDeviceToHost));
        for (int e = 0; e < p->shape[0]; e++)
            if (rows[e] == 0) memset(grads + p->offset + e * per, 0, per * sizeof(float));
    }
    free(rows);
}

void gpu_model_download_topk(GpuModel *g, int l, int *topk) {
    if (!model_layer_is_moe(g->d, l))
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "gpu_model_download_topk: layer %d is not an MoE layer", l);
    cudaCheck(cudaDeviceSynchronize());
    const int *src = g->moe_mok ? g->moe_saved[l].st.topk : g->moe_acts[l].topk;
    cudaCheck(cudaMemcpy(topk, src, sizeof(int) * (size_t)g->N * g->d->k, cudaMemcpyDeviceToHost));
}

void gpu_model_download_bf16(GpuModel *g, uint16_t *params_bf16) {
    if (g->deferred_on) adamw_deferred_settle(&g->deferred, g->stream);
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(params_bf16, g->params_bf16, g->t->total * sizeof(bf16_t), cudaMemcpyDeviceToHost));
}

void gpu_model_set_expert_bias(GpuModel *g, const float *bias) {
    if (g->d->E == 0) return;
    cudaCheck(cudaMemcpyAsync(g->expert_bias, bias, sizeof(float) * (size_t)g->d->L * g->d->E,
                              cudaMemcpyHostToDevice, g->stream));
}

int gpu_model_set_head_rows(GpuModel *g, int rows, int grad_rows) {
    /* the buffers hold the planned sizes: only smaller ones, and a chunk never larger than a backward pass */
    if (rows >= 1 && rows <= g->head_rows) g->head_rows = rows;
    if (grad_rows >= g->head_rows && grad_rows <= g->head_grad_rows) g->head_grad_rows = grad_rows;
    return g->head_rows == rows && g->head_grad_rows == grad_rows;
}

int gpu_model_set_deferred(GpuModel *g, int on, int settle_every) {
    on = on && (g->deferred.layers || g->deferred.rows);
    if (g->deferred_on) adamw_deferred_settle(&g->deferred, g->stream);
    if (on) {
        adamw_deferred_settle_every(&g->deferred, settle_every);
        adamw_deferred_reset(&g->deferred, g->stream);
    }
    g->deferred_on = on;
    return on ? (g->deferred.layers ? DEFERRED_EXPERTS : 0) | (g->deferred.rows ? DEFERRED_TABLE : 0) : 0;
}

/* Tensors whose gradient a step's first backward writes whole instead of adding to, so zero_grads leaves them: the
 * routed experts (MoeGpuGrads.overwrite_experts), and the matrices of the attention, the dense FFN and the LM head,
 * whose weight-gradient GEMMs then run with beta 0 (s39: 2 GB of memsets and as many bytes read less a step at
 * mokc-small-1gpu's sizes). A table tied to the head is one of them: the head's backward writes it before the
 * embedding's backward adds its rows. */
static int grad_written_first(const GpuModel *g, const ParamInfo *p) {
    if (p->kind == PARAM_EXPERT) return 1;
    if (p->layer < 0) return p->offset == g->t->lm_head;
    const LayerOffsets *o = &g->t->layers[p->layer];
    const size_t written[] = {o->wq, o->wk, o->wv, o->wo, o->w_gate, o->w_up, o->w_down};
    for (int i = 0; i < (int)(sizeof written / sizeof written[0]); i++)
        if (p->offset == written[i]) return 1;
    return 0;
}

/* The weight-gradient GEMMs' beta: write at a step's first backward, add after it. */
static float grad_beta(int unwritten) { return unwritten ? 0.0f : 1.0f; }

/* `waiter` runs what it is given next only after what `producer` has been given so far (through `ev`). */
static void stream_after(cudaStream_t waiter, cudaStream_t producer, cudaEvent_t ev) {
    cudaCheck(cudaEventRecord(ev, producer));
    cudaCheck(cudaStreamWaitEvent(waiter, ev, 0));
}

void gpu_model_zero_grads(GpuModel *g) {
    step_timer_restart(&g->timer); /* a step starts here */
    step_timer_mark(&g->timer, STEP_OPTIMIZER, "zero grads");
    /* nothing of the last step on the comm stream (its all-reduces write gradients in place; the list's copy and the
     * norm's read of the table's rows) is left to run beside the memsets: the norm waited already when the trainer
     * took it, a caller that did not is ordered here */
    stream_after(g->stream, g->comm_stream, g->reduce_done);
    /* runs of tensors in offset order, cut at those the first backward writes, and at an embedding table of which
     * the last step left only the listed rows nonzero */
    const int rows = g->emb_grad_rows;
    size_t start = 0;
    for (int i = 0; i <= g->t->count; i++) {
        const ParamInfo *p = i < g->t->count ? &g->t->items[i] : NULL;
        const size_t end = p ? p->offset : g->t->total;
        if (p && !grad_written_first(g, p) && !(rows >= 0 && p->offset == g->t->tok_emb)) continue;
        if (end > start) cudaCheck(cudaMemsetAsync(g->grads + start, 0, (end - start) * sizeof(float), g->stream));
        if (p) start = p->offset + p->numel;
    }
    if (rows >= 0) /* 1.2 GB less at mokc-small's sizes */
        gpu_embedding_put_rows(G32(g->t->tok_emb), NULL, g->emb_rows, rows, g->d->C, g->stream);
    g->emb_grad_rows = -1;
    g->grads_unwritten = 1;
    g->head_grad_unwritten = 1;
    g->norm_queued = 0;
    if (g->emb_seen) memset(g->emb_seen, 0, sizeof(uint64_t) * (size_t)embedding_ids_words(g->d->V));
    step_timer_mark(&g->timer, STEP_DENSE, "host before the batch"); /* a gap: the host's work */
}

/* ---------- forward ---------- */

static MoeGpuWeights moe_weights(const GpuModel *g, const LayerOffsets *o) {
    MoeGpuWeights w = {.router = W32(o->router), .w_gate = W16(o->e_gate), .w_up = W16(o->e_up),
                       .w_down = W16(o->e_down)};
    if (g->d->S > 0) w.shared_gate = W16(o->s_gate), w.shared_up = W16(o->s_up), w.shared_down = W16(o->s_down);
    return w;
}

static MoeGpuGrads moe_grads(GpuModel *g, const LayerOffsets *o) {
    MoeGpuGrads w = {.router = G32(o->router), .w_gate = G32(o->e_gate), .w_up = G32(o->e_up),
                     .w_down = G32(o->e_down), .overwrite_experts = g->grads_unwritten,
                     .idle_unwritten = g->experts_idle_unwritten};
    if (g->d->S > 0) w.shared_gate = G32(o->s_gate), w.shared_up = G32(o->s_up), w.shared_down = G32(o->s_down);
    return w;
}

/* A micro-batch's tokens and targets (NULL: none) to the GPU through the pinned host side; with_grad: also the
 * embedding backward's buckets of its tokens. Asynchronous: the forward's loss waits for the copies. */
static void upload_batch(GpuModel *g, const int *inputs, const int *targets, int with_grad) {
    const int N = g->N;
    const size_t bytes = sizeof(int) * (size_t)N;
    cudaStream_t s = g->stream;
    memcpy(g->h_tokens, inputs, bytes);
    cudaCheck(cudaMemcpyAsync(g->tokens, g->h_tokens, bytes, cudaMemcpyHostToDevice, s));
    if (targets) {
        memcpy(g->h_targets, targets, bytes);
        cudaCheck(cudaMemcpyAsync(g->targets, g->h_targets, bytes, cudaMemcpyHostToDevice, s));
    }
    if (!with_grad) return;
    g->emb = embedding_bwd_plan_build(inputs, N, g->d->V, g->h_emb_plan);
    if (g->emb_seen) embedding_ids_mark(g->emb_seen, embedding_bwd_plan_ids(g->h_emb_plan, &g->emb), g->emb.nb);
    cudaCheck(cudaMemcpyAsync(g->emb_plan, g->h_emb_plan, sizeof(int) * (size_t)g->emb.ints, cudaMemcpyHostToDevice, s));
}

/* One layer forward; returns its aux loss (0 for a dense layer). with_grad: a backward follows, so
 * an MoE layer keeps its state in g->moe_acts[l]. */
static double layer_forward(GpuModel *g, int l, int with_grad) {
    const ModelDims *d = g->d;
    const LayerOffsets *o = &g->t->layers[l];
    LayerActs *a = &g->layers[l];
    const int N = g->N, C = d->C, QD = d->Hq * d->D, KD = d->Hkv * d->D;
    float *x_next = l + 1 < d->L ? g->layers[l + 1].x_in : g->x_final;
    cudaStream_t s = g->stream;
    mark(g, STEP_ATTENTION, "attn norm");
    gpu_rmsnorm_forward(a->ln1, a->rstd1, a->x_in, W32(o->attn_norm), N, C, (float)d->eps, s);
    mark(g, STEP_ATTENTION, "q k proj, rope");
    if (g->qk_rope_fused) { /* bench attn measures both ways */
        gemm_sm90_rope(a->q, a->ln1, W16(o->wq), N, QD, C, g->rope_table, g->T, d->D, s);
        gemm_sm90_rope(a->k, a->ln1, W16(o->wk), N, KD, C, g->rope_table, g->T, d->D, s);
    } else {
        gemm_rm(g->blas, 0, 0, N, QD, C, a->ln1, GEMM_BF16, W16(o->wq), GEMM_BF16, a->q, GEMM_BF16, 1, 0);
        gemm_rm(g->blas, 0, 0, N, KD, C, a->ln1, GEMM_BF16, W16(o->wk), GEMM_BF16, a->k, GEMM_BF16, 1, 0);
        gpu_rope(a->q, g->rope_table, g->B, g->T, d->Hq, d->D, QD, 0, s);
        gpu_rope(a->k, g->rope_table, g->B, g->T, d->Hkv, d->D, KD, 0, s);
    }
    mark(g, STEP_ATTENTION, "v proj");
    gemm_rm(g->blas, 0, 0, N, KD, C, a->ln1, GEMM_BF16, W16(o->wv), GEMM_BF16, a->v, GEMM_BF16, 1, 0);
    mark(g, STEP_ATTENTION, "attention fwd");
    attention_forward_gpu(g->blas, g->attn, a->atty, a->attn_saved, a->q, a->k, a->v, s);
    mark(g, STEP_ATTENTION, "o proj");
    gemm_rm_out(g->blas, 0, 0, N, C, QD, a->atty, GEMM_BF16, W16(o->wo), GEMM_BF16, a->x_in, a->x_mid, 1, 1);

    mark(g, STEP_DENSE, "ffn norm");
    gpu_rmsnorm_forward(a->ln2, a->rstd2, a->x_mid, W32(o->ffn_norm), N, C, (float)d->eps, s);
    if (!is_moe(g, l)) {
        mark(g, STEP_DENSE, "dense ffn fwd");
        gemm_rm(g->blas, 0, 0, N, d->I, C, a->ln2, GEMM_BF16, W16(o->w_gate), GEMM_BF16, a->g, GEMM_BF16, 1, 0);
        gemm_rm(g->blas, 0, 0, N, d->I, C, a->ln2, GEMM_BF16, W16(o->w_up), GEMM_BF16, a->u, GEMM_BF16, 1, 0);
        gpu_swiglu_forward(a->h, a->g, a->u, (long)N * d->I, s);
        gemm_rm_out(g->blas, 0, 0, N, C, d->I, a->h, GEMM_BF16, W16(o->w_down), GEMM_BF16, a->x_mid, x_next, 1, 1);
        return 0;
    }
    MoeGpuWeights w = moe_weights(g, o);
    if (g->deferred_on && g->deferred.layers) w.deferred = &g->deferred, w.deferred_layer = l - d->first_dense;
    const float *bias = g->expert_bias + (size_t)l * d->E;
    double aux = 0;
    mark(g, STEP_MOE, "moe fwd"); /* x_next = x_mid + the layer's output, added in its combine */
    if (!g->moe_mok) {
        moe_unfused_forward(x_next, a->x_mid, &g->moe_acts[l], &g->moe_work, a->ln2, &w, bias, N, s);
        aux = g->moe_acts[l].aux_loss;
    } else if (with_grad) { /* aux loss and load reach the host with the step's loss (moe_tally) */
        moe_mok_forward(x_next, a->x_mid, g->moe_mok, &g->moe_saved[l], a->ln2, &w, bias, N, s);
    } else {
        moe_mok_forward(x_next, a->x_mid, g->moe_mok, NULL, a->ln2, &w, bias, N, s);
        aux = moe_mok_aux_loss(g->moe_mok, s);
    }
    return aux;
}

/* After the stream has passed the forward: the aux losses the megakernel's layers left on the host
 * (unfused layers returned theirs at once; a layer whose routing found no candidate stops the run)
 * and every MoE layer's routed slots per expert into load. */
static double moe_tally(GpuModel *g, int with_grad, int64_t *load) {
    const ModelDims *d = g->d;
    double aux = 0;
    for (int l = d->first_dense; l < d->L && g->has_moe; l++) {
        const int *counts = g->moe_mok ? g->moe_saved[l].h_counts : g->moe_acts[l].h_counts;
        if (g->moe_mok && with_grad) {
            moe_mok_saved_check(g->moe_mok, &g->moe_saved[l]);
            aux += g->moe_saved[l].h_aux[0];
        }
        if (load)
            for (int e = 0; e < d->E; e++) load[(size_t)l * d->E + e] += counts[e];
    }
    return aux;
}

/* The head's backward over rows [r0, r0 + R), whose dlogits lie at the start of g->dlogits: dlnf into dln, and the
 * head's gradient. */
static void head_backward(GpuModel *g, int r0, int R) {
    const int C = g->d->C, V = g->d->V;
    gemm_rm(g->blas, 0, 0, R, C, V, g->dlogits, GEMM_BF16, W16(g->t->lm_head), GEMM_BF16, g->dln + (size_t)r0 * C,
            GEMM_F32, 1, 0);
    gemm_rm(g->blas, 1, 0, V, C, R, g->dlogits, GEMM_BF16, g->lnf + (size_t)r0 * C, GEMM_BF16, G32(g->t->lm_head),
            GEMM_F32, 1, grad_beta(g->head_grad_unwritten));
    g->head_grad_unwritten = 0;
}

/* Final norm, LM head and cross-entropy in chunks of rows (a chunk's fp32 logits at a time). With
 * dloss_scale > 0 the chunks' dlogits (bf16) gather until the next chunk would not fit a backward pass
 * (head_grad_rows: a whole micro-batch at mokc-small's sizes), and the head's backward runs once over them, so its
 * fp32 gradient (V x C) is read and written once a pass, not once a chunk (s22 r2: the dense part 130.7 -> 117.7
 * ms a step on mokc-small-1gpu). */
static void head_forward(GpuModel *g, int with_grad, float dloss_scale) {
    const ModelDims *d = g->d;
    const int N = g->N, C = d->C, V = d->V;
    cudaStream_t s = g->stream;
    mark(g, STEP_DENSE, "final norm");
    gpu_rmsnorm_forward(g->lnf, g->rstdf, g->x_final, W32(g->t->final_norm), N, C, (float)d->eps, s);
    int pass0 = 0; /* the first row of the backward pass being gathered */
    for (int r0 = 0; r0 < N; r0 += g->head_rows) {
        int R = N - r0 < g->head_rows ? N - r0 : g->head_rows;
        mark(g, STEP_DENSE, "head logits");
        bf16_t *dlogits = with_grad ? g->dlogits + (size_t)(r0 - pass0) * V : NULL;
        if (g->head_fused) {
            gemm_sm90_logits(g->logit_codes, g->head_stats, g->head_target_logit, g->targets + r0,
                             g->lnf + (size_t)r0 * C, W16(g->t->lm_head), R, V, C, s);
            mark(g, STEP_DENSE, "cross-entropy");
            gpu_cross_entropy_coded(g->losses + r0, dlogits, g->logit_codes, g->head_stats, g->head_target_logit,
                                    g->targets + r0, R, V, dloss_scale, s);
        } else {
            gemm_rm(g->blas, 0, 1, R, V, C, g->lnf + (size_t)r0 * C, GEMM_BF16, W16(g->t->lm_head), GEMM_BF16,
                    g->logits, GEMM_F32, 1, 0);
            mark(g, STEP_DENSE, "cross-entropy");
            gpu_cross_entropy(g->losses + r0, dlogits, g->logits, g->targets + r0, R, V, dloss_scale, s);
        }
        const int end = r0 + R, next = N - end < g->head_rows ? N - end : g->head_rows;
        if (with_grad && (end == N || end - pass0 + next > g->head_grad_rows)) {
            mark(g, STEP_DENSE, "head bwd");
            head_backward(g, pass0, end - pass0);
            pass0 = end;
        }
    }
}

/* Mean of the per-token losses, summed on the device in a fixed order. */
static double mean_loss(GpuModel *g) {
    gpu_sum_f32(g->scalars, g->losses, g->N, 0, g->stream);
    cudaCheck(cudaMemcpyAsync(g->h_scalars, g->scalars, sizeof(double), cudaMemcpyDeviceToHost, g->stream));
    cudaCheck(cudaStreamSynchronize(g->stream));
    return g->h_scalars[0] / g->N;
}

static double forward(GpuModel *g, const int *inputs, const int *targets, int with_grad, float dloss_scale,
                      int64_t *load) {
    const ModelDims *d = g->d;
    mark(g, STEP_DENSE, "embedding");
    upload_batch(g, inputs, targets, with_grad);
    if (g->deferred_on && g->deferred.rows) /* the table's rows this micro-batch reads; all without a plan */
        adamw_deferred_catch_up_rows(&g->deferred, with_grad ? embedding_bwd_plan_ids(g->emb_plan, &g->emb) : NULL,
                                     with_grad ? g->emb.nb : 0, g->stream);
    gpu_embedding_forward(g->layers[0].x_in, g->tokens, W32(g->t->tok_emb), g->N, d->C, g->stream);
    double aux = 0;
    for (int l = 0; l < d->L; l++) aux += layer_forward(g, l, with_grad);
    head_forward(g, with_grad, dloss_scale);
    mark(g, STEP_DENSE, "loss sum, host");
    const double loss = mean_loss(g); /* synchronises the stream */
    g->h_scalars[1] = aux + moe_tally(g, with_grad, load);
    return loss;
}

double gpu_model_evaluate(GpuModel *g, const int *inputs, const int *targets) {
    return forward(g, inputs, targets, 0, 0.0f, NULL);
}

/* ---------- backward ---------- */

/* The communicator that sums a tensor's gradient over the ranks (reduce_layer), NULL for none. */
static ncclComm_t grad_comm(const GpuModel *g, const ParamInfo *p) {
    return g->comms->world ? (p->kind == PARAM_EXPERT ? g->comms->dp : g->comms->world) : NULL;
}

/* Whether tensor p is in a part that reduce_layer takes: a layer's tensors, layer -1's without the embedding table
 * (embedding = 0) or the table alone (embedding = 1). */
static int in_part(const GpuModel *g, const ParamInfo *p, int layer, int embedding) {
    return p->layer == layer && (p->offset == g->t->tok_emb) == embedding;
}

/* Where tensor i's squares go (REDUCE_PARTIALS doubles): replicated tensors' slots from the front, routed experts'
 * from the back, so each of gpu_model_grad_norm's two sums reads one run, whatever order they were written in. */
static int norm_slot(const ParamTable *t, int i) {
    const int expert = t->items[i].kind == PARAM_EXPERT;
    int before = 0;
    for (int j = 0; j < i; j++) before += (t->items[j].kind == PARAM_EXPERT) == expert;
    return expert ? t->count - 1 - before : before;
}

/* The gradient norm's partials of a part's tensors, on the comm stream after the part's sums over the ranks: read
 * while the rest of the backward runs, not after it (at mokc-small's sizes 22 GB a rank, ≈ 6 ms). */
static void norm_partials(GpuModel *g, int layer, int embedding) {
    for (int i = 0; i < g->t->count; i++) {
        const ParamInfo *p = &g->t->items[i];
        if (!in_part(g, p, layer, embedding) || (p->kind == PARAM_EXPERT && g->experts_sq_fused)) continue;
        double *slot = g->partials + (size_t)norm_slot(g->t, i) * REDUCE_PARTIALS;
        if (p->offset == g->t->tok_emb && g->emb_seen) /* the rows reduce_embedding listed; the rest are zero */
            gpu_sumsq_rows_partials(slot, g->grads + p->offset, g->emb_rows, g->emb_grad_rows, g->d->C,
                                    g->comm_stream);
        else
            gpu_sumsq_partials(slot, g->grads + p->offset, (long)p->numel, g->comm_stream);
    }
}

/* Once the compute stream has produced one layer's gradients, sums them over the ranks and queues their norm's
 * partials. Layer -1 goes in two parts: the LM head's and final norm's gradients are whole after the last
 * micro-batch's head backward, so their 1.2 GB at mokc-small's sizes go under the layers' backward; the embedding
 * table's (embedding = 1) only after it. Replicated tensors sum over the world, expert tensors over the ranks holding
 * the same experts; the loss was pre-scaled by 1/world.
 * These collectives (world / dp communicators, comm stream) run while the next layer's MoE
 * exchange runs on the ep communicator (compute stream). Every rank issues both in the same order
 * and each NCCL kernel uses few SMs, so both make progress; a setting that lets NCCL take the
 * whole GPU (or another job on it) could serialise them in different orders on different ranks:
 * then chain the exchange behind the reduce with an event. Measured: no stall on 2×H200. */
static void reduce_layer(GpuModel *g, int layer, int embedding, cudaEvent_t ready) {
    stream_after(g->comm_stream, g->stream, ready);
    if (g->comms->world) {
        ncclCheck(ncclGroupStart());
        for (int i = 0; i < g->t->count; i++) {
            const ParamInfo *p = &g->t->items[i];
            ncclComm_t comm = grad_comm(g, p);
            if (!in_part(g, p, layer, embedding) || !comm) continue;
            ncclCheck(ncclAllReduce(g->grads + p->offset, g->grads + p->offset, p->numel, ncclFloat, ncclSum, comm,
                                    g->comm_stream));
        }
        ncclCheck(ncclGroupEnd());
    }
    norm_partials(g, layer, embedding);
}

/* The embedding table's gradient after the backward. Untied from the LM head, its rows are nonzero only for the ids
 * that this step's tokens used on some rank (its rows start at zero each step): on several ranks those rows alone
 * are gathered, summed and put back, emb_pack_rows at a time, and every other row is zero on every rank, as the sum
 * would leave it; on any number of ranks the norm reads those rows alone, and the next step's zero_grads zeroes them
 * alone. The table's whole gradient (1.2 GB at mokc-small's sizes) came after the last layer's backward, with
 * nothing left to hide it; the rows are ~100 of 151 936 on byte-level ids. */
static void reduce_embedding(GpuModel *g, cudaEvent_t ready) {
    if (!g->emb_seen) {
        reduce_layer(g, -1, 1, ready);
        return;
    }
    const int V = g->d->V, C = g->d->C;
    if (g->dist->world > 1)
        mpiCheck(MPI_Allreduce(MPI_IN_PLACE, g->emb_seen, embedding_ids_words(V), MPI_UINT64_T, MPI_BOR,
                               MPI_COMM_WORLD));
    const int n = embedding_ids_list(g->emb_seen, V, g->h_emb_rows);
    stream_after(g->comm_stream, g->stream, ready);
    cudaCheck(cudaMemcpyAsync(g->emb_rows, g->h_emb_rows, sizeof(int) * (size_t)n, cudaMemcpyHostToDevice,
                              g->comm_stream));
    float *table = G32(g->t->tok_emb);
    for (int i = 0; g->emb_pack_rows && i < n; i += g->emb_pack_rows) {
        const int m = n - i < g->emb_pack_rows ? n - i : g->emb_pack_rows;
        gpu_embedding_forward(g->emb_pack, g->emb_rows + i, table, m, C, g->comm_stream);
        ncclCheck(ncclAllReduce(g->emb_pack, g->emb_pack, (size_t)m * C, ncclFloat, ncclSum, g->comms->world,
                                g->comm_stream));
        gpu_embedding_put_rows(table, g->emb_pack, g->emb_rows + i, m, C, g->comm_stream);
    }
    g->emb_grad_rows = n;
    norm_partials(g, -1, 1);
}

static void layer_backward(GpuModel *g, int l, double dloss) {
    const ModelDims *d = g->d;
    const LayerOffsets *o = &g->t->layers[l];
    LayerActs *a = &g->layers[l];
    const int N = g->N, C = d->C, QD = d->Hq * d->D, KD = d->Hkv * d->D, I = d->I;
    const long NC = (long)N * C;
    const float beta = grad_beta(g->grads_unwritten);
    cudaStream_t s = g->stream;
    /* FFN: dres holds d x_next and becomes d x_mid. */
    mark(g, is_moe(g, l) ? STEP_MOE : STEP_DENSE, is_moe(g, l) ? "moe bwd" : "dense ffn bwd");
    if (!is_moe(g, l)) {
        gpu_cast_f32_to_bf16(g->dres_bf16, g->dres, NC, s);
        gemm_rm(g->blas, 0, 1, N, I, C, g->dres_bf16, GEMM_BF16, W16(o->w_down), GEMM_BF16, g->dh, GEMM_F32, 1, 0);
        gemm_rm(g->blas, 1, 0, I, C, N, a->h, GEMM_BF16, g->dres_bf16, GEMM_BF16, G32(o->w_down), GEMM_F32, 1, beta);
        gpu_swiglu_backward(g->dg, g->du, g->dh, a->g, a->u, (long)N * I, s);
        gemm_rm(g->blas, 0, 1, N, C, I, g->dg, GEMM_BF16, W16(o->w_gate), GEMM_BF16, g->dln, GEMM_F32, 1, 0);
        gemm_rm(g->blas, 0, 1, N, C, I, g->du, GEMM_BF16, W16(o->w_up), GEMM_BF16, g->dln, GEMM_F32, 1, 1);
        gemm_rm(g->blas, 1, 0, C, I, N, a->ln2, GEMM_BF16, g->dg, GEMM_BF16, G32(o->w_gate), GEMM_F32, 1, beta);
        gemm_rm(g->blas, 1, 0, C, I, N, a->ln2, GEMM_BF16, g->du, GEMM_BF16, G32(o->w_up), GEMM_F32, 1, beta);
    } else {
        MoeGpuWeights w = moe_weights(g, o);
        MoeGpuGrads gr = moe_grads(g, o);
        if (g->experts_sq_now) gr.sq = g->experts_sq + (size_t)(l - d->first_dense) * g->experts_sq_layer;
        if (g->moe_mok) /* both write dln */
            moe_mok_backward(g->dln, &gr, g->dres, dloss * d->aux_coef, &g->moe_saved[l], g->moe_mok, a->ln2, &w,
                             N, s);
        else
            moe_unfused_backward(g->dln, &gr, g->dres, dloss * d->aux_coef, &g->moe_acts[l], &g->moe_work, a->ln2,
                                 &w, N, s);
    }
    mark(g, STEP_DENSE, "ffn norm bwd"); /* d x_mid, and its bf16 copy for the attention's products */
    gpu_rmsnorm_backward(g->dres, 1, g->dres_bf16, G32(o->ffn_norm), g->rms_scratch, g->dln, a->x_mid,
                         W32(o->ffn_norm), a->rstd2, N, C, s);
    /* Attention: x_mid = x + atty @ wo; dres becomes d x. */
    mark(g, STEP_ATTENTION, "o proj dgrad");
    gemm_rm(g->blas, 0, 1, N, QD, C, g->dres_bf16, GEMM_BF16, W16(o->wo), GEMM_BF16, g->datty, GEMM_BF16, 1, 0);
    mark(g, STEP_ATTENTION, "o proj wgrad");
    gemm_rm(g->blas, 1, 0, QD, C, N, a->atty, GEMM_BF16, g->dres_bf16, GEMM_BF16, G32(o->wo), GEMM_F32, 1, beta);
    mark(g, STEP_ATTENTION, "attention bwd");
    attention_backward_gpu(g->blas, g->attn, g->dqkv, g->datty, a->atty, a->attn_saved, a->q, a->k, a->v, s);
    mark(g, STEP_ATTENTION, "rope bwd"); /* dq's heads and dk's, the start of each row: one pass */
    const int QKV = QD + 2 * KD;
    gpu_rope(g->dqkv, g->rope_table, g->B, g->T, d->Hq + d->Hkv, d->D, QKV, 1, s);
    mark(g, STEP_ATTENTION, "q k v proj dgrad"); /* one product over K = QD + 2 KD: d ln1 written once */
    gemm_rm(g->blas, 0, 1, N, C, QKV, g->dqkv, GEMM_BF16, g->wqkv_bf16 + (size_t)l * C * QKV, GEMM_BF16, g->dln,
            GEMM_F32, 1, 0);
    mark(g, STEP_ATTENTION, "q k v proj wgrad");
    const size_t w_off[3] = {o->wq, o->wk, o->wv};
    for (int i = 0; i < 3; i++) {
        long col, width;
        attention_grad_part(d->Hq, d->Hkv, d->D, i, &col, &width);
        gemm_rm_ld(g->blas, 1, 0, C, (int)width, N, a->ln1, GEMM_BF16, C, g->dqkv + col, GEMM_BF16, QKV,
                   G32(w_off[i]), GEMM_F32, width, 1, beta);
    }
    mark(g, STEP_ATTENTION, "attn norm bwd");
    gpu_rmsnorm_backward(g->dres, 1, NULL, G32(o->attn_norm), g->rms_scratch, g->dln, a->x_in, W32(o->attn_norm),
                         a->rstd1, N, C, s);
}

double gpu_model_forward_backward(GpuModel *g, const int *inputs, const int *targets, double dloss, int last,
                                  double *aux, int64_t *load) {
    const ModelDims *d = g->d;
    const int N = g->N;
    /* Ranks' gradients are summed, so each carries 1/world of the mean. */
    double scaled = dloss / g->dist->world;
    g->timing = 1;
    double loss = forward(g, inputs, targets, 1, (float)(scaled / N), load);
    g->experts_sq_now = last && g->experts_sq_fused;
    *aux = g->h_scalars[1];
    cudaStream_t s = g->stream;
    mark(g, STEP_DENSE, "final norm bwd"); /* writes dres: the residual stream's gradient starts here */
    gpu_rmsnorm_backward(g->dres, 0, NULL, G32(g->t->final_norm), g->rms_scratch, g->dln, g->x_final,
                         W32(g->t->final_norm), g->rstdf, N, d->C, s);
    if (last) reduce_layer(g, -1, 0, g->layer_done[d->L]);
    for (int l = d->L - 1; l >= 0; l--) {
        layer_backward(g, l, scaled);
        if (last) reduce_layer(g, l, 0, g->layer_done[l]);
    }
    mark(g, STEP_DENSE, "embedding bwd");
    gpu_embedding_backward(G32(g->t->tok_emb), g->emb_runs, g->dres, g->emb_plan, &g->emb, d->C, s);
    if (last) reduce_embedding(g, g->layer_done[d->L + 1]);
    if (last) g->norm_queued = 1;
    /* the last micro-batch's stream idles from here until the optimizer: the all-reduces run, and the host
     * sums the losses and loads over the ranks */
    if (last) mark(g, STEP_ALLREDUCE, "all-reduce wait");
    else mark(g, STEP_DENSE, "host between batches"); /* what the stream waits for the next micro-batch's launches */
    g->grads_unwritten = 0;
    g->experts_sq_now = 0;
    g->timing = 0;
    /* No wait for the stream: the host loads the next micro-batch while this backward runs (upload_batch). */
    return loss;
}

/* ---------- optimizer ---------- */

double gpu_model_grad_norm(GpuModel *g) {
    cudaStream_t s = g->stream;
    if (!g->norm_queued)
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "gpu_model_grad_norm: no last micro-batch before (internal)");
    g->norm_queued = 0;
    /* the partials were queued behind the all-reduces (reduce_layer): this wait counts to the exposed all-reduce */
    stream_after(s, g->comm_stream, g->reduce_done);
    step_timer_mark(&g->timer, STEP_OPTIMIZER, "grad norm");
    int nexp = 0;
    for (int i = 0; i < g->t->count; i++) nexp += g->t->items[i].kind == PARAM_EXPERT;
    const int nrep = g->t->count - nexp;
    gpu_sum_f64(g->scalars, g->partials, (long)nrep * REDUCE_PARTIALS, 0, s);
    double *exp_partials = g->partials + (size_t)nrep * REDUCE_PARTIALS; /* the experts' own when not fused */
    if (g->experts_sq_fused)
        gpu_sum_f32_partials(exp_partials, g->experts_sq, g->experts_sq_layer * (g->d->L - g->d->first_dense), s);
    gpu_sum_f64(g->scalars + 1, exp_partials, (long)(g->experts_sq_fused ? 1 : nexp) * REDUCE_PARTIALS, 0, s);
    cudaCheck(cudaMemcpyAsync(g->h_scalars, g->scalars, 2 * sizeof(double), cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaStreamSynchronize(s));
    double rep = g->h_scalars[0], exp = g->h_scalars[1];
    if (g->dist->ep > 1) mpiCheck(MPI_Allreduce(MPI_IN_PLACE, &exp, 1, MPI_DOUBLE, MPI_SUM, g->dist->ep_comm));
    return sqrt(rep + exp);
}

void gpu_model_adamw(GpuModel *g, double lr, double grad_scale, long t) {
    const TrainConfig *tc = g->tc;
    step_timer_mark(&g->timer, STEP_OPTIMIZER, "adamw");
    /* after the comm stream's sums and the table's row list (gpu_model_grad_norm orders the same, if it ran) */
    stream_after(g->stream, g->comm_stream, g->reduce_done);
    const int call = g->deferred_on ? adamw_deferred_call(&g->deferred, lr, t, g->stream) : 0;
    for (int i = 0; i < g->t->count; i++) {
        const ParamInfo *p = &g->t->items[i];
        const size_t o = p->offset;
        if (o == g->t->tok_emb && g->deferred_on && g->deferred.rows) {
            /* the rows some rank's tokens used (reduce_embedding's list; all where no backward listed them) */
            const int n = g->emb_grad_rows;
            adamw_deferred_update_rows(&g->deferred, n >= 0 ? g->emb_rows : NULL, n, g->grads + o, grad_scale, call,
                                       g->stream);
            continue;
        }
        const int idle = p->kind == PARAM_EXPERT && g->experts_idle_unwritten;
        int *updated = idle && g->deferred_on ? adamw_deferred_updated(&g->deferred, p->layer - g->d->first_dense)
                                              : NULL;
        const AdamWTensor at = adamw_tensor(g, i);
        gpu_adamw(&at, g->grads + o, state_bf16(g), (long)p->numel, idle ? g->moe_saved[p->layer].rows_step : NULL,
                  idle ? (long)(p->numel / p->shape[0]) : 0, updated, call, lr, tc->beta1, tc->beta2, tc->eps,
                  grad_scale, t, g->stream);
    }
    qkv_weights_copy(g);
    step_timer_end(&g->timer);
}

void gpu_model_profile(GpuModel *g, int on) { step_timer_profile(&g->timer, on); }

void gpu_model_step_times(GpuModel *g, double ms[STEP_PARTS], OpTimes *ops) { step_timer_read(&g->timer, ms, ops); }
