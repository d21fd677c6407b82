/*
 * The random streams of initialisation and the tests, as inline functions that C and CUDA both
 * compile: the host's model_init_params and the GPU's gpu_init_normal draw the same values from
 * the same code. splitmix64 is counter-based (the n-th draw hashes state + n * golden), so any
 * value of a stream can be computed on its own, in any order, by any thread.
 */
#ifndef MOKC_RNG_H
#define MOKC_RNG_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define MOKC_HD __host__ __device__
#else
#define MOKC_HD
#endif

#define MOKC_GOLDEN 0x9e3779b97f4a7c15ull

MOKC_HD static inline uint64_t mokc_splitmix64(uint64_t *state) {
    uint64_t z = (*state += MOKC_GOLDEN);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* FNV-1a of s, started from h. */
MOKC_HD static inline uint64_t mokc_hash_string(uint64_t h, const char *s) {
    h ^= 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* [0, 1) */
MOKC_HD static inline double mokc_uniform(uint64_t *state) {
    return (double)(mokc_splitmix64(state) >> 11) * 0x1.0p-53;
}

/* N(0, 1), Box-Muller; two draws. */
MOKC_HD static inline double mokc_normal(uint64_t *state) {
    double u1 = mokc_uniform(state), u2 = mokc_uniform(state);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Initialisation draws a block of values in chunks of MOKC_INIT_CHUNK, each chunk its own stream
 * (kept from when the host filled chunks in parallel: the values of existing seeds stay put). */
#define MOKC_INIT_CHUNK ((size_t)1 << 20)

/* Value j of an initialised block whose streams start from block_state: std * N(0, 1) as float. */
MOKC_HD static inline float mokc_init_value(uint64_t block_state, size_t j, double std) {
    const size_t chunk = j / MOKC_INIT_CHUNK, k = j - chunk * MOKC_INIT_CHUNK;
    uint64_t state = (block_state ^ (0xd1b54a32d192ed03ull * (uint64_t)chunk)) + 2 * (uint64_t)k * MOKC_GOLDEN;
    return (float)(std * mokc_normal(&state));
}

#endif
