/*
 * `mokc check`: the GPU backend against the CPU reference on a spec's own shapes (cut to a few layers and one short
 * sequence, so that the CPU keeps up), and the pieces of that comparison the GPU tests share: the weights both
 * backends represent alike, and the per-tensor verdict on two sets of gradients.
 */
#ifndef MOKC_MODEL_CHECK_H
#define MOKC_MODEL_CHECK_H

#include <stdint.h>

#include "model.h"

/* A gradient tensor agrees with the CPU reference within this relative error: bf16 operands in every GEMM and bf16
 * activations, compounded over the layers, most through the attention backward's bf16 probabilities and score
 * gradients. Measured on an H200 (s45 r3): at most 1.47e-2 (wq, wk) on mokc-small-1gpu's shapes over 2 and 4 layers,
 * 6.1e-3 on tiny.json's; the faults the check is for (a row, a tile or a term lost, a wrong scale) move a tensor by
 * far more, or show as NaN or as a second pass not exactly doubled. */
#define CHECK_GRAD_TOL 3e-2
/* The loss and the aux loss agree within this relative error (measured: at most 3e-5 and 1.1e-4). */
#define CHECK_LOSS_TOL 1e-3
/* The GPU's router reads bf16 inputs and its layers' bf16 outputs, so where two experts' scores nearly tie it may
 * choose the other one. The CPU then follows the GPU's choice (so that the gradients compare), provided its own score
 * for it falls short of its own k-th choice's by less than this, relative: a near-tie, not a wrong expert. Measured
 * (s45 r3): 15 of 2048 choices at 1.39e-2 at most over mokc-small-1gpu's first MoE layer, 43 of 6144 at 2.38e-2 over
 * its first three; a wrong expert of 128 falls short by ~0.7 (logits of std ~0.9 at initialisation). */
#define CHECK_ROUTING_GAP 5e-2

/* ||a - b|| / ||b|| of float arrays, in double (||a - b|| when b is zero). */
double rel_error_f(const float *a, const float *b, long n);
/* Number of NaN entries in a float array. */
long count_nan(const float *x, long n);

/* The comparison's weights, in place: every tensor with more than one dimension scaled by `scale`, and all of them but
 * the routers (the GPU's router logits are fp32 products) rounded to bf16 values, so that the GPU's bf16 copies are
 * exact and the comparison measures the kernels' arithmetic, not the rounding of the weights. Norms are left. `mokc
 * check` keeps the spec's scale (1): larger weights make the logits peaky, and then bf16's rounding of them moves
 * the softmaxes, hence every gradient, by more than the kernels' arithmetic does. */
void check_weights(float *params, const ParamTable *t, float scale);

/* One tensor's verdict. */
typedef struct {
    double rel_error;  /* of the GPU's gradient against the CPU reference's */
    int64_t nan;       /* NaN entries in the GPU's gradient */
    int64_t unscaled;  /* elements of the second pass (twice the loss) other than exactly twice the first's */
} GradCheck;

/* Per tensor of t (out: t->count): got against want, and twice against 2 * got bit for bit (twice NULL: 0). */
void check_grads(const ParamTable *t, const float *got, const float *twice, const float *want, GradCheck *out);
static inline int grad_check_ok(const GradCheck *c) {
    return c->rel_error < CHECK_GRAD_TOL && c->nan == 0 && c->unscaled == 0;
}

/* What a check found, the worst over the ranks. */
typedef struct {
    const GradCheck *grads; /* per tensor */
    int count;
    double loss_error, aux_error; /* relative, the GPU's against the CPU's */
    int repeated;                 /* the second pass's loss equals the first's, bit for bit */
    double routing_gap;           /* the largest shortfall of a GPU choice the CPU would not have made (0: none) */
} CheckFindings;
/* What failed, as flags; 0 when the backends agree. NaN anywhere fails. */
enum { CHECK_BAD_GRADS = 1, CHECK_BAD_LOSS = 2, CHECK_BAD_AUX = 4, CHECK_NOT_REPEATED = 8, CHECK_BAD_ROUTING = 16 };
int check_verdict(const CheckFindings *f);

/* argv[0] = "check", argv[1] = SPEC.json, then --set, --layers and --tokens. Returns the exit code: 0 when the
 * backends agree, 1 when not, 2 for bad input or a machine without a GPU. */
int cmd_check(int argc, char **argv);

#endif
