// The audit log through the Node.js driver (the issue asks for every event
// type through real drivers; the full list is in tests/integration/py/
// test_audit.py): with --auth, a JSON audit file and
// auditAuthorizationSuccess=true, a Node client's SCRAM login (speculative,
// inside hello), its client metadata, authorization checks of its CRUD
// commands, the implicit createDatabase/createCollection of a first insert,
// index and drop events and logApplicationMessage are all recorded, in the
// connection's order, before each write is acknowledged.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { MongoClient } from 'mongodb';
import { Sabled } from '../lib/sabled.mjs';

let server;
let auditPath;

function events() {
  return readFileSync(auditPath, 'utf8').split('\n').filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l));
}

before(async () => {
  server = new Sabled();
  auditPath = path.join(server.root, 'audit.json');
  await server.start(['--auth', '--auditDestination', 'file', '--auditFormat', 'JSON',
    '--auditPath', auditPath, '--setParameter', 'auditAuthorizationSuccess=true']);
  const c = new MongoClient(`mongodb://127.0.0.1:${server.port}/?directConnection=true`);
  await c.connect();
  await c.db('admin').command({ createUser: 'nodeaudit', pwd: 'n0de-pw', roles: ['root'] });
  await c.close();
});

after(async () => {
  await server?.cleanup();
});

test('node driver: every kind of event a client causes is in the audit file', async () => {
  const c = new MongoClient(`mongodb://nodeaudit:n0de-pw@127.0.0.1:${server.port}/` +
    '?authSource=admin&directConnection=true&serverSelectionTimeoutMS=10000');
  await c.connect();
  const coll = c.db('nodeaud').collection('t');
  await coll.insertOne({ _id: 1, v: 'a' });
  // Acknowledged: its events are in the file already.
  let ev = events();
  const created = ev.filter((e) => e.atype === 'createCollection' || e.atype === 'createDatabase');
  assert.deepEqual(created.map((e) => [e.atype, e.param.ns]),
    [['createDatabase', 'nodeaud'], ['createCollection', 'nodeaud.t']]);
  await coll.findOne({ _id: 1 });
  await coll.updateOne({ _id: 1 }, { $set: { v: 'b' } });
  await coll.createIndex({ v: 1 }, { name: 'v_1' });
  await c.db('admin').command({ logApplicationMessage: 'from node' });
  await coll.drop();
  ev = events();
  const kinds = new Set(ev.map((e) => e.atype));
  for (const k of ['startup', 'authenticate', 'clientMetadata', 'authCheck', 'createDatabase',
    'createCollection', 'createIndex', 'applicationMessage', 'dropCollection']) {
    assert.ok(kinds.has(k), `no ${k} event`);
  }
  const auth = ev.filter((e) => e.atype === 'authenticate' && e.param.user === 'nodeaudit');
  assert.ok(auth.length >= 1 && auth.every((e) => e.result === 0));
  assert.ok(ev.some((e) => e.atype === 'clientMetadata' &&
    e.param.clientMetadata.driver.name.startsWith('nodejs')));
  const cmds = ev.filter((e) => e.atype === 'authCheck' && e.param.ns === 'nodeaud.t')
    .map((e) => e.param.command);
  // One connection's events are in the order its commands ran.
  assert.deepEqual(cmds.filter((x) => ['insert', 'find', 'update', 'createIndexes', 'drop']
    .includes(x)), ['insert', 'find', 'update', 'createIndexes', 'drop']);
  const upd = ev.find((e) => e.atype === 'authCheck' && e.param.command === 'update');
  assert.deepEqual(upd.users, [{ user: 'nodeaudit', db: 'admin' }]);
  assert.deepEqual(upd.param.args.updates[0].u, { $set: { v: 'b' } });
  assert.equal(upd.local.port, server.port);
  assert.equal(ev.find((e) => e.atype === 'applicationMessage').param.msg, 'from node');
  assert.ok(!readFileSync(auditPath, 'utf8').includes('n0de-pw'));
  await c.close();
});
