"""TestEventPattern parity with the pattern engine's own table: every case of
tests/unit/pattern_cases.h (the table tests/unit/test_pattern.c checks
rules/pattern.c against), as build/rel/tools/pattern_cases prints it, goes
through the EventBridge API's TestEventPattern (signed by botocore) and
through POST /v1/patterns/test, and both must answer the table's "match".
Run by tests/integration/test_aws_api.sh.

Usage: pattern_cases | /usr/bin/python3 -I pattern_parity.py URL AKID SECRET

TestEventPattern requires EventBridge's mandatory fields (id, account,
source, time, region, detail-type) in the event: those an event lacks are
added with fixed values, into the event's JSON text (the rest of the text is
sent as it is: numbers keep their spelling, 3.0e2 is not 300). A case is
left out of TestEventPattern, and counted, when its pattern names at its top
(or in a top-level $or) a field that had to be added, or when its event is
not a JSON object; POST /v1/patterns/test gets every case with the event as
the table has it, and those with the fields added too. Prints one "ok:
parity: ..." line; the first mismatches (at most 10) print "FAIL: parity:
..." with the case and both answers, and the script exits 1. A mismatch of
the known bug described below prints a "note: parity: KNOWN BUG ..." line
instead (SLUICE_AWS_KNOWN_BUGS=1: a failure).
"""
import http.client
import json
import os
import sys
import urllib.parse

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

if len(sys.argv) != 4:
    sys.exit("usage: pattern_cases | python3 -I pattern_parity.py URL AKID SECRET")
URL, AKID, SECRET = sys.argv[1:]
U = urllib.parse.urlsplit(URL)
MANDATORY = {"id": "11111111-2222-3333-4444-555555555555", "account": "000000000000",
             "source": "parity.test", "time": "2024-01-01T00:00:00Z", "region": "us-east-1",
             "detail-type": "Parity"}
CRED = Credentials(AKID, SECRET)
conn = http.client.HTTPConnection(U.hostname, U.port, timeout=10)


def post(path, body, headers):
    """POST on the kept-alive connection (reconnects once if the server closed it)."""
    for attempt in (0, 1):
        try:
            conn.request("POST", path, body=body, headers=headers)
            r = conn.getresponse()
            return r.status, r.read()
        except (http.client.HTTPException, ConnectionError):
            conn.close()
            if attempt:
                raise
    raise AssertionError("unreachable")


def test_event_pattern(pattern, event):
    body = json.dumps({"EventPattern": pattern, "Event": event}).encode()
    req = AWSRequest(method="POST", url=URL + "/", data=body,
                     headers={"Content-Type": "application/x-amz-json-1.1",
                              "X-Amz-Target": "AWSEvents.TestEventPattern"})
    SigV4Auth(CRED, "events", "us-east-1").add_auth(req)
    st, b = post("/", body, dict(req.headers.items()))
    try:
        j = json.loads(b)
    except ValueError:
        j = None
    if st == 200 and isinstance(j, dict) and isinstance(j.get("Result"), bool):
        return j["Result"]
    return "%d %s" % (st, b[:200].decode("utf-8", "replace"))


def patterns_test(pattern, event):
    body = json.dumps({"pattern": pattern, "event": event}).encode()
    st, b = post("/v1/patterns/test", body, {"Content-Type": "application/json"})
    try:
        j = json.loads(b)
    except ValueError:
        j = None
    if st == 200 and isinstance(j, dict) and isinstance(j.get("match"), bool):
        return j["match"]
    return "%d %s" % (st, b[:200].decode("utf-8", "replace"))


def top_names(p):
    """The field names a pattern tests at its top, $or branches included."""
    out = set()
    if isinstance(p, dict):
        for k, v in p.items():
            if k == "$or" and isinstance(v, list):
                for b in v:
                    out |= top_names(b)
            else:
                out.add(k)
    return out


def with_fields(text, names):
    """The event's JSON text with "name": value members added after its '{'."""
    at = text.index("{") + 1
    add = ",".join("%s:%s" % (json.dumps(n), json.dumps(MANDATORY[n])) for n in names)
    rest = text[at:]
    sep = "" if rest.strip().startswith("}") else ","
    return text[:at] + add + sep + rest


dec = json.JSONDecoder()
cases = []
for n, line in enumerate(sys.stdin, 1):
    line = line.rstrip("\n")
    if not line:
        continue
    # {"pattern":P,"event":E,"match":B}: P and E are kept as the texts they are.
    head1, head2 = '{"pattern":', ',"event":'
    if not line.startswith(head1):
        sys.exit("FAIL: parity: line %d is not {\"pattern\":...}: %s" % (n, line[:100]))
    _, pend = dec.raw_decode(line, len(head1))
    pattern = line[len(head1):pend]
    if not line.startswith(head2, pend):
        sys.exit("FAIL: parity: line %d: no \"event\" after the pattern" % n)
    _, eend = dec.raw_decode(line, pend + len(head2))
    event = line[pend + len(head2):eend]
    tail = json.loads("{" + line[eend + 1:])
    cases.append((n, pattern, event, tail["match"]))
if len(cases) < 100:
    sys.exit("FAIL: parity: only %d cases on stdin (want the whole table)" % len(cases))

def has_duplicates(text):
    dup = []

    def hook(pairs):
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            dup.append(True)
        return dict(pairs)
    json.loads(text, object_pairs_hook=hook)
    return bool(dup)


KNOWN_BUGS = os.environ.get("SLUICE_AWS_KNOWN_BUGS", "1") == "1"  # fixed: checked strictly unless =0
bad, sent, skipped_named, skipped_shape, added, known = [], 0, 0, 0, 0, []
for n, pattern, event, want in cases:
    got = patterns_test(pattern, event)
    if got != want:
        bad.append("case %d: POST /v1/patterns/test %s on %s: %r, want %r" % (n, pattern, event, got, want))
    ev = json.loads(event)
    if not isinstance(ev, dict):
        skipped_shape += 1
        continue
    missing = [k for k in MANDATORY if k not in ev]
    if set(missing) & top_names(json.loads(pattern)):
        skipped_named += 1
        continue
    full = with_fields(event, missing) if missing else event
    added += bool(missing)
    sent += 1
    got = test_event_pattern(pattern, full)
    if got != want:
        why = "case %d: TestEventPattern %s on %s: %r, want %r" % (n, pattern, full, got, want)
        # KNOWN BUG: TestEventPattern refuses an event with a repeated
        # member name ("Parameter Event is not valid: not a JSON object.":
        # http/aws_events.c parses it with JSON_REJECT_DUPLICATES) where the
        # pattern engine, and so a rule, matches it. Noted, not failed,
        # unless SLUICE_AWS_KNOWN_BUGS=1.
        if has_duplicates(full) and not KNOWN_BUGS:
            known.append(why)
        else:
            bad.append(why)
    got2 = patterns_test(pattern, full)
    if got2 != want:
        bad.append("case %d: POST /v1/patterns/test %s on %s: %r, want %r" % (n, pattern, full, got2, want))
if bad:
    for b in bad[:10]:
        print("FAIL: parity: " + b[:600])
    print("FAIL: parity: %d mismatches in %d cases" % (len(bad), len(cases)))
    sys.exit(1)
for k in known:
    print("note: parity: KNOWN BUG still there (an event with a repeated member name; "
          "SLUICE_AWS_KNOWN_BUGS=1 fails on it): " + k[:400])
print("ok: parity: %d cases of tests/unit/pattern_cases.h: POST /v1/patterns/test agrees on all; "
      "TestEventPattern on %d (%d with mandatory fields added), left out %d whose pattern names a "
      "field that had to be added and %d whose event is not an object" %
      (len(cases), sent, added, skipped_named, skipped_shape))
