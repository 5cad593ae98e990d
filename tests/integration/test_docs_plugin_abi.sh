#!/usr/bin/env bash
# tests/integration/test_docs_plugin_abi.sh — the example plugin of
# docs/plugin-abi.md works as written: the C block marked
# `<!-- test: file tee.c -->` is compiled with the build command the page
# gives (plus the project's warnings as errors), exports exactly the two
# symbols, and loaded by the real bin/sluice through plugin_dir: `sluice
# check` reports its check() and key-table mistakes at the block's line, and
# a served rule delivers through it (lines with the prefix in the file), with
# the target healthy in GET /v1/rules.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/examples_lib.sh

doc=docs/plugin-abi.md
w=$ex_tmp/p
mkdir -p "$w/plugins"
python3 - "$doc" "$w/tee.c" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"<!-- test: file tee\.c -->\s*\n```c\n(.*?)\n```", text, re.S)
if not m:
    sys.exit("FAIL: %s has no C block marked <!-- test: file tee.c -->" % sys.argv[1])
open(sys.argv[2], "w").write(m.group(1) + "\n")
PY

step "the page's build command compiles tee.c (with -Wall -Wextra -Werror)"
grep -q -- '-fPIC -shared -Wl,-z,defs -o tee.so tee.c' "$doc" || fail "the build command changed in $doc"
# shellcheck disable=SC2046
cc -std=c11 -O2 -D_GNU_SOURCE -fvisibility=hidden -I. $(pkg-config --cflags libcurl \
  libmicrohttpd jansson rdkafka libzstd lua5.4 libcrypto) -pthread \
  -Wall -Wextra -Werror -Wshadow -Wwrite-strings -Wstrict-prototypes -Wmissing-prototypes \
  -fPIC -shared -Wl,-z,defs -o "$w/plugins/tee.so" "$w/tee.c" 2>"$w/cc.log" ||
  fail "tee.c does not compile: $(cat "$w/cc.log")"
syms=$(nm -D --defined-only "$w/plugins/tee.so" | awk '{print $3}' | sort | tr '\n' ' ')
[[ $syms == "sluice_plugin_abi sluice_plugin_register " ]] || fail "tee.so exports: $syms"

step "sluice check reports check()'s and the key table's mistakes"
cat >"$w/bad.lua" <<'EOF'
server { plugin_dir = "plugins" }
set "in" { partitions = 1 }
rule "a" { set = "in", target = target.tee { path = "relative.txt" } }
rule "b" { set = "in", target = target.tee { path = "/tmp/x", colour = "red" } }
rule "c" { set = "in", target = target.tee { prefix = "no path" } }
EOF
set +e
out=$("$ex_bin" check "$w/bad.lua" 2>&1)
rc=$?
set -e
[[ $rc == 1 ]] || fail "sluice check of bad.lua exits $rc: $out"
grep -q 'bad.lua:3: .*path "relative.txt" must be absolute' <<<"$out" || fail "check(): $out"
grep -q 'bad.lua:4: .*unknown key "colour"' <<<"$out" || fail "unknown key: $out"
grep -q 'bad.lua:5: .*path' <<<"$out" || fail "missing required key: $out"

step "a rule delivers through target.tee"
cat >"$w/sluice.lua" <<EOF
server { plugin_dir = "plugins" }
set "in" { partitions = 1 }
rule "copy" { set = "in", target = target.tee { path = "$w/tee.txt", prefix = "copy: " } }
EOF
out=$("$ex_bin" check "$w/sluice.lua" 2>&1) || fail "sluice check: $out"
port=$(ex_free_port)
ex_serve "$w" "$port"
for id in a b; do
  code=$(curl -s -o /dev/null -w '%{http_code}' -H 'Content-Type: application/cloudevents+json' \
    -d "{\"specversion\":\"1.0\",\"id\":\"$id\",\"source\":\"/t\",\"type\":\"t\"}" \
    "http://127.0.0.1:$port/v1/sets/in/events")
  [[ $code == 200 ]] || fail "publish $id: $code"
done
ex_wait 10 "two lines in tee.txt" ex_lines "$w/tee.txt" 2
grep -q '^copy: {"specversion":"1.0","id":"a",' "$w/tee.txt" || fail "tee.txt: $(cat "$w/tee.txt")"
grep -q '^copy: {"specversion":"1.0","id":"b",' "$w/tee.txt" || fail "tee.txt: $(cat "$w/tee.txt")"
curl -s "http://127.0.0.1:$port/v1/rules" | grep '"health":\[{"target":"tee","healthy":true}\]' >/dev/null ||
  fail "GET /v1/rules: $(curl -s "http://127.0.0.1:$port/v1/rules")"
ex_stop "$ex_server_pid"
echo "ok: docs/plugin-abi.md's target.tee builds, is checked, loads and delivers"
