/*
 * A persistent grouped GEMM on the megakernel's Hopper tile (issue 9: `mokc bench gemm` tunes the
 * tile apart from the MoK protocol). The same pipeline as mok_forward_sm90.cu (sm90_pipeline.cuh:
 * a TMA producer lane, a 4-stage ring, two wgmma m64n256k16 consumers, staged 16-byte epilogue
 * stores), the same operand layouts as the forward's down projection, and no counters, tickets or
 * NVLink: tiles in a fixed order, each block taking every gridDim.x-th one.
 *
 *   C[g] = A[g] @ B[g] for g < G, bf16 in and out, fp32 accumulation:
 *   A (G, M, K) row-major (K-major rows, as xr and h); B (G, K, N) row-major (N contiguous, as the
 *   experts' weights); C (G, M, N) row-major.
 *
 * Tiles of 128 x 256, K in blocks of 64 in order: bitwise reproducible for a shape. Tile order
 * within a group: bands of 16 M tiles, M fastest inside a band, so the blocks running at once
 * share B panels (and A rows) in L2. TMA zero-fills past M, N and K, so any M works; N and K must
 * be multiples of 8 (16-byte row pitch). Pointers: device, 16-byte aligned, C not overlapping A or
 * B. sm_90a only: callers check mok_sm90_available() (mok.h). Asynchronous on `stream`.
 */
#ifndef MOKC_KERNELS_MOK_GEMM_SM90_H
#define MOKC_KERNELS_MOK_GEMM_SM90_H

#include <stddef.h>
#include <stdint.h>

#include "../common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 if gemm_sm90_grouped takes this shape; otherwise 0 and *why names the dimension at fault. */
int gemm_sm90_shape_ok(int G, int M, int N, int K, const char **why);

/* Overwrites every element of C. Stops the job with a message for a shape gemm_sm90_shape_ok
 * refuses or a misaligned pointer. */
void gemm_sm90_grouped(bf16_t *C, const bf16_t *A, const bf16_t *B, int G, int M, int N, int K,
                       cudaStream_t stream);

/* The same product for groups of at most 176 rows (an expert's tokens), on token-side tiles: each
 * tile is 192 columns of B by all of the group's rows (wgmma's N: 176, A's rows loaded rounded up
 * to 8), so each slice of B is read once per group where gemm_sm90_grouped reads it once per
 * 128-row M tile, and the products cover 176 rows instead of M rounded up to 128. Same operands,
 * layouts and K order per element; the products are added by other instructions, so the bits may
 * differ from gemm_sm90_grouped's. Stops the job with a message when M > 176. */
void gemm_sm90_grouped_tok(bf16_t *C, const bf16_t *A, const bf16_t *B, int G, int M, int N, int K,
                           cudaStream_t stream);

/* The same with tiles of 192 rows (m64n192, 96 accumulators a thread): groups of at most 192 rows.
 * Under routing an expert's rows spread (Kimi-like: mean 171, sd 13): 192 covers 95 % of them in
 * one tile where 176 covers 67 %. */
void gemm_sm90_grouped_tok192(bf16_t *C, const bf16_t *A, const bf16_t *B, int G, int M, int N, int K,
                              cudaStream_t stream);

/* The same with 192 x 192 tiles in the 128 x 256 tiles' orientation (rows of A on wgmma's M, three
 * consumers of 64 rows, 192 columns of B on its N; any M): the token-side tiles' bytes a product,
 * with each accumulator row a row of C. */
void gemm_sm90_grouped_r192(bf16_t *C, const bf16_t *A, const bf16_t *B, int G, int M, int N, int K,
                            cudaStream_t stream);

/* The same with B's slice of a tile loaded as two boxes of 96 columns, each three 32-column panels with
 * the 64-byte swizzle: what the megakernel's gate/up tasks would load (96 columns of w_gate beside the
 * same of w_up, so that gate and up column j meet in one thread's accumulators). The products are the
 * same instructions on the same values as gemm_sm90_grouped_r192's: the same bits. */
void gemm_sm90_grouped_r192_b32(bf16_t *C, const bf16_t *A, const bf16_t *B, int G, int M, int N, int K,
                                cudaStream_t stream);

/* C = A @ B (one group, M x K by K x N) with the rotary embedding applied to C's rows in the
 * epilogue: row m is position m % T (rows are (batch, position)), C's
 * columns are heads of D, the table is rope.h's (gpu_rope_table_init: cos, sin of T x D). The
 * projection of q or k and its RoPE in one pass, rope.cu's arithmetic on the bf16 products.
 * gemm_sm90_rope_ok: as gemm_sm90_shape_ok, and D one of 16, 32, 64, 128, N a multiple of D. */
int gemm_sm90_rope_ok(int M, int N, int K, int D, const char **why);
void gemm_sm90_rope(bf16_t *C, const bf16_t *A, const bf16_t *B, int M, int N, int K, const float *table, int T,
                    int D, cudaStream_t stream);

/* The LM head's logits for the cross-entropy, which then reads 2 bytes a logit instead of 4 twice. With
 * C = A @ B^T in fp32 (A (M, K), B (N, K), both K-major bf16: the hidden rows and the head's (V, C) weights) and
 * T = gemm_sm90_logits_tiles(N) column tiles of 256 a row, it writes for each row m and tile t:
 *   stats[2 (m T + t)]      the largest C[m, n] over the tile's columns n < N: M_t,
 *   stats[2 (m T + t) + 1]  the sum of exp(C[m, n] - M_t) over them (fp32, a fixed order);
 * codes[m N + n] = round((M_t - C[m, n]) * 2^11), at most 65535: the logit below its tile's maximum in steps of
 * 2^-11 (so exp of a decoded logit is within 0.025 % of its value's, an eighth of a bf16 rounding; logits more than
 * 32 below their tile's maximum, whose exp is under e^-32 of it, stay 32 below);
 * target_logit[m] = C[m, targets[m]] (targets[m] in [0, N), device). gpu_cross_entropy_coded (cross_entropy.h)
 * takes these. Shapes as gemm_sm90_shape_ok (G = 1); codes and stats 16-byte aligned. Overwrites every code, every
 * pair of statistics and every target logit of the M rows. */
int gemm_sm90_logits_tiles(int N);
void gemm_sm90_logits(uint16_t *codes, float *stats, float *target_logit, const int *targets, const bf16_t *A,
                      const bf16_t *B, int M, int N, int K, cudaStream_t stream);

/* The kernel's pipeline waits are bounded (10 s): on expiry it fills a host-mapped record and
 * traps, which surfaces at the next GPU call. Returns 1 and the record in buf when that happened
 * on the current device, else 0. */
int gemm_sm90_watchdog_report(char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
