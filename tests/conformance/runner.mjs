#!/usr/bin/env node
// runner.mjs: replays MongoDB's unified-format driver specification tests (schema 1.x up
// to 1.21) against a live sabled through the Node.js `mongodb` driver, and prints one line
// per file plus "conformance: N passed, M failed, K skipped".
// The test files are read in place from <repo>/../shared/conformance/unified (or
// $CONFORMANCE_ROOT / --root); they are never copied into the repository.
// What must stay true: a test is skipped only by its file's runOnRequirements/skipReason
// or by an entry of skip.txt (each with a reason); any other failing test makes the exit
// code non-zero.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import net from 'node:net';
import { spawn, spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import mongodb from 'mongodb';
import { EntityMap, UnsupportedError } from './lib/entities.mjs';
import { execute, AssertionFailure, plainClientBulkResult } from './lib/operations.mjs';
import { match, matchRootArray, matchExact, show, withoutDriverWtimeout } from './lib/match.mjs';

const { MongoClient, MongoServerError, MongoBulkWriteError } = mongodb;
const { EJSON } = mongodb.BSON;

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, '..', '..');
const SUPPORTED_SCHEMA = [1, 21];
const OP_TIMEOUT_MS = 30000;
const ROOT_ARRAY_OPS = new Set(['find', 'aggregate', 'listCollections', 'listCollectionObjects',
  'listDatabases', 'listDatabaseObjects', 'listIndexes', 'runCursorCommand', 'listSearchIndexes']);

// ---------------------------------------------------------------------------------------
// Command line

function parseArgs(argv) {
  const o = { targets: [], skipFile: path.join(HERE, 'skip.txt'), verbose: false, runSkipped: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === '--uri') o.uri = next();
    else if (a === '--sabled') o.sabled = next();
    else if (a === '--root') o.root = next();
    else if (a === '--skip') o.skipFile = next();
    else if (a === '--filter') o.filter = next();
    else if (a === '--verbose' || a === '-v') o.verbose = true;
    else if (a === '--run-skipped') o.runSkipped = true;
    else if (a === '--replset') o.replset = true;
    else if (a === '--replset-only') { o.replset = true; o.replsetOnly = true; }
    else if (a === '--help' || a === '-h') {
      console.log('usage: node runner.mjs [--uri URI | --sabled PATH] [--replset | --replset-only] [--root DIR]\n'
        + '                      [--skip FILE] [--filter TEXT] [--run-skipped] [--verbose] <dir|file relative to root>...\n'
        + '  --replset       start a 3-member replica set (build/sable-cluster) instead of a standalone\n'
        + '  --replset-only  the same, running only the tests that do not run against a standalone');
      process.exit(0);
    } else if (a.startsWith('-')) throw new Error(`unknown option ${a}`);
    else o.targets.push(a);
  }
  o.root = path.resolve(o.root || process.env.CONFORMANCE_ROOT || path.join(REPO, '..', 'shared', 'conformance', 'unified'));
  // Absolute: sabled is started with its temporary directory as the working directory.
  o.sabled = path.resolve(o.sabled || process.env.SABLED || path.join(REPO, 'build', 'sabled'));
  return o;
}

// ---------------------------------------------------------------------------------------
// Skip list: "<file> | <test description or *> | <reason>" per line, '#' comments.

function loadSkipList(file) {
  const entries = [];
  if (!fs.existsSync(file)) return entries;
  fs.readFileSync(file, 'utf8').split('\n').forEach((line, i) => {
    const t = line.trim();
    if (!t || t.startsWith('#')) return;
    const parts = t.split(' | ');
    if (parts.length !== 3 || !parts[2].trim()) throw new Error(`${file}:${i + 1}: expected "<file> | <test or *> | <reason>"`);
    entries.push({ file: parts[0].trim(), test: parts[1].trim(), reason: parts[2].trim(), used: false, line: i + 1 });
  });
  return entries;
}

function skipEntry(skips, rel, description) {
  const e = skips.find((s) => s.file === rel && (s.test === '*' || s.test === description));
  if (e) e.used = true;
  return e;
}

// ---------------------------------------------------------------------------------------
// sabled life cycle

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

// What a signal or an error left running: each started server's synchronous
// clean-up, until its stop() ran.  On exit (SIGTERM, SIGINT and SIGHUP made
// exits here) they run, so no server and no sable-conformance-* directory
// stays behind; SIGKILL leaves them.
const atExit = new Set();
process.on('exit', () => {
  for (const fn of atExit) {
    try {
      fn();
    } catch { /* the others still run */ }
  }
});
for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP']) {
  process.once(sig, () => process.exit(128 + os.constants.signals[sig]));
}

async function startSabled(bin) {
  if (!fs.existsSync(bin)) throw new Error(`sabled not found at ${bin} (build it, or set SABLED / --sabled)`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sable-conformance-'));
  fs.mkdirSync(path.join(dir, 'db'));
  const port = await freePort();
  const log = fs.openSync(path.join(dir, 'out.txt'), 'a');
  const proc = spawn(bin, ['--port', String(port), '--bind_ip', '127.0.0.1', '--dbpath', path.join(dir, 'db'),
    '--logpath', path.join(dir, 'sabled.log'), '--setParameter', 'enableTestCommands=1'], { stdio: ['ignore', log, log], cwd: dir });
  let exited = null;
  proc.on('exit', (code, sig) => { exited = code ?? sig; });
  const left = () => {
    if (exited === null) proc.kill('SIGKILL');
    fs.rmSync(dir, { recursive: true, force: true });
  };
  atExit.add(left);
  const uri = `mongodb://127.0.0.1:${port}/?directConnection=true`;
  const deadline = Date.now() + 30000;
  for (;;) {
    if (exited !== null) throw new Error(`sabled exited (${exited}) at start: ${fs.readFileSync(path.join(dir, 'out.txt'), 'utf8').slice(-2000)}`);
    const c = new MongoClient(uri, { serverSelectionTimeoutMS: 500 });
    try {
      await c.db('admin').command({ ping: 1 });
      await c.close();
      break;
    } catch {
      await c.close().catch(() => {});
      if (Date.now() > deadline) throw new Error('sabled did not answer within 30 s');
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  return {
    uri,
    async stop() {
      if (exited === null) {
        const done = new Promise((r) => proc.once('exit', r));
        proc.kill('SIGTERM');
        const t = setTimeout(() => proc.kill('SIGKILL'), 20000);
        await done;
        clearTimeout(t);
      }
      fs.rmSync(dir, { recursive: true, force: true });
      atExit.delete(left);
    },
  };
}

// A 3-member replica set started with scripts/sable-cluster (the same launcher users and
// the other tests use) on three consecutive free ports, data in a temporary directory.
function portFree(port) {
  return new Promise((resolve) => {
    const srv = net.createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

async function freePortRun(n) {
  for (let attempt = 0; attempt < 200; attempt++) {
    // below 32768, where Linux starts giving outgoing connections their ports
    const base = 20000 + Math.floor(Math.random() * (12000 - n));
    let ok = true;
    for (let i = 0; i < n && ok; i++) ok = await portFree(base + i);
    if (ok) return base;
  }
  throw new Error(`no ${n} consecutive free ports`);
}

function runCluster(args, env) {
  return new Promise((resolve, reject) => {
    const launcher = path.join(REPO, 'scripts', 'sable-cluster');
    const p = spawn('/usr/bin/python3', [launcher, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d) => { out += d; });
    p.stderr.on('data', (d) => { out += d; });
    p.on('error', reject);
    p.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`sable-cluster ${args[0]} exited ${code}: ${out}`))));
  });
}

async function startReplSet(bin, members = 3) {
  if (!fs.existsSync(bin)) throw new Error(`sabled not found at ${bin} (build it, or set SABLED / --sabled)`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sable-conformance-rs-'));
  const env = { ...process.env, SABLED: bin };
  const left = () => {
    spawnSync('/usr/bin/python3', [path.join(REPO, 'scripts', 'sable-cluster'), 'stop', '--dir', dir],
      { env, stdio: 'ignore', timeout: 120000 });
    fs.rmSync(dir, { recursive: true, force: true });
  };
  atExit.add(left);
  const base = await freePortRun(members);
  try {
    await runCluster(['start', '--replset', 'rs0', '--members', String(members), '--dir', dir,
      '--port', String(base), '--oplog-mb', '256', '--sabled-arg=--setParameter', '--sabled-arg=enableTestCommands=1'], env);
  } catch (e) {
    await runCluster(['stop', '--dir', dir], env).catch(() => {});
    fs.rmSync(dir, { recursive: true, force: true });
    atExit.delete(left);
    throw e;
  }
  const hosts = Array.from({ length: members }, (_, i) => `127.0.0.1:${base + i}`);
  const uri = `mongodb://${hosts.join(',')}/?replicaSet=rs0`;
  // Wait until every member is PRIMARY or SECONDARY, so w:"majority" set-up writes do
  // not wait for a member still catching up.
  const deadline = Date.now() + 60000;
  for (;;) {
    const c = new MongoClient(uri, { serverSelectionTimeoutMS: 5000 });
    let ready = false;
    try {
      const st = await c.db('admin').command({ replSetGetStatus: 1 });
      ready = st.members.length === members && st.members.every((m) => m.state === 1 || m.state === 2);
    } catch { /* not yet */ }
    await c.close().catch(() => {});
    if (ready) break;
    if (Date.now() > deadline) throw new Error(`replica set in ${dir} not ready within 60 s`);
    await new Promise((r) => setTimeout(r, 200));
  }
  return {
    uri,
    async stop() {
      await runCluster(['stop', '--dir', dir], env).catch((e) => console.error(String(e)));
      fs.rmSync(dir, { recursive: true, force: true });
      atExit.delete(left);
    },
  };
}

// ---------------------------------------------------------------------------------------
// runOnRequirements

function versionCmp(a, b) {
  const pa = String(a).split('.').map(Number), pb = String(b).split('.').map(Number);
  for (let i = 0; i < 3; i++) {
    const x = pa[i] || 0, y = pb[i] || 0;
    if (x !== y) return x < y ? -1 : 1;
  }
  return 0;
}

async function unmetRequirement(r, server) {
  if (r.minServerVersion && versionCmp(server.version, r.minServerVersion) < 0) return `minServerVersion ${r.minServerVersion}`;
  if (r.maxServerVersion && versionCmp(server.version, r.maxServerVersion) > 0) return `maxServerVersion ${r.maxServerVersion}`;
  if (r.topologies) {
    const tops = r.topologies.map((t) => (t === 'sharded-replicaset' ? 'sharded' : t));
    if (!tops.includes(server.topology)) return `topologies ${r.topologies.join(',')}`;
  }
  if (r.serverless === 'require') return 'serverless required';
  if (r.auth === true) return 'auth required';
  if (r.authMechanism) return `authMechanism ${r.authMechanism}`;
  if (r.csfle === true || (r.csfle && typeof r.csfle === 'object')) return 'csfle required';
  if (r.serverParameters) {
    for (const [k, v] of Object.entries(r.serverParameters)) {
      let actual;
      try {
        actual = (await server.internal.db('admin').command({ getParameter: 1, [k]: 1 }))[k];
      } catch (e) {
        return `serverParameters ${k} (getParameter: ${e.message})`;
      }
      if (match(v, actual, { entities: null }, true) !== null) return `serverParameters ${k}=${show(v)} (server: ${show(actual)})`;
    }
  }
  return null;
}

// null when some requirement is satisfied (or there are none), else why none is.
async function requirementsUnmet(list, server) {
  if (!list || list.length === 0) return null;
  const why = [];
  for (const r of list) {
    const w = await unmetRequirement(r, server);
    if (w === null) return null;
    why.push(w);
  }
  return `runOnRequirements: ${why.join('; ')}`;
}

// ---------------------------------------------------------------------------------------
// Expected errors and events

function errorLabels(err) {
  if (Array.isArray(err.errorLabels)) return err.errorLabels;
  if (err.errorLabelSet) return [...err.errorLabelSet];
  return [];
}

function checkError(exp, err, ctx) {
  const isServer = err instanceof MongoServerError;
  if (exp.isClientError === true && isServer) return `expected a client error, got server error ${err.code}: ${err.message}`;
  if (exp.isClientError === false && !isServer) return `expected a server error, got client error ${err.name}: ${err.message}`;
  if (exp.isTimeoutError !== undefined && (err.name === 'MongoOperationTimeoutError') !== exp.isTimeoutError) {
    return `isTimeoutError ${exp.isTimeoutError}, got ${err.name}: ${err.message}`;
  }
  if (exp.errorContains !== undefined && !String(err.message).toLowerCase().includes(exp.errorContains.toLowerCase())) {
    return `error message ${JSON.stringify(err.message)} does not contain ${JSON.stringify(exp.errorContains)}`;
  }
  if (exp.errorCode !== undefined && err.code !== exp.errorCode) return `error code ${err.code} (${err.message}), expected ${exp.errorCode}`;
  if (exp.errorCodeName !== undefined && err.codeName !== exp.errorCodeName) {
    return `error codeName ${err.codeName} (${err.message}), expected ${exp.errorCodeName}`;
  }
  const labels = errorLabels(err);
  for (const l of exp.errorLabelsContain || []) if (!labels.includes(l)) return `error labels ${show(labels)} lack ${l}`;
  for (const l of exp.errorLabelsOmit || []) if (labels.includes(l)) return `error labels ${show(labels)} contain ${l}`;
  if (exp.errorResponse !== undefined) {
    const r = match(exp.errorResponse, err.errorResponse, ctx, true);
    if (r) return `errorResponse: ${r}`;
  }
  if (exp.writeErrors !== undefined) {
    const we = err.writeErrors instanceof Map ? Object.fromEntries([...err.writeErrors].map(([k, v]) => [String(k), v])) : err.writeErrors;
    for (const [k, v] of Object.entries(exp.writeErrors)) {
      const r = match(v, we?.[k], ctx, true, `writeErrors.${k}`);
      if (r) return r;
    }
    if (we && Object.keys(we).length !== Object.keys(exp.writeErrors).length) return `writeErrors: ${show(we)}`;
  }
  if (exp.writeConcernErrors !== undefined) {
    const r = matchRootArray(exp.writeConcernErrors, err.writeConcernErrors, ctx);
    if (r) return `writeConcernErrors: ${r}`;
  }
  if (exp.expectResult !== undefined) {
    let partial;
    if (err instanceof MongoBulkWriteError) partial = err.result && { ...toPlainBulk(err.result) };
    else if (err.partialResult !== undefined) partial = plainClientBulkResult(err.partialResult);
    const r = match(exp.expectResult, partial, ctx, true);
    if (r) return `expectResult (partial): ${r}`;
  }
  return null;
}

function toPlainBulk(r) {
  return {
    deletedCount: r.deletedCount, insertedCount: r.insertedCount, insertedIds: r.insertedIds,
    matchedCount: r.matchedCount, modifiedCount: r.modifiedCount, upsertedCount: r.upsertedCount,
    upsertedIds: r.upsertedIds,
  };
}

function eventMatches(exp, actual, ctx) {
  const ev = actual.ev;
  if (exp === null || typeof exp !== 'object') return null;
  for (const [k, v] of Object.entries(exp)) {
    switch (k) {
      case 'command': { const r = match(v, withoutDriverWtimeout(v, ev.commandName, ev.command), ctx, true, 'command'); if (r) return r; break; }
      case 'reply': { const r = match(v, ev.reply, ctx, true, 'reply'); if (r) return r; break; }
      case 'commandName': if (ev.commandName !== v) return `commandName ${ev.commandName}, expected ${v}`; break;
      case 'databaseName': if (ev.databaseName !== v) return `databaseName ${ev.databaseName}, expected ${v}`; break;
      case 'hasServiceId': if (!!ev.serviceId !== v) return `hasServiceId ${!!ev.serviceId}`; break;
      case 'hasServerConnectionId': if ((ev.serverConnectionId != null) !== v) return `hasServerConnectionId ${ev.serverConnectionId != null}`; break;
      case 'interruptInUseConnections': if (!!ev.interruptInUseConnections !== v) return 'interruptInUseConnections'; break;
      case 'reason': if (ev.reason !== v) return `reason ${ev.reason}, expected ${v}`; break;
      default: throw new UnsupportedError(`expected event field ${k}`);
    }
  }
  return null;
}

function checkEvents(expectEvents, ents, ctx) {
  for (const block of expectEvents) {
    const c = ents.get(block.client, 'client');
    const type = block.eventType || 'command';
    if (type === 'sdam') throw new UnsupportedError('sdam event assertions');
    const actual = type === 'command' ? c.commandEvents : c.cmapEvents;
    const exp = block.events;
    const tooMany = block.ignoreExtraEvents ? false : actual.length > exp.length;
    const summary = () => actual.map((e) => `${e.type}(${e.ev.commandName ?? ''})`).join(', ');
    if (actual.length < exp.length || tooMany) {
      return `${block.client}: expected ${exp.length} ${type} events, got ${actual.length}: ${summary()}`;
    }
    for (let i = 0; i < exp.length; i++) {
      const [t] = Object.keys(exp[i]);
      if (actual[i].type !== t) return `${block.client} event ${i}: expected ${t}, got ${actual[i].type}(${actual[i].ev.commandName ?? ''}); events: ${summary()}`;
      const r = eventMatches(exp[i][t], actual[i], ctx);
      if (r) return `${block.client} event ${i} (${t} ${actual[i].ev.commandName ?? ''}): ${r}`;
    }
  }
  return null;
}

// ---------------------------------------------------------------------------------------
// Running tests

function withTimeout(p, ms, what) {
  let t;
  return Promise.race([p, new Promise((_, rej) => { t = setTimeout(() => rej(new AssertionFailure(`${what} timed out after ${ms} ms`)), ms); })])
    .finally(() => clearTimeout(t));
}

function entityKind(v) {
  if (v instanceof mongodb.Collection) return 'collection';
  if (v && typeof v === 'object' && typeof v.tryNext === 'function') return v.constructor?.name === 'ChangeStream' ? 'changeStream' : 'cursor';
  return 'value';
}

class Runner {
  constructor(server) {
    this.server = server;
    this.internal = server.internal;
    this.failPointsSet = [];
    this.eventMatches = eventMatches;
  }

  // rethrow: inside a withTransaction callback an expected error, once
  // checked, propagates to the driver's withTransaction (unified format).
  async runOperation(op, ents, rethrow = false) {
    const ctx = { entities: ents };
    let result, error;
    try {
      result = await withTimeout(execute(op, ents, this), OP_TIMEOUT_MS, op.name);
    } catch (e) {
      if (e instanceof UnsupportedError || e instanceof AssertionFailure) throw e;
      error = e;
    }
    const where = `${op.name} on ${op.object}`;
    if (op.ignoreResultAndError) return;
    if (op.expectError) {
      if (!error) throw new AssertionFailure(`${where}: expected an error, got result ${show(result)}`);
      const r = checkError(op.expectError, error, ctx);
      if (r) throw new AssertionFailure(`${where}: ${r}`);
      if (rethrow) throw error;
      return;
    }
    if (error) {
      const code = error.code !== undefined ? ` code ${error.code}${error.codeName ? ` (${error.codeName})` : ''}` : '';
      throw new AssertionFailure(`${where}: unexpected error${code}: ${error.message}`);
    }
    if (op.expectResult !== undefined) {
      const r = ROOT_ARRAY_OPS.has(op.name) ? matchRootArray(op.expectResult, result, ctx) : match(op.expectResult, result, ctx, true);
      if (r) throw new AssertionFailure(`${where}: result ${r}`);
    }
    if (op.saveResultAsEntity) ents.set(op.saveResultAsEntity, entityKind(result), result);
  }

  async setUpData(initialData) {
    const wc = { writeConcern: { w: 'majority' } };
    for (const cd of initialData || []) {
      const db = this.internal.db(cd.databaseName);
      try {
        await db.collection(cd.collectionName).drop(wc);
      } catch (e) {
        if (!(e instanceof MongoServerError && e.code === 26)) throw e;
      }
      if (cd.createOptions) await db.createCollection(cd.collectionName, { ...cd.createOptions, ...wc });
      if (cd.documents && cd.documents.length) await db.collection(cd.collectionName).insertMany(cd.documents, wc);
      else if (!cd.createOptions) await db.createCollection(cd.collectionName, wc);
    }
  }

  async checkOutcome(outcome) {
    for (const cd of outcome || []) {
      const docs = await this.internal.db(cd.databaseName).collection(cd.collectionName)
        .find({}, { sort: { _id: 1 }, readConcern: { level: 'local' }, readPreference: 'primary' }).toArray();
      if (docs.length !== cd.documents.length) {
        return `outcome ${cd.databaseName}.${cd.collectionName}: expected ${cd.documents.length} documents, got ${docs.length}: ${show(docs)}`;
      }
      for (let i = 0; i < docs.length; i++) {
        const r = matchExact(cd.documents[i], docs[i], `[${i}]`);
        if (r) return `outcome ${cd.databaseName}.${cd.collectionName} ${r}`;
      }
    }
    return null;
  }

  // Returns null when the test passed, else the failure message.
  async runTest(file, test) {
    const ents = new EntityMap(this.server.uri);
    const ctx = { entities: ents };
    this.failPointsSet = [];
    try {
      // As the unified format asks: end every session's open transaction left
      // by an earlier test (an open one holds up index builds and later commits).
      await this.internal.db('admin').command({ killAllSessions: [] }).catch(() => {});
      await this.setUpData(file.initialData);
      await ents.create(file.createEntities || []);
      for (const op of test.operations) await this.runOperation(op, ents);
      ents.stopRecording();
      if (test.expectEvents) {
        const r = checkEvents(test.expectEvents, ents, ctx);
        if (r) return `events: ${r}`;
      }
      if (test.outcome) return await this.checkOutcome(test.outcome);
      return null;
    } catch (e) {
      if (e instanceof UnsupportedError) return `runner: unsupported ${e.message}`;
      if (e instanceof AssertionFailure) return e.message;
      return `error: ${e.message}`;
    } finally {
      ents.stopRecording();
      for (const fp of this.failPointsSet) {
        await fp.client.db('admin').command({ configureFailPoint: fp.name, mode: 'off' }).catch(() => {});
      }
      await ents.closeAll();
    }
  }
}

function listFiles(root, target) {
  const p = path.join(root, target);
  if (!fs.existsSync(p)) throw new Error(`no such test file or directory: ${p}`);
  if (fs.statSync(p).isFile()) return [target];
  return fs.readdirSync(p).filter((f) => f.endsWith('.json')).sort().map((f) => path.posix.join(target, f));
}

function schemaSupported(v) {
  const [maj, min] = String(v).split('.').map(Number);
  return maj === SUPPORTED_SCHEMA[0] && min <= SUPPORTED_SCHEMA[1];
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  if (opts.targets.length === 0) throw new Error('no test directories given (see --help)');
  const skips = loadSkipList(opts.skipFile);
  const sabled = opts.uri ? null : opts.replset ? await startReplSet(opts.sabled) : await startSabled(opts.sabled);
  const uri = opts.uri || sabled.uri;
  const internal = new MongoClient(uri, { serverSelectionTimeoutMS: 10000 });
  const totals = { passed: 0, failed: 0, skipped: 0 };
  const perDir = new Map();
  const staleSkips = [];
  try {
    const build = await internal.db('admin').command({ buildInfo: 1 });
    const hello = await internal.db('admin').command({ hello: 1 });
    const topology = hello.setName ? 'replicaset' : hello.msg === 'isdbgrid' ? 'sharded' : 'single';
    const server = { version: build.version, topology, internal, uri };
    console.log(`server ${build.version} (${topology}) at ${uri.replace(/\?.*$/, '')}; tests from ${opts.root}`);
    const runner = new Runner(server);
    // --replset-only: what a standalone would run was run there; only the rest runs here.
    const asSingle = { ...server, topology: 'single' };
    const ranOnSingle = async (file, test) => opts.replsetOnly && schemaSupported(file.schemaVersion)
      && !test.skipReason && await requirementsUnmet(file.runOnRequirements, asSingle) === null
      && await requirementsUnmet(test.runOnRequirements, asSingle) === null;
    for (const target of opts.targets) {
      for (const rel of listFiles(opts.root, target)) {
        const dir = path.posix.dirname(rel);
        const d = perDir.get(dir) || { passed: 0, failed: 0, skipped: 0, byRequirements: 0, bySkipList: 0 };
        perDir.set(dir, d);
        const text = fs.readFileSync(path.join(opts.root, rel), 'utf8');
        const file = EJSON.parse(text, { relaxed: true });
        const counts = { passed: 0, failed: 0, skipped: 0 };
        const lines = [];
        const fileSkip = !schemaSupported(file.schemaVersion) ? `schemaVersion ${file.schemaVersion} not supported`
          : await requirementsUnmet(file.runOnRequirements, server);
        for (let i = 0; i < file.tests.length; i++) {
          // A fresh parse per test: the driver adds _id to inserted documents in place.
          const fresh = EJSON.parse(text, { relaxed: true });
          const test = fresh.tests[i];
          if (opts.filter && !`${rel} ${test.description}`.includes(opts.filter)) continue;
          let why = fileSkip || (test.skipReason ? `skipReason: ${test.skipReason}` : null) || await requirementsUnmet(test.runOnRequirements, server)
            || (await ranOnSingle(file, test) ? 'runs against the standalone' : null);
          // An entry naming a test that exists is not stale, whatever runs it here.
          const entry = skipEntry(skips, rel, test.description);
          if (why) {
            counts.skipped++; d.byRequirements++;
            if (opts.verbose) lines.push(`  skip  ${test.description}: ${why}`);
            continue;
          }
          if (entry && !opts.runSkipped) {
            counts.skipped++; d.bySkipList++;
            if (opts.verbose) lines.push(`  skip  ${test.description}: skip.txt:${entry.line}: ${entry.reason}`);
            continue;
          }
          const t0 = Date.now();
          const failure = await runner.runTest(fresh, test);
          const ms = Date.now() - t0;
          if (entry) {
            // --run-skipped: report skip-list entries whose test now passes.
            counts.skipped++; d.bySkipList++;
            if (!failure) staleSkips.push(`${rel} | ${test.description} (skip.txt:${entry.line}) now passes`);
            else if (opts.verbose) lines.push(`  skip  ${test.description}: ${failure}`);
            continue;
          }
          if (failure) {
            counts.failed++;
            lines.push(`  FAIL  ${test.description}: ${failure}`);
          } else {
            counts.passed++;
            if (opts.verbose) lines.push(`  ok    ${test.description} (${ms} ms)`);
          }
        }
        const total = counts.passed + counts.failed + counts.skipped;
        const status = counts.failed ? 'FAIL' : counts.passed ? 'PASS' : 'SKIP';
        const extra = [counts.failed && `${counts.failed} failed`, counts.skipped && `${counts.skipped} skipped`].filter(Boolean).join(', ');
        console.log(`${status} ${rel} ${counts.passed}/${total}${extra ? ` (${extra})` : ''}`);
        for (const l of lines) console.log(l);
        for (const k of Object.keys(totals)) { totals[k] += counts[k]; d[k] += counts[k]; }
      }
    }
  } finally {
    await internal.close().catch(() => {});
    if (sabled) await sabled.stop();
  }
  console.log('');
  for (const [dir, d] of perDir) {
    const applicable = d.passed + d.failed + d.bySkipList;
    const rate = applicable ? ((100 * d.passed) / applicable).toFixed(1) : '-';
    console.log(`${dir}: ${d.passed} passed, ${d.failed} failed, ${d.skipped} skipped (${d.byRequirements} by runOnRequirements, `
      + `${d.bySkipList} by skip list); ${d.passed}/${applicable} of the tests that apply pass (${rate}%)`);
  }
  for (const s of staleSkips) console.log(`stale skip-list entry: ${s}`);
  if (!opts.filter) {
    const covered = new Set(opts.targets);
    for (const s of skips) {
      if (!s.used && [...covered].some((t) => s.file === t || s.file.startsWith(`${t}/`))) {
        console.log(`stale skip-list entry: skip.txt:${s.line} matches no test that ran (${s.file} | ${s.test})`);
      }
    }
  }
  console.log(`conformance: ${totals.passed} passed, ${totals.failed} failed, ${totals.skipped} skipped`);
  return totals.failed === 0 ? 0 : 1;
}

main().then((code) => process.exit(code), (e) => {
  console.error(`conformance runner error: ${e.stack || e}`);
  process.exit(2);
});
