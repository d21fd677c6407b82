/* The README's config reference must match the validator's own table (`mokc help config`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "test.h"

static void test_readme_config_reference_is_current(void) {
    char *readme = test_read_text("README.md");
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
