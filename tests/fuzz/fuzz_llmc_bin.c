/*
 * libFuzzer target (`make fuzz`): the llm.c .bin and raw token parsers of src/import.c on
 * arbitrary bytes, under ASan and UBSan. Beyond not crashing, a parse must keep its promises:
 * success = a positive count that the input size accounts for and every id below the vocabulary;
 * failure = a message and nothing allocated.
 */
#include <stdint.h>
#include <stdlib.h>

#include "import.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const struct {
        enum import_format format;
        int vocab;
    } runs[] = {{IMPORT_LLMC_BIN, 50257}, {IMPORT_RAW_U16, 50257}, {IMPORT_RAW_U32, 1 << 20}};
    for (int r = 0; r < 3; r++) {
        ImportedTokens t;
        char err[1024] = "";
        if (import_tokens(runs[r].format, data, size, runs[r].vocab, "fuzz", &t, err, sizeof err) != 0) {
            if (t.tokens || t.count || !err[0]) __builtin_trap();
            continue;
        }
        size_t payload = runs[r].format == IMPORT_LLMC_BIN ? size - LLMC_HEADER_BYTES : size;
        if (t.count <= 0 || !t.tokens || !t.tokenizer) __builtin_trap();
        if (payload != (size_t)t.count * 2 && payload != (size_t)t.count * 4) __builtin_trap();
        for (int64_t i = 0; i < t.count; i++)
            if (t.tokens[i] >= (uint32_t)runs[r].vocab) __builtin_trap();
        free(t.tokens);
    }
    return 0;
}
