/*
 * An fp32 master weight held as two 16-bit halves (master_split.h): its bf16 weight, the value rounded to nearest
 * with ties away from zero, and the signed remainder below it. CUDA C++ only: kernels/master_split.cu and
 * kernels/adamw.cu include it.
 *
 * Why ties away from zero: a bf16 that rounds its value to nearest leaves a remainder of at most half its last place,
 * 2^15 steps of the fp32's last place either way. Ties to even would need both ends (-2^15 and +2^15: 2^16 + 1
 * values); ties away from zero keep one end (-2^15 .. 2^15 - 1), what an int16 holds. The two roundings differ only
 * where the fp32's low 16 bits are exactly 0x8000 and the bf16 below is even.
 */
#ifndef MOKC_KERNELS_MASTER_SPLIT_CUH
#define MOKC_KERNELS_MASTER_SPLIT_CUH

#ifndef __CUDACC__
#error "master_split.cuh is CUDA C++: include it from .cu files only"
#endif

#include <stdint.h>

namespace {

/* x -> (hi, lo), exact for every x but NaN: a NaN becomes a quiet NaN (0x7fc0 with x's sign, lo 0). The magnitude's
 * bits m give hi's as (m + 0x8000) >> 16 (at most 0x7f80, infinity, as m is at most 0x7f800000) and lo = m - (hi's
 * << 16). */
__device__ __forceinline__ void master_split_elem(float x, uint16_t &hi, int16_t &lo) {
    const uint32_t u = __float_as_uint(x), sign = (u >> 16) & 0x8000u, mag = u & 0x7fffffffu;
    if (mag > 0x7f800000u) {
        hi = (uint16_t)(sign | 0x7fc0u), lo = 0;
        return;
    }
    const uint32_t h = (mag + 0x8000u) >> 16;
    hi = (uint16_t)(sign | h);
    lo = (int16_t)(int32_t)(mag - (h << 16));
}

/* (hi, lo) -> x: the magnitude (hi's << 16) + lo, hi's sign. */
__device__ __forceinline__ float master_join_elem(uint16_t hi, int16_t lo) {
    const uint32_t sign = (uint32_t)(hi & 0x8000u) << 16;
    const uint32_t mag = ((uint32_t)(hi & 0x7fffu) << 16) + (uint32_t)(int32_t)lo;
    return __uint_as_float(sign | mag);
}

} // namespace

#endif
