/* Host-side bucketing of token positions by id for the deterministic embedding backward, and the set of ids a step
 * touched (declared in kernels/embedding.h). */
#include "../../kernels/embedding.h"

#include <stdint.h>
#include <stdlib.h>

#include "common.h"

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

int embedding_buckets_build(const int *tokens, int N, int V, int *order, int *bucket_start, int *bucket_id) {
    if (N <= 0) {
        if (bucket_start) bucket_start[0] = 0;
        return 0;
    }
    /* key = id in the high half, position in the low half: sorting the keys sorts by id and,
     * within one id, by position, so the order is stable whatever qsort does with ties (none). */
    uint64_t *keys = mallocCheck((size_t)N * sizeof(uint64_t));
    for (int n = 0; n < N; n++) {
        if (tokens[n] < 0 || tokens[n] >= V)
            mokc_die(MOKC_EXIT_RUNTIME, "token ids are validated when data is loaded, so this is a bug",
                     "embedding_buckets_build: token %d at row %d is outside the vocabulary [0, %d)", tokens[n], n, V);
        keys[n] = ((uint64_t)(uint32_t)tokens[n] << 32) | (uint32_t)n;
    }
    qsort(keys, (size_t)N, sizeof(uint64_t), cmp_u64);
    int nb = 0;
    for (int p = 0; p < N; p++) {
        int id = (int)(keys[p] >> 32);
        order[p] = (int)(keys[p] & 0xffffffffu);
        if (p == 0 || id != bucket_id[nb - 1]) {
            bucket_id[nb] = id;
            bucket_start[nb] = p;
            nb++;
        }
    }
    bucket_start[nb] = N;
    free(keys);
    return nb;
}

void embedding_ids_mark(uint64_t *seen, const int *ids, int n) {
    for (int i = 0; i < n; i++) seen[ids[i] >> 6] |= (uint64_t)1 << (ids[i] & 63);
}

int embedding_ids_list(const uint64_t *seen, int V, int *ids) {
    int n = 0;
    for (int w = 0; w < embedding_ids_words(V); w++)
        for (uint64_t bits = seen[w]; bits; bits &= bits - 1) ids[n++] = w * 64 + __builtin_ctzll(bits);
    return n;
}
