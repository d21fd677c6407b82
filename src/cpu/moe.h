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
 * - aux statistics over the data-parallel world: counts and P are summed over comm.stats (every
 *   rank's micro-batch of this micro-step), so the loss does not depend on how the global batch is
 *   split over ranks; with one rank they are the local ones.
 * Expert parallelism: experts [ep_rank*E/ep, (ep_rank+1)*E/ep) are local to this rank. Dispatched
 * rows go to their expert's owner with MPI_Alltoallv over comm.ep; the owner processes each
 * expert's rows in the stable order (source rank, token, j) and sends the outputs back, so every
 * rank's combine sees its own (token, j) slots. The backward exchanges dy and dx the same way.
 */
#ifndef MOKC_CPU_MOE_H
#define MOKC_CPU_MOE_H

#include <mpi.h>

/* Who the MoE block talks to. */
typedef struct {
    MPI_Comm ep;       /* the expert-parallel group (size ep), ordered by ep_rank */
    MPI_Comm stats;    /* the ranks whose micro-batches share one aux-loss statistic (the world) */
} MoeComms;

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
    const MoeComms *comm; /* NULL: this process alone (ep must be 1) */
} MoeDims;

#define REAL_DECL_FILE "moe_decl.h"
#include "declare_both.h"

#endif
