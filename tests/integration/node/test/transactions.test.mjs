// Transactions and retryable writes through real clients (issue 26): the
// Node driver's withTransaction and retryable writes, and mongosh's
// session.startTransaction(), against a one-member replica set.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { MongoClient } from 'mongodb';
import { Sabled } from '../lib/sabled.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const mongosh = path.join(here, '..', 'node_modules', '.bin', 'mongosh');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let server;
let home;
let rsUri;

before(async () => {
  server = new Sabled();
  await server.start(['--replSet', 'rs0', '--oplogSizeMB', '16']);
  const c = new MongoClient(server.uri());
  try {
    await c.db('admin').command({ replSetInitiate: {
      _id: 'rs0', members: [{ _id: 0, host: `127.0.0.1:${server.port}` }] } });
    for (let i = 0; i < 100; i++) {
      if ((await c.db('admin').command({ hello: 1 })).isWritablePrimary) break;
      await sleep(100);
    }
  } finally {
    await c.close();
  }
  rsUri = `mongodb://127.0.0.1:${server.port}/?replicaSet=rs0`;
  home = mkdtempSync(path.join(os.tmpdir(), 'mongosh-home-'));
});

after(async () => {
  await server?.cleanup();
  if (home) rmSync(home, { recursive: true, force: true });
});

test('Node driver withTransaction commits both updates or neither', async () => {
  const c = new MongoClient(rsUri);
  try {
    const coll = c.db('t').collection('acct');
    await coll.insertMany([{ _id: 'a', bal: 100 }, { _id: 'b', bal: 0 }]);
    const s = c.startSession();
    try {
      await s.withTransaction(async () => {
        await coll.updateOne({ _id: 'a' }, { $inc: { bal: -40 } }, { session: s });
        await coll.updateOne({ _id: 'b' }, { $inc: { bal: 40 } }, { session: s });
        // not visible outside before the commit
        assert.equal((await coll.findOne({ _id: 'b' })).bal, 0);
      });
      await assert.rejects(s.withTransaction(async () => {
        await coll.updateOne({ _id: 'a' }, { $inc: { bal: -1000 } }, { session: s });
        throw new Error('callback gives up');
      }), /callback gives up/);
    } finally {
      await s.endSession();
    }
    const docs = await coll.find().sort({ _id: 1 }).toArray();
    assert.deepEqual(docs.map((d) => d.bal), [60, 40]);
    // retryable writes are on by default: the entries carry the session's fields
    await coll.insertOne({ _id: 'c' });
    const e = await c.db('local').collection('oplog.rs').findOne({ ns: 't.acct', op: 'i',
      'o._id': 'c' });
    assert.ok(e.lsid && e.txnNumber >= 1 && e.stmtId === 0, JSON.stringify(e));
  } finally {
    await c.close();
  }
});

function shell(uri, script) {
  return new Promise((resolve) => {
    execFile(mongosh, [uri, '--quiet', '--norc', '--eval', script], {
      env: { ...process.env, HOME: home, MONGOSH_FORCE_DISABLE_TELEMETRY_FOR_TESTING: '1' },
      timeout: 60000,
    }, (err, stdout, stderr) => resolve({ code: err ? (err.code ?? 1) : 0, stdout, stderr }));
  });
}

test('mongosh session.startTransaction', { skip: !existsSync(mongosh) && 'mongosh not installed' },
  async () => {
    const r = await shell(rsUri.replace('/?', '/shelltxn?'), `
      const s = db.getMongo().startSession();
      const c = s.getDatabase('shelltxn').t;
      s.startTransaction();
      c.insertOne({_id: 1}); c.insertOne({_id: 2});
      print(db.t.countDocuments());
      s.commitTransaction();
      print(db.t.countDocuments());
      s.startTransaction(); c.insertOne({_id: 3}); s.abortTransaction();
      print(db.t.countDocuments());`);
    assert.equal(r.code, 0, r.stderr + r.stdout);
    assert.deepEqual(r.stdout.trim().split('\n'), ['0', '2', '2']);
  });
