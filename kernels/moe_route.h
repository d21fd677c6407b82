/*
 * MoE routing on the GPU, after the router GEMM (logits = x @ router, fp32): scores, top-k
 * selection, gates, the Switch aux loss and the router backward. The semantics are the CPU
 * reference's (src/cpu/moe.h), which these kernels are tested against:
 * - scores = softmax(logits) over E (fp32: max, sum of expf in a fixed-order warp reduction), or
 *   sigmoid(logits) = 1 / (1 + expf(-l));
 * - top-k: the k largest of (double)score + (double)bias, in order; ties go to the lower expert id;
 *   pick j is the best candidate strictly below pick j-1 in that order (as select_topk on the CPU);
 * - gates: the selected unbiased scores, divided by their sum (double, j order) when norm_topk,
 *   times scaling, rounded to fp32 once;
 * - aux loss (unweighted): E * sum_e f_e P_e, f_e = stat_counts_e / (Ns k), P_e = psum_e / Ns,
 *   psum_e = sum over the Ns tokens (every rank in the stats group) of score / pnorm, pnorm = 1 for
 *   softmax and the token's score sum for sigmoid. psum is fp64, reduced in a fixed order: token
 *   chunks of MOE_AUX_CHUNK tokens serially, then the chunks in order.
 * One warp per token; every reduction is a fixed shuffle tree, so every launcher is bitwise
 * deterministic for a given shape. N == 0 (or E == 0) launches nothing except where noted.
 */
#ifndef MOKC_KERNELS_MOE_ROUTE_H
#define MOKC_KERNELS_MOE_ROUTE_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tokens per partial sum of the aux statistic P (see gpu_moe_aux_partial). */
#define MOE_AUX_CHUNK 64 /* short: the serial sums are the kernel's whole parallelism */

/* Per token n < N:
 *   scores (N, E) fp32 <- softmax or sigmoid of logits (N, E) fp32;
 *   topk (N, k) int32 <- the selected expert ids in selection order;
 *   gates (N, k) fp32 <- gate values;
 *   pnorm (N) fp64 <- the aux-loss normaliser of the token's scores (1 for softmax).
 * bias: (E) fp32 or NULL (zeros); steers selection only. If a token finds no candidate (non-finite
 * scores), its remaining picks are expert 0 with gate 0 and *fail is set to 1 (fail is never
 * cleared here: zero it before). Requires 1 <= k <= E. */
void gpu_moe_route(float *scores, int *topk, float *gates, double *pnorm, int *fail, const float *logits,
                   const float *bias, int N, int E, int k, int sigmoid, int norm_topk, double scaling,
                   cudaStream_t stream);

/* Number of aux partials for N tokens: ceil(N / MOE_AUX_CHUNK). */
int gpu_moe_aux_chunks(int N);

/* partial (chunks, E) fp64 <- per chunk of MOE_AUX_CHUNK tokens, sum over its tokens (in order) of
 * (double)scores[n, e] * (1 / pnorm[n]). */
void gpu_moe_aux_partial(double *partial, const float *scores, const double *pnorm, int N, int E,
                         cudaStream_t stream);

/* psum (E) fp64 <- sum over the chunks in order of partial[c, e]; zeros when chunks == 0 (always
 * launches when E > 0). */
void gpu_moe_aux_psum(double *psum, const double *partial, int chunks, int E, cudaStream_t stream);

/* *aux (one fp64) <- E * sum_e stat_counts[e] * psum[e] / (Ns^2 k), or 0 when Ns == 0, with psum
 * and stat_counts (E, int64) already summed over the stats group, Ns = its token count. One block,
 * fixed-order reduction; always launches. */
void gpu_moe_aux_loss(double *aux, const double *psum, const long long *stat_counts, int E, int k, double Ns,
                      cudaStream_t stream);

/* Router backward for every token n < N: dlogits (N, E) fp32 (overwrite) from
 *   dgates (N, k) fp32: d loss / d gates, through the gate formula (norm_topk, scaling);
 *   the aux loss weighted by daux: d aux / d p_e = E f_e / N per token with f_e held constant,
 *     i.e. base * stat_counts[e] with base = daux * E / (N * Ns * k) (data-parallel ranks average
 *     their gradients, so each carries its share times the rank count); skipped when daux == 0;
 *   then through softmax (dl = s (ds - <ds, s>)) or sigmoid (dl = ds s (1 - s)).
 * Math in fp64 per token, rounded once. scores, topk from the forward; stat_counts (E) int64. */
void gpu_moe_route_backward(float *dlogits, const float *dgates, const float *scores, const int *topk,
                            const long long *stat_counts, double daux, double Ns, int N, int E, int k, int sigmoid,
                            int norm_topk, double scaling, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
