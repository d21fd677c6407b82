/*
 * Dense ops of the CPU reference: matmuls, embedding, RMSNorm, RoPE, causal grouped-query attention,
 * SwiGLU and cross-entropy, forward and backward. Written once over `real` and compiled twice (float
 * for training, double with -DMOKC_F64 for gradient checks). Shapes and conventions are in ops_decl.h.
 *
 * Determinism: every output element is produced by exactly one OpenMP thread, and every sum runs in a
 * fixed sequential order that does not depend on the thread count, so results are bitwise identical
 * for any OMP_NUM_THREADS. <tgmath.h> makes exp/sqrt/... pick the float or double version from the
 * argument type, so the float build does not silently compute in double (and vice versa).
 */
#include "real.h"
#include "ops.h"
#include <stdlib.h>
#include <string.h>
#include <tgmath.h>

#include "common.h"

/* Below this much work (elements or multiply-adds) an op runs on one thread: waking the team costs
 * more than it saves, and far more when the cores are oversubscribed. Results do not depend on it. */
#define PAR_MIN_WORK 32768

/* ------------------------------------------------------------------------------------------------
 * Matmul. All three variants run one kernel: C[M,N] (+)= A[M,K] @ B[K,N] with B contiguous along N
 * and A addressed through (row, column) strides, so A^T needs no copy. C is cut into MR x NB tiles;
 * a tile sums over k in increasing order into local accumulators (kept in registers when the tile
 * is full size) whose innermost update is an axpy over NB contiguous columns, which vectorizes
 * without -ffast-math. Tasks are (MC rows, NB columns) pieces of C, each owned by one thread, so
 * the result does not depend on the thread count. For cache reuse a task runs k in blocks of KC
 * (a KC x NB strip of B is reused from L1 by all its row tiles); between blocks the running sum
 * is parked in C, so each element is still the plain sequential sum
 *     C = ((C_in + A[i,0] B[0,j]) + A[i,1] B[1,j]) + ...      (C_in = 0 unless accumulating)
 */
#define MM_MR 4                         /* rows of a register tile */
#define MM_NB (128 / (int)sizeof(real)) /* columns: 32 floats or 16 doubles, MR x NB fit in registers */
#define MM_MC 64                        /* rows per task: an MC x KC block of A stays in L2 */
#define MM_KC 256                       /* k per block: a KC x NB strip of B stays in L1 */

static inline __attribute__((always_inline)) void mm_tile(real *C, long ldc, const real *A, long rsa, long csa,
                                                          const real *B, long ldb, int mr, int nb, int K,
                                                          int load_c) {
    real acc[MM_MR][MM_NB];
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nb; j++) acc[r][j] = load_c ? C[r * ldc + j] : 0;
    for (int k = 0; k < K; k++) {
        const real *b = B + k * ldb;
        for (int r = 0; r < mr; r++) {
            real a = A[r * rsa + k * csa];
            for (int j = 0; j < nb; j++) acc[r][j] += a * b[j];
        }
    }
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nb; j++) C[r * ldc + j] = acc[r][j];
}

/* C[M,N] (+)= A @ B where A(i, k) = A[i*rsa + k*csa] and B(k, j) = B[k*N + j]. */
static void mm_kernel(real *C, const real *A, long rsa, long csa, const real *B, int M, int K, int N,
                      int accumulate) {
    if (K <= 0) {
        if (!accumulate) memset(C, 0, (size_t)M * N * sizeof(real));
        return;
    }
    int mblocks = (M + MM_MC - 1) / MM_MC, ntiles = (N + MM_NB - 1) / MM_NB;
#pragma omp parallel for collapse(2) schedule(static) if ((long)M * N * K >= PAR_MIN_WORK)
    for (int ib = 0; ib < mblocks; ib++)
        for (int jt = 0; jt < ntiles; jt++) {
            int i1 = (ib + 1) * MM_MC < M ? (ib + 1) * MM_MC : M;
            int j0 = jt * MM_NB, nb = N - j0 < MM_NB ? N - j0 : MM_NB;
            for (int k0 = 0; k0 < K; k0 += MM_KC) {
                int kc = K - k0 < MM_KC ? K - k0 : MM_KC;
                int load_c = accumulate || k0 > 0;
                for (int i0 = ib * MM_MC; i0 < i1; i0 += MM_MR) {
                    int mr = i1 - i0 < MM_MR ? i1 - i0 : MM_MR;
                    real *c = C + (long)i0 * N + j0;
                    const real *a = A + i0 * rsa + k0 * csa;
                    const real *b = B + (long)k0 * N + j0;
                    /* separate calls so the full-size case compiles with constant trip counts */
                    if (mr == MM_MR && nb == MM_NB)
                        mm_tile(c, N, a, rsa, csa, b, N, MM_MR, MM_NB, kc, load_c);
                    else
                        mm_tile(c, N, a, rsa, csa, b, N, mr, nb, kc, load_c);
                }
            }
        }
}

void OP(matmul_nn)(real *C, const real *A, const real *B, int M, int K, int N, int accumulate) {
    mm_kernel(C, A, K, 1, B, M, K, N, accumulate);
}

void OP(matmul_tn)(real *C, const real *A, const real *B, int M, int K, int N, int accumulate) {
    /* C[K,N] = A^T[K,M] @ B[M,N]: element (k, m) of A^T is A[m*K + k]. */
    mm_kernel(C, A, 1, K, B, K, M, N, accumulate);
}

void OP(matmul_nt)(real *C, const real *A, const real *B, int M, int K, int N, int accumulate) {
    /* The kernel wants B contiguous along N, so transpose B[N,K] into Bt[K,N] first (O(NK) work
     * against O(MNK)); the sum over k keeps the same fixed order. */
    real *Bt = mallocCheck((size_t)K * N * sizeof(real));
#pragma omp parallel for schedule(static) if ((long)K * N >= PAR_MIN_WORK)
    for (int k = 0; k < K; k++)
        for (int j = 0; j < N; j++) Bt[(long)k * N + j] = B[(long)j * K + k];
    mm_kernel(C, A, K, 1, Bt, M, K, N, accumulate);
    free(Bt);
}

/* ------------------------------------------------------------------------------------------------
 * Embedding. */
/* Token ids are validated when data is loaded; this cheap check turns a bug there into a clear
 * error instead of an out-of-bounds access. */
static void check_ids(const char *op, const int *ids, int N, int V) {
    for (int n = 0; n < N; n++)
        if (ids[n] < 0 || ids[n] >= V)
            mokc_die(MOKC_EXIT_RUNTIME, "token ids are validated when data is loaded, so this is a bug",
                     "%s: token %d at row %d is outside the vocabulary [0, %d)", op, ids[n], n, V);
}

void OP(embedding_forward)(real *out, const int *tokens, const real *table, int N, int C) {
#pragma omp parallel for schedule(static) if ((long)N * C >= PAR_MIN_WORK)
    for (int n = 0; n < N; n++) memcpy(out + (long)n * C, table + (long)tokens[n] * C, (size_t)C * sizeof(real));
}

#define CHANNEL_CHUNK 64 /* channels per task in the backward passes that reduce over rows */

void OP(embedding_backward)(real *dtable, const real *dout, const int *tokens, int N, int C, int V) {
    check_ids("embedding_backward", tokens, N, V);
    if (N <= 0 || C <= 0) return;
    /* The positions of each id in increasing order (a counting sort), cut into runs of EMBEDDING_BWD_RUN: a run's rows
     * are summed in order from its first, and the runs' sums added to the row in order (ops.h). */
    int *start = callocCheck((size_t)V + 1, sizeof(int)), *next = mallocCheck((size_t)V * sizeof(int));
    int *order = mallocCheck((size_t)N * sizeof(int)), *ids = mallocCheck((size_t)N * sizeof(int));
    for (int n = 0; n < N; n++) start[tokens[n] + 1]++;
    int nid = 0;
    for (int v = 0; v < V; v++) {
        if (start[v + 1] > 0) ids[nid++] = v;
        start[v + 1] += start[v];
        next[v] = start[v];
    }
    for (int n = 0; n < N; n++) order[next[tokens[n]]++] = n;
    int chunks = (C + CHANNEL_CHUNK - 1) / CHANNEL_CHUNK;
#pragma omp parallel for schedule(static) if ((long)N * C >= PAR_MIN_WORK)
    for (int ch = 0; ch < chunks; ch++) {
        int c0 = ch * CHANNEL_CHUNK, w = c0 + CHANNEL_CHUNK < C ? CHANNEL_CHUNK : C - c0;
        real run[CHANNEL_CHUNK];
        for (int i = 0; i < nid; i++) {
            real *d = dtable + (long)ids[i] * C + c0;
            for (int p0 = start[ids[i]], end = start[ids[i] + 1]; p0 < end; p0 += EMBEDDING_BWD_RUN) {
                const int p1 = p0 + EMBEDDING_BWD_RUN < end ? p0 + EMBEDDING_BWD_RUN : end;
                memcpy(run, dout + (long)order[p0] * C + c0, (size_t)w * sizeof(real));
                for (int p = p0 + 1; p < p1; p++) {
                    const real *g = dout + (long)order[p] * C + c0;
                    for (int c = 0; c < w; c++) run[c] += g[c];
                }
                for (int c = 0; c < w; c++) d[c] += run[c];
            }
        }
    }
    free(start), free(next), free(order), free(ids);
}

/* ------------------------------------------------------------------------------------------------
 * RMSNorm. Row statistics are summed in double: cheap, and it keeps the float build close to the
 * double one. */
void OP(rmsnorm_forward)(real *out, real *rstd, const real *x, const real *weight, int N, int C, real eps) {
#pragma omp parallel for schedule(static) if ((long)N * C >= PAR_MIN_WORK)
    for (int n = 0; n < N; n++) {
        const real *xr = x + (long)n * C;
        real *o = out + (long)n * C;
        double ss = 0;
        for (int c = 0; c < C; c++) ss += (double)xr[c] * xr[c];
        real r = (real)(1.0 / sqrt(ss / C + (double)eps));
        rstd[n] = r;
        for (int c = 0; c < C; c++) o[c] = xr[c] * r * weight[c];
    }
}

void OP(rmsnorm_backward)(real *dx, real *dweight, const real *dout, const real *x, const real *weight,
                          const real *rstd, int N, int C) {
    /* out_c = x_c r w_c with r = (mean(x^2) + eps)^-1/2, dr/dx_j = -r^3 x_j / C, so
     * dx_j = r w_j dout_j - x_j r^3 / C * sum_c dout_c w_c x_c. */
#pragma omp parallel for schedule(static) if ((long)N * C >= PAR_MIN_WORK)
    for (int n = 0; n < N; n++) {
        const real *xr = x + (long)n * C, *g = dout + (long)n * C;
        real *d = dx + (long)n * C;
        double dot = 0;
        for (int c = 0; c < C; c++) dot += (double)g[c] * weight[c] * xr[c];
        real r = rstd[n];
        real coef = (real)((double)r * r * r * dot / C);
        for (int c = 0; c < C; c++) d[c] += r * weight[c] * g[c] - xr[c] * coef;
    }
    /* dweight_c = sum over rows of dout * x * r: parallel over channel chunks, rows in order. */
    int chunks = (C + CHANNEL_CHUNK - 1) / CHANNEL_CHUNK;
#pragma omp parallel for schedule(static) if ((long)N * C >= PAR_MIN_WORK)
    for (int ch = 0; ch < chunks; ch++) {
        int c0 = ch * CHANNEL_CHUNK, c1 = c0 + CHANNEL_CHUNK < C ? c0 + CHANNEL_CHUNK : C;
        for (int n = 0; n < N; n++) {
            const real *xr = x + (long)n * C, *g = dout + (long)n * C;
            real r = rstd[n];
            for (int c = c0; c < c1; c++) dweight[c] += g[c] * xr[c] * r;
        }
    }
}

/* ------------------------------------------------------------------------------------------------
 * RoPE. Angles, cosines and sines are computed in double once per call for all (t, i) and shared
 * by every head and batch row: t up to a few thousand times a frequency near 1 would lose digits in
 * float. */
void OP(rope_apply)(real *x, int B, int T, int H, int D, real theta, int inverse) {
    if (D % 2 != 0)
        mokc_die(MOKC_EXIT_RUNTIME, "head_dim must be even for rotary embeddings", "rope_apply: head dim %d is odd", D);
    int half = D / 2;
    double *cs = mallocCheck((size_t)T * half * 2 * sizeof(double)); /* (T, half, {cos, sin}) */
    double sign = inverse ? -1.0 : 1.0;                              /* the transpose rotates by -angle */
#pragma omp parallel for schedule(static) if ((long)T * D >= PAR_MIN_WORK)
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            double angle = t * pow((double)theta, -2.0 * i / D);
            cs[((long)t * half + i) * 2] = cos(angle);
            cs[((long)t * half + i) * 2 + 1] = sign * sin(angle);
        }
    long rows = (long)B * T;
#pragma omp parallel for schedule(static) if (rows * H * D >= PAR_MIN_WORK)
    for (long n = 0; n < rows; n++) {
        const double *ct = cs + (n % T) * half * 2;
        for (int h = 0; h < H; h++) {
            real *xh = x + (n * H + h) * D;
            for (int i = 0; i < half; i++) {
                real c = (real)ct[2 * i], s = (real)ct[2 * i + 1];
                real x1 = xh[i], x2 = xh[i + half];
                xh[i] = x1 * c - x2 * s;
                xh[i + half] = x1 * s + x2 * c;
            }
        }
    }
    free(cs);
}

/* ------------------------------------------------------------------------------------------------
 * Causal grouped-query attention. Rows of q/out have stride Hq*D, rows of k/v stride Hkv*D. */
static void check_heads(const char *op, int Hq, int Hkv) {
    if (Hkv <= 0 || Hq % Hkv != 0)
        mokc_die(MOKC_EXIT_RUNTIME, "num_heads must be a multiple of num_kv_heads",
                 "%s: %d query heads cannot share %d kv heads", op, Hq, Hkv);
}

void OP(attention_forward)(real *out, real *att, const real *q, const real *k, const real *v, int B, int T, int Hq,
                           int Hkv, int D) {
    check_heads("attention_forward", Hq, Hkv);
    int group = Hq / Hkv;
    real scale = (real)(1.0 / sqrt((double)D));
    long qs = (long)Hq * D, kvs = (long)Hkv * D;
#pragma omp parallel for collapse(3) schedule(static) if ((long)B * Hq * T * T * D >= PAR_MIN_WORK)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < Hq; h++)
            for (int t = 0; t < T; t++) {
                const real *qt = q + ((long)b * T + t) * qs + (long)h * D;
                const real *kb = k + (long)b * T * kvs + (long)(h / group) * D;
                const real *vb = v + (long)b * T * kvs + (long)(h / group) * D;
                real *a = att + (((long)b * Hq + h) * T + t) * T;
                real *o = out + ((long)b * T + t) * qs + (long)h * D;
                real mx = -INFINITY;
                for (int u = 0; u <= t; u++) {
                    const real *ku = kb + u * kvs;
                    real s = 0;
                    for (int d = 0; d < D; d++) s += qt[d] * ku[d];
                    a[u] = s * scale;
                    if (a[u] > mx) mx = a[u];
                }
                real sum = 0;
                for (int u = 0; u <= t; u++) {
                    a[u] = exp(a[u] - mx);
                    sum += a[u];
                }
                real inv = 1 / sum;
                for (int u = 0; u <= t; u++) a[u] *= inv;
                for (int u = t + 1; u < T; u++) a[u] = 0;
                for (int d = 0; d < D; d++) o[d] = 0;
                for (int u = 0; u <= t; u++) {
                    const real *vu = vb + u * kvs;
                    real p = a[u];
                    for (int d = 0; d < D; d++) o[d] += p * vu[d];
                }
            }
}

void OP(attention_backward)(real *dq, real *dk, real *dv, const real *dout, const real *att, const real *q,
                            const real *k, const real *v, int B, int T, int Hq, int Hkv, int D) {
    check_heads("attention_backward", Hq, Hkv);
    int group = Hq / Hkv;
    real scale = (real)(1.0 / sqrt((double)D));
    long qs = (long)Hq * D, kvs = (long)Hkv * D;
    /* Pass 1, per query row: dS = gradient of the pre-softmax scores (times scale), saved in dsc
     * (B, Hq, T, T); dq_t += sum_u dS[t,u] k_u. */
    real *dsc = mallocCheck((size_t)B * Hq * T * T * sizeof(real));
#pragma omp parallel for collapse(3) schedule(static) if ((long)B * Hq * T * T * D >= PAR_MIN_WORK)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < Hq; h++)
            for (int t = 0; t < T; t++) {
                const real *g = dout + ((long)b * T + t) * qs + (long)h * D;
                const real *kb = k + (long)b * T * kvs + (long)(h / group) * D;
                const real *vb = v + (long)b * T * kvs + (long)(h / group) * D;
                const real *a = att + (((long)b * Hq + h) * T + t) * T;
                real *ds = dsc + (((long)b * Hq + h) * T + t) * T;
                real *dqt = dq + ((long)b * T + t) * qs + (long)h * D;
                /* softmax backward: dS_u = p_u (dp_u - sum_w p_w dp_w), with dp_u = dout . v_u */
                real pdp = 0;
                for (int u = 0; u <= t; u++) {
                    const real *vu = vb + u * kvs;
                    real dp = 0;
                    for (int d = 0; d < D; d++) dp += g[d] * vu[d];
                    ds[u] = dp;
                    pdp += a[u] * dp;
                }
                for (int u = 0; u <= t; u++) ds[u] = a[u] * (ds[u] - pdp) * scale;
                for (int u = t + 1; u < T; u++) ds[u] = 0;
                for (int u = 0; u <= t; u++) {
                    const real *ku = kb + u * kvs;
                    for (int d = 0; d < D; d++) dqt[d] += ds[u] * ku[d];
                }
            }
    /* Pass 2, per key row u of a kv head: sum over the group's query heads, then over t >= u, in that
     * fixed order: dk_u += dS[t,u] q_t and dv_u += P[t,u] dout_t. */
#pragma omp parallel for collapse(3) schedule(static) if ((long)B * Hq * T * T * D >= PAR_MIN_WORK)
    for (int b = 0; b < B; b++)
        for (int kh = 0; kh < Hkv; kh++)
            for (int u = 0; u < T; u++) {
                real *dku = dk + ((long)b * T + u) * kvs + (long)kh * D;
                real *dvu = dv + ((long)b * T + u) * kvs + (long)kh * D;
                for (int h = kh * group; h < (kh + 1) * group; h++)
                    for (int t = u; t < T; t++) {
                        long at = (((long)b * Hq + h) * T + t) * T + u;
                        const real *qt = q + ((long)b * T + t) * qs + (long)h * D;
                        const real *g = dout + ((long)b * T + t) * qs + (long)h * D;
                        real s = dsc[at], p = att[at];
                        for (int d = 0; d < D; d++) {
                            dku[d] += s * qt[d];
                            dvu[d] += p * g[d];
                        }
                    }
            }
    free(dsc);
}

/* ------------------------------------------------------------------------------------------------
 * SwiGLU: h = silu(g) * u with silu(g) = g * sigmoid(g). */
static inline real sigmoid(real x) { return 1 / (1 + exp(-x)); }

void OP(swiglu_forward)(real *h, const real *gate, const real *up, long n) {
#pragma omp parallel for schedule(static) if (n >= PAR_MIN_WORK)
    for (long i = 0; i < n; i++) h[i] = gate[i] * sigmoid(gate[i]) * up[i];
}

void OP(swiglu_backward)(real *dgate, real *dup, const real *dh, const real *gate, const real *up, long n) {
    /* d silu(g)/dg = s + g s (1 - s) with s = sigmoid(g). */
#pragma omp parallel for schedule(static) if (n >= PAR_MIN_WORK)
    for (long i = 0; i < n; i++) {
        real g = gate[i], s = sigmoid(g);
        dgate[i] += dh[i] * up[i] * (s + g * s * (1 - s));
        dup[i] += dh[i] * g * s;
    }
}

/* ------------------------------------------------------------------------------------------------
 * Cross-entropy, log-softmax in double with the row max subtracted. The mean is a sequential sum of
 * the per-row losses, so it does not depend on the thread count. */
double OP(cross_entropy)(real *dlogits, real *losses, const real *logits, const int *targets, int N, int V,
                         real dloss) {
    check_ids("cross_entropy", targets, N, V);
    if (N <= 0) return 0;
    double *row_loss = mallocCheck((size_t)N * sizeof(double));
    double gscale = (double)dloss / N;
#pragma omp parallel for schedule(static) if ((long)N * V >= PAR_MIN_WORK)
    for (int n = 0; n < N; n++) {
        const real *x = logits + (long)n * V;
        double mx = x[0];
        for (int j = 1; j < V; j++)
            if (x[j] > mx) mx = x[j];
        double sum = 0;
        for (int j = 0; j < V; j++) sum += exp((double)x[j] - mx);
        double lse = mx + log(sum);
        row_loss[n] = lse - x[targets[n]];
        if (losses) losses[n] = (real)row_loss[n];
        if (dlogits) {
            real *d = dlogits + (long)n * V;
            for (int j = 0; j < V; j++) {
                double p = exp((double)x[j] - lse);
                d[j] = (real)((p - (j == targets[n])) * gscale);
            }
        }
    }
    double total = 0;
    for (int n = 0; n < N; n++) total += row_loss[n];
    free(row_loss);
    return total / N;
}
