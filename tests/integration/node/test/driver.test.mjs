// Node.js driver against a real sabled: CRUD, cursors with batchSize,
// aggregate, bulkWrite, error codes and wire compression.

import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { MongoClient, ObjectId, Long, Decimal128, MongoServerError, MongoBulkWriteError } from 'mongodb';
import { Sabled } from '../lib/sabled.mjs';

let server;
let client;

before(async () => {
  server = new Sabled();
  await server.start();
  client = new MongoClient(server.uri(), { serverSelectionTimeoutMS: 10000 });
  await client.connect();
});

after(async () => {
  await client?.close().catch(() => {});
  await server?.cleanup();
});

let n = 0;
function freshDb() {
  n += 1;
  return client.db(`node_${n}`);
}

describe('handshake', () => {
  test('hello reports MongoDB 7.0 limits', async () => {
    const r = await client.db('admin').command({ hello: 1 });
    assert.equal(r.ok, 1);
    assert.equal(r.isWritablePrimary, true);
    assert.equal(r.maxWireVersion, 21);
    assert.equal(r.maxBsonObjectSize, 16777216);
    assert.equal(r.maxMessageSizeBytes, 48000000);
    assert.equal(r.maxWriteBatchSize, 100000);
    const b = await client.db('admin').command({ buildInfo: 1 });
    assert.match(b.version, /^7\.0\./);
  });
});

describe('CRUD', () => {
  test('insertOne / insertMany / find / generated _id', async () => {
    const c = freshDb().collection('t');
    const r1 = await c.insertOne({ a: 1 });
    assert.ok(r1.insertedId instanceof ObjectId);
    const r2 = await c.insertMany([{ a: 2 }, { a: 3 }, { a: 4 }]);
    assert.equal(r2.insertedCount, 3);
    const docs = await c.find({ a: { $gte: 2 } }, { projection: { _id: 0 } }).sort({ a: -1 }).toArray();
    assert.deepEqual(docs, [{ a: 4 }, { a: 3 }, { a: 2 }]);
    const one = await c.findOne({ a: 1 });
    assert.equal(Object.keys(one)[0], '_id');
    assert.ok(one._id.equals(r1.insertedId));
  });

  test('update operators, upsert, replace, delete', async () => {
    const c = freshDb().collection('t');
    await c.insertOne({ _id: 1, n: 1, arr: [3, 1], s: 'x' });
    let r = await c.updateOne({ _id: 1 }, {
      $inc: { n: 2 }, $push: { arr: { $each: [2], $sort: 1 } }, $set: { 'd.e': true }, $unset: { s: '' },
    });
    assert.equal(r.matchedCount, 1);
    assert.equal(r.modifiedCount, 1);
    assert.deepEqual(await c.findOne({ _id: 1 }), { _id: 1, n: 3, arr: [1, 2, 3], d: { e: true } });
    r = await c.updateOne({ _id: 2 }, { $set: { n: 10 }, $setOnInsert: { created: 1 } }, { upsert: true });
    assert.equal(r.upsertedId, 2);
    assert.equal(r.upsertedCount, 1);
    r = await c.updateMany({}, { $mul: { n: 2 } });
    assert.equal(r.modifiedCount, 2);
    r = await c.replaceOne({ _id: 2 }, { replaced: true });
    assert.equal(r.modifiedCount, 1);
    assert.deepEqual(await c.findOne({ _id: 2 }), { _id: 2, replaced: true });
    await c.updateOne({ _id: 1 }, { $set: { 'arr.$[x]': 0 } }, { arrayFilters: [{ x: { $gt: 1 } }] });
    assert.deepEqual((await c.findOne({ _id: 1 })).arr, [1, 0, 0]);
    assert.equal((await c.deleteOne({ _id: 2 })).deletedCount, 1);
    assert.equal((await c.deleteMany({})).deletedCount, 1);
    assert.equal(await c.countDocuments(), 0);
  });

  test('findOneAndUpdate / Replace / Delete', async () => {
    const c = freshDb().collection('t');
    await c.insertMany([{ _id: 1, v: 1 }, { _id: 2, v: 2 }]);
    const before = await c.findOneAndUpdate({}, { $inc: { v: 10 } }, { sort: { v: -1 }, includeResultMetadata: false });
    assert.deepEqual(before, { _id: 2, v: 2 });
    const afterDoc = await c.findOneAndUpdate({ _id: 1 }, { $inc: { v: 1 } },
      { returnDocument: 'after', projection: { _id: 0 } });
    assert.deepEqual(afterDoc, { v: 2 });
    const up = await c.findOneAndReplace({ _id: 3 }, { w: 1 }, { upsert: true, returnDocument: 'after' });
    assert.deepEqual(up, { _id: 3, w: 1 });
    const del = await c.findOneAndDelete({ _id: 3 });
    assert.deepEqual(del, { _id: 3, w: 1 });
    assert.equal(await c.findOneAndDelete({ _id: 99 }), null);
  });

  test('numeric types compare across int, long, double, decimal', async () => {
    const c = freshDb().collection('t');
    await c.insertMany([{ _id: 'i', v: 1 }, { _id: 'l', v: Long.fromNumber(1) }, { _id: 'd', v: 1.5 },
      { _id: 'm', v: Decimal128.fromString('1') }]);
    const ids = (await c.find({ v: 1 }).toArray()).map((d) => d._id).sort();
    assert.deepEqual(ids, ['i', 'l', 'm']);
    const sorted = (await c.find().sort({ v: -1, _id: 1 }).toArray()).map((d) => d._id);
    assert.deepEqual(sorted, ['d', 'i', 'l', 'm']);
  });
});

describe('cursors', () => {
  test('batchSize forces getMore and returns everything in order', async () => {
    const c = freshDb().collection('t');
    const docs = Array.from({ length: 1000 }, (_, i) => ({ _id: i, pad: 'x'.repeat(100) }));
    await c.insertMany(docs);
    const seen = [];
    const cur = c.find({}, { batchSize: 64 }).sort({ _id: 1 });
    for await (const d of cur) seen.push(d._id);
    assert.deepEqual(seen, docs.map((d) => d._id));
    const limited = await c.find({ _id: { $gte: 500 } }).sort({ _id: 1 }).skip(10).limit(5).toArray();
    assert.deepEqual(limited.map((d) => d._id), [510, 511, 512, 513, 514]);
  });

  test('closing a cursor early kills it', async () => {
    const db = freshDb();
    const c = db.collection('t');
    await c.insertMany(Array.from({ length: 50 }, (_, i) => ({ _id: i })));
    const cur = c.find({}, { batchSize: 5 });
    await cur.next();
    const id = cur.id;
    assert.ok(id && !id.isZero());
    await cur.close();
    await assert.rejects(db.command({ getMore: id, collection: 't' }),
      (e) => e instanceof MongoServerError && e.code === 43);
  });
});

describe('aggregate', () => {
  test('$match $group $sort $skip $limit $project $count', async () => {
    const c = freshDb().collection('t');
    await c.insertMany(Array.from({ length: 30 }, (_, i) => ({ _id: i, g: i % 3, v: i })));
    const groups = await c.aggregate([
      { $match: { v: { $lt: 30 } } },
      { $group: { _id: '$g', total: { $sum: '$v' }, n: { $sum: 1 } } },
      { $sort: { _id: 1 } },
    ]).toArray();
    assert.deepEqual(groups, [{ _id: 0, total: 135, n: 10 }, { _id: 1, total: 145, n: 10 },
      { _id: 2, total: 155, n: 10 }]);
    const page = await c.aggregate([{ $sort: { v: -1 } }, { $skip: 2 }, { $limit: 3 },
      { $project: { _id: 0, v: 1 } }]).toArray();
    assert.deepEqual(page, [{ v: 27 }, { v: 26 }, { v: 25 }]);
    const cnt = await c.aggregate([{ $match: { g: 1 } }, { $count: 'k' }]).toArray();
    assert.deepEqual(cnt, [{ k: 10 }]);
    const batched = await c.aggregate([{ $sort: { _id: 1 } }], { batchSize: 4 }).toArray();
    assert.equal(batched.length, 30);
  });
});

describe('bulkWrite', () => {
  test('mixed ordered bulk', async () => {
    const c = freshDb().collection('t');
    const r = await c.bulkWrite([
      { insertOne: { document: { _id: 1, v: 1 } } },
      { insertOne: { document: { _id: 2, v: 2 } } },
      { updateOne: { filter: { _id: 1 }, update: { $set: { v: 10 } } } },
      { updateMany: { filter: {}, update: { $inc: { v: 1 } } } },
      { replaceOne: { filter: { _id: 3 }, replacement: { v: 3 }, upsert: true } },
      { deleteOne: { filter: { _id: 2 } } },
    ]);
    assert.equal(r.insertedCount, 2);
    assert.equal(r.matchedCount, 3);
    assert.equal(r.modifiedCount, 3);
    assert.equal(r.upsertedCount, 1);
    assert.equal(r.deletedCount, 1);
    assert.deepEqual(await c.find().sort({ _id: 1 }).toArray(), [{ _id: 1, v: 11 }, { _id: 3, v: 3 }]);
  });

  test('unordered bulk with a duplicate continues; ordered stops', async () => {
    const c = freshDb().collection('t');
    await assert.rejects(c.insertMany([{ _id: 1 }, { _id: 1 }, { _id: 2 }], { ordered: false }), (e) => {
      assert.ok(e instanceof MongoBulkWriteError);
      assert.equal(e.result.insertedCount, 2);
      assert.equal(e.writeErrors.length, 1);
      assert.equal(e.writeErrors[0].index, 1);
      assert.equal(e.writeErrors[0].code, 11000);
      return true;
    });
    await assert.rejects(c.bulkWrite([{ insertOne: { document: { _id: 3 } } },
      { insertOne: { document: { _id: 1 } } }, { insertOne: { document: { _id: 4 } } }]), (e) => {
      assert.equal(e.result.insertedCount, 1);
      assert.equal(e.writeErrors[0].index, 1);
      return true;
    });
    assert.deepEqual((await c.find().sort({ _id: 1 }).toArray()).map((d) => d._id), [1, 2, 3]);
  });
});

describe('errors', () => {
  test('duplicate key', async () => {
    const c = freshDb().collection('t');
    await c.insertOne({ _id: 'k' });
    await assert.rejects(c.insertOne({ _id: 'k' }), (e) => {
      assert.ok(e instanceof MongoServerError);
      assert.equal(e.code, 11000);
      assert.deepEqual(e.keyValue, { _id: 'k' });
      assert.deepEqual(e.keyPattern, { _id: 1 });
      return true;
    });
  });

  test('unknown command, bad types, namespace errors', async () => {
    const db = freshDb();
    await assert.rejects(db.command({ noSuchCommand: 1 }), (e) => e.code === 59 && e.codeName === 'CommandNotFound');
    await assert.rejects(db.command({ find: 't', filter: 'x' }), (e) => e.code === 14 && e.codeName === 'TypeMismatch');
    await db.createCollection('c1');
    await assert.rejects(db.command({ create: 'c1' }), (e) => e.code === 48 && e.codeName === 'NamespaceExists');
    await assert.rejects(db.command({ create: 'bad$name' }), (e) => e.code === 73);
    await assert.rejects(db.collection('t').updateOne({}, { $inc: { s: 'x' } }, { upsert: true }),
      (e) => e.code === 14);
    const r = await db.command({ ping: 1 });
    assert.equal(r.ok, 1);
  });
});

describe('compression', () => {
  for (const comp of ['zlib', 'snappy']) {
    test(`compressors=${comp}`, async (t) => {
      if (comp === 'snappy') {
        try {
          await import('snappy');
        } catch {
          t.skip('npm package snappy is not installed');
          return;
        }
      }
      const cc = new MongoClient(server.uri(`compressors=${comp}`), { serverSelectionTimeoutMS: 10000 });
      try {
        await cc.connect();
        const hello = await cc.db('admin').command({ hello: 1, compression: [comp] });
        assert.deepEqual(hello.compression, [comp]);
        const c = cc.db(`ncomp_${comp}`).collection('t');
        const docs = Array.from({ length: 300 }, (_, i) => ({ _id: i, text: 'compress me '.repeat(40) }));
        await c.insertMany(docs);
        const back = await c.find({}, { batchSize: 50 }).sort({ _id: 1 }).toArray();
        assert.deepEqual(back, docs);
        await cc.db(`ncomp_${comp}`).dropDatabase();
      } finally {
        await cc.close();
      }
    });
  }
  test('compressors=zstd', (t) => {
    t.skip('@mongodb-js/zstd cannot be installed here (its native binary is fetched from GitHub)');
  });
});
