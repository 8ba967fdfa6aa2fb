// Node.js driver against a real sabled: geospatial queries (docs/geospatial.md):
// $near ordering, $geoWithin a polygon with a hole, $geoNear in a pipeline, and
// mongod's error for invalid geometry.

import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { MongoClient, MongoServerError } from 'mongodb';
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

const R = 6378100;
// Great-circle distance in meters, computed here independently of the server.
function meters([x1, y1], [x2, y2]) {
  const r = Math.PI / 180;
  const a = Math.sin(((y2 - y1) * r) / 2) ** 2 +
    Math.cos(y1 * r) * Math.cos(y2 * r) * Math.sin(((x2 - x1) * r) / 2) ** 2;
  return 2 * R * Math.asin(Math.sqrt(a));
}
const pt = (x, y) => ({ type: 'Point', coordinates: [x, y] });

describe('geospatial', () => {
  test('$near returns the nearest first; $geoWithin honours a hole; $geoNear', async () => {
    const c = client.db('node_geo').collection('places');
    await c.createIndex({ loc: '2dsphere' });
    const docs = [];
    for (let i = 0; i < 300; i++) docs.push({ _id: i, loc: pt(((i * 37) % 101) / 10 - 4.95, ((i * 53) % 97) / 10 - 4.95) }); // never on an edge
    await c.insertMany(docs);
    const center = [0.25, 0.4];
    const want = docs.map((d) => [d._id, meters(center, d.loc.coordinates)]).sort((a, b) => a[1] - b[1]);
    const near = await c.find({ loc: { $near: { $geometry: pt(...center) } } }).limit(25).toArray();
    assert.deepEqual(near.map((d) => d._id), want.slice(0, 25).map((w) => w[0]));

    const hole = { type: 'Polygon', coordinates: [
      [[-2, -2], [2, -2], [2, 2], [-2, 2], [-2, -2]],
      [[-1, -1], [1, -1], [1, 1], [-1, 1], [-1, -1]]] };
    const inside = (x, y) => Math.abs(x) <= 2 && Math.abs(y) <= 2 && !(Math.abs(x) < 1 && Math.abs(y) < 1);
    const within = await c.find({ loc: { $geoWithin: { $geometry: hole } } }).toArray();
    const expect = docs.filter((d) => inside(...d.loc.coordinates)).map((d) => d._id).sort((a, b) => a - b);
    assert.ok(expect.length > 10);
    assert.deepEqual(within.map((d) => d._id).sort((a, b) => a - b), expect);

    const out = await c.aggregate([
      { $geoNear: { near: pt(...center), distanceField: 'd', maxDistance: 200000, spherical: true } },
      { $project: { d: 1 } }]).toArray();
    const w2 = want.filter((w) => w[1] <= 200000);
    assert.deepEqual(out.map((d) => d._id), w2.map((w) => w[0]));
    out.forEach((d, i) => assert.ok(Math.abs(d.d - w2[i][1]) < 1));
  });

  test('invalid geometry fails with 16755', async () => {
    const c = client.db('node_geo').collection('bad');
    await c.createIndex({ loc: '2dsphere' });
    await assert.rejects(c.insertOne({ loc: { type: 'Point', coordinates: [0, 95] } }),
      (e) => e instanceof MongoServerError && e.code === 16755 && /Can't extract geo keys/.test(e.message));
  });
});
