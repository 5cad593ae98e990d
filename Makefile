# sluice — build, test and benchmark. Plain make, no autotools.
#
#   make            build bin/sluice
#   make run        build and start sluice on its embedded default
#   make test       unit tests, then the same tests under ASan+UBSan, then integration
#   make bench      benchmarks with same-run references
#   make soak       the slow fault tests (not part of `make test`)
#   make format     apply .clang-format

CC      ?= cc
PKGS    := libcurl libmicrohttpd jansson rdkafka libzstd lua5.4 cmocka libcrypto
WARN    := -std=c11 -Wall -Wextra -Werror -Wshadow -Wundef -Wwrite-strings \
           -Wstrict-prototypes -Wmissing-prototypes -Wold-style-definition \
           -Wno-format-truncation
OPT     ?= -O2 -g
DEPS_OK := $(shell scripts/deps.sh >&2 && echo ok)
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CFLAGS  += $(WARN) $(OPT) -D_GNU_SOURCE -fvisibility=hidden -I. $(PKG_CFLAGS) -pthread -MMD -MP
LDLIBS  += $(PKG_LIBS) -pthread -lm

ifdef SANITIZE
CFLAGS  += -fsanitize=$(SANITIZE) -fno-sanitize-recover=all -fno-omit-frame-pointer
LDFLAGS += -fsanitize=$(SANITIZE)
B       := build/san
else
B       := build/rel
endif

# Everything in these folders is library code; main.c is the program.
LIB_SRC  := $(filter-out core/main.c,$(wildcard core/*.c connectors/*.c rules/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(B)/%.o) $(B)/gen/lua_embed.o
LUA_SRC  := $(wildcard lua/*.lua)
TEST_SRC := $(wildcard tests/unit/test_*.c)  # testutil.c is linked into each
TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(B)/tests/%)
BENCH_SRC := $(wildcard bench/*_bench.c)
BENCH_BIN := $(BENCH_SRC:bench/%.c=build/rel/bench/%)
# Integration tests: C programs in tests/integration/ that drive bin/sluice.
ITEST_SRC := $(wildcard tests/integration/test_*.c)
ITEST_BIN := $(ITEST_SRC:tests/integration/%.c=build/rel/itests/%)
# Programs the tests start (tests/tools/*.c), e.g. the Kafka mock cluster.
TOOL_SRC := $(wildcard tests/tools/*.c)
TOOL_BIN := $(TOOL_SRC:tests/tools/%.c=build/rel/tools/%)
# Plugins: each folder plugins/NAME/ with C files becomes build/rel/plugins/NAME.so;
# tests/plugins/NAME.c are the test-only ones (plugins/README.md).
PLUGIN_SRC := $(wildcard plugins/*/*.c)
PLUGIN_BIN := $(patsubst plugins/%/,build/rel/plugins/%.so,$(sort $(dir $(PLUGIN_SRC))))
TPLUGIN_SRC := $(wildcard tests/plugins/*.c)
TPLUGIN_BIN := $(TPLUGIN_SRC:tests/plugins/%.c=build/rel/tests/plugins/%.so)

.PRECIOUS: $(B)/tests/%.o
.PHONY: all run test unit itests bench soak format clean
all: bin/sluice $(PLUGIN_BIN)

bin/sluice: $(B)/core/main.o $(B)/libsluice.a
	@mkdir -p bin
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# A plugin is built against the repo's headers only: sluice hands it every
# function it may call, so it does not link libsluice (-z defs proves it) and
# is never sanitized (the program loading it may not be). Order-only: building
# bin/sluice builds the plugins without relinking it when one changes.
bin/sluice: | $(PLUGIN_BIN)
PLUGIN_CFLAGS = $(filter-out -fsanitize=% -fno-sanitize-recover=%,$(CFLAGS)) -fPIC -shared \
                -Wl,-z,defs
$(foreach p,$(PLUGIN_BIN),$(eval $(p): $(wildcard $(p:build/rel/%.so=%)/*.c)))
build/rel/plugins/%.so:
	@mkdir -p $(dir $@)
	$(CC) $(PLUGIN_CFLAGS) -o $@ $(filter %.c,$^)

build/rel/tests/plugins/%.so: tests/plugins/%.c
	@mkdir -p $(dir $@)
	$(CC) $(PLUGIN_CFLAGS) -o $@ $<

$(B)/libsluice.a: $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

# lua/*.lua are compiled into the binary (rules/lua_embed.h declares them).
$(B)/gen/lua_embed.c: $(LUA_SRC) scripts/embed-lua.sh
	@mkdir -p $(dir $@)
	scripts/embed-lua.sh $@ $(LUA_SRC)

$(B)/gen/lua_embed.o: $(B)/gen/lua_embed.c
	$(CC) $(CFLAGS) -c -o $@ $<

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(B)/tests/%: $(B)/tests/%.o $(B)/tests/testutil.o $(B)/libsluice.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(B)/tests/%.o: tests/unit/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/unit -c -o $@ $<

# itest.c is the integration harness (start bin/sluice, HTTP helpers) and
# receiver.c the scriptable HTTP endpoint; both are linked into each. The
# headers the .d files add to $^ are left out of the command line.
build/rel/itests/%: tests/integration/%.c build/rel/itests/itest.o build/rel/itests/receiver.o \
		build/rel/tests/testutil.o build/rel/libsluice.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/unit -Itests/integration -o $@ $(filter-out %.h,$^) $(LDLIBS)

build/rel/itests/itest.o build/rel/itests/receiver.o: build/rel/itests/%.o: tests/integration/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/unit -Itests/integration -c -o $@ $<

build/rel/bench/%: bench/%.c build/rel/libsluice.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

run: bin/sluice
	@echo "sluice: starting on the embedded default (data in ./sluice-data, http://127.0.0.1:8080)"
	@echo "  post an event:  curl -s -H 'Content-Type: application/cloudevents+json' \\"
	@echo "                    -d '{\"specversion\":\"1.0\",\"id\":\"1\",\"source\":\"/me\",\"type\":\"hello\",\"data\":{\"hi\":1}}' \\"
	@echo "                    http://127.0.0.1:8080/v1/sets/demo/events"
	@echo "  read it back:   ./bin/sluice tail demo --from beginning"
	@exec ./bin/sluice serve

unit: $(TEST_BIN)

test:
	@$(MAKE) -s bin/sluice unit itests
	@$(MAKE) -s SANITIZE=address,undefined unit
	@scripts/run-tests.sh build/rel/tests build/san/tests build/rel/itests

itests: $(ITEST_BIN) $(TOOL_BIN) $(PLUGIN_BIN) $(TPLUGIN_BIN)

build/rel/tools/%: tests/tools/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDLIBS)

bench: $(BENCH_BIN) bin/sluice build/rel/tools/kafka_mock
	@for b in $(BENCH_BIN) $(wildcard bench/*_bench.sh); do $$b || exit 1; done

soak: bin/sluice $(TEST_BIN) $(ITEST_BIN)
	@SLUICE_SOAK=1 scripts/run-tests.sh build/rel/tests build/rel/itests

format:
	clang-format -i $(wildcard core/*.[ch] connectors/*.[ch] rules/*.[ch] tests/unit/*.[ch] \
		tests/integration/*.[ch] bench/*.[ch] bench/http/*.[ch])

clean:
	rm -rf build bin

-include $(shell find build -name '*.d' 2>/dev/null)
