/*
 * `mokc bench moe`: one MoE layer on the GPUs of an mpirun job (one rank per GPU, device = local
 * rank), with random weights and inputs drawn on the device (routing from a random router).
 *
 *   mpirun -np 2 ./mokc bench moe --config configs/bench/qwen3-30b-a3b-like.json
 *       [--impl unfused|mok|all] [--tokens N] [--iters 20] [--warmup 5] [--ep N] [--seed S]
 *       [--set key.path=value ...]
 *   mpirun -np 2 ./mokc bench moe --check --config configs/tiny.json [--tokens N] [--skew] [--set ...]
 *
 * Timing: forward, and forward + backward, with CUDA events around each iteration (after a barrier),
 * per-iteration max over ranks, median of --iters (>= 1; default 20) after --warmup (default 5).
 * Prints one JSON line per implementation (bench, impl, shape, E, H, I, k, shared, ep, world,
 * tokens_per_gpu, iters, fwd_ms, fwdbwd_ms, fwd_tflops; unfused: fwdbwd_tflops, acts_mib,
 * work_mib; mok: comm_blocks, fwd_graph_ms, fwdbwd_graph_ms and their TFLOP/s (the same calls
 * replayed from CUDA graphs, alternating with the eager ones), dispatch_ms and dispatch_gbs_per_gpu
 * (the persistent kernel with idle compute blocks: rows pulled, this rank's own included, times H * 2
 * bytes over the slowest rank's median, the lowest over ranks), pad_share (of the GEMM rows the
 * tiles computed over all ranks, those past the rows received), mok_mib; the backward's figures null
 * where it is the unfused one) and a table.
 * FLOPs per GPU (DESIGN.md): 2*T*k*3*H*I forward, x3 for forward + backward (routed experts only).
 * EP is every rank (one EP group) unless --ep; tokens per GPU = train.micro_batch * train.seq_len
 * unless --tokens.
 *
 * --check: the EP consistency check. Every rank builds the same global problem (world * T
 * tokens, all E experts; router and x quantised so the router GEMM is exact in any order, hence
 * routing is bitwise the same), runs it alone on its GPU with ep = 1, then runs its share with
 * EP = world (its T tokens, its E/ep experts, aux statistics over the world, dy scaled by world as
 * a per-rank mean loss makes it). y, dx / world, the aux loss, the top-k picks, the router and
 * shared gradients summed over ranks / world and each owner's expert gradients / world must match
 * the single-rank run (relative error < 1e-3; the picks exactly). With mok: its forward at EP =
 * world against the single-rank run (y < 1e-2, the picks exactly, the aux loss; bitwise run to
 * run). When the global forward is at most 20 GFLOP (small shapes; the CPU reference runs on one
 * rank's cores), rank 0 also runs the CPU reference forward (src/cpu/moe.c, float, ep = 1) of the
 * whole problem from the single-rank layer's tensors and holds y of every implementation (unfused
 * on one rank, unfused and mok at EP = world, gathered) to it, relative error < 1e-2, and the
 * picks equal. --skew sends every token's first pick to expert 0 (one owner receives the most rows
 * it can; with k = 1, every row). Exit 0 on PASS, 1 on FAIL.
 */
#ifndef MOKC_GPU_BENCH_MOE_H
#define MOKC_GPU_BENCH_MOE_H

/* argv[0] = "bench", argv[1] = the benchmark ("moe"), then its options. Returns the exit code. */
int cmd_bench(int argc, char **argv);

#endif
