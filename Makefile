# kernelbot: plain GNU make, no autotools.
#   make            build/kernelbot (BUILD=dir builds elsewhere, for every goal)
#   make asan       build/asan/kernelbot under AddressSanitizer + UndefinedBehaviorSanitizer
#   make test       every suite (C unit tests, pytest), a line per suite (and per
#                   pytest file) as it ends; ends "N passed, N failed, N skipped"
#   make check      make test, then the include-direction check (mk/include_direction.sh)
#   make test-asan  the same under AddressSanitizer + UndefinedBehaviorSanitizer
#   make fuzz       every libFuzzer target (clang) for FUZZ_SECONDS each (default 30)
#   make fuzz-build the libFuzzer targets only, in build/fuzz
#   make test-gpu   the GPU suites (needs an NVIDIA GPU; says so and exits 0 without one)
#   make demo       the main job on built-in defaults (the bot on the local forge, on
#                   examples/repos/tinymlp; KB_DEMO_REPO= for the operator files)
#   make demo-verify the verifier alone on a correct kernel and a reward hack
#   make bench-eval the verifier's benchmark (GPU figures; CPU otherwise)
#   make bench-corpora CORPORA="--robust-kbench DIR --kernelbench DIR --leaderboard DIR"
#                   external kernels' verdicts beside their published claims
#   make bench-templates the built-in templates vs eager and torch.compile, per family and size
#   make bench-search the LLM search: bot overhead per candidate, candidates per GPU-hour vs robust-kbench style
#   make bench-bot  the daemon polling 100 idle repositories: API calls per cycle and memory
#   make gpu-bundle the shared libraries a GPU runner without the build's packages needs
#   make install PREFIX=/usr/local DESTDIR=
#   make uninstall  remove what make install put there
#   make clean      remove build/ (or BUILD)
#   make help       this list
# Missing packages are installed by mk/deps.sh (apt-get) or it prints the command.

PREFIX ?= /usr/local
DESTDIR ?=
CC ?= cc
BUILD ?= build
VERSION := 0.1.0

PKGS := libgit2 libcurl libcjson inih openssl sqlite3 libmicrohttpd libseccomp
# Every make goal that compiles needs the packages; these do not.
NODEPS_GOALS := clean help

WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
	-Wno-unused-parameter -Wformat=2 -Wno-format-nonliteral
BASE_CFLAGS := -std=c11 -g $(WARN) -Ibot -I. -Iverifier/include \
	-DKB_VERSION='"$(VERSION)"' -D_GNU_SOURCE -MMD -MP
OPT ?= -O2
SAN_FLAGS = -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
	$(SAN_FLOAT_CAST)
# gcc's -fsanitize=undefined leaves out float-cast-overflow (a JSON number too
# big for an int); added where the compiler has it, probed once, when needed
SAN_FLOAT_CAST = $(eval SAN_FLOAT_CAST := $(shell $(CC) -fsanitize=float-cast-overflow \
	-x c -c /dev/null -o /dev/null 2>/dev/null && \
	echo -fsanitize=float-cast-overflow -fno-sanitize-recover=float-cast-overflow))$(SAN_FLOAT_CAST)

ifeq ($(filter $(NODEPS_GOALS),$(MAKECMDGOALS)),)
ifneq ($(MAKECMDGOALS),)
DEPS_PROFILE := $(if $(filter test test-asan test-gpu asan check,$(MAKECMDGOALS)),test,$(if $(filter demo demo-verify bench%,$(MAKECMDGOALS)),demo,$(if $(filter fuzz fuzz-build,$(MAKECMDGOALS)),fuzz,build)))
else
DEPS_PROFILE := build
endif
# Generated once per profile: runs mk/deps.sh, then records pkg-config's flags.
-include $(BUILD)/deps-$(DEPS_PROFILE).mk
endif

$(BUILD)/deps-%.mk: mk/deps.sh
	@mkdir -p $(BUILD)
	@sh mk/deps.sh $*
	@pkg-config --exists $(PKGS) || { echo "pkg-config cannot find: $(PKGS)" >&2; rm -f $@.tmp; exit 2; }
	@{ echo "PKG_CFLAGS := $$(pkg-config --cflags $(PKGS))"; \
	   echo "PKG_LIBS := $$(pkg-config --libs $(PKGS))"; } > $@.tmp && mv $@.tmp $@

# Sources: every .c under bot/, verifier/ and bench/ is part of the library
# except the program's entry point and the micro-benchmark tools (programs
# of their own, built by bench/templates/micro/run.sh); tests link against
# the library.
LIB_SRCS := $(sort $(shell find bot verifier bench -name '*.c' ! -path 'bot/main.c' \
	      ! -path 'bench/templates/micro/*' 2>/dev/null))
MAIN_SRC := bot/main.c
TEST_SRCS := $(sort $(wildcard tests/unit/test_*.c))
TEST_HELPER_SRCS := $(sort $(wildcard tests/unit/helpers/*.c))
# libFuzzer targets (tests/fuzz/README.md): one fuzz_NAME.c each, plus their helpers
FUZZ_SRCS := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_NAMES := $(patsubst tests/fuzz/fuzz_%.c,%,$(FUZZ_SRCS))
FUZZ_COMMON_SRCS := tests/fuzz/common.c
LIBS = $(PKG_LIBS) -lm -lpthread

define objs
$(patsubst %.c,$(1)/obj/%.o,$(2))
endef

CFLAGS_REL = $(BASE_CFLAGS) $(OPT) $(PKG_CFLAGS) $(CFLAGS)
CFLAGS_SAN = $(BASE_CFLAGS) $(SAN_FLAGS) $(PKG_CFLAGS) $(CFLAGS)

REL := $(BUILD)
SAN := $(BUILD)/asan

.SECONDARY:
.PHONY: all asan test test-asan test-gpu demo demo-verify bench-bot install uninstall clean help check bench-eval bench-corpora gpu-bundle bench-templates fuzz fuzz-build
all: $(REL)/kernelbot $(REL)/include/dlpack/dlpack.h

# kernels include <dlpack/dlpack.h>: keep a copy beside the binary so a build
# carried to a GPU runner without the Debian package still compiles them
DLPACK_H := $(firstword $(wildcard /usr/include/dlpack/dlpack.h /usr/local/include/dlpack/dlpack.h))
$(REL)/include/dlpack/dlpack.h: $(DLPACK_H)
	@mkdir -p $(dir $@)
	cp $< $@

# --- release build ---
$(REL)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_REL) -c $< -o $@
$(REL)/libkernelbot.a: $(call objs,$(REL),$(LIB_SRCS))
	@rm -f $@
	ar rcs $@ $^
$(REL)/kernelbot: $(call objs,$(REL),$(MAIN_SRC)) $(REL)/libkernelbot.a
	$(CC) $(CFLAGS_REL) -o $@ $^ $(LIBS) $(LDFLAGS)
$(REL)/tests/%: $(REL)/obj/tests/unit/%.o $(call objs,$(REL),$(TEST_HELPER_SRCS)) $(REL)/libkernelbot.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_REL) -o $@ $(filter-out %.a,$^) $(filter %.a,$^) $(LIBS) -lcmocka $(LDFLAGS)

# --- sanitizer build ---
$(SAN)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_SAN) -c $< -o $@
$(SAN)/libkernelbot.a: $(call objs,$(SAN),$(LIB_SRCS))
	@rm -f $@
	ar rcs $@ $^
$(SAN)/kernelbot: $(call objs,$(SAN),$(MAIN_SRC)) $(SAN)/libkernelbot.a
	$(CC) $(CFLAGS_SAN) -o $@ $^ $(LIBS) $(LDFLAGS)
$(SAN)/tests/%: $(SAN)/obj/tests/unit/%.o $(call objs,$(SAN),$(TEST_HELPER_SRCS)) $(SAN)/libkernelbot.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_SAN) -o $@ $(filter-out %.a,$^) $(filter %.a,$^) $(LIBS) -lcmocka $(LDFLAGS)

TEST_BINS := $(patsubst tests/unit/%.c,$(REL)/tests/%,$(TEST_SRCS))
SAN_TEST_BINS := $(patsubst tests/unit/%.c,$(SAN)/tests/%,$(TEST_SRCS))

# the fuzz targets' corpus and regression inputs replayed by an ordinary unit
# test (test_fuzz_regressions), so they run in make test and make test-asan
$(REL)/tests/test_fuzz_regressions: $(call objs,$(REL),$(FUZZ_SRCS) $(FUZZ_COMMON_SRCS))
$(SAN)/tests/test_fuzz_regressions: $(call objs,$(SAN),$(FUZZ_SRCS) $(FUZZ_COMMON_SRCS))

# --- fuzzing: clang's libFuzzer with ASan + UBSan; not part of make test ---
FUZZ_CC ?= clang
FUZZ_SECONDS ?= 30
FUZZ_JOBS ?= $(shell nproc 2>/dev/null || echo 1)
FUZZ := $(BUILD)/fuzz
# clang (not gcc) warns on libseccomp's SCMP_A0(op, datum), which leaves a field
# of its struct to the default: that one warning is off in this build
FUZZ_FLAGS := -O1 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined \
	-fno-sanitize-recover=undefined -Wno-missing-field-initializers -DKB_LIBFUZZER
CFLAGS_FUZZ = $(BASE_CFLAGS) $(FUZZ_FLAGS) $(PKG_CFLAGS) $(CFLAGS)
FUZZ_BINS := $(patsubst %,$(FUZZ)/fuzz_%,$(FUZZ_NAMES))

$(FUZZ)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(CFLAGS_FUZZ) -c $< -o $@
$(FUZZ)/libkernelbot.a: $(call objs,$(FUZZ),$(LIB_SRCS))
	@rm -f $@
	ar rcs $@ $^
$(FUZZ)/fuzz_%: $(FUZZ)/obj/tests/fuzz/fuzz_%.o $(call objs,$(FUZZ),$(FUZZ_COMMON_SRCS)) $(FUZZ)/libkernelbot.a
	$(FUZZ_CC) $(CFLAGS_FUZZ) -fsanitize=fuzzer -o $@ $^ $(LIBS) $(LDFLAGS)

fuzz-build: $(FUZZ_BINS)

# each target FUZZ_SECONDS on its seeds and regression inputs, FUZZ_JOBS at a
# time; ends with a summary and fails when any target crashed
fuzz: fuzz-build
	@FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_JOBS=$(FUZZ_JOBS) sh tests/fuzz/run.sh $(FUZZ) $(FUZZ_NAMES)

asan: $(SAN)/kernelbot

test: all $(TEST_BINS)
	@KB_BUILD=$(REL) sh tests/run.sh

# the include direction of ARCHITECTURE.md (mk/include_direction.sh) after the suites
check: test
	@sh mk/include_direction.sh

test-asan: $(SAN)/kernelbot $(SAN_TEST_BINS)
	@KB_BUILD=$(SAN) KB_SANITIZE=1 \
	 ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=23 \
	 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	 sh tests/run.sh

test-gpu: all
	@KB_BUILD=$(REL) sh tests/run_gpu.sh

# the verifier's benchmark: seconds per candidate, timing spread, hacks
bench-eval: all
	@KB_BUILD=$(REL) sh bench/eval/run.sh

# external corpora (robust-kbench, KernelBench, its leaderboard) through the
# verifier: CORPORA="--robust-kbench DIR --kernelbench DIR --leaderboard DIR"
bench-corpora: all
	@KB_BUILD=$(REL) sh bench/corpora/run.sh $(CORPORA)

# the built-in templates (kernelbot run) against torch eager and torch.compile:
# three families at three sizes, roofline shares, the issue-4 targets
bench-templates: all
	@KB_BUILD=$(REL) sh bench/templates/run.sh

# the LLM search with the LLM simulator: the bot's own overhead per candidate
# and candidates per GPU-hour against a robust-kbench-style pipeline (fresh
# process + torch extension per candidate); GPU figures, a small CPU run otherwise.
# BENCH_SEARCH="--latency-ms 20000,2000": calls in flight against the serial search
.PHONY: bench-search
bench-search: all
	@KB_BUILD=$(REL) sh bench/search/run.sh $(BENCH_SEARCH)

# what a GPU runner without the build's packages needs, in $(REL): the
# shared libraries kernelbot links (all but glibc's and gcc's) in gpu-libs/
# the daemon polling 100 idle repositories against the GitHub simulator:
# API calls per cycle (target: one conditional request each, all 304) and memory
bench-bot: all
	@python3 bench/bot/poll_bench.py --kernelbot $(REL)/kernelbot

gpu-bundle: all
	@sh tests/gpu/bundle.sh $(REL)

# the main job: the bot on the local forge, built-in proposer, GPU if present
demo: all
	@KB_BUILD=$(REL) KB_DEMO_REPO=$${KB_DEMO_REPO-tinymlp} sh examples/demo-bot.sh

# the verifier alone: a correct kernel, a reward hack, a speedup table
demo-verify: all
	@KB_BUILD=$(REL) sh examples/demo-verify.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/kernelbot
	install -m 0755 $(REL)/kernelbot $(DESTDIR)$(PREFIX)/bin/kernelbot
	install -m 0644 config.ini $(DESTDIR)$(PREFIX)/share/kernelbot/config.ini
	for d in verifier/harness bot/templates/cuda bot/templates/cpu bot/search/prompts; do \
		if [ -d $$d ]; then install -d $(DESTDIR)$(PREFIX)/share/kernelbot/$$d && \
			cp -R $$d/. $(DESTDIR)$(PREFIX)/share/kernelbot/$$d/; fi; done
	install -d $(DESTDIR)$(PREFIX)/share/kernelbot/verifier/include/dlpack
	cp -R verifier/include/. $(DESTDIR)$(PREFIX)/share/kernelbot/verifier/include/
	cp $(REL)/include/dlpack/dlpack.h $(DESTDIR)$(PREFIX)/share/kernelbot/verifier/include/dlpack/

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/kernelbot
	rm -rf $(DESTDIR)$(PREFIX)/share/kernelbot

clean:
	rm -rf $(BUILD)

help:
	@sed -n '2,/^# Missing/p' Makefile | sed '$$d' | sed 's/^# \{0,1\}//'

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
