/* The README's config reference must match the validator's own table (`mokc help config`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "test.h"

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    fclose(f);
    return s;
}

static void test_readme_config_reference_is_current(void) {
    char *readme = read_file("README.md");
    CHECK_MSG(readme != NULL, "README.md not found (tests run from the repository root)");
    if (!readme) return;
    char *ref = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&ref, &len);
    config_print_reference(mem, true);
    fclose(mem);
    int lines = 0;
    for (char *line = strtok(ref, "\n"); line; line = strtok(NULL, "\n"), lines++)
        CHECK_MSG(strstr(readme, line) != NULL,
                  "README.md lacks the reference line (regenerate with ./mokc help config --markdown):\n%s", line);
    CHECK(lines > 40);
    free(ref);
    free(readme);
}

TEST_SUITE(docs, TEST_CASE(test_readme_config_reference_is_current));
