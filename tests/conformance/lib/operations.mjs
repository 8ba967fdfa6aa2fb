// operations.mjs: executes one unified-format operation (entity or testRunner operation)
// through the Node driver and returns its result in the shape the format expects
// (model objects turned into documents, iterables fully iterated).
// What must stay true: an argument the runner does not understand raises an error (the
// test fails loudly) rather than being dropped silently.

import mongodb from 'mongodb';
import { UnsupportedError, readPreferenceOf } from './entities.mjs';
import { match, matchRootArray, show } from './match.mjs';

const { MongoServerError } = mongodb;

// Options that pass to the driver unchanged, per operation family.
const COMMON = ['comment', 'collation', 'hint', 'let', 'bypassDocumentValidation', 'maxTimeMS',
  'rawData', 'timeoutMS', 'writeConcern', 'readConcern', 'ordered', 'upsert', 'arrayFilters',
  'sort', 'projection', 'skip', 'limit', 'batchSize', 'allowDiskUse', 'min', 'max',
  'returnKey', 'showRecordId', 'noCursorTimeout', 'maxAwaitTimeMS', 'verboseResults',
  'fullDocument', 'fullDocumentBeforeChange', 'resumeAfter', 'startAfter',
  'startAtOperationTime', 'showExpandedEvents', 'dropTarget', 'unique', 'name', 'sparse',
  'expireAfterSeconds', 'partialFilterExpression', 'bucketName', 'chunkSizeBytes', 'revision',
  'viewOn', 'pipeline', 'clusteredIndex', 'changeStreamPreAndPostImages', 'timeseries',
  'capped', 'size', 'max', 'validator', 'validationLevel', 'validationAction',
  'encryptedFields', 'authorizedCollections', 'nameOnly', 'filter', 'cursorType',
  'maxCommitTimeMS'];

function options(args, positional, ents) {
  const o = {};
  for (const [k, v] of Object.entries(args || {})) {
    if (positional.includes(k)) continue;
    if (k === 'session') { o.session = ents.get(v, 'session'); continue; }
    if (k === 'readPreference') { o.readPreference = readPreferenceOf(v); continue; }
    if (k === 'returnDocument') { o.returnDocument = String(v).toLowerCase(); continue; }
    if (!COMMON.includes(k)) throw new UnsupportedError(`unsupported argument ${k}`);
    o[k] = v;
  }
  return o;
}

function plainBulkResult(r) {
  if (!r) return r;
  return {
    deletedCount: r.deletedCount, insertedCount: r.insertedCount, insertedIds: r.insertedIds,
    matchedCount: r.matchedCount, modifiedCount: r.modifiedCount, upsertedCount: r.upsertedCount,
    upsertedIds: r.upsertedIds,
  };
}

function mapToObject(m) {
  if (!(m instanceof Map)) return m;
  const o = {};
  for (const [k, v] of m) o[String(k)] = v;
  return o;
}

export function plainClientBulkResult(r) {
  if (!r) return r;
  const o = {
    insertedCount: r.insertedCount, upsertedCount: r.upsertedCount, matchedCount: r.matchedCount,
    modifiedCount: r.modifiedCount, deletedCount: r.deletedCount,
  };
  for (const k of ['insertResults', 'updateResults', 'deleteResults']) {
    if (r[k] !== undefined) o[k] = mapToObject(r[k]);
  }
  return o;
}

function updateResult(r) {
  const o = { matchedCount: r.matchedCount, modifiedCount: r.modifiedCount, upsertedCount: r.upsertedCount };
  if (r.upsertedId !== null && r.upsertedId !== undefined) o.upsertedId = r.upsertedId;
  return o;
}

// A cursor entity: the initial command runs at creation (so that creation errors surface
// where the test expects them), documents are handed out one by one.
async function openCursor(cursor) {
  await cursor.hasNext();
  return cursor;
}

// A change stream's hasNext() waits for an event; opening one only sends the
// aggregate (the driver exposes cursorInit() for unified test runners).
async function openChangeStream(stream) {
  await stream.cursor.cursorInit();
  return stream;
}

async function readStream(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return Buffer.concat(chunks);
}

function toClientModels(models) {
  return models.map((m) => {
    const [name] = Object.keys(m);
    return { name, ...m[name] };
  });
}

const TXN_STATES = {
  NO_TRANSACTION: 'none', STARTING_TRANSACTION: 'starting', TRANSACTION_IN_PROGRESS: 'in_progress',
  TRANSACTION_COMMITTED: 'committed', TRANSACTION_COMMITTED_EMPTY: 'committed', TRANSACTION_ABORTED: 'aborted',
};

// Runs op; returns { result } or throws the operation's error. `runner` gives access to
// the internal client and the nested-operation executor (withTransaction, loop).
export async function execute(op, ents, runner) {
  const a = op.arguments || {};
  if (op.object === 'testRunner') return testRunnerOp(op, a, ents, runner);
  const kind = ents.kindOf(op.object);
  const target = ents.get(op.object);
  switch (kind) {
    case 'collection': return collectionOp(op.name, a, target, ents);
    case 'database': return databaseOp(op.name, a, target, ents);
    case 'client': return clientOp(op.name, a, target, ents);
    case 'session': return sessionOp(op, a, target, ents, runner);
    case 'bucket': return bucketOp(op.name, a, target, ents);
    case 'cursor': case 'changeStream': return cursorOp(op.name, a, target);
    default: throw new Error(`entity ${op.object} (${kind}) has no operations`);
  }
}

async function collectionOp(name, a, coll, ents) {
  switch (name) {
    case 'insertOne': {
      const r = await coll.insertOne(a.document, options(a, ['document'], ents));
      return { insertedId: r.insertedId };
    }
    case 'insertMany': {
      const r = await coll.insertMany(a.documents, options(a, ['documents'], ents));
      return { insertedIds: r.insertedIds };
    }
    case 'updateOne': return updateResult(await coll.updateOne(a.filter, a.update, options(a, ['filter', 'update'], ents)));
    case 'updateMany': return updateResult(await coll.updateMany(a.filter, a.update, options(a, ['filter', 'update'], ents)));
    case 'replaceOne': return updateResult(await coll.replaceOne(a.filter, a.replacement, options(a, ['filter', 'replacement'], ents)));
    case 'deleteOne': return { deletedCount: (await coll.deleteOne(a.filter, options(a, ['filter'], ents))).deletedCount };
    case 'deleteMany': return { deletedCount: (await coll.deleteMany(a.filter, options(a, ['filter'], ents))).deletedCount };
    case 'bulkWrite': return plainBulkResult(await coll.bulkWrite(a.requests, options(a, ['requests'], ents)));
    case 'find': return coll.find(a.filter ?? {}, options(a, ['filter'], ents)).toArray();
    case 'findOne': return coll.findOne(a.filter ?? {}, options(a, ['filter'], ents));
    case 'createFindCursor': return openCursor(coll.find(a.filter ?? {}, options(a, ['filter'], ents)));
    case 'findOneAndUpdate': return coll.findOneAndUpdate(a.filter, a.update, options(a, ['filter', 'update'], ents));
    case 'findOneAndReplace': return coll.findOneAndReplace(a.filter, a.replacement, options(a, ['filter', 'replacement'], ents));
    case 'findOneAndDelete': return coll.findOneAndDelete(a.filter, options(a, ['filter'], ents));
    case 'aggregate': return coll.aggregate(a.pipeline, options(a, ['pipeline'], ents)).toArray();
    case 'countDocuments': return coll.countDocuments(a.filter, options(a, ['filter'], ents));
    case 'estimatedDocumentCount': return coll.estimatedDocumentCount(options(a, [], ents));
    case 'count': return coll.count(a.filter, options(a, ['filter'], ents));
    case 'distinct': return coll.distinct(a.fieldName, a.filter ?? {}, options(a, ['fieldName', 'filter'], ents));
    case 'createIndex': return coll.createIndex(a.keys, options(a, ['keys'], ents));
    case 'dropIndex': return coll.dropIndex(a.name, options(a, ['name'], ents));
    case 'dropIndexes': return coll.dropIndexes(options(a, [], ents));
    case 'listIndexes': return coll.listIndexes(options(a, [], ents)).toArray();
    case 'listIndexNames': return (await coll.listIndexes(options(a, [], ents)).toArray()).map((i) => i.name);
    case 'rename': {
      const r = await coll.rename(a.to, options(a, ['to'], ents));
      return r ? undefined : r;
    }
    case 'drop': return coll.drop(options(a, [], ents));
    case 'createChangeStream': return openChangeStream(coll.watch(a.pipeline ?? [], options(a, ['pipeline'], ents)));
    default: throw new UnsupportedError(`collection operation ${name}`);
  }
}

async function databaseOp(name, a, db, ents) {
  switch (name) {
    case 'aggregate': return db.aggregate(a.pipeline, options(a, ['pipeline'], ents)).toArray();
    case 'runCommand': {
      const o = options(a, ['command', 'commandName'], ents);
      return db.command(a.command, o);
    }
    case 'runCursorCommand':
    case 'createCommandCursor': {
      const o = options(a, ['command', 'commandName', 'batchSize', 'maxTimeMS', 'comment', 'cursorType', 'timeoutMode'], ents);
      const c = db.runCursorCommand(a.command, o);
      if (a.batchSize !== undefined) c.setBatchSize(a.batchSize);
      if (a.maxTimeMS !== undefined) c.setMaxTimeMS(a.maxTimeMS);
      if (a.comment !== undefined) c.setComment(a.comment);
      if (name === 'runCursorCommand') return c.toArray();
      return openCursor(c);
    }
    case 'listCollections':
    case 'listCollectionObjects':
      return db.listCollections(a.filter ?? {}, options(a, ['filter'], ents)).toArray();
    case 'listCollectionNames':
      return (await db.listCollections(a.filter ?? {}, { ...options(a, ['filter'], ents), nameOnly: true }).toArray()).map((c) => c.name);
    case 'createCollection': {
      return db.createCollection(a.collection, options(a, ['collection'], ents));
    }
    case 'dropCollection': return db.dropCollection(a.collection, options(a, ['collection'], ents));
    case 'modifyCollection': {
      const { collection, session, ...rest } = a;
      const o = session ? { session: ents.get(session, 'session') } : {};
      return db.command({ collMod: collection, ...rest }, o);
    }
    case 'createChangeStream': return openChangeStream(db.watch(a.pipeline ?? [], options(a, ['pipeline'], ents)));
    default: throw new UnsupportedError(`database operation ${name}`);
  }
}

async function clientOp(name, a, c, ents) {
  const client = c.client;
  switch (name) {
    case 'listDatabases':
    case 'listDatabaseObjects':
      return (await client.db('admin').admin().listDatabases({ ...options(a, [], ents) })).databases;
    case 'listDatabaseNames':
      return (await client.db('admin').admin().listDatabases({ ...options(a, [], ents), nameOnly: true })).databases.map((d) => d.name);
    case 'clientBulkWrite':
      return plainClientBulkResult(await client.bulkWrite(toClientModels(a.models), options(a, ['models'], ents)));
    case 'createChangeStream': return openChangeStream(client.watch(a.pipeline ?? [], options(a, ['pipeline'], ents)));
    default: throw new UnsupportedError(`client operation ${name}`);
  }
}

async function sessionOp(op, a, s, ents, runner) {
  switch (op.name) {
    case 'endSession': await s.endSession(); return undefined;
    case 'startTransaction': s.startTransaction(options(a, [], ents)); return undefined;
    case 'commitTransaction': await s.commitTransaction(); return undefined;
    case 'abortTransaction': await s.abortTransaction(); return undefined;
    case 'withTransaction':
      await s.withTransaction(async () => {
        for (const sub of a.callback) await runner.runOperation(sub, ents, true);
      }, options(a, ['callback'], ents));
      return undefined;
    case 'getSnapshotTime': return s.snapshotTime;
    default: throw new UnsupportedError(`session operation ${op.name}`);
  }
}

async function bucketOp(name, a, bucket) {
  switch (name) {
    case 'download': return readStream(bucket.openDownloadStream(a.id));
    case 'downloadByName': {
      const o = a.revision !== undefined ? { revision: a.revision } : {};
      return readStream(bucket.openDownloadStreamByName(a.filename, o));
    }
    case 'delete': await bucket.delete(a.id); return undefined;
    case 'drop': await bucket.drop(); return undefined;
    default: throw new UnsupportedError(`bucket operation ${name}`);
  }
}

async function cursorOp(name, a, cursor) {
  switch (name) {
    case 'iterateUntilDocumentOrError': return cursor.next();
    case 'iterateOnce': return cursor.tryNext();
    case 'close': await cursor.close(); return undefined;
    default: throw new UnsupportedError(`cursor operation ${name}`);
  }
}

function lastTwoLsids(c) {
  const ev = c.startedAll;
  if (ev.length < 2) throw new Error(`fewer than two commands observed (${ev.length})`);
  return [ev[ev.length - 2].command.lsid, ev[ev.length - 1].command.lsid];
}

async function testRunnerOp(op, a, ents, runner) {
  const ctx = { entities: ents };
  switch (op.name) {
    case 'failPoint': {
      const c = ents.get(a.client, 'client');
      await c.client.db('admin').command(a.failPoint);
      runner.failPointsSet.push({ client: c.client, name: a.failPoint.configureFailPoint });
      return undefined;
    }
    case 'targetedFailPoint':
      throw new UnsupportedError('targetedFailPoint needs a sharded cluster');
    case 'assertCollectionExists':
    case 'assertCollectionNotExists': {
      const names = (await runner.internal.db(a.databaseName).listCollections({}, { nameOnly: true }).toArray()).map((x) => x.name);
      const want = op.name === 'assertCollectionExists';
      if (names.includes(a.collectionName) !== want) {
        throw new AssertionFailure(`collection ${a.databaseName}.${a.collectionName} ${want ? 'does not exist' : 'exists'}`);
      }
      return undefined;
    }
    case 'assertIndexExists':
    case 'assertIndexNotExists': {
      let names = [];
      try {
        names = (await runner.internal.db(a.databaseName).collection(a.collectionName).listIndexes().toArray()).map((x) => x.name);
      } catch (e) {
        if (!(e instanceof MongoServerError) || e.code !== 26) throw e;
      }
      const want = op.name === 'assertIndexExists';
      if (names.includes(a.indexName) !== want) {
        throw new AssertionFailure(`index ${a.indexName} on ${a.databaseName}.${a.collectionName} ${want ? 'does not exist' : 'exists'}`);
      }
      return undefined;
    }
    case 'assertSessionDirty':
    case 'assertSessionNotDirty': {
      const s = ents.get(a.session, 'session');
      const dirty = !!s.serverSession?.isDirty;
      if (dirty !== (op.name === 'assertSessionDirty')) throw new AssertionFailure(`session ${a.session} dirty=${dirty}`);
      return undefined;
    }
    case 'assertSessionPinned':
    case 'assertSessionUnpinned': {
      const s = ents.get(a.session, 'session');
      if (!!s.isPinned !== (op.name === 'assertSessionPinned')) throw new AssertionFailure(`session pinned=${!!s.isPinned}`);
      return undefined;
    }
    case 'assertSessionTransactionState': {
      const s = ents.get(a.session, 'session');
      const st = TXN_STATES[s.transaction?.state] ?? s.transaction?.state;
      if (st !== a.state) throw new AssertionFailure(`transaction state ${st}, expected ${a.state}`);
      return undefined;
    }
    case 'assertSameLsidOnLastTwoCommands':
    case 'assertDifferentLsidOnLastTwoCommands': {
      const [x, y] = lastTwoLsids(ents.get(a.client, 'client'));
      const same = match(x, y, ctx, false) === null;
      if (same !== (op.name === 'assertSameLsidOnLastTwoCommands')) {
        throw new AssertionFailure(`lsids ${show(x)} and ${show(y)} are ${same ? 'equal' : 'different'}`);
      }
      return undefined;
    }
    case 'assertNumberConnectionsCheckedOut': {
      const c = ents.get(a.client, 'client');
      if (c.checkedOut !== a.connections) throw new AssertionFailure(`${c.checkedOut} connections checked out, expected ${a.connections}`);
      return undefined;
    }
    case 'createEntities': await ents.create(a.entities); return undefined;
    case 'wait': await new Promise((r) => setTimeout(r, a.ms)); return undefined;
    case 'assertEventCount':
    case 'waitForEvent': {
      const c = ents.get(a.client, 'client');
      const [type] = Object.keys(a.event);
      const deadline = Date.now() + (op.name === 'waitForEvent' ? 10000 : 0);
      for (;;) {
        const n = [...c.commandEvents, ...c.cmapEvents].filter((e) => e.type === type
          && runner.eventMatches(a.event[type], e, ctx) === null).length;
        if (op.name === 'assertEventCount' ? n === a.count : n >= a.count) return undefined;
        if (Date.now() >= deadline) throw new AssertionFailure(`${n} ${type} events, expected ${a.count}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    }
    default: throw new UnsupportedError(`testRunner operation ${op.name}`);
  }
}

export class AssertionFailure extends Error {}

export { matchRootArray };
