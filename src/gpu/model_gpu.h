/*
 * The whole model on the GPU: parameters (bf16 weights and fp32 masters, most of these split into the bf16 weights
 * and 16-bit remainders), gradients and AdamW moments in the parameter table's flat layout, activations from one
 * memory plan, and the forward and backward of a micro-batch composed from the kernels (kernels/), cuBLAS
 * (gpu/gemm.h) and the MoE layer: unfused (gpu/moe_unfused.h), or the megakernel, forward and backward (gpu/moe_mok.h).
 * Gradients are summed over the ranks by NCCL on a second stream, one layer at a time as the backward
 * finishes it, overlapped with the layers still to go.
 * Same function as the CPU reference (src/cpu/model_cpu.h) with the numerics of DESIGN.md.
 */
#ifndef MOKC_GPU_MODEL_H
#define MOKC_GPU_MODEL_H

#include <stdint.h>

#include "config.h"
#include "dist.h"
#include "gpu/comms.h"
#include "gpu/step_timer.h"
#include "model.h"

typedef struct GpuModel GpuModel;

/* Builds the memory plan for micro-batch B x T, allocates it (printing nothing) and creates the
 * streams, handles and MoE layers: with moe_impl "auto" or "mok", the megakernel (a collective over comms->ep)
 * where it runs (moe_mok_available: the shape on this GPU and build, the EP group in one NVLink domain), else
 * the unfused layer ("auto"; gpu_model_moe_why says why) or a stop ("mok"). The model holds
 * pointers to d, t, dist and comms: they must outlive it. */
GpuModel *gpu_model_create(const ModelDims *d, const ParamTable *t, const TrainConfig *tc, const Dist *dist,
                           const GpuComms *comms, int B, int T, enum moe_impl moe_impl);
/* What the MoE layers' forward runs: MOE_IMPL_MOK or MOE_IMPL_UNFUSED (also without MoE layers). */
enum moe_impl gpu_model_moe_impl(const GpuModel *g);
/* Why moe_impl "auto" fell back to the unfused layer ("" otherwise). */
const char *gpu_model_moe_why(const GpuModel *g);
void gpu_model_destroy(GpuModel *g);
/* "GPU memory plan: parameters ... MiB, ...", then a line per buffer set allocated apart (MoE). */
void gpu_model_print_plan(const GpuModel *g);

/* Host <-> device copies of the optimizer state (fresh start, checkpoints and resume). m and v
 * may be NULL (left as they are). The bf16 weights follow the parameters. The host's parameters and moments are
 * fp32; the GPU keeps most masters split (the bf16 weights and a 16-bit remainder, master_split.h: exact, their bf16
 * weights rounded ties away from zero), and with train.optimizer_state bf16 the moments are rounded on the way in
 * (exactly, for a bf16 run's) and widened on the way out: all through the gradient buffer, whose contents are then
 * lost (so between steps only). */
void gpu_model_upload_state(GpuModel *g, const float *params, const float *m, const float *v);
/* A fresh start on the GPU: the parameters model_init_params would make from seed (init_params.h
 * says how close), AdamW moments zero; made in the gradient buffer, whose contents are then lost. Seconds for a
 * 10 G-parameter model, where the host, under mpirun's default binding of a rank to one core, takes minutes. */
void gpu_model_init_state(GpuModel *g, uint64_t seed);
void gpu_model_download_state(GpuModel *g, float *params, float *m, float *v);
/* The same for the tensors of `kinds` only (a bit per param_kind: 1u << PARAM_REPLICATED for the replicas a run's
 * closing comparison reads), the rest of the host arrays untouched: their pages are not made resident (at EP2
 * mokc-small's experts would take ≈ 60 GB of a rank's host memory). */
#define GPU_STATE_ALL (1u << PARAM_REPLICATED | 1u << PARAM_EXPERT)
void gpu_model_download_state_of(GpuModel *g, float *params, float *m, float *v, unsigned kinds);
/* The expert-selection biases (L, E), host fp32. */
void gpu_model_set_expert_bias(GpuModel *g, const float *bias);
/* Tests: fewer rows than planned in a chunk of the LM head's logits (planned: the rows whose fp32 logits fill
 * 1 GiB, all rows of a small vocabulary) and in one pass of its backward (planned: the whole chunks whose bf16
 * dlogits fit 3 GiB, at most all rows). A value outside 1..now (rows) or rows..now (grad_rows) leaves it; returns
 * 1 when both are now as asked. */
int gpu_model_set_head_rows(GpuModel *g, int rows, int grad_rows);
/* Tests: AdamW's updates of the routed experts while they are idle and of an untied embedding table's rows no token
 * used (gpu/adamw_deferred.h; on from the start where the experts' gradients are left unwritten,
 * MoeGpuGrads.idle_unwritten, and where the table is not the head's) deferred, or made every step: the same bits
 * either way. Off pays what is owed first; on settles every `settle_every` calls (0: the default). Returns the parts
 * deferred now (0 when off). The environment's MOKC_ADAMW_EAGER=1 turns them off at creation (tests of whole runs). */
enum { DEFERRED_EXPERTS = 1, DEFERRED_TABLE = 2 };
int gpu_model_set_deferred(GpuModel *g, int on, int settle_every);

/* Starts a step's gradients: zeroes every tensor but those the next micro-batch's backward writes instead of adding
 * to: the routed experts' (MoeGpuGrads.overwrite_experts) and the attention's, dense FFN's and LM head's matrices
 * (their weight-gradient GEMMs at beta 0; a table tied to the head too: the head writes it before the embedding's
 * backward adds). */
void gpu_model_zero_grads(GpuModel *g);
/* The fp32 gradients to the host (tests, diagnostics). */
void gpu_model_download_grads(GpuModel *g, float *grads);
/* MoE layer l's selections in its last forward, (B*T, k) expert ids in selection order, to the host (`mokc check`). */
void gpu_model_download_topk(GpuModel *g, int l, int *topk);
/* The parameters' bf16 weights (their bits), which the GEMMs read, to the host (tests). */
void gpu_model_download_bf16(GpuModel *g, uint16_t *params_bf16);
/* Forward and backward of one micro-batch (host token arrays of B*T), adding into the gradients
 * (those gpu_model_zero_grads left: writing, in the first micro-batch after it)
 * the gradient of dloss * (mean cross-entropy + aux_coef * aux) averaged over the ranks. On the
 * last micro-batch of a step (`last`) it starts the gradient all-reduce as layers finish; there, with more than one
 * rank, it is also a host collective over MPI_COMM_WORLD (the embedding rows the ranks' tokens used): every rank
 * calls it with `last` alike.
 * Returns this rank's mean cross-entropy; *aux = the sum of the layers' aux losses; load (L, E)
 * += this rank's routed slots per expert. */
double gpu_model_forward_backward(GpuModel *g, const int *inputs, const int *targets, double dloss, int last,
                                  double *aux, int64_t *load);
/* Mean cross-entropy of one micro-batch, no gradients (validation). */
double gpu_model_evaluate(GpuModel *g, const int *inputs, const int *targets);
/* The global gradient norm (every rank gets the same), after the step's last micro-batch: waits for the
 * all-reduce and the squares that micro-batch queued behind it, so it is the norm of the gradients as they were
 * then; nothing may write them in between (another backward, gpu_model_zero_grads, a state upload, init or
 * download). */
double gpu_model_grad_norm(GpuModel *g);
/* AdamW over every tensor (gradients times grad_scale), refreshing the bf16 weights. t is 1-based. */
void gpu_model_adamw(GpuModel *g, double lr, double grad_scale, long t);
/* Times the next steps op by op (on = 1) or stops (0): an event at every op's start, not only at a part's. */
void gpu_model_profile(GpuModel *g, int on);
/* After gpu_model_adamw: the step's stream time in milliseconds by part (gpu/step_timer.h), from
 * gpu_model_zero_grads to the optimizer's end, and where ops is not NULL by op (n = 0 unless the step was
 * profiled); waits for the optimizer. */
void gpu_model_step_times(GpuModel *g, double ms[STEP_PARTS], OpTimes *ops);

#endif
