# sluice — build, test and benchmark. Plain make, no autotools.
#
#   make            build bin/sluice
#   make run        build and start sluice on its embedded default
#   make test       unit tests, then the same tests under ASan+UBSan, then integration
#   make bench      benchmarks with same-run references
#   make soak       the slow fault tests (not part of `make test`)
#   make format     apply .clang-format
#   make lib        the client library libsluice (build/lib), its pkg-config file and example
#   make install    install the client library: PREFIX=/usr/local, DESTDIR= for staging

CC      ?= cc
# What bin/sluice links; the test programs link TEST_PKGS too.
PKGS      := libcurl libmicrohttpd jansson rdkafka libzstd lua5.4 libcrypto libssl
TEST_PKGS := cmocka
WARN    := -std=c11 -Wall -Wextra -Werror -Wshadow -Wundef -Wwrite-strings \
           -Wstrict-prototypes -Wmissing-prototypes -Wold-style-definition \
           -Wno-format-truncation
OPT     ?= -O2 -g
# pkg-config runs when the first command needs the flags, not while the Makefile
# is parsed: by then the `deps` prerequisite has installed what was missing, and
# `make -n` or `make clean` install nothing. (Each is computed once and kept.)
PKG_CFLAGS = $(eval PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) $(TEST_PKGS) 2>/dev/null))$(PKG_CFLAGS)
PKG_LIBS   = $(eval PKG_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null))$(PKG_LIBS)
TEST_LIBS  = $(eval TEST_LIBS := $(shell pkg-config --libs $(TEST_PKGS) 2>/dev/null))$(TEST_LIBS)
CFLAGS  += $(WARN) $(OPT) -D_GNU_SOURCE -fvisibility=hidden -I. $(PKG_CFLAGS) -pthread -MMD -MP
LDLIBS  += $(PKG_LIBS) -pthread -lm

ifdef SANITIZE
CFLAGS  += -fsanitize=$(SANITIZE) -fno-sanitize-recover=all -fno-omit-frame-pointer
LDFLAGS += -fsanitize=$(SANITIZE)
B       := build/san
else
B       := build/rel
endif

# The floors of ARCHITECTURE.md §2 (docs/architecture.md). Everything in them is
# library code; cli/main.c is the program.
LAYERS   := core/base core/log core/bus rules connectors http kafka server agent cli
LIB_SRC  := $(filter-out cli/main.c,$(foreach d,$(LAYERS),$(wildcard $(d)/*.c)))
LIB_OBJ  := $(LIB_SRC:%.c=$(B)/%.o) $(B)/gen/lua_embed.o $(B)/gen/ui_embed.o
# Files only (NAME.EXT: no subdirectories), no editor backups (NAME~), in a
# stable order.
UI_FILES := $(sort $(filter-out %~,$(wildcard http/ui/*.*)))
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
.PHONY: all run test unit itests bench soak format clean lib install fuzz kafka-mock deps FORCE
all: bin/sluice $(PLUGIN_BIN) lib

# scripts/deps.sh installs what is missing (and costs milliseconds when nothing
# is). Order-only: it never makes anything out of date; every compile waits for it.
deps:
	@scripts/deps.sh >&2

bin/sluice: $(B)/cli/main.o $(B)/libsluice-core.a
	@mkdir -p bin
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# A plugin is built against the repo's headers only: sluice hands it every
# function it may call, so it does not link libsluice-core (-z defs proves it) and
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

$(B)/libsluice-core.a: $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

# lua/*.lua are compiled into the binary (rules/lua_embed.h declares them).
$(B)/gen/lua_embed.c: $(LUA_SRC) scripts/embed-lua.sh
	@mkdir -p $(dir $@)
	scripts/embed-lua.sh $@ $(LUA_SRC)

$(B)/gen/lua_embed.o: $(B)/gen/lua_embed.c
	$(CC) $(CFLAGS) -c -o $@ $<

# http/ui/* (the web console at /ui/) too (http/http_console.c).
# The directory is a prerequisite: adding or deleting a file changes its
# mtime, so a deleted file does not stay embedded.
$(B)/gen/ui_embed.c: $(UI_FILES) http/ui scripts/embed-files.sh
	@mkdir -p $(dir $@)
	scripts/embed-files.sh $@ sl_ui_files $(UI_FILES)

$(B)/gen/ui_embed.o: $(B)/gen/ui_embed.c
	$(CC) $(CFLAGS) -c -o $@ $<

$(B)/%.o: %.c | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(B)/tests/%: $(B)/tests/%.o $(B)/tests/testutil.o $(B)/libsluice-core.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(TEST_LIBS)

$(B)/tests/%.o: tests/unit/%.c | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/unit -c -o $@ $<

# itest.c is the integration harness (start bin/sluice, HTTP helpers) and
# receiver.c the scriptable HTTP endpoint; both are linked into each. The
# headers the .d files add to $^ are left out of the command line.
build/rel/itests/%: tests/integration/%.c build/rel/itests/itest.o build/rel/itests/receiver.o \
		build/rel/tests/testutil.o build/rel/libsluice-core.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/unit -Itests/integration -o $@ $(filter-out %.h,$^) $(LDLIBS) $(TEST_LIBS)

build/rel/itests/itest.o build/rel/itests/receiver.o: build/rel/itests/%.o: tests/integration/%.c | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/unit -Itests/integration -c -o $@ $<

build/rel/bench/%: bench/%.c bench/tsv.c build/rel/libsluice-core.a | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS) $(TEST_LIBS)

# ---- libsluice, the C client library (include/sluice.h, client/) ----------------
# Built from client/ alone, never from core/: an application linking it must not
# get the server's sl_* names. Hidden visibility, so only the functions marked
# SL_CLIENT_API (sl_client_*) are exported; never sanitized, like plugins, since
# the programs linking it may not be.
PREFIX  ?= /usr/local
LIBDIR  ?= $(PREFIX)/lib
INCDIR  ?= $(PREFIX)/include
CLIENT_VERSION := 0.1.0
CLIENT_SRC := $(wildcard client/*.c)
CLIENT_OBJ := $(CLIENT_SRC:%.c=build/lib/obj/%.o)
CLIENT_CFLAGS = $(WARN) $(OPT) -D_GNU_SOURCE -fvisibility=hidden -fPIC -pthread -Iinclude \
                $(shell pkg-config --cflags libcurl) -MMD -MP
CLIENT_LIBS = $(shell pkg-config --libs libcurl) -pthread
CLIENT_LIB := build/lib/libsluice.a build/lib/libsluice.so build/lib/pkgconfig/sluice.pc

lib: $(CLIENT_LIB) build/lib/examples/client

build/lib/obj/client/%.o: client/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CLIENT_CFLAGS) -c -o $@ $<

build/lib/libsluice.a: $(CLIENT_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

# The real file carries the full version, libsluice.so.0 (the soname) is what
# programs load, libsluice.so is what -lsluice finds. -z defs: every symbol
# comes from libcurl, pthread or libc.
build/lib/libsluice.so.$(CLIENT_VERSION): $(CLIENT_OBJ)
	$(CC) -shared -Wl,-soname,libsluice.so.0 -Wl,-z,defs -o $@ $^ $(CLIENT_LIBS)

build/lib/libsluice.so: build/lib/libsluice.so.$(CLIENT_VERSION)
	ln -sf libsluice.so.$(CLIENT_VERSION) build/lib/libsluice.so.0
	ln -sf libsluice.so.$(CLIENT_VERSION) $@

# Regenerated on every make (FORCE) but rewritten only when PREFIX changed it,
# so `make install PREFIX=…` installs a file that names its own prefix.
build/lib/pkgconfig/sluice.pc: client/sluice.pc.in FORCE
	@mkdir -p $(dir $@)
	@sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCDIR@|$(INCDIR)|' \
	     -e 's|@VERSION@|$(CLIENT_VERSION)|' $< >$@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi

# The example, built against the tree's header and static library (the
# pkg-config route is tests/integration/test_client_pkgconfig.sh).
build/lib/examples/client: examples/client/main.c build/lib/libsluice.a include/sluice.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(OPT) -Iinclude -pthread -o $@ $< build/lib/libsluice.a $(CLIENT_LIBS)

install: $(CLIENT_LIB)
	install -d $(DESTDIR)$(INCDIR) $(DESTDIR)$(LIBDIR)/pkgconfig
	install -m 644 include/sluice.h $(DESTDIR)$(INCDIR)/sluice.h
	install -m 644 build/lib/libsluice.a $(DESTDIR)$(LIBDIR)/libsluice.a
	install -m 755 build/lib/libsluice.so.$(CLIENT_VERSION) $(DESTDIR)$(LIBDIR)/
	ln -sf libsluice.so.$(CLIENT_VERSION) $(DESTDIR)$(LIBDIR)/libsluice.so.0
	ln -sf libsluice.so.$(CLIENT_VERSION) $(DESTDIR)$(LIBDIR)/libsluice.so
	install -m 644 build/lib/pkgconfig/sluice.pc $(DESTDIR)$(LIBDIR)/pkgconfig/sluice.pc

# The client test links both the harness (libsluice-core.a) and the client
# library: they share no symbol, the client's being sl_client_* only.
build/rel/itests/test_client: tests/integration/test_client.c build/rel/itests/itest.o \
		build/rel/itests/receiver.o build/rel/tests/testutil.o build/rel/libsluice-core.a \
		build/lib/libsluice.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Iinclude -Itests/unit -Itests/integration -o $@ $(filter-out %.h,$^) \
		$(LDLIBS) $(TEST_LIBS)

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

itests: $(ITEST_BIN) $(TOOL_BIN) $(PLUGIN_BIN) $(TPLUGIN_BIN) lib

build/rel/tools/%: tests/tools/%.c | deps
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LDLIBS)

# The Kafka mock cluster alone (examples/kafka-bridge/README.md runs it).
kafka-mock: build/rel/tools/kafka_mock

# bench/run.sh runs them all and writes bench/results/latest.md and .svg.
bench: $(BENCH_BIN) bin/sluice build/rel/tools/kafka_mock
	@bench/run.sh $(BENCH_BIN) $(wildcard bench/*_bench.sh)

# make soak: every test with SLUICE_SOAK=1 (the long fault loops), then the
# integration suites in VALGRIND_ITESTS again with every server they start under
# valgrind --error-exitcode=1 --leak-check=full (SLUICE_VALGRIND=1, itest.h;
# docs/testing.md says which suites are left out and why: their own unscaled
# waits or latency checks, or Lua loops valgrind makes minutes long). About 18
# minutes on 2 cores; VALGRIND_ITESTS="$(notdir $(ITEST_BIN))" runs them all.
VALGRIND_ITESTS ?= test_server_api test_delivery test_target_http test_target_kafka test_redrive \
                   test_source_webhook test_sandbox_escape test_security test_lanes_reload \
                   test_plugins test_lanes test_logging test_cli_status test_client test_agent \
                   test_faults test_kafka_rdkafka
soak: bin/sluice $(TEST_BIN) itests
	@rc=0; SLUICE_SOAK=1 scripts/run-tests.sh build/rel/tests build/rel/itests || rc=1; \
	rm -rf build/rel/valgrind; mkdir -p build/rel/valgrind; \
	for t in $(VALGRIND_ITESTS); do ln -s ../itests/$$t build/rel/valgrind/$$t; done; \
	echo "soak: under valgrind: $(VALGRIND_ITESTS)"; \
	SLUICE_VALGRIND=1 SLUICE_UNIT_ONLY=1 scripts/run-tests.sh build/rel/valgrind || rc=1; \
	exit $$rc

format:
	clang-format -i $(foreach d,$(LAYERS),$(wildcard $(d)/*.[ch])) $(wildcard tests/unit/*.[ch] \
		tests/integration/*.[ch] bench/*.[ch] bench/http/*.[ch] client/*.[ch] include/*.h \
		examples/client/*.c)

clean:
	rm -rf build bin

# Fuzzing: `make fuzz` (clang + libFuzzer) and the replay of the committed fuzz
# inputs, which runs with the sanitized unit tests.
include tests/fuzz/fuzz.mk
fuzz: fuzz-build
	@FUZZ_SECONDS=$(FUZZ_SECONDS) tests/fuzz/run-fuzz.sh $(or $(FUZZ_ONLY),$(FUZZ_NAMES))
ifdef SANITIZE
unit: $(FUZZ_REPLAY_BIN)
endif

# One include per build directory: the .d files the compiler wrote beside the objects.
-include $(wildcard $(foreach d,$(LAYERS) gen tests fuzzobj,$(B)/$(d)/*.d) $(foreach d,itests tools bench plugins tests/plugins,build/rel/$(d)/*.d) \
                    build/lib/obj/client/*.d)
