/*
 * replica_hash (src/replica_check.c): the same for any thread count; changed by any one bit of any element, by two
 * elements swapped, by the sign of a zero and by the length. The comparison across ranks is tested end to end in
 * test_ckpt.c (mpi_diverged_replicas_stop).
 */
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>

#include "replica_check.h"
#include "test.h"

static float *random_floats(size_t n, uint32_t seed) {
    float *x = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((int32_t)seed) / 2147483648.0f;
    }
    return x;
}

static void test_same_for_any_thread_count(void) {
    const size_t n = 300007;
    float *x = random_floats(n, 7);
    const int threads = omp_get_max_threads();
    const uint64_t h = replica_hash(x, n);
    omp_set_num_threads(1);
    CHECK(replica_hash(x, n) == h);
    omp_set_num_threads(threads > 1 ? threads : 3);
    CHECK(replica_hash(x, n) == h);
    omp_set_num_threads(threads);
    free(x);
}

static void test_any_change_shows(void) {
    const size_t n = 4099;
    float *x = random_floats(n, 11);
    const uint64_t h = replica_hash(x, n);
    const size_t at[] = {0, 1, 2048, n - 1};
    for (size_t k = 0; k < sizeof at / sizeof at[0]; k++)
        for (int b = 0; b < 32; b++) {
            uint32_t *w = (uint32_t *)(x + at[k]);
            *w ^= 1u << b;
            CHECK_MSG(replica_hash(x, n) != h, "bit %d of element %zu flipped, the same hash", b, at[k]);
            *w ^= 1u << b;
        }
    CHECK(replica_hash(x, n) == h);
    float t = x[5];
    x[5] = x[900], x[900] = t;
    CHECK_MSG(replica_hash(x, n) != h, "two elements swapped, the same hash");
    x[900] = x[5], x[5] = t;

    float zeros[4] = {0.f, 0.f, 0.f, 0.f}, signed_zero[4] = {0.f, -0.f, 0.f, 0.f};
    CHECK(replica_hash(zeros, 4) != replica_hash(signed_zero, 4));
    CHECK(replica_hash(zeros, 4) != replica_hash(zeros, 3));
    CHECK(replica_hash(zeros, 0) != replica_hash(zeros, 1));
    free(x);
}

TEST_SUITE(replica_check, TEST_CASE(test_same_for_any_thread_count), TEST_CASE(test_any_change_shows));
