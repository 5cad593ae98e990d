#!/usr/bin/env bash
# tests/integration/test_target_oauth.sh — target.http's auth.oauth (OAuth 2.0
# client credentials, what EventBridge's OAUTH_CLIENT_CREDENTIALS connections
# use) against a token endpoint and a receiver written here in Python (the
# standard library's http.server): the token is fetched once with the client
# id and secret as HTTP basic auth and grant_type=client_credentials plus the
# configured params in a form body, every delivery carries it as a Bearer
# token, a 401 for a revoked token makes sluice fetch a new one and deliver
# again, and a token endpoint that refuses the client leaves the event
# undelivered with the endpoint's answer in the rule's health.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/integration/examples_lib.sh

port=$(ex_free_port)
cat >"$ex_tmp/oauth.py" <<'PY'
import base64, http.server, json, sys, threading
port, logf = int(sys.argv[1]), sys.argv[2]
state = {"n": 0, "revoked": set(), "refuse": False}
lock = threading.Lock()
def log(rec):
    with lock, open(logf, "a") as f:
        f.write(json.dumps(rec) + "\n")
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        body = self.rfile.read(n).decode()
        auth = self.headers.get("Authorization", "")
        if self.path == "/token":
            ok = auth == "Basic " + base64.b64encode(b"cid:s3cret").decode() and not state["refuse"]
            log({"kind": "token", "auth": auth, "body": body, "ctype": self.headers.get("Content-Type")})
            if not ok:
                self.send_response(401); self.end_headers(); self.wfile.write(b'{"error":"invalid_client"}'); return
            with lock:
                state["n"] += 1
                tok = "tok-%d" % state["n"]
            out = json.dumps({"access_token": tok, "token_type": "Bearer", "expires_in": 3600}).encode()
            self.send_response(200); self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out))); self.end_headers(); self.wfile.write(out)
        elif self.path == "/revoke":
            state["revoked"].add(body); self.send_response(200); self.end_headers()
        elif self.path == "/refuse":
            state["refuse"] = True; self.send_response(200); self.end_headers()
        else:
            tok = auth[7:] if auth.startswith("Bearer ") else ""
            bad = tok in state["revoked"] or not tok
            log({"kind": "hook", "auth": auth, "body": body, "status": 401 if bad else 200})
            self.send_response(401 if bad else 200); self.end_headers()
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
PY
python3 "$ex_tmp/oauth.py" "$port" "$ex_tmp/oauth.log" &
ex_pids+=("$!")
ex_wait 10 "the token endpoint did not start" curl -sf -X POST -d x "http://127.0.0.1:$port/revoke"

mkdir -p "$ex_tmp/s"
cat >"$ex_tmp/s/sluice.lua" <<EOF2
set "in" { partitions = 1 }
rule "hook" {
  set = "in",
  retry = { attempts = 5, initial = "50ms", max = "200ms" },
  target = target.http {
    url = "http://127.0.0.1:$port/hook",
    auth = { oauth = { token_url = "http://127.0.0.1:$port/token", client_id = "cid",
                       client_secret = "s3cret", params = "scope=events.write" } },
  },
}
EOF2
sport=$(ex_free_port)
ex_serve "$ex_tmp/s" "$sport"
base="http://127.0.0.1:$sport"
post() {
  curl -sf -H 'Content-Type: application/cloudevents+json' \
    -d "{\"specversion\":\"1.0\",\"id\":\"$1\",\"source\":\"/t\",\"type\":\"t\",\"data\":{\"n\":\"$1\"}}" \
    "$base/v1/sets/in/events" >/dev/null
}
count() { python3 - "$ex_tmp/oauth.log" "$@" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])] if __import__("os").path.exists(sys.argv[1]) else []
kind, status = sys.argv[2], (int(sys.argv[3]) if len(sys.argv) > 3 else None)
print(sum(1 for r in recs if r["kind"] == kind and (status is None or r.get("status") == status)))
PY
}

step "three events go out with one token, fetched by basic auth and a form body"
for i in 1 2 3; do post "e$i"; done
ex_wait 10 "3 deliveries did not arrive" test "$(count hook 200)" -ge 3
python3 - "$ex_tmp/oauth.log" <<'PY' || fail "token request or deliveries not as expected: $(cat "$ex_tmp/oauth.log")"
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
toks = [r for r in recs if r["kind"] == "token"]
hooks = [r for r in recs if r["kind"] == "hook"]
assert len(toks) == 1, toks
assert toks[0]["body"] == "grant_type=client_credentials&scope=events.write", toks[0]
assert toks[0]["ctype"] == "application/x-www-form-urlencoded", toks[0]
assert all(h["auth"] == "Bearer tok-1" for h in hooks), hooks
assert sorted(json.loads(h["body"])["data"]["n"] for h in hooks) == ["e1", "e2", "e3"], hooks
PY

step "a revoked token (401) is replaced and the event delivered with the new one"
curl -sf -X POST -d "tok-1" "http://127.0.0.1:$port/revoke" >/dev/null
post e4
ex_wait 15 "e4 was not delivered with a new token" \
  grep -q '"auth": "Bearer tok-2".*e4' "$ex_tmp/oauth.log"
test "$(count token)" -eq 2 || fail "want 2 token requests, log: $(cat "$ex_tmp/oauth.log")"

step "a token endpoint that refuses the client: nothing delivered, the health says why"
curl -sf -X POST -d "tok-2" "http://127.0.0.1:$port/revoke" >/dev/null
curl -sf -X POST "http://127.0.0.1:$port/refuse" >/dev/null
post e5
ex_wait 15 "the rule's health does not name the token endpoint's refusal" \
  sh -c "curl -s $base/v1/rules | grep -q 'OAuth token endpoint'"
grep -q '"auth": "Bearer tok-2".*e5.*"status": 200' "$ex_tmp/oauth.log" && fail "e5 was delivered with a revoked token"
echo "ok: target.http oauth"
