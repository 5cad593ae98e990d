#!/usr/bin/env bash
# tests/integration/test_cli_test.sh — drives the real `sluice test`: the
# shipped examples pass (and pass `sluice check`), and wrong expectations,
# unknown rules and keys, invalid events, Lua errors, transform_batch and
# input templates give the verdicts and messages docs/testing.md promises.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=./bin/sluice
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
check() { echo "checking: $*"; }

# Runs `sluice test CONFIG TESTS`; sets $out (stdout+stderr) and $rc.
run() {
  set +e
  out=$($bin test "$@" 2>&1)
  rc=$?
  set -e
}

# ---- the shipped examples ---------------------------------------------------
n=0
for cfg in examples/*/sluice.lua; do
  dir=$(dirname "$cfg")
  check "sluice check $cfg"
  $bin check "$cfg" >/dev/null || fail "sluice check $cfg"
  [[ -f $dir/tests.lua ]] || fail "$dir has no tests.lua"
  check "sluice test $cfg $dir/tests.lua"
  run "$cfg" "$dir/tests.lua"
  [[ $rc == 0 ]] || fail "the tests of $dir fail (exit $rc): $out"
  grep -q '^[0-9]* passed, 0 failed$' <<<"$out" || fail "no summary for $dir: $out"
  grep -q '^FAIL' <<<"$out" && fail "a FAIL line in $dir: $out"
  n=$((n + 1))
done
((n >= 1)) || fail "no example found under examples/"

# ---- a config with one rule of each kind -------------------------------------
cat >"$tmp/sluice.lua" <<'EOF'
server { lua_instructions = 100000 }
set "in" { schemas = { ["typed"] = { type = "object", required = { "n" } } } }
rule "mark" {
  set = "in",
  match = { data = { n = { { numeric = { ">", 10 } } } } },
  transform = function(e) e.data.vip = true; return e end,
  target = target.file { path = "out/mark.ndjson" },
}
rule "boom" {
  set = "in",
  transform = function(e) return e.data.missing.field end,
  target = target.file { path = "out/boom.ndjson" },
}
rule "spin" {
  set = "in",
  filter = function(e) while true do end end,
  target = target.file { path = "out/spin.ndjson" },
}
rule "sum" {
  set = "in",
  transform_batch = function(events)
    local total = 0
    for _, e in ipairs(events) do total = total + e.data.n end
    return { { specversion = "1.0", id = "sum", source = "/sum", type = "sum",
               data = { total = total, count = #events } } }
  end,
  target = target.file { path = "out/sum.ndjson" },
}
rule "note" {
  set = "in",
  input = { paths = { id = "$.id", n = "$.data.n" }, template = "event <id> has n=<n>" },
  target = target.file { path = "out/note.txt" },
}
rule "data" {
  set = "in",
  input = "$.data",
  target = target.file { path = "out/data.ndjson" },
}
lane "x" { env = "boe" } -- last: the lines above are quoted by the checks
EOF
$bin check "$tmp/sluice.lua" >/dev/null || fail "the fixture config does not pass sluice check"

cat >"$tmp/helpers.lua" <<'EOF'
local function ev(id, n, extra)
  local e = { specversion = "1.0", id = id, source = "/t", type = "t", data = { n = n } }
  for k, v in pairs(extra or {}) do e[k] = v end
  return e
end
EOF

# Writes $tmp/NAME.lua from stdin with the helpers in front, and runs it.
tests() {
  cat "$tmp/helpers.lua" - >"$tmp/$1.lua"
  run "$tmp/sluice.lua" "$tmp/$1.lua"
}

check "passing tests of every kind exit 0"
tests good <<'EOF'
test "subset" { rule = "mark", events = { ev("a", 50), ev("b", 5) }, expect = { { id = "a", data = { vip = true } } } }
test "nothing" { rule = "mark", events = { ev("b", 5) }, expect = {} }
test "json text" { rule = "mark", events = { '{"specversion":"1.0","id":"j","source":"/t","type":"t","data":{"n":11}}' },
                   expect = { { id = "j", sluiceset = "in", sluicepartition = 0, sluiceoffset = 0 } } }
test "offsets" { rule = "mark", events = { ev("a", 1), ev("b", 20) }, expect = { { id = "b", sluiceoffset = 1 } } }
test "error expected" { rule = "boom", events = { ev("a", 1) }, expect_error = "attempt to index" }
test "budget expected" { rule = "spin", events = { ev("a", 1) }, expect_error = "instruction budget" }
test "batch" { rule = "sum", events = { ev("a", 1), ev("b", 2), ev("c", 3) },
               expect = { { id = "sum", data = { total = 6, count = 3 } } } }
test "batch per lane" { rule = "sum", events = { ev("a", 1), ev("b", 2, { lane = "x" }), ev("c", 3, { lane = "x" }) },
                        expect = { { data = { total = 1, count = 1 } }, { data = { total = 5, count = 2 } } } }
test "template" { rule = "note", events = { ev("a", 1), ev("b", 2.5) }, expect = { "event a has n=1", "event b has n=2.5" } }
test "exact" { rule = "data", events = { ev("a", 1, { data = { n = 1, tags = { "x" }, m = sluice.null } }) },
               expect = { { n = 1, tags = { "x" }, m = sluice.null } }, exact = true }
test "numbers" { rule = "data", events = { ev("a", 1) }, expect = { { n = 1.0 } } }
test "schema refusal expected" { rule = "mark", events = { ev("a", 50, { type = "typed", data = { m = 1 } }) },
                                 expect_error = "SchemaViolation" }
EOF
[[ $rc == 0 ]] || fail "good tests exit $rc: $out"
grep -q '^12 passed, 0 failed$' <<<"$out" || fail "good tests summary: $out"
for name in subset nothing "json text" offsets "error expected" "budget expected" batch \
    "batch per lane" template exact numbers "schema refusal expected"; do
  grep -qx "ok   $name" <<<"$out" || fail "no ok line for \"$name\": $out"
done

check "a wrong expectation fails with the payload and path"
tests wrong <<'EOF'
test "ok one" { rule = "mark", events = { ev("a", 50) }, expect = { { data = { vip = true } } } }
test "vip" { rule = "mark", events = { ev("a", 50) }, expect = { { data = { vip = false } } } }
test "missing" { rule = "mark", events = { ev("a", 50) }, expect = { { data = { gold = true } } } }
test "count" { rule = "mark", events = { ev("a", 50), ev("b", 60) }, expect = { { id = "a" } } }
test "extra" { rule = "mark", events = { ev("a", 50) }, expect = {} }
test "array" { rule = "data", events = { ev("a", 1, { data = { tags = { "x", "y" } } }) }, expect = { { tags = { "x" } } } }
test "float" { rule = "data", events = { ev("a", 1) }, expect = { { n = 1.0 } }, exact = true }
test "exact extra" { rule = "data", events = { ev("a", 1, { data = { n = 1, m = 2 } }) }, expect = { { n = 1 } }, exact = true }
test "text" { rule = "note", events = { ev("a", 1) }, expect = { "event a has n=2" } }
EOF
[[ $rc == 1 ]] || fail "a wrong expectation exits $rc, want 1: $out"
grep -qx 'ok   ok one' <<<"$out" || fail "the passing test of the file: $out"
grep -qx 'FAIL vip: \[1\]\.data\.vip: expected false, got true' <<<"$out" || fail "vip line: $out"
grep -q '^FAIL missing: \[1\]\.data\.gold: expected true, got nothing' <<<"$out" || fail "missing: $out"
grep -q '^FAIL count: expected 1 payload, got 2' <<<"$out" || fail "count: $out"
grep -q '^FAIL extra: expected nothing, got 1 payload' <<<"$out" || fail "extra: $out"
grep -q '^FAIL array: \[1\]\.tags: expected 1 element, got 2' <<<"$out" || fail "array: $out"
grep -q '^FAIL float: \[1\]\.n: expected 1.0 (float), got 1 (integer)' <<<"$out" || fail "float: $out"
grep -q '^FAIL exact extra: \[1\]\.m: not expected' <<<"$out" || fail "exact extra: $out"
grep -qx 'FAIL text: \[1\]: expected "event a has n=2", got "event a has n=1" (text)' <<<"$out" \
  || fail "text: $out"
grep -q '^1 passed, 8 failed$' <<<"$out" || fail "summary: $out"

check "Lua errors and budgets fail the test with the rule's message unless expected"
tests errors <<'EOF'
test "lua error" { rule = "boom", events = { ev("a", 1) }, expect = {} }
test "budget" { rule = "spin", events = { ev("a", 1) }, expect = {} }
test "other error" { rule = "boom", events = { ev("a", 1) }, expect_error = "no such text" }
test "no error" { rule = "mark", events = { ev("a", 1) }, expect_error = "anything" }
EOF
[[ $rc == 1 ]] || fail "errors exit $rc: $out"
grep -q '^FAIL lua error: event \[1\] failed: rule "boom": transform: .*sluice.lua:11: attempt to index' \
  <<<"$out" || fail "lua error line: $out"
grep -q '^FAIL budget: event \[1\] failed: rule "spin": filter: .*instruction budget of 100000 exceeded' \
  <<<"$out" || fail "budget line: $out"
grep -q '^FAIL other error: expected an error containing "no such text", but event \[1\] failed with: ' \
  <<<"$out" || fail "other error line: $out"
grep -q '^FAIL no error: expected an error containing "anything", but no event failed' <<<"$out" \
  || fail "no error line: $out"

check "a failed transform_batch call fails its batch"
cat >"$tmp/batchfail.lua" <<'EOF'
test "batch error" {
  rule = "sum",
  events = { { specversion = "1.0", id = "a", source = "/t", type = "t", data = { n = 1 } },
             { specversion = "1.0", id = "b", source = "/t", type = "t", data = { m = 1 } } },
  expect = {},
}
EOF
run "$tmp/sluice.lua" "$tmp/batchfail.lua"
[[ $rc == 1 ]] || fail "batch error exits $rc: $out"
grep -q '^FAIL batch error: events \[1\.\.2\] failed: rule "sum": transform_batch: ' <<<"$out" \
  || fail "batch error line: $out"

check "mistakes in the tests file are reported with FILE:LINE"
cat >"$tmp/mistakes.lua" <<'EOF'
test "fine" { rule = "mark", events = { { specversion = "1.0", id = "a", source = "/t", type = "t" } }, expect = {} }
test "unknown rule" {
  rule = "mrak",
  events = { { specversion = "1.0", id = "a", source = "/t", type = "t" } },
  expect = {},
}
test "unknown key" {
  rule = "mark",
  events = { { specversion = "1.0", id = "a", source = "/t", type = "t" } },
  expcet = {},
}
test "no events" { rule = "mark", expect = {} }
test "invalid event" {
  rule = "mark",
  events = { { id = "a", source = "/t", type = "t" } },
  expect = {},
}
EOF
run "$tmp/sluice.lua" "$tmp/mistakes.lua"
[[ $rc == 1 ]] || fail "mistakes exit $rc: $out"
f=$tmp/mistakes.lua
grep -qx 'ok   fine' <<<"$out" || fail "the good test still runs: $out"
grep -q "^FAIL unknown rule: $f:3: unknown rule \"mrak\" (.*mark" <<<"$out" || fail "unknown rule: $out"
grep -q "^FAIL unknown key: $f:10: unknown key \"expcet\"" <<<"$out" || fail "unknown key: $out"
grep -q "^FAIL no events: $f:12: events is required" <<<"$out" || fail "no events: $out"
grep -q "^FAIL invalid event: $f:15: event \[1\] failed: refused at ingest: MissingAttribute: " \
  <<<"$out" || fail "invalid event: $out"
grep -q '^1 passed, 4 failed$' <<<"$out" || fail "mistakes summary: $out"

check "--verbose prints what the targets received"
run --verbose "$tmp/sluice.lua" "$tmp/good.lua"
[[ $rc == 0 ]] || fail "verbose exit $rc: $out"
grep -q '^     \[1\] event a has n=1$' <<<"$out" || fail "verbose payload: $out"

check "a broken tests file, a broken config, usage errors"
echo 'test "x" {' >"$tmp/syntax.lua"
run "$tmp/sluice.lua" "$tmp/syntax.lua"
[[ $rc == 1 ]] || fail "syntax error exits $rc"
grep -q "syntax.lua:2:" <<<"$out" || fail "syntax error message: $out"
: >"$tmp/empty.lua"
run "$tmp/sluice.lua" "$tmp/empty.lua"
[[ $rc == 1 ]] && grep -q "no tests" <<<"$out" || fail "empty tests file: rc $rc: $out"
printf 'set "in" { }\nrule "r" { set = "in", colour = 1, target = target.file { path = "x" } }\n' \
  >"$tmp/bad.lua"
run "$tmp/bad.lua" "$tmp/good.lua"
[[ $rc == 1 ]] || fail "bad config exits $rc"
grep -q "bad.lua:2: rule \"r\": unknown key \"colour\"" <<<"$out" || fail "bad config: $out"
run "$tmp/sluice.lua" "$tmp/nope.lua"
[[ $rc == 1 ]] && grep -q "nope.lua" <<<"$out" || fail "missing tests file: rc $rc: $out"
run "$tmp/sluice.lua"
[[ $rc == 2 ]] || fail "one argument exits $rc, want 2"
run --frobnicate "$tmp/sluice.lua" "$tmp/good.lua"
[[ $rc == 2 ]] || fail "unknown option exits $rc, want 2"

check "a transform result whose metatable raises or loops fails that event, not the process"
cat >"$tmp/meta.lua" <<'LUA'
set "in" { }
rule "raise" { set = "in", target = target.file { path = "x" },
  transform = function(e) return setmetatable({ {} }, { __len = function() error("boom") end }) end }
rule "spin" { set = "in", target = target.file { path = "x" },
  transform = function(e) return setmetatable({ e }, { __len = function() while true do end end }) end }
LUA
cat >"$tmp/meta_tests.lua" <<'LUA'
test "raise" { rule = "raise", events = { { specversion = "1.0", id = "1", source = "/s", type = "t" } }, expect_error = "boom" }
test "spin" { rule = "spin", events = { { specversion = "1.0", id = "1", source = "/s", type = "t" } }, expect_error = "budget" }
LUA
run "$tmp/meta.lua" "$tmp/meta_tests.lua"
[[ $rc == 0 ]] || fail "hostile transform results: rc $rc: $out"

check "pairs() over an event array visits each key once while the loop clears one"
cat >"$tmp/pairs.lua" <<'LUA'
set "x" { }
rule "r" { set = "x", target = target.file { path = "x" },
  transform = function(e)
    local a = e.data.l
    a[10] = 10; a[20] = 20; a[30] = 30
    local seen, n, big = {}, 0, 0
    for k in pairs(a) do
      if seen[k] then error("key " .. tostring(k) .. " visited twice") end
      seen[k] = true
      n = n + 1
      if k > 3 then big = big + 1; if big == 2 then a[k] = nil end end
    end
    a[10] = nil; a[20] = nil; a[30] = nil
    e.data.count = n
    return e
  end }
LUA
cat >"$tmp/pairs_tests.lua" <<'LUA'
test "once each" { rule = "r",
  events = { { specversion = "1.0", id = "1", source = "/s", type = "t", data = { l = { 1, 2, 3 } } } },
  expect = { { data = { count = 6 } } } }
LUA
run "$tmp/pairs.lua" "$tmp/pairs_tests.lua"
[[ $rc == 0 ]] || fail "pairs over a proxy array: rc $rc: $out"

echo "sluice test: ok"
