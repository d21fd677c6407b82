/* A layer's device buffers as one list (buf_list.h). */
#include "gpu/buf_list.h"

#include <string.h>

#include "common.h"
#include "gpu/check.h"

void gpu_buf_init(GpuBufList *l, const char *owner) {
    memset(l, 0, sizeof *l);
    l->owner = owner;
}

void gpu_buf_add(GpuBufList *l, void *ptr, size_t bytes) {
    if (l->n >= GPU_BUF_MAX)
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "%s: more than %d device buffers (internal)", l->owner, GPU_BUF_MAX);
    l->b[l->n].ptr = (void **)ptr;
    l->b[l->n].bytes = bytes;
    l->n++;
}

size_t gpu_buf_total(const GpuBufList *l) {
    size_t s = 0;
    for (int i = 0; i < l->n; i++) s += l->b[i].bytes;
    return s;
}

void gpu_buf_alloc(const GpuBufList *l) {
    for (int i = 0; i < l->n; i++) {
        *l->b[i].ptr = NULL;
        if (l->b[i].bytes > 0) cudaCheck(cudaMalloc(l->b[i].ptr, l->b[i].bytes));
    }
}

void gpu_buf_free(const GpuBufList *l) {
    for (int i = 0; i < l->n; i++)
        if (*l->b[i].ptr) cudaCheck(cudaFree(*l->b[i].ptr));
}
