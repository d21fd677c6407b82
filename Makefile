# mokc — build, test and run. `make help` lists the targets and options.
.DEFAULT_GOAL := all
SHELL := /bin/bash

# ---------- options (checked below: unknown values are errors) ----------
NO_CUDA ?= 0
ARCH ?= sm_90a
SAN ?= 0
FUZZ_SECONDS ?= 60
BUILD ?= build
CPU_ARCH ?= native

ifeq ($(filter $(NO_CUDA),0 1),)
$(error NO_CUDA=$(NO_CUDA) is not valid; use NO_CUDA=0 (build the CUDA backend if nvcc is found) or NO_CUDA=1)
endif
ifeq ($(filter $(ARCH),sm_90a sm_100a),)
$(error ARCH=$(ARCH) is not valid; use ARCH=sm_90a (Hopper) or ARCH=sm_100a (Blackwell))
endif
ifeq ($(shell echo '$(FUZZ_SECONDS)' | grep -Ex '[1-9][0-9]*'),)
$(error FUZZ_SECONDS=$(FUZZ_SECONDS) is not valid; use a positive number of seconds per fuzz target)
endif
ifeq ($(filter $(SAN),0 1),)
$(error SAN=$(SAN) is not valid; use SAN=0 or SAN=1 (address + undefined sanitizers))
endif

# ---------- dependencies ----------
PKGS := libcjson hdf5-serial ompi-c
have_pkg = $(shell pkg-config --exists $(1) 2>/dev/null && echo yes)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(shell command -v nvcc 2>/dev/null))
NVCC := $(if $(CUDA_HOME),$(wildcard $(CUDA_HOME)/bin/nvcc))
NCCL_INC := $(firstword $(foreach d,$(CUDA_HOME)/include /usr/include /usr/local/include,$(if $(wildcard $(d)/nccl.h),$(d))))
WITH_CUDA := $(if $(and $(filter 0,$(NO_CUDA)),$(NVCC),$(NCCL_INC)),1,0)

CC := gcc
CFLAGS := -std=c11 -O3 -march=$(CPU_ARCH) -fopenmp -g -Wall -Wextra -D_GNU_SOURCE -Isrc
ifeq ($(SAN),1)
CFLAGS := -std=c11 -O1 -fopenmp -g -fno-omit-frame-pointer -fsanitize=address,undefined -Wall -Wextra -D_GNU_SOURCE -Isrc
endif
CFLAGS += $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDLIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lm
comma := ,
LDFLAGS := -fopenmp $(if $(filter 1,$(SAN)),-fsanitize=address$(comma)undefined)

NVCCFLAGS := -std=c++17 -O3 -gencode=arch=$(subst sm_,compute_,$(ARCH)),code=$(ARCH) -lineinfo \
             -Xptxas -v,--warn-on-spills -Xcompiler -Wall -Isrc $(if $(filter-out /usr/include,$(NCCL_INC)),-I$(NCCL_INC))
# The host code learns the build's compute capability (sm_90a -> 90, sm_100a -> 100) to refuse a
# GPU the kernels cannot run on (src/gpu/device.c): 'a' targets load on that capability only.
BUILD_CC := $(patsubst sm_%a,%,$(ARCH))
ifeq ($(WITH_CUDA),1)
CFLAGS += -DMOKC_CUDA -DMOKC_BUILD_CC=$(BUILD_CC) -I$(CUDA_HOME)/include $(if $(filter-out /usr/include $(CUDA_HOME)/include,$(NCCL_INC)),-I$(NCCL_INC))
LDLIBS += -L$(CUDA_HOME)/lib64 -L$(CUDA_HOME)/lib -lcublasLt -lcublas -lnccl -lcudart -lstdc++
endif

# ---------- sources ----------
# Files that include "real.h" are compiled twice: float (training) and double (gradient checks).
HOST_SRCS := $(filter-out src/main.c,$(wildcard src/*.c src/cpu/*.c)) $(if $(filter 1,$(WITH_CUDA)),$(wildcard src/gpu/*.c))
REAL_SRCS := $(shell grep -l '^\#include "cpu/real.h"\|^\#include "real.h"' src/cpu/*.c 2>/dev/null)
CU_SRCS := $(if $(filter 1,$(WITH_CUDA)),$(shell find kernels -name '*.cu' 2>/dev/null))
TEST_SRCS := $(wildcard tests/*.c) $(if $(filter 1,$(WITH_CUDA)),$(wildcard tests/gpu/*.c))

CU_OBJS := $(CU_SRCS:%.cu=$(BUILD)/%.cu.o)
LIB_OBJS := $(HOST_SRCS:%.c=$(BUILD)/%.o) $(REAL_SRCS:%.c=$(BUILD)/%.f64.o) $(CU_OBJS)
TEST_OBJS := $(TEST_SRCS:%.c=$(BUILD)/%.o)

.PHONY: all deps check-deps run test asan fuzz data clean help ptx sass cuda-objs plots
all: check-deps mokc

check-deps:
	@for p in $(PKGS); do \
	  if pkg-config --exists $$p 2>/dev/null; then echo "  ✓ $$p $$(pkg-config --modversion $$p)"; \
	  else echo "  ✗ $$p (run: make deps)"; missing=1; fi; done; \
	if [ -n "$(NVCC)" ]; then echo "  ✓ nvcc $(NVCC)"; else echo "  ✗ nvcc (CUDA backend not built; CPU only)"; fi; \
	if [ -n "$(NCCL_INC)" ]; then echo "  ✓ nccl $(NCCL_INC)/nccl.h"; else echo "  ✗ nccl (CUDA backend not built)"; fi; \
	echo "  → CUDA backend: $(if $(filter 1,$(WITH_CUDA)),on ($(ARCH)),off$(if $(filter 1,$(NO_CUDA)), (NO_CUDA=1)))"; \
	if [ -n "$$missing" ]; then echo "missing dependencies: run 'make deps'" >&2; exit 1; fi

deps:
	@bash scripts/install-deps.sh

mokc: $(BUILD)/mokc
	@ln -sf $(BUILD)/mokc mokc

$(BUILD)/mokc: $(BUILD)/src/main.o $(LIB_OBJS)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/mokc_tests: $(TEST_OBJS) $(LIB_OBJS)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/%.o: %.c $(BUILD)/flags
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/%.f64.o: %.c $(BUILD)/flags
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DMOKC_F64 -MMD -MP -c $< -o $@

# ptxas's resource report of each function (registers, stack frame, spills) is kept beside its
# object in X.cu.o.ptxas (tests/test_kernel_report.c reads it); nvcc's other messages are shown.
$(BUILD)/%.cu.o: %.cu $(BUILD)/flags
	@mkdir -p $(dir $@)
	@echo '$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@'
	@$(NVCC) $(NVCCFLAGS) -MMD -MP -c $< -o $@ 2> $@.ptxas; rc=$$?; \
	  grep -v '^ptxas info    :\|^    [0-9]* bytes stack frame' $@.ptxas >&2; exit $$rc

# Test suites are found by their TEST_SUITE(name, ...) line; the runner gets the list generated.
$(BUILD)/tests/suites.h: $(TEST_SRCS) $(BUILD)/flags
	@mkdir -p $(dir $@)
	@names=$$(grep -ho '^TEST_SUITE([a-z0-9_]*' $(TEST_SRCS) | sed 's/TEST_SUITE(//'); \
	{ for n in $$names; do echo "extern const TestSuite suite_$$n;"; done; \
	  echo "static const TestSuite *all_suites[] = {"; \
	  for n in $$names; do echo "    &suite_$$n,"; done; \
	  echo "};"; echo "static const int n_all_suites = (int)(sizeof(all_suites) / sizeof(all_suites[0]));"; } > $@.tmp
	@cmp -s $@.tmp $@ || mv $@.tmp $@; rm -f $@.tmp
# Version and build description for `mokc version` and run records; rewritten only on change. A copy of
# the tree whose .git is not its own (a build machine fed by rsync) passes GIT_REVISION=<rev> instead.
GIT_REVISION ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
$(BUILD)/gen/version.h: FORCE
	@mkdir -p $(dir $@)
	@{ echo '#define MOKC_VERSION "0.1.0"'; \
	   echo '#define MOKC_GIT_REVISION "$(GIT_REVISION)"'; \
	   echo '#define MOKC_BUILD_FLAGS "cuda=$(if $(filter 1,$(WITH_CUDA)),$(ARCH),off) san=$(SAN) cpu_arch=$(CPU_ARCH)"'; } > $@.tmp
	@cmp -s $@.tmp $@ || mv $@.tmp $@; rm -f $@.tmp
$(BUILD)/src/main.o $(BUILD)/src/run_record.o: CFLAGS += -I$(BUILD)/gen
$(BUILD)/src/main.o $(BUILD)/src/run_record.o: $(BUILD)/gen/version.h
$(BUILD)/tests/runner.o: CFLAGS += -I$(BUILD)/tests
$(BUILD)/tests/runner.o: $(BUILD)/tests/suites.h

# Rebuild everything when the flags change (NO_CUDA, ARCH, SAN, nvcc's). BASE_FLAGS is fixed before any
# per-target addition, so the record does not depend on which target made it.
BASE_FLAGS := $(CFLAGS) $(WITH_CUDA) $(ARCH) $(NVCCFLAGS)
$(BUILD)/flags: FORCE
	@mkdir -p $(BUILD)
	@echo '$(BASE_FLAGS)' | cmp -s - $@ || echo '$(BASE_FLAGS)' > $@
FORCE:

# The two README commands install first, then build on every core, then run.
NPROC := $(shell nproc 2>/dev/null || echo 2)
test: deps
	@$(MAKE) --no-print-directory -j$(NPROC) all $(BUILD)/mokc_tests
	@MOKC_BIN=$(BUILD)/mokc OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2} $(BUILD)/mokc_tests $(T)

asan:
	@$(MAKE) --no-print-directory -j$(NPROC) BUILD=build/asan SAN=1 NO_CUDA=1 build/asan/mokc build/asan/mokc_tests
	@ASAN_OPTIONS=detect_leaks=0 MOKC_BIN=build/asan/mokc build/asan/mokc_tests $(T)

# libFuzzer targets for the parsers of untrusted input (not run by CI): each runs FUZZ_SECONDS from
# the small seed corpus in tests/fuzz/corpus/<target>; new inputs and crashes stay in build/fuzz/.
FUZZ_CC ?= clang
FUZZ_FLAGS := -std=c11 -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -D_GNU_SOURCE -Isrc \
              $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
FUZZ_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lm
FUZZ_TARGETS := llmc_bin config
fuzz_srcs_llmc_bin := src/import.c src/common.c
fuzz_srcs_config := src/config.c src/common.c
.SECONDEXPANSION:
build/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $$(fuzz_srcs_$$*)
	@command -v $(FUZZ_CC) >/dev/null || { echo "$(FUZZ_CC) not found: install clang (apt-get install clang)" >&2; exit 1; }
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) -o $@ $^ $(FUZZ_LIBS)

fuzz: $(FUZZ_TARGETS:%=build/fuzz/fuzz_%)
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p build/fuzz/corpus-$$t build/fuzz/crashes; \
	  echo "== fuzz_$$t for $(FUZZ_SECONDS) s"; \
	  build/fuzz/fuzz_$$t build/fuzz/corpus-$$t tests/fuzz/corpus/$$t -max_total_time=$(FUZZ_SECONDS) \
	    -max_len=65536 -artifact_prefix=build/fuzz/crashes/$$t- -print_final_stats=1 \
	    || { echo "fuzz_$$t found a problem: the input is in build/fuzz/crashes/" >&2; exit 1; }; \
	done

data: deps
	@$(MAKE) --no-print-directory -j$(NPROC) all
	@bash scripts/fetch-data.sh

run: data
	@bash scripts/run-tiny.sh

# The README's charts from the committed run records (scripts/bench.sh's output); a python3 with
# matplotlib (Debian: python3-matplotlib), no GPU. The plots test renders them again and compares.
PLOT_RECORDS := bench/results/2026-12-01-2xH200/session28/r2/bench-sh/records
PLOT_OUT ?= docs/charts
PLOT_PYTHON = $(firstword $(foreach p,python3 /usr/bin/python3,$(shell $(p) -c 'import matplotlib' 2>/dev/null && echo $(p))))
plots:
	@if [ -z "$(PLOT_PYTHON)" ]; then \
	  echo "make plots: needs python3 with matplotlib (Debian: apt-get install python3-matplotlib)" >&2; exit 1; fi
	@$(PLOT_PYTHON) scripts/plot --out $(PLOT_OUT) $(PLOT_RECORDS)

# Everything that depends on ARCH: the CUDA objects and the host file that checks the GPU against
# the build. CI compiles these for the second architecture (make ARCH=sm_100a BUILD=build/sm100
# cuda-objs): the rest of the host code is the same for both.
cuda-objs: check-deps
	@test "$(WITH_CUDA)" = 1 || { echo "the CUDA backend is off (no nvcc/nccl, or NO_CUDA=1)"; exit 1; }
	@$(MAKE) --no-print-directory $(CU_OBJS) $(BUILD)/src/gpu/device.o

ptx sass: check-deps
	@test "$(WITH_CUDA)" = 1 || { echo "the CUDA backend is off (no nvcc/nccl, or NO_CUDA=1)"; exit 1; }
	@mkdir -p $(BUILD)/$@; for f in $(CU_SRCS); do \
	  if [ $@ = ptx ]; then $(NVCC) $(NVCCFLAGS) -ptx $$f -o $(BUILD)/ptx/$$(basename $$f .cu).ptx; \
	  else $(NVCC) $(NVCCFLAGS) -cubin $$f -o $(BUILD)/sass/$$(basename $$f .cu).cubin && \
	       cuobjdump -sass $(BUILD)/sass/$$(basename $$f .cu).cubin > $(BUILD)/sass/$$(basename $$f .cu).sass; fi; done
	@echo "written to $(BUILD)/$@/"

clean:
	rm -rf build mokc

help:
	@echo "targets: all (default) deps run test asan fuzz data plots ptx sass cuda-objs clean"
	@echo "options: NO_CUDA=0|1  ARCH=sm_90a|sm_100a  SAN=0|1  CPU_ARCH=native|<gcc -march>  T=<test filter>  FUZZ_SECONDS=<s>"

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
