/*
 * The device memory plan: every GPU buffer of a run is declared first (name, class, bytes), then
 * allocated at once and printed as MiB per class. An out-of-memory error then names the plan and
 * what to lower, instead of a bare CUDA error.
 */
#ifndef MOKC_GPU_MEMORY_PLAN_H
#define MOKC_GPU_MEMORY_PLAN_H

#include <stddef.h>

typedef enum { MEM_PARAMS, MEM_GRADS, MEM_OPTIMIZER, MEM_ACTIVATIONS, MEM_WORKSPACE, MEM_CLASSES } MemClass;

typedef struct {
    const char *name;
    MemClass cls;
    size_t bytes;
    void **dst;              /* receives the device pointer */
} MemItem;

typedef struct {
    MemItem *items;
    int count;
    size_t class_bytes[MEM_CLASSES];
    size_t noted;            /* bytes other modules allocate themselves (memory_plan_note) */
    void *block;             /* one cudaMalloc holds every item (256-byte aligned) */
    char summary[512];       /* "params 12.0 MiB, grads ..., total ..." */
} MemoryPlan;

void memory_plan_init(MemoryPlan *p);
/* Declares a buffer; *dst is set by memory_plan_allocate. */
void memory_plan_add(MemoryPlan *p, const char *name, MemClass cls, size_t bytes, void **dst);
/* Counts memory that a module allocates itself (it appears in the printed plan and the OOM hint). */
void memory_plan_note(MemoryPlan *p, MemClass cls, size_t bytes);
/* Allocates everything; on failure stops with the plan and a hint. */
void memory_plan_allocate(MemoryPlan *p);
void memory_plan_print(const MemoryPlan *p);
void memory_plan_free(MemoryPlan *p);

#endif
