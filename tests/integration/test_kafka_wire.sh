#!/bin/sh
# sluice as a Kafka broker (docs/kafka-protocol.md), driven by kcat (a real
# librdkafka client): Metadata names sluice as broker 0 and leader of every
# partition; records produced with keys, headers and acks=all read back
# byte-identical; an idempotent producer's records are stored once; a
# CloudEvents record refused by the set's schema stores nothing while the
# next good one does; two group members share the partitions, commit, and a
# restart keeps the committed offsets; GET /v1/groups and /metrics show the
# group and the listener; with API keys, SASL/PLAIN with the key's name and
# token is required and the key's rights apply (a key without read on a set
# cannot fetch it); a non-loopback listen without keys is refused at start;
# sluice check refuses a malformed kafka_listen with FILE:LINE.
set -eu
cd "$(dirname "$0")/../.."
command -v kcat >/dev/null || { echo "FAIL: kcat is not installed (scripts/deps.sh installs it)"; exit 1; }
dir=$(mktemp -d)
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
fail() { echo "FAIL: $*"; [ -f "$dir/log" ] && tail -20 "$dir/log"; exit 1; }

# start ARGS...: sluice in the background, waiting for its Kafka line.
start() {
    : > "$dir/log"
    bin/sluice serve --data "$dir/data" --listen "127.0.0.1:$hport" "$@" > "$dir/log" 2>&1 &
    pid=$!
    i=0
    until grep -q "Kafka protocol on" "$dir/log"; do
        i=$((i + 1))
        [ $i -lt 100 ] || fail "sluice did not start its Kafka listener: $(cat "$dir/log")"
        kill -0 "$pid" 2>/dev/null || fail "sluice exited at start: $(cat "$dir/log")"
        sleep 0.1
    done
}
stop() {
    kill "$pid" && wait "$pid" || true
    pid=
}

hport=$(free_port)
kport=$(free_port)
bs="127.0.0.1:$kport"
mkdir -p "$dir/schemas"
cat > "$dir/schemas/order.json" <<'EOF'
{"type": "object", "required": ["amount"], "properties": {"amount": {"type": "number"}}}
EOF
cat > "$dir/sluice.lua" <<EOF
server { kafka_listen = "127.0.0.1:$kport" }
set "orders" { partitions = 3, schemas = { ["shop.order"] = "schemas/order.json" } }
lane "ppe" { env = "ppe" }
EOF
bin/sluice check "$dir/sluice.lua" > /dev/null || fail "sluice check refuses the config"
start -c "$dir/sluice.lua"

# Metadata: one broker, node 0, leader of all 3 partitions.
md=$(timeout 30 kcat -L -b "$bs" -t orders 2>&1) || fail "kcat -L: $md"
echo "$md" | grep -q "1 brokers:" || fail "kcat -L does not list one broker: $md"
echo "$md" | grep -q "broker 0 at $bs (controller)" || fail "broker 0 at $bs is not the controller: $md"
[ "$(echo "$md" | grep -c "leader 0, replicas: 0, isrs: 0")" -eq 3 ] || fail "not leader of 3 partitions: $md"

# Keys, values and headers come back as sent (binary-safe), in order.
/usr/bin/python3 -c '
import sys
for i in range(500):
    sys.stdout.buffer.write(b"k%d\x01v%d \xc3\xa9 %s\n" % (i % 7, i, b"x" * (i % 40)))
' > "$dir/in"
timeout 60 kcat -P -b "$bs" -t orders -K '\x01' -H h1=one -H h2=two -X acks=all < "$dir/in" ||
    fail "kcat -P into orders"
timeout 60 kcat -C -b "$bs" -t orders -o beginning -e -q -f '%k\x01%s %h\n' > "$dir/out" ||
    fail "kcat -C of orders"
want=$(sed 's/$/ h1=one,h2=two/' "$dir/in" | sort | md5sum)
got=$(sort "$dir/out" | md5sum)
[ "$want" = "$got" ] || fail "records read back differ from those produced ($(wc -l < "$dir/out") lines)"
for k in 0 3 6; do # per key (one partition each), in the order produced
    grep "^k$k$(printf '\001')" "$dir/in" > "$dir/k.in"
    grep "^k$k$(printf '\001')" "$dir/out" | sed 's/ h1=one,h2=two$//' > "$dir/k.out"
    cmp -s "$dir/k.in" "$dir/k.out" || fail "records of key k$k read back out of order"
done

# zstd batches (-z zstd) are stored compressed and read back; offsets from
# the end (-o -N), the end itself and a timestamp (s@MS, the time index).
seq 1 200 | timeout 30 kcat -P -b "$bs" -t zz -p 0 -z zstd || fail "kcat -P -z zstd"
[ "$(timeout 30 kcat -C -b "$bs" -t zz -p 0 -o beginning -e -q | tr '\n' ' ')" = "$(seq 1 200 | tr '\n' ' ')" ] ||
    fail "zstd records did not read back"
got=$(timeout 30 kcat -C -b "$bs" -t zz -p 0 -o -3 -e -q | tr '\n' ' ')
[ "$got" = "198 199 200 " ] || fail "kcat -o -3 read [$got]"
got=$(timeout 30 kcat -C -b "$bs" -t zz -p 0 -o end -e -q | wc -l)
[ "$got" -eq 0 ] || fail "kcat -o end read $got records"
t_ms=$(($(date +%s%3N) + 1))
sleep 0.05
seq 201 205 | timeout 30 kcat -P -b "$bs" -t zz -p 0 || fail "kcat -P after the timestamp"
got=$(timeout 30 kcat -C -b "$bs" -t zz -p 0 -o "s@$t_ms" -e -q | tr '\n' ' ')
[ "$got" = "201 202 203 204 205 " ] || fail "kcat -o s@$t_ms read [$got]"

# Idempotent producer: every record once.
seq 1 3000 | timeout 60 kcat -P -b "$bs" -t idem -X enable.idempotence=true -X acks=all ||
    fail "idempotent kcat -P"
n=$(timeout 60 kcat -C -b "$bs" -t idem -o beginning -e -q | sort -n | uniq | wc -l)
m=$(timeout 60 kcat -C -b "$bs" -t idem -o beginning -e -q | wc -l)
[ "$n" -eq 3000 ] && [ "$m" -eq 3000 ] || fail "idempotent producer: $m records, $n distinct, want 3000"

# Lanes: a consumer reads the base lane unless its client.id names one
# (sluice.lane=NAME); other lanes' batches after its last one are stepped
# over, so it reaches the end (-e exits) instead of lagging forever.
seq 1 5 | timeout 30 kcat -P -b "$bs" -t lanes -p 0 || fail "kcat -P into lanes"
seq 6 9 | timeout 30 kcat -P -b "$bs" -t lanes -p 0 -H lane=ppe || fail "kcat -P into lane ppe"
got=$(timeout 20 kcat -C -b "$bs" -t lanes -p 0 -o beginning -e -q | tr '\n' ' ')
[ "$got" = "1 2 3 4 5 " ] || fail "the base lane's consumer read [$got], want [1 2 3 4 5 ] and the end"
got=$(timeout 20 kcat -C -b "$bs" -t lanes -p 0 -o beginning -e -q -X client.id=app,sluice.lane=ppe | tr '\n' ' ')
[ "$got" = "6 7 8 9 " ] || fail "lane ppe's consumer read [$got], want [6 7 8 9 ] and the end"
got=$(timeout 20 kcat -C -b "$bs" -t lanes -p 0 -o beginning -e -q -X 'client.id=sluice.lane=*' | wc -l)
[ "$got" -eq 9 ] || fail "a sluice.lane=* consumer read $got records, want all 9"

# The set's schema applies to CloudEvents records: a bad one is refused
# (nothing stored, the reason logged), a good one stored.
before=$(timeout 30 kcat -C -b "$bs" -t orders -o beginning -e -q | wc -l)
echo '{"specversion":"1.0","id":"bad-1","source":"/t","type":"shop.order","data":{"amount":"ten"}}' |
    timeout 30 kcat -P -b "$bs" -t orders -p 0 -H content-type=application/cloudevents+json \
        -X message.send.max.retries=0 -X message.timeout.ms=5000 > "$dir/bad" 2>&1 || true
grep -q "failed to validate record" "$dir/bad" || fail "schema-violating record not refused: $(cat "$dir/bad")"
grep -q "amount" "$dir/log" || fail "the refusal's reason (data.amount) is not in the log"
echo '{"specversion":"1.0","id":"good-1","source":"/t","type":"shop.order","data":{"amount":10}}' |
    timeout 30 kcat -P -b "$bs" -t orders -p 0 -H content-type=application/cloudevents+json ||
    fail "a record that fits the schema was refused"
after=$(timeout 30 kcat -C -b "$bs" -t orders -o beginning -e -q | wc -l)
[ "$after" -eq $((before + 1)) ] || fail "after one refused and one good record: $after records, want $((before + 1))"
curl -sf "http://127.0.0.1:$hport/v1/sets/orders/events?partition=0&offset=0&max=1000" |
    grep -q '"id":"good-1"' || fail "the CloudEvents record is not an event over HTTP"

# Two group members share the 3 partitions; together they read everything.
for c in 1 2; do
    timeout 40 kcat -u -b "$bs" -G gw orders -q -f '%p %k %s\n' -X auto.offset.reset=earliest \
        -X session.timeout.ms=6000 > "$dir/g$c" 2> "$dir/g$c.err" &
    eval "g$c=\$!"
done
i=0
until [ "$(cat "$dir/g1" "$dir/g2" | wc -l)" -ge $((before + 1)) ]; do
    i=$((i + 1))
    [ $i -lt 200 ] || fail "two group members read $(cat "$dir/g1" "$dir/g2" | wc -l) of $((before + 1))"
    sleep 0.1
done
i=0
until curl -sf "http://127.0.0.1:$hport/v1/groups" | grep -q '"state":"Stable".*"members":\[{.*},{'; do
    i=$((i + 1))
    [ $i -lt 200 ] || fail "GET /v1/groups never showed gw Stable with two members: $(curl -s "http://127.0.0.1:$hport/v1/groups")"
    sleep 0.1
done
p1=$(cut -d' ' -f1 "$dir/g1" | sort -u | tr '\n' ' ')
p2=$(cut -d' ' -f1 "$dir/g2" | sort -u | tr '\n' ' ')
[ -n "$p1" ] && [ -n "$p2" ] || fail "one member read nothing: partitions [$p1] and [$p2]"
for p in $p1; do case " $p2" in *" $p "*) fail "partition $p read by both members";; esac; done
# One member killed: after its session times out the other is given every
# partition and reads what comes next in each.
pkill -9 -P "$g2" kcat || fail "no kcat under timeout $g2 to kill"
wait "$g2" 2>/dev/null || true
i=0
until curl -sf "http://127.0.0.1:$hport/v1/groups" | grep -q '"state":"Stable".*"members":\[{[^]]*"partitions":\[0,1,2\]}\]}\]'; do
    i=$((i + 1))
    [ $i -lt 300 ] || fail "the surviving member was not given every partition after the other was killed: $(curl -s "http://127.0.0.1:$hport/v1/groups")"
    sleep 0.1
done
n1=$(wc -l < "$dir/g1")
for p in 0 1 2; do
    seq 1 20 | sed "s/^/after-$p-/" | timeout 30 kcat -P -b "$bs" -t orders -p $p || fail "kcat -P after a member died"
done
i=0
# (it may read records again from the killed member's last commit first)
until [ "$(grep -c ' after-' "$dir/g1")" -ge 60 ]; do
    i=$((i + 1))
    [ $i -lt 250 ] || fail "the surviving member read $(grep -c ' after-' "$dir/g1") of the 60 records produced after the other was killed"
    sleep 0.1
done
# Every partition of orders that holds records is committed at its end
# (lag 0) by the member's auto-commit (every 5 s) before the restart; an
# empty one has nothing to commit.
curl -sf "http://127.0.0.1:$hport/v1/sets/orders" > "$dir/orders.json"
i=0
until curl -sf "http://127.0.0.1:$hport/v1/groups" | /usr/bin/python3 -c '
import json, sys
g = [g for g in json.load(sys.stdin)["groups"] if g["group"] == "gw"]
offs = {o["partition"]: o for o in (g[0]["offsets"] if g else []) if o["topic"] == "orders"}
full = [p["partition"] for p in json.load(open(sys.argv[1]))["partition_info"] if p["end_offset"] > 0]
sys.exit(0 if all(p in offs and offs[p].get("lag") == 0 for p in full) else 1)' "$dir/orders.json"; do
    i=$((i + 1))
    [ $i -lt 150 ] || fail "group gw did not commit every partition of orders at its end: $(curl -s "http://127.0.0.1:$hport/v1/groups")"
    sleep 0.1
done
kill "$g1" 2>/dev/null; wait "$g1" 2>/dev/null || true
curl -sf "http://127.0.0.1:$hport/metrics" > "$dir/metrics"
grep -q '^sluice_kafka_requests_total{api="JoinGroup"} [1-9]' "$dir/metrics" || fail "no JoinGroup in /metrics"
grep -q '^sluice_kafka_produced_records_total [1-9]' "$dir/metrics" || fail "no produced records in /metrics"
grep -q '^sluice_kafka_duplicate_batches_total ' "$dir/metrics" || fail "no duplicates counter in /metrics"
bin/sluice status --server "http://127.0.0.1:$hport" --interval 0 > "$dir/status" ||
    fail "sluice status: $(cat "$dir/status")"
grep -q "^Kafka consumer groups (1)" "$dir/status" && grep -q "^  gw " "$dir/status" ||
    fail "sluice status does not show group gw: $(cat "$dir/status")"

# A restart (with the flag this time) keeps the committed offsets: a new
# member reads only what comes after them.
stop
kport=$(free_port)
bs="127.0.0.1:$kport"
sed -i '/kafka_listen/d' "$dir/sluice.lua"
start -c "$dir/sluice.lua" --kafka-listen "$bs"
printf 'n1:new-1\nn2:new-2\n' | timeout 30 kcat -P -b "$bs" -t orders -K : || fail "kcat -P after restart"
# (earliest: a partition nobody committed, empty before, holds new records now)
timeout 15 kcat -u -b "$bs" -G gw orders -q -f '%s\n' -X session.timeout.ms=6000 \
    -X auto.offset.reset=earliest > "$dir/g3" 2>&1 &
g3=$!
i=0
until [ "$(grep -c '^new-' "$dir/g3")" -ge 2 ]; do
    i=$((i + 1))
    [ $i -lt 150 ] || fail "after a restart the group's new member did not read the 2 new records: $(head -3 "$dir/g3"); groups: $(curl -s "http://127.0.0.1:$hport/v1/groups")"
    sleep 0.1
done
sleep 1
kill "$g3" 2>/dev/null; wait "$g3" 2>/dev/null || true
[ "$(wc -l < "$dir/g3")" -eq 2 ] || fail "after a restart the new member read $(wc -l < "$dir/g3") records, want the 2 new ones only"
ls "$dir/data/kafka/groups/gw.json" > /dev/null || fail "no DATA/kafka/groups/gw.json"
stop

# API keys: SASL/PLAIN with the key's name and token; rights as for HTTP.
tok_w=$(bin/sluice key new writer --publish orders | sed -n 's/^token: //p')
cat > "$dir/keys.lua" <<EOF
server { kafka_listen = "127.0.0.1:$kport", api_keys = {
  writer = { sha256 = "$(printf %s "$tok_w" | bin/sluice key hash)", publish = { "orders" } },
} }
set "orders" { partitions = 3 }
EOF
start -c "$dir/keys.lua"
sasl="-X security.protocol=SASL_PLAINTEXT -X sasl.mechanisms=PLAIN -X sasl.username=writer"
# shellcheck disable=SC2086
echo "x" | timeout 20 kcat -P -b "$bs" -t orders $sasl -X "sasl.password=$tok_w" ||
    fail "SASL/PLAIN with the key's token could not produce"
# shellcheck disable=SC2086
if echo "y" | timeout 20 kcat -P -b "$bs" -t orders $sasl -X sasl.password=sk_wrong \
        -X message.timeout.ms=4000 > "$dir/sasl" 2>&1; then
    fail "a wrong token produced"
fi
grep -qi "auth" "$dir/sasl" || fail "a wrong token's failure does not say authentication: $(tail -2 "$dir/sasl")"
if timeout 10 kcat -L -b "$bs" -X message.timeout.ms=3000 > "$dir/nosasl" 2>&1 &&
    grep -q 'topic "orders"' "$dir/nosasl"; then
    fail "Metadata answered without SASL on a server with keys"
fi
# shellcheck disable=SC2086
timeout 20 kcat -C -b "$bs" -t orders -o beginning -e $sasl -X "sasl.password=$tok_w" > "$dir/read" 2>&1 || true
grep -qi "authoriz" "$dir/read" || fail "a key without read on orders could fetch it: $(tail -2 "$dir/read")"
stop

# TLS with the HTTP API's certificate and key: SASL_SSL works, every byte
# of large records (file parts, re-read through TLS) comes back; a client
# speaking plaintext gets nothing.
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$dir/key.pem" -out "$dir/cert.pem" -days 2 \
    -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 2> /dev/null || fail "openssl req"
start -c "$dir/keys.lua" --tls-cert "$dir/cert.pem" --tls-key "$dir/key.pem"
grep -q "Kafka protocol on 127.0.0.1:$kport over TLS" "$dir/log" || fail "no TLS in the start-up line: $(cat "$dir/log")"
tls="-X security.protocol=SASL_SSL -X ssl.ca.location=$dir/cert.pem -X sasl.mechanisms=PLAIN -X sasl.username=writer"
/usr/bin/python3 -c '
import sys
for i in range(300):
    sys.stdout.write("%d-%s\n" % (i, "z" * (20000 + i)))
' > "$dir/tls.in"
# shellcheck disable=SC2086
timeout 60 kcat -P -b "$bs" -t orders -p 1 $tls -X "sasl.password=$tok_w" < "$dir/tls.in" ||
    fail "kcat -P over SASL_SSL"
tok_r=$(bin/sluice key new reader --read orders | sed -n 's/^token: //p')
stop
sed -i "s|^} }|  reader = { sha256 = \"$(printf %s "$tok_r" | bin/sluice key hash)\", read = { \"orders\" } },\n} }|" "$dir/keys.lua"
start -c "$dir/keys.lua" --tls-cert "$dir/cert.pem" --tls-key "$dir/key.pem"
# shellcheck disable=SC2086
timeout 60 kcat -C -b "$bs" -t orders -p 1 -o beginning -e -q $tls -X sasl.username=reader \
    -X "sasl.password=$tok_r" > "$dir/tls.out" || fail "kcat -C over SASL_SSL: $(tail -2 "$dir/tls.out")"
grep -- '-zzzz' "$dir/tls.out" | cmp -s - "$dir/tls.in" || fail "records read over TLS differ ($(wc -l < "$dir/tls.out") lines)"
if timeout 10 kcat -L -b "$bs" -X message.timeout.ms=3000 > "$dir/plain" 2>&1 && grep -q 'topic "orders"' "$dir/plain"; then
    fail "a plaintext client got metadata from the TLS listener"
fi
stop

# A listener beyond loopback without keys is refused; check names the line.
if bin/sluice serve --data "$dir/data" --listen "127.0.0.1:$hport" --kafka-listen "0.0.0.0:$kport" \
        > "$dir/open" 2>&1; then
    fail "a non-loopback Kafka listener without keys started"
fi
grep -q "refusing to speak the Kafka protocol on 0.0.0.0" "$dir/open" || fail "refusal unclear: $(cat "$dir/open")"
# A Kafka port already taken: a clear refusal at start, nothing left running.
kport=$(free_port)
/usr/bin/python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen()
open(sys.argv[2], "w").close()
time.sleep(30)' "$kport" "$dir/held" &
holder=$!
i=0
until [ -f "$dir/held" ]; do
    i=$((i + 1))
    [ $i -lt 100 ] || fail "could not hold port $kport"
    sleep 0.1
done
if timeout 20 bin/sluice serve --data "$dir/data" --listen "127.0.0.1:$hport" --kafka-listen "127.0.0.1:$kport" \
        > "$dir/taken" 2>&1; then
    kill "$holder"
    fail "sluice started on a taken Kafka port"
fi
kill "$holder" 2>/dev/null || true
grep -q "cannot start: kafka_listen 127.0.0.1:$kport: .*in use" "$dir/taken" || fail "taken port refusal unclear: $(cat "$dir/taken")"
printf 'server {\n  kafka_listen = "nowhere",\n}\n' > "$dir/bad.lua"
if bin/sluice check "$dir/bad.lua" > "$dir/check" 2>&1; then fail "sluice check took kafka_listen = \"nowhere\""; fi
grep -q "bad.lua:[0-9]*:.*kafka_listen" "$dir/check" || fail "sluice check does not name FILE:LINE: $(cat "$dir/check")"
echo "ok: kcat against sluice's Kafka listener: metadata, byte-identical records, idempotence, schemas, groups, restart, SASL, rights"
