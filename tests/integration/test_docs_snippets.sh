#!/usr/bin/env bash
# tests/integration/test_docs_snippets.sh — config snippets in the docs stay
# valid: every ```lua block marked `<!-- test: check -->` (the line before its
# fence) in docs/*.md and examples/*/README.md passes the real `sluice check`.
# Variables a snippet reads with env "NAME" get a dummy value; paths are
# relative to a temp dir, as a config's are to its folder.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/examples_lib.sh

python3 - "$ex_tmp" docs/*.md examples/*/README.md <<'PY' >"$ex_tmp/list"
import re, sys
out = sys.argv[1]
n = 0
for doc in sys.argv[2:]:
    lines = open(doc).read().split("\n")
    for i, line in enumerate(lines):
        if line.strip() != "<!-- test: check -->":
            continue
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j >= len(lines) or not lines[j].startswith("```lua"):
            sys.exit("FAIL: %s:%d: <!-- test: check --> not followed by a ```lua block" % (doc, i + 1))
        k = j + 1
        while k < len(lines) and not lines[k].startswith("```"):
            k += 1
        n += 1
        path = "%s/snippet%d.lua" % (out, n)
        open(path, "w").write("\n".join(lines[j + 1:k]) + "\n")
        print("%s %s:%d" % (path, doc, j + 2))
PY
n=0
while read -r file where; do
  vars=()
  for v in $(grep -o 'env *(\?"[A-Z_][A-Z0-9_]*"' "$file" | grep -o '[A-Z_][A-Z0-9_]*' | sort -u); do
    vars+=("$v=dummy")
  done
  out=$(env "${vars[@]}" "$ex_bin" check "$file" 2>&1) ||
    fail "the config snippet at $where does not pass sluice check:
$(sed "s|$file|$where (snippet)|" <<<"$out")"
  n=$((n + 1))
done <"$ex_tmp/list"
((n >= 3)) || fail "only $n snippets are marked <!-- test: check -->"
echo "ok: $n marked config snippets in the docs pass sluice check"
