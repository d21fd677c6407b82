/*
 * The MoE block of the CPU reference (no include guard: moe.h includes it once per scalar type
 * with DECL_REAL and DECL_OP() defined). Shapes and semantics are in moe.h.
 */

/* Pointers into a parameter buffer, or into the gradient buffer of the same layout. */
typedef struct {
    DECL_REAL *router;      /* (C, E)                 fp32 router, y = x @ router            */
    DECL_REAL *w_gate;      /* (E_local, C, I)        routed experts, local ones only       */
    DECL_REAL *w_up;        /* (E_local, C, I)                                              */
    DECL_REAL *w_down;      /* (E_local, I, C)                                              */
    DECL_REAL *shared_gate; /* (C, S*I) shared experts as one SwiGLU of width S*I; NULL if S=0 */
    DECL_REAL *shared_up;   /* (C, S*I)                                                     */
    DECL_REAL *shared_down; /* (S*I, C)                                                     */
} DECL_OP(MoeWeights);

/* What the forward saves for the backward, sized for N tokens (allocated once, reused). */
typedef struct {
    int N;                  /* capacity in tokens */
    DECL_REAL *logits;      /* (N, E) router logits                                         */
    DECL_REAL *scores;      /* (N, E) softmax or sigmoid of the logits                      */
    int *topk;              /* (N, k) selected expert ids, in selection order              */
    DECL_REAL *gates;       /* (N, k) gate values (unbiased scores, renormalised, scaled)   */
    int *expert_offset;     /* (E + 1) start of each expert's rows in the dispatched order  */
    int *row_slot;          /* (N*k) dispatched row r came from slot n*k + j                */
    int *slot_row;          /* (N*k) inverse: slot n*k + j went to dispatched row           */
    DECL_REAL *xe;          /* (N*k, C) dispatched inputs, grouped by expert (so by owner rank) */
    DECL_REAL *ye;          /* (N*k, C) expert outputs back from the owners, same rows as xe    */
    /* Owner side: rows received from the EP group (R_max = ep*N*min(k, E_local): worst case). */
    int rows_in;            /* rows received in the last forward                                */
    int *send_rows;         /* (ep) rows sent to each owner                                     */
    int *recv_rows;         /* (ep) rows received from each source                              */
    int *recv_offset;       /* (E_local + 1) start of each local expert's rows in xr            */
    int *recv_source_row;   /* (R_max) expert-ordered row -> its row in source-rank order       */
    DECL_REAL *xr;          /* (R_max, C) received rows, grouped by local expert, stable order  */
    DECL_REAL *pre_gate;    /* (R_max, I)                                                       */
    DECL_REAL *pre_up;      /* (R_max, I)                                                       */
    DECL_REAL *h;           /* (R_max, I) silu(pre_gate) * pre_up                               */
    DECL_REAL *stage;       /* (R_max, C) scratch: rows in source-rank order, as MPI moves them */
    DECL_REAL *rows_out;    /* (R_max, C) scratch: owner-side outputs in expert order           */
    DECL_REAL *s_gate;      /* (N, S*I) shared experts                                      */
    DECL_REAL *s_up;        /* (N, S*I)                                                     */
    DECL_REAL *s_h;         /* (N, S*I)                                                     */
    int *counts;            /* (E) this rank's slots routed to each expert in the last forward */
    long long *stat_counts; /* (E) the same summed over comm.stats (the aux loss's f)          */
    double aux_loss;        /* unweighted aux loss of the last forward                       */
    /* Set by the caller: (N, k) selections the forward uses instead of its own (`mokc check`: the GPU's, whose
     * router reads bf16 inputs, so near-ties may fall the other way), or NULL. After such a forward: */
    const int *forced_topk;
    int forced_differ;      /* forced choices outside the router's own selection (its own k largest of score + bias) */
    double forced_gap;      /* the largest shortfall of such a choice's score + bias below the k-th of the router's own
                               selection, relative to that one (0 when none differ); infinite where a token's forced
                               row names an expert outside [0, E) or one twice (that token keeps its own selection) */
} DECL_OP(MoeActs);

void DECL_OP(moe_acts_alloc)(DECL_OP(MoeActs) *a, const MoeDims *d, int N);
void DECL_OP(moe_acts_free)(DECL_OP(MoeActs) *a);

/* y (N, C) = MoE(x); overwrites y. expert_bias (E) affects selection only (may be NULL = zeros).
 * Fills a (saved activations, counts, aux_loss). */
void DECL_OP(moe_forward)(DECL_REAL *y, DECL_OP(MoeActs) *a, const DECL_REAL *x, const DECL_OP(MoeWeights) *w,
                          const float *expert_bias, const MoeDims *d, int N);

/* Given dy (N, C) and the weight daux of the aux loss in the total loss (the loss term is
 * daux * aux_loss), ADDS dx (N, C) and the weight gradients into dw (same layout as w). Uses the
 * exchange scratch in a (stage, rows_out); the saved activations stay as the forward left them. */
void DECL_OP(moe_backward)(DECL_REAL *dx, const DECL_OP(MoeWeights) *dw, const DECL_REAL *dy, double daux,
                           DECL_OP(MoeActs) *a, const DECL_REAL *x, const DECL_OP(MoeWeights) *w,
                           const MoeDims *d, int N);
