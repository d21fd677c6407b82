/*
 * Replicas must hold the same bits: every rank's copy of a replicated tensor and of its AdamW moments (and the
 * routing bias), and every data-parallel copy of an expert tensor. Each checkpoint, before it writes, and a run of
 * several ranks at its end compare 64-bit hashes of them across the ranks, as Megatron-LM checks its data-parallel
 * replicas: a difference (an update one rank made and another did not, a bit flipped in one GPU's memory) is found
 * where it starts rather than never, and is not saved. The hash is of the bits, so -0 and +0, or two NaNs, differ.
 */
#ifndef MOKC_REPLICA_CHECK_H
#define MOKC_REPLICA_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "dist.h"
#include "model.h"

/* A hash of n floats' bits and positions: any change of one element changes it; the same for any thread count. */
uint64_t replica_hash(const float *x, size_t n);

/* Compares the replicas (a collective; every rank calls it with its own arrays, table->total elements each, and
 * the (bias_n) routing bias). Returns 0 with *compared = the number of arrays compared (0 at world 1), or non-zero
 * on every rank with err naming the first array that differs and the ranks whose copy differs from the one most
 * ranks hold. */
int replica_check(const Dist *dist, const ParamTable *table, const float *params, const float *adam_m,
                  const float *adam_v, const float *bias, size_t bias_n, int *compared, char *err, size_t errlen);

#endif
