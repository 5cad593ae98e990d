#!/usr/bin/env bash
# tests/integration/test_docs_getting_started.sh — runs docs/getting-started.md
# as written, so the guide cannot rot. The guide marks its blocks with HTML
# comments (invisible when rendered) on the line before the fence:
#
#   <!-- test: file PATH -->   the block is saved as PATH
#   <!-- test: run -->         the block runs (bash -e); it must exit 0
#   <!-- test: output -->      the block is what the run before printed, line
#                              for line; "…" stands for any text
#   <!-- test: background -->  the block starts the server; it is killed at the end
#   <!-- test: log -->         each line is in the server's log ("…" as above)
#
# Everything runs in a temp dir with bin/ linked to the real bin/, on a free
# port: "127.0.0.1:8080" and "localhost:8080" in the guide become it, and
# SLUICE_SERVER points the CLI at it. A run with an output block is retried
# for up to 10 s until its output matches (rules deliver in the background).
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/examples_lib.sh

ln -s "$ex_root/bin" "$ex_tmp/bin"
port=$(ex_free_port)
python3 - docs/getting-started.md "$ex_tmp" "$port" <<'PY'
import os, re, signal, subprocess, sys, time
doc, work, port = sys.argv[1], sys.argv[2], sys.argv[3]

def sub(text):
    return text.replace("127.0.0.1:8080", "127.0.0.1:" + port).replace("localhost:8080",
                                                                     "127.0.0.1:" + port)

# Parses the marked blocks, in order: (kind, argument, text, line).
lines = open(doc).read().split("\n")
blocks, i = [], 0
while i < len(lines):
    m = re.match(r"^<!-- test: (\w+)\s*(.*?)\s*-->$", lines[i])
    i += 1
    if not m:
        continue
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i >= len(lines) or not lines[i].startswith("```"):
        sys.exit("FAIL: %s:%d: a test marker not followed by a fenced block" % (doc, i))
    start, body = i + 1, []
    i += 1
    while i < len(lines) and not lines[i].startswith("```"):
        body.append(lines[i])
        i += 1
    i += 1
    blocks.append((m.group(1), m.group(2), "\n".join(body) + "\n", start))

kinds = [b[0] for b in blocks]
for need in ("file", "run", "output", "background"):
    if need not in kinds:
        sys.exit("FAIL: the guide has no '%s' block any more" % need)

env = dict(os.environ, SLUICE_SERVER="http://127.0.0.1:" + port)
server = None

def matches(want, got):
    w, g = want.rstrip("\n").split("\n"), got.rstrip("\n").split("\n")
    if len(w) != len(g):
        return False
    for a, b in zip(w, g):
        pat = "^" + ".*".join(re.escape(p) for p in a.split("…")) + "$"
        if not re.match(pat, b):
            return False
    return True

def run(cmd):
    p = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", cmd], cwd=work, env=env,
                       capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout + p.stderr

try:
    n = 0
    for k, (kind, arg, text, line) in enumerate(blocks):
        where = "%s:%d" % (doc, line)
        if kind == "file":
            path = os.path.join(work, arg)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(sub(text))
            print("checking: %s: wrote %s" % (where, arg))
        elif kind == "background":
            log = open(os.path.join(work, "server.log"), "w")
            server = subprocess.Popen(["bash", "-c", "exec " + sub(text).strip()], cwd=work,
                                      env=env, stdout=log, stderr=subprocess.STDOUT)
            print("checking: %s: started %s" % (where, text.strip()))
            end = time.time() + 10
            while run("curl -sf http://127.0.0.1:%s/healthz" % port)[0]:
                if server.poll() is not None or time.time() > end:
                    sys.exit("FAIL: %s: the server did not start:\n%s" %
                             (where, open(os.path.join(work, "server.log")).read()))
                time.sleep(0.1)
        elif kind == "run":
            want = blocks[k + 1][2] if k + 1 < len(blocks) and blocks[k + 1][0] == "output" else None
            print("checking: %s: %s" % (where, text.strip().split("\n")[0]))
            end = time.time() + 10
            while True:
                rc, out = run(sub(text))
                if rc == 0 and (want is None or matches(sub(want), out)):
                    break
                if want is None or time.time() > end:
                    sys.exit("FAIL: %s: %s\nexit %d, output:\n%s%s" %
                             (where, text.strip(), rc, out,
                              "" if want is None else "\nwanted:\n" + want))
                time.sleep(0.1)
            n += 1
        elif kind == "log":  # each line appears in the server's log
            logtext = open(os.path.join(work, "server.log")).read()
            for want in sub(text).strip().split("\n"):
                if not any(matches(want, got) for got in logtext.split("\n")):
                    sys.exit("FAIL: %s: the server did not log\n%s\nits log:\n%s" %
                             (where, want, logtext))
            print("checking: %s: the server logged what the guide shows" % where)
        elif kind == "output":
            if k == 0 or blocks[k - 1][0] != "run":
                sys.exit("FAIL: %s: an output block without a run block before it" % where)
        else:
            sys.exit("FAIL: %s: unknown test marker '%s'" % (where, kind))
    print("ok: docs/getting-started.md: %d commands run as written" % n)
finally:
    if server:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
PY
