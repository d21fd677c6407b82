/*
 * The MoE dispatch plan on the GPU: the (token, j) slots grouped by expert in stable order, as
 * dispatch_plan in src/cpu/moe.c (a counting sort visiting slots in (token, j) order).
 *
 * Slot s = n * k + j holds expert topk[s]. Three launches, integer-only and deterministic:
 *   1. gpu_moe_plan_count: slots are cut into chunks of MOE_PLAN_CHUNK consecutive slots; one
 *      warp per chunk walks it in order, 32 slots at a time (__match_any_sync groups equal
 *      experts), giving each slot its rank among the chunk's earlier slots of the same expert and
 *      each chunk its per-expert counts;
 *   2. gpu_moe_plan_scan (one block): per expert, an exclusive prefix over the chunks (in order)
 *      and the expert totals (counts, also as int64 for the aux statistic), then an exclusive
 *      prefix over the experts (expert_offset);
 *   3. gpu_moe_plan_place: row = expert_offset[e] + chunk prefix + rank in chunk, so
 *      slot_row[s] = row and row_slot[row] = s.
 * Scratch: chunk_counts holds gpu_moe_plan_chunks(N * k) * E ints; slot_rank N * k ints.
 * gpu_moe_plan_histogram gives the counts alone, for a caller that needs no plan.
 * Requires every topk value in [0, E).
 */
#ifndef MOKC_KERNELS_MOE_PLAN_H
#define MOKC_KERNELS_MOE_PLAN_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MOE_PLAN_CHUNK 1024

/* ceil(nslots / MOE_PLAN_CHUNK). */
int gpu_moe_plan_chunks(long nslots);

/* chunk_counts (chunks, E) <- per-chunk expert counts; slot_rank (nslots) <- rank in chunk. */
void gpu_moe_plan_count(int *chunk_counts, int *slot_rank, const int *topk, long nslots, int E, cudaStream_t stream);

/* counts (E) int32 and stat_counts (E) int64 <- the slots per expert (both always written), without
 * the plan: for the megakernel, whose plan comes from every EP rank's gathered ids. Both zeroed, then a block
 * per 8192 slots adds its counts (integer atomics: the same result in any order). */
void gpu_moe_plan_histogram(int *counts, long long *stat_counts, const int *topk, long nslots, int E,
                            cudaStream_t stream);

/* chunk_counts (chunks, E) -> in place, the exclusive prefix over chunks per expert;
 * counts (E) int32 and stat_counts (E) int64 <- totals per expert (both always written);
 * expert_offset (E + 1) <- exclusive prefix of counts, expert_offset[E] = nslots. Always launches. */
void gpu_moe_plan_scan(int *chunk_counts, int *counts, long long *stat_counts, int *expert_offset, long nslots, int E,
                       cudaStream_t stream);

/* slot_row (nslots), row_slot (nslots) <- the stable grouping by expert. */
void gpu_moe_plan_place(int *slot_row, int *row_slot, const int *topk, const int *slot_rank, const int *chunk_counts,
                        const int *expert_offset, long nslots, int E, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
