/* The whole model on the CPU (no include guard: model_cpu.h includes it per scalar type). */

typedef struct {
    ModelDims d;
    const ParamTable *t;
    MoeComms comm;           /* expert-parallel group and aux-statistics world */
    int has_comm;            /* 0: this process alone */
    int B, T, N;             /* micro-batch, sequence length, tokens = B*T */
    int *inputs, *targets;   /* (N) copies of the last forward's batch */
    /* saved activations, per layer l at offset l * (N * width) */
    DECL_REAL *x_in;         /* (L, N, C) residual stream entering each layer */
    DECL_REAL *ln1, *rstd1;  /* (L, N, C), (L, N) */
    DECL_REAL *q, *k, *v;    /* (L, N, Hq*D), (L, N, Hkv*D) x 2, after RoPE */
    DECL_REAL *att;          /* (L, B, Hq, T, T) attention probabilities */
    DECL_REAL *atty;         /* (L, N, Hq*D) attention output before wo */
    DECL_REAL *x_mid;        /* (L, N, C) residual after attention */
    DECL_REAL *ln2, *rstd2;  /* (L, N, C), (L, N) */
    DECL_REAL *pre_g, *pre_u, *h; /* (L, N, I) dense FFN (only dense layers' slices used) */
    DECL_OP(MoeActs) *moe;   /* [L], allocated for MoE layers */
    DECL_REAL *x_final, *lnf, *rstdf, *logits; /* (N, C), (N, C), (N), (N, V) */
    /* backward scratch */
    DECL_REAL *dres, *dln, *datty, *dq, *dk, *dv, *dh, *dg, *du, *dlogits;
    double loss;             /* mean cross-entropy of the last forward */
    double aux_loss;         /* sum over MoE layers of the unweighted aux loss */
} DECL_OP(CpuModel);

/* comm: the EP group and the world of ranks training together; NULL = this process alone. */
void DECL_OP(cpu_model_init)(DECL_OP(CpuModel) *m, const ModelDims *d, const ParamTable *t, int B, int T,
                             const MoeComms *comm);
void DECL_OP(cpu_model_free)(DECL_OP(CpuModel) *m);

/* Forward over one micro-batch; returns the mean cross-entropy (also in m->loss; m->aux_loss
 * holds the aux losses). targets may be NULL (no loss). expert_bias: (L, E) or NULL. */
double DECL_OP(cpu_model_forward)(DECL_OP(CpuModel) *m, const DECL_REAL *params, const float *expert_bias,
                                  const int *inputs, const int *targets);

/* Backward of dloss * (cross-entropy + aux_coef * aux_loss) for the last forward; ADDS into grads
 * (same layout as params). dloss = 1 / grad_accum when accumulating. */
void DECL_OP(cpu_model_backward)(DECL_OP(CpuModel) *m, const DECL_REAL *params, DECL_REAL *grads, double dloss);
