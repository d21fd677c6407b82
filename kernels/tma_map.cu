/*
 * TMA tensor maps for the Hopper kernels (declared in kernels/mok/tile_wgmma.cuh): the driver's
 * encoder, looked up once through the runtime (no link against libcuda).
 */
#include <cudaTypedefs.h>

#include "common.h"
#include "mok/tile_wgmma.cuh"

extern "C" {
#include "../src/common.h" /* mokc_die */
}

static PFN_cuTensorMapEncodeTiled_v12000 encode_fn(void) {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = NULL;
    if (!fn) {
        cudaDriverEntryPointQueryResult q;
        void *f = NULL;
        cudaCheck(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q));
        if (q != cudaDriverEntryPointSuccess || !f)
            mokc_die(MOKC_EXIT_RUNTIME, "update the NVIDIA driver (the Hopper kernels need a CUDA 12+ driver)",
                     "the CUDA driver has no cuTensorMapEncodeTiled");
        fn = (PFN_cuTensorMapEncodeTiled_v12000)f;
    }
    return fn;
}

/* A TMA map of a tensor of `es`-byte elements (dims {cols, rows, mats}), 128-byte swizzled, boxes
 * of box_cols x box_rows (x 1). */
static void encode(CUtensorMap *map, CUtensorMapDataType type, int es, const void *base, int rank, long cols,
                   long rows, long mats, int box_cols, int box_rows) {
    const cuuint64_t dims[3] = {(cuuint64_t)cols, (cuuint64_t)(rows > 0 ? rows : 1), (cuuint64_t)(mats > 0 ? mats : 1)};
    const cuuint64_t strides[2] = {(cuuint64_t)cols * es, (cuuint64_t)cols * rows * es};
    const cuuint32_t box[3] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows, 1}, estr[3] = {1, 1, 1};
    const CUresult r = encode_fn()(map, type, (cuuint32_t)rank, (void *)base, dims, strides, box, estr,
                                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        mokc_die(MOKC_EXIT_RUNTIME, NULL,
                 "cuTensorMapEncodeTiled failed (error %d) for a %ld x %ld x %ld tensor of %d-byte elements at %p "
                 "(internal)",
                 (int)r, mats, rows, cols, es, base);
}

void sm90_encode(CUtensorMap *map, const void *base, int rank, long cols, long rows, long mats, int box_rows) {
    encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, rank, cols, rows, mats, 64, box_rows);
}

void sm90_encode_f32(CUtensorMap *map, const float *base, long cols, long rows, long mats) {
    encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, base, 3, cols, rows, mats, 32, 64);
}

void sm90_encode_panels(Sm90Panels *p, const void *base, long cols, long rows, long mats, int n) {
    sm90_encode(&p->one, base, 3, cols, rows, mats, 64);
    p->n = n;
    p->whole = cols % 64 == 0;
    if (!p->whole) return;
    /* 64 columns, K lines, panels, matrices: the third dimension steps 128 bytes along a line */
    const long m = mats > 0 ? mats : 1;
    const cuuint64_t dims[4] = {64, (cuuint64_t)rows, (cuuint64_t)(cols / 64), (cuuint64_t)m};
    const cuuint64_t strides[3] = {(cuuint64_t)cols * 2, 128, (cuuint64_t)cols * rows * 2};
    const cuuint32_t box[4] = {64, 64, (cuuint32_t)n, 1}, estr[4] = {1, 1, 1, 1};
    const CUresult r = encode_fn()(&p->wide, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, (void *)base, dims, strides, box,
                                   estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        mokc_die(MOKC_EXIT_RUNTIME, NULL,
                 "cuTensorMapEncodeTiled failed (error %d) for %d-panel boxes of a %ld x %ld x %ld bf16 tensor at %p "
                 "(internal)",
                 (int)r, n, m, rows, cols, base);
}
