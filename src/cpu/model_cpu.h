/*
 * The decoder-only MoE transformer on the CPU: forward and backward over a micro-batch, composed
 * from the ops (ops.h) and the MoE block (moe.h). Pre-norm blocks: x += attn(rmsnorm(x));
 * x += ffn(rmsnorm(x)); logits = rmsnorm(x) @ lm_head^T; mean cross-entropy.
 * Declared for float (plain names) and double (_f64 names, used by the gradient checks).
 */
#ifndef MOKC_CPU_MODEL_H
#define MOKC_CPU_MODEL_H

#include "cpu/moe.h"
#include "model.h"

#define REAL_DECL_FILE "model_cpu_decl.h"
#include "declare_both.h"

#endif
