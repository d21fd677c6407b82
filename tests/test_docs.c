/* The README's config reference must match the validator's own table (`mokc help config`), and
 * docs/scaling.md's figures its own cost model's output. */
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

/* docs/scaling.md quotes its model's output (the check lines and the prediction table): run the
 * model from the page and find every line it prints on the page, so that a changed input cannot
 * leave the quoted figures behind. */
static void test_scaling_model_output_is_current(void) {
    char *page = test_read_text("docs/scaling.md");
    CHECK_MSG(page != NULL, "docs/scaling.md not found (tests run from the repository root)");
    if (!page) return;
    FILE *run = popen("awk '/^# scaling-model: begin/,/^# scaling-model: end/' docs/scaling.md | sh 2>&1", "r");
    CHECK_MSG(run != NULL, "cannot run the scaling model (awk and sh)");
    if (!run) {
        free(page);
        return;
    }
    char line[512];
    int lines = 0;
    while (fgets(line, sizeof line, run)) {
        line[strcspn(line, "\n")] = 0;
        lines++;
        CHECK_MSG(strstr(page, line) != NULL,
                  "docs/scaling.md does not quote this line of its model's output (rerun the model and update "
                  "the page):\n%s", line);
    }
    CHECK_MSG(pclose(run) == 0 && lines >= 10, "the scaling model failed or printed %d lines", lines);
    free(page);
}

TEST_SUITE(docs, TEST_CASE(test_readme_config_reference_is_current), TEST_CASE(test_scaling_model_output_is_current));
