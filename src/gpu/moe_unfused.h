/*
 * The MoE layer on the GPU in its plain, unfused form (`"moe_impl": "unfused"`): the baseline the
 * megakernel must match and beat. It computes the function of the CPU reference (src/cpu/moe.h:
 * router, scores, top-k with ties to the lower id, gates, routed SwiGLU experts, shared experts as
 * one SwiGLU of width S*I, the fixed-order combine, the Switch aux loss over the stats group) with
 * the numerics of DESIGN.md: bf16 activations into every GEMM with fp32 accumulation (the router's
 * weights, logits, scores, gates and statistics fp32); fp32 output and gradients; no floating-point
 * atomics anywhere.
 *
 * Forward, in order on one stream:
 *   1. logits = x @ router (fp32 on tensor cores, split-K: src/gpu/moe_router.h); scores, top-k, gates
 *      (kernels/moe_route.h);
 *   2. the dispatch plan (kernels/moe_plan.h): slots grouped by expert in stable (token, j) order;
 *   3. the aux statistic: per-expert counts (int64) and sum of normalised scores (fp64), summed
 *      over comms.stats with ncclAllReduce, then the aux loss;
 *   4. EP > 1: per-(source, local expert) row counts exchanged with grouped ncclSend/ncclRecv;
 *   5. ONE HOST SYNCHRONISATION: counts, the peers' counts, the aux loss and a NaN flag come to the
 *      host (like PyTorch's all_to_all path, the baseline learns its per-expert row counts on the
 *      host: GEMM sizes and NCCL message sizes come from them). The step is therefore not
 *      CUDA-graph capturable; the megakernel (issue 7) removes this;
 *   6. gather token rows into expert order (bf16); EP > 1: grouped ncclSend/ncclRecv of bf16 rows
 *      to the owners (to oneself: a device copy), received in source-rank order into a staging
 *      buffer, then regrouped by local expert: each expert's rows in (source rank, token, j) order;
 *   7. per local expert, cuBLAS GEMMs (src/gpu/gemm.h, one call per expert with its row count):
 *      pre_gate, pre_up = x_e @ w_gate_e, x_e @ w_up_e (bf16 out), h = silu(pre_gate) * pre_up
 *      (kernels/swiglu.h, bf16), out_e = h @ w_down_e (bf16 out);
 *   8. EP > 1: outputs regrouped to source order and sent back the same way;
 *   9. shared experts: y = swiglu(x @ shared_gate, x @ shared_up) @ shared_down (fp32 out);
 *  10. combine (kernels/moe_combine.h): y[n] (+)= sum over j in order of gate[n,j] * ye[slot] in fp32.
 * The backward mirrors it (dy and dx rows travel through the same plan, no new synchronisation):
 * combine backward (dye = gate * bf16(dy) in bf16, dgates = <dy, ye>), shared experts, dye to the owners,
 * expert backward (dh, dW_down, SwiGLU backward, dW_gate, dW_up, dx rows in fp32 then bf16), dx rows
 * back, dx (+)= sum over j of the rows, router backward (gates and aux through the scores; dW_router
 * and dx from bf16 operands with fp32 accumulation, src/gpu/moe_router.h). Weight gradients are one GEMM per expert over its rows (fixed K order).
 *
 * Memory: the layer's saved activations (MoeUnfusedActs, one per MoE layer) and one scratch
 * (MoeUnfusedWork, shared by every layer that runs on the same stream) are allocated once for the
 * worst case: an owner receives at most R_max = ep * N_max * min(k, E_local) rows (dropless, never
 * overflowing for any routing). Byte counts: moe_unfused_acts_bytes / moe_unfused_work_bytes; with
 * T = N_max, SI = S*I, El = E/ep, R = R_max, nseg = El*ep:
 *   acts = 4TE (scores) + 12Tk (topk, gates, slot_row) + 4Tk (row_slot) + 16E + 4 + 4(2nseg+1)
 *        + 2RC (xr) + 4RI (pre_gate, pre_up) + 2TkC (ye) + 4T*SI (s_gate, s_up)
 *   work = 4TE (logits / dlogits) + 8T + 8*ceil(T/256)*E + 8E + 12 + 4*ceil(Tk/1024)*E + 4Tk + 4E
 *        + 2TkC (xe / dxe) + 2RI (h) + 2T*SI (shared.h)
 *        + 4Tk (dgates) + 2TkC (dye) + 4RI (dh) + 4RI (dpg, dpu) + 4RC (dxr)
 *        + 2TC (dy bf16) + 4T*SI (shared.dh) + 4T*SI (shared.dgate, shared.dup)
 *        + [ep > 1] 6RC (stage, rows_out, dyr) + moe_router_scratch_bytes(T, C, E) (64 MiB + 6CE + 2TE)
 *   plus cuBLAS's own workspace (one handle) and a few pinned host bytes.
 *
 * Conventions: device pointers everywhere; token n = b*T + t; weights (in, out), y = x @ W. Every
 * rank of the EP and stats groups calls forward and backward together (they run collectives), all
 * with the same N. A backward uses the plan of the last forward of the same acts. Bitwise
 * reproducible for a fixed shape, GPU, library versions and rank count.
 */
#ifndef MOKC_GPU_MOE_UNFUSED_H
#define MOKC_GPU_MOE_UNFUSED_H

#include <cublas_v2.h>
#include <nccl.h>
#include <stddef.h>

#include "../../kernels/common.h"

/* The layer's shape (the CPU's MoeDims without the MPI handles). */
typedef struct {
    int C;             /* hidden size */
    int E;             /* routed experts in total */
    int k;             /* experts per token, 1 <= k <= E */
    int I;             /* expert width (moe_intermediate_size) */
    int n_shared;      /* shared experts S, each of width I; 0 = none */
    int sigmoid;       /* 0: softmax scores, 1: sigmoid */
    int norm_topk;     /* renormalise the k gates */
    double scaling;    /* routed_scaling_factor */
    int ep, ep_rank;   /* expert-parallel group size (divides E) and this rank's place in it */
} MoeGpuDims;

/* Who the layer talks to. */
typedef struct {
    ncclComm_t ep;     /* the EP group, NCCL rank == ep_rank; NULL iff ep == 1 */
    ncclComm_t stats;  /* the ranks whose micro-batches share the aux statistic (the world); NULL = alone */
} MoeGpuComms;

/* Device weights of one layer. Expert tensors hold this rank's E_local = E/ep experts
 * [ep_rank*E_local, (ep_rank+1)*E_local). */
typedef struct {
    const float *router;       /* (C, E) fp32                                    */
    const bf16_t *w_gate;      /* (E_local, C, I) bf16 weights (master_split.h)  */
    const bf16_t *w_up;        /* (E_local, C, I)                                */
    const bf16_t *w_down;      /* (E_local, I, C)                                */
    const bf16_t *shared_gate; /* (C, S*I); NULL when S = 0                      */
    const bf16_t *shared_up;   /* (C, S*I)                                       */
    const bf16_t *shared_down; /* (S*I, C)                                       */
    /* NULL, or the optimizer's updates the routed experts of MoE layer deferred_layer owe (gpu/adamw_deferred.h):
     * the megakernel's forward makes them good for its experts with rows before it reads them (the unfused layer
     * takes none) */
    const struct AdamWDeferred *deferred;
    int deferred_layer;
} MoeGpuWeights;

/* fp32 gradients, same shapes as MoeGpuWeights; the backward ADDS into them, except the routed
 * experts' (w_gate, w_up, w_down) when overwrite_experts is 1: those it writes, every element (zeros
 * for an expert without rows), so the first micro-batch of a step neither zeroes nor reads them.
 * sq: NULL, or (the step's last micro-batch; the megakernel's backward only, moe_mok_backward) where
 * the routed experts' final gradients leave their squares, mok_expert_sq_floats(E_local, C, I) floats
 * whose sum is the squared norm of w_gate, w_up and w_down together.
 * idle_unwritten (the megakernel's backward only): a routed expert the step has given no rows so far is left
 * unwritten, not written as zeros, and its first rows of the step are written, not added: its gradient is zeros
 * where the saved state's rows_step (MoeMokSaved) is 0 after the call, and only there what the memory holds is
 * not it. On every micro-batch of a step, or on none. */
typedef struct {
    float *router, *w_gate, *w_up, *w_down, *shared_gate, *shared_up, *shared_down;
    int overwrite_experts;
    float *sq;
    int idle_unwritten;
} MoeGpuGrads;

/* The shared experts' scratch (src/gpu/moe_shared.h), N_max rows x SI, owned by a layer:
 * h = silu(gate) * up, and the backward's dh (fp32) and gate/up gradients. */
typedef struct {
    bf16_t *h;
    float *dh;
    bf16_t *dgate, *dup;
} MoeSharedScratch;

/* What a forward saves for its backward (one per MoE layer), plus its routing results. */
typedef struct {
    MoeGpuDims d;
    int N_max;
    long R_max;              /* ep * N_max * min(k, E_local) */
    /* device */
    float *scores;           /* (N, E) softmax / sigmoid scores                               */
    int *topk;               /* (N, k) selected experts in selection order                  */
    float *gates;            /* (N, k) gate values                                           */
    int *slot_row;           /* (N*k) slot n*k+j -> its row in expert order (xe, ye, dye)     */
    int *row_slot;           /* (N*k) inverse                                                */
    int *counts;             /* (E) this rank's slots per expert                             */
    long long *stat_counts;  /* (E) the same summed over comms.stats (the aux loss's f)      */
    int *expert_offset;      /* (E+1) start of each expert's rows in expert order            */
    int *seg;                /* owner_start (nseg+1) then stage_start (nseg): the regrouping  */
    bf16_t *xr;              /* (R_max, C) rows at this owner, by local expert, stable order */
    bf16_t *pre_gate;        /* (R_max, I) x_e @ w_gate_e                                    */
    bf16_t *pre_up;          /* (R_max, I) x_e @ w_up_e                                      */
    bf16_t *ye;              /* (N*k, C) expert outputs back at this rank, expert order      */
    bf16_t *s_gate, *s_up;   /* (N, S*I) shared experts' pre-activations; NULL when S = 0    */
    /* host, from the last forward */
    int N;                   /* its tokens */
    int rows_in;             /* rows this owner received (<= R_max)                         */
    double aux_loss;         /* unweighted aux loss (the caller weights it)                 */
    int *h_counts;           /* (E) copy of counts                                          */
    int *h_recv_counts;      /* (ep * E_local) [source][local expert] rows received         */
    int *h_recv_offset;      /* (E_local + 1) start of each local expert's rows in xr       */
    int *h_send_rows, *h_send_start; /* (ep) rows to / first row in expert order for owner p */
    int *h_recv_rows, *h_stage_start; /* (ep) rows from source p / their first staging row  */
} MoeUnfusedActs;

/* Scratch shared by the layers that run on one stream, the cuBLAS handle and the communicators. */
typedef struct {
    MoeGpuDims d;
    int N_max;
    long R_max;
    MoeGpuComms comms;
    int stats_ranks;         /* ranks in comms.stats (1 without) */
    cublasHandle_t blas;
    float *logits;           /* (N, E) router logits; the backward's dlogits            */
    float *router_scratch;   /* the router GEMMs' partials and planes (moe_router.h)  */
    double *pnorm;           /* (N) */
    double *aux_partial;     /* (ceil(N/MOE_AUX_CHUNK), E) */
    double *psum;            /* (E) */
    double *aux;             /* (1) */
    int *fail;               /* (1) */
    int *chunk_counts;       /* (ceil(N*k/1024), E) */
    int *slot_rank;          /* (N*k) */
    int *recv_counts;        /* (E) */
    bf16_t *xe;              /* (N*k, C) ep > 1: dispatched rows; backward: dx rows back */
    bf16_t *h;               /* (R_max, I) SwiGLU output (recomputed in the backward) */
    MoeSharedScratch shared; /* (N, S*I) each */
    float *dgates;           /* (N*k) */
    bf16_t *dye;             /* (N*k, C) */
    float *dh;               /* (R_max, I) */
    bf16_t *dpg, *dpu;       /* (R_max, I) */
    float *dxr;              /* (R_max, C) */
    bf16_t *dy_bf16;         /* (N, C) */
    bf16_t *stage;           /* (R_max, C) ep > 1: rows as NCCL moves them (source-rank order) */
    bf16_t *rows_out;        /* (R_max, C) ep > 1: owner-side outputs / dx rows in owner order */
    bf16_t *dyr;             /* (R_max, C) ep > 1: dy rows at the owner */
    /* pinned host */
    int *pin_i;              /* fail, counts (E), recv_counts (E), seg (2*nseg+1) */
    double *pin_d;           /* aux */
} MoeUnfusedWork;

/* Checks the shape (dies with a message naming the problem). */
void moe_gpu_dims_check(const MoeGpuDims *d, int N_max, const char *who);

/* The layer's communicators from comms (NULL: none): at ep > 1 the EP communicator must hold the
 * ep ranks of one group ordered by ep_rank (dies naming the problem otherwise); at ep = 1 it is
 * not used (NULL). Returns the ranks of the statistics communicator (1 without one). */
int moe_gpu_comms_take(MoeGpuComms *out, const MoeGpuComms *comms, const MoeGpuDims *d, const char *who);

size_t moe_unfused_acts_bytes(const MoeGpuDims *d, int N_max);
size_t moe_unfused_work_bytes(const MoeGpuDims *d, int N_max);

void moe_unfused_acts_create(MoeUnfusedActs *a, const MoeGpuDims *d, int N_max);
void moe_unfused_acts_destroy(MoeUnfusedActs *a);
/* Checks comms against d (sizes and ep_rank), creates the cuBLAS handle. comms may be NULL when
 * ep == 1 and the process is alone. */
void moe_unfused_work_create(MoeUnfusedWork *w, const MoeGpuDims *d, int N_max, const MoeGpuComms *comms);
void moe_unfused_work_destroy(MoeUnfusedWork *w);

/* y (N, C) fp32 = MoE(x), overwritten, + residual (N, C) fp32 where not NULL (the residual stream's add, in the
 * combine's pass; residual is not y). x (N, C) bf16 feeds the router and the experts. expert_bias (E) fp32 or
 * NULL: selection only. Fills a (saved activations, counts, aux_loss on the host). Synchronises `stream` once
 * (see above). */
void moe_unfused_forward(float *y, const float *residual, MoeUnfusedActs *a, MoeUnfusedWork *w, const bf16_t *x,
                         const MoeGpuWeights *wt, const float *expert_bias, int N, cudaStream_t stream);

/* Given dy (N, C) fp32 and daux (the aux loss's weight in the total loss), WRITES dx (N, C) fp32 (whatever it
 * held) and ADDS every weight gradient into g. x as in the forward. N must be the forward's. No host
 * synchronisation. */
void moe_unfused_backward(float *dx, const MoeGpuGrads *g, const float *dy, double daux, MoeUnfusedActs *a,
                          MoeUnfusedWork *w, const bf16_t *x, const MoeGpuWeights *wt, int N, cudaStream_t stream);

#endif
