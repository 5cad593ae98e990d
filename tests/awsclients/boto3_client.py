"""boto3 (Debian's python3-boto3, real SigV4) against a running bin/sluice's
EventBridge API; run by tests/integration/test_aws_api.sh.

Usage: /usr/bin/python3 -I boto3_client.py URL ADMIN_AKID ADMIN_SECRET PUB_AKID PUB_SECRET DIR
  URL     the server (http://127.0.0.1:PORT), which runs with a config file
  ADMIN_* an admin credential of its server.aws block
  PUB_*   a credential with publish = {"default"} only
  DIR     a directory of the test's own (file targets are written there)
  CONFIG  the server's config file (to tell its lines from the API's own in
          a message)

Steps: put_events with Time as a datetime (botocore sends epoch seconds),
Resources and EventBusName as an ARN, stored as CloudEvents with that time
and awsresources; create_event_bus / describe_event_bus / list_event_buses
with NamePrefix and Limit/NextToken paging / delete_event_bus; a rule on a
custom bus whose target is another bus's ARN (the event arrives there as a
CloudEvent with the same id, source, type and data, and only the matching
one; neither bus can be deleted while the rule uses it, both can after); an InputTransformer target to arn:sluice:file:::DIR/… (the file's line
is the template's output); a DeadLetterConfig with an SQS ARN refused in
FailedEntries naming SQS; the publish-only credential may put events on
default but gets AccessDeniedException for put_rule and for put_events on
another bus; an unknown access key id gets UnrecognizedClientException;
TestEventPattern with an event missing mandatory fields gets
ValidationException. Prints "ok: boto3: ..." lines; the first failure prints
"FAIL: boto3: ..." and exits 1. A known sluice bug seen again prints "note:
boto3: KNOWN BUG ..." (SLUICE_AWS_KNOWN_BUGS=1: a failure).
"""
import datetime
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request

import boto3
import botocore.config
import botocore.exceptions

if len(sys.argv) not in (7, 8):
    sys.exit("usage: python3 -I boto3_client.py URL ADMIN_AKID ADMIN_SECRET PUB_AKID PUB_SECRET DIR [CONFIG]")
URL, AK, SK, PAK, PSK, DIR = sys.argv[1:7]
CONFIG = sys.argv[7] if len(sys.argv) > 7 else None
KNOWN_BUGS = os.environ.get("SLUICE_AWS_KNOWN_BUGS", "1") == "1"  # fixed: checked strictly unless =0
REGION, ACCOUNT = "us-east-1", "000000000000"
TAG = "b%d" % os.getpid()
ARN = "arn:aws:events:%s:%s:" % (REGION, ACCOUNT)


def fail(msg):
    print("FAIL: boto3: %s" % msg, flush=True)
    sys.exit(1)


def known(msg):
    """A known sluice bug seen again: a note, or a failure with SLUICE_AWS_KNOWN_BUGS=1."""
    if KNOWN_BUGS:
        fail("KNOWN BUG: " + msg)
    print("note: boto3: KNOWN BUG still there: %s" % msg, flush=True)


def step(what, fn):
    t0 = time.monotonic()
    try:
        detail = fn()
    except SystemExit:
        raise
    except Exception as e:  # a client's exception is a failure of this step
        fail("%s: %s: %s" % (what, type(e).__name__, e))
    print("ok: boto3: %s%s (%d ms)" % (what, " (%s)" % detail if detail else "",
                                       (time.monotonic() - t0) * 1000), flush=True)


def client(akid=AK, secret=SK):
    return boto3.session.Session(aws_access_key_id=akid, aws_secret_access_key=secret,
                                 region_name=REGION).client(
        "events", endpoint_url=URL,
        config=botocore.config.Config(retries={"max_attempts": 1, "mode": "standard"},
                                      connect_timeout=5, read_timeout=30))


EB = client()


def refused(fn, want, what):
    """Calls fn, which must raise a ClientError of type want; returns its message."""
    try:
        out = fn()
    except botocore.exceptions.ClientError as e:
        code = e.response.get("Error", {}).get("Code")
        if code != want:
            fail("%s: want %s, got %s: %s" % (what, want, code, e))
        return e.response.get("Error", {}).get("Message", "")
    fail("%s: want %s, got success: %s" % (what, want, json.dumps(out, default=str)[:300]))


def get(path):
    try:
        with urllib.request.urlopen(URL + path, timeout=10) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return {}
        raise


def events(bus):
    """Every partition's events of set bus (an API-made bus has the server's default partitions)."""
    out = []
    for p in range(int(get("/v1/sets/" + bus).get("partitions") or 1)):
        out += get("/v1/sets/%s/events?partition=%d&offset=0&max=1000" % (bus, p)).get("events", [])
    return out


def wait_for(fn, secs):
    end = time.monotonic() + secs
    while True:
        v = fn()
        if v or time.monotonic() >= end:
            return v
        time.sleep(0.1)


def put_ok(eb, entries):
    out = eb.put_events(Entries=entries)
    ids = [e.get("EventId") for e in out.get("Entries", [])]
    if out.get("FailedEntryCount") != 0 or len(ids) != len(entries) or not all(ids):
        fail("put_events of %d entries: %s" % (len(entries), json.dumps(out, default=str)[:400]))
    return ids


def instant(s):
    return datetime.datetime.fromisoformat(str(s).replace("Z", "+00:00"))


# ---- put_events: Time as a datetime, Resources, EventBusName as an ARN ---------------------

def put_events_shapes():
    when = datetime.datetime(2024, 5, 1, 12, 30, 15, tzinfo=datetime.timezone.utc)
    res = ["arn:aws:s3:::b3-bucket", "arn:aws:ec2:us-east-1:000000000000:instance/i-1"]
    entries = [
        {"Source": "b3.put", "DetailType": "Timed", "Time": when, "Resources": res,
         "Detail": json.dumps({"tag": TAG, "n": 1, "s": "caf\u00e9"}), "EventBusName": ARN + "event-bus/default"},
        {"Source": "b3.put", "DetailType": "Untimed", "Detail": json.dumps({"tag": TAG, "n": 2})},
    ]
    ids = put_ok(EB, entries)
    got = wait_for(lambda: {e["id"]: e for e in events("default") if e.get("id") in ids}
                   if len([e for e in events("default") if e.get("id") in ids]) == 2 else None, 10)
    if not got:
        fail("the 2 events put are not in GET /v1/sets/default/events within 10 s")
    a, b = got[ids[0]], got[ids[1]]
    if (a.get("source"), a.get("type"), a.get("data")) != ("b3.put", "Timed", json.loads(entries[0]["Detail"])):
        fail("stored event is not source/type/data = Source/DetailType/Detail: %s" % json.dumps(a)[:300])
    if instant(a.get("time")) != when:
        fail("Time %s (sent by botocore as epoch seconds) was stored as time %r" % (when.isoformat(), a.get("time")))
    if not isinstance(a.get("awsresources"), str) or json.loads(a["awsresources"]) != res:
        fail("Resources %s stored as awsresources %r, want their JSON text" % (res, a.get("awsresources")))
    if "awsresources" in b:
        fail("an entry without Resources got awsresources %r" % b["awsresources"])
    age = abs((datetime.datetime.now(datetime.timezone.utc) - instant(b.get("time"))).total_seconds())
    if age > 60:
        fail("an entry without Time got time %r, %d s from now" % (b.get("time"), age))
    return "2 entries; time %s, awsresources %s" % (a["time"], a["awsresources"][:40])


# ---- buses ----------------------------------------------------------------------------------

def buses():
    names = ["%s-pg-%d" % (TAG, i) for i in range(5)]
    for n in names:
        out = EB.create_event_bus(Name=n)
        if out.get("EventBusArn") != ARN + "event-bus/" + n:
            fail("create_event_bus %s: EventBusArn %r" % (n, out.get("EventBusArn")))
    refused(lambda: EB.create_event_bus(Name=names[0]), "ResourceAlreadyExistsException",
            "create_event_bus of an existing bus")
    d = EB.describe_event_bus(Name=names[1])
    if d.get("Name") != names[1] or d.get("Arn") != ARN + "event-bus/" + names[1]:
        fail("describe_event_bus %s: %s" % (names[1], json.dumps(d, default=str)[:300]))
    refused(lambda: EB.describe_event_bus(Name=TAG + "-none"), "ResourceNotFoundException",
            "describe_event_bus of an unknown bus")
    pages, seen, token = 0, [], None
    while pages < 10:
        kw = {"NamePrefix": TAG + "-pg-", "Limit": 2}
        if token:
            kw["NextToken"] = token
        out = EB.list_event_buses(**kw)
        got = [b.get("Name") for b in out.get("EventBuses", [])]
        pages += 1
        if len(got) > 2:
            fail("list_event_buses Limit 2 gave %d buses: %s" % (len(got), got))
        seen += got
        token = out.get("NextToken")
        if not token:
            break
    if sorted(seen) != names or pages != 3:
        fail("list_event_buses NamePrefix %s- Limit 2: %d pages of %s, want 3 pages of %s" % (TAG, pages, seen, names))
    out = EB.list_event_buses(NamePrefix=TAG + "-pg-3")
    if [b.get("Name") for b in out.get("EventBuses", [])] != [names[3]]:
        fail("list_event_buses NamePrefix %s: %s" % (names[3], json.dumps(out, default=str)[:300]))
    for n in names:
        EB.delete_event_bus(Name=n)
    out = EB.list_event_buses(NamePrefix=TAG + "-pg-")
    if out.get("EventBuses"):
        fail("list_event_buses after delete_event_bus of all 5: %s" % json.dumps(out, default=str)[:300])
    refused(lambda: EB.delete_event_bus(Name="default"), "ValidationException", "delete_event_bus default")
    return "5 buses, 3 pages of Limit 2, deleted"


# ---- a rule on a custom bus, with another bus as its target ------------------------------------

def bus_to_bus():
    src, dst, rule = TAG + "-src", TAG + "-dst", TAG + "-fwd"
    EB.create_event_bus(Name=src)
    EB.create_event_bus(Name=dst)
    out = EB.put_rule(Name=rule, EventBusName=src, EventPattern=json.dumps({"source": ["b3.fwd"]}))
    if out.get("RuleArn") != ARN + "rule/%s/%s" % (src, rule):
        fail("put_rule on bus %s: RuleArn %r, want %s" % (src, out.get("RuleArn"), ARN + "rule/%s/%s" % (src, rule)))
    out = EB.put_targets(Rule=rule, EventBusName=src, Targets=[{"Id": "bus", "Arn": ARN + "event-bus/" + dst}])
    if out.get("FailedEntryCount") != 0:
        fail("put_targets with an event-bus ARN: %s" % json.dumps(out, default=str)[:300])
    out = EB.list_targets_by_rule(Rule=rule, EventBusName=src)
    if [(t.get("Id"), t.get("Arn")) for t in out.get("Targets", [])] != [("bus", ARN + "event-bus/" + dst)]:
        fail("list_targets_by_rule: %s" % json.dumps(out, default=str)[:300])
    ids = put_ok(EB, [{"Source": "b3.fwd", "DetailType": "Forward Me", "Detail": json.dumps({"tag": TAG, "k": [1, 2]}),
                       "EventBusName": src},
                      {"Source": "b3.stay", "DetailType": "Stay", "Detail": "{}", "EventBusName": ARN + "event-bus/" + src}])
    orig = wait_for(lambda: next((e for e in events(src) if e.get("id") == ids[0]), None), 10)
    if not orig:
        fail("the event put on bus %s is not in set %s" % (src, src))
    hit = wait_for(lambda: next((e for e in events(dst) if e.get("id") == ids[0]), None), 20)
    if not hit:
        fail("the rule on bus %s did not deliver event %s to bus %s within 20 s (it has %d events)"
             % (src, ids[0], dst, len(events(dst))))
    for k in ("id", "source", "type", "data"):
        if hit.get(k) != orig.get(k):
            fail("the event on bus %s differs from the original in %s: %r vs %r" % (dst, k, hit.get(k), orig.get(k)))
    time.sleep(0.5)
    if any(e.get("id") == ids[1] for e in events(dst)):
        fail("an event the rule does not match reached bus %s" % dst)
    # A bus a rule reads, or delivers to, cannot be deleted; once the rule
    # is gone both can.
    msgs = []
    for b in (src, dst):
        msg = refused(lambda: EB.delete_event_bus(Name=b), "ValidationException",
                      "delete_event_bus of bus %s, which rule %s uses" % (b, rule))
        msgs.append(msg)
        # KNOWN BUG: the refusal says 'set "B" is declared by CONFIG:N', but
        # the config file does not declare B (at line N, or anywhere: N is
        # a line of the API's own declarations, DATA/aws/rules.lua in
        # http/aws.h's sl_aws_lua_name()).
        m = re.search(r"declared by (?:\S*/)?%s:(\d+)" % re.escape(os.path.basename(CONFIG or "-")), msg)
        if m:
            lines = open(CONFIG).read().splitlines()
            n = int(m.group(1))
            if b not in (lines[n - 1] if 0 < n <= len(lines) else ""):
                known("delete_event_bus %s answers %r, but line %d of %s (%d lines) does not declare it" %
                      (b, msg, n, CONFIG, len(lines)))
    EB.remove_targets(Rule=rule, EventBusName=src, Ids=["bus"])
    EB.delete_rule(Name=rule, EventBusName=src)
    EB.delete_event_bus(Name=src)
    EB.delete_event_bus(Name=dst)
    left = [b["Name"] for b in EB.list_event_buses(NamePrefix=TAG + "-").get("EventBuses", [])]
    if src in left or dst in left:
        fail("list_event_buses after deleting %s and %s: %s" % (src, dst, left))
    return "event %s on %s, same id/source/type/data; delete_event_bus while in use: %s" % (
        ids[0][-8:], dst, " / ".join(msgs))


# ---- InputTransformer to a file target -----------------------------------------------------

def transformer():
    path = os.path.join(DIR, "b3-transform.jsonl")
    rule = TAG + "-xf"
    EB.put_rule(Name=rule, EventPattern=json.dumps({"source": ["b3.xf"]}))
    tmpl = '{"who": <src>, "n": <n>, "fixed": "yes", "kind": <dt>}'
    out = EB.put_targets(Rule=rule, Targets=[{
        "Id": "file", "Arn": "arn:sluice:file:::" + path,
        "InputTransformer": {"InputPathsMap": {"src": "$.source", "n": "$.detail.n", "dt": "$.detail-type"},
                             "InputTemplate": tmpl}}])
    if out.get("FailedEntryCount") != 0:
        fail("put_targets with an InputTransformer to a file: %s" % json.dumps(out, default=str)[:300])
    put_ok(EB, [{"Source": "b3.xf", "DetailType": "Xf", "Detail": json.dumps({"n": 42})},
                {"Source": "b3.nope", "DetailType": "Xf", "Detail": json.dumps({"n": 1})}])

    def lines():
        try:
            return [l for l in open(path, encoding="utf-8").read().splitlines() if l.strip()]
        except FileNotFoundError:
            return []
    got = wait_for(lines, 20)
    if not got:
        fail("the file target %s got nothing within 20 s" % path)
    time.sleep(0.5)
    got = lines()
    want = {"who": "b3.xf", "n": 42, "fixed": "yes", "kind": "Xf"}
    if len(got) != 1 or json.loads(got[0]) != want:
        fail("file target lines %r, want one line %s" % (got, json.dumps(want)))
    EB.remove_targets(Rule=rule, Ids=["file"])
    EB.delete_rule(Name=rule)
    return got[0]


# ---- DeadLetterConfig with an SQS ARN ------------------------------------------------------

def dlq_sqs():
    rule = TAG + "-dlq"
    EB.put_rule(Name=rule, EventPattern=json.dumps({"source": ["b3.dlq"]}))
    out = EB.put_targets(Rule=rule, Targets=[{
        "Id": "t", "Arn": "arn:sluice:file:::" + os.path.join(DIR, "b3-dlq.jsonl"),
        "DeadLetterConfig": {"Arn": "arn:aws:sqs:us-east-1:000000000000:b3-dlq"}}])
    fe = out.get("FailedEntries") or []
    if out.get("FailedEntryCount") != 1 or len(fe) != 1 or fe[0].get("TargetId") != "t" \
            or "sqs" not in (fe[0].get("ErrorMessage") or "").lower():
        fail("put_targets with DeadLetterConfig on SQS: want FailedEntries naming SQS, got %s"
             % json.dumps(out, default=str)[:300])
    out = EB.list_targets_by_rule(Rule=rule)
    if out.get("Targets"):
        fail("the refused target is listed: %s" % json.dumps(out, default=str)[:300])
    EB.delete_rule(Name=rule)
    return "%s: %s" % (fe[0].get("ErrorCode"), fe[0].get("ErrorMessage"))


# ---- rights: a publish-only credential, an unknown key -----------------------------------------

def rights():
    pub = client(PAK, PSK)
    other = TAG + "-other"
    EB.create_event_bus(Name=other)
    ids = put_ok(pub, [{"Source": "b3.pub", "DetailType": "Pub", "Detail": json.dumps({"tag": TAG})}])
    if not wait_for(lambda: any(e.get("id") == ids[0] for e in events("default")), 10):
        fail("the publish-only credential's event is not on default")
    msg = refused(lambda: pub.put_rule(Name=TAG + "-pubrule", EventPattern='{"source":["x"]}'),
                  "AccessDeniedException", "put_rule with a publish-only credential")
    refused(lambda: pub.put_events(Entries=[{"Source": "b3.pub", "DetailType": "Pub", "Detail": "{}",
                                             "EventBusName": other}]),
            "AccessDeniedException", "put_events on bus %s with publish = {\"default\"}" % other)
    if any(e.get("source") == "b3.pub" for e in events(other)):
        fail("the refused put_events was stored on %s" % other)
    rules = EB.list_rules(NamePrefix=TAG + "-pubrule").get("Rules")
    if rules:
        fail("the refused put_rule made a rule: %s" % rules)
    # publish lets the key see its bus, not the rules on it
    if "default" not in [b.get("Name") for b in pub.list_event_buses().get("EventBuses", [])]:
        fail("a publish-only credential does not see its bus in list_event_buses")
    pub.describe_event_bus(Name="default")
    refused(lambda: pub.list_rules(), "AccessDeniedException",
            "list_rules with a publish-only credential")
    refused(lambda: pub.describe_event_bus(Name=other), "AccessDeniedException",
            "describe_event_bus of a bus the publish-only credential has no right on")
    EB.delete_event_bus(Name=other)
    nobody = client("AKIDNOBODY" + TAG, "whatever")
    refused(lambda: nobody.list_event_buses(), "UnrecognizedClientException", "an unknown access key id")
    refused(lambda: nobody.put_events(Entries=[{"Source": "b3.nobody", "DetailType": "X", "Detail": "{}"}]),
            "UnrecognizedClientException", "put_events with an unknown access key id")
    if any(e.get("source") == "b3.nobody" for e in events("default")):
        fail("put_events with an unknown access key id was stored")
    return "put_rule: " + msg[:80]


def test_pattern_validation():
    full = {"id": "1", "account": ACCOUNT, "source": "b3", "time": "2024-01-01T00:00:00Z",
            "region": REGION, "detail-type": "T", "detail": {}}
    out = EB.test_event_pattern(EventPattern='{"source":["b3"]}', Event=json.dumps(full))
    if out.get("Result") is not True:
        fail("test_event_pattern of a full event: %s" % out)
    for k in ("id", "account", "source", "time", "region", "detail-type"):
        ev = dict(full)
        del ev[k]
        msg = refused(lambda: EB.test_event_pattern(EventPattern='{"detail":{}}', Event=json.dumps(ev)),
                      "ValidationException", "test_event_pattern of an event without %s" % k)
        if k not in msg:
            fail("test_event_pattern of an event without %s: the message does not name it: %s" % (k, msg))
    refused(lambda: EB.test_event_pattern(EventPattern='{"source":["b3"]}', Event='{"source":"b3"}'),
            "ValidationException", "test_event_pattern of an event with only source")
    return "each of the 6 mandatory fields missing -> ValidationException naming it"


step("put_events: Time as a datetime, Resources, EventBusName as an ARN", put_events_shapes)
step("create/describe/list (NamePrefix, Limit/NextToken)/delete event buses", buses)
step("a rule on a custom bus delivering to another bus (event-bus ARN target)", bus_to_bus)
step("InputTransformer to an arn:sluice:file target", transformer)
step("DeadLetterConfig with an SQS ARN refused in FailedEntries", dlq_sqs)
step("publish-only credential; unknown access key id", rights)
step("TestEventPattern with mandatory fields missing", test_pattern_validation)
