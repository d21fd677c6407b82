/* The device memory plan: declare, allocate once, print. */
#include "gpu/memory_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gpu/check.h"

static const char *class_name[MEM_CLASSES] = {"parameters", "gradients", "optimizer", "activations", "workspace"};

#define ALIGN 256

void memory_plan_init(MemoryPlan *p) { memset(p, 0, sizeof *p); }

void memory_plan_add(MemoryPlan *p, const char *name, MemClass cls, size_t bytes, void **dst) {
    p->items = realloc(p->items, sizeof(MemItem) * (size_t)(p->count + 1));
    if (!p->items) mokc_die(MOKC_EXIT_RUNTIME, NULL, "out of host memory building the GPU memory plan");
    p->items[p->count++] = (MemItem){name, cls, bytes, dst};
    p->class_bytes[cls] += (bytes + ALIGN - 1) / ALIGN * ALIGN;
}

void memory_plan_note(MemoryPlan *p, const char *name, MemClass cls, size_t bytes) {
    p->notes = realloc(p->notes, sizeof(MemNote) * (size_t)(p->n_notes + 1));
    if (!p->notes) mokc_die(MOKC_EXIT_RUNTIME, NULL, "out of host memory building the GPU memory plan");
    p->notes[p->n_notes++] = (MemNote){name, cls, bytes};
    p->class_bytes[cls] += bytes;
    p->noted += bytes;
}

static size_t total_bytes(const MemoryPlan *p) {
    size_t t = 0;
    for (int c = 0; c < MEM_CLASSES; c++) t += p->class_bytes[c];
    return t;
}

static void summarize(MemoryPlan *p) {
    int n = 0;
    for (int c = 0; c < MEM_CLASSES; c++)
        n += snprintf(p->summary + n, sizeof p->summary - (size_t)n, "%s %.1f MiB, ", class_name[c],
                      (double)p->class_bytes[c] / (1 << 20));
    snprintf(p->summary + n, sizeof p->summary - (size_t)n, "total %.1f MiB", (double)total_bytes(p) / (1 << 20));
}

void memory_plan_allocate(MemoryPlan *p) {
    summarize(p);
    static char hint[768];
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    snprintf(hint, sizeof hint, "the plan needs %s but the GPU has %.1f MiB free: lower train.micro_batch or "
             "train.seq_len, or raise parallel.ep to spread the experts", p->summary, (double)free_b / (1 << 20));
    mokc_gpu_set_oom_hint(hint);
    size_t own = total_bytes(p) - p->noted;
    cudaCheck(cudaMalloc(&p->block, own ? own : 1));
    char *cursor = p->block;
    for (int i = 0; i < p->count; i++) {
        *p->items[i].dst = cursor;
        cursor += (p->items[i].bytes + ALIGN - 1) / ALIGN * ALIGN;
    }
    /* Optimizer moments must start at zero (gradients: gpu_model_zero_grads each step); the rest is zeroed so
     * that a read of something never written is at least reproducible. The memset runs on the legacy stream,
     * which does not order the owners' non-blocking streams: wait for it here. */
    cudaCheck(cudaMemset(p->block, 0, own));
    cudaCheck(cudaDeviceSynchronize());
}

void memory_plan_print(const MemoryPlan *p) {
    printf("GPU memory plan: %s\n", p->summary);
    for (int i = 0; i < p->n_notes; i++)
        printf("  of which %s (%s): %.1f MiB\n", p->notes[i].name, class_name[p->notes[i].cls],
               (double)p->notes[i].bytes / (1 << 20));
}

void memory_plan_free(MemoryPlan *p) {
    if (p->block) cudaFree(p->block);
    free(p->items);
    free(p->notes);
    memset(p, 0, sizeof *p);
}
