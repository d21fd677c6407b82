/*
 * Causal grouped-query attention on the GPU: the workspace of either implementation, the flash
 * path's two calls into kernels/flash_attention.h, and the cuBLAS sequence around the kernels of
 * kernels/attention.cu (API and layouts in kernels/attention.h).
 *
 * cuBLAS path, causal blocking: the T query rows are cut into nb blocks of tb rows (tb a multiple
 * of 64, nb at most 16). Row block i only needs key columns u < end_i (its last row + 1), so the
 * products with a prefix in K or N (Q K^T, P V, dO V^T, dS K) run per row block over that prefix;
 * the products that produce key rows (dS^T Q and P^T dO) run per column block j over the query
 * rows t >= j*tb. That computes about (nb + 1) / (2 nb) of the full square instead of all of it.
 * Score entries above the diagonal inside a block are computed but never read; P and dS are exact
 * zeros there (dS is written only up to the end of each row's block: nothing reads beyond).
 * One batched GEMM per block, batch index z = b*Hq + h over (batch, query head); the GQA mapping
 * (query head h -> kv head h / group) and the strided per-head views live in the pointer tables.
 *
 * cuBLAS backward sequence: dP = dO V^T into the scores scratch; dS (bf16) in place over it;
 * dQ = dS K straight into dq's part of the gradient rows; dK_h = dS_h^T Q_h and dV_h = P_h^T dO_h per query
 * head into an fp32 scratch, then summed over each kv group in head order (when Hq == Hkv they go straight
 * into dk's and dv's parts).
 */
#include "../../kernels/attention.h"

#include <math.h>
#include <stdlib.h>

#include "../../kernels/flash_attention.h"
#include "common.h"
#include "gpu/check.h"
#include "gpu/gemm.h"

struct AttentionWorkspace {
    AttnImpl impl;
    int B, T, Hq, Hkv, D, group;
    void *flash;   /* flash: the backward's scratch (flash_attention_backward_workspace_bytes) */
    int tb, nb;    /* cuBLAS: causal block: rows per block, number of blocks */
    float *scores; /* (B, Hq, T, T) fp32: scores; in the backward dP, then dS as bf16 with ld 2T */
    float *heads;  /* (B, Hq, T, D) fp32 per-query-head dK / dV; NULL when group == 1 */
    void **table;  /* ATTN_MAX_RULES * nb * B * Hq device pointers (see attention_fill_pointers) */
    void *owned;   /* the block to cudaFree, or NULL when the caller provided it */
};

AttnImpl attention_default_impl(int D) { return flash_attention_supported(D) ? ATTN_FLASH : ATTN_CUBLAS; }

const char *attention_impl_name(AttnImpl impl) { return impl == ATTN_FLASH ? "flash" : "cublas"; }

/* Rows per causal block: T/16 rounded up to a multiple of 64 (at least 64), so nb <= 16. */
static int block_rows(int T) {
    int per = (T + 15) / 16;
    return ((per + 63) / 64) * 64;
}

static void check_shape(AttnImpl impl, int B, int T, int Hq, int Hkv, int D) {
    if (B < 1 || T < 1 || Hq < 1 || Hkv < 1 || D < 1)
        mokc_die(MOKC_EXIT_RUNTIME, "every attention dimension must be at least 1",
                 "attention workspace: bad shape B=%d T=%d Hq=%d Hkv=%d D=%d", B, T, Hq, Hkv, D);
    if (Hq % Hkv != 0)
        mokc_die(MOKC_EXIT_RUNTIME, "num_heads must be a multiple of num_kv_heads",
                 "attention workspace: %d query heads cannot share %d kv heads", Hq, Hkv);
    if ((long long)B * Hq * T >= (1LL << 31) || T > (1 << 29))
        mokc_die(MOKC_EXIT_RUNTIME, "lower the micro-batch or the sequence length",
                 "attention workspace: B*Hq*T = %lld score rows is beyond the kernels' 2^31 grid limit",
                 (long long)B * Hq * T);
    if (impl == ATTN_FLASH && !flash_attention_supported(D))
        mokc_die(MOKC_EXIT_RUNTIME, "use head_dim 16, 32, 64 or 128, or the cuBLAS attention (attention_default_impl)",
                 "attention workspace: the flash kernels are not built for head dim %d", D);
    if (impl == ATTN_FLASH && T > FLASH_ATTENTION_MAX_T)
        mokc_die(MOKC_EXIT_RUNTIME, "lower the sequence length",
                 "attention workspace: flash attention takes T <= %d, not %d", FLASH_ATTENTION_MAX_T, T);
}

/* Sizes of the three parts, each rounded up to 256 bytes (they are carved from one block); the
 * flash path has only the first. */
static size_t round256(size_t n) { return (n + 255) & ~(size_t)255; }
static void part_bytes(AttnImpl impl, int B, int T, int Hq, int Hkv, int D, size_t part[3]) {
    size_t z = (size_t)B * Hq;
    if (impl == ATTN_FLASH) {
        part[0] = round256(flash_attention_backward_workspace_bytes(B, T, Hq, D));
        part[1] = part[2] = 0;
        return;
    }
    int tb = block_rows(T), nb = (T + tb - 1) / tb;
    part[0] = round256(z * T * T * sizeof(float));
    part[1] = Hq != Hkv ? round256(z * T * D * sizeof(float)) : 0;
    part[2] = round256((size_t)ATTN_MAX_RULES * nb * z * sizeof(void *));
}

size_t attention_saved_bytes(AttnImpl impl, int B, int T, int Hq) {
    size_t z = (size_t)B * Hq * T;
    return impl == ATTN_FLASH ? z * sizeof(float) : z * T * sizeof(bf16_t);
}

size_t attention_workspace_bytes(AttnImpl impl, int B, int T, int Hq, int Hkv, int D) {
    check_shape(impl, B, T, Hq, Hkv, D);
    size_t part[3];
    part_bytes(impl, B, T, Hq, Hkv, D, part);
    return part[0] + part[1] + part[2];
}

AttentionWorkspace *attention_workspace_create_at(AttnImpl impl, void *mem, size_t bytes, int B, int T, int Hq,
                                                  int Hkv, int D) {
    size_t need = attention_workspace_bytes(impl, B, T, Hq, Hkv, D), part[3];
    if (!mem || ((uintptr_t)mem & 255) != 0 || bytes < need)
        mokc_die(MOKC_EXIT_RUNTIME, "size the block with attention_workspace_bytes() and align it to 256 bytes",
                 "attention workspace: block %p of %zu bytes cannot hold the %zu bytes for %s B=%d T=%d Hq=%d "
                 "Hkv=%d D=%d",
                 mem, bytes, need, attention_impl_name(impl), B, T, Hq, Hkv, D);
    part_bytes(impl, B, T, Hq, Hkv, D, part);
    AttentionWorkspace *ws = callocCheck(1, sizeof *ws);
    ws->impl = impl;
    ws->B = B, ws->T = T, ws->Hq = Hq, ws->Hkv = Hkv, ws->D = D, ws->group = Hq / Hkv;
    char *base = mem;
    if (impl == ATTN_FLASH) {
        ws->flash = base;
        return ws;
    }
    ws->tb = block_rows(T);
    ws->nb = (T + ws->tb - 1) / ws->tb;
    ws->scores = (float *)base;
    ws->heads = part[1] ? (float *)(base + part[0]) : NULL;
    ws->table = (void **)(base + part[0] + part[1]);
    return ws;
}

AttentionWorkspace *attention_workspace_create(AttnImpl impl, int B, int T, int Hq, int Hkv, int D) {
    size_t bytes = attention_workspace_bytes(impl, B, T, Hq, Hkv, D);
    void *mem = NULL;
    cudaCheck(cudaMalloc(&mem, bytes));
    AttentionWorkspace *ws = attention_workspace_create_at(impl, mem, bytes, B, T, Hq, Hkv, D);
    ws->owned = mem;
    return ws;
}

void attention_workspace_free(AttentionWorkspace *ws) {
    if (!ws) return;
    if (ws->owned) cudaCheck(cudaFree(ws->owned));
    free(ws);
}

/* ---- pointer rules (bytes). Row block i starts at row r0 = i*tb; column block j at c0 = j*tb. ---- */

/* A bf16 activation of query heads (q, out, dout: (B*T, Hq*D); dq: in the gradient rows), rows ld elements
 * apart; query head h, rows from r0. */
static AttnPtrRule rule_qrows(const void *base, const AttentionWorkspace *ws, long long ld) {
    long long row = ld * 2;
    return (AttnPtrRule){(unsigned long long)(uintptr_t)base, ws->T * row, (long long)ws->D * 2, 0, ws->tb * row};
}
/* A bf16 activation of kv heads (k, v: (B*T, Hkv*D); dk, dv: in the gradient rows), rows ld elements apart;
 * kv head h / group, rows from r0 (blk = 1) or 0. */
static AttnPtrRule rule_kvrows(const void *base, const AttentionWorkspace *ws, long long ld, int per_block) {
    long long row = ld * 2;
    return (AttnPtrRule){(unsigned long long)(uintptr_t)base, ws->T * row, 0, (long long)ws->D * 2,
                         per_block ? ws->tb * row : 0};
}
/* A (B, Hq, T, T) matrix with `row_bytes` per row (fp32 scores: 4T; bf16 att: 2T), rows from r0,
 * and columns from c0 too when diag (elem = bytes of one element of the view). */
static AttnPtrRule rule_square(const void *base, const AttentionWorkspace *ws, long long row_bytes, int diag,
                               int elem) {
    long long mat = (long long)ws->T * row_bytes;
    return (AttnPtrRule){(unsigned long long)(uintptr_t)base, ws->Hq * mat, mat, 0,
                         ws->tb * row_bytes + (diag ? (long long)ws->tb * elem : 0)};
}
/* The per-query-head fp32 scratch (B, Hq, T, D), rows from c0. */
static AttnPtrRule rule_heads(const AttentionWorkspace *ws) {
    long long row = (long long)ws->D * 4;
    return (AttnPtrRule){(unsigned long long)(uintptr_t)ws->heads, (long long)ws->Hq * ws->T * row, ws->T * row, 0,
                         ws->tb * row};
}

/* The B*Hq-entry array of rule r for block i. */
static const void *const *tab(const AttentionWorkspace *ws, int r, int i) {
    return (const void *const *)(ws->table + ((size_t)r * ws->nb + i) * ws->B * ws->Hq);
}
static void *const *tab_out(const AttentionWorkspace *ws, int r, int i) {
    return (void *const *)(ws->table + ((size_t)r * ws->nb + i) * ws->B * ws->Hq);
}

static void bind_stream(cublasHandle_t cublas, cudaStream_t stream) {
    cudaStream_t current = NULL;
    cublasCheck(cublasGetStream(cublas, &current));
    if (current != stream) cublasCheck(cublasSetStream(cublas, stream));
}

static float att_scale(int D) { return (float)(1.0 / sqrt((double)D)); }

static void cublas_forward(cublasHandle_t cublas, AttentionWorkspace *ws, bf16_t *out, bf16_t *att, const bf16_t *q,
                           const bf16_t *k, const bf16_t *v, cudaStream_t stream) {
    const int T = ws->T, D = ws->D, Hq = ws->Hq, Hkv = ws->Hkv, batch = ws->B * ws->Hq;
    bind_stream(cublas, stream);
    enum { S_Q, S_K, S_S, O_P, O_V, O_OUT, N_FWD };
    AttnPtrRule rules[N_FWD];
    rules[S_Q] = rule_qrows(q, ws, (long long)Hq * D);
    rules[S_K] = rule_kvrows(k, ws, (long long)Hkv * D, 0);
    rules[S_S] = rule_square(ws->scores, ws, (long long)T * 4, 0, 4);
    rules[O_P] = rule_square(att, ws, (long long)T * 2, 0, 2);
    rules[O_V] = rule_kvrows(v, ws, (long long)Hkv * D, 0);
    rules[O_OUT] = rule_qrows(out, ws, (long long)Hq * D);
    attention_fill_pointers(ws->table, rules, N_FWD, ws->nb, ws->B, Hq, ws->group, stream);

    /* S[r0:r0+m, 0:end] = Q[r0:r0+m] K[0:end]^T (fp32). */
    for (int i = 0; i < ws->nb; i++) {
        int r0 = i * ws->tb, m = T - r0 < ws->tb ? T - r0 : ws->tb, end = r0 + m;
        gemm_rm_batched(cublas, 0, 1, m, end, D, tab(ws, S_Q, i), GEMM_BF16, Hq * D, tab(ws, S_K, i), GEMM_BF16,
                        Hkv * D, tab_out(ws, S_S, i), GEMM_F32, T, batch, 1.0f, 0.0f);
    }
    attention_softmax_forward(att, ws->scores, (long)batch * T, T, att_scale(D), stream);
    /* out[r0:r0+m] = P[r0:r0+m, 0:end] V[0:end] (bf16 out). */
    for (int i = 0; i < ws->nb; i++) {
        int r0 = i * ws->tb, m = T - r0 < ws->tb ? T - r0 : ws->tb, end = r0 + m;
        gemm_rm_batched(cublas, 0, 0, m, D, end, tab(ws, O_P, i), GEMM_BF16, T, tab(ws, O_V, i), GEMM_BF16, Hkv * D,
                        tab_out(ws, O_OUT, i), GEMM_BF16, Hq * D, batch, 1.0f, 0.0f);
    }
}

static void cublas_backward(cublasHandle_t cublas, AttentionWorkspace *ws, bf16_t *dqkv, const bf16_t *dout,
                            const bf16_t *att, const bf16_t *q, const bf16_t *k, const bf16_t *v, cudaStream_t stream) {
    const int T = ws->T, D = ws->D, Hq = ws->Hq, Hkv = ws->Hkv, batch = ws->B * ws->Hq;
    const long long ldq = (long long)Hq * D, ldkv = (long long)Hkv * D, ldg = ldq + 2 * ldkv;
    bf16_t *dq = dqkv, *dk = dqkv + ldq, *dv = dk + ldkv;
    const int direct = ws->group == 1; /* dK/dV straight into dk/dv: no group to sum */
    bind_stream(cublas, stream);
    enum { P_DO, P_V, P_S, Q_DS, Q_K, Q_DQ, K_DS, K_Q, K_OUT, V_P, V_DO, V_OUT, N_BWD };
    AttnPtrRule rules[N_BWD];
    rules[P_DO] = rule_qrows(dout, ws, ldq);
    rules[P_V] = rule_kvrows(v, ws, ldkv, 0);
    rules[P_S] = rule_square(ws->scores, ws, (long long)T * 4, 0, 4);
    rules[Q_DS] = rule_square(ws->scores, ws, (long long)T * 4, 0, 2); /* bf16 dS, row r at byte 4*T*r */
    rules[Q_K] = rule_kvrows(k, ws, ldkv, 0);
    rules[Q_DQ] = rule_qrows(dq, ws, ldg);
    rules[K_DS] = rule_square(ws->scores, ws, (long long)T * 4, 1, 2); /* dS[c0:, c0:] */
    rules[K_Q] = rule_qrows(q, ws, ldq);
    rules[K_OUT] = direct ? rule_kvrows(dk, ws, ldg, 1) : rule_heads(ws);
    rules[V_P] = rule_square(att, ws, (long long)T * 2, 1, 2); /* P[c0:, c0:] */
    rules[V_DO] = rule_qrows(dout, ws, ldq);
    rules[V_OUT] = direct ? rule_kvrows(dv, ws, ldg, 1) : rule_heads(ws);
    attention_fill_pointers(ws->table, rules, N_BWD, ws->nb, ws->B, Hq, ws->group, stream);

    /* dP[r0:r0+m, 0:end] = dO[r0:r0+m] V[0:end]^T (fp32). */
    for (int i = 0; i < ws->nb; i++) {
        int r0 = i * ws->tb, m = T - r0 < ws->tb ? T - r0 : ws->tb, end = r0 + m;
        gemm_rm_batched(cublas, 0, 1, m, end, D, tab(ws, P_DO, i), GEMM_BF16, Hq * D, tab(ws, P_V, i), GEMM_BF16,
                        Hkv * D, tab_out(ws, P_S, i), GEMM_F32, T, batch, 1.0f, 0.0f);
    }
    /* dS = P (dP - rowsum(P dP)) / sqrt(D), bf16, in place (ld 2T). */
    attention_softmax_backward(ws->scores, att, (long)batch * T, T, ws->tb, att_scale(D), stream);
    /* dq[r0:r0+m] = dS[r0:r0+m, 0:end] K[0:end]. */
    for (int i = 0; i < ws->nb; i++) {
        int r0 = i * ws->tb, m = T - r0 < ws->tb ? T - r0 : ws->tb, end = r0 + m;
        gemm_rm_batched(cublas, 0, 0, m, D, end, tab(ws, Q_DS, i), GEMM_BF16, 2 * T, tab(ws, Q_K, i), GEMM_BF16,
                        Hkv * D, tab_out(ws, Q_DQ, i), GEMM_BF16, (int)ldg, batch, 1.0f, 0.0f);
    }
    /* dK_h[c0:c0+m] = dS[c0:T, c0:c0+m]^T Q[c0:T]; then the group sum (fixed head order). */
    GemmType out_type = direct ? GEMM_BF16 : GEMM_F32;
    int ld_out = direct ? (int)ldg : D;
    for (int j = 0; j < ws->nb; j++) {
        int c0 = j * ws->tb, m = T - c0 < ws->tb ? T - c0 : ws->tb;
        gemm_rm_batched(cublas, 1, 0, m, D, T - c0, tab(ws, K_DS, j), GEMM_BF16, 2 * T, tab(ws, K_Q, j), GEMM_BF16,
                        Hq * D, tab_out(ws, K_OUT, j), out_type, ld_out, batch, 1.0f, 0.0f);
    }
    if (!direct) attention_group_sum(dk, ldg, ws->heads, ws->B, T, Hq, Hkv, D, stream);
    /* dV_h[c0:c0+m] = P[c0:T, c0:c0+m]^T dO[c0:T]; then the group sum. */
    for (int j = 0; j < ws->nb; j++) {
        int c0 = j * ws->tb, m = T - c0 < ws->tb ? T - c0 : ws->tb;
        gemm_rm_batched(cublas, 1, 0, m, D, T - c0, tab(ws, V_P, j), GEMM_BF16, T, tab(ws, V_DO, j), GEMM_BF16,
                        Hq * D, tab_out(ws, V_OUT, j), out_type, ld_out, batch, 1.0f, 0.0f);
    }
    if (!direct) attention_group_sum(dv, ldg, ws->heads, ws->B, T, Hq, Hkv, D, stream);
}

void attention_forward_gpu(cublasHandle_t cublas, AttentionWorkspace *ws, bf16_t *out, void *saved, const bf16_t *q,
                           const bf16_t *k, const bf16_t *v, cudaStream_t stream) {
    if (ws->impl == ATTN_FLASH)
        flash_attention_forward(out, saved, q, k, v, ws->B, ws->T, ws->Hq, ws->Hkv, ws->D, stream);
    else
        cublas_forward(cublas, ws, out, saved, q, k, v, stream);
}

void attention_backward_gpu(cublasHandle_t cublas, AttentionWorkspace *ws, bf16_t *dqkv, const bf16_t *dout,
                            const bf16_t *out, const void *saved, const bf16_t *q, const bf16_t *k, const bf16_t *v,
                            cudaStream_t stream) {
    if (ws->impl == ATTN_FLASH)
        flash_attention_backward(dqkv, ws->flash, dout, out, saved, q, k, v, ws->B, ws->T, ws->Hq, ws->Hkv, ws->D,
                                 stream);
    else
        cublas_backward(cublas, ws, dqkv, dout, saved, q, k, v, stream);
}
