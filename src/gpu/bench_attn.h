/*
 * `mokc bench attn`: causal grouped-query attention on one GPU, the flash kernels and the cuBLAS +
 * softmax path side by side (kernels/attention.h), with random bf16 inputs drawn on the device.
 *
 *   ./mokc bench attn [--impl flash|cublas|all] [--batch 4] [--heads 16] [--kv-heads 4]
 *                     [--head-dim 128] [--seq 4096] [--iters 20] [--warmup 5] [--seed S]
 *
 * Timing: CUDA events around the forward and around the backward of each iteration, median of
 * --iters (>= 1) after --warmup. FLOPs (causal: half of the full products): forward
 * 2 * B * Hq * T^2 * D, backward 2.5x that. Prints one JSON line per implementation (bench, impl,
 * fwd_kernel: flash's forward kernel, "wgmma" or "mma" (MOKC_FLASH_FWD picks one), or "cublas";
 * bwd_kernel: flash's backward kernel, "wgmma" or "mma" (MOKC_FLASH_BWD picks one), or "cublas";
 * B, T, Hq, Hkv, D, iters, fwd_ms, bwd_ms, fwd_tflops, bwd_tflops, saved_mib: the state a forward
 * keeps for its backward, work_mib: the workspace) and a table. With both implementations, also
 * the relative error of the flash outputs (out, dq, dk, dv) against the cuBLAS ones; above 1e-2,
 * or a NaN, fails the run (exit 1).
 */
#ifndef MOKC_GPU_BENCH_ATTN_H
#define MOKC_GPU_BENCH_ATTN_H

/* argv[0] = "bench", argv[1] = "attn", then its options. Returns the exit code. */
int cmd_bench_attn(int argc, char **argv);

#endif
