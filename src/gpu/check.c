/* CUDA, cuBLAS and NCCL error reports: call, place, rank, a hint; then the job stops. */
#include "gpu/check.h"

#include <stdio.h>

#include "common.h"

static const char *oom_hint;
static void (*failure_report)(void *);
static void *failure_report_arg;

void mokc_gpu_set_oom_hint(const char *hint) { oom_hint = hint; }

void mokc_gpu_set_failure_report(void (*report)(void *arg), void *arg) {
    failure_report = report;
    failure_report_arg = arg;
}

static void report_failure(void) {
    if (failure_report) failure_report(failure_report_arg);
}

void mokc_cuda_check(cudaError_t err, const char *what, const char *file, int line) {
    if (err == cudaSuccess) return;
    report_failure();
    const char *hint = "run scripts/gpu-check.sh to test the kernels; CUDA_LAUNCH_BLOCKING=1 pins the failing launch";
    if (err == cudaErrorMemoryAllocation)
        hint = oom_hint ? oom_hint : "the run needs more GPU memory than is free: lower train.micro_batch or the model size";
    else if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver)
        hint = "no usable GPU: check nvidia-smi and the driver, or set \"backend\": \"cpu\"";
    mokc_die(MOKC_EXIT_RUNTIME, hint, "CUDA error %s (%s) in %s at %s:%d", cudaGetErrorName(err), cudaGetErrorString(err),
             what, file, line);
}

void mokc_cublas_check(cublasStatus_t st, const char *what, const char *file, int line) {
    if (st == CUBLAS_STATUS_SUCCESS) return;
    report_failure();
    mokc_die(MOKC_EXIT_RUNTIME,
             st == CUBLAS_STATUS_ALLOC_FAILED ? (oom_hint ? oom_hint : "out of GPU memory for cuBLAS")
                                              : "a GEMM shape or type is unsupported: check the model dimensions",
             "cuBLAS error %d in %s at %s:%d", (int)st, what, file, line);
}

void mokc_nccl_check(ncclResult_t r, const char *what, const char *file, int line) {
    if (r == ncclSuccess) return;
    report_failure();
    mokc_die(MOKC_EXIT_RUNTIME, "NCCL_DEBUG=WARN shows NCCL's reason; check that every rank has a GPU and NVLink/P2P works",
             "NCCL error %s in %s at %s:%d (%s)", ncclGetErrorString(r), what, file, line, ncclGetLastError(NULL));
}
