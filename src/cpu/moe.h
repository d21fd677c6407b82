/*
 * The MoE block (router, top-k selection, routed SwiGLU experts, shared experts, aux loss) of the
 * CPU reference, forward and backward, declared for float (plain names) and double (_f64 names).
 *
 * Semantics (the GPU kernels are held to them):
 * - logits = x @ router (C -> E); scores = softmax(logits) over E, or sigmoid(logits).
 * - selection: the k largest of scores + expert_bias; ties go to the lower expert id; the bias
 *   only steers selection (aux-loss-free balancing).
 * - gates: the selected unbiased scores, divided by their sum when norm_topk_prob, then times
 *   routed_scaling_factor. Gradients flow into the router through the gates.
 * - routed expert e: down(silu(x @ gate_e) * (x @ up_e)); y = sum over j = 0..k-1 (fixed order)
 *   of gate_j * expert_{topk_j}(x), plus the shared experts (one SwiGLU of width S*I).
 * - dispatched order: rows grouped by expert, within an expert in (token, j) order (stable).
 * - aux loss (Switch): E * sum_e f_e * P_e with f_e = counts_e / (N*k) (no gradient) and
 *   P_e = mean over tokens of p_e, p = the scores normalised to sum to 1 per token (softmax: the
 *   scores themselves). The caller weights it by router_aux_loss_coef.
 * Expert parallelism: experts [ep_rank*E/ep, (ep_rank+1)*E/ep) are local to this rank. The
 * single-process block requires ep = 1; the distributed layer adds the token exchange.
 */
#ifndef MOKC_CPU_MOE_H
#define MOKC_CPU_MOE_H

typedef struct {
    int C;             /* hidden size */
    int E;             /* routed experts in total */
    int k;             /* experts per token */
    int I;             /* expert width (moe_intermediate_size) */
    int n_shared;      /* shared experts, each of width I */
    int sigmoid;       /* 0: softmax scores, 1: sigmoid scores */
    int norm_topk;     /* renormalise the k gate values */
    double scaling;    /* routed_scaling_factor */
    int ep, ep_rank;   /* expert-parallel group size and this rank's place in it */
} MoeDims;

#define DECL_REAL float
#define DECL_OP(name) name
#include "moe_decl.h"
#undef DECL_REAL
#undef DECL_OP
#define DECL_REAL double
#define DECL_OP(name) name##_f64
#include "moe_decl.h"
#undef DECL_REAL
#undef DECL_OP

#endif
