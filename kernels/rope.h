/*
 * Rotary position embedding on the GPU, in place on bf16 q or k, as src/cpu/ops.c rope_apply:
 * rows n = b*T + t of H heads x D, position t, rotate-half pairing (i, i + D/2),
 * angle(t, i) = t * theta^(-2i/D):
 *     x[i]       <- x[i] cos - x[i + D/2] sin
 *     x[i + D/2] <- x[i] sin + x[i + D/2] cos           (inverse: sin -> -sin, the transpose)
 *
 * The cosines and sines come from a table built once (gpu_rope_table_init) in double precision and
 * rounded to fp32, the same values the CPU reference uses; the rotation is fp32 math on the bf16
 * inputs, rounded back to bf16. Deterministic (elementwise).
 */
#ifndef MOKC_KERNELS_ROPE_H
#define MOKC_KERNELS_ROPE_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Floats of the table for T positions and head dim D: T * D. */
long gpu_rope_table_floats(int T, int D);

/* Fills table (device fp32 (T, D), overwritten): row t holds D/2 cosines then D/2 sines,
 *   table[t*D + i] = (float)cos(angle), table[t*D + D/2 + i] = (float)sin(angle), i < D/2,
 *   angle = t * pow((double)theta, -2.0 * i / D), computed in double (as the CPU reference).
 * D must be even (an odd D stops the run with an error). Build it once per (D, theta) for the
 * longest sequence: a table of T_max rows serves every T <= T_max. */
void gpu_rope_table_init(float *table, int T, int D, float theta, cudaStream_t stream);

/* Rotates x in place: x bf16, B*T rows of H heads of D, rows ld elements apart (ld >= H*D: the heads may be the
 * start of a wider row, the rest untouched), head h of row n at x + n*ld + h*D.
 * table from gpu_rope_table_init with the same D and at least T rows. inverse = 0 forward rotation, 1 the inverse
 * (the backward: apply to the gradient dq / dk, also in place). B*T*H == 0 launches nothing.
 * Alignment: none required; with (D/2) % 8 == 0, ld % 8 == 0 and x, table 16-byte aligned it moves 8 elements
 * per access, otherwise 1 (same results). */
void gpu_rope(bf16_t *x, const float *table, int B, int T, int H, int D, long ld, int inverse, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
