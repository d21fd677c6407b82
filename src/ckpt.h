/*
 * Checkpoints: everything a run needs to continue bitwise identically after a crash, a preemption
 * or the end of a job, in HDF5 files (format_version 1).
 *
 *   checkpoint.dir/step_00001200/
 *     model.h5              /params/<table name>  float32, GLOBAL shape (expert tensors [E, ...]);
 *                           /buffers/expert_bias  float32 (L, E) routing bias (absent without experts)
 *                           root attributes: format_version, kind, step, world, ep, dp, config
 *                           (the resolved spec as JSON)
 *     state_rank00000.h5    one per rank: /adam_m/<name>, /adam_v/<name> (the rank's LOCAL shapes);
 *                           attributes format_version, kind, step, tokens_seen, loader_position,
 *                           seed, world, ep, dp, rank, ep_rank, dp_rank, config
 *     DONE                  written last, after a barrier: the step and each file's size in bytes
 *
 * Every dataset is chunked with a Fletcher-32 checksum and the files use checksummed metadata, so
 * flipped or missing bytes are reported, never loaded. With serial HDF5 the model file is written
 * in turns: rank 0 creates it with the replicated tensors and its own experts, then each other EP
 * owner (dp_rank 0 of ep_rank 1, 2, ...) adds its experts' hyperslabs, with a barrier between turns.
 *
 * Crash safety: a checkpoint is written into step_N.tmp-<pid>/ (each file to a temporary name,
 * fsync'ed, renamed), DONE last, then the directory is renamed to step_N. Only step_N directories
 * holding DONE count, so kill -9 at any moment leaves the newest complete checkpoint loadable;
 * leftovers are removed at the next save or resume. Pruning deletes DONE first.
 *
 * Test hook: MOKC_CKPT_FAULT=POINT:STEP makes the writer of checkpoint STEP kill its own process
 * (SIGKILL) at POINT, one of dir, state, model_partial, model, done, renamed, prune.
 *
 * Collective calls (every rank, same arguments) return the same status on every rank, with the
 * message of the lowest failing rank in err.
 */
#ifndef MOKC_CKPT_H
#define MOKC_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "dist.h"
#include "model.h"

#define CKPT_FORMAT_VERSION 1
#define CKPT_PATH_MAX (CONFIG_PATH_MAX + 64)

/* What a checkpoint holds: views of the trainer's buffers and counters. */
typedef struct {
    const MokcConfig *cfg;
    const Dist *dist;
    const ModelDims *dims;
    const ParamTable *table;
    float *params, *adam_m, *adam_v; /* table->total elements each */
    float *expert_bias;              /* (L, E); unused without experts */
    int step;                        /* optimizer steps done */
    int64_t tokens_seen;
    int64_t loader_position;         /* the train loader's global sequences consumed */
} CkptState;

/* Writes checkpoint.dir/step_<step> (collective), then keeps the newest checkpoint.keep complete
 * checkpoints. path gets the directory; *bytes (rank 0) the size of its files. Returns 0, or
 * non-zero on every rank (the partial directory removed, older checkpoints untouched). */
int ckpt_save(const CkptState *s, char *path, size_t pathlen, int64_t *bytes, char *err, size_t errlen);

/* Reads the checkpoint directory `path` into s (collective): the model's parameters, this rank's
 * AdamW moments, the expert bias, step, tokens_seen and loader position. Refuses, naming the
 * difference, a checkpoint whose model shape, vocabulary, expert count, tensor names or parallel
 * layout differs from s's; reports truncated or corrupt files. Rank 0 prints a note listing other
 * settings that differ from the checkpoint's. Returns 0, or MOKC_EXIT_USAGE on every rank. */
int ckpt_load(CkptState *s, const char *path, char *err, size_t errlen);

/* The checkpoint to resume from (collective): for checkpoint.resume = "auto", the newest complete
 * one in checkpoint.dir (incomplete leftovers are removed first); otherwise the given path.
 * Returns 1 with path filled, or 0 for a fresh start (resume "", or "auto" with none found). */
int ckpt_resolve_resume(const CheckpointConfig *cc, const Dist *dist, char *path, size_t pathlen);

/* The newest complete checkpoint in dir: its step, with its directory in path; -1 if none. */
int ckpt_find_latest(const char *dir, char *path, size_t pathlen);

/* Removes interrupted checkpoint directories in dir and, if keep > 0, every complete one but the
 * newest keep. Call on one rank. Returns how many directories it removed. */
int ckpt_clean(const char *dir, int keep);

#endif
