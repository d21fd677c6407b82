/*
 * GPU discovery and selection. A rank uses device local_rank % device_count, so one process per
 * GPU works with all GPUs visible and with one (--gpus-per-task=1).
 */
#ifndef MOKC_GPU_DEVICE_H
#define MOKC_GPU_DEVICE_H

/* Number of usable CUDA devices (0 when there is none or no driver; never fails). */
int gpu_device_count(void);
/* Selects local_rank % count, prints nothing; returns the device index. */
int gpu_select_device(int local_rank);
/* "NVIDIA H200, 132 SMs, 139.8 GiB, sm_90, driver 13.0" (for logs and run records). */
void gpu_describe(int device, char *buf, int len);
/* The device's 16-byte UUID (tells two ranks on one physical GPU apart from two on two). */
void gpu_device_uuid(int device, unsigned char uuid[16]);
/* Multiprocessor count and compute capability (major*10+minor) of the device. */
int gpu_sm_count(int device);
int gpu_compute_capability(int device);

#endif
