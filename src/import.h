/*
 * Token files made by other tools, parsed from memory into token ids, so that users keep their
 * tokenizer: `mokc prepare --bin/--raw-u16/--raw-u32` turns them into HDF5 token files (data.h).
 *
 *   llm.c shard (.bin): a header of 256 little-endian int32 — [0] magic, [1] version, [2] token
 *     count, the rest unused — then exactly `count` tokens:
 *       magic 20240520, version 1: uint16 tokens (GPT-2)
 *       magic 20240801, version 7: uint32 tokens (Llama 3)
 *   raw uint16 / uint32: a bare little-endian array of ids (numpy's ndarray.tofile on x86/ARM).
 *
 * Everything in the input is untrusted: sizes are checked before any read, and every id must be
 * below the vocabulary size the user states. The parser is fuzzed (tests/fuzz/).
 */
#ifndef MOKC_IMPORT_H
#define MOKC_IMPORT_H

#include <stddef.h>
#include <stdint.h>

enum import_format { IMPORT_LLMC_BIN, IMPORT_RAW_U16, IMPORT_RAW_U32 };

#define LLMC_HEADER_BYTES 1024
#define LLMC_MAGIC_U16 20240520
#define LLMC_VERSION_U16 1
#define LLMC_MAGIC_U32 20240801
#define LLMC_VERSION_U32 7
#define LLMC_MAGIC_EVAL 20240522 /* llm.c's multiple-choice eval files: not tokens */

typedef struct {
    uint32_t *tokens;     /* malloc'ed, count ids, all < vocab */
    int64_t count;
    const char *tokenizer; /* what the format implies: "gpt2", "llama3" or "unknown" */
} ImportedTokens;

/* Parses n bytes of `format` (name: the input's path, for messages). Returns 0 and fills *out,
 * or non-zero with one message (what is wrong, where, what to do) in err and *out empty. */
int import_tokens(enum import_format format, const unsigned char *data, size_t n, int vocab, const char *name,
                  ImportedTokens *out, char *err, size_t errlen);

const char *import_format_name(enum import_format format);

#endif
