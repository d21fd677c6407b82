/*
 * Moving C-wide bf16 rows for the unfused MoE layer: the dispatch gather (token rows -> slots in
 * expert order) and the owner-side regrouping between "source order" (how rows arrive from and
 * leave for the EP peers: by source rank, then by local expert) and "owner order" (by local
 * expert, then by source rank — what the expert GEMMs read). Pure copies: deterministic.
 *
 * Alignment: none required. With C % 8 == 0 and both base pointers 16-byte aligned, rows move as
 * 16-byte vectors; otherwise element by element. One warp per row, grid-stride.
 */
#ifndef MOKC_KERNELS_MOE_ROWS_H
#define MOKC_KERNELS_MOE_ROWS_H

#include "common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst row i <- src row (map[i] / div), for i < rows. dst (rows, C), src (*, C) bf16. */
void gpu_moe_gather_rows(bf16_t *dst, const bf16_t *src, const int *map, int div, long rows, int C,
                         cudaStream_t stream);

/* Owner order <-> source order for `rows` rows. Segment s (s < nseg) covers owner rows
 * [owner_start[s], owner_start[s+1]) (owner_start non-decreasing, owner_start[nseg] = rows) and
 * starts at stage row stage_start[s]. Owner row r of segment s <-> stage row stage_start[s] + r -
 * owner_start[s]. to_owner: owner <- stage; else stage <- owner. owner_start has nseg + 1 ints,
 * stage_start nseg, both device memory. */
void gpu_moe_regroup_rows(bf16_t *owner, bf16_t *stage, const int *owner_start, const int *stage_start, int nseg,
                          long rows, int C, int to_owner, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
