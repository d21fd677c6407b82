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
    const char *name;
    MemClass cls;
    size_t bytes;
} MemNote;

typedef struct {
    MemItem *items;
    int count;
    MemNote *notes;          /* memory other modules allocate themselves (memory_plan_note) */
    int n_notes;
    size_t class_bytes[MEM_CLASSES];
    size_t noted;            /* the notes' bytes in total */
    void *block;             /* one cudaMalloc holds every item (256-byte aligned) */
    char summary[512];       /* "params 12.0 MiB, grads ..., total ..." */
} MemoryPlan;

void memory_plan_init(MemoryPlan *p);
/* Declares a buffer; *dst is set by memory_plan_allocate. */
void memory_plan_add(MemoryPlan *p, const char *name, MemClass cls, size_t bytes, void **dst);
/* Counts memory that a module allocates itself: it adds to its class in the summary and the OOM
 * hint, and the printed plan lists it on a line of its own. name must outlive the plan. */
void memory_plan_note(MemoryPlan *p, const char *name, MemClass cls, size_t bytes);
/* Allocates everything; on failure stops with the plan and a hint. */
void memory_plan_allocate(MemoryPlan *p);
void memory_plan_print(const MemoryPlan *p);
void memory_plan_free(MemoryPlan *p);

#endif
