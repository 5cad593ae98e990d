#!/usr/bin/env bash
# tests/integration/test_docs_readme.sh — README.md's "Post an event, read it
# back" block runs as written against a fresh server (`sluice serve` on the
# embedded default, as `make run` starts it, with an empty data folder, on a
# free port): the curl command answers exactly the "# {…}" line under it,
# and `sluice tail demo --from beginning` prints the event.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/examples_lib.sh

port=$(ex_free_port)
mkdir -p "$ex_tmp/run"
(cd "$ex_tmp/run" && exec "$ex_bin" serve --listen "127.0.0.1:$port" >"$ex_tmp/run/server.log" 2>&1) &
ex_pids+=("$!")
ex_wait 10 "sluice serve did not answer /healthz" curl -sf "http://127.0.0.1:$port/healthz"

python3 - README.md "$port" "$ex_root" "$ex_tmp/run" <<'PY'
import os, re, subprocess, sys
doc, port, root, work = sys.argv[1:5]
lines = open(doc).read().split("\n")
try:
    h = lines.index("## Post an event, read it back")
except ValueError:
    sys.exit("FAIL: README.md has no '## Post an event, read it back' section any more")
i = h + 1
while not lines[i].startswith("```sh"):
    i += 1
j = i + 1
while not lines[j].startswith("```"):
    j += 1
block = lines[i + 1:j]
k = next(n for n, l in enumerate(block) if l.startswith("# "))
cmd = "\n".join(block[:k]).replace("127.0.0.1:8080", "127.0.0.1:" + port)
want = block[k][2:]
env = dict(os.environ, SLUICE_SERVER="http://127.0.0.1:" + port, PATH=root + "/bin:" + os.environ["PATH"])
got = subprocess.run(["bash", "-e", "-c", cmd], capture_output=True, text=True, timeout=30, cwd=work, env=env)
if got.returncode or got.stdout.strip() != want:
    sys.exit("FAIL: README.md:%d: a fresh server answers\n  %s\nnot what the README shows:\n  %s" %
             (i + 2, got.stdout.strip() or got.stderr.strip(), want))
print("checking: README.md:%d: the answer is %s" % (i + 2, want))
tail = next(l for l in block if "sluice tail demo --from beginning" in l).split("#")[0].strip()
tail = tail.replace("./bin/sluice", root + "/bin/sluice")
got = subprocess.run(["bash", "-e", "-c", tail], capture_output=True, text=True, timeout=30, cwd=work, env=env)
if got.returncode or '"id":"1"' not in got.stdout or '"hi":1' not in got.stdout:
    sys.exit("FAIL: README.md: %s printed:\n%s%s" % (tail, got.stdout, got.stderr))
print("checking: README.md: %s prints the event" % tail)
PY
echo "ok: README.md's first publish answers what it shows, and tail reads the event back"
