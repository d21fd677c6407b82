/*
 * Where a training step's GPU time goes: events recorded on the compute stream at the boundaries
 * of the model's parts, each interval counted to the part that starts it. Read once a step, after
 * the optimizer; the intervals cover the stream from the step's first mark to its last, so they
 * also count the stream's idle gaps (the host's work between micro-batches: to "dense").
 */
#ifndef MOKC_GPU_STEP_TIMER_H
#define MOKC_GPU_STEP_TIMER_H

#include <cuda_runtime.h>

#include "step_parts.h"

typedef struct {
    cudaStream_t stream;
    cudaEvent_t *ev;
    int *part; /* part[i]: the part the interval from ev[i] to ev[i + 1] belongs to */
    int n, cap;
} StepTimer;

void step_timer_init(StepTimer *t, cudaStream_t stream);
void step_timer_free(StepTimer *t);
/* Forgets the marks so far (a step starts: marks of work no step read, e.g. in tests, do not pile up). */
void step_timer_restart(StepTimer *t);
/* From here on the stream's time counts to `part`. */
void step_timer_mark(StepTimer *t, StepPart part);
/* Waits for the last mark, adds each interval's milliseconds to ms[part] (zeroed first) and starts
 * over; all zeros without marks. */
void step_timer_read(StepTimer *t, double ms[STEP_PARTS]);

#endif
