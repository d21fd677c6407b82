/*
 * Strided row copies (copy_rows.h): blocks stride over the rows (y) and a row's 16-byte groups when everything is
 * aligned, else its elements (x): no division an element.
 */
#include "copy_rows.h"

#include <stdint.h>

#include "device_util.cuh"

namespace {

constexpr int kThreads = 256;

/* T: uint4 (8 bf16 a move) or uint16_t (1); widths and pitches in T's units. */
template <typename T>
__global__ void copy_rows_kernel(T *dst, long ld_dst, const T *src, long ld_src, long rows, long width) {
    for (long r = blockIdx.y; r < rows; r += gridDim.y)
        for (long c = (long)blockIdx.x * blockDim.x + threadIdx.x; c < width; c += (long)gridDim.x * blockDim.x)
            dst[r * ld_dst + c] = src[r * ld_src + c];
}

/* x: a row's moves one a thread, at most kMaxGridBlocks blocks in all; y: rows, at most the grid's 65535. */
dim3 grid_of(long rows, long moves) {
    const long x = grid_for(moves, kThreads), y = rows < 65535 ? rows : 65535;
    return dim3((unsigned)x, (unsigned)(y * x > kMaxGridBlocks ? (kMaxGridBlocks + x - 1) / x : y));
}

} // namespace

extern "C" void gpu_copy_rows_bf16(bf16_t *dst, long ld_dst, const bf16_t *src, long ld_src, long rows, long width,
                                   cudaStream_t stream) {
    if (rows <= 0 || width <= 0) return;
    if (aligned16(dst) && aligned16(src) && width % 8 == 0 && ld_dst % 8 == 0 && ld_src % 8 == 0)
        copy_rows_kernel<<<grid_of(rows, width / 8), kThreads, 0, stream>>>(
            reinterpret_cast<uint4 *>(dst), ld_dst / 8, reinterpret_cast<const uint4 *>(src), ld_src / 8, rows,
            width / 8);
    else
        copy_rows_kernel<<<grid_of(rows, width), kThreads, 0, stream>>>(dst, ld_dst, src, ld_src, rows, width);
    cudaCheckLaunch();
}
