/*
 * Token embedding on the GPU: the forward gather, and a backward that is deterministic without
 * atomics because the host (which has the tokens) groups the token positions by id first.
 *
 * Shapes: table / dtable fp32 (V, C) row-major; activations fp32 (N, C) with N = B*T tokens,
 * row n = b*T + t; tokens int32 (N) on the device, each in [0, V) (validated when data is loaded;
 * the kernels do not check).
 *
 * Backward protocol, once per micro-batch:
 *   1. host:   plan = embedding_bwd_plan_build(tokens_host, N, V, ints) (ints: embedding_bwd_plan_ints(N));
 *   2. host -> device copy of the plan's plan.ints ints;
 *   3. device: gpu_embedding_backward(dtable, scratch, dout, d_ints, &plan, C, stream).
 * For each distinct id, its positions in increasing order are cut into runs of plan.run (src/cpu/ops.h:
 * EMBEDDING_BWD_RUN); each run's rows are summed in order from the first, and the runs' sums are added to
 * dtable[id, c] in order: exactly the float sums of the CPU reference (src/cpu/ops.c embedding_backward), so the
 * result is bitwise equal to it and run to run. The runs let a frequent id's rows (byte-level text: a few ids hold
 * most positions) be read by many blocks at once instead of one chain of loads.
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

/* table[ids[i], :] = rows[i, :] for i < n: a gathered copy (gpu_embedding_forward with the ids as tokens) put back;
 * rows NULL: zeros. table fp32 (V, C); rows fp32 (n, C); ids int32 (n), device, distinct (a row written twice would
 * keep either). Bitwise exact; other rows untouched. n == 0 or C == 0 launches nothing. */
void gpu_embedding_put_rows(float *table, const float *rows, const int *ids, int n, int C, cudaStream_t stream);

#define EMBEDDING_BWD_MAX_RUN 32 /* positions a run the kernels hold in registers: the most plan.run may be */

/* The backward's index arrays for one micro-batch, built on the host into one block of ints that goes to the device
 * in one copy, in this order:
 *   order[N]            token positions sorted by id, increasing position within one id;
 *   bucket_start[nb+1]  id b's positions are order[bucket_start[b] .. bucket_start[b+1]);
 *   bucket_id[nb]       the distinct ids present, increasing;
 *   bucket_run[nb+1]    id b's runs are runs bucket_run[b] .. bucket_run[b+1] - 1 of the micro-batch;
 *   bucket_slot[nb]     -1 where id b has one run (it adds its sum to the table itself), else the scratch row of its
 *                       first run's sum (the others follow);
 *   run_bucket[runs]    the id (bucket) of each run;
 *   multi[nm]           the buckets with more than one run, increasing. */
typedef struct {
    int N, nb;  /* positions; distinct ids */
    int runs;   /* all ids' runs */
    int slots;  /* runs of ids with more than one: rows of the scratch in use */
    int nm;     /* ids with more than one run */
    int run;    /* positions a run (EMBEDDING_BWD_RUN) */
    long ints;  /* ints of the block in use: what goes to the device */
} EmbeddingBwdPlan;

/* Ints of the plan's block for N positions (any tokens), and floats of the backward's scratch for N positions of
 * width C (the most runs ids with more than one can have, times C). */
long embedding_bwd_plan_ints(int N);
long embedding_bwd_scratch_floats(int N, int C);

/* Host (src/gpu/embedding_buckets.c): builds the plan of N host tokens, each in [0, V) (an id outside stops the run
 * with an error), into ints (embedding_bwd_plan_ints(N) of them). */
EmbeddingBwdPlan embedding_bwd_plan_build(const int *tokens, int N, int V, int *ints);

/* The plan's bucket_id array (the distinct ids, increasing; plan->nb of them) inside its block. */
static inline const int *embedding_bwd_plan_ids(const int *ints, const EmbeddingBwdPlan *plan) {
    return ints + plan->N + plan->nb + 1;
}

/* dtable[id, :] += the rows of id's positions, in runs as above, for every id of the plan. ACCUMULATES into dtable
 * (fp32 (V, C)); rows of ids that do not occur are not touched. dout fp32 (N, C). ints: the device copy of the plan's
 * block; scratch: embedding_bwd_scratch_floats(N, C) floats, overwritten. Deterministic, no atomics: a block sums
 * one run's rows for a range of channels; a second kernel adds the runs of ids with several in order. */
void gpu_embedding_backward(float *dtable, float *scratch, const float *dout, const int *ints,
                            const EmbeddingBwdPlan *plan, int C, cudaStream_t stream);

/* Host helper (implemented in src/gpu/embedding_buckets.c; plain C, no GPU). From host tokens
 * (N ints, each in [0, V); an id outside stops the run with an error) it writes:
 *   order[N]          token positions sorted by id, increasing position within one id (stable);
 *   bucket_id[nb]     the distinct ids present, increasing;
 *   bucket_start[nb+1] bucket b is order[bucket_start[b] .. bucket_start[b+1]), bucket_start[nb] = N;
 * and returns nb (0 when N == 0). Caller allocates order and bucket_id with N ints and bucket_start
 * with N + 1 ints (the worst case nb = N). O(N) a pass of 8 id bits (3 passes at V = 151936); allocates N ints
 * temporarily. */
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
