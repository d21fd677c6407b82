/*
 * Counter-based random fills for the MoE benchmark and its EP check: element i of a logical tensor
 * gets v = scale * u(seed, offset + i) with u uniform in [-1, 1) from a splitmix64 hash, so any rank
 * can fill its own slice of a global tensor (offset = the slice's first element) and get exactly
 * the numbers a single-rank run puts there. With step > 0, v is rounded to a multiple of step
 * (few significant bits: sums of products of such values are exact in fp32 in any order, which
 * makes GEMM results independent of the GEMM's shape). Deterministic, independent of the launch.
 */
#ifndef MOKC_KERNELS_MOE_FILL_H
#define MOKC_KERNELS_MOE_FILL_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* p[i] = v(seed, offset + i) for i < n: fp32, or bf16 (rounded to nearest even). */
void gpu_moe_fill_f32(float *p, long n, unsigned long long seed, long offset, float scale, float step,
                      cudaStream_t stream);
void gpu_moe_fill_bf16(bf16_t *p, long n, unsigned long long seed, long offset, float scale, float step,
                       cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
