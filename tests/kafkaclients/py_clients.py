"""Python Kafka clients nobody here wrote against a running bin/sluice; run by
tests/integration/test_kafka_clients.sh.

Usage: /usr/bin/python3 -I py_clients.py kafka-python|confluent-kafka HOST:PORT
  (-I: the repository's kafka/ folder must not shadow kafka-python). Env
  KAFKA_DEBUG=1 logs the client's protocol traffic on stderr.

Steps, each bounded in time: the admin creates a 3-partition topic; a
producer (kafka-python acks=all; confluent-kafka enable.idempotence) sends
keyed records with headers; a consumer reads them back byte-identical (key,
value, headers), in order per key; two members of one group (one thread
each) share the partitions (disjoint, both non-empty), read what is produced
after they settle, commit, and the committed offsets are the partitions'
ends (KafkaAdminClient.list_consumer_group_offsets / consumer.committed);
the admin creates a topic with 3 partitions, sees it in metadata, deletes it
and sees it gone. Prints "ok: CLIENT: ..." lines with timings; the first
failure prints "FAIL: CLIENT: ..." and exits 1.
"""
import logging
import os
import sys
import threading
import time

CLIENT = sys.argv[1] if len(sys.argv) > 1 else ""
if CLIENT not in ("kafka-python", "confluent-kafka") or len(sys.argv) != 3:
    sys.exit("usage: python3 -I py_clients.py kafka-python|confluent-kafka HOST:PORT")
BS = sys.argv[2]
RUN = os.getpid()
DEBUG = bool(os.environ.get("KAFKA_DEBUG"))
N, M = 300, 120


def fail(msg):
    print("FAIL: %s: %s" % (CLIENT, msg), flush=True)
    os._exit(1)  # member threads may still be polling


def step(what, fn):
    t0 = time.monotonic()
    try:
        detail = fn()
    except SystemExit:
        raise
    except Exception as e:  # a client's exception is a failure of this step
        fail("%s: %s: %s" % (what, type(e).__name__, e))
    print("ok: %s: %s%s (%d ms)" % (CLIENT, what, " (%s)" % detail if detail else "",
                                    (time.monotonic() - t0) * 1000), flush=True)


def wait_for(cond, seconds, interval=0.05):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(interval)
    return cond()


def records(n, tag):
    """Binary keys, values and headers: 0x00 and 0xff, UTF-8, an empty value,
    an empty header value, sizes up to ~3 KiB."""
    out = []
    for i in range(n):
        key = b"%s-k%d-" % (tag, i % 11) + bytes([0, 0xFF, i & 0xFF])
        if i % 50 == 7:
            value = b""
        else:
            value = (b"%s v%d " % (tag, i) + "\u00e9\u20ac ".encode() + bytes([0, 1, 0xFE, 0xFF]) +
                     bytes([i & 0xFF]) * ((i * 37) % 3000))
        headers = [("h1", b"one-%d" % i), ("bin", bytes([0, 0xFF, 0x7F, i & 0xFF])), ("empty", b"")]
        out.append((key, value, headers))
    return out


def canon(rec):
    key, value, headers = rec
    hs = ",".join("%s=%s" % (h, "null" if v is None else bytes(v).hex())
                  for h, v in sorted(headers or [], key=lambda x: x[0]))
    return "%s|%s|%s" % ("null" if key is None else key.hex(), "null" if value is None else value.hex(), hs)


def same_records(want, got, what):
    w = sorted(canon(r) for r in want)
    g = sorted(canon(r) for r in got)
    if len(w) != len(g):
        fail("%s: read back %d records, want %d" % (what, len(g), len(w)))
    for a, b in zip(w, g):
        if a != b:
            fail("%s: records differ from those produced; first: want %s, got %s" % (what, a[:200], b[:200]))


def check_order(sent, got_in_order):
    """Records of one key (one partition) come back in the order produced."""
    by_key = {}
    for k, v, _ in got_in_order:
        by_key.setdefault(k, []).append(v)
    for k, vals in by_key.items():
        if vals != [v for kk, v, _ in sent if kk == k]:
            fail("records of key %s read back out of the order produced" % k.hex())


# --- kafka-python -----------------------------------------------------------

class KafkaPython:
    def __init__(self):
        import kafka  # noqa: F401  (-I keeps the repository's kafka/ out)
        from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
        from kafka.admin import NewTopic
        from kafka.structs import OffsetAndMetadata
        if not os.path.dirname(kafka.__file__).startswith("/usr/"):
            fail("imported kafka from %s, not kafka-python (run with python3 -I)" % kafka.__file__)
        self.version = kafka.__version__
        self.K, self.C, self.P, self.TP = KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
        self.NewTopic, self.OAM = NewTopic, OffsetAndMetadata
        self.common = dict(bootstrap_servers=[BS], request_timeout_ms=20000, client_id="sluice-kafka-python-test")
        self.admin = KafkaAdminClient(**self.common)

    def create(self, topic, parts):
        r = self.admin.create_topics([self.NewTopic(topic, num_partitions=parts, replication_factor=1)],
                                     timeout_ms=10000)
        errs = [(t[0], t[1]) for t in r.topic_errors if t[1] != 0]
        if errs:
            fail("create_topics(%s) answered errors %s" % (topic, errs))

    def create_again_error(self, topic):
        from kafka.errors import KafkaError
        try:
            r = self.admin.create_topics([self.NewTopic(topic, num_partitions=3, replication_factor=1)],
                                         timeout_ms=10000)
        except KafkaError as e:  # kafka-python raises the topic's error
            return getattr(e, "errno", repr(e))
        return r.topic_errors[0][1]

    def partitions(self, topic):
        md = self.admin.describe_topics([topic])
        if len(md) != 1 or md[0]["error_code"] != 0:
            fail("metadata of %s: %s" % (topic, md))
        return sorted((p["partition"], p["leader"]) for p in md[0]["partitions"])

    def list_topics(self):
        return self.admin.list_topics()

    def delete(self, topic):
        r = self.admin.delete_topics([topic], timeout_ms=10000)
        errs = [e for e in r.topic_error_codes if e[1] != 0]
        if errs:
            fail("delete_topics(%s) answered errors %s" % (topic, errs))

    def ends(self, topic):
        c = self.C(**self.common)
        try:
            tps = [self.TP(topic, p) for p in range(3)]
            return {tp.partition: o for tp, o in c.end_offsets(tps).items()}
        finally:
            c.close()

    def produce(self, topic, recs):
        p = self.P(acks="all", linger_ms=5, retries=3, max_in_flight_requests_per_connection=1, **self.common)
        futs = [p.send(topic, key=k, value=v, headers=h) for k, v, h in recs]
        p.flush(timeout=30)
        for f in futs:
            f.get(timeout=30)  # raises the broker's error
        p.close(timeout=10)

    def consumer(self, group, topic, **kw):
        c = self.C(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                   session_timeout_ms=10000, heartbeat_interval_ms=300, max_poll_interval_ms=20000,
                   fetch_max_wait_ms=200, **self.common, **kw)
        c.subscribe([topic])
        return c

    def poll(self, c):
        """[(partition, offset, (key, value, headers))]"""
        out = []
        for tp, msgs in c.poll(timeout_ms=200).items():
            for m in msgs:
                out.append((tp.partition, m.offset, (m.key, m.value, list(m.headers))))
        return out

    def assignment(self, c):
        return sorted(tp.partition for tp in c.assignment())

    def commit(self, c, topic, offsets):
        c.commit({self.TP(topic, p): self.OAM(o, None) for p, o in offsets.items()})

    def committed(self, group, topic):
        got = self.admin.list_consumer_group_offsets(group)
        return {tp.partition: om.offset for tp, om in got.items() if tp.topic == topic}

    def close(self, c):
        c.close(autocommit=False)

    def done(self):
        self.admin.close()


# --- confluent-kafka --------------------------------------------------------

class Confluent:
    def __init__(self):
        import confluent_kafka
        from confluent_kafka import Consumer, Producer, TopicPartition
        from confluent_kafka.admin import AdminClient, NewTopic
        self.version = "%s (librdkafka %s)" % (confluent_kafka.version()[0], confluent_kafka.libversion()[0])
        self.KE = confluent_kafka.KafkaError
        self.C, self.P, self.TP, self.NewTopic = Consumer, Producer, TopicPartition, NewTopic
        self.common = {"bootstrap.servers": BS, "client.id": "sluice-confluent-test", "socket.timeout.ms": 20000}
        if DEBUG:
            self.common["debug"] = "protocol,broker,cgrp,topic,msg"
        self.admin = AdminClient(dict(self.common))

    def _futures(self, fs):
        for f in fs.values():
            f.result(timeout=20)  # raises KafkaException with the broker's error

    def create(self, topic, parts):
        self._futures(self.admin.create_topics([self.NewTopic(topic, num_partitions=parts, replication_factor=1)],
                                               operation_timeout=10, request_timeout=20))

    def create_again_error(self, topic):
        fs = self.admin.create_topics([self.NewTopic(topic, num_partitions=3, replication_factor=1)],
                                      request_timeout=20)
        try:
            fs[topic].result(timeout=20)
        except Exception as e:
            return e.args[0].code() if e.args and hasattr(e.args[0], "code") else repr(e)
        return 0

    def partitions(self, topic):
        md = self.admin.list_topics(topic=topic, timeout=20).topics.get(topic)
        if md is None or md.error is not None:
            fail("metadata of %s: %s" % (topic, md and md.error))
        return sorted((p.id, p.leader) for p in md.partitions.values())

    def list_topics(self):
        return list(self.admin.list_topics(timeout=20).topics)

    def delete(self, topic):
        self._futures(self.admin.delete_topics([topic], operation_timeout=10, request_timeout=20))

    def ends(self, topic):
        c = self.C(dict(self.common, **{"group.id": "sluice-watermarks-%d" % RUN}))
        try:
            return {p: c.get_watermark_offsets(self.TP(topic, p), timeout=20)[1] for p in range(3)}
        finally:
            c.close()

    def produce(self, topic, recs, **conf):
        p = self.P(dict(self.common, **{"enable.idempotence": True, "acks": "all", "linger.ms": 5,
                                        "message.timeout.ms": 30000}, **conf))
        errs = []

        def report(err, msg):
            if err is not None:
                errs.append(err)
        for k, v, h in recs:
            p.produce(topic, key=k, value=v, headers=h, on_delivery=report)
            p.poll(0)
        left = p.flush(30)
        if left:
            fail("%d records not delivered within 30 s" % left)
        if errs:
            fail("delivery failed: %s" % errs[:3])

    def consumer(self, group, topic, **kw):
        c = self.C(dict(self.common, **{"group.id": group, "auto.offset.reset": "earliest",
                                        "enable.auto.commit": False, "session.timeout.ms": 10000,
                                        "heartbeat.interval.ms": 300, "max.poll.interval.ms": 20000,
                                        "fetch.wait.max.ms": 200}))
        c.subscribe([topic])
        return c

    def poll(self, c):
        out = []
        for m in c.consume(num_messages=500, timeout=0.2):
            if m.error():
                if m.error().code() == self.KE._PARTITION_EOF:
                    continue
                fail("consumer error: %s" % m.error())
            out.append((m.partition(), m.offset(), (m.key(), m.value(), list(m.headers() or []))))
        return out

    def assignment(self, c):
        return sorted(tp.partition for tp in c.assignment())

    def commit(self, c, topic, offsets):
        c.commit(offsets=[self.TP(topic, p, o) for p, o in offsets.items()], asynchronous=False)

    def committed(self, group, topic):
        c = self.C(dict(self.common, **{"group.id": group}))
        try:
            return {tp.partition: tp.offset for tp in c.committed([self.TP(topic, p) for p in range(3)], timeout=20)}
        finally:
            c.close()

    def close(self, c):
        c.close()

    def done(self):
        pass


def main():
    if DEBUG:
        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
    try:
        cl = KafkaPython() if CLIENT == "kafka-python" else Confluent()
    except Exception as e:
        fail("connecting its admin client to %s: %s: %s" % (BS, type(e).__name__, e))
    print("%s %s" % (CLIENT, cl.version), flush=True)
    topic = "%s-data-%d" % ("kpy" if CLIENT == "kafka-python" else "ckf", RUN)
    sent = records(N, b"a")
    how = "acks=all" if CLIENT == "kafka-python" else "enable.idempotence"

    def create_data():
        cl.create(topic, 3)
        parts = cl.partitions(topic)
        if parts != [(0, 0), (1, 0), (2, 0)]:
            fail("metadata of %s: (partition, leader) %s, want 3 partitions led by broker 0" % (topic, parts))
    step("created topic %s with 3 partitions" % topic, create_data)

    def produce():
        cl.produce(topic, sent)
        ends = cl.ends(topic)
        if sum(ends.values()) != N:
            fail("after producing the partitions hold %s, want %d records in all" % (ends, N))
        if sum(1 for e in ends.values() if e) < 2:
            fail("keys landed on fewer than 2 partitions: %s" % ends)
        return " ".join("p%d:%d" % kv for kv in sorted(ends.items()))
    step("producer (%s) sent %d keyed records with headers" % (how, N), produce)

    def read_back():
        c = cl.consumer("%s-read-%d" % (CLIENT, RUN), topic)
        got, last = [], {}
        end = time.monotonic() + 30
        while len(got) < N and time.monotonic() < end:
            for p, o, rec in cl.poll(c):
                if p in last and o <= last[p]:
                    fail("consumer read partition %d out of order: offset %d after %d" % (p, o, last[p]))
                last[p] = o
                got.append(rec)
        for _ in range(3):  # anything beyond N shows as a count mismatch
            got.extend(r for _, _, r in cl.poll(c))
        cl.close(c)
        same_records(sent, got, "consumer")
        check_order(sent, got)
    step("consumer read the %d records back byte-identical (key, value, headers)" % N, read_back)

    def group():
        gid = "%s-group-%d" % (CLIENT, RUN)
        stop = threading.Event()
        members = []
        lock = threading.Lock()

        def member(m):
            try:
                c = cl.consumer(gid, topic)
                m["c"] = c
                while not stop.is_set():
                    recs = cl.poll(c)
                    m["assigned"] = cl.assignment(c)
                    if not recs:
                        continue
                    offs = {}
                    for p, o, rec in recs:
                        if p not in m["assigned"]:
                            m["wrong"] = p
                        offs[p] = max(offs.get(p, 0), o + 1)
                        with lock:
                            m["seen"].append((p, o, rec))
                    cl.commit(c, topic, offs)
                cl.close(c)
                m["closed"] = True
            except Exception as e:
                m["error"] = "%s: %s" % (type(e).__name__, e)

        for name in ("m1", "m2"):
            m = {"name": name, "assigned": [], "seen": [], "wrong": None, "error": None, "closed": False}
            members.append(m)
            threading.Thread(target=member, args=(m,), daemon=True).start()

        def errors():
            for m in members:
                if m["error"]:
                    fail("member %s: %s" % (m["name"], m["error"]))

        def split():
            errors()
            a, b = members[0]["assigned"], members[1]["assigned"]
            return bool(a) and bool(b) and sorted(a + b) == [0, 1, 2]
        if not wait_for(split, 40):
            fail("the two members did not share the 3 partitions within 40 s: m1 %s, m2 %s"
                 % (members[0]["assigned"], members[1]["assigned"]))
        shares = " ".join("%s=%s" % (m["name"], m["assigned"]) for m in members)
        start = cl.ends(topic)
        more = records(M, b"b")
        cl.produce(topic, more)
        ends = cl.ends(topic)
        if sum(ends.values()) != N + M:
            fail("topic holds %s, want %d records" % (ends, N + M))

        def covered():
            errors()
            with lock:
                return len({(p, o) for m in members for p, o, _ in m["seen"]})
        if not wait_for(lambda: covered() >= N + M, 40):
            fail("the group read %d distinct records, want %d (m1 %d, m2 %d)"
                 % (covered(), N + M, len(members[0]["seen"]), len(members[1]["seen"])))
        for m in members:
            if m["wrong"] is not None:
                fail("member %s got a record of partition %d, not of its share %s" % (m["name"], m["wrong"], m["assigned"]))
            grew = [p for p in m["assigned"] if ends[p] > start[p]]
            if grew and not any(o >= start[p] for p, o, _ in m["seen"]):
                fail("member %s (share %s) read none of the records produced after the group settled"
                     % (m["name"], m["assigned"]))
        with lock:
            uniq = {(p, o): rec for m in members for p, o, rec in m["seen"]}
        same_records(sent + more, list(uniq.values()), "group")
        committed = {}
        wait_for(lambda: committed.update(cl.committed(gid, topic)) or committed == ends, 10, 0.1)
        if committed != ends:
            fail("committed offsets %s, want the ends %s" % (committed, ends))
        stop.set()
        if not wait_for(lambda: all(m["closed"] or m["error"] for m in members), 30):
            fail("the members did not close within 30 s")
        errors()
        after = cl.committed(gid, topic)
        if after != ends:
            fail("after the members left the committed offsets are %s, want %s" % (after, ends))
        return "%s; committed %s" % (shares, " ".join("p%d:%d" % kv for kv in sorted(committed.items())))
    step("two group members shared the 3 partitions, read everything, committed", group)

    def admin():
        t = "%s-admin-%d" % ("kpy" if CLIENT == "kafka-python" else "ckf", RUN)
        cl.create(t, 3)
        err = cl.create_again_error(t)
        if err != 36:  # TOPIC_ALREADY_EXISTS
            fail("creating %s a second time answered %r, want 36 (TOPIC_ALREADY_EXISTS)" % (t, err))
        if t not in cl.list_topics():
            fail("the topic listing does not name %s: %s" % (t, cl.list_topics()))
        parts = cl.partitions(t)
        if parts != [(0, 0), (1, 0), (2, 0)]:
            fail("metadata of %s: (partition, leader) %s, want 3 partitions led by broker 0" % (t, parts))
        cl.delete(t)
        if not wait_for(lambda: t not in cl.list_topics(), 10, 0.1):
            fail("%s is still listed 10 s after delete_topics" % t)
    step("admin created a 3-partition topic, listed it, deleted it, saw it gone", admin)

    def zstd():
        t = "ckf-zstd-%d" % RUN
        cl.create(t, 3)
        recs = records(200, b"z")
        cl.produce(t, recs, **{"compression.type": "zstd"})
        c = cl.consumer("ckf-zstd-%d" % RUN, t)
        got = []
        end = time.monotonic() + 30
        while len(got) < len(recs) and time.monotonic() < end:
            got.extend(r for _, _, r in cl.poll(c))
        cl.close(c)
        same_records(recs, got, "zstd consumer")
        check_order(recs, got)
    if CLIENT == "confluent-kafka":
        step("idempotent zstd-compressed records read back byte-identical", zstd)
    cl.done()


main()
