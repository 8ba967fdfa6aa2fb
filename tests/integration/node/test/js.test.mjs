// Server-side JavaScript through the Node.js driver: $where (string and
// Code), $function, $accumulator and the mapReduce command (inline and into
// a collection), with the driver's own BSON types crossing into JavaScript.

import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { MongoClient, Code, Long, MongoServerError } from 'mongodb';
import { Sabled } from '../lib/sabled.mjs';

let server;
let client;
let db;

before(async () => {
  server = new Sabled();
  await server.start();
  client = new MongoClient(server.uri(), { serverSelectionTimeoutMS: 10000 });
  await client.connect();
  db = client.db('node_js');
  await db.collection('c').insertMany(
    Array.from({ length: 10 }, (_, i) => ({ _id: i, a: i, k: i % 2 ? 'odd' : 'even', l: Long.fromString('9007199254740993') })));
});

after(async () => {
  await client?.close().catch(() => {});
  await server?.cleanup();
});

describe('server-side JavaScript', () => {
  test('$where as a string and as Code', async () => {
    const c = db.collection('c');
    const a = await c.find({ $where: 'this.a > 7' }).toArray();
    assert.deepEqual(a.map((d) => d._id), [8, 9]);
    const b = await c.find({ $where: new Code('function() { return obj.k == "odd" && obj.a < 4 }') }).toArray();
    assert.deepEqual(b.map((d) => d._id), [1, 3]);
    await assert.rejects(c.find({ $where: 'this.a.b.c' }).toArray(),
      (e) => e instanceof MongoServerError && e.code === 139);
  });

  test('$function and $accumulator', async () => {
    const c = db.collection('c');
    const r = await c.aggregate([
      { $match: { _id: 3 } },
      { $project: { _id: 0, r: { $function: { body: 'function(a, l) { return [a * 2, l.toString()] }', args: ['$a', '$l'], lang: 'js' } } } },
    ]).toArray();
    assert.deepEqual(r, [{ r: [6, 'NumberLong("9007199254740993")'] }]);
    const g = await c.aggregate([
      { $group: { _id: '$k', s: { $accumulator: {
        init: 'function() { return 0 }', accumulate: 'function(s, a) { return s + a }',
        accumulateArgs: ['$a'], merge: 'function(x, y) { return x + y }', lang: 'js' } } } },
      { $sort: { _id: 1 } },
    ]).toArray();
    assert.deepEqual(g, [{ _id: 'even', s: 20 }, { _id: 'odd', s: 25 }]);
  });

  test('mapReduce inline and into a collection', async () => {
    const map = new Code('function() { emit(this.k, this.a) }');
    const reduce = new Code('function(k, vs) { return Array.sum(vs) }');
    const r = await db.command({ mapReduce: 'c', map, reduce, out: { inline: 1 } });
    assert.deepEqual(r.results, [{ _id: 'even', value: 20 }, { _id: 'odd', value: 25 }]);
    const o = await db.command({ mapReduce: 'c', map, reduce, query: { a: { $lt: 4 } }, out: 'mr' });
    assert.equal(o.result, 'mr');
    assert.deepEqual(await db.collection('mr').find().sort({ _id: 1 }).toArray(),
      [{ _id: 'even', value: 2 }, { _id: 'odd', value: 4 }]);
  });
});
