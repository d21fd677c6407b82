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

/* A TMA map of `rank` (at most 4) dims (innermost first, byte strides of the outer ones), swizzled
 * (128- or 64-byte), zero-filled past the edges; stops the job when the driver refuses. */
static void encode_dims(CUtensorMap *map, CUtensorMapDataType type, int es, const void *base, int rank,
                        const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *box,
                        CUtensorMapSwizzle swizzle) {
    const cuuint32_t estr[4] = {1, 1, 1, 1};
    const CUresult r = encode_fn()(map, type, (cuuint32_t)rank, (void *)base, dims, strides, box, estr,
                                   CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r == CUDA_SUCCESS) return;
    char shape[256] = "";
    for (int i = 0, n = 0; i < rank && n < (int)sizeof shape; i++)
        n += snprintf(shape + n, sizeof shape - n, "%s%llu (box %u)", i ? " x " : "", (unsigned long long)dims[i],
                      box[i]);
    mokc_die(MOKC_EXIT_RUNTIME, NULL,
             "cuTensorMapEncodeTiled failed (error %d) for a map of %d-byte elements at %p, dims %s, innermost first "
             "(internal)",
             (int)r, es, base, shape);
}

/* A TMA map of a tensor of `es`-byte elements (dims {cols, rows, mats}), boxes of box_cols x
 * box_rows (x 1), whose rows (box_cols * es bytes) are the swizzle's span. */
static void encode(CUtensorMap *map, CUtensorMapDataType type, int es, const void *base, int rank, long cols,
                   long rows, long mats, int box_cols, int box_rows) {
    const cuuint64_t dims[3] = {(cuuint64_t)cols, (cuuint64_t)(rows > 0 ? rows : 1), (cuuint64_t)(mats > 0 ? mats : 1)};
    const cuuint64_t strides[2] = {(cuuint64_t)cols * es, (cuuint64_t)cols * rows * es};
    const cuuint32_t box[3] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows, 1};
    encode_dims(map, type, es, base, rank, dims, strides, box,
                box_cols * es == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B);
}

void sm90_encode(CUtensorMap *map, const void *base, int rank, long cols, long rows, long mats, int box_rows) {
    encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, rank, cols, rows, mats, 64, box_rows);
}

void sm90_encode_f32(CUtensorMap *map, const float *base, long cols, long rows, long mats) {
    encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, base, 3, cols, rows, mats, 32, 64);
}

void sm90_encode_panels(Sm90Panels *p, const void *base, long cols, long rows, long mats, int n, int width) {
    if (width != 64 && width != 32)
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "sm90_encode_panels: panels of %d columns (64 or 32) (internal)", width);
    p->n = n;
    p->width = width;
    p->whole = cols % width == 0;
    if (!p->whole) {
        encode(&p->map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, 3, cols, rows, mats, width, 64);
        return;
    }
    /* `width` columns, K lines, panels, matrices: the third dimension steps 2 * width bytes along a line */
    const cuuint64_t dims[4] = {(cuuint64_t)width, (cuuint64_t)(rows > 0 ? rows : 1), (cuuint64_t)(cols / width),
                                (cuuint64_t)(mats > 0 ? mats : 1)};
    const cuuint64_t strides[3] = {(cuuint64_t)cols * 2, (cuuint64_t)width * 2, (cuuint64_t)cols * rows * 2};
    const cuuint32_t box[4] = {(cuuint32_t)width, 64, (cuuint32_t)n, 1};
    encode_dims(&p->map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, 4, dims, strides, box,
                width == 32 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B);
}
