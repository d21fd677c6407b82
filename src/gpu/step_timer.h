/*
 * Where a training step's GPU time goes: events recorded on the compute stream at the boundaries
 * of the model's parts, each interval counted to the part that starts it. Read once a step, after
 * the optimizer; the intervals cover the stream from the step's first mark to its last, so they
 * also count the stream's idle gaps (the host's work between micro-batches: to "dense").
 * A profiled step (step_timer_profile) records an event at every mark, and each interval also counts to
 * the op that starts it: the step's time op by op (`log.profile_step`).
 */
#ifndef MOKC_GPU_STEP_TIMER_H
#define MOKC_GPU_STEP_TIMER_H

#include <cuda_runtime.h>

#include "step_parts.h"

#define STEP_TIMER_PROFILE_EVENTS 4096 /* made when a profile starts (mokc-small's step marks ≈ 1700) */

typedef struct {
    cudaStream_t stream;
    cudaEvent_t *ev;
    int *part;        /* part[i]: the part the interval from ev[i] to ev[i + 1] belongs to */
    const char **op;  /* op[i]: the op that starts it */
    int n, cap;
    int profile;      /* every mark records an event, not only a change of part */
} StepTimer;

void step_timer_init(StepTimer *t, cudaStream_t stream);
void step_timer_free(StepTimer *t);
/* Forgets the marks so far (a step starts: marks of work no step read, e.g. in tests, do not pile up). */
void step_timer_restart(StepTimer *t);
/* From here on every mark records an event and names its op (on = 1), or only a change of part does (0). */
void step_timer_profile(StepTimer *t, int on);
/* From here on the stream's time counts to `part`, and in a profile to `op` (a static string). Outside a
 * profile a mark of the part already running records nothing. */
void step_timer_mark(StepTimer *t, StepPart part, const char *op);
/* The end of the step's last interval (always recorded). */
void step_timer_end(StepTimer *t);
/* Waits for the last mark, adds each interval's milliseconds to ms[part] (zeroed first) and, where ops is not
 * NULL, to its op in ops (n = 0 unless profiling; more than STEP_OPS_MAX names stop the run); starts over. All
 * zeros without marks. */
void step_timer_read(StepTimer *t, double ms[STEP_PARTS], OpTimes *ops);

#endif
