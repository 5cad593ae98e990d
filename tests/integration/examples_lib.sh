# shellcheck shell=bash disable=SC2034
# tests/integration/examples_lib.sh — helpers shared by test_examples.sh and
# the test_docs_*.sh scripts (sourced, never run by itself: run-tests.sh only
# runs test_*.sh). They start the real bin/sluice, an HTTP receiver and the
# Kafka mock on free loopback ports, wait for conditions with a bound, and
# kill everything they started when the script exits.
#
# The sourcing script must `cd` to the repository root first and use bash.

ex_root=$PWD
ex_bin=$ex_root/bin/sluice
ex_tmp=$(mktemp -d)
ex_pids=()

ex_cleanup() {
  local pid
  for pid in "${ex_pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${ex_pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  [[ -n ${ex_kafka_fd_open:-} ]] && exec 3>&-
  rm -rf "$ex_tmp"
}
trap ex_cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  local log
  for log in "$ex_tmp"/*/server.log; do
    [[ -f $log ]] || continue
    echo "---- $log (last lines)" >&2
    tail -n 15 "$log" >&2
  done
  exit 1
}
step() { echo "checking: $*"; }

# A free TCP port on 127.0.0.1 (the kernel's pick; nothing else is told).
ex_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# ex_wait SECONDS DESCRIPTION COMMAND...: runs COMMAND every 0.1 s until it
# succeeds; fails the test with DESCRIPTION after SECONDS.
ex_wait() {
  local limit=$1 what=$2
  shift 2
  local end=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < end)) || fail "$what (waited ${limit} s)"
    sleep 0.1
  done
}

# ex_serve DIR PORT [ENV=VALUE...]: starts `sluice serve -c DIR/sluice.lua`
# listening on 127.0.0.1:PORT (the flag wins over the config's listen), log in
# DIR/server.log; waits until /healthz answers. Sets ex_server_pid.
ex_serve() {
  local dir=$1 port=$2
  shift 2
  env "$@" "$ex_bin" serve -c "$dir/sluice.lua" --listen "127.0.0.1:$port" \
    >"$dir/server.log" 2>&1 &
  ex_server_pid=$!
  ex_pids+=("$ex_server_pid")
  ex_wait 10 "sluice serve -c $dir/sluice.lua did not answer /healthz" \
    curl -sf "http://127.0.0.1:$port/healthz"
}

# ex_stop PID: SIGTERM, then waits for it (a clean stop drains the buffers).
ex_stop() {
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# ex_receiver FILE: starts an HTTP receiver on a free port that answers every
# request 200 and appends it to FILE as one JSON line
# {"method","path","headers":{lower-case name: value},"body"}. Sets
# ex_receiver_port.
ex_receiver() {
  local out=$1 portfile=$ex_tmp/receiver.port.$RANDOM
  python3 - "$out" "$portfile" <<'PY' &
import json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
out, portfile = sys.argv[1], sys.argv[2]
lock = threading.Lock()
class H(BaseHTTPRequestHandler):
    def handle_one(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n).decode("utf-8", "replace")
        rec = {"method": self.command, "path": self.path,
               "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body}
        with lock, open(out, "a") as f:
            f.write(json.dumps(rec) + "\n")
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    do_POST = do_PUT = do_GET = handle_one
    def log_message(self, *a):
        pass
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
with open(portfile + ".tmp", "w") as f:
    f.write(str(s.server_address[1]))
import os
os.rename(portfile + ".tmp", portfile)
s.serve_forever()
PY
  ex_pids+=("$!")
  ex_wait 10 "the HTTP receiver did not start" test -s "$portfile"
  ex_receiver_port=$(cat "$portfile")
}

# ex_kafka_mock TOPIC:PARTITIONS...: starts build/rel/tools/kafka_mock with 3
# brokers and those topics (its stdin held open on fd 3); sets ex_kafka (the
# bootstrap list).
ex_kafka_mock() {
  local mock=$ex_root/build/rel/tools/kafka_mock args=() t
  command -v kcat >/dev/null || fail "kcat is not installed (scripts/deps.sh installs it)"
  [[ -x $mock ]] || fail "$mock is not built (make itests)"
  for t in "$@"; do args+=(--topic "$t"); done
  mkfifo "$ex_tmp/kafka.ctl"
  "$mock" --commands --brokers 3 "${args[@]}" <"$ex_tmp/kafka.ctl" >"$ex_tmp/kafka.out" 2>"$ex_tmp/kafka.err" &
  ex_pids+=("$!")
  exec 3>"$ex_tmp/kafka.ctl" # keeps the mock's stdin open
  ex_kafka_fd_open=1
  ex_wait 10 "kafka_mock did not start: $(cat "$ex_tmp/kafka.err" 2>/dev/null)" \
    grep -q '^bootstrap ' "$ex_tmp/kafka.out"
  ex_kafka=$(sed -n 's/^bootstrap //p' "$ex_tmp/kafka.out")
}

# ex_kcat_count TOPIC N: true when TOPIC holds at least N records.
ex_kcat_count() {
  local got
  got=$(timeout 10 kcat -q -C -b "$ex_kafka" -t "$1" -o beginning -e 2>/dev/null | wc -l)
  ((got >= $2))
}

# ex_lines FILE N: true when FILE exists with at least N lines.
ex_lines() {
  [[ -f $1 ]] && (($(wc -l <"$1") >= $2))
}

# ex_sign SECRET FILE: GitHub's X-Hub-Signature-256 value for FILE's bytes.
ex_sign() {
  python3 -c 'import hashlib, hmac, sys
print("sha256=" + hmac.new(sys.argv[1].encode(), open(sys.argv[2], "rb").read(), hashlib.sha256).hexdigest())' "$1" "$2"
}

# ex_caught_up PORT: true when every rule of the server on PORT (and each of
# its lane runs) has lag 0 and nothing waiting for a retry: everything stored
# so far is delivered (a rule's cursor passes an event only once every target
# confirmed it), so what a target did not get by then, it will not get.
ex_caught_up() {
  curl -sf "http://127.0.0.1:$1/v1/rules" | python3 -c '
import json, sys
rules = json.load(sys.stdin)["rules"]
ok = all(r["lag"] == 0 and r["retrying"] == 0 and all(l.get("lag", 0) == 0 for l in r.get("lanes", []))
         for r in rules)
sys.exit(0 if ok else 1)'
}
