#!/bin/sh
# The key reference in docs/config.md is the output of `sluice check --keys`
# (the checker's own tables): fail when they drift apart. Then (below) the
# declarations table names every block kind and the connector guides mention
# every key of their kind.
set -eu
cd "$(dirname "$0")/../.."
want=$(mktemp)
got=$(mktemp)
trap 'rm -f "$want" "$got"' EXIT
bin/sluice check --keys | sed "1{/^$/d}" > "$want"
sed -n '/<!-- keys:begin -->/,/<!-- keys:end -->/p' docs/config.md | sed '1d;$d' > "$got"
if ! diff -u "$got" "$want"; then
    echo "FAIL: docs/config.md's key reference differs from 'sluice check --keys' (paste its output between the markers)"
    exit 1
fi
echo "ok: docs/config.md key reference matches sluice check --keys"

# Beyond the generated reference: the declarations table at the top of
# docs/config.md names every block kind, and the guide of each source and
# target kind (docs/sources.md, docs/targets.md) mentions each of its keys
# (`key` or `key = …`; the keys every source takes are in sources.md's
# "Keys every source takes"), so a new key cannot stay documented in the
# generated table only.
bin/sluice check --keys | python3 -c '
import re, sys
keys = sys.stdin.read()
cfg = open("docs/config.md").read()
decl = cfg[:cfg.index("## ")]  # the text before the first section: the declarations table
problems = []
for sec in re.split(r"^### ", keys, flags=re.M)[1:]:
    title = sec.split("\n")[0]
    kind = re.match(r"([a-z]+(?:\.[a-z_]+)?)", title).group(1)
    if kind in ("rule.retry",) or title.startswith("server."):
        continue  # sub-tables of a block
    if "`" + kind + " " not in decl and "`" + kind + "`" not in decl and "`" + kind + "." not in decl:
        problems.append("docs/config.md: the declarations table does not name %s" % kind)
    m = re.match(r"(target|source)\.(\w+)", kind)
    if not m:
        continue
    doc = {"target": "docs/targets.md", "source": "docs/sources.md"}[m.group(1)]
    text = open(doc).read()
    h = re.search(r"^## " + re.escape(kind) + r"\s*$", text, re.M)
    if not h:
        problems.append("%s has no section \"## %s\"" % (doc, kind))
        continue
    nxt = re.search(r"^## ", text[h.end():], re.M)
    body = text[h.end():h.end() + (nxt.start() if nxt else len(text))]
    if m.group(1) == "source":
        c = re.search(r"<!-- common:begin -->(.*?)<!-- common:end -->", text, re.S)
        body += c.group(1) if c else ""
    for k in re.findall(r"^\| `(\w+)` \|", sec, re.M):
        if "`%s`" % k not in body and not re.search(r"`[^`\n]*\b%s = " % k, body):
            problems.append("%s: the %s section does not mention its key %s" % (doc, kind, k))
if problems:
    print("\n".join("FAIL: " + p for p in problems))
    sys.exit(1)
print("ok: every block kind is declared in docs/config.md and every connector key is in its guide")
'
