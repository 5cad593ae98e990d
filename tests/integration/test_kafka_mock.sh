#!/bin/sh
# The Kafka test harness works end to end: build/rel/tools/kafka_mock starts a
# 3-broker mock cluster on 127.0.0.1; kcat (a real Kafka client) produces to
# it and reads everything back, also across a broker outage steered through
# the harness's stdin. Targets and sources tested against Kafka build on this.
set -eu
cd "$(dirname "$0")/../.."
mock=build/rel/tools/kafka_mock
command -v kcat >/dev/null || { echo "FAIL: kcat is not installed (scripts/deps.sh installs it)"; exit 1; }
[ -x "$mock" ] || { echo "FAIL: $mock is not built (make itests)"; exit 1; }
dir=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT
mkfifo "$dir/ctl"
"$mock" --commands --brokers 3 --topic t:3 < "$dir/ctl" > "$dir/out" 2> "$dir/err" &
pid=$!
exec 3> "$dir/ctl" # keeps the harness's stdin open
i=0
until grep -q '^bootstrap ' "$dir/out"; do
    i=$((i + 1))
    [ $i -lt 100 ] || { echo "FAIL: kafka_mock did not start: $(cat "$dir/err")"; exit 1; }
    sleep 0.1
done
bs=$(sed -n 's/^bootstrap //p' "$dir/out")
case "$bs" in 127.0.0.1:*) ;; *) echo "FAIL: bootstrap not on loopback: $bs"; exit 1 ;; esac

seq 1 1000 | timeout 60 kcat -q -P -b "$bs" -t t -X message.timeout.ms=30000
got=$(timeout 60 kcat -q -C -b "$bs" -t t -o beginning -e | wc -l)
[ "$got" -eq 1000 ] || { echo "FAIL: read back $got of 1000 messages"; exit 1; }

# Broker 1 down while producing: the producer waits, the broker comes back,
# nothing is lost.
echo "down 1" >&3
(seq 1001 2000 | timeout 60 kcat -q -P -b "$bs" -t t -X message.timeout.ms=30000) &
prod=$!
sleep 2
echo "up 1" >&3
wait "$prod" || { echo "FAIL: the producer failed across the outage"; exit 1; }
got=$(timeout 60 kcat -q -C -b "$bs" -t t -o beginning -e | sort -n | uniq | wc -l)
[ "$got" -eq 2000 ] || { echo "FAIL: after the outage read back $got distinct of 2000"; exit 1; }
grep -c '^ok' "$dir/out" | grep -qx 2 || { echo "FAIL: the harness did not confirm down/up: $(cat "$dir/out")"; exit 1; }

# The commands of the scale-out tests: a replicated topic, a leader moved, a
# group coordinator moved, injected errors on Produce, Fetch and
# OffsetCommit (by name); the client retries through all of them and loses
# nothing. Wrong commands answer "error: ..." and change nothing.
for c in "topic r 6 3" "leader r 0 3" "leader r 1 2" "coordinator group g-r 2" \
         "error produce NOT_LEADER_FOR_PARTITION 2" "error fetch 6 3" \
         "errors OffsetCommit REBALANCE_IN_PROGRESS 15" "ping" "bootstrap" \
         "topic r 6 3" "leader r 0 9" "error nosuchapi 6 1" "coordinator nope g 1"; do
    echo "$c" >&3
done
i=0
until [ "$(wc -l < "$dir/out")" -ge 16 ]; do
    i=$((i + 1))
    [ $i -lt 100 ] || { echo "FAIL: the harness did not answer every command: $(cat "$dir/out")"; exit 1; }
    sleep 0.1
done
[ "$(sed -n 4,12p "$dir/out" | grep -c '^ok')" -eq 9 ] || { echo "FAIL: commands refused: $(cat "$dir/out")"; exit 1; }
sed -n 12p "$dir/out" | grep -qx "ok $bs" || { echo "FAIL: bootstrap answered $(sed -n 12p "$dir/out"), not ok $bs"; exit 1; }
[ "$(sed -n 13,16p "$dir/out" | grep -c '^error: ')" -eq 4 ] || { echo "FAIL: wrong commands not refused: $(cat "$dir/out")"; exit 1; }
seq 1 600 | timeout 60 kcat -q -P -b "$bs" -t r -X message.timeout.ms=30000
got=$(timeout 60 kcat -q -C -b "$bs" -t r -o beginning -e | sort -n | uniq | wc -l)
[ "$got" -eq 600 ] || { echo "FAIL: with a leader moved and injected errors read back $got distinct of 600"; exit 1; }
echo "quit" >&3
exec 3>&-
wait "$pid" || { echo "FAIL: kafka_mock did not exit cleanly"; exit 1; }
pid=
# Without --commands it reads stdin only when that is a pipe: with /dev/null
# (a script's `kafka_mock &`) or a terminal it runs until SIGTERM/SIGINT
# (exit 0), and a "quit" typed on the terminal is not read; a pipe's end
# stops it, as before.
python3 - "$mock" <<'PY' || exit 1
import os, pty, signal, subprocess, sys, time
mock = sys.argv[1]
def started(p):
    line = p.stdout.readline()
    if not line.startswith(b"bootstrap "):
        sys.exit("FAIL: kafka_mock printed %r" % line)
def stop(p, what):
    p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        sys.exit("FAIL: kafka_mock with %s did not stop on SIGTERM" % what)
    if rc != 0:
        sys.exit("FAIL: kafka_mock with %s exited %d on SIGTERM, not 0" % (what, rc))
p = subprocess.Popen([mock, "--brokers", "1"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
started(p)
time.sleep(1)
if p.poll() is not None:
    sys.exit("FAIL: kafka_mock with stdin /dev/null exited (%d) instead of running" % p.returncode)
stop(p, "stdin /dev/null")
m, s = pty.openpty()
p = subprocess.Popen([mock, "--brokers", "1"], stdin=s, stdout=subprocess.PIPE)
os.close(s)
started(p)
os.write(m, b"quit\n")
time.sleep(1)
if p.poll() is not None:
    sys.exit("FAIL: kafka_mock read its terminal (exit %d after a typed quit)" % p.returncode)
stop(p, "a terminal")
os.close(m)
p = subprocess.Popen([mock, "--brokers", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
started(p)
p.stdin.close()
try:
    rc = p.wait(10)
except subprocess.TimeoutExpired:
    p.kill()
    sys.exit("FAIL: kafka_mock did not stop at the end of a piped stdin")
if rc != 0:
    sys.exit("FAIL: kafka_mock exited %d at the end of a piped stdin" % rc)
PY
echo "ok: kafka_mock (3 brokers on $bs): 2000 messages produced and read back with kcat, across a broker outage; 600 more to a topic with replication 3 across a moved leader and injected Produce/Fetch errors; runs until signalled with /dev/null or a terminal as stdin"
