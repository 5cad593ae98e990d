#!/usr/bin/env bash
# tests/integration/test_docs_links.sh — the docs hold together: every
# docs/*.md is listed in docs/README.md, and every relative link in README.md,
# docs/*.md, examples/**/README.md and plugins/**/README.md leads to a file
# that exists and, when it names one (`file.md#anchor`), to a heading of that
# file (GitHub's anchor rules: lower case, punctuation dropped, spaces to
# hyphens, "-1" suffixes for repeats). Links to web sites are not followed.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 - <<'PY'
import glob, os, re, sys

problems = []
index = open("docs/README.md").read()
for d in sorted(glob.glob("docs/*.md")):
    name = os.path.basename(d)
    if name != "README.md" and "(%s)" % name not in index and "(%s#" % name not in index:
        problems.append("docs/README.md does not list %s" % name)

def anchors(path):
    out, seen = set(), {}
    in_code = False
    for line in open(path).read().split("\n"):
        if line.startswith("```"):
            in_code = not in_code
            continue
        m = None if in_code else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        text = re.sub(r"<[^>]+>", "", m.group(1))
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else "%s-%d" % (slug, n))
    # explicit anchors: <a name="x"> / <a id="x">
    out |= set(re.findall(r'<a (?:name|id)="([^"]+)"', open(path).read()))
    return out

files = ["README.md"] + sorted(glob.glob("docs/*.md")) + sorted(glob.glob("examples/**/README.md", recursive=True)) \
    + sorted(glob.glob("plugins/**/README.md", recursive=True)) + ["tests/README.md", "bench/README.md"]
n = 0
for f in files:
    if not os.path.exists(f):
        continue
    text = open(f).read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)   # code is not links
    text = re.sub(r"`[^`\n]*`", "", text)
    for m in re.finditer(r"\]\(([^)\s]+)\)", text):
        target = m.group(1)
        if re.match(r"^[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        line = text.count("\n", 0, m.start()) + 1
        full = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
        n += 1
        if not os.path.exists(full):
            problems.append("%s: link to %s: %s does not exist" % (f, target, full))
            continue
        if anchor and full.endswith(".md") and anchor not in anchors(full):
            problems.append("%s: link to %s: %s has no heading #%s" % (f, target, full, anchor))

if problems:
    print("\n".join("FAIL: " + p for p in problems), file=sys.stderr)
    sys.exit(1)
print("ok: %d relative links resolve; docs/README.md lists every document" % n)
PY
