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
    DECL_REAL *xe;          /* (N*k, C) dispatched inputs, grouped by expert               */
    DECL_REAL *pre_gate;    /* (N*k, I)                                                     */
    DECL_REAL *pre_up;      /* (N*k, I)                                                     */
    DECL_REAL *h;           /* (N*k, I) silu(pre_gate) * pre_up                            */
    DECL_REAL *ye;          /* (N*k, C) expert outputs, one per slot's dispatched row       */
    DECL_REAL *s_gate;      /* (N, S*I) shared experts                                      */
    DECL_REAL *s_up;        /* (N, S*I)                                                     */
    DECL_REAL *s_h;         /* (N, S*I)                                                     */
    int *counts;            /* (E) tokens routed to each expert in the last forward         */
    double aux_loss;        /* unweighted aux loss of the last forward                       */
} DECL_OP(MoeActs);

void DECL_OP(moe_acts_alloc)(DECL_OP(MoeActs) *a, const MoeDims *d, int N);
void DECL_OP(moe_acts_free)(DECL_OP(MoeActs) *a);

/* y (N, C) = MoE(x); overwrites y. expert_bias (E) affects selection only (may be NULL = zeros).
 * Fills a (saved activations, counts, aux_loss). */
void DECL_OP(moe_forward)(DECL_REAL *y, DECL_OP(MoeActs) *a, const DECL_REAL *x, const DECL_OP(MoeWeights) *w,
                          const float *expert_bias, const MoeDims *d, int N);

/* Given dy (N, C) and the weight daux of the aux loss in the total loss (the loss term is
 * daux * aux_loss), ADDS dx (N, C) and the weight gradients into dw (same layout as w). */
void DECL_OP(moe_backward)(DECL_REAL *dx, const DECL_OP(MoeWeights) *dw, const DECL_REAL *dy, double daux,
                           const DECL_OP(MoeActs) *a, const DECL_REAL *x, const DECL_OP(MoeWeights) *w,
                           const MoeDims *d, int N);
