/*
 * Token data: HDF5 token files and the deterministic, rank-aware window loader.
 *
 * File format (format_version 1), written by `mokc prepare` through data_write_tokens():
 *   /tokens            1-D contiguous dataset of token ids; H5T_STD_U16LE when vocab_size <= 65536,
 *                      else H5T_STD_U32LE. Every id is < vocab_size.
 *   attributes on the root group "/" (the reader also accepts them on /tokens):
 *     vocab_size       int32   size of the tokenizer's vocabulary (256 for byte-level)
 *     num_tokens       int64   number of ids in /tokens (a cross-check against truncation)
 *     source           string  where the tokens came from (input path and byte range)
 *     tokenizer        string  "bytes" for byte-level tokens (one token per byte, id = byte value)
 *     format_version   int32   1
 * Inspect one with `h5dump -A FILE.h5`.
 * Files written by other tools are read too: only /tokens is required, as a 1-D dataset of any
 * integer type (signed or unsigned, 8 to 64 bits); each attribute is optional and checked when
 * present (a missing vocab_size means the model's, and every id must be in [0, vocab_size)).
 *
 * Windows and batches: a sequence is a window of seq_len + 1 tokens (inputs = the first seq_len,
 * targets = the same shifted by one). Window i covers tokens [i*seq_len, i*seq_len + seq_len + 1),
 * so windows do not overlap in their inputs and there are (num_tokens - 1) / seq_len of them.
 * Epoch e visits every window once, in a permutation computed from (seed, e) alone (splitmix64 +
 * Fisher-Yates), so the order does not depend on thread count, rank count or platform. Epochs
 * are concatenated into one global stream of sequences. Global batch b is the stream's sequences
 * [b*G, (b+1)*G) with G = world*micro_batch; rank r takes [r*micro_batch, (r+1)*micro_batch) of it.
 * Hence 1 rank with micro_batch 4 sees exactly the sequences 2 ranks with micro_batch 2 see
 * together, and the loader's whole state is one number: global sequences consumed (the same on
 * every rank), which checkpoints save and loader_seek() restores.
 *
 * Errors: functions return non-zero and write one complete message (what is wrong, which file,
 * how to fix it) into err; callers print it with mokc_die(MOKC_EXIT_USAGE, ...).
 */
#ifndef MOKC_DATA_H
#define MOKC_DATA_H

#include <stddef.h>
#include <stdint.h>

#define DATA_FORMAT_VERSION 1
/* Largest vocabulary stored as uint16. */
#define DATA_U16_MAX_VOCAB 65536
/* Seed for validation loaders: a fixed order so that validation losses are comparable. */
#define DATA_VAL_SEED UINT64_C(0x76616c6964617465)

typedef struct {
    uint32_t *tokens;     /* num_tokens ids, all < vocab_size */
    int64_t num_tokens;
    int vocab_size;
    int format_version;
    char *path;           /* as given to data_open */
    char *source;         /* attribute "source" */
    char *tokenizer;      /* attribute "tokenizer" */
} TokenSet;

typedef struct {
    const TokenSet *set;
    int seq_len, micro_batch, rank, world;
    uint64_t seed;
    int64_t num_windows;  /* windows per epoch */
    int64_t position;     /* global sequences consumed, all ranks together */
    int64_t perm_epoch;   /* epoch whose permutation is in perm; -1: none yet */
    int64_t *perm;        /* num_windows window indices */
} DataLoader;

/* Writes tokens[0..n) as a token file (format above) crash-safely: the data goes to
 * "<path>.tmp-<pid>", is closed and fsync'ed, then renamed over path, so path is always either
 * the old file or the complete new one. Every token must be < vocab_size. */
int data_write_tokens(const char *path, const uint32_t *tokens, int64_t n, int vocab_size,
                      const char *source, const char *tokenizer, char *err, size_t errlen);

/* Opens and validates a token file and loads all its tokens (as uint32) into memory; checks
 * the HDF5 structure, dtype, attributes, vocab_size == expected_vocab (expected_vocab <= 0 skips
 * that check, and then the file must carry vocab_size) and that every token is in [0, vocab_size). On failure *set is left empty
 * (data_close is still safe). Whole-file loading suits the small sets this engine trains on;
 * large sets would read window by window through a hyperslab instead. */
int data_open(TokenSet *set, const char *path, int expected_vocab, char *err, size_t errlen);
void data_close(TokenSet *set);

/* Number of seq_len windows in n tokens: (n - 1) / seq_len (0 when n < seq_len + 1). */
int64_t data_num_windows(int64_t num_tokens, int seq_len);

/* The window order of one epoch: perm[0..n) is a permutation of 0..n-1 that depends only on
 * (seed, epoch, n). Changing it breaks the resumption of saved runs; a test pins it. */
void data_epoch_permutation(uint64_t seed, int64_t epoch, int64_t n, int64_t *perm);

/* Sets up a loader over set for this rank, at position 0. Fails (with the number of tokens
 * needed) when the set has fewer than world*micro_batch windows, or on bad arguments. */
int loader_init(DataLoader *ld, const TokenSet *set, int seq_len, int micro_batch, uint64_t seed,
                int rank, int world, char *err, size_t errlen);
void loader_free(DataLoader *ld);

/* Fills inputs and targets (each micro_batch*seq_len ints, row-major [micro_batch][seq_len])
 * with this rank's share of the next global batch and advances by world*micro_batch. */
void loader_next_batch(DataLoader *ld, int *inputs, int *targets);

/* Global sequences consumed so far (identical on every rank); save it in checkpoints. */
int64_t loader_position(const DataLoader *ld);
/* Continues from a saved position (>= 0); the next batch is the one that followed it. */
void loader_seek(DataLoader *ld, int64_t position);
/* Back to position 0: the start of every validation pass. */
void loader_reset(DataLoader *ld);
/* The epoch the next sequence comes from (for logs). */
int64_t loader_epoch(const DataLoader *ld);

#endif
