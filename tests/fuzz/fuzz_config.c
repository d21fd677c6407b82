/*
 * libFuzzer target (`make fuzz`): the JSON spec reader (config_parse) on arbitrary text, with
 * `--set` overrides taken from the input after each \x01 byte, under ASan and UBSan. A rejected
 * spec must say why; an accepted one must survive config_to_json -> config_parse unchanged, since
 * checkpoints store the resolved spec that way and compare it on resume.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    const char *overrides[8];
    int n = 0;
    for (char *p = strchr(text, '\x01'); p && n < 8; p = strchr(p + 1, '\x01')) {
        *p = '\0';
        overrides[n++] = p + 1;
    }
    MokcConfig cfg, again;
    ConfigErrors errors;
    int ok = config_parse(text, overrides, n, &cfg, &errors);
    if (!ok && errors.count == 0) __builtin_trap();
    config_errors_free(&errors);
    if (ok) {
        char *first = config_to_json(&cfg);
        if (!first || !config_parse(first, NULL, 0, &again, &errors)) __builtin_trap();
        config_errors_free(&errors);
        char *second = config_to_json(&again);
        if (!second || strcmp(first, second) != 0) __builtin_trap();
        free(first);
        free(second);
    }
    free(text);
    return 0;
}
