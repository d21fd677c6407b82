/*
 * The parts a training step's time is told in (run records, the closing summary), and a profiled step's ops:
 * what the GPU backend measures (gpu/step_timer.h); the CPU backend reports none.
 */
#ifndef MOKC_STEP_PARTS_H
#define MOKC_STEP_PARTS_H

typedef enum {
    STEP_ATTENTION, /* attention blocks: norm, q/k/v/o projections, RoPE, attention, forward and backward */
    STEP_MOE,       /* MoE layers, forward and backward (router, dispatch, experts, combine) */
    STEP_DENSE,     /* the rest: embedding, FFN norms and dense FFNs, LM head, loss, the stream's idle gaps */
    STEP_ALLREDUCE, /* after the last backward, the compute stream waiting for the gradients' all-reduce, the
                       squares for their norm queued behind it (also on one GPU), and the host's sums over the
                       ranks (the exposed time of a step's reductions) */
    STEP_OPTIMIZER, /* zeroing the gradients, summing their norm's squares, AdamW */
    STEP_PARTS
} StepPart;

/* The part's key in run records: "attention", "moe", "dense", "allreduce_exposed", "optimizer". */
static inline const char *step_part_name(int part) {
    static const char *const names[STEP_PARTS] = {"attention", "moe", "dense", "allreduce_exposed", "optimizer"};
    return part >= 0 && part < STEP_PARTS ? names[part] : "?";
}

/* A profiled step's time by op (`log.profile_step`): each of the model's ops, in the order first marked, with the
 * part it counts to, the intervals it started and their milliseconds. */
#define STEP_OPS_MAX 64 /* distinct ops a profile keeps (the model marks about 30) */

typedef struct {
    const char *name; /* a static string */
    int part;
    int count;
    double ms;
} OpTime;

typedef struct {
    int n; /* 0: the step was not profiled */
    OpTime op[STEP_OPS_MAX];
} OpTimes;

#endif
