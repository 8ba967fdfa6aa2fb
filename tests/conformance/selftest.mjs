// selftest.mjs: checks the matcher (lib/match.mjs) against the unified format's rules, so
// that a runner change cannot silently make mismatching results pass. Run by run.sh.
import assert from 'node:assert/strict';
import mongodb from 'mongodb';
import { match, matchRootArray, matchExact, withoutDriverWtimeout } from './lib/match.mjs';

const { Long, Int32, Double, ObjectId } = mongodb.BSON;
const ctx = { entities: { get: () => ({ id: { id: 'x' } }) } };
const ok = (e, a, root = true) => assert.equal(match(e, a, ctx, root), null, JSON.stringify([e, a]));
const bad = (e, a, root = true) => assert.notEqual(match(e, a, ctx, root), null, JSON.stringify([e, a]));

ok({ x: 1 }, { x: 1, y: 2 });                       // extra fields allowed at the root
bad({ x: { y: 1 } }, { x: { y: 1, z: 1 } });        // ... but not in nested documents
bad({ x: 1, y: 1 }, { x: 1 });
ok({ x: 1 }, { x: 1.0 });
ok({ x: 1 }, { x: Long.fromNumber(1) });
ok({ x: new Int32(1) }, { x: new Double(1) });
bad({ x: 1 }, { x: 1.5 });
bad({ x: 1 }, { x: '1' });
ok([1, 2], [1, 2]);
bad([1, 2], [1, 2, 3]);
bad([{ x: 1 }], [{ x: 1, y: 1 }]);                  // array elements are not roots (distinct)
assert.equal(matchRootArray([{ x: 1 }], [{ x: 1, y: 1 }], ctx), null); // ... except iterables
ok({ a: { $$exists: false } }, { b: 1 });
bad({ a: { $$exists: false } }, { a: null });
ok({ a: { $$exists: true } }, { a: null });
ok({ a: { $$unsetOrMatches: 1 } }, {});
ok({ a: { $$unsetOrMatches: 1 } }, { a: 1 });
bad({ a: { $$unsetOrMatches: 1 } }, { a: 2 });
ok({ a: { $$type: ['int', 'long'] } }, { a: Long.fromNumber(5) });
bad({ a: { $$type: 'string' } }, { a: 5 });
bad({ a: { $$type: 'objectId' } }, {});
ok({ a: { $$lte: 5 } }, { a: 5 });
bad({ a: { $$lte: 5 } }, { a: 6 });
ok({ s: { _id: 1 } }, { s: new Map([['_id', 1]]) });
ok({ o: new ObjectId('000000000000000000000001') }, { o: new ObjectId('000000000000000000000001') });
bad({ o: new ObjectId('000000000000000000000001') }, { o: new ObjectId('000000000000000000000002') });
ok({ a: { $$matchAsRoot: { x: 1 } } }, { a: { x: 1, y: 2 } });
ok({ a: { $$matchAsDocument: { x: 1 } } }, { a: '{"x": 1}' });
bad({ a: { $$matchAsDocument: { x: 1 } } }, { a: '{"x": 1, "y": 2}' });
assert.equal(matchExact({ _id: 1, a: { b: 1 } }, { a: { b: 1.0 }, _id: 1 }), null);
assert.notEqual(matchExact({ _id: 1 }, { _id: 1, x: 1 }), null);
// The Node driver's wtimeout: 10000 on commit/abort is left out only where the test names none.
const wcOk = (name, e, a) => ok(e, withoutDriverWtimeout(e, name, a));
const wcBad = (name, e, a) => bad(e, withoutDriverWtimeout(e, name, a));
wcOk('commitTransaction', { writeConcern: { w: 'majority' } }, { writeConcern: { w: 'majority', wtimeout: 10000 } });
wcOk('abortTransaction', { writeConcern: { w: 1 } }, { writeConcern: { w: 1, wtimeout: 10000 } });
wcBad('commitTransaction', { writeConcern: { w: 'majority' } }, { writeConcern: { w: 'majority', wtimeout: 5000 } });
wcBad('commitTransaction', { writeConcern: { w: 'majority' } }, { writeConcern: { w: 1, wtimeout: 10000 } });
wcBad('insert', { writeConcern: { w: 'majority' } }, { writeConcern: { w: 'majority', wtimeout: 10000 } });
wcBad('commitTransaction', { writeConcern: { w: 'majority', wtimeout: 5000 } }, { writeConcern: { w: 'majority', wtimeout: 10000 } });
wcOk('commitTransaction', { writeConcern: { w: 'majority', wtimeout: 10000 } }, { writeConcern: { w: 'majority', wtimeout: 10000 } });
wcBad('commitTransaction', { writeConcern: { $$exists: false } }, { writeConcern: { w: 1, wtimeout: 10000 } });
console.log('selftest: matcher ok');
