#!/usr/bin/env bash
# tests/integration/test_examples.sh — runs every example of examples/ for
# real, so that none can rot: each folder is copied to a temp dir (its data
# and output paths are relative to its config), served by the real
# bin/sluice on a free port with its endpoints pointed (through the
# environment variables its README names) at an HTTP receiver or the Kafka
# mock, fed the input its README shows, and the routed output is checked:
# bytes in target.file files, requests the receiver got, records kcat reads.
# Every example with a tests.lua also passes `sluice check` and `sluice test`.
#
# Bounded: each wait gives up after seconds; the whole script takes ~30-40 s.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/examples_lib.sh

ce='Content-Type: application/cloudevents+json'

# Copies examples/NAME's config (and schemas) to the temp dir, leaving out
# whatever an earlier manual run left there (data, outputs); prints the
# copy's path.
copy_example() {
  mkdir "$ex_tmp/$1"
  cp "examples/$1/sluice.lua" "$ex_tmp/$1/"
  [[ -d examples/$1/schemas ]] && cp -r "examples/$1/schemas" "$ex_tmp/$1/"
  echo "$ex_tmp/$1"
}

# post PORT SET JSON [HEADER...]: publishes one structured event; prints
# "STATUS BODY".
post() {
  local port=$1 set=$2 json=$3
  shift 3
  local hdr=() h
  for h in "$@"; do hdr+=(-H "$h"); done
  curl -s -o "$ex_tmp/post.body" -w '%{http_code}' -H "$ce" "${hdr[@]}" -d "$json" \
    "http://127.0.0.1:$port/v1/sets/$set/events"
  echo " $(cat "$ex_tmp/post.body")"
}

# Receiver records (JSON lines) whose path is P, one per line: "BODY" or, with
# a second argument, that header's value.
received() {
  python3 - "$1" "$2" "${3:-}" <<'PY'
import json, sys
path, want, header = sys.argv[1:4]
try:
    lines = open(path).read().splitlines()
except FileNotFoundError:
    lines = []
for line in lines:
    r = json.loads(line)
    if r["path"] == want:
        print(r["headers"].get(header, "-") if header else r["body"])
PY
}

# ---- sluice check and sluice test on every example with a config ------------
for cfg in examples/*/sluice.lua; do
  dir=$(dirname "$cfg")
  step "sluice check and sluice test: $dir"
  "$ex_bin" check "$cfg" >/dev/null || fail "sluice check $cfg"
  [[ -f $dir/tests.lua ]] || fail "$dir has no tests.lua"
  out=$("$ex_bin" test "$cfg" "$dir/tests.lua" 2>&1) || fail "sluice test $dir: $out"
  grep -q '^[1-9][0-9]* passed, 0 failed$' <<<"$out" || fail "sluice test $dir: $out"
  [[ -f $dir/README.md ]] || fail "$dir has no README.md"
done

# ---- quickstart: big orders to a file, a note per order, schema refusals ----
step "quickstart"
d=$(copy_example quickstart)
port=$(ex_free_port)
ex_serve "$d" "$port"
r=$(post "$port" orders '{"specversion":"1.0","id":"o1","source":"/shop","type":"order.created","data":{"amount":150,"currency":"EUR"}}')
[[ $r == 200* ]] || fail "quickstart: big order: $r"
r=$(post "$port" orders '{"specversion":"1.0","id":"o2","source":"/shop","type":"order.created","data":{"amount":100,"currency":"EUR"}}')
[[ $r == 200* ]] || fail "quickstart: small order: $r"
r=$(post "$port" orders '{"specversion":"1.0","id":"o3","source":"/shop","type":"order.created","data":{"amount":150}}')
[[ $r == 422*SchemaViolation* ]] || fail "quickstart: an order without currency: $r"
ex_wait 10 "quickstart: two notes in out/order-notes.txt" ex_lines "$d/out/order-notes.txt" 2
ex_wait 10 "quickstart: one big order in out/big-orders.ndjson" ex_lines "$d/out/big-orders.ndjson" 1
ex_wait 10 "quickstart: the rules caught up" ex_caught_up "$port"
[[ $(sort "$d/out/order-notes.txt") == $'order o1: 150 EUR\norder o2: 100 EUR' ]] ||
  fail "quickstart: notes: $(cat "$d/out/order-notes.txt")"
[[ $(wc -l <"$d/out/big-orders.ndjson") == 1 ]] || fail "quickstart: big orders: $(cat "$d/out/big-orders.ndjson")"
grep -q '"id":"o1".*"vip":true' "$d/out/big-orders.ndjson" ||
  fail "quickstart: big order not marked: $(cat "$d/out/big-orders.ndjson")"
ex_stop "$ex_server_pid"

# ---- lanes: overrides, fallback, ppe only where overridden --------------------
step "lanes"
d=$(copy_example lanes)
rx=$ex_tmp/lanes.rx
ex_receiver "$rx"
port=$(ex_free_port)
ex_serve "$d" "$port" BILLING_URL="http://127.0.0.1:$ex_receiver_port/billing" \
  BILLING_FX_URL="http://127.0.0.1:$ex_receiver_port/billing-fx"
order() { echo "{\"specversion\":\"1.0\",\"id\":\"$1\",\"source\":\"/shop\",\"type\":\"order.created\",\"data\":{\"amount\":42}}"; }
for p in "base-1:" "fx-1:X-Sluice-Lane: feature-x" "fy-1:baggage: lane=feature-y" "rc-1:X-Sluice-Lane: release-42"; do
  id=${p%%:*} lane_hdr=${p#*:}
  if [[ -n $lane_hdr ]]; then
    r=$(post "$port" orders "$(order "$id")" "$lane_hdr")
  else
    r=$(post "$port" orders "$(order "$id")")
  fi
  [[ $r == 200*'"accepted":1'* ]] || fail "lanes: publish $id: $r"
done
r=$(post "$port" orders "$(order x-1)" "X-Sluice-Lane: nobody")
[[ $r == 422*UnknownLane* ]] || fail "lanes: an undeclared lane: $r"
ex_wait 10 "lanes: 4 requests at the receiver" ex_lines "$rx" 4
ex_wait 10 "lanes: 3 events in audit.ndjson" ex_lines "$d/audit.ndjson" 3
ex_wait 10 "lanes: the rules caught up" ex_caught_up "$port"
[[ $(wc -l <"$rx") == 4 && $(wc -l <"$d/audit.ndjson") == 3 ]] ||
  fail "lanes: more deliveries than expected: $(cat "$rx" "$d/audit.ndjson")"
billing=$(received "$rx" /billing | python3 -c 'import json,sys; print(" ".join(sorted(json.loads(l)["id"] + ("+preprod" if json.loads(l).get("data",{}).get("preprod") else "") for l in sys.stdin)))')
[[ $billing == "base-1 fy-1 rc-1+preprod" ]] || fail "lanes: production billing got: $billing"
[[ $(received "$rx" /billing-fx | grep -c '"id":"fx-1"') == 1 ]] || fail "lanes: billing-fx got: $(received "$rx" /billing-fx)"
received "$rx" /billing x-sluice-lane | grep -x feature-y >/dev/null || fail "lanes: the fallback delivery has no X-Sluice-Lane"
audit=$(grep -o '"id":"[^"]*"' "$d/audit.ndjson" | sort | tr '\n' ' ')
[[ $audit == '"id":"base-1" "id":"fx-1" "id":"fy-1" ' ]] || fail "lanes: audit.ndjson holds $audit"
# release-42: in 1, delivered 1 (billing's override), unrouted 1 (audit has none)
out=$(SLUICE_SERVER=http://127.0.0.1:$port "$ex_bin" lane list)
grep -Eq '^release-42 +ppe +none +declared +1 +1 +1$' <<<"$out" || fail "lanes: sluice lane list: $out"
grep -Eq '^feature-y +boe +base +declared +1 +2 +0$' <<<"$out" || fail "lanes: sluice lane list: $out"
ex_stop "$ex_server_pid"

# ---- github-webhook: signed deliveries in, two HTTP services out ------------
step "github-webhook"
d=$(copy_example github-webhook)
rx=$ex_tmp/github.rx
ex_receiver "$rx"
port=$(ex_free_port)
secret=it-is-a-secret
ex_serve "$d" "$port" GH_SECRET=$secret DEPLOY_TOKEN=tok-123 \
  DEPLOY_URL="http://127.0.0.1:$ex_receiver_port/deploy" \
  REVIEW_URL="http://127.0.0.1:$ex_receiver_port/review"
# gh EVENT DELIVERY BODYFILE [SIGNATURE]: posts like GitHub; prints "STATUS BODY".
gh() {
  local sig=${4:-$(ex_sign "$secret" "$3")}
  curl -s -o "$ex_tmp/gh.body" -w '%{http_code}' -H 'Content-Type: application/json' \
    -H "X-GitHub-Event: $1" -H "X-GitHub-Delivery: $2" -H "X-Hub-Signature-256: $sig" \
    --data-binary "@$3" "http://127.0.0.1:$port/v1/webhooks/github"
  echo " $(cat "$ex_tmp/gh.body")"
}
printf '%s' '{"ref":"refs/heads/main","after":"9f2c1e","repository":{"full_name":"acme/shop"},"pusher":{"name":"octocat"}}' >"$ex_tmp/push-main.json"
printf '%s' '{"ref":"refs/heads/wip","after":"1111","repository":{"full_name":"acme/shop"},"pusher":{"name":"octocat"}}' >"$ex_tmp/push-wip.json"
printf '%s' '{"action":"opened","number":7,"pull_request":{"title":"Add refunds"}}' >"$ex_tmp/pr.json"
r=$(gh push d-1 "$ex_tmp/push-main.json")
[[ $r == 200*'"id":"d-1"'* ]] || fail "github: signed push: $r"
r=$(gh push d-2 "$ex_tmp/push-wip.json")
[[ $r == 200* ]] || fail "github: push to wip: $r"
r=$(gh pull_request d-3 "$ex_tmp/pr.json")
[[ $r == 200* ]] || fail "github: pull request: $r"
r=$(gh push d-4 "$ex_tmp/push-main.json" "sha256=$(printf '0%.0s' {1..64})")
[[ $r == 401*InvalidSignature* ]] || fail "github: a wrong signature: $r"
r=$(gh push d-5 "$ex_tmp/push-main.json" "$(ex_sign wrong-secret "$ex_tmp/push-main.json")")
[[ $r == 401*InvalidSignature* ]] || fail "github: another secret: $r"
r=$(gh push d-1 "$ex_tmp/push-main.json")
[[ $r == 200*'"duplicate":true'* ]] || fail "github: a redelivery of d-1: $r"
ex_wait 10 "github: 2 requests at the receiver" ex_lines "$rx" 2
stored=$(SLUICE_SERVER=http://127.0.0.1:$port "$ex_bin" tail github | grep -o '"id":"d-[0-9]"' | tr '\n' ' ')
[[ $stored == '"id":"d-1" "id":"d-2" "id":"d-3" ' ]] || fail "github: the set holds $stored"
deploy=$(received "$rx" /deploy)
[[ $deploy == '{"repo": "acme/shop", "sha": "9f2c1e", "by": "octocat", "delivery": "d-1"}' ]] ||
  fail "github: the deploy service got: $deploy"
[[ $(received "$rx" /deploy authorization) == "Bearer tok-123" ]] || fail "github: deploy auth: $(received "$rx" /deploy authorization)"
review=$(received "$rx" /review)
if ! grep -q '"id":"d-3"' <<<"$review" || ! grep -q '"type":"com.github.pull_request"' <<<"$review"; then
  fail "github: the review bot got: $review"
fi
ex_wait 10 "github: the rules caught up" ex_caught_up "$port"
[[ $(wc -l <"$rx") == 2 ]] || fail "github: unexpected requests: $(cat "$rx")"
ex_stop "$ex_server_pid"

# ---- Kafka: the delivery example and the bridge, on one mock cluster ---------
step "kafka-bridge"
ex_kafka_mock orders:2 orders.big:1 orders.big.feature-x:1 orders.audit:1 orders.order.created:1
d=$(copy_example kafka-bridge)
printf '%s\n' 'cust-1|{"amount":150}' 'cust-2|{"amount":20}' |
  timeout 20 kcat -q -P -b "$ex_kafka" -t orders -K '|' || fail "kcat could not produce"
printf '%s\n' 'cust-9|{"amount":500}' |
  timeout 20 kcat -q -P -b "$ex_kafka" -t orders -K '|' -H lane=feature-x || fail "kcat could not produce"
port=$(ex_free_port)
ex_serve "$d" "$port" KAFKA_BROKERS="$ex_kafka"
ex_wait 30 "kafka-bridge: 3 records in orders.audit" ex_kcat_count orders.audit 3
ex_wait 10 "kafka-bridge: 1 record in orders.big" ex_kcat_count orders.big 1
ex_wait 10 "kafka-bridge: 1 record in orders.big.feature-x" ex_kcat_count orders.big.feature-x 1
big=$(timeout 10 kcat -q -C -b "$ex_kafka" -t orders.big -o beginning -e -f '%k %s\n')
[[ $big == 'cust-1 {"amount":150,"vip":true}' ]] || fail "kafka-bridge: orders.big holds: $big"
fx=$(timeout 10 kcat -q -C -b "$ex_kafka" -t orders.big.feature-x -o beginning -e -f '%k %h %s\n')
[[ $fx == 'cust-9 '*'lane=feature-x'*' {"amount":500,"vip":true}' ]] || fail "kafka-bridge: orders.big.feature-x holds: $fx"
audit=$(timeout 10 kcat -q -C -b "$ex_kafka" -t orders.audit -o beginning -e -f '%s\n')
[[ $(grep -c '"type":"shop.order"' <<<"$audit") == 3 ]] || fail "kafka-bridge: orders.audit holds: $audit"
grep -q '"lane":"feature-x".*"amount":500\|"amount":500.*"lane":"feature-x"' <<<"$audit" ||
  fail "kafka-bridge: the feature-x order is not audited with its lane: $audit"
ex_wait 10 "kafka-bridge: the rules caught up" ex_caught_up "$port"
ex_kcat_count orders.big 2 && fail "kafka-bridge: orders.big holds more than the one big base order"
ex_kcat_count orders.audit 4 && fail "kafka-bridge: orders.audit holds more than the 3 orders"
n=$(curl -s "http://127.0.0.1:$port/v1/sets/orders" | python3 -c 'import json,sys; print(json.load(sys.stdin)["events"])')
[[ $n == 3 ]] || fail "kafka-bridge: the set orders holds $n events"
ex_stop "$ex_server_pid"

step "delivery"
d=$(copy_example delivery)
rx=$ex_tmp/delivery.rx
ex_receiver "$rx"
port=$(ex_free_port)
ex_serve "$d" "$port" KAFKA_BROKERS="$ex_kafka" HOOK_TOKEN=hook-tok \
  HOOK_URL="http://127.0.0.1:$ex_receiver_port/orders/{subject}"
r=$(post "$port" orders '{"specversion":"1.0","id":"o1","source":"/shop","type":"order.created","subject":"cust-7","data":{"amount":42}}')
[[ $r == 200* ]] || fail "delivery: publish: $r"
ex_wait 10 "delivery: the webhook got the order" ex_lines "$rx" 1
ex_wait 20 "delivery: orders.order.created holds the order" ex_kcat_count orders.order.created 1
ex_wait 10 "delivery: the rules caught up" ex_caught_up "$port"
[[ $(wc -l <"$rx") == 1 ]] || fail "delivery: the webhook got more than the order: $(cat "$rx")"
[[ $(received "$rx" /orders/cust-7 authorization) == "Bearer hook-tok" ]] || fail "delivery: webhook: $(cat "$rx")"
rec=$(timeout 10 kcat -q -C -b "$ex_kafka" -t orders.order.created -o beginning -e -f '%k %s\n')
[[ $rec == 'cust-7 {"amount":42}' ]] || fail "delivery: orders.order.created holds: $rec"
ex_stop "$ex_server_pid"

# ---- scale-out: three routers on one Kafka-backed set, by its own script ------
# run.sh starts its own 3-broker mock and routers, checks that every order is
# delivered and each partition by its owner, and prints "ok: …" (10-25 s;
# its --takeover round is left to the fault tests).
step "scale-out"
out=$(timeout 90 examples/scale-out/run.sh 2>&1) ||
  fail "scale-out: examples/scale-out/run.sh failed: $(tail -n 40 <<<"$out")"
grep -q '^ok: 60 orders posted through 3 routers on one Kafka-backed set' <<<"$out" ||
  fail "scale-out: no ok line from run.sh: $(tail -n 20 <<<"$out")"

echo "ok: every example checked, tested and run (quickstart, lanes, github-webhook, kafka-bridge, delivery, scale-out)"
