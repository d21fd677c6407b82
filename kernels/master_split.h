/*
 * fp32 master weights held in 4 bytes, not the 6 of an fp32 master beside its bf16 copy: the bf16 weight the GEMMs
 * read (hi: the value rounded to nearest, ties away from zero) and the signed 16-bit remainder below it (lo), so
 * that the fp32 bits are hi's << 16 plus lo, exactly. AdamW (adamw.h) updates such a pair in place. The bf16 weight
 * equals the round-to-nearest-even cast (cast.h) except where the fp32's low 16 bits are exactly 0x8000 and the bf16
 * below is even: once in 2^17 values at random. A NaN master becomes a quiet NaN pair (not its payload).
 *
 * Elementwise, so bitwise deterministic; every element written; n == 0 launches nothing. With every pointer
 * 16-byte aligned the kernels move 8 elements an access, else one.
 */
#ifndef MOKC_KERNELS_MASTER_SPLIT_H
#define MOKC_KERNELS_MASTER_SPLIT_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* (hi[i], lo[i]) = split(x[i]) for i < n. hi bf16 (n), lo int16 (n), overwritten; x fp32 (n). */
void gpu_master_split(bf16_t *hi, int16_t *lo, const float *x, long n, cudaStream_t stream);

/* x[i] = join(hi[i], lo[i]) for i < n: the fp32 that split gave the pair. x fp32 (n), overwritten. */
void gpu_master_join(float *x, const bf16_t *hi, const int16_t *lo, long n, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
