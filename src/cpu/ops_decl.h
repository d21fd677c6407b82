/*
 * Dense ops of the CPU reference (no include guard: ops.h includes it once per scalar type with
 * DECL_REAL and DECL_OP() defined). Layout: activations are row-major (N tokens, width), N = B*T with
 * token n = b*T + t. Linear weights are stored (in, out) so that y = x @ W.
 * Backward functions ADD into their gradient outputs (callers zero them), so gradients of
 * parameters accumulate over micro-steps and a tensor used twice sums both contributions.
 * Every reduction has a fixed order: results are bitwise reproducible run to run.
 */

/* C[M,N] = A[M,K] @ B[K,N] (accumulate = 0) or C += A @ B (accumulate = 1). */
void DECL_OP(matmul_nn)(DECL_REAL *C, const DECL_REAL *A, const DECL_REAL *B, int M, int K, int N, int accumulate);
/* C[M,N] (+)= A[M,K] @ B[N,K]^T */
void DECL_OP(matmul_nt)(DECL_REAL *C, const DECL_REAL *A, const DECL_REAL *B, int M, int K, int N, int accumulate);
/* C[K,N] (+)= A[M,K]^T @ B[M,N] */
void DECL_OP(matmul_tn)(DECL_REAL *C, const DECL_REAL *A, const DECL_REAL *B, int M, int K, int N, int accumulate);

/* out[N,C] = table[tokens[n], :] */
void DECL_OP(embedding_forward)(DECL_REAL *out, const int *tokens, const DECL_REAL *table, int N, int C);
/* dtable[tokens[n], :] += dout[n, :]: an id's rows in runs of EMBEDDING_BWD_RUN positions (ops.h), deterministic. */
void DECL_OP(embedding_backward)(DECL_REAL *dtable, const DECL_REAL *dout, const int *tokens, int N, int C, int V);

/* out = x / rms(x) * weight, rstd[n] = 1/sqrt(mean(x^2) + eps) saved for backward. */
void DECL_OP(rmsnorm_forward)(DECL_REAL *out, DECL_REAL *rstd, const DECL_REAL *x, const DECL_REAL *weight, int N, int C, DECL_REAL eps);
void DECL_OP(rmsnorm_backward)(DECL_REAL *dx, DECL_REAL *dweight, const DECL_REAL *dout, const DECL_REAL *x, const DECL_REAL *weight,
                          const DECL_REAL *rstd, int N, int C);

/* Rotary embedding in place on x (N = B*T rows of H heads x D), position = t, rotate-half pairing
 * (i, i + D/2), angle t * theta^(-2i/D). inverse = 1 applies the transpose (backward). */
void DECL_OP(rope_apply)(DECL_REAL *x, int B, int T, int H, int D, DECL_REAL theta, int inverse);

/* Causal grouped-query attention. q: (B*T, Hq*D), k, v: (B*T, Hkv*D), out: (B*T, Hq*D).
 * Query head h reads kv head h / (Hq/Hkv). att: (B, Hq, T, T) softmax probabilities, saved.
 * Scale 1/sqrt(D). */
void DECL_OP(attention_forward)(DECL_REAL *out, DECL_REAL *att, const DECL_REAL *q, const DECL_REAL *k, const DECL_REAL *v,
                           int B, int T, int Hq, int Hkv, int D);
void DECL_OP(attention_backward)(DECL_REAL *dq, DECL_REAL *dk, DECL_REAL *dv, const DECL_REAL *dout, const DECL_REAL *att,
                            const DECL_REAL *q, const DECL_REAL *k, const DECL_REAL *v, int B, int T, int Hq, int Hkv, int D);

/* h = silu(gate) * up, elementwise over n elements. */
void DECL_OP(swiglu_forward)(DECL_REAL *h, const DECL_REAL *gate, const DECL_REAL *up, long n);
void DECL_OP(swiglu_backward)(DECL_REAL *dgate, DECL_REAL *dup, const DECL_REAL *dh, const DECL_REAL *gate, const DECL_REAL *up, long n);

/* Mean cross-entropy over N rows of V logits; returns the mean loss. If dlogits is non-NULL it
 * receives (softmax - onehot) * dloss / N (overwritten, not accumulated). losses[n] optional. */
double DECL_OP(cross_entropy)(DECL_REAL *dlogits, DECL_REAL *losses, const DECL_REAL *logits, const int *targets, int N, int V,
                         DECL_REAL dloss);
