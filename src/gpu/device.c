/* GPU discovery and selection, and the check that the build's kernels suit the GPU. */
#include "gpu/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "gpu/check.h"

/* The compute capability the kernels were compiled for, from the Makefile's ARCH (sm_90a -> 90). */
#ifndef MOKC_BUILD_CC
#error "MOKC_BUILD_CC comes from the Makefile (ARCH=sm_90a gives 90)"
#endif

int gpu_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* no driver or no device: the CPU backend takes over */
        return 0;
    }
    return n;
}

/* nvidia-smi's spelling of a UUID, GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, so that a rank's line
 * can be matched against `nvidia-smi -L`. */
static void format_uuid(const unsigned char u[16], char out[48]) {
    int n = snprintf(out, 48, "GPU-");
    for (int i = 0; i < 16; i++) {
        const int dash = i == 4 || i == 6 || i == 8 || i == 10;
        n += snprintf(out + n, 48 - (size_t)n, "%s%02x", dash ? "-" : "", u[i]);
    }
}

static void show_placement(int device, int visible) {
    struct cudaDeviceProp p;
    cudaCheck(cudaGetDeviceProperties(&p, device));
    char uuid[48], host[256] = "?";
    format_uuid((const unsigned char *)p.uuid.bytes, uuid);
    gethostname(host, sizeof host - 1);
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    int rank = mokc_log_rank();
    if (rank >= 0) fprintf(stderr, "mokc[rank %d]: ", rank);
    else fprintf(stderr, "mokc: ");
    fprintf(stderr, "gpu: device %d of %d visible (CUDA_VISIBLE_DEVICES=%s): %s, UUID %s, host %s\n", device, visible,
            cvd ? cvd : "unset", p.name, uuid, host);
    fflush(stderr);
}

int gpu_select_device(int local_rank) {
    int n = gpu_device_count();
    if (n == 0)
        mokc_die(MOKC_EXIT_RUNTIME,
                 "check nvidia-smi, CUDA_VISIBLE_DEVICES and the job's GPU request (srun --gpus-per-task=1)",
                 "no GPU is visible to this rank");
    /* One visible GPU (per-rank binding): 0. All visible: the rank's place on its host. */
    int dev = local_rank % n;
    cudaCheck(cudaSetDevice(dev));
    gpu_require_arch(dev);
    const char *show = getenv("MOKC_SHOW_GPU");
    if (show && *show && strcmp(show, "0") != 0) show_placement(dev, n);
    return dev;
}

void gpu_describe(int device, char *buf, int len) {
    struct cudaDeviceProp p;
    cudaCheck(cudaGetDeviceProperties(&p, device));
    int driver = 0;
    cudaDriverGetVersion(&driver);
    snprintf(buf, (size_t)len, "%s, %d SMs, %.1f GiB, sm_%d%d, driver API %d.%d", p.name, p.multiProcessorCount,
             (double)p.totalGlobalMem / (1 << 30), p.major, p.minor, driver / 1000, (driver % 1000) / 10);
}

void gpu_versions(GpuVersions *out) {
    int rt = 0, drv = 0, nccl = 0;
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);
    ncclGetVersion(&nccl);
    snprintf(out->runtime, sizeof out->runtime, "%d.%d", rt / 1000, (rt % 1000) / 10);
    if (drv) snprintf(out->driver, sizeof out->driver, "%d.%d", drv / 1000, (drv % 1000) / 10);
    else snprintf(out->driver, sizeof out->driver, "none"); /* no driver on this machine */
    /* NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch */
    snprintf(out->nccl, sizeof out->nccl, "%d.%d.%d", nccl / 10000, (nccl % 10000) / 100, nccl % 100);
}

void gpu_device_uuid(int device, unsigned char uuid[16]) {
    struct cudaDeviceProp p;
    cudaCheck(cudaGetDeviceProperties(&p, device));
    memcpy(uuid, p.uuid.bytes, 16);
}

int gpu_sm_count(int device) {
    int v = 0;
    cudaCheck(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, device));
    return v;
}

int gpu_compute_capability(int device) {
    int major = 0, minor = 0;
    cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    cudaCheck(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    return major * 10 + minor;
}

int gpu_arch_check(int device, char *msg, size_t len) {
    const int cc = gpu_compute_capability(device);
    if (cc == MOKC_BUILD_CC) return 0;
    struct cudaDeviceProp p;
    cudaCheck(cudaGetDeviceProperties(&p, device));
    return mokc_fail(msg, len, "GPU %d (%s) has compute capability %d.%d, but this mokc was built for sm_%da "
                     "(compute capability %d.%d): its kernels cannot run there", device, p.name, cc / 10, cc % 10,
                     MOKC_BUILD_CC, MOKC_BUILD_CC / 10, MOKC_BUILD_CC % 10);
}

void gpu_require_arch(int device) {
    char msg[512];
    if (!gpu_arch_check(device, msg, sizeof msg)) return;
    const int cc = gpu_compute_capability(device);
    /* The two targets the Makefile accepts; anything else (sm_103 GB300, sm_120, Ampere) has none. */
    const char *hint = cc == 90    ? "rebuild for Hopper: make ARCH=sm_90a (or set \"backend\": \"cpu\")"
                       : cc == 100 ? "rebuild for Blackwell: make ARCH=sm_100a (or set \"backend\": \"cpu\")"
                                   : "mokc builds for sm_90a (H100/H200) and sm_100a (B200/GB200) only: run on one of "
                                     "those GPUs, or set \"backend\": \"cpu\"";
    mokc_die(MOKC_EXIT_RUNTIME, hint, "%s", msg);
}

int gpu_take_device(Dist *dist, const char *also) {
    const int device = gpu_select_device(dist->local_rank);
    /* Ranks may see every GPU of their host or only their own (--gpus-per-task=1): compare what they picked. */
    typedef struct {
        char host[64];
        unsigned char uuid[16];
    } Where;
    Where mine;
    memset(&mine, 0, sizeof mine);
    snprintf(mine.host, sizeof mine.host, "%.63s", dist->host);
    gpu_device_uuid(device, mine.uuid);
    Where *all = callocCheck((size_t)dist->world, sizeof(Where));
    mpiCheck(MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, all, (int)sizeof mine, MPI_BYTE, MPI_COMM_WORLD));
    for (int i = 0; i < dist->world; i++)
        for (int j = i + 1; j < dist->world; j++)
            if (memcmp(&all[i], &all[j], sizeof(Where)) == 0) {
                char msg[256], hint[256];
                snprintf(msg, sizeof msg, "ranks %d and %d on host %.64s would share one GPU: the CUDA backend runs "
                         "one rank per GPU", i, j, all[i].host);
                snprintf(hint, sizeof hint, "start at most one rank per GPU (mpirun -np <GPUs>, or srun "
                         "--gpus-per-task=1)%s%s", also ? ", " : "", also ? also : "");
                free(all);
                dist_fail_all(dist, MOKC_EXIT_USAGE, hint, msg);
            }
    free(all);
    return device;
}
