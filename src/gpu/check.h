/*
 * Checks for cuBLAS and NCCL calls on the host (CUDA's own check is in kernels/common.h). Each
 * failure prints the call, file:line, the rank and a hint on stderr, then stops the whole job.
 */
#ifndef MOKC_GPU_CHECK_H
#define MOKC_GPU_CHECK_H

#include <cublas_v2.h>
#include <nccl.h>

#include "../../kernels/common.h"

void mokc_cublas_check(cublasStatus_t st, const char *what, const char *file, int line);
void mokc_nccl_check(ncclResult_t r, const char *what, const char *file, int line);
/* A hint printed with out-of-memory errors (the memory plan); NULL for none. Not owned. */
void mokc_gpu_set_oom_hint(const char *hint);

/* A report to print before any CUDA, cuBLAS or NCCL failure stops the job (the megakernel's
 * watchdog record: its trap surfaces at whatever GPU call comes next). One at a time; NULL clears.
 * The report prints to stderr and returns. */
void mokc_gpu_set_failure_report(void (*report)(void *arg), void *arg);

#define cublasCheck(call) mokc_cublas_check((call), #call, __FILE__, __LINE__)
#define ncclCheck(call) mokc_nccl_check((call), #call, __FILE__, __LINE__)

#endif
