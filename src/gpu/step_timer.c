/* A step's GPU time by part (step_timer.h). */
#include "gpu/step_timer.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "gpu/check.h"

void step_timer_init(StepTimer *t, cudaStream_t stream) {
    memset(t, 0, sizeof *t);
    t->stream = stream;
}

void step_timer_free(StepTimer *t) {
    for (int i = 0; i < t->cap; i++) cudaEventDestroy(t->ev[i]);
    free(t->ev);
    free(t->part);
    memset(t, 0, sizeof *t);
}

void step_timer_restart(StepTimer *t) { t->n = 0; }

void step_timer_mark(StepTimer *t, StepPart part) {
    if (t->n == t->cap) { /* events are made once and reused every step */
        int cap = t->cap ? 2 * t->cap : 64;
        cudaEvent_t *ev = mallocCheck((size_t)cap * sizeof *ev);
        int *part = mallocCheck((size_t)cap * sizeof *part);
        if (t->cap)
            memcpy(ev, t->ev, (size_t)t->cap * sizeof *ev), memcpy(part, t->part, (size_t)t->cap * sizeof *part);
        for (int i = t->cap; i < cap; i++)
            cudaCheck(cudaEventCreate(&ev[i]));
        free(t->ev), free(t->part);
        t->ev = ev, t->part = part, t->cap = cap;
    }
    cudaCheck(cudaEventRecord(t->ev[t->n], t->stream));
    t->part[t->n++] = part;
}

void step_timer_read(StepTimer *t, double ms[STEP_PARTS]) {
    for (int p = 0; p < STEP_PARTS; p++) ms[p] = 0;
    if (t->n == 0) return;
    cudaCheck(cudaEventSynchronize(t->ev[t->n - 1]));
    for (int i = 0; i + 1 < t->n; i++) {
        float dt = 0;
        cudaCheck(cudaEventElapsedTime(&dt, t->ev[i], t->ev[i + 1]));
        ms[t->part[i]] += dt;
    }
    t->n = 0;
}
