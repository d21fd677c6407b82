/* A step's GPU time by part, and in a profiled step by op (step_timer.h). */
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
    free(t->op);
    memset(t, 0, sizeof *t);
}

void step_timer_restart(StepTimer *t) { t->n = 0; }

/* Room for cap events (made once and reused every step). */
static void grow(StepTimer *t, int cap) {
    if (cap <= t->cap) return;
    cudaEvent_t *ev = mallocCheck((size_t)cap * sizeof *ev);
    int *parts = mallocCheck((size_t)cap * sizeof *parts);
    const char **ops = mallocCheck((size_t)cap * sizeof *ops);
    if (t->cap) {
        memcpy(ev, t->ev, (size_t)t->cap * sizeof *ev), memcpy(parts, t->part, (size_t)t->cap * sizeof *parts);
        memcpy(ops, t->op, (size_t)t->cap * sizeof *ops);
    }
    for (int i = t->cap; i < cap; i++) cudaCheck(cudaEventCreate(&ev[i]));
    free(t->ev), free(t->part), free(t->op);
    t->ev = ev, t->part = parts, t->op = ops, t->cap = cap;
}

/* An event at the stream's current position, starting an interval of (part, op). */
static void record(StepTimer *t, StepPart part, const char *op) {
    if (t->n == t->cap) grow(t, t->cap ? 2 * t->cap : 64);
    cudaCheck(cudaEventRecord(t->ev[t->n], t->stream));
    t->part[t->n] = part;
    t->op[t->n++] = op;
}

void step_timer_profile(StepTimer *t, int on) {
    if (on) grow(t, STEP_TIMER_PROFILE_EVENTS); /* made now, not by doubling inside the profiled step */
    t->profile = on;
}

void step_timer_mark(StepTimer *t, StepPart part, const char *op) {
    if (!t->profile && t->n > 0 && t->part[t->n - 1] == (int)part) return; /* the same part goes on */
    record(t, part, op);
}

void step_timer_end(StepTimer *t) { record(t, STEP_OPTIMIZER, "end"); }

/* ops' entry for (name, part) (added at the end when new). */
static OpTime *op_entry(OpTimes *ops, const char *name, int part) {
    for (int i = 0; i < ops->n; i++)
        if (ops->op[i].part == part && (ops->op[i].name == name || strcmp(ops->op[i].name, name) == 0))
            return &ops->op[i];
    if (ops->n == STEP_OPS_MAX)
        mokc_die(MOKC_EXIT_RUNTIME, NULL, "step_timer_read: more than %d op names in a profiled step (internal)",
                 STEP_OPS_MAX);
    OpTime *o = &ops->op[ops->n++];
    *o = (OpTime){.name = name, .part = part};
    return o;
}

void step_timer_read(StepTimer *t, double ms[STEP_PARTS], OpTimes *ops) {
    for (int p = 0; p < STEP_PARTS; p++) ms[p] = 0;
    if (ops) ops->n = 0;
    if (t->n == 0) return;
    cudaCheck(cudaEventSynchronize(t->ev[t->n - 1]));
    for (int i = 0; i + 1 < t->n; i++) {
        float dt = 0;
        cudaCheck(cudaEventElapsedTime(&dt, t->ev[i], t->ev[i + 1]));
        ms[t->part[i]] += dt;
        if (ops && t->profile) {
            OpTime *o = op_entry(ops, t->op[i], t->part[i]);
            o->count++;
            o->ms += dt;
        }
    }
    t->n = 0;
}
