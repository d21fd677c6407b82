/*
 * Strided row copies of the CUDA backend: a block of rows from one matrix into the columns of another (the layers'
 * bf16 wq, wk, wv side by side, model_gpu.c), where cudaMemcpy2DAsync moved 1 TB/s (s33 r2).
 *
 * Asynchronous on `stream`; writes exactly rows x width elements of dst, nothing around them. rows * width == 0
 * launches nothing. Alignment: none required; with both pointers 16-byte aligned and width, ld_dst, ld_src
 * multiples of 8 it moves 16 bytes per access, otherwise 2 (the same result).
 */
#ifndef MOKC_KERNELS_COPY_ROWS_H
#define MOKC_KERNELS_COPY_ROWS_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[r * ld_dst + c] = src[r * ld_src + c] for r < rows, c < width; bf16; must not overlap. */
void gpu_copy_rows_bf16(bf16_t *dst, long ld_dst, const bf16_t *src, long ld_src, long rows, long width,
                        cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
