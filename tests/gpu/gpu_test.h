/*
 * Helpers for the GPU tests (tests/gpu/, built only with the CUDA backend): skip without a GPU,
 * random inputs, move arrays, convert bf16 on the host, poison outputs so unwritten elements are
 * caught, compare results.
 */
#ifndef MOKC_GPU_TEST_H
#define MOKC_GPU_TEST_H

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/common.h"
#include "../test.h"
#include "common.h"
#include "model_check.h" /* rel_error_f, count_nan */

/* Call first in every GPU test: returns 0 (and marks the test skipped) when there is no GPU. */
static inline int gpu_test_begin(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        cudaGetLastError();
        test_skip("no GPU on this machine");
        return 0;
    }
    cudaCheck(cudaSetDevice(0));
    return 1;
}

/* A seeded stream of random numbers (splitmix64) for the GPU tests' inputs. */
static uint64_t gpu_test_rng_state;
static inline void gpu_rng_seed(uint64_t seed) { gpu_test_rng_state = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull; }
static inline uint64_t gpu_rng_next(void) {
    uint64_t z = (gpu_test_rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* Uniform in [-a, a). */
static inline float gpu_rsym(float a) { return a * (float)(2.0 * ((double)(gpu_rng_next() >> 11) * 0x1.0p-53) - 1.0); }

/* Round-to-nearest-even float -> bf16 bits, and back (exact). */
static inline bf16_t host_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16_t)(u >> 16);
}
static inline float host_from_bf16(bf16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline float host_bf16_round(float f) { return host_from_bf16(host_to_bf16(f)); }
/* Round to nearest, ties away from zero (the bf16 half of a split master, master_split.h; NaN: quiet, f's sign). */
static inline bf16_t host_to_bf16_ties_away(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint32_t sign = (u >> 16) & 0x8000u, mag = u & 0x7fffffffu;
    if (mag > 0x7f800000u) return (bf16_t)(sign | 0x7fc0u);
    return (bf16_t)(sign | ((mag + 0x8000u) >> 16));
}

/* n random values in [-a, a) on the host (the caller frees), rounded to bf16 when round. */
static inline float *gpu_rand_array(long n, float a, int round) {
    float *x = callocCheck((size_t)n, sizeof(float));
    for (long i = 0; i < n; i++) x[i] = round ? host_bf16_round(gpu_rsym(a)) : gpu_rsym(a);
    return x;
}

/* The softmax statistics of 256-column tile t of a row x of n values, as gemm_sm90_logits defines them (columns
 * [256 t, *end), *end = min(256 t + 256, n)): *max, their largest value, and the returned sum of exp(x - *max), in
 * double. */
static inline double host_tile_stats(const float *x, int n, int t, float *max, int *end) {
    *end = 256 * t + 256 < n ? 256 * t + 256 : n;
    float mx = -INFINITY;
    for (int j = 256 * t; j < *end; j++) mx = x[j] > mx ? x[j] : mx;
    double sum = 0;
    for (int j = 256 * t; j < *end; j++) sum += exp((double)x[j] - mx);
    *max = mx;
    return sum;
}

static inline void *gpu_upload(const void *host, size_t bytes) {
    void *d = NULL;
    cudaCheck(cudaMalloc(&d, bytes ? bytes : 1));
    if (bytes) cudaCheck(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    return d;
}
static inline void gpu_download(void *host, const void *dev, size_t bytes) {
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
}
/* A device copy of n floats rounded to bf16. */
static inline void *gpu_upload_bf16(const float *x, long n) {
    bf16_t *b = callocCheck((size_t)n, sizeof(bf16_t));
    for (long i = 0; i < n; i++) b[i] = host_to_bf16(x[i]);
    void *d = gpu_upload(b, (size_t)n * sizeof(bf16_t));
    free(b);
    return d;
}
/* A device buffer filled with 0xff bytes: NaN as float and as bf16, so an unwritten element shows. */
static inline void *gpu_poisoned(size_t bytes) {
    void *d = NULL;
    cudaCheck(cudaMalloc(&d, bytes ? bytes : 1));
    cudaCheck(cudaMemset(d, 0xff, bytes));
    return d;
}

/* Elements whose bits differ. */
static inline long count_bit_mismatch_f32(const float *a, const float *b, long n) {
    long c = 0;
    for (long i = 0; i < n; i++) c += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return c;
}

/* Index of the largest |a - b| (NaN entries are counted by count_nan, not here). */
static inline long worst_index(const float *a, const float *b, long n) {
    long w = 0;
    double m = -1;
    for (long i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - (double)b[i]);
        if (d > m) m = d, w = i;
    }
    return w;
}

#endif
