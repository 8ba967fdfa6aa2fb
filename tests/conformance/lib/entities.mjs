// entities.mjs: the per-test entity map of the unified test format (clients with their
// event logs, databases, collections, sessions, buckets, cursors, saved results).
// What must stay true: every client created for a test records only the events its
// observeEvents asks for (minus ignored and sensitive commands) while recording is on,
// and closeAll() ends every session, closes every cursor and client it created.

import mongodb from 'mongodb';
import { isDocument } from './match.mjs';

const { MongoClient, ReadPreference, GridFSBucket } = mongodb;

const CMAP_EVENTS = {
  connectionPoolCreated: 'poolCreatedEvent',
  connectionPoolReady: 'poolReadyEvent',
  connectionPoolCleared: 'poolClearedEvent',
  connectionPoolClosed: 'poolClosedEvent',
  connectionCreated: 'connectionCreatedEvent',
  connectionReady: 'connectionReadyEvent',
  connectionClosed: 'connectionClosedEvent',
  connectionCheckOutStarted: 'connectionCheckOutStartedEvent',
  connectionCheckOutFailed: 'connectionCheckOutFailedEvent',
  connectionCheckedOut: 'connectionCheckedOutEvent',
  connectionCheckedIn: 'connectionCheckedInEvent',
};
const COMMAND_EVENTS = {
  commandStarted: 'commandStartedEvent',
  commandSucceeded: 'commandSucceededEvent',
  commandFailed: 'commandFailedEvent',
};
const SENSITIVE = new Set(['authenticate', 'saslstart', 'saslcontinue', 'getnonce', 'createuser',
  'updateuser', 'copydbgetnonce', 'copydbsaslstart', 'copydb']);

export class UnsupportedError extends Error {}

// Read preference / concern options as the driver takes them.
export function readPreferenceOf(rp) {
  if (!rp) return undefined;
  if (typeof rp === 'string') return rp;
  const opts = {};
  if (rp.maxStalenessSeconds !== undefined) opts.maxStalenessSeconds = rp.maxStalenessSeconds;
  if (rp.hedge !== undefined) opts.hedge = rp.hedge;
  return new ReadPreference(rp.mode, rp.tagSets, opts);
}

export function collectionOptionsOf(o = {}) {
  const out = {};
  if (o.readConcern) out.readConcern = o.readConcern;
  if (o.writeConcern) out.writeConcern = o.writeConcern;
  if (o.readPreference) out.readPreference = readPreferenceOf(o.readPreference);
  if (o.timeoutMS !== undefined) out.timeoutMS = o.timeoutMS;
  return out;
}

export class ClientEntity {
  constructor(spec, baseUri) {
    this.spec = spec;
    this.recording = true;
    this.commandEvents = [];
    this.cmapEvents = [];
    this.startedAll = [];
    this.checkedOut = 0;
    const observe = new Set(spec.observeEvents || []);
    const ignore = new Set(spec.ignoreCommandMonitoringEvents || []);
    // Not WHATWG URL: a replica set's seed list (h1,h2,h3) is not a valid URL host.
    const q = baseUri.indexOf('?');
    const params = new URLSearchParams(q < 0 ? '' : baseUri.slice(q + 1));
    for (const [k, v] of Object.entries(spec.uriOptions || {})) {
      if (v !== null && typeof v === 'object') throw new UnsupportedError(`uriOptions.${k} as a document`);
      params.set(k, String(v));
    }
    if (!params.has('serverSelectionTimeoutMS')) params.set('serverSelectionTimeoutMS', '10000');
    const options = { monitorCommands: true };
    if (spec.serverApi) options.serverApi = spec.serverApi;
    this.client = new MongoClient(`${q < 0 ? baseUri : baseUri.slice(0, q)}?${params}`, options);
    for (const [name, type] of Object.entries(COMMAND_EVENTS)) {
      this.client.on(name, (ev) => {
        if (!this.recording) return;
        const cmd = String(ev.commandName);
        if (cmd === 'configureFailPoint' || ignore.has(cmd)) return;
        if (!spec.observeSensitiveCommands) {
          if (SENSITIVE.has(cmd.toLowerCase())) return;
          if (['hello', 'ismaster'].includes(cmd.toLowerCase())) {
            const body = name === 'commandStarted' ? ev.command : name === 'commandSucceeded' ? ev.reply : null;
            if (body && Object.keys(body).length === 0) return;
          }
        }
        // The command as it was sent: the driver may change an object it shares with
        // later commands (7.9 assigns the client's readConcern to a transaction's first
        // command and then adds the next transaction's afterClusterTime to that object).
        if (name === 'commandStarted') ev.command = copyPlain(ev.command);
        if (type === 'commandStartedEvent') this.startedAll.push(ev);
        if (observe.has(type)) this.commandEvents.push({ type, ev });
      });
    }
    for (const [name, type] of Object.entries(CMAP_EVENTS)) {
      this.client.on(name, (ev) => {
        if (name === 'connectionCheckedOut') this.checkedOut++;
        if (name === 'connectionCheckedIn') this.checkedOut--;
        if (this.recording && observe.has(type)) this.cmapEvents.push({ type, ev });
      });
    }
  }
}

// A copy of v's documents (plain objects or driver option objects such as ReadConcern) and
// arrays; BSON values, buffers and Maps are shared.
function copyPlain(v) {
  if (Array.isArray(v)) return v.map(copyPlain);
  if (!isDocument(v)) return v;
  const out = {};
  for (const [k, x] of Object.entries(v)) out[k] = copyPlain(x);
  return out;
}

export class EntityMap {
  constructor(baseUri) {
    this.baseUri = baseUri;
    this.map = new Map();
  }

  set(id, kind, value) {
    if (this.map.has(id)) throw new Error(`entity ${id} already exists`);
    this.map.set(id, { kind, value });
  }

  // get(id) any entity's value; get(id, kind) one of the given kind.
  get(id, kind) {
    const e = this.map.get(id);
    if (!e) throw new Error(`no entity named ${id}`);
    if (kind && e.kind !== kind) throw new Error(`entity ${id} is a ${e.kind}, not a ${kind}`);
    return e.value;
  }

  kindOf(id) {
    return this.map.get(id)?.kind;
  }

  has(id) {
    return this.map.has(id);
  }

  clients() {
    return [...this.map.values()].filter((e) => e.kind === 'client').map((e) => e.value);
  }

  async create(list) {
    for (const item of list) {
      const [kind] = Object.keys(item);
      const spec = item[kind];
      switch (kind) {
        case 'client': {
          const c = new ClientEntity(spec, this.baseUri);
          this.set(spec.id, 'client', c);
          break;
        }
        case 'database': {
          const c = this.get(spec.client, 'client');
          this.set(spec.id, 'database', c.client.db(spec.databaseName, collectionOptionsOf(spec.databaseOptions)));
          break;
        }
        case 'collection': {
          const db = this.get(spec.database, 'database');
          this.set(spec.id, 'collection', db.collection(spec.collectionName, collectionOptionsOf(spec.collectionOptions)));
          break;
        }
        case 'session': {
          const c = this.get(spec.client, 'client');
          const o = { ...(spec.sessionOptions || {}) };
          if (o.defaultTransactionOptions) {
            o.defaultTransactionOptions = { ...o.defaultTransactionOptions };
            const rp = o.defaultTransactionOptions.readPreference;
            if (rp) o.defaultTransactionOptions.readPreference = readPreferenceOf(rp);
          }
          // snapshotTime names a saved entity (a Timestamp); the Node driver has no
          // such option, but sends a snapshot session's snapshotTime as atClusterTime.
          const snapshotTime = typeof o.snapshotTime === 'string' ? this.get(o.snapshotTime) : o.snapshotTime;
          delete o.snapshotTime;
          const s = c.client.startSession(o);
          if (snapshotTime != null) s.snapshotTime = snapshotTime;
          s.__clientEntity = c;
          this.set(spec.id, 'session', s);
          break;
        }
        case 'bucket': {
          const db = this.get(spec.database, 'database');
          const o = { ...(spec.bucketOptions || {}) };
          this.set(spec.id, 'bucket', new GridFSBucket(db, o));
          break;
        }
        case 'clientEncryption':
          throw new UnsupportedError('clientEncryption entities (CSFLE) are not supported by this runner');
        case 'thread':
          throw new UnsupportedError('thread entities are not supported by this runner');
        default:
          throw new UnsupportedError(`entity type ${kind}`);
      }
    }
  }

  stopRecording() {
    for (const c of this.clients()) c.recording = false;
  }

  async closeAll() {
    for (const e of this.map.values()) {
      try {
        if (e.kind === 'session') await e.value.endSession();
        if (e.kind === 'cursor' || e.kind === 'changeStream') await e.value.close();
      } catch {
        // cleanup only
      }
    }
    for (const c of this.clients()) {
      try {
        await c.client.close(true);
      } catch {
        // cleanup only
      }
    }
    this.map.clear();
  }
}
