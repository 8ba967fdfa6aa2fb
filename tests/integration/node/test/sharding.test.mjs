// A sharded cluster through sable-router with the Node.js driver and
// mongosh's sh.* helpers (docs/sharding.md).  The cluster is started the way
// users start one: build/sable-cluster start --sharded (a config server, two
// one-member shards, the router).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { MongoClient } from 'mongodb';
import { REPO, sabledPath, freePortRange, onExit } from '../lib/sabled.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const mongosh = path.join(here, '..', 'node_modules', '.bin', 'mongosh');
const build = path.dirname(sabledPath());
const launcher = path.join(build, 'sable-cluster');
const router = path.join(build, 'sable-router');
const skip = !existsSync(router) && 'sable-router not built';

let dir;
let home;
let routerPort;
let client;
let removeCluster = () => {};

before(async () => {
  if (skip) return;
  dir = mkdtempSync(path.join(os.tmpdir(), 'sable-node-shard-'));
  home = mkdtempSync(path.join(os.tmpdir(), 'mongosh-home-'));
  // at the end, or at exit when a signal ends the file before after() runs
  removeCluster = onExit(() => {
    try {
      execFileSync('/usr/bin/python3', [launcher, 'stop', '--dir', dir], { timeout: 120000 });
    } finally {
      rmSync(dir, { recursive: true, force: true });
      rmSync(home, { recursive: true, force: true });
    }
  });
  const base = await freePortRange(5); // config server, two shards, spare, router
  routerPort = base + 4;
  execFileSync('/usr/bin/python3', [launcher, 'start', '--sharded', '--shards', '2', '--members', '1',
    '--port', String(base), '--router-port', String(routerPort), '--oplog-mb', '64', '--dir', dir],
  { env: { ...process.env, SABLED: sabledPath(), SABLE_ROUTER: router }, timeout: 180000 });
  client = new MongoClient(`mongodb://127.0.0.1:${routerPort}/`);
  await client.connect();
});

after(async () => {
  await client?.close();
  removeCluster();
});

function shell(script) {
  return new Promise((resolve) => {
    execFile(mongosh, [`mongodb://127.0.0.1:${routerPort}/`, '--quiet', '--norc', '--eval', script], {
      env: { ...process.env, HOME: home, MONGOSH_FORCE_DISABLE_TELEMETRY_FOR_TESTING: '1' },
      timeout: 60000,
    }, (err, stdout, stderr) => resolve({ code: err ? (err.code ?? 1) : 0, stdout, stderr }));
  });
}

test('Node driver: sharded CRUD, sorted merge and cursors', { skip }, async () => {
  const admin = client.db('admin');
  assert.equal((await admin.command({ hello: 1 })).msg, 'isdbgrid');
  await admin.command({ shardCollection: 'nodeapp.items', key: { sku: 'hashed' } });
  const items = client.db('nodeapp').collection('items');
  const docs = Array.from({ length: 300 }, (_, i) => ({ _id: i, sku: `s${i}`, price: (i * 37) % 101 }));
  assert.equal((await items.insertMany(docs, { ordered: false })).insertedCount, 300);
  assert.deepEqual(await items.findOne({ sku: 's42' }), docs[42]);
  const want = [...docs].sort((a, b) => a.price - b.price || a._id - b._id).slice(10, 30);
  const got = await items.find({}).sort({ price: 1, _id: 1 }).skip(10).limit(20).toArray();
  assert.deepEqual(got, want);
  const all = await items.find({}, { batchSize: 11 }).toArray();
  assert.equal(all.length, 300);
  assert.equal(new Set(all.map((d) => d._id)).size, 300);
  assert.equal(await items.countDocuments({ price: { $lt: 50 } }),
    docs.filter((d) => d.price < 50).length);
  assert.equal((await items.updateMany({ price: 0 }, { $set: { free: true } })).modifiedCount,
    docs.filter((d) => d.price === 0).length);
  assert.equal((await items.deleteOne({ price: 100 })).deletedCount, 1);
  assert.equal(await items.estimatedDocumentCount(), 299);
});

test('mongosh: sh.enableSharding, sh.shardCollection, sh.status', {
  skip: skip || (!existsSync(mongosh) && 'mongosh not installed'),
}, async () => {
  const r = await shell('sh.enableSharding("shelldb"); '
    + 'sh.shardCollection("shelldb.c", {k: 1}); '
    + 'db.getSiblingDB("shelldb").c.insertMany([{k: 1}, {k: 2}]); '
    + 'const s = sh.status().value; '
    + 'sh.stopBalancer(); '
    + 'const s2 = sh.status().value; '
    + 'sh.startBalancer(); '
    + 'print(JSON.stringify({shards: s.shards.map((x) => x._id), '
    + 'key: s.databases.find((d) => d.database._id === "shelldb").collections["shelldb.c"].shardKey, '
    + 'balancer: s.balancer["Currently enabled"], stopped: s2.balancer["Currently enabled"], '
    + 'n: db.getSiblingDB("shelldb").c.countDocuments()}))');
  assert.equal(r.code, 0, r.stderr + r.stdout);
  const out = JSON.parse(r.stdout.trim().split('\n').pop());
  // the balancer runs by default (mongod's default) and sh.stopBalancer() stops it
  assert.deepEqual(out, { shards: ['shard0', 'shard1'], key: { k: 1 }, balancer: 'yes',
    stopped: 'no', n: 2 });
});

test('mongosh: zones with sh.addShardToZone, sh.updateZoneKeyRange, sh.status', {
  skip: skip || (!existsSync(mongosh) && 'mongosh not installed'),
}, async () => {
  const r = await shell('sh.addShardToZone("shard1", "EU"); '
    + 'sh.addShardTag("shard0", "US"); '
    + 'sh.shardCollection("zonedb.c", {k: 1}); '
    + 'sh.updateZoneKeyRange("zonedb.c", {k: 0}, {k: 10}, "EU"); '
    + 'sh.addTagRange("zonedb.c", {k: 10}, {k: 20}, "US"); '
    + 'sh.removeRangeFromZone("zonedb.c", {k: 10}, {k: 20}); '
    + 'sh.removeShardFromZone("shard0", "US"); '
    + 'const s = sh.status().value; '
    + 'const c = s.databases.find((d) => d.database._id === "zonedb").collections["zonedb.c"]; '
    + 'print(JSON.stringify({tags: c.tags.map((t) => [t.tag, t.min.k, t.max.k]), '
    + 'shards: s.shards.map((x) => [x._id, x.tags || []])}))');
  assert.equal(r.code, 0, r.stderr + r.stdout);
  const out = JSON.parse(r.stdout.trim().split('\n').pop());
  assert.deepEqual(out, { tags: [['EU', 0, 10]], shards: [['shard0', []], ['shard1', ['EU']]] });
});
