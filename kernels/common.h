/*
 * What every kernel and every GPU host file shares: the bf16 storage type as C sees it, and the
 * CUDA error check (implemented in src/gpu/check.c) that names the call, file, line and rank,
 * prints a hint and stops the job. C and CUDA C++ both include this header.
 */
#ifndef MOKC_KERNELS_COMMON_H
#define MOKC_KERNELS_COMMON_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* bfloat16 as raw bits: C has no bf16 type; kernels reinterpret it as __nv_bfloat16. */
typedef uint16_t bf16_t;

void mokc_cuda_check(cudaError_t err, const char *what, const char *file, int line);

#ifdef __cplusplus
}
#endif

#define cudaCheck(call) mokc_cuda_check((call), #call, __FILE__, __LINE__)
/* After every launch: launch-configuration errors surface here, at the launch site. */
#define cudaCheckLaunch() mokc_cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

#endif
