#!/usr/bin/env bash
# tests/integration/test_docs_api.sh — docs/http-api.md lists every endpoint,
# every status and every error code the server can answer, read from the
# code, and every endpoint it lists exists:
#
#  1. error codes and statuses: every call sl__http_error(r, STATUS, "Code", …)
#     (and the webhook source's answer_error / bad_request) in the .c files
#     of the floors (core/*, rules, connectors, http, server, agent, cli),
#     the `code = "…"` / `status = NNN` assignments beside them (a status or
#     code chosen at run time), and the event statuses of
#     core/bus/event.h's SL_EVENT_STATUS_MAP (per-event errors). Each code needs a
#     row in the "Error codes" table naming each literal status it is sent
#     with; each status a row in the "Status codes" table.
#  2. routes: the routes[] table in http/http.c gives
#     "METHOD /path" pairs and the query parameters each accepts; each must
#     be a row of the "Endpoints" table with the same parameters, and each
#     row of that table must be a route.
#  3. every endpoint of the table is asked for on a real bin/sluice: none
#     answers "no such resource" (404 NotFound from the router) or 405.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/examples_lib.sh

python3 - >"$ex_tmp/endpoints" <<'PY'
import glob, os, re, sys

doc = open(os.environ.get("API_DOC", "docs/http-api.md")).read()
problems = []

def section_table(title):
    """The rows (lists of cells) of the first table after the heading `title`."""
    m = re.search(r"^#+ " + re.escape(title) + r"\s*$", doc, re.M)
    if not m:
        problems.append("docs/http-api.md has no section \"%s\"" % title)
        return []
    rows, started = [], False
    for line in doc[m.end():].split("\n"):
        if line.startswith("|"):
            started = True
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not re.match(r"^-+$", cells[0]) and cells[0] not in ("status", "code", "endpoint"):
                rows.append(cells)
        elif started:
            break
    return rows

# ---- 1. codes and statuses in the code ----------------------------------------
def strip_comments(s):
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", s, flags=re.S)

def call_args(text, start):
    """Top-level comma-separated arguments of the call whose '(' is at start."""
    depth, args, cur, i, instr = 0, [], "", start, False
    while i < len(text):
        c = text[i]
        if instr:
            cur += c
            if c == "\\":
                cur += text[i + 1]
                i += 1
            elif c == '"':
                instr = False
        elif c == '"':
            instr = True
            cur += c
        elif c in "([{":
            depth += 1
            if depth > 1:
                cur += c
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                args.append(cur.strip())
                return args
            cur += c
        elif c == "," and depth == 1:
            args.append(cur.strip())
            cur = ""
        else:
            cur += c
        i += 1
    return args

status_map = re.search(r"SL_EVENT_STATUS_MAP\(XX\)(.*?)\n\n", open("core/bus/event.h").read(), re.S)
event_codes = set(re.findall(r'XX\(\w+, "(\w+)"\)', status_map.group(1))) - {"OK"}

codes = {}     # code -> set of literal statuses it is sent with
statuses = set()
where = {}
files = sorted(f for d in ("core/base", "core/log", "core/bus", "rules", "connectors", "http", "server", "agent", "cli") for f in glob.glob(d + "/*.c"))
for path in files:
    text = strip_comments(open(path).read())
    for m in re.finditer(r"\b(\w+)\s*\(", text):
        if m.group(1) in ("if", "while", "for", "switch", "return", "sizeof"):
            continue
        if text[m.start() - 1:m.start()] in ("_", ".") or re.match(r"[\w]", text[m.start() - 1]):
            continue
        line = text.count("\n", 0, m.start()) + 1
        args = call_args(text, m.end() - 1)
        fn = m.group(1)
        if len(args) < 3:
            continue
        if fn == "bad_request":  # source_webhook.c: always 400
            st_arg, code_arg = "400", args[2]
        elif fn.startswith("sl__http_reply"):  # answers without an error body
            st_arg, code_arg = args[1], ""
        elif re.fullmatch(r"[^\"]*\b[1-5]\d\d\b[^\"]*", args[1]) and (
                re.fullmatch(r'"[A-Z]\w+"', args[2]) or "?" in args[2] and '"' in args[2]
                or "sl_event_status_name" in args[2]):
            st_arg, code_arg = args[1], args[2]  # any f(x, STATUS, "Code", …)
        else:
            continue
        sts = {int(x) for x in re.findall(r"\b([1-5]\d\d)\b", st_arg)}
        statuses |= sts
        lits = re.findall(r'"(\w+)"', code_arg)
        if "sl_event_status_name" in code_arg:
            for c in event_codes:
                codes.setdefault(c, set())
                where.setdefault(c, "%s:%d" % (path, line))
        for c in lits:
            codes.setdefault(c, set())
            where.setdefault(c, "%s:%d" % (path, line))
            if len(lits) == 1 and re.fullmatch(r"[1-5]\d\d", st_arg):
                codes[c].add(int(st_arg))
    # statuses and codes chosen before the call
    for m in re.finditer(r"\b(?:st|status)\s*=\s*([^;]+);", text):
        statuses |= {int(x) for x in re.findall(r"\b([1-5]\d\d)\b", m.group(1))}
    for m in re.finditer(r"\bcode\s*=\s*([^;]+);", text):
        for c in re.findall(r'"([A-Z]\w+)"', m.group(1)):
            codes.setdefault(c, set())
            where.setdefault(c, "%s:%d" % (path, text.count("\n", 0, m.start()) + 1))
    # "status = 404, code = "NoSuchSet";" pairs
    for m in re.finditer(r"\bstatus\s*=\s*([1-5]\d\d)\s*,\s*code\s*=\s*\"(\w+)\"", text):
        codes.setdefault(m.group(2), set()).add(int(m.group(1)))

for c in event_codes:
    codes.setdefault(c, set())
    where.setdefault(c, "core/bus/event.h (per-event results)")

doc_codes = {}
for cells in section_table("Error codes"):
    names = re.findall(r"`(\w+)`", cells[0])
    for n in names:
        doc_codes[n] = {int(x) for x in re.findall(r"\b([1-5]\d\d)\b", cells[1] if len(cells) > 1 else "")}
doc_statuses = set()
for cells in section_table("Status codes"):
    doc_statuses |= {int(x) for x in re.findall(r"^\s*([1-5]\d\d)\b", cells[0])}

undocumented = []
for c in sorted(codes):
    if c not in doc_codes:
        undocumented.append(c)
        problems.append("error code %s (%s, status %s) is not in the \"Error codes\" table" %
                        (c, where[c], ",".join(map(str, sorted(codes[c]))) or "set at run time"))
        continue
    for st in sorted(codes[c] - doc_codes[c]):
        problems.append("error code %s is sent with status %d (%s), the table does not say so" %
                        (c, st, where[c]))
for c in sorted(set(doc_codes) - set(codes)):
    problems.append("the \"Error codes\" table lists %s, which the code never sends" % c)
for st in sorted(statuses - doc_statuses):
    problems.append("status %d is answered but not in the \"Status codes\" table" % st)

# ---- 2. routes ----------------------------------------------------------------
# The router's table in http/http.c: {"METHOD", "/path", handler,
# NULL or P("param", …)}, one entry per route with the query parameters it
# accepts.
src = strip_comments(open("http/http.c").read())
m = re.search(r"\broutes\[\]\s*=\s*\{(.*?)\n\};", src, re.S)
if not m:
    problems.append("the routes[] table was not found in http/http.c")
    body = ""
else:
    body = m.group(1)
routes = set()
code_params = {}    # "METHOD /path" -> set of accepted query parameters
for t in re.finditer(r'\{\s*"([A-Z]+)",\s*"(/[^"]*)",\s*\w+,\s*(NULL|P\(((?:[^()])*)\))\s*\}', body):
    path = re.sub(r"\{[^}]*\.\.\.\}$", "…", t.group(2))
    r = "%s %s" % (t.group(1), path)
    routes.add(r)
    code_params[r] = set(re.findall(r'"(\w+)"', t.group(4) or ""))

if len(routes) < 10:
    problems.append("only %d routes read from routes[]: the parser needs an update (%s)" %
                    (len(routes), sorted(routes)))

def norm(p):
    meth, path = p.split(" ", 1)
    path = re.sub(r"\{[^}]*\}", "{}", path)
    path = re.sub(r"(/\*|/…|/)+$", "", path) or "/"
    return meth + " " + path

doc_routes, doc_params = {}, {}
for cells in section_table("Endpoints"):
    for e in re.findall(r"`((?:GET|POST|DELETE|PUT|HEAD) /[^`]*)`", cells[0]):
        doc_routes[norm(e)] = e
        doc_params[norm(e)] = set(re.findall(r"`(\w+)`", cells[3])) if len(cells) > 3 else None
code_routes = {norm(r): r for r in routes}
for r in sorted(set(code_routes) - set(doc_routes)):
    problems.append("route %s (http/http.c routes[]) is not in the \"Endpoints\" table" %
                    code_routes[r])
for r in sorted(set(doc_routes) - set(code_routes)):
    problems.append("the \"Endpoints\" table lists %s, which route() does not serve" % doc_routes[r])
for r in sorted(set(doc_routes) & set(code_routes)):
    want, got = code_params[code_routes[r]], doc_params[r]
    if got is None:
        problems.append("the \"Endpoints\" table has no query parameters column for %s" % doc_routes[r])
    elif want != got:
        problems.append("%s accepts the query parameters {%s} (routes[]), the \"Endpoints\" table "
                        "says {%s}" % (doc_routes[r], ", ".join(sorted(want)), ", ".join(sorted(got))))

if problems:
    print("\n".join("FAIL: " + p for p in problems), file=sys.stderr)
    if undocumented:
        print("undocumented error codes: " + " ".join(undocumented), file=sys.stderr)
    sys.exit(1)
print("checking: %d error codes, %d statuses, %d routes: all in docs/http-api.md" %
      (len(codes), len(statuses), len(routes)), file=sys.stderr)
for e in sorted(doc_routes.values()):
    print(e)
PY

# ---- 3. every documented endpoint exists on the real server -------------------
mkdir -p "$ex_tmp/srv"
printf 'set "demo" { partitions = 1 }\n' >"$ex_tmp/srv/sluice.lua"
port=$(ex_free_port)
ex_serve "$ex_tmp/srv" "$port"
n=0
while read -r method path; do
  url=$(sed -e 's/{set}/demo/; s/{dlq}/demo/; s/{rule}/no-such-rule/; s/{lane}/no-such-lane/' \
    -e 's/{name}/no-such-hook/; s/{[^}]*}/x/g; s/\*$/index.html/; s/…$//' <<<"$path")
  curl_m=(-X "$method")
  [[ $method == HEAD ]] && curl_m=(-I)
  code=$(curl -s -o "$ex_tmp/answer" -w '%{http_code}' "${curl_m[@]}" --max-time 5 \
    "http://127.0.0.1:$port$url" || true)
  if [[ $code == 405 ]] || grep -q '"no such resource' "$ex_tmp/answer"; then
    fail "$method $path is documented but $method $url answers $code: $(cat "$ex_tmp/answer")"
  fi
  n=$((n + 1))
done <"$ex_tmp/endpoints"
((n >= 10)) || fail "only $n endpoints in the table"
echo "ok: docs/http-api.md lists every endpoint, status and error code, and its $n endpoints answer"
