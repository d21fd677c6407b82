/*
 * Parameter initialisation on the GPU, value for value the host's model_init_params (src/rng.h
 * holds the one definition both compile). The two agree to the bit wherever CUDA's double log and
 * cos round like the host's libm; where they differ (both within an ulp of the exact value) the
 * float may differ in its last bit, a few values in a billion.
 */
#ifndef MOKC_KERNELS_INIT_PARAMS_H
#define MOKC_KERNELS_INIT_PARAMS_H

#include <stddef.h>

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* w[j] = mokc_init_value(block_state, j, std) for j < n. */
void gpu_init_normal(float *w, size_t n, uint64_t block_state, double std, cudaStream_t stream);

/* w[j] = 1 for j < n. */
void gpu_init_ones(float *w, size_t n, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
