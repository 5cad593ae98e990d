// http/ui/app.js — the web console: reads the JSON API (docs/http-api.md)
// every few seconds and renders sets, rules, lanes and sources; #tail=SET
// follows a set's new events with long-polls. Read-only: it only sends GETs.
// Everything from the server is put in the page with textContent, never as
// HTML (event data is whatever producers sent).
'use strict';

const REFRESH_MS = 2000;
const TAIL_KEEP = 200;      // events kept in the tail table
const TAIL_BACKLOG = 20;    // events shown per partition when a tail starts
const TAIL_WAIT_MS = 20000; // long-poll length
// Browsers open about 6 connections per host: past this many partitions the
// tail polls every second instead of holding one long-poll per partition.
const TAIL_LONGPOLL_MAX = 4;
const KEY_STORE = 'sluice.apiKey';

const $ = (id) => document.getElementById(id);
let lastSets = new Map(); // set name -> {t, events, bytes}, for rates
let tailGen = 0;          // bumped to stop the running tail's loops
let tailAbort = null;     // aborts the running tail's requests (its long-polls)
let refreshing = false;   // a refresh() is running
let refreshAgain = false; // run refresh() once more when it ends (a key was given)

class AuthNeeded extends Error {}

// GET path as JSON, with the API key when one was given. A 401 shows the
// key form and throws AuthNeeded. signal (optional) aborts the request.
async function api(path, signal) {
  const headers = { Accept: 'application/json' };
  const key = sessionStorage.getItem(KEY_STORE);
  if (key) headers.Authorization = 'Bearer ' + key;
  const resp = await fetch(path, { headers, cache: 'no-store', signal });
  if (resp.status === 401 || resp.status === 403) {
    askKey(resp.status === 403 ? 'this key may not read that' : key ? 'the key was refused' : '');
    throw new AuthNeeded(path);
  }
  if (!resp.ok) {
    let msg = resp.status + ' ' + resp.statusText;
    try {
      const j = await resp.json();
      if (j && j.message) msg = resp.status + ' ' + j.error + ': ' + j.message;
    } catch (_) { /* not JSON */ }
    const e = new Error(msg);
    e.status = resp.status;
    throw e;
  }
  return resp.json();
}

function askKey(why) {
  $('key-form').hidden = false;
  $('key-error').textContent = why || '';
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function num(n) {
  return el('td', n === undefined || n === null ? '' : n, 'num');
}

function human(bytes) {
  if (bytes === undefined || bytes === null || bytes < 0) return '';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (bytes >= 1024 && i < u.length - 1) { bytes /= 1024; i++; }
  return (i ? bytes.toFixed(1) : String(bytes)) + ' ' + u[i];
}

function rate(v) {
  return v === null ? '' : v < 10 ? v.toFixed(1) : String(Math.round(v));
}

// Replaces a table's body with rows, or one "none" row.
function fill(tableId, rows, emptyText) {
  const tb = $(tableId).tBodies[0];
  tb.replaceChildren();
  if (!rows.length) {
    const td = el('td', emptyText, 'empty');
    td.colSpan = $(tableId).tHead.rows[0].cells.length;
    const tr = el('tr');
    tr.append(td);
    tb.append(tr);
    return;
  }
  for (const r of rows) tb.append(r);
}

function row(cells, name) {
  const tr = el('tr');
  if (name !== undefined) tr.dataset.name = name;
  for (const c of cells) tr.append(c instanceof Node ? c : el('td', c));
  return tr;
}

function renderSets(j) {
  const now = performance.now();
  const seen = new Map();
  const sel = $('tail-select');
  const chosen = tailSet();
  const rows = (j.sets || []).map((s) => {
    const prev = lastSets.get(s.name);
    const dt = prev ? (now - prev.t) / 1000 : 0;
    const evRate = prev && dt > 0 ? Math.max(0, (s.events - prev.events) / dt) : null;
    const byRate = prev && dt > 0 ? Math.max(0, (s.bytes - prev.bytes) / dt) : null;
    seen.set(s.name, { t: now, events: s.events, bytes: s.bytes });
    const link = el('a', 'tail');
    link.href = '#tail=' + encodeURIComponent(s.name);
    const name = el('td', s.name, 'set-name');
    const bytes = el('td', human(s.bytes), 'num');
    bytes.title = s.bytes + ' bytes';
    const tdLink = el('td');
    tdLink.append(link);
    return row([name, num(s.partitions), el('td', s.events, 'num set-events'), bytes,
      num(rate(evRate)), el('td', byRate === null ? '' : human(Math.round(byRate)) + '/s', 'num'),
      s.ack, s.compression, tdLink], s.name);
  });
  lastSets = seen;
  fill('sets', rows, 'no sets yet');
  // The tail picker lists the sets.
  const names = (j.sets || []).map((s) => s.name);
  const have = [...sel.options].slice(1).map((o) => o.value);
  if (names.join('\n') !== have.join('\n')) {
    while (sel.options.length > 1) sel.remove(1);
    for (const n of names) sel.add(new Option(n, n));
  }
  sel.value = names.includes(chosen) ? chosen : '';
}

function renderRules(j) {
  const rows = (j.rules || []).map((r) => {
    const health = el('td');
    for (const h of r.health || []) {
      const s = el('span', h.target + (h.healthy ? ' ok' : ' down' + (h.reason ? ': ' + h.reason : '')),
        h.healthy ? 'ok' : 'bad');
      health.append(s, ' ');
    }
    const lag = el('td', r.lag, 'num rule-lag' + (r.lag > 0 ? ' lagging' : ''));
    const err = el('td', r.last_error || '', r.last_error ? 'bad' : '');
    const name = el('td', r.name + (r.enabled === false ? ' (disabled)' : ''), 'rule-name');
    return row([name, r.set, (r.targets || []).join(', '), health, lag, num(r.delivered),
      num(r.retrying), el('td', r.failed, 'num' + (r.failed ? ' bad' : '')),
      num(r.dead_lettered), r.dlq || '', err], r.name);
  });
  fill('rules', rows, 'no rules (the server runs without a config file)');
}

function renderLanes(j) {
  const rows = (j.lanes || []).map((l) => row([
    el('td', l.name === '' ? '(base)' : l.name, 'lane-name'), l.env, l.fallback || '',
    el('td', l.events_in, 'num lane-in'), num(l.delivered), el('td', l.unrouted, 'num' + (l.unrouted ? ' bad' : '')),
    l.dropped ? 'dropped' : l.auto ? 'auto' : 'declared'], l.name));
  fill('lanes', rows, 'no lanes');
}

function renderSources(j) {
  const rows = (j.sources || []).map((s) => row([
    el('td', s.name, 'source-name'), s.kind, s.set, num(s.events), num(s.refused),
    num(s.backpressure_waits),
    el('td', s.healthy ? 'healthy' : 'unhealthy' + (s.health ? ': ' + s.health : ''),
      s.healthy ? 'ok' : 'bad')], s.name));
  fill('sources', rows, 'no sources');
}

function setStatus(text, bad) {
  const s = $('status');
  s.textContent = text;
  s.className = 'status' + (bad ? ' error' : '');
}

// One round of the overview, one request at a time (the tail's long-polls
// hold connections too). Rounds never overlap: on a slow server the interval
// skips a round instead of piling requests up; again asks for one more
// round after the running one (a key was just given).
async function refresh(again) {
  if (refreshing) {
    if (again) refreshAgain = true;
    return;
  }
  refreshing = true;
  try {
    renderSets(await api('/v1/sets'));
    renderRules(await api('/v1/rules'));
    renderLanes(await api('/v1/lanes'));
    renderSources(await api('/v1/sources'));
    setStatus('updated ' + new Date().toLocaleTimeString());
  } catch (e) {
    setStatus(e instanceof AuthNeeded ? 'an API key is needed' : 'error: ' + e.message, true);
  } finally {
    refreshing = false;
  }
  if (refreshAgain) {
    refreshAgain = false;
    refresh();
  }
}

// ---- the tail ----------------------------------------------------------------

function tailSet() {
  const m = /^#tail=(.+)$/.exec(location.hash);
  if (!m) return '';
  try { return decodeURIComponent(m[1]); } catch (_) { return ''; }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Where an event sorts in the tail: by its time attribute (every stored
// event has one: the producer's, or when sluice stored it), newest first;
// the same millisecond by partition, then newest offset first. Each
// partition is read on its own, so without this the backlog would come out
// grouped by partition, in whatever order their answers arrived.
function tailKey(ev) {
  const t = Date.parse(ev.time);
  return { t: Number.isNaN(t) ? -Infinity : t, p: ev.sluicepartition, o: ev.sluiceoffset };
}

// Whether a sorts above (is newer than) b.
function newer(a, b) {
  if (a.t !== b.t) return a.t > b.t;
  if (a.p !== b.p) return a.p < b.p;
  return a.o > b.o;
}

function addEvent(ev, isNew) {
  const tb = $('tail').tBodies[0];
  if (tb.querySelector('td.empty')) tb.replaceChildren();
  const key = tailKey(ev);
  // New events are mostly the newest: look from the top.
  let before = null;
  for (const r of tb.rows) {
    if (newer(key, r.tailKey)) { before = r; break; }
  }
  if (!before && tb.rows.length >= TAIL_KEEP) return; // older than all that is kept
  let data = ev.data === undefined ? (ev.data_base64 !== undefined ? '(base64) ' + ev.data_base64 : '')
    : typeof ev.data === 'string' ? ev.data : JSON.stringify(ev.data);
  if (data.length > 300) data = data.slice(0, 300) + '…';
  const tr = row([ev.time || '', ev.sluicepartition + '/' + ev.sluiceoffset,
    el('td', ev.id, 'ev-id'), ev.type, ev.source, el('td', ev.lane || '', 'ev-lane'),
    el('td', data, 'data')], ev.id);
  tr.className = 'ev' + (isNew ? ' new' : '');
  tr.tailKey = key;
  tb.insertBefore(tr, before);
  while (tb.rows.length > TAIL_KEEP) tb.deleteRow(tb.rows.length - 1);
  $('tail-info').textContent = tb.rows.length + ' events shown, newest first by time';
}

// Follows partition p of set from offset until the tail changes (gen is
// no longer tailGen; signal aborts the request in flight then).
async function followPartition(gen, signal, set, p, offset, longpoll) {
  const base = '/v1/sets/' + encodeURIComponent(set) + '/events?lane=*&max=100&partition=' + p;
  let first = true;
  while (gen === tailGen) {
    try {
      const j = await api(base + '&offset=' + offset + (longpoll ? '&wait_ms=' + TAIL_WAIT_MS : ''),
        signal);
      if (gen !== tailGen) return;
      for (const ev of j.events || []) addEvent(ev, !first);
      offset = j.next_offset;
      first = false;
      if (!longpoll || !(j.events || []).length) await sleep(longpoll ? 200 : 1000);
    } catch (e) {
      if (gen !== tailGen) return;
      if (e instanceof AuthNeeded) return; // started again once a key is given
      if (e.status === 416) { // the log moved (retention, or a restart lost a tail)
        try {
          const info = await api('/v1/sets/' + encodeURIComponent(set), signal);
          const pi = (info.partition_info || []).find((x) => x.partition === p);
          if (pi) offset = pi.end_offset;
        } catch (_) { /* next round */ }
      }
      await sleep(2000);
    }
  }
}

// (Re)starts the tail on the set of #tail=SET. The previous tail's loops
// stop, and its long-polls are aborted at once: each holds a connection
// for up to TAIL_WAIT_MS, and a browser opens only about 6 per host.
async function startTail() {
  const gen = ++tailGen;
  if (tailAbort) tailAbort.abort();
  tailAbort = new AbortController();
  const signal = tailAbort.signal;
  const set = tailSet();
  $('tail-section').hidden = !set;
  $('tail').tBodies[0].replaceChildren();
  $('tail-info').textContent = '';
  if (!set) return;
  $('tail-set').textContent = set;
  fill('tail', [], 'waiting for events…');
  try {
    const info = await api('/v1/sets/' + encodeURIComponent(set), signal);
    if (gen !== tailGen) return;
    const parts = info.partition_info || [];
    const longpoll = parts.length <= TAIL_LONGPOLL_MAX;
    for (const pi of parts) {
      const from = Math.max(pi.start_offset, pi.end_offset - TAIL_BACKLOG);
      followPartition(gen, signal, set, pi.partition, from, longpoll);
    }
  } catch (e) {
    if (gen === tailGen && !(e instanceof AuthNeeded))
      fill('tail', [], 'cannot tail ' + set + ': ' + e.message);
  }
}

// ---- start ---------------------------------------------------------------------

function start() {
  $('key-form').addEventListener('submit', (e) => {
    e.preventDefault();
    sessionStorage.setItem(KEY_STORE, $('key-input').value.trim());
    $('key-input').value = '';
    $('key-form').hidden = true;
    refresh(true);
    startTail();
  });
  $('tail-select').addEventListener('change', (e) => {
    location.hash = e.target.value ? 'tail=' + encodeURIComponent(e.target.value) : '';
  });
  window.addEventListener('hashchange', startTail);
  refresh();
  startTail();
  setInterval(() => refresh(), REFRESH_MS);
}

start();
