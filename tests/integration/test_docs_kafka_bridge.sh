#!/usr/bin/env bash
# tests/integration/test_docs_kafka_bridge.sh — runs the shell block of
# examples/kafka-bridge/README.md (the one after "<!-- test: run -->") as
# written, as a script: the Kafka mock started with a plain `&`, kcat
# producing and reading back, sluice serving the example, then `kill %2 %1`.
# A whole-line comment in the block ("# cust-1 {…}") is output the commands
# print, in order; "…" stands for any text. The block runs in a temp dir
# (bin/ and build/rel/tools/ linked to the real ones, the example copied with
# its port 8080 moved to a free one), bounded to 120 s; the `make` line is
# only checked (make -n: the targets exist), the harness built them.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/examples_lib.sh

command -v kcat >/dev/null || fail "kcat is not installed (scripts/deps.sh installs it)"
[[ -x build/rel/tools/kafka_mock ]] || fail "build/rel/tools/kafka_mock is not built (make kafka-mock)"
w=$ex_tmp/w
mkdir -p "$w/build/rel" "$w/examples"
ln -s "$ex_root/bin" "$w/bin"
ln -s "$ex_root/build/rel/tools" "$w/build/rel/tools"
cp -r examples/kafka-bridge "$w/examples/"
port=$(ex_free_port)
sed -i "s/127\.0\.0\.1:8080/127.0.0.1:$port/" "$w/examples/kafka-bridge/sluice.lua"
grep -q "127.0.0.1:$port" "$w/examples/kafka-bridge/sluice.lua" || fail "the example does not listen on 127.0.0.1:8080 any more"

python3 - examples/kafka-bridge/README.md "$w" "$port" "$ex_root" <<'PY'
import os, re, signal, subprocess, sys, time
doc, work, port, root = sys.argv[1:5]
lines = open(doc).read().split("\n")
block, start = None, 0
for i, l in enumerate(lines):
    if l.strip() == "<!-- test: run -->":
        j = i + 1
        while not lines[j].strip():
            j += 1
        if not lines[j].startswith("```"):
            sys.exit("FAIL: %s:%d: the test marker is not followed by a fenced block" % (doc, j + 1))
        k = j + 1
        while not lines[k].startswith("```"):
            k += 1
        block, start = lines[j + 1:k], j + 2
        break
if block is None:
    sys.exit("FAIL: %s has no '<!-- test: run -->' block any more" % doc)

script, want = [], []
for l in block:
    if l.startswith("# "):
        want.append(l[2:])
    elif l.startswith("make "):
        # the targets must exist; building is the harness's job
        script.append("make -C %s -n %s >/dev/null" % (root, l[5:].split("#")[0].strip()))
    else:
        script.append(l.replace("localhost:8080", "127.0.0.1:" + port))
if not any("kafka_mock" in l for l in script):
    sys.exit("FAIL: the block does not start kafka_mock any more")
print("checking: %s:%d: %d lines as a script, %d output lines to see" % (doc, start, len(block), len(want)))
out = os.path.join(work, "out")
p = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", "\n".join(script) + "\n"], cwd=work,
                     stdout=open(out, "w"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                     start_new_session=True)
try:
    rc = p.wait(120)
except subprocess.TimeoutExpired:
    rc = None
# everything the block started must be gone (it kills its jobs); bounded
end = time.time() + 15
left = True
while time.time() < end:
    try:
        os.killpg(p.pid, 0)
    except ProcessLookupError:
        left = False
        break
    time.sleep(0.1)
if left:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
text = open(out).read()
if rc is None:
    sys.exit("FAIL: %s:%d: the block did not finish in 120 s; its output:\n%s" % (doc, start, text))
if rc != 0:
    sys.exit("FAIL: %s:%d: the block exited %d; its output:\n%s" % (doc, start, rc, text))
if left:
    sys.exit("FAIL: %s:%d: processes the block started were still running 15 s after it ended "
             "(does kafka_mock stop on SIGTERM?); output:\n%s" % (doc, start, text))
got = text.split("\n")
pos = 0
for w in want:
    pat = re.compile("^" + ".*".join(re.escape(x) for x in w.split("…")) + ("$" if not w.endswith("…") else ""))
    while pos < len(got) and not pat.match(got[pos]):
        pos += 1
    if pos == len(got):
        sys.exit("FAIL: %s:%d: the output has no line\n  %s\n(in order); it was:\n%s" % (doc, start, w, text))
    pos += 1
print("ok: examples/kafka-bridge/README.md ran as written: kafka_mock in the background, "
      "%d output lines seen, sluice stopped, the mock stopped on SIGTERM" % len(want))
PY
