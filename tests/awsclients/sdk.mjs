// The AWS SDK for JavaScript v3 (@aws-sdk/client-eventbridge, real SigV4)
// against a running bin/sluice's EventBridge API; run by
// tests/integration/test_aws_api.sh.
//
// Usage: node sdk.mjs URL AKID SECRET RECEIVER_URL RECEIVER_FILE NPM_DIR
//   URL            the server (http://127.0.0.1:PORT), run with a config file
//   AKID SECRET    an admin credential of its server.aws block
//   RECEIVER_URL   a loopback HTTP receiver (tests/awsclients/receiver.py) that
//                  appends each request to RECEIVER_FILE as a JSON line
//   NPM_DIR        holds node_modules/ as tests/awsclients/package.json pins it
//
// Steps: PutEvents with 3 entries (stored as CloudEvents); TestEventPattern
// true, false and InvalidEventPatternException; CreateConnection (API key) +
// CreateApiDestination (the receiver) + PutRule + PutTargets, then PutEvents
// delivers the matching event, and only it, to the receiver in EventBridge's
// shape with the API key header; ListRules, DescribeRule, ListTargetsByRule;
// a wrong secret is refused with InvalidSignatureException and stores
// nothing; RemoveTargets + DeleteRule (and the connection and destination).
// Prints "ok: sdk: ..." lines; the first failure prints "FAIL: sdk: ..." and
// exits 1.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

const [url, akid, secret, recvUrl, recvFile, npmDir] = process.argv.slice(2);
if (!npmDir) {
  console.error('usage: node sdk.mjs URL AKID SECRET RECEIVER_URL RECEIVER_FILE NPM_DIR');
  process.exit(2);
}
const require = createRequire(path.resolve(npmDir, 'node_modules') + '/');
const eb = require('@aws-sdk/client-eventbridge');
const pins = JSON.parse(fs.readFileSync(new URL('./package.json', import.meta.url))).dependencies;
const have = require('@aws-sdk/client-eventbridge/package.json').version;
if (have !== pins['@aws-sdk/client-eventbridge'])
  fail(`@aws-sdk/client-eventbridge ${have} is installed in ${npmDir}, want ${pins['@aws-sdk/client-eventbridge']}`);

const REGION = 'us-east-1';
const ACCOUNT = '000000000000';
const tag = `js${process.pid}`;

function fail(msg) {
  console.log(`FAIL: sdk: ${msg}`);
  process.exit(1);
}

function client(sk = secret) {
  return new eb.EventBridgeClient({
    endpoint: url,
    region: REGION,
    credentials: { accessKeyId: akid, secretAccessKey: sk },
    maxAttempts: 1,
  });
}
const c = client();

async function step(what, fn) {
  const t0 = Date.now();
  let timer;
  const limit = new Promise((_, rej) => {
    timer = setTimeout(() => rej(new Error('timed out after 30 s')), 30000);
  });
  let detail;
  try {
    detail = await Promise.race([fn(), limit]);
  } catch (e) {
    fail(`${what}: ${e && e.name ? e.name + ': ' : ''}${e && e.message ? e.message : e}`);
  } finally {
    clearTimeout(timer);
  }
  console.log(`ok: sdk: ${what}${detail ? ` (${detail})` : ''} (${Date.now() - t0} ms)`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function waitFor(fn, ms) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v || Date.now() >= end) return v;
    await sleep(100);
  }
}

// Every partition's events of the set.
async function events(set) {
  const info = await fetch(`${url}/v1/sets/${set}`);
  if (info.status === 404) return [];
  const parts = (await info.json()).partitions || 1;
  let out = [];
  for (let p = 0; p < parts; p++) {
    const r = await fetch(`${url}/v1/sets/${set}/events?partition=${p}&offset=0&max=1000`);
    if (r.status !== 200) fail(`GET /v1/sets/${set}/events?partition=${p} answered ${r.status}`);
    out = out.concat((await r.json()).events || []);
  }
  return out;
}

function received() {
  let text = '';
  try {
    text = fs.readFileSync(recvFile, 'utf8');
  } catch {
    return [];
  }
  return text.split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
}

// refused(promise, type): the error's message; FAIL unless it rejects with that type.
async function refused(p, type, what) {
  try {
    const out = await p;
    fail(`${what}: want ${type}, got success: ${JSON.stringify(out).slice(0, 300)}`);
  } catch (e) {
    if (e.name !== type) fail(`${what}: want ${type}, got ${e.name}: ${e.message}`);
    if (!e.$metadata || !(e.$metadata.httpStatusCode >= 400 && e.$metadata.httpStatusCode < 500))
      fail(`${what}: HTTP status ${e.$metadata && e.$metadata.httpStatusCode}, want 4xx`);
    return e.message;
  }
}

const event = JSON.stringify({
  version: '0', id: '6a7e8feb-b491-4cf7-a9f1-bf3703467718', 'detail-type': 'Order Placed',
  source: 'com.acme.orders', account: ACCOUNT, time: '2024-03-15T09:30:00Z', region: REGION,
  resources: ['arn:aws:s3:::x'], detail: { amount: 150, status: 'NEW', tags: ['a', 'b'] },
});

await step('PutEvents with 3 entries', async () => {
  const entries = [1, 2, 3].map((n) => ({
    Source: 'js.put', DetailType: `Js ${n}`, Detail: JSON.stringify({ n, tag }),
    ...(n === 2 ? { EventBusName: 'default' } : {}),
    ...(n === 3 ? { EventBusName: `arn:aws:events:${REGION}:${ACCOUNT}:event-bus/default`,
      Time: new Date('2024-06-01T10:00:00Z'), Resources: ['arn:aws:s3:::js'] } : {}),
  }));
  const out = await c.send(new eb.PutEventsCommand({ Entries: entries }));
  const ids = (out.Entries || []).map((e) => e.EventId);
  if (out.FailedEntryCount !== 0 || ids.length !== 3 || new Set(ids).size !== 3 || !ids.every(Boolean))
    fail(`PutEvents: ${JSON.stringify(out)}`);
  const got = await waitFor(async () => {
    const m = new Map((await events('default')).filter((e) => ids.includes(e.id)).map((e) => [e.id, e]));
    return m.size === 3 ? m : null;
  }, 10000);
  if (!got) fail('the 3 events are not all in GET /v1/sets/default/events within 10 s');
  ids.forEach((id, i) => {
    const e = got.get(id);
    if (e.source !== 'js.put' || e.type !== `Js ${i + 1}` || e.data.n !== i + 1 || e.data.tag !== tag)
      fail(`stored event ${i}: ${JSON.stringify(e)}`);
  });
  const t = got.get(ids[2]);
  if (Date.parse(t.time) !== Date.parse('2024-06-01T10:00:00Z')) fail(`Time stored as ${t.time}`);
  if (t.awsresources !== '["arn:aws:s3:::js"]') fail(`Resources stored as ${t.awsresources}`);
  return ids.map((i) => i.slice(-8)).join(' ');
});

await step('TestEventPattern true, false, InvalidEventPatternException', async () => {
  const cases = [
    [{ source: [{ prefix: 'com.acme' }] }, true],
    [{ source: ['com.other'] }, false],
    [{ detail: { amount: [{ numeric: ['>', 100, '<=', 150] }], tags: ['b'] } }, true],
    [{ 'detail-type': [{ 'anything-but': ['Order Placed'] }] }, false],
    [{ resources: [{ suffix: ':::x' }] }, true],
  ];
  for (const [p, want] of cases) {
    const out = await c.send(new eb.TestEventPatternCommand({ EventPattern: JSON.stringify(p), Event: event }));
    if (out.Result !== want) fail(`TestEventPattern ${JSON.stringify(p)}: Result ${out.Result}, want ${want}`);
  }
  const msg = await refused(c.send(new eb.TestEventPatternCommand({
    EventPattern: '{"detail":{"amount":[{"numeric":[">"]}]}}', Event: event })),
  'InvalidEventPatternException', 'a bad numeric pattern');
  await refused(c.send(new eb.TestEventPatternCommand({ EventPattern: '{"source":', Event: event })),
    'InvalidEventPatternException', 'a pattern that is not JSON');
  return `${cases.length} patterns; ${msg.slice(0, 60)}`;
});

let connArn, destArn;
const rule = `${tag}-route`;
const pattern = { source: ['js.route'], detail: { n: [{ numeric: ['>=', 10] }] } };
await step('CreateConnection + CreateApiDestination + PutRule + PutTargets deliver in EventBridge shape', async () => {
  let out = await c.send(new eb.CreateConnectionCommand({
    Name: `${tag}-conn`, AuthorizationType: 'API_KEY',
    AuthParameters: { ApiKeyAuthParameters: { ApiKeyName: 'X-Js-Key', ApiKeyValue: `key-${tag}` } },
  }));
  connArn = out.ConnectionArn;
  if (connArn !== `arn:aws:events:${REGION}:${ACCOUNT}:connection/${tag}-conn`)
    fail(`CreateConnection: ConnectionArn ${connArn}`);
  out = await c.send(new eb.CreateApiDestinationCommand({
    Name: `${tag}-dest`, ConnectionArn: connArn, InvocationEndpoint: `${recvUrl}/js/${tag}`, HttpMethod: 'POST',
  }));
  destArn = out.ApiDestinationArn;
  if (destArn !== `arn:aws:events:${REGION}:${ACCOUNT}:api-destination/${tag}-dest`)
    fail(`CreateApiDestination: ApiDestinationArn ${destArn}`);
  out = await c.send(new eb.PutRuleCommand({ Name: rule, EventPattern: JSON.stringify(pattern),
    State: 'ENABLED', Description: 'js route' }));
  if (out.RuleArn !== `arn:aws:events:${REGION}:${ACCOUNT}:rule/${rule}`) fail(`PutRule: RuleArn ${out.RuleArn}`);
  out = await c.send(new eb.PutTargetsCommand({ Rule: rule, Targets: [{ Id: 'dest', Arn: destArn }] }));
  if (out.FailedEntryCount !== 0) fail(`PutTargets: ${JSON.stringify(out)}`);
  out = await c.send(new eb.PutEventsCommand({ Entries: [
    { Source: 'js.route', DetailType: 'Route', Detail: JSON.stringify({ n: 12, tag }), Resources: ['arn:aws:s3:::r'] },
    { Source: 'js.route', DetailType: 'Route', Detail: JSON.stringify({ n: 3, tag }) },
    { Source: 'js.other', DetailType: 'Route', Detail: JSON.stringify({ n: 50, tag }) },
  ] }));
  if (out.FailedEntryCount !== 0) fail(`PutEvents: ${JSON.stringify(out)}`);
  const [want, ...others] = out.Entries.map((e) => e.EventId);
  const mine = () => received().filter((r) => r.path === `/js/${tag}`);
  const hit = await waitFor(() => mine().find((r) => JSON.parse(r.body).id === want), 20000);
  if (!hit) fail(`the receiver got no request for event ${want} within 20 s (${mine().length} requests)`);
  const body = JSON.parse(hit.body);
  const expect = { version: '0', id: want, 'detail-type': 'Route', source: 'js.route', account: ACCOUNT,
    region: REGION, resources: ['arn:aws:s3:::r'], detail: { n: 12, tag } };
  for (const [k, v] of Object.entries(expect))
    if (JSON.stringify(body[k]) !== JSON.stringify(v))
      fail(`delivered ${k} = ${JSON.stringify(body[k])}, want ${JSON.stringify(v)} (${hit.body.slice(0, 300)})`);
  if (Number.isNaN(Date.parse(body.time))) fail(`delivered time ${body.time}`);
  if (hit.method !== 'POST') fail(`delivered with ${hit.method}`);
  if (hit.headers['x-js-key'] !== `key-${tag}`) fail(`API key header: ${JSON.stringify(hit.headers)}`);
  await sleep(700);
  const stray = mine().filter((r) => others.includes(JSON.parse(r.body).id));
  if (stray.length) fail(`events the pattern does not match were delivered: ${stray.map((r) => r.body)}`);
  return `event ${want.slice(-8)} with X-Js-Key`;
});

await step('ListRules, DescribeRule, ListTargetsByRule', async () => {
  let out = await c.send(new eb.ListRulesCommand({ NamePrefix: tag }));
  const mine = (out.Rules || []).filter((r) => r.Name === rule);
  if (mine.length !== 1 || mine[0].State !== 'ENABLED' || JSON.stringify(JSON.parse(mine[0].EventPattern)) !== JSON.stringify(pattern))
    fail(`ListRules: ${JSON.stringify(out)}`);
  out = await c.send(new eb.DescribeRuleCommand({ Name: rule }));
  if (out.Name !== rule || out.Arn !== `arn:aws:events:${REGION}:${ACCOUNT}:rule/${rule}` || out.State !== 'ENABLED'
      || out.Description !== 'js route' || out.EventBusName !== 'default')
    fail(`DescribeRule: ${JSON.stringify(out)}`);
  await refused(c.send(new eb.DescribeRuleCommand({ Name: `${tag}-none` })), 'ResourceNotFoundException',
    'DescribeRule of an unknown rule');
  out = await c.send(new eb.ListTargetsByRuleCommand({ Rule: rule }));
  if (JSON.stringify((out.Targets || []).map((t) => [t.Id, t.Arn])) !== JSON.stringify([['dest', destArn]]))
    fail(`ListTargetsByRule: ${JSON.stringify(out)}`);
  out = await c.send(new eb.ListRuleNamesByTargetCommand({ TargetArn: destArn }));
  if (JSON.stringify(out.RuleNames) !== JSON.stringify([rule])) fail(`ListRuleNamesByTarget: ${JSON.stringify(out)}`);
  return '';
});

await step('a wrong secret: InvalidSignatureException, nothing stored', async () => {
  const bad = client(`${secret}-wrong`);
  const msg = await refused(bad.send(new eb.PutEventsCommand({ Entries: [
    { Source: 'js.badsig', DetailType: 'Bad', Detail: JSON.stringify({ tag }) }] })),
  'InvalidSignatureException', 'PutEvents with a wrong secret');
  await refused(bad.send(new eb.ListRulesCommand({})), 'InvalidSignatureException', 'ListRules with a wrong secret');
  await sleep(300);
  if ((await events('default')).some((e) => e.source === 'js.badsig')) fail('a wrongly signed PutEvents was stored');
  return msg.slice(0, 60);
});

await step('RemoveTargets + DeleteRule', async () => {
  await refused(c.send(new eb.DeleteRuleCommand({ Name: rule })), 'ValidationException',
    'DeleteRule while a target remains');
  let out = await c.send(new eb.RemoveTargetsCommand({ Rule: rule, Ids: ['dest'] }));
  if (out.FailedEntryCount !== 0) fail(`RemoveTargets: ${JSON.stringify(out)}`);
  await c.send(new eb.DeleteRuleCommand({ Name: rule }));
  out = await c.send(new eb.ListRulesCommand({ NamePrefix: tag }));
  if ((out.Rules || []).length) fail(`ListRules after DeleteRule: ${JSON.stringify(out)}`);
  await c.send(new eb.DeleteApiDestinationCommand({ Name: `${tag}-dest` }));
  await c.send(new eb.DeleteConnectionCommand({ Name: `${tag}-conn` }));
  out = await c.send(new eb.ListApiDestinationsCommand({ NamePrefix: tag }));
  if ((out.ApiDestinations || []).length) fail(`ListApiDestinations after the delete: ${JSON.stringify(out)}`);
  return '';
});
