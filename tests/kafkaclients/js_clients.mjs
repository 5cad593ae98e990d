// kafkajs (a Kafka client nobody here wrote) against a running bin/sluice;
// run by tests/integration/test_kafka_clients.sh.
//
// Usage: node js_clients.mjs HOST:PORT NPM_DIR
//   NPM_DIR holds node_modules/kafkajs (the version tests/kafkaclients/
//   package.json pins). Env KAFKAJS_DEBUG=1 logs kafkajs at DEBUG on stderr.
//
// Steps, each bounded in time: the admin creates a 3-partition topic; an
// idempotent producer (acks -1) sends keyed records with headers; a consumer
// reads them back byte-identical (key, value, headers), in order per
// partition; two members of one group share the partitions (disjoint, both
// non-empty), read what is produced after they settle, commit, and the
// committed offsets are the partitions' ends; a GZIP producer's send is
// rejected with UNSUPPORTED_COMPRESSION_TYPE and stores nothing; the admin
// creates a topic with 3 partitions, sees it in metadata, deletes it and sees
// it gone. Prints "ok: kafkajs: ..." lines with timings; the first failure
// prints "FAIL: kafkajs: ..." and exits 1.
import { createRequire } from 'node:module';
import path from 'node:path';

const [bootstrap, npmDir] = process.argv.slice(2);
if (!bootstrap || !npmDir) {
  console.error('usage: node js_clients.mjs HOST:PORT NPM_DIR');
  process.exit(2);
}
const require = createRequire(path.resolve(npmDir, 'node_modules') + '/');
const { Kafka, logLevel, CompressionTypes } = require('kafkajs');
const version = require('kafkajs/package.json').version;
if (version !== '2.2.4') fail(`kafkajs ${version} is installed in ${npmDir}, want 2.2.4`);

const run = process.pid;
const kafka = new Kafka({
  clientId: 'sluice-kafkajs-test',
  brokers: [bootstrap],
  connectionTimeout: 5000,
  requestTimeout: 15000,
  retry: { retries: 3, initialRetryTime: 100, maxRetryTime: 1000 },
  logLevel: process.env.KAFKAJS_DEBUG ? logLevel.DEBUG : logLevel.NOTHING,
});

function fail(msg) {
  console.log(`FAIL: kafkajs: ${msg}`);
  process.exit(1);
}

// within(ms, what, promise): the promise's value, or FAIL when it takes
// longer than ms or rejects.
async function within(ms, what, p) {
  let timer;
  const t = new Promise((_, rej) => {
    timer = setTimeout(() => rej(new Error(`timed out after ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, t]);
  } catch (e) {
    fail(`${what}: ${e && e.stack ? e.stack.split('\n').slice(0, 3).join(' | ') : e}`);
  } finally {
    clearTimeout(timer);
  }
}

async function step(what, fn) {
  const t0 = Date.now();
  const detail = await fn();
  console.log(`ok: kafkajs: ${what}${detail ? ` (${detail})` : ''} (${Date.now() - t0} ms)`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Records with binary keys, values and headers: bytes 0x00 and 0xff, UTF-8,
// an empty value, an empty header value, sizes up to ~3 KiB.
function records(n, tag) {
  const out = [];
  for (let i = 0; i < n; i++) {
    const key = Buffer.concat([Buffer.from(`${tag}-k${i % 11}-`), Buffer.from([0, 0xff, i & 0xff])]);
    const value = i % 50 === 7
      ? Buffer.alloc(0)
      : Buffer.concat([Buffer.from(`${tag} v${i} \u00e9\u20ac `), Buffer.from([0, 1, 0xfe, 0xff]),
        Buffer.alloc((i * 37) % 3000, i & 0xff)]);
    const headers = {
      h1: Buffer.from(`one-${i}`),
      bin: Buffer.from([0, 0xff, 0x7f, i & 0xff]),
      empty: Buffer.alloc(0),
    };
    out.push({ key, value, headers });
  }
  return out;
}

const hex = (b) => (b == null ? 'null' : Buffer.from(b).toString('hex'));
// A record as one comparable string; headers in name order.
function canon(m) {
  const hs = Object.keys(m.headers || {}).sort().map((h) => {
    const v = m.headers[h];
    return `${h}=${Array.isArray(v) ? v.map(hex).join('+') : hex(v)}`;
  });
  return `${hex(m.key)}|${hex(m.value)}|${hs.join(',')}`;
}

function sameMultiset(want, got, what) {
  const w = want.map(canon).sort();
  const g = got.map(canon).sort();
  if (w.length !== g.length) fail(`${what}: read back ${g.length} records, want ${w.length}`);
  for (let i = 0; i < w.length; i++) {
    if (w[i] !== g[i]) fail(`${what}: records differ from those produced; first: want ${w[i].slice(0, 200)}, got ${g[i].slice(0, 200)}`);
  }
}

const admin = kafka.admin();
const topic = `kjs-data-${run}`;
const N = 300;
const sent = records(N, 'a');
const groupTopic = topic;

await within(15000, 'admin connect', admin.connect());

await step(`created topic ${topic} with 3 partitions`, async () => {
  const created = await within(15000, 'admin.createTopics', admin.createTopics({
    topics: [{ topic, numPartitions: 3, replicationFactor: 1 }], waitForLeaders: true, timeout: 10000,
  }));
  if (created !== true) fail(`admin.createTopics(${topic}) returned ${created}, want true`);
  const md = await within(15000, 'admin.fetchTopicMetadata', admin.fetchTopicMetadata({ topics: [topic] }));
  const np = md.topics[0].partitions.length;
  if (np !== 3) fail(`metadata of ${topic} has ${np} partitions, want 3`);
});

await step(`idempotent producer (acks -1) sent ${N} keyed records with headers`, async () => {
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false });
  await within(15000, 'idempotent producer connect', producer.connect());
  for (let i = 0; i < N; i += 50) {
    const res = await within(20000, `idempotent producer send of records ${i}..${i + 49}`,
      producer.send({ topic, acks: -1, messages: sent.slice(i, i + 50) }));
    for (const r of res) {
      if (r.errorCode !== 0) fail(`send answered error ${r.errorCode} on partition ${r.partition}`);
    }
  }
  await within(10000, 'producer disconnect', producer.disconnect());
  const offs = await within(10000, 'admin.fetchTopicOffsets', admin.fetchTopicOffsets(topic));
  const total = offs.reduce((s, o) => s + Number(o.high) - Number(o.low), 0);
  if (total !== N) fail(`after the idempotent producer the partitions hold ${total} records (${JSON.stringify(offs)}), want ${N}`);
  if (offs.filter((o) => Number(o.high) > 0).length < 2) fail(`keys landed on fewer than 2 partitions: ${JSON.stringify(offs)}`);
  return offs.map((o) => `p${o.partition}:${o.high}`).join(' ');
});

// Reads with one consumer until `want` records arrived or ms passed.
async function readAll(groupId, want, ms) {
  const consumer = kafka.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 500, maxWaitTimeInMs: 200 });
  await within(15000, `consumer ${groupId} connect`, consumer.connect());
  await within(15000, `consumer ${groupId} subscribe`, consumer.subscribe({ topics: [topic], fromBeginning: true }));
  const got = [];
  const lastOffset = new Map();
  let disorder = null;
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      const o = Number(message.offset);
      const prev = lastOffset.get(partition);
      if (prev !== undefined && o <= prev && !disorder) disorder = `partition ${partition}: offset ${o} after ${prev}`;
      lastOffset.set(partition, o);
      got.push(message);
    },
  });
  const t0 = Date.now();
  while (got.length < want && Date.now() - t0 < ms) await sleep(50);
  await sleep(300); // anything beyond `want` would show up as a count mismatch
  await within(15000, `consumer ${groupId} disconnect`, consumer.disconnect());
  if (disorder) fail(`consumer read out of order: ${disorder}`);
  return got;
}

await step(`consumer read the ${N} records back byte-identical (key, value, headers)`, async () => {
  const got = await readAll(`kjs-read-${run}`, N, 30000);
  sameMultiset(sent, got, 'consumer');
  // Records of one key (one partition) keep the order produced.
  const byKey = new Map();
  for (const m of got) {
    const k = hex(m.key);
    if (!byKey.has(k)) byKey.set(k, []);
    byKey.get(k).push(hex(m.value));
  }
  for (const [k, vals] of byKey) {
    const want = sent.filter((m) => hex(m.key) === k).map((m) => hex(m.value));
    if (want.join() !== vals.join()) fail(`records of key ${k} read back out of the order produced`);
  }
});

await step('two group members shared the 3 partitions, read everything, committed', async () => {
  const groupId = `kjs-group-${run}`;
  const members = [];
  for (const name of ['m1', 'm2']) {
    const c = kafka.consumer({
      groupId, sessionTimeout: 10000, rebalanceTimeout: 10000, heartbeatInterval: 300, maxWaitTimeInMs: 200,
      retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 1000 },
    });
    const m = { name, c, assigned: null, seen: [], wrongPartition: null };
    c.on(c.events.GROUP_JOIN, (e) => {
      m.assigned = (e.payload.memberAssignment[groupTopic] || []).slice().sort();
    });
    await within(15000, `member ${name} connect`, c.connect());
    await within(15000, `member ${name} subscribe`, c.subscribe({ topics: [groupTopic], fromBeginning: true }));
    await c.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        if (m.assigned && !m.assigned.includes(partition)) m.wrongPartition = partition;
        m.seen.push({ partition, offset: Number(message.offset), message });
        await c.commitOffsets([{ topic: groupTopic, partition, offset: String(Number(message.offset) + 1) }]);
      },
    });
    members.push(m);
  }
  // Settled: both hold a share, together all 3 partitions, none twice.
  let t0 = Date.now();
  const split = () => {
    const [a, b] = members.map((m) => m.assigned);
    if (!a || !b || !a.length || !b.length) return false;
    const all = [...a, ...b].sort();
    return all.join() === '0,1,2';
  };
  while (!split() && Date.now() - t0 < 30000) await sleep(50);
  if (!split()) fail(`the two members did not share the 3 partitions within 30 s: m1 ${JSON.stringify(members[0].assigned)}, m2 ${JSON.stringify(members[1].assigned)}`);
  const shares = members.map((m) => `${m.name}=[${m.assigned}]`).join(' ');
  // Records produced now go to the partitions' current owners.
  const M = 120;
  const more = records(M, 'b');
  const before = await within(10000, 'admin.fetchTopicOffsets', admin.fetchTopicOffsets(groupTopic));
  const startOf = new Map(before.map((o) => [o.partition, Number(o.high)]));
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await within(15000, 'second producer connect', producer.connect());
  await within(20000, 'second producer send', producer.send({ topic: groupTopic, acks: -1, messages: more }));
  await within(10000, 'second producer disconnect', producer.disconnect());
  const offs = await within(10000, 'admin.fetchTopicOffsets', admin.fetchTopicOffsets(groupTopic));
  const ends = new Map(offs.map((o) => [o.partition, Number(o.high)]));
  const total = [...ends.values()].reduce((s, x) => s + x, 0);
  if (total !== N + M) fail(`topic holds ${total} records, want ${N + M}`);
  const covered = () => {
    const s = new Set();
    for (const m of members) for (const r of m.seen) s.add(`${r.partition}:${r.offset}`);
    return s.size;
  };
  t0 = Date.now();
  while (covered() < N + M && Date.now() - t0 < 30000) await sleep(50);
  if (covered() < N + M) fail(`the group read ${covered()} distinct records, want ${N + M} (m1 ${members[0].seen.length}, m2 ${members[1].seen.length})`);
  for (const m of members) {
    if (m.wrongPartition !== null) fail(`member ${m.name} got a record of partition ${m.wrongPartition}, not its share [${m.assigned}]`);
    const grew = m.assigned.filter((p) => ends.get(p) > startOf.get(p));
    const news = m.seen.filter((r) => r.offset >= startOf.get(r.partition));
    if (grew.length && !news.length) fail(`member ${m.name} (share [${m.assigned}]) read none of the records produced after the group settled`);
  }
  // The records the group read are those produced (duplicates across a
  // rebalance are allowed: at least once).
  const uniq = new Map();
  for (const m of members) for (const r of m.seen) uniq.set(`${r.partition}:${r.offset}`, r.message);
  sameMultiset([...sent, ...more], [...uniq.values()], 'group');
  // Committed offsets are the ends of the partitions.
  let committed;
  t0 = Date.now();
  const atEnds = (c) => c.length === 3 && c.every((p) => Number(p.offset) === ends.get(p.partition));
  do {
    const r = await within(10000, 'admin.fetchOffsets', admin.fetchOffsets({ groupId, topics: [groupTopic] }));
    committed = r[0].partitions;
    if (atEnds(committed)) break;
    await sleep(100);
  } while (Date.now() - t0 < 10000);
  if (!atEnds(committed)) fail(`committed offsets ${JSON.stringify(committed)}, want the ends ${JSON.stringify([...ends])}`);
  for (const m of members) await within(15000, `member ${m.name} disconnect`, m.c.disconnect());
  // Still there after the members left.
  const after = await within(10000, 'admin.fetchOffsets after leaving', admin.fetchOffsets({ groupId, topics: [groupTopic] }));
  if (!atEnds(after[0].partitions)) fail(`after the members left the committed offsets are ${JSON.stringify(after[0].partitions)}`);
  return `${shares}; committed ${committed.map((p) => `p${p.partition}:${p.offset}`).join(' ')}`;
});

await step('a GZIP producer is refused with UNSUPPORTED_COMPRESSION_TYPE, nothing stored', async () => {
  const before = await within(10000, 'admin.fetchTopicOffsets', admin.fetchTopicOffsets(topic));
  const producer = kafka.producer({ retry: { retries: 0 } });
  await within(15000, 'gzip producer connect', producer.connect());
  let err = null;
  try {
    await within(20000, 'gzip send', producer.send({
      topic, acks: -1, compression: CompressionTypes.GZIP, messages: [{ key: 'gz', value: 'gzipped' }],
    }).then(() => null, (e) => { err = e; }));
  } finally {
    await within(10000, 'gzip producer disconnect', producer.disconnect());
  }
  if (!err) fail('a GZIP-compressed send succeeded; want it refused with UNSUPPORTED_COMPRESSION_TYPE');
  const causes = [err, err.cause, ...(err.errors || [])].filter(Boolean);
  const c = causes.find((e) => e.type === 'UNSUPPORTED_COMPRESSION_TYPE' || e.code === 76);
  if (!c) fail(`GZIP send rejected, but not with UNSUPPORTED_COMPRESSION_TYPE (76): ${err.name}: ${err.message} type=${err.type} code=${err.code}`);
  if (c.retriable) fail('UNSUPPORTED_COMPRESSION_TYPE came back retriable');
  const after = await within(10000, 'admin.fetchTopicOffsets', admin.fetchTopicOffsets(topic));
  if (JSON.stringify(after) !== JSON.stringify(before)) fail(`the refused GZIP send stored records: offsets ${JSON.stringify(before)} -> ${JSON.stringify(after)}`);
  return `${c.name}: ${c.message}`;
});

await step('admin created a 3-partition topic, listed it, deleted it, saw it gone', async () => {
  const t = `kjs-admin-${run}`;
  const created = await within(15000, 'admin.createTopics', admin.createTopics({
    topics: [{ topic: t, numPartitions: 3 }], waitForLeaders: true, timeout: 10000,
  }));
  if (created !== true) fail(`admin.createTopics(${t}) returned ${created}, want true`);
  const again = await within(15000, 'admin.createTopics again', admin.createTopics({ topics: [{ topic: t, numPartitions: 3 }] }));
  if (again !== false) fail(`creating ${t} a second time returned ${again}, want false (exists)`);
  const listed = await within(10000, 'admin.listTopics', admin.listTopics());
  if (!listed.includes(t)) fail(`admin.listTopics does not list ${t}: ${listed}`);
  const md = await within(10000, 'admin.fetchTopicMetadata', admin.fetchTopicMetadata({ topics: [t] }));
  const parts = md.topics[0].partitions;
  if (parts.length !== 3) fail(`metadata of ${t}: ${parts.length} partitions, want 3`);
  for (const p of parts) if (p.leader !== 0) fail(`partition ${p.partitionId} of ${t} has leader ${p.leader}, want 0`);
  await within(15000, 'admin.deleteTopics', admin.deleteTopics({ topics: [t], timeout: 10000 }));
  let gone = false;
  const t0 = Date.now();
  while (!gone && Date.now() - t0 < 10000) {
    const l = await within(10000, 'admin.listTopics after delete', admin.listTopics());
    gone = !l.includes(t);
    if (!gone) await sleep(100);
  }
  if (!gone) fail(`${t} is still listed 10 s after deleteTopics`);
});

// A tombstone (a record whose value is null, valueLength -1 on the wire)
// reads back null, an empty value empty.
await step('a tombstone (null value) reads back as null, not empty', async () => {
  const t = `kjs-tomb-${run}`;
  await within(15000, 'admin.createTopics', admin.createTopics({ topics: [{ topic: t, numPartitions: 1 }] }));
  const producer = kafka.producer();
  await within(15000, 'producer connect', producer.connect());
  await within(15000, 'send', producer.send({ topic: t, acks: -1, messages: [
    { key: 'gone', value: null }, { key: 'empty', value: Buffer.alloc(0) }] }));
  await within(10000, 'producer disconnect', producer.disconnect());
  const c = kafka.consumer({ groupId: `kjs-tomb-${run}`, maxWaitTimeInMs: 200 });
  await within(15000, 'consumer connect', c.connect());
  await within(15000, 'subscribe', c.subscribe({ topics: [t], fromBeginning: true }));
  const got = {};
  await c.run({ eachMessage: async ({ message }) => { got[message.key.toString()] = message.value; } });
  const t0 = Date.now();
  while (Object.keys(got).length < 2 && Date.now() - t0 < 15000) await sleep(50);
  await within(15000, 'consumer disconnect', c.disconnect());
  if (got.gone !== null) fail(`the tombstone read back as ${got.gone === undefined ? 'nothing' : `a ${got.gone.length}-byte value`}, want null`);
  if (!got.empty || got.empty.length !== 0) fail('the empty value did not read back empty');
});

await within(10000, 'admin disconnect', admin.disconnect());
