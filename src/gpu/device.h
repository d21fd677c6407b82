/*
 * GPU discovery and selection. A rank uses device local_rank % device_count, so one process per
 * GPU works with all GPUs of the host visible (local rank r takes GPU r) and with one visible GPU
 * per rank (srun --gpus-per-task=1, or a per-rank CUDA_VISIBLE_DEVICES: every rank takes its
 * device 0). Two ranks that end up on one physical GPU are told apart by (host, UUID): the
 * trainer compares them across ranks and refuses the run.
 */
#ifndef MOKC_GPU_DEVICE_H
#define MOKC_GPU_DEVICE_H

#include <stddef.h>

#include "dist.h"

/* Number of usable CUDA devices (0 when there is none or no driver; never fails). */
int gpu_device_count(void);
/* Selects local_rank % count and checks that this build's kernels run on it (gpu_require_arch);
 * returns the device index. Prints nothing, unless MOKC_SHOW_GPU=1: then every rank prints one
 * line on stderr, "gpu: device D of V visible (CUDA_VISIBLE_DEVICES=...): NAME, UUID GPU-..., host
 * H" (to check a cluster's rank-to-GPU mapping). Dies with a message when no GPU is visible. */
int gpu_select_device(int local_rank);
/* gpu_select_device for this rank, then a collective over the world: NCCL needs one GPU per rank, so when two ranks
 * picked one physical GPU (same host and UUID) every rank stops with a message saying how to launch instead, and
 * `also` (e.g. "or set ...", or NULL) after it. Returns the device index. */
int gpu_take_device(Dist *dist, const char *also);
/* "NVIDIA H200, 132 SMs, 139.8 GiB, sm_90, driver 13.0" (for logs and run records). */
void gpu_describe(int device, char *buf, int len);
/* The CUDA runtime, the driver's CUDA version and NCCL's, as "13.0", "13.0", "2.28.3" (run records). */
typedef struct {
    char runtime[16], driver[16], nccl[16];
} GpuVersions;
void gpu_versions(GpuVersions *out);
/* The device's 16-byte UUID (tells two ranks on one physical GPU apart from two on two). */
void gpu_device_uuid(int device, unsigned char uuid[16]);
/* Multiprocessor count and compute capability (major*10+minor) of the device. */
int gpu_sm_count(int device);
int gpu_compute_capability(int device);

/* 0 if this binary's kernels run on `device`; otherwise 1 and msg says why. The build targets one
 * architecture-specific compute capability (make ARCH=sm_90a: 9.0, Hopper; ARCH=sm_100a: 10.0,
 * B200/GB200), whose code loads on that capability only, and carries no PTX to compile for
 * another: without this check a mismatch would surface as "no kernel image" at the first launch. */
int gpu_arch_check(int device, char *msg, size_t len);
/* gpu_arch_check, and on a mismatch stops with the message and the build to make instead. */
void gpu_require_arch(int device);

#endif
