// monitor.js: the monitoring page's charts.  Fetches the server's one-hour
// ring (GET api/series, src/metrics/series.c) once, then every second only
// the samples after the newest it has (?since=), and draws each group of
// series with uPlot.  Every chart shows the same time window and follows the
// same cursor; a drag on one zooms all of them, a double-click goes back.
// Polling pauses while the page is hidden, so an unwatched tab costs nothing.
// Charts whose series the server does not have are left out (sable-router
// has no cache, journal or audit log); on a router each shard gets a section
// of its own: its members' states and lag, and the router's requests to it.
'use strict';

const CHARTS = [
  {id: 'cpu', title: 'CPU', unit: '% of one core', keys: ['cpu_user', 'cpu_system']},
  {id: 'ops', title: 'Operations', unit: 'per second',
   keys: ['ops_insert', 'ops_query', 'ops_update', 'ops_delete', 'ops_getmore', 'ops_command']},
  {id: 'latency', title: 'Latency', unit: 'ms, mean and 99th percentile',
   keys: ['read_avg_ms', 'read_p99_ms', 'write_avg_ms', 'write_p99_ms']},
  {id: 'connections', title: 'Connections', unit: 'open', keys: ['connections']},
  {id: 'cache', title: 'WiredTiger cache', unit: '% of the configured size',
   keys: ['cache_fill_pct', 'cache_dirty_pct']},
  {id: 'journal', title: 'Journal flushes', unit: 'per second', keys: ['journal_flushes']},
  {id: 'audit', title: 'Audit events', unit: 'per second', keys: ['audit_events']},
];
const COLORS = ['#3b6fd8', '#e0663a', '#2f9e5b', '#b34bc4', '#c9a227', '#5a6b7d', '#1ba3b8', '#d04a7a'];
// MongoDB's member states (replSetGetStatus.members[].state).
const STATES = ['STARTUP', 'PRIMARY', 'SECONDARY', 'RECOVERING', '4', 'STARTUP2', 'UNKNOWN',
                'ARBITER', 'DOWN', 'ROLLBACK', 'REMOVED'];

const S = {
  last: 0, capacity: 3600, t: [], values: {}, labels: {}, units: {}, role: 'server',
  members: [],          // [{name, shard, state: [], lag_s: []}] aligned with t
  shards: [],           // [{name, requests: [], latency_ms: []}] aligned with t (a router's)
  charts: {},           // id -> {def, plot, el}
  windowSecs: 300, zoom: null, draws: 0, latest: null, ready: false,
};
window.sableMonitor = S; // for scripts and tests

function $(id) { return document.getElementById(id); }

function chartWidth(el) { return Math.max(300, el.clientWidth - 16); }

function text(tag, cls, t) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  e.textContent = t;
  return e;
}

// The section of a router's page that holds one shard's charts.
function shardSection(name) {
  const id = 'shard-' + name;
  let sec = document.getElementById(id);
  if (!sec) {
    sec = document.createElement('section');
    sec.className = 'shard';
    sec.id = id;
    sec.appendChild(text('h2', '', 'Shard ' + name));
    const grid = document.createElement('div');
    grid.className = 'grid';
    sec.appendChild(grid);
    $('shards').appendChild(sec);
  }
  return sec.querySelector('.grid');
}

function makeChart(def) {
  let el = $('chart-' + def.id);
  if (!el) {
    el = document.createElement('div');
    el.className = 'chart';
    el.id = 'chart-' + def.id;
    el.dataset.points = '0';
    const h = text('h2', '', def.title + ' ');
    h.appendChild(text('small', '', def.unit));
    el.appendChild(h);
    (def.shard !== undefined ? shardSection(def.shard) : $('charts')).appendChild(el);
  }
  const series = [{}].concat(def.keys.map((k, i) => ({
    label: def.labels ? def.labels[i] : (S.labels[k] || k),
    stroke: COLORS[i % COLORS.length],
    width: 1.5,
    spanGaps: false,
    value: def.valueFmt || ((u, v) => v == null ? '–' : +v.toFixed(v < 10 ? 3 : 1)),
  })));
  // Tick labels with as many decimals as their spacing needs (a cache 0.05% full
  // would otherwise label every tick "0").
  const axisY = {size: 56, values: (u, vals) => {
    const step = vals.length > 1 ? Math.abs(vals[1] - vals[0]) : 1;
    let d = 0;
    while (d < 6 && Math.abs(Math.round(step * 10 ** d) - step * 10 ** d) > 1e-6) d++;
    return vals.map(v => v == null ? '' : v.toFixed(d));
  }};
  if (def.states) { // one tick per state, named
    axisY.size = 96;
    axisY.splits = () => [0, 1, 2, 3, 5, 8, 9, 10];
    axisY.values = (u, vals) => vals.map(v => Number.isInteger(v) ? (STATES[v] || v) : '');
  }
  const opts = {
    width: chartWidth(el), height: 190, series,
    scales: {x: {time: true}, y: def.states ? {range: [0, 10]} : {}},
    axes: [{}, axisY],
    cursor: {sync: {key: 'sable'}, drag: {x: true, y: false, setScale: false}},
    legend: {live: true},
    hooks: {
      setSelect: [u => {
        if (u.select.width < 4) return;
        S.zoom = {min: u.posToVal(u.select.left, 'x'),
                  max: u.posToVal(u.select.left + u.select.width, 'x')};
        u.setSelect({left: 0, width: 0}, false);
        redraw();
      }],
      draw: [() => { S.draws++; }],
    },
  };
  const plot = new uPlot(opts, dataFor(def), el);
  el.addEventListener('dblclick', () => { S.zoom = null; redraw(); });
  S.charts[def.id] = {def, plot, el};
}

// Member state and lag charts for the members of one shard ('' : the
// replica set this server belongs to).
function memberCharts(shard, id, title) {
  const ms = S.members.filter(m => (m.shard || '') === shard);
  if (ms.length === 0) return [];
  const labels = ms.map(m => m.name);
  const keys = labels.map((_, i) => 'm' + i);
  const where = shard === '' ? {} : {shard};
  return [
    Object.assign({id: id + '_state', title: title ? title + 'member state' : 'Member state',
                   unit: '', labels, states: true,
                   members: ms, member: 'state', keys,
                   valueFmt: (u, v) => v == null ? '–' : (STATES[v] || v)}, where),
    Object.assign({id: id + '_lag', title: title ? title + 'replication lag' : 'Replication lag',
                   unit: 'seconds behind the primary', labels, members: ms, member: 'lag_s', keys},
                  where),
  ];
}

function shardCharts() {
  let defs = [];
  S.shards.forEach((sh, i) => {
    defs = defs.concat(memberCharts(sh.name, 'shard' + i, ''));
    defs.push({id: 'shard' + i + '_requests', title: 'Requests from this router', unit: 'per second',
               shard: sh.name, labels: ['requests'], keys: ['requests'], from: sh});
    defs.push({id: 'shard' + i + '_latency', title: 'Round trip from this router',
               unit: 'ms, mean', shard: sh.name, labels: ['round trip'], keys: ['latency_ms'],
               from: sh});
  });
  return defs;
}

// The server's charts: those whose series it has.
function mainCharts() {
  return CHARTS.filter(c => c.keys.some(k => k in S.labels));
}

function dataFor(def) {
  if (def.member)
    return [S.t].concat(def.members.map(m => m[def.member]));
  if (def.from)
    return [S.t].concat(def.keys.map(k => def.from[k] || []));
  return [S.t].concat(def.keys.map(k => S.values[k] || []));
}

function countPoints(data) {
  let n = 0;
  for (let s = 1; s < data.length; s++)
    for (const v of data[s]) if (v != null) n++;
  return n;
}

function redraw() {
  const last = S.t.length ? S.t[S.t.length - 1] : Date.now() / 1000;
  const first = S.t.length ? S.t[0] : last - S.windowSecs;
  // The chosen window, or less while the server has less data than that.
  const range = S.zoom || {min: Math.max(first, last - S.windowSecs), max: last};
  const defs = mainCharts().concat(memberCharts('', 'repl', 'Replica set: '), shardCharts());
  for (const def of defs) {
    let c = S.charts[def.id];
    if (c && c.def.keys.length !== def.keys.length) { // a member joined: rebuild
      c.plot.destroy();
      delete S.charts[def.id];
      c = null;
    }
    if (!c) { makeChart(def); c = S.charts[def.id]; }
    c.def = def; // the members' and shards' arrays are replaced as data arrives
    const data = dataFor(def);
    c.plot.batch(() => {
      c.plot.setData(data, false);
      c.plot.setScale('x', range);
    });
    c.el.dataset.points = String(countPoints(data));
  }
}

function merge(j) {
  const full = j.last < S.last || S.last === 0;
  const n = j.t.length;
  if (full) {
    S.t = []; S.values = {}; S.members = []; S.shards = []; S.labels = {};
    for (const s of j.series) { S.labels[s.key] = s.label; S.units[s.key] = s.unit; }
    S.role = j.role || 'server';
  }
  const before = S.t.length;
  S.t = S.t.concat(j.t);
  for (const s of j.series)
    S.values[s.key] = (S.values[s.key] || []).concat(j.values[s.key] || []);
  // Members (keyed by shard and name) and shards: appended, padded with
  // nulls for the samples before they first appeared or that they missed.
  const pad = (rows, keyOf, got, fields) => {
    for (const g of got) {
      let mine = rows.find(x => keyOf(x) === keyOf(g));
      if (!mine) {
        mine = {name: g.name, shard: g.shard};
        for (const f of fields) mine[f] = new Array(before).fill(null);
        rows.push(mine);
      }
      for (const f of fields) mine[f] = mine[f].concat(g[f]);
    }
    for (const mine of rows)
      for (const f of fields)
        while (mine[f].length < S.t.length) mine[f].push(null);
  };
  pad(S.members, m => (m.shard || '') + '/' + m.name, j.members, ['state', 'lag_s']);
  pad(S.shards, x => x.name, j.shards || [], ['requests', 'latency_ms']);
  const extra = S.t.length - j.capacity;
  if (extra > 0) {
    S.t = S.t.slice(extra);
    for (const k in S.values) S.values[k] = S.values[k].slice(extra);
    for (const m of S.members) { m.state = m.state.slice(extra); m.lag_s = m.lag_s.slice(extra); }
    for (const x of S.shards) {
      x.requests = x.requests.slice(extra);
      x.latency_ms = x.latency_ms.slice(extra);
    }
  }
  S.last = j.last;
  S.capacity = j.capacity;
  if (j.latest) S.latest = j.latest;
  return n;
}

function showNumbers() {
  const l = S.latest;
  if (!l) return;
  for (const k in l.opcounters) {
    const e = $('num-' + k);
    if (e) { e.textContent = String(l.opcounters[k]); e.dataset.value = String(l.opcounters[k]); }
  }
  $('num-connections').textContent = String(l.connections);
  $('num-connections').dataset.value = String(l.connections);
  const cache = 'cache_fill_pct' in S.labels;
  $('num-cache').parentNode.hidden = !cache;
  if (cache) {
    $('num-cache').textContent = (l.cache_bytes / 1048576).toFixed(1) + ' MB of ' +
                                 (l.cache_max_bytes / 1048576).toFixed(0) + ' MB';
    $('num-cache').dataset.value = String(l.cache_bytes);
  }
  $('role').textContent = S.role === 'router' ? 'router' : '';
  $('num-time').textContent = new Date(l.t_ms).toLocaleTimeString();
  $('num-time').dataset.value = String(l.t_ms);
}

let timer = null, inflight = false;
async function poll() {
  timer = null;
  inflight = true;
  try {
    const r = await fetch('api/series?since=' + S.last, {cache: 'no-store'});
    if (!r.ok) throw new Error('HTTP ' + r.status);
    const j = await r.json();
    merge(j);
    showNumbers();
    redraw();
    S.ready = S.t.length > 0;
    $('status').textContent = 'live · ' + S.t.length + ' s of data';
  } catch (e) {
    $('status').textContent = 'no answer from the server (' + e.message + '); retrying';
  }
  inflight = false;
  if (!document.hidden) timer = setTimeout(poll, 1000);
}

document.addEventListener('visibilitychange', () => {
  if (!document.hidden && timer === null && !inflight) poll();
});
window.addEventListener('resize', () => {
  for (const id in S.charts) {
    const c = S.charts[id];
    c.plot.setSize({width: chartWidth(c.el), height: 190});
  }
});
for (const b of document.querySelectorAll('button[data-window]')) {
  b.addEventListener('click', () => {
    S.windowSecs = +b.dataset.window;
    S.zoom = null;
    for (const o of document.querySelectorAll('button[data-window]')) o.classList.toggle('on', o === b);
    redraw();
  });
}
$('host').textContent = location.host;
poll();
