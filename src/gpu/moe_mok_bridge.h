/*
 * From the megakernel's forward to the unfused backward (issue 7, until the megakernel has its
 * own backward, issue 8): after moe_mok_forward, fills a layer's MoeUnfusedActs so that
 * moe_unfused_backward computes the gradients of that forward, as if moe_unfused_forward had run.
 *
 * What it takes from the MoeMok (whose buffers the next forward overwrites, so the layer's state
 * is copied into its own acts):
 *   - scores, topk, gates, counts, stat_counts, expert_offset, s_gate, s_up: device copies;
 *   - slot_row / row_slot: the dispatch plan of this rank's slots, placed from mok's own count
 *     and scan (kernels/moe_plan.h: gpu_moe_plan_place);
 *   - ye: mok's combine slots (win_y, slot n*k+j) permuted into expert order
 *     (kernels/moe_rows.h: ye[row] = win_y[row_slot[row]]);
 *   - xr, pre_gate, pre_up: mok's owner-side rows are already in the unfused owner order (by local
 *     expert, each in (source rank, token, j) order): device copies of the rows received;
 *   - the host plan (h_counts, h_recv_counts, h_send_*, h_recv_rows, h_stage_start,
 *     h_recv_offset, rows_in, and seg on the device), aux_loss, N: as the unfused forward's.
 *     EP > 1: the per-(source, local expert) row counts come from the peers through grouped
 *     ncclSend/ncclRecv on w's EP communicator, as in the unfused forward.
 * ONE HOST SYNCHRONISATION (moe_mok_rows_in: it also reports a watchdog record or non-finite router
 * scores and stops): the unfused backward's GEMM and NCCL sizes live on the host. So a step that
 * bridges is not CUDA-graph capturable, like the unfused layer; the megakernel's backward removes
 * this whole path.
 *
 * Every EP rank calls it together, right after the moe_mok_forward it bridges, on the same stream.
 * a, w and m must have been created for the same shape; the forward's N must fit a.
 */
#ifndef MOKC_GPU_MOE_MOK_BRIDGE_H
#define MOKC_GPU_MOE_MOK_BRIDGE_H

#include "gpu/moe_mok.h"
#include "gpu/moe_unfused.h"

/* Fills a from m's last forward; w gives the EP communicator and pinned scratch (its device
 * scratch is untouched except recv_counts). */
void moe_mok_bridge(MoeUnfusedActs *a, MoeUnfusedWork *w, MoeMok *m, cudaStream_t stream);

#endif
