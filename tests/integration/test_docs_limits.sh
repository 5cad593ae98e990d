#!/usr/bin/env bash
# tests/integration/test_docs_limits.sh — docs/limits.md cannot drift from
# the code. For every row of its table:
#  - each `FILE` `NAME` in "in the code" is a #define in FILE whose value
#    (evaluated, other defines resolved) is the row's limit (for a range
#    "1 – 128 of …", its upper end);
#  - the first `block.key` in "change it with" is a key `sluice check --keys`
#    prints, and its default is the limit (or the "default N" the row names;
#    "unlimited" for 0); a range "(A – B)" or "(at least A)" beside it, or a
#    range as the limit, is the key's bounds in the key tables (server/config*.c, connectors/*.c);
#  - a few limits that are literals in the code, not named constants, are
#    found with a pattern below;
# and every row is checked by at least one of these. Sizes are in bytes
# (KiB, MiB, GiB), times in milliseconds (ms, s, min, h).
# Last, a pattern over the 1,000-combination limit makes `sluice check` fail
# with FILE:LINE and the count, as limits.md says.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/examples_lib.sh

"$ex_bin" check --keys >"$ex_tmp/keys.md"
python3 - docs/limits.md "$ex_tmp/keys.md" <<'PY'
import os, re, sys
doc, keysmd = sys.argv[1], sys.argv[2]
problems = []


# Limits that are literals in the code: (start of the "what" cell, file, regex, value of group 1).
LITERALS = [
    ("the request line and all headers", "http/http.c",
     r"MHD_OPTION_CONNECTION_MEMORY_LIMIT,\s*\(size_t\)\((\d+) << 10\)", lambda v: v * 1024),
    ("a request path", "http/http.c",
     r"#define SL_HTTP_PATH_MAX (\d+)", lambda v: v - 1),
    ("clients the rate limiter tracks", "core/base/ratelimit.c",
     r"max_clients \? max_clients : (\d+)", lambda v: v),
    ("an idle or stalled connection", "http/http.c",
     r"idle_timeout_s = (\d+);", lambda v: v * 1000),
    ("a request body arriving", "http/http.c",
     r"request_timeout_s = (\d+);", lambda v: v * 1000),
]

UNITS = {None: 1, "B": 1, "bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30,
         "ms": 1, "s": 1000, "min": 60000, "h": 3600000, "d": 86400000}
NUM = r"(\d[\d,]*(?:\.\d+)?(?:e\d+)?)\s*(KiB|MiB|GiB|bytes|B|ms|min|s|h|d)?(?![\w])"

def qty(m):
    return float(m.group(1).replace(",", "")) * UNITS[m.group(2)]

def first(text):
    m = re.search(NUM, text)
    return qty(m) if m else None

def rng(text):
    m = re.search(NUM + r"\s*[–-]\s*" + NUM, text)
    if not m:
        return None
    a = re.match(NUM, m.group(0))
    b = re.search(NUM + r"$", m.group(0))
    return qty(a), qty(b)

# ---- #defines ---------------------------------------------------------------
defs_cache = {}
def defines(path):
    if path not in defs_cache:
        d = {}
        text = re.sub(r"\\\n", " ", open(path).read())
        for m in re.finditer(r"^#define\s+(\w+)\s+(.+?)\s*(?:/\*.*)?$", text, re.M):
            d[m.group(1)] = m.group(2)
        defs_cache[path] = d
    return defs_cache[path]

def all_defines():
    out = {}
    for base in ("core", "connectors", "rules", "http", "server", "agent", "cli", "client"):
        for root, _, files in os.walk(base):
            for f in files:
                if f.endswith((".c", ".h")):
                    out.update(defines(os.path.join(root, f)))
    return out

ALL = None
def evaluate(expr, depth=0):
    global ALL
    if depth > 10:
        raise ValueError("defines nest too deep")
    e = re.sub(r"\((?:size_t|uint32_t|uint64_t|int64_t|int|unsigned|long)\)", "", expr)
    e = re.sub(r"(\d)(?:ull|ULL|ll|LL|u|U|l|L)\b", r"\1", e)
    e = e.replace("UINT32_MAX", "4294967295").replace("INT64_MAX", str(2**63 - 1))
    def sub(m):
        global ALL
        if ALL is None:
            ALL = all_defines()
        if m.group(0) not in ALL:
            raise ValueError("unknown name %s" % m.group(0))
        return "(%s)" % evaluate(ALL[m.group(0)], depth + 1)
    e = re.sub(r"\b[A-Za-z_]\w*\b", sub, e)
    return eval(e, {"__builtins__": {}})

# ---- keys -------------------------------------------------------------------
keys, block = {}, None
for line in open(keysmd):
    m = re.match(r"^### (\S+)", line)
    if m:
        block = m.group(1)
        continue
    m = re.match(r"^\| `([a-z_]+)` \| [^|]* \| ([^|]*) \|", line)
    if m and block:
        keys["%s.%s" % (block, m.group(1))] = m.group(2).strip().strip('"')
blocks = {k.rsplit(".", 1)[0] for k in keys}
# The key tables: the server's own blocks (server/config*.c) and each
# connector's (connectors/*.c).
import glob
config_c = "".join(open(f).read() for f in sorted(glob.glob("server/config*.c") + glob.glob("connectors/*.c")))

def bounds(key):
    name = key.rsplit(".", 1)[1]
    out = []
    for m in re.finditer(r'\{"%s",\s*(?:SL_KEY|K)_\w+,\s*(?:SL_CONF_)?FIELD\([^)]*\),\s*([^,]+),\s*([^,]+),' % re.escape(name), config_c):
        out.append((evaluate(m.group(1)), evaluate(m.group(2))))
    return out

def near(a, b):
    return a is not None and b is not None and abs(a - b) <= 1

# ---- the table --------------------------------------------------------------
rows = []
for n, line in enumerate(open(doc), 1):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) == 6 and line.startswith("|") and cells[0] not in ("kind", "---"):
        rows.append((n, cells))
if len(rows) < 40:
    problems.append("docs/limits.md: only %d rows found in the table" % len(rows))

checked_total = 0
for n, (kind, what, limit, change, past, code) in rows:
    where = "docs/limits.md:%d (%s)" % (n, what)
    r = rng(limit)
    value = r[1] if r else first(limit)
    checks = 0
    # 1. defines
    for f, name in re.findall(r"`([\w/]+\.[ch])`\s*`([A-Z_][A-Z0-9_]*)`", code):
        if not os.path.exists(f):
            problems.append("%s: %s does not exist" % (where, f))
            continue
        d = defines(f)
        if name not in d:
            problems.append("%s: %s has no #define %s" % (where, f, name))
            continue
        try:
            v = evaluate(d[name])
        except Exception as e:
            problems.append("%s: cannot evaluate %s (%s): %s" % (where, name, d[name], e))
            continue
        if value is None or abs(v - value) > 1e-9 * max(1, abs(v)):
            problems.append("%s: says %s, %s %s is %s" % (where, limit, f, name, d[name]))
        checks += 1
    for f in re.findall(r"`([\w/]+\.[ch])`", code):
        if not os.path.exists(f):
            problems.append("%s: %s does not exist" % (where, f))
    # 2. the first config key
    refs = [k for k in re.findall(r"`([a-z_]+(?:\.[a-z_]+)+)`", change) if k.rsplit(".", 1)[0] in blocks]
    if refs:
        key = refs[0]
        if key not in keys:
            problems.append("%s: sluice check --keys has no key %s" % (where, key))
        else:
            dflt = keys[key]
            m = re.search(r"default " + NUM, limit) or re.search(r"default " + NUM, change)
            want = qty(m) if m else value
            got = first(dflt)
            if "unlimited" in limit and not m:
                ok = got == 0 or "unlimited" in dflt
            elif got is None:
                ok = dflt.strip("`").lower() in limit.lower()
            else:
                ok = want is not None and abs(got - want) < 1e-9 * max(1, got)
            if not ok:
                problems.append("%s: says %s, the default of %s is %s" % (where, limit, key, dflt))
            b = bounds(key)
            lim_range = r if r and "default" in limit else None
            m2 = re.search(r"\(" + NUM + r"\s*[–-]\s*" + NUM + r"\)", change)
            m3 = re.search(r"\(at least " + NUM + r"\)", change)
            if m2:
                lo, hi = rng(m2.group(0))
            elif lim_range:
                lo, hi = lim_range
            else:
                lo = hi = None
            if lo is not None and not any(near(lo, a) and near(hi, z) for a, z in b):
                problems.append("%s: says %s – %s for %s, server/config.c has %s" % (where, lo, hi, key, b))
            if m3:
                lo = first(m3.group(0)[len("(at least "):])
                if not any(near(lo, a) for a, _ in b):
                    problems.append("%s: says at least %s for %s, server/config.c has %s" % (where, lo, key, b))
            checks += 1
    # 3. literals
    for start, f, rx, conv in LITERALS:
        if what.startswith(start):
            m = re.search(rx, open(f).read())
            if not m:
                problems.append("%s: %s no longer matches /%s/" % (where, f, rx))
            elif conv(int(m.group(1))) != value:
                problems.append("%s: says %s, %s has %s" % (where, limit, f, m.group(0)))
            checks += 1
    if not checks:
        problems.append("%s: nothing checks this row (name a #define, a key or add a literal)" % where)
    checked_total += checks

for start, *_ in LITERALS:
    if not any(what.startswith(start) for _, (_, what, *_r) in rows):
        problems.append("docs/limits.md: no row starts with \"%s\" any more" % start)
if problems:
    print("\n".join("FAIL: " + p for p in problems))
    sys.exit(1)
print("checking: docs/limits.md: %d rows, %d numbers compared with the code" % (len(rows), checked_total))
PY

# The pattern limit, end to end: sluice check names FILE:LINE and the count.
cfg=$ex_tmp/big-pattern.lua
vals=$(seq -s, 0 40)
cat >"$cfg" <<LUA
set "s" { }
rule "r" {
  set = "s",
  match = { a = { $vals }, b = { $vals } },
  target = target.file { path = "out.ndjson" },
}
LUA
if out=$("$ex_bin" check "$cfg" 2>&1); then
  fail "sluice check accepted a pattern of 1,681 combinations: $out"
fi
grep -q "big-pattern.lua:4: rule \"r\": match: the pattern has 1,681 combinations of values, more than EventBridge's limit of 1,000" <<<"$out" ||
  fail "sluice check did not name FILE:LINE and the count: $out"
echo "ok: every number in docs/limits.md matches the code; sluice check refuses a 1,681-combination pattern at FILE:LINE"
