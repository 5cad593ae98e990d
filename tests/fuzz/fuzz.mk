# tests/fuzz/fuzz.mk — fuzzing (included by the Makefile; tests/fuzz/README.md).
#
#   make fuzz                    build every harness with clang + libFuzzer and run each for
#                                FUZZ_SECONDS (default 60); report in build/fuzz/report.md
#   make fuzz FUZZ_ONLY="log"    only the named harnesses
#   make fuzz-build              build the harnesses only
#
# The library is compiled again with clang -fsanitize=fuzzer-no-link,address,undefined
# into build/fuzz/ (never into build/rel or build/san). Each tests/fuzz/fuzz_NAME.c is
# also linked with tests/fuzz/replay.c under the gcc sanitizer build into
# build/san/tests/test_fuzz_NAME, which `make test` runs: it replays the committed
# seeds (tests/fuzz/corpus/NAME/) and regression inputs (tests/fuzz/regress/NAME/).

FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_ONLY    ?=
FZ           := build/fuzz
FUZZ_NAMES   := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BIN     := $(FUZZ_NAMES:%=$(FZ)/fuzz_%)
FUZZ_SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
# The library keeps its warnings but not -Werror: clang warns about other things than
# gcc, and a new clang warning in someone's module must not stop the fuzzers.
FUZZ_CFLAGS  = $(filter-out -Werror -Wno-format-truncation,$(WARN)) -O1 -g -D_GNU_SOURCE -I. $(PKG_CFLAGS) -pthread \
               -MMD -MP $(FUZZ_SANFLAGS) -fsanitize=fuzzer-no-link -DSL_FUZZING
# The same objects as the server's library (generated sources included).
FUZZ_LIB_OBJ = $(patsubst $(B)/%,$(FZ)/obj/%,$(LIB_OBJ))

# clang and libFuzzer are installed (scripts/deps.sh fuzz) only when fuzzing is asked
# for: `make test` builds with gcc alone.
# Order-only, like the Makefile's `deps`: nothing is installed while make parses.
.PHONY: fuzz fuzz-build fuzz-deps
fuzz-deps: deps
	@scripts/deps.sh fuzz >&2
fuzz-build: $(FUZZ_BIN)

$(FZ)/obj/%.o: %.c | fuzz-deps
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c -o $@ $<

# Generated sources (lua/*.lua, the web console) are made by the Makefile's rules in
# $(B)/gen/ and compiled from there.
$(FZ)/obj/gen/%.o: $(B)/gen/%.c | fuzz-deps
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c -o $@ $<

$(FZ)/libsluice-core.a: $(FUZZ_LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(FZ)/fuzz_%: $(FZ)/obj/tests/fuzz/fuzz_%.o $(FZ)/obj/tests/fuzz/fuzzutil.o $(FZ)/libsluice-core.a
	$(FUZZ_CC) -fsanitize=fuzzer,address,undefined -o $@ $^ $(LDLIBS)

# The harnesses themselves are held to -Werror.
$(FZ)/obj/tests/fuzz/%.o: tests/fuzz/%.c | fuzz-deps
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -Werror -c -o $@ $<

# ---- replay in `make test` (gcc, the sanitized unit build) ---------------------------
# Objects in $(B)/fuzzobj/, not under $(B)/tests/: the Makefile's $(B)/tests/% rule
# would otherwise take their .d files for programs to build.
FUZZ_REPLAY_BIN := $(FUZZ_NAMES:%=$(B)/tests/test_fuzz_%)

$(B)/fuzzobj/%.o: tests/fuzz/%.c | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(B)/fuzzobj/replay_%.o: tests/fuzz/replay.c | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DFUZZ_NAME='"$*"' -c -o $@ $<

$(B)/tests/test_fuzz_%: $(B)/fuzzobj/fuzz_%.o $(B)/fuzzobj/replay_%.o $(B)/fuzzobj/fuzzutil.o \
		$(B)/libsluice-core.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(TEST_LIBS)

.PRECIOUS: $(B)/fuzzobj/%.o $(B)/fuzzobj/replay_%.o $(FZ)/obj/tests/fuzz/%.o

# The fuzz build's dependency files (one include for its object tree).
-include $(wildcard $(foreach d,$(LAYERS) gen tests/fuzz,$(FZ)/obj/$(d)/*.d))
