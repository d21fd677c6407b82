/*
 * A layer's device buffers as one list of (where its pointer lives, bytes): the layer's layout
 * function fills the list, and the same list then sizes (memory plans, on hosts without a GPU
 * too), allocates and frees the buffers, so that the three cannot disagree.
 */
#ifndef MOKC_GPU_BUF_LIST_H
#define MOKC_GPU_BUF_LIST_H

#include <stddef.h>

typedef struct {
    void **ptr;
    size_t bytes;
} GpuBuf;

enum { GPU_BUF_MAX = 48 };

typedef struct {
    GpuBuf b[GPU_BUF_MAX];
    int n;
    const char *owner; /* names the layer in the internal error of a full list */
} GpuBufList;

/* An empty list for owner (a string that outlives the list). */
void gpu_buf_init(GpuBufList *l, const char *owner);

/* ptr: the address of a device pointer (bf16_t **, float **, ...); bytes may be 0. */
void gpu_buf_add(GpuBufList *l, void *ptr, size_t bytes);

size_t gpu_buf_total(const GpuBufList *l);

/* cudaMalloc for each entry with bytes > 0; the others' pointers become NULL. */
void gpu_buf_alloc(const GpuBufList *l);

/* cudaFree for each non-NULL pointer. */
void gpu_buf_free(const GpuBufList *l);

#endif
