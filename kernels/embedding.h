/*
 * Token embedding on the GPU: the forward gather, and a backward that is deterministic without
 * atomics because the host (which has the tokens) groups the token positions by id first.
 *
 * Shapes: table / dtable fp32 (V, C) row-major; activations fp32 (N, C) with N = B*T tokens,
 * row n = b*T + t; tokens int32 (N) on the device, each in [0, V) (validated when data is loaded;
 * the kernels do not check).
 *
 * Backward protocol, once per micro-batch:
 *   1. host:   nb = embedding_buckets_build(tokens_host, N, V, order, bucket_start, bucket_id);
 *   2. host -> device copies of order (N ints), bucket_start (nb + 1 ints), bucket_id (nb ints);
 *   3. device: gpu_embedding_backward(dtable, dout, d_order, d_bucket_start, d_bucket_id, nb, C, stream).
 * For each distinct id, dtable[id, c] starts from its current value and adds dout[pos, c] over the
 * positions pos of that id in increasing order: exactly the float sums of the CPU reference
 * (src/cpu/ops.c embedding_backward), so the result is bitwise equal to it and run to run.
 *
 * Alignment: none required. With C % 4 == 0 and 16-byte aligned table/out/dtable/dout the kernels
 * use float4 loads; otherwise they run element by element (same results).
 */
#ifndef MOKC_KERNELS_EMBEDDING_H
#define MOKC_KERNELS_EMBEDDING_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out[n, :] = table[tokens[n], :] for n < N. out fp32 (N, C), overwritten; table fp32 (V, C);
 * tokens int32 (N), device. Bitwise exact copy. N == 0 or C == 0 launches nothing. */
void gpu_embedding_forward(float *out, const int *tokens, const float *table, int N, int C, cudaStream_t stream);

/* table[ids[i], :] = rows[i, :] for i < n: a gathered copy (gpu_embedding_forward with the ids as tokens) put back.
 * table fp32 (V, C); rows fp32 (n, C); ids int32 (n), device, distinct (a row written twice would keep either).
 * Bitwise exact; other rows untouched. n == 0 or C == 0 launches nothing. */
void gpu_embedding_put_rows(float *table, const float *rows, const int *ids, int n, int C, cudaStream_t stream);

/* dtable[bucket_id[b], :] += sum over p in [bucket_start[b], bucket_start[b+1]) of dout[order[p], :],
 * summed in p order, for every bucket b < nb. ACCUMULATES into dtable (fp32 (V, C)); rows of ids
 * that do not occur are not touched. dout fp32 (N, C). order, bucket_start, bucket_id: device
 * copies of what embedding_buckets_build wrote. Distinct buckets must have distinct ids (they do).
 * Deterministic, no atomics: one thread owns one (id, channel group). nb == 0 launches nothing. */
void gpu_embedding_backward(float *dtable, const float *dout, const int *order, const int *bucket_start,
                        const int *bucket_id, int nb, int C, cudaStream_t stream);

/* Host helper (implemented in src/gpu/embedding_buckets.c; plain C, no GPU). From host tokens
 * (N ints, each in [0, V); an id outside stops the run with an error) it writes:
 *   order[N]          token positions sorted by id, increasing position within one id (stable);
 *   bucket_id[nb]     the distinct ids present, increasing;
 *   bucket_start[nb+1] bucket b is order[bucket_start[b] .. bucket_start[b+1]), bucket_start[nb] = N;
 * and returns nb (0 when N == 0). Caller allocates order and bucket_id with N ints and bucket_start
 * with N + 1 ints (the worst case nb = N). O(N log N), allocates N 64-bit keys temporarily. */
int embedding_buckets_build(const int *tokens, int N, int V, int *order, int *bucket_start, int *bucket_id);

/* Host helpers (src/gpu/embedding_buckets.c) for the set of ids a step's micro-batches touched, as a bitmap of
 * embedding_ids_words(V) 64-bit words (bit id % 64 of word id / 64): the rows of the embedding's gradient that can
 * be nonzero, on this rank or (the bitmaps OR-ed) any. embedding_ids_mark sets the bits of n ids (each in [0, V));
 * embedding_ids_list writes the set ids in increasing order to ids (room for V) and returns their number. */
static inline int embedding_ids_words(int V) { return (V + 63) / 64; }
void embedding_ids_mark(uint64_t *seen, const int *ids, int n);
int embedding_ids_list(const uint64_t *seen, int V, int *ids);

#ifdef __cplusplus
}
#endif

#endif
