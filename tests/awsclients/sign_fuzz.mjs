// An independent SigV4 signer against sluice's verifier: the npm
// @aws-sdk/signature-v4 (3.374.0; its SignatureV4 with @smithy/hash-node's
// SHA-256) signs many generated EventBridge requests, which go to a running
// bin/sluice byte for byte over raw TCP (so header case, repeated headers,
// odd whitespace and the query's spelling reach the server as generated).
// Run by tests/integration/test_aws_api.sh; botocore's side of the issue's
// check is tests/unit/sigv4_botocore.py (test_sigv4.c).
//
// Usage: node sign_fuzz.mjs URL AKID SECRET NPM_DIR [COUNT]
//   COUNT requests (default 240; at least 200 in the test), each a real
//   AWSEvents.ListEventBuses or AWSEvents.TestEventPattern POST on "/" or
//   "/eventbridge/" with: 0-6 extra headers (names in random case, values
//   with leading/trailing/repeated spaces and tabs, some sent twice, some
//   left unsigned, user-agent never signed), sometimes x-amz-content-sha256
//   and a signed content-length; a random query string (reserved characters,
//   UTF-8, repeated keys, empty values, spelled raw or percent-encoded in
//   either case); a random body: empty, {}, pretty-printed, UTF-8 (raw bytes,
//   not \u escapes); a signing time up to 5 minutes off. Every one must be
//   answered 200 with the operation's answer (TestEventPattern: Result
//   true). Then each again with one change, which must be refused:
//     sig     one hex digit of Signature=               InvalidSignatureException
//     body    one byte of the body                      InvalidSignatureException
//     header  one character of a signed header's value  InvalidSignatureException
//     date    a digit of X-Amz-Date (a valid time)      InvalidSignatureException
//     query   one character of the query                InvalidSignatureException
//     auth    a broken Authorization header             IncompleteSignatureException
// A host is changed in its port's last digit only, an X-Amz-Target in its
// operation's name only (see MUTATIONS.header). Queries on which this signer
// and AWS's documented canonical order disagree are not generated (see
// sameOrder()). Env SIGN_FUZZ_SEED (a number) replays a run; the seed is
// printed. Prints "ok: sign_fuzz: ..." lines; the first failure prints
// "FAIL: sign_fuzz: ..." with the request as sent and the answer, and exits
// 1. A known sluice bug is probed apart and noted ("note: sign_fuzz: KNOWN
// BUG ..."); SLUICE_AWS_KNOWN_BUGS=1 makes it a failure.
import { createRequire } from 'node:module';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

const [url, akid, secret, npmDir, countArg] = process.argv.slice(2);
if (!npmDir) {
  console.error('usage: node sign_fuzz.mjs URL AKID SECRET NPM_DIR [COUNT]');
  process.exit(2);
}
const COUNT = Number(countArg || 240);
const KNOWN_BUGS = (process.env.SLUICE_AWS_KNOWN_BUGS ?? '1') === '1'; // fixed: checked strictly unless =0
const require = createRequire(path.resolve(npmDir, 'node_modules') + '/');
const { SignatureV4 } = require('@aws-sdk/signature-v4');
const { Hash } = require('@smithy/hash-node');
const pins = JSON.parse(fs.readFileSync(new URL('./package.json', import.meta.url))).dependencies;
const sv4version = require('@aws-sdk/signature-v4/package.json').version;
if (sv4version !== pins['@aws-sdk/signature-v4'])
  fail(`@aws-sdk/signature-v4 ${sv4version} is installed in ${npmDir}, want ${pins['@aws-sdk/signature-v4']}`);

const REGION = 'us-east-1';
const u = new URL(url);
const HOST = u.hostname;
const PORT = Number(u.port);
const seed = Number(process.env.SIGN_FUZZ_SEED || (Date.now() % 2147483647));

function fail(msg) {
  console.log(`FAIL: sign_fuzz: ${msg}`);
  process.exit(1);
}

// mulberry32: a small seeded generator, so a failing run can be replayed.
let state = seed >>> 0;
function rnd() {
  state = (state + 0x6d2b79f5) >>> 0;
  let t = state;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const int = (n) => Math.floor(rnd() * n);
const pick = (a) => a[int(a.length)];
const chance = (p) => rnd() < p;

const signers = [true, false].map((applyChecksum) => new SignatureV4({
  service: 'events', region: REGION, credentials: { accessKeyId: akid, secretAccessKey: secret },
  sha256: Hash.bind(null, 'sha256'), uriEscapePath: true, applyChecksum,
}));

// ---- generators --------------------------------------------------------------------------

const ALNUM = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';
const VALUE_CHARS = ALNUM + '-_.~!$&\'()*+,;=:@/?"<>[]{}|^`%#';
const UNICODE = ['é', 'ü', 'ß', 'ø', '漢字', 'Ω', '😀', 'ñ', 'ç', 'Ж'];

function randCase(s) {
  return [...s].map((ch) => (chance(0.5) ? ch.toUpperCase() : ch.toLowerCase())).join('');
}

// A header value: printable ASCII words joined by runs of spaces or tabs,
// sometimes with leading and trailing white space (trimmed by HTTP itself).
function headerValue() {
  const words = [];
  const n = 1 + int(4);
  for (let i = 0; i < n; i++) {
    let w = '';
    const len = 1 + int(8);
    for (let j = 0; j < len; j++) w += VALUE_CHARS[int(VALUE_CHARS.length)];
    words.push(w);
  }
  const gap = () => (chance(0.7) ? ' '.repeat(1 + int(3)) : pick(['\t', ' \t ', '\t\t']));
  let v = words.reduce((acc, w) => (acc ? acc + gap() + w : w), '');
  if (chance(0.3)) v = pick([' ', '  ', '\t', ' \t']) + v;
  if (chance(0.3)) v += pick([' ', '   ', '\t']);
  return v;
}

// A query component's characters: unreserved, reserved, space and UTF-8.
function queryText(max) {
  let s = '';
  const len = int(max + 1);
  for (let i = 0; i < len; i++) {
    const r = rnd();
    if (r < 0.5) s += ALNUM[int(ALNUM.length)];
    else if (r < 0.85) s += pick(['-', '_', '.', '~', '/', '?', ':', '@', '!', '$', "'", '(', ')', '*', ',', ';',
      '=', '&', '+', '#', '%', ' ', '[', ']']);
    else s += pick(UNICODE);
  }
  return s;
}

// Spells one query component on the wire: what must be encoded is, as UTF-8
// percent-escapes in upper or lower case; the rest is sent raw or encoded.
function wire(s, isKey) {
  let out = '';
  for (const ch of s) {
    const mustEncode = /[^A-Za-z0-9\-_.~/?:@!$'()*,;]/.test(ch) || (isKey && ch === '=');
    // KNOWN BUG: sluice's HTTP layer leaves "%2F" encoded in query
    // arguments (http/http.c unescape()), so http/aws.c signs "%252F":
    // a '/' sent as %2F (as every SDK sends it) is refused. Sent raw
    // unless SLUICE_AWS_KNOWN_BUGS=1.
    if (ch === '/' && !KNOWN_BUGS) {
      out += ch;
      continue;
    }
    if (mustEncode || chance(0.25)) {
      let e = [...Buffer.from(ch, 'utf8')].map((b) => '%' + b.toString(16).padStart(2, '0')).join('');
      e = chance(0.5) ? e.toUpperCase() : e.toLowerCase();
      out += e;
    } else out += ch;
  }
  return out;
}

// The SigV4 encoding (RFC 3986: unreserved kept, UTF-8 bytes as %XX).
const esc = (s) => encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
const byCode = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
// Whether sorting the texts as they are gives the order of sorting them
// encoded. @smithy/signature-v4 1.x (what @aws-sdk/signature-v4 3.374.0
// runs) sorts query keys, and a repeated key's values, before encoding them;
// AWS's SigV4 documentation ("the sorting occurs after encoding"), botocore
// and sluice sort the encoded texts. The two differ only where a character
// that is encoded sorts against one that is not (":" against "A", "é"
// against "z"): queries on which they differ are not generated, since AWS
// would refuse them from this signer too.
function sameOrder(texts) {
  const raw = texts.slice().sort();
  const enc = texts.slice().sort((a, b) => byCode(esc(a), esc(b)));
  return raw.every((t, k) => t === enc[k]);
}

function genQuery() {
  const query = {};
  const parts = [];
  if (chance(0.3)) return { query, qs: '' };
  const n = 1 + int(5);
  for (let i = 0, tries = 0; i < n && tries < 100; tries++) {
    let key = queryText(6);
    if (!key || key.toLowerCase() === 'x-amz-signature') key = 'k' + i;
    const vals = chance(0.2) ? [queryText(8), queryText(8)] : [queryText(10)];
    if (key in query || !sameOrder([...Object.keys(query), key]) || !sameOrder(vals)) continue;
    i++;
    query[key] = vals.length === 1 ? vals[0] : vals;
    for (const v of vals) parts.push(`${wire(key, true)}=${wire(v, false)}`);
  }
  // The order on the wire does not matter: the canonical query is sorted.
  for (let i = parts.length - 1; i > 0; i--) {
    const j = int(i + 1);
    [parts[i], parts[j]] = [parts[j], parts[i]];
  }
  return { query, qs: parts.join('&') };
}

function unicodeWord() {
  let s = '';
  const n = 1 + int(4);
  for (let i = 0; i < n; i++) s += chance(0.5) ? pick(UNICODE) : ALNUM[int(ALNUM.length)];
  return s;
}

// Pretty-prints with random white space between tokens (JSON.stringify's
// indent argument, or none).
const stringify = (v) => JSON.stringify(v, null, pick([undefined, 0, 1, 2, '\t', ' \n ']));

function genBody() {
  if (chance(0.5)) {
    const body = pick(['', '', '{}', ' { } ', '{"NamePrefix":"def"}', '{\n  "NamePrefix" : "default"\n}',
      '{"Limit": 10}', '{"NamePrefix":"default","Limit":1}']);
    return { op: 'ListEventBuses', body: Buffer.from(body, 'utf8'), expect: 'buses', prefix: body.includes('NamePrefix') };
  }
  const word = unicodeWord();
  const event = {
    version: '0', id: crypto.randomUUID(), 'detail-type': `Fuzz ${word}`, source: 'fuzz.sign',
    account: '000000000000', time: new Date().toISOString(), region: REGION, resources: [],
    detail: { word, n: int(1000) },
  };
  const body = stringify({ EventPattern: stringify({ detail: { word: [word] } }), Event: stringify(event) });
  return { op: 'TestEventPattern', body: Buffer.from(body, 'utf8'), expect: 'match' };
}

// ---- one request ---------------------------------------------------------------------------

async function genRequest(i) {
  const p = pick(['/', '/eventbridge/']);
  const { query, qs } = genQuery();
  const { op, body, expect, prefix } = genBody();
  const signed = [];   // [wire name, value] of the headers given to the signer
  const unsigned = []; // [wire name, value] sent but not signed
  signed.push([randCase('host'), `${HOST}:${PORT}`]);
  signed.push([chance(0.5) ? 'Content-Type' : randCase('content-type'), 'application/x-amz-json-1.1']);
  signed.push([chance(0.5) ? 'X-Amz-Target' : randCase('x-amz-target'), `AWSEvents.${op}`]);
  if (chance(0.3)) signed.push([randCase('content-length'), String(body.length)]);
  const extra = int(7);
  const dup = []; // headers sent as two lines, signed as their comma-joined values
  for (let j = 0; j < extra; j++) {
    const name = `x-fz-${i}-${j}-${ALNUM[int(26)]}`;
    const v = headerValue();
    if (chance(0.15)) {
      const v2 = headerValue();
      dup.push([randCase(name), v, randCase(name), v2]);
      signed.push([name, `${v.trim()},${v2.trim()}`]);
    } else if (chance(0.2)) unsigned.push([randCase(name), v]);
    else signed.push([randCase(name), v]);
  }
  if (chance(0.3)) signed.push([randCase('user-agent'), `fuzz/${i} ${headerValue()}`]);
  if (chance(0.3)) {
    signed.push(['x-amz-content-sha256', crypto.createHash('sha256').update(body).digest('hex')]);
  }
  const headers = {};
  for (const [n, v] of signed) headers[n] = v;
  const skew = (int(600) - 300) * 1000; // up to 5 minutes either way
  const date = new Date(Date.now() + skew);
  const signer = pick(signers);
  const out = await signer.sign({
    method: 'POST', protocol: 'http:', hostname: HOST, port: PORT, path: p, query, headers, body,
  }, { signingDate: date });
  // The wire: every header the signer returned (its own x-amz-date,
  // authorization and, with applyChecksum, x-amz-content-sha256 added),
  // with the names as generated; duplicates as two lines; then the unsigned.
  const lines = [];
  const dupNames = new Set(dup.map((d) => d[0].toLowerCase()));
  for (const [n, v] of Object.entries(out.headers)) {
    if (dupNames.has(n.toLowerCase())) continue;
    lines.push([n, String(v)]);
  }
  for (const [n1, v1, n2, v2] of dup) lines.push([n1, v1], [n2, v2]);
  for (const [n, v] of unsigned) lines.push([n, v]);
  if (!lines.some(([n]) => n.toLowerCase() === 'content-length')) lines.push(['Content-Length', String(body.length)]);
  lines.push(['Connection', 'close']);
  const auth = String(out.headers.authorization);
  const signedList = auth.match(/SignedHeaders=([^,]*)/)[1].split(';');
  return { i, path: p, qs, op, body, expect, prefix, lines, signedList };
}

function render(req) {
  const target = req.path + (req.qs ? '?' + req.qs : '');
  const head = `POST ${target} HTTP/1.1\r\n` + req.lines.map(([n, v]) => `${n}: ${v}\r\n`).join('') + '\r\n';
  return Buffer.concat([Buffer.from(head, 'utf8'), req.body]);
}

function show(req) {
  return JSON.stringify(render(req).toString('utf8')).slice(0, 1500);
}

function send(bytes) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    const s = net.connect({ host: HOST, port: PORT });
    s.setTimeout(10000, () => {
      s.destroy();
      reject(new Error('no answer within 10 s'));
    });
    s.on('connect', () => s.end(bytes));
    s.on('data', (d) => chunks.push(d));
    s.on('error', reject);
    s.on('close', () => {
      const all = Buffer.concat(chunks);
      const at = all.indexOf('\r\n\r\n');
      if (at < 0) return reject(new Error(`no HTTP answer: ${JSON.stringify(all.toString('latin1').slice(0, 200))}`));
      const head = all.subarray(0, at).toString('latin1').split('\r\n');
      const status = Number(head[0].split(' ')[1]);
      const hdrs = {};
      for (const l of head.slice(1)) {
        const c = l.indexOf(':');
        hdrs[l.slice(0, c).trim().toLowerCase()] = l.slice(c + 1).trim();
      }
      let body = all.subarray(at + 4);
      if ((hdrs['transfer-encoding'] || '').toLowerCase() === 'chunked') {
        const parts = [];
        let rest = body;
        for (;;) {
          const e = rest.indexOf('\r\n');
          const n = parseInt(rest.subarray(0, e).toString('latin1'), 16);
          if (!n) break;
          parts.push(rest.subarray(e + 2, e + 2 + n));
          rest = rest.subarray(e + 4 + n);
        }
        body = Buffer.concat(parts);
      }
      let json = null;
      try {
        json = JSON.parse(body.toString('utf8'));
      } catch { /* not JSON: reported by the caller */ }
      resolve({ status, headers: hdrs, body: body.toString('utf8'), json });
    });
  });
}

// ---- mutations -------------------------------------------------------------------------------

const clone = (req) => ({ ...req, lines: req.lines.map(([n, v]) => [n, v]), body: Buffer.from(req.body) });
const headerAt = (req, name) => req.lines.findIndex(([n]) => n.toLowerCase() === name);

// A different character from pool (by default: a digit for a digit, a
// letter or digit for a letter).
function other(ch, pool = /[0-9]/.test(ch) ? '0123456789' : ALNUM) {
  let c;
  do c = pool[int(pool.length)]; while (c === ch);
  return c;
}

function replaceAt(s, at, ch) {
  return s.slice(0, at) + ch + s.slice(at + 1);
}

const MUTATIONS = {
  sig(req) {
    const r = clone(req);
    const k = headerAt(r, 'authorization');
    const v = r.lines[k][1];
    const at = v.indexOf('Signature=') + 10 + int(64);
    r.lines[k][1] = replaceAt(v, at, other(v[at], '0123456789abcdef'));
    return [r, 'InvalidSignatureException'];
  },
  body(req) {
    const r = clone(req);
    if (r.body.length === 0) {
      r.body = Buffer.from(' ');
      const k = r.lines.findIndex(([n]) => n.toLowerCase() === 'content-length');
      r.lines[k][1] = '1';
      return [r, 'InvalidSignatureException'];
    }
    const at = int(r.body.length);
    r.body[at] = r.body[at] === 0x41 ? 0x42 : 0x41;
    return [r, 'InvalidSignatureException'];
  },
  header(req) {
    const r = clone(req);
    // A signed header other than x-amz-date (the date row) and
    // content-length (changing it changes how much body is read).
    const names = req.signedList.filter((n) => n !== 'x-amz-date' && n !== 'content-length');
    const name = pick(names);
    const ks = r.lines.map(([n], k) => (n.toLowerCase() === name ? k : -1)).filter((k) => k >= 0);
    const k = pick(ks);
    const v = r.lines[k][1];
    // x-amz-target: the operation's name only (a target that does not start
    // with "AWSEvents." is no EventBridge request: the HTTP API answers it).
    // host: the port's last digit only (the HTTP API's DNS-rebinding guard
    // answers a host other than a loopback name and a port first, with its
    // own 403).
    const from = name === 'x-amz-target' ? 'AWSEvents.'.length : name === 'host' ? v.length - 1 : 0;
    const spots = [...v].map((ch, at) => (at >= from && /[A-Za-z0-9]/.test(ch) ? at : -1)).filter((at) => at >= 0);
    if (!spots.length) return null;
    const at = pick(spots);
    r.lines[k][1] = replaceAt(v, at, other(v[at]));
    r.changed = `${name}: ${JSON.stringify(v)} -> ${JSON.stringify(r.lines[k][1])}`;
    return [r, 'InvalidSignatureException'];
  },
  date(req) {
    const r = clone(req);
    const k = headerAt(r, 'x-amz-date');
    const v = r.lines[k][1]; // YYYYMMDDTHHMMSSZ: change a digit of the seconds or minutes
    const at = pick([14, 12]);
    const ch = at === 14 ? other(v[at]) : String((Number(v[at]) + 1 + int(4)) % 6);
    r.lines[k][1] = replaceAt(v, at, ch === v[at] ? String((Number(v[at]) + 1) % 6) : ch);
    return [r, 'InvalidSignatureException'];
  },
  query(req) {
    if (!req.qs) return null;
    const r = clone(req);
    const spots = [...r.qs].map((ch, at) => (/[A-Za-z0-9]/.test(ch) && !/%.?$/.test(r.qs.slice(Math.max(0, at - 2), at))
      ? at : -1)).filter((at) => at >= 0);
    if (!spots.length) return null;
    const at = pick(spots);
    r.qs = replaceAt(r.qs, at, other(r.qs[at]));
    return [r, 'InvalidSignatureException'];
  },
  auth(req) {
    const r = clone(req);
    const k = headerAt(r, 'authorization');
    const v = r.lines[k][1];
    const broken = pick([
      v.replace(/Credential=[^,]*, /, ''),
      v.replace(/SignedHeaders=[^,]*, /, ''),
      v.replace(/, Signature=.*/, ''),
      v.replace('AWS4-HMAC-SHA256 ', 'AWS4-HMAC-SHA256'),
      v.replace('Credential=', 'Credentials='),
      v.replace(/Credential=[^/]*\/[0-9]{8}\//, `Credential=${akid}/`),
      'AWS4-HMAC-SHA256',
      v.slice(0, 30),
    ]);
    r.lines[k][1] = broken;
    return [r, 'IncompleteSignatureException'];
  },
};

function checkGood(req, a) {
  if (a.status !== 200) return `answered ${a.status} ${a.headers['x-amzn-errortype'] || ''}: ${a.body.slice(0, 300)}`;
  if (!(a.headers['content-type'] || '').startsWith('application/x-amz-json-1.1'))
    return `Content-Type ${a.headers['content-type']}`;
  if (req.expect === 'match' && a.json?.Result !== true) return `Result ${JSON.stringify(a.json)}, want true`;
  if (req.expect === 'buses') {
    const buses = a.json?.EventBuses;
    if (!Array.isArray(buses)) return `no EventBuses: ${a.body.slice(0, 300)}`;
    if (!req.prefix && !buses.some((b) => b.Name === 'default')) return `default not listed: ${a.body.slice(0, 300)}`;
  }
  return null;
}

function checkRefused(want, a) {
  const type = a.headers['x-amzn-errortype'] || '';
  if (a.status < 400 || a.status >= 500) return `answered ${a.status} ${type}: ${a.body.slice(0, 200)}`;
  if (!type.startsWith(want) || a.json?.__type !== want) return `answered ${a.status} ${type} ${a.body.slice(0, 200)}, want ${want}`;
  return null;
}

// ---- the run -----------------------------------------------------------------------------------

const counts = {};
const refusedCounts = {};
const t0 = Date.now();
const reqs = [];
for (let i = 0; i < COUNT; i++) reqs.push(await genRequest(i));
const stats = {
  slash: reqs.filter((r) => r.path === '/').length, query: reqs.filter((r) => r.qs).length,
  empty: reqs.filter((r) => !r.body.length).length, utf8: reqs.filter((r) => r.body.some((b) => b > 127)).length,
  dup: reqs.filter((r) => new Set(r.lines.map(([n]) => n.toLowerCase())).size < r.lines.length).length,
  tabs: reqs.filter((r) => r.lines.some(([, v]) => v.includes('\t'))).length,
  sha: reqs.filter((r) => r.signedList.includes('x-amz-content-sha256')).length,
};

// Bounded concurrency: 8 requests in flight.
async function pool(items, fn) {
  let next = 0;
  const workers = Array.from({ length: 8 }, async () => {
    while (next < items.length) {
      const it = items[next++];
      await fn(it);
    }
  });
  await Promise.all(workers);
}

const failures = [];
await pool(reqs, async (req) => {
  const a = await send(render(req));
  const why = checkGood(req, a);
  if (why) failures.push(`request ${req.i} (valid, seed ${seed}): ${why}\n  sent: ${show(req)}`);
  counts[req.op] = (counts[req.op] || 0) + 1;
});
if (failures.length)
  fail(`${failures.length} of ${COUNT} validly signed requests refused; first:\n${failures.slice(0, 3).join('\n')}`);
console.log(`ok: sign_fuzz: ${COUNT} requests signed by @aws-sdk/signature-v4 ${sv4version} answered 200 ` +
  `(seed ${seed}; ${JSON.stringify(counts)}; path / ${stats.slash}, /eventbridge/ ${COUNT - stats.slash}; ` +
  `with a query ${stats.query}, empty body ${stats.empty}, UTF-8 body ${stats.utf8}, repeated header ${stats.dup}, ` +
  `tab in a header ${stats.tabs}, x-amz-content-sha256 ${stats.sha}) (${Date.now() - t0} ms)`);

const t1 = Date.now();
const jobs = [];
for (const req of reqs)
  for (const [kind, fn] of Object.entries(MUTATIONS)) {
    const m = fn(req);
    if (m) jobs.push([kind, req, ...m]);
  }
await pool(jobs, async ([kind, orig, req, want]) => {
  const a = await send(render(req));
  const why = checkRefused(want, a);
  if (why) failures.push(`request ${orig.i} with its ${kind} changed${req.changed ? ` (${req.changed})` : ''} ` +
    `(seed ${seed}): ${why}\n  sent: ${show(req)}`);
  refusedCounts[kind] = (refusedCounts[kind] || 0) + 1;
});
if (failures.length) {
  const byKind = {};
  for (const f of failures) {
    const k = f.match(/with its (\w+)/)[1];
    byKind[k] = (byKind[k] || 0) + 1;
  }
  fail(`${failures.length} of ${jobs.length} changed requests not refused as they should be (${JSON.stringify(byKind)}); ` +
    `first:\n${failures.slice(0, 4).join('\n')}`);
}
console.log(`ok: sign_fuzz: ${jobs.length} changed requests refused (${JSON.stringify(refusedCounts)}) (${Date.now() - t1} ms)`);

// The known bug, probed apart: a '/' in a query value spelled %2F, as every
// SDK spells it. Noted while sluice refuses it; with SLUICE_AWS_KNOWN_BUGS=1
// the requests above spell '/' so too and a refusal fails.
if (!KNOWN_BUGS) {
  const out = await signers[0].sign({
    method: 'POST', protocol: 'http:', hostname: HOST, port: PORT, path: '/', query: { prefix: 'a/b' },
    headers: { host: `${HOST}:${PORT}`, 'content-type': 'application/x-amz-json-1.1',
      'x-amz-target': 'AWSEvents.ListEventBuses' }, body: '{}' });
  const req = { path: '/', qs: 'prefix=a%2Fb', body: Buffer.from('{}'),
    lines: [...Object.entries(out.headers).map(([n, v]) => [n, String(v)]), ['Content-Length', '2'], ['Connection', 'close']] };
  const a = await send(render(req));
  if (a.status !== 200)
    console.log(`note: sign_fuzz: KNOWN BUG still there: a query "prefix=a%2Fb" (signed as the SDKs sign "/") is ` +
      `answered ${a.status} ${a.headers['x-amzn-errortype'] || ''} (http/http.c unescape() keeps %2F encoded, so ` +
      'http/aws.c signs %252F); the requests above send "/" raw (SLUICE_AWS_KNOWN_BUGS=1: as %2F)');
}
