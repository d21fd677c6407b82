/* Host-side bucketing of token positions by id and the runs of the deterministic embedding backward, and the set of
 * ids a step touched (declared in kernels/embedding.h). */
#include "../../kernels/embedding.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "cpu/ops.h"

int embedding_buckets_build(const int *tokens, int N, int V, int *order, int *bucket_start, int *bucket_id) {
    if (N <= 0) {
        if (bucket_start) bucket_start[0] = 0;
        return 0;
    }
    for (int n = 0; n < N; n++)
        if (tokens[n] < 0 || tokens[n] >= V)
            mokc_die(MOKC_EXIT_RUNTIME, "token ids are validated when data is loaded, so this is a bug",
                     "embedding_buckets_build: token %d at row %d is outside the vocabulary [0, %d)", tokens[n], n, V);
    /* An LSD radix sort of the positions by id, 8 bits a pass: each pass a stable counting sort, so positions stay
     * increasing within an id. O(N) a pass; qsort's O(N log N) took ≈ 1 ms of host time at N = 16384, which the GPU
     * waited for at a step's first micro-batch. */
    int *tmp = mallocCheck((size_t)N * sizeof(int)), *src = order, *dst = tmp;
    for (int n = 0; n < N; n++) order[n] = n;
    for (int shift = 0; shift < 32 && (shift == 0 || ((unsigned)(V - 1) >> shift) > 0); shift += 8) {
        int count[257] = {0};
        for (int n = 0; n < N; n++) count[((unsigned)tokens[src[n]] >> shift & 255u) + 1]++;
        for (int d = 0; d < 256; d++) count[d + 1] += count[d];
        for (int n = 0; n < N; n++) dst[count[(unsigned)tokens[src[n]] >> shift & 255u]++] = src[n];
        int *t = src;
        src = dst, dst = t;
    }
    if (src != order) memcpy(order, src, sizeof(int) * (size_t)N);
    free(tmp);
    int nb = 0;
    for (int p = 0; p < N; p++) {
        const int id = tokens[order[p]];
        if (p == 0 || id != bucket_id[nb - 1]) {
            bucket_id[nb] = id;
            bucket_start[nb] = p;
            nb++;
        }
    }
    bucket_start[nb] = N;
    return nb;
}

/* Every count below is at most N (nb, runs, nm), so the block holds N + 4 nb + 2 + runs + nm <= 7 N + 2 ints; the
 * bucket ids are first built at its end (past 6 N + 2, which nothing before run_bucket's end reaches) and moved. */
_Static_assert(EMBEDDING_BWD_RUN >= 1 && EMBEDDING_BWD_RUN <= EMBEDDING_BWD_MAX_RUN,
               "the GPU kernels hold at most EMBEDDING_BWD_MAX_RUN positions of a run (kernels/embedding.h)");

long embedding_bwd_plan_ints(int N) { return 7L * N + 2; }

/* An id with L > EMBEDDING_BWD_RUN positions has ceil(L / RUN) < 2 L / RUN runs. */
long embedding_bwd_scratch_floats(int N, int C) { return 2L * N / EMBEDDING_BWD_RUN * C; }

EmbeddingBwdPlan embedding_bwd_plan_build(const int *tokens, int N, int V, int *ints) {
    EmbeddingBwdPlan p = {.N = N, .run = EMBEDDING_BWD_RUN};
    int *order = ints, *start = ints + N, *far_ids = ints + 6L * N + 2;
    p.nb = embedding_buckets_build(tokens, N, V, order, start, far_ids);
    const int nb = p.nb;
    int *ids = start + nb + 1, *brun = ids + nb, *slot = brun + nb + 1, *run_bucket = slot + nb;
    memmove(ids, far_ids, sizeof(int) * (size_t)nb);
    for (int b = 0; b < nb; b++) {
        const int n = (start[b + 1] - start[b] + p.run - 1) / p.run;
        brun[b] = p.runs;
        slot[b] = n > 1 ? p.slots : -1;
        for (int j = 0; j < n; j++) run_bucket[p.runs + j] = b;
        p.runs += n;
        if (n > 1) p.slots += n;
    }
    brun[nb] = p.runs;
    int *multi = run_bucket + p.runs;
    for (int b = 0; b < nb; b++)
        if (slot[b] >= 0) multi[p.nm++] = b;
    p.ints = multi + p.nm - ints;
    return p;
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
