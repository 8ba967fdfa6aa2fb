// match.mjs: the unified test format's matching rules (expected value vs actual value).
// Root-level documents may carry extra fields; nested documents may not; arrays must have
// the same length; numbers (int32/int64/double, not decimal) compare by value; `$$`
// operators ($$exists, $$type, $$unsetOrMatches, $$sessionLsid, $$matchesEntity,
// $$matchesHexBytes, $$lte, $$matchAsDocument, $$matchAsRoot) are evaluated here, and
// withoutDriverWtimeout names the one field of the Node driver's commands left out.
// What must stay true: match() never throws for a mismatch; it returns a path-qualified
// message (or null when the values match), so that reports name the exact field.

import mongodb from 'mongodb';

const { EJSON } = mongodb.BSON;

export function isDocument(v) {
  if (v === null || typeof v !== 'object') return false;
  if (Array.isArray(v) || v instanceof Date || v instanceof RegExp || Buffer.isBuffer(v)) return false;
  if (v instanceof Uint8Array || v instanceof Map) return false;
  return v._bsontype === undefined;
}

function isNumeric(v) {
  if (typeof v === 'number' || typeof v === 'bigint') return true;
  return v !== null && typeof v === 'object' && ['Int32', 'Double', 'Long'].includes(v._bsontype);
}

function toNumber(v) {
  if (typeof v === 'number') return v;
  if (typeof v === 'bigint') return Number(v);
  if (v._bsontype === 'Long') return v.toNumber();
  return Number(v.value);
}

function exactNumberEqual(a, b) {
  // Longs beyond 2^53 compare by their decimal strings.
  const big = (x) => (typeof x === 'bigint' ? x.toString() : x._bsontype === 'Long' ? x.toString() : null);
  const sa = typeof a === 'object' || typeof a === 'bigint' ? big(a) : null;
  const sb = typeof b === 'object' || typeof b === 'bigint' ? big(b) : null;
  if (sa !== null && sb !== null) return sa === sb;
  const na = toNumber(a), nb = toNumber(b);
  return na === nb || (Number.isNaN(na) && Number.isNaN(nb));
}

// The $type name of a JavaScript/BSON value. Plain JS numbers do not say whether the server
// sent an int, a long or a double (the driver promotes all three), so typeMatches() accepts
// a JS number for any numeric name it could have come from.
export function typeMatches(name, v) {
  const t = v === null ? 'null' : typeof v;
  switch (name) {
    case 'double': return t === 'number' || v?._bsontype === 'Double';
    case 'int': return (t === 'number' && Number.isInteger(v) && Math.abs(v) <= 2147483648) || v?._bsontype === 'Int32';
    case 'long': return (t === 'number' && Number.isInteger(v)) || t === 'bigint' || v?._bsontype === 'Long';
    case 'decimal': return v?._bsontype === 'Decimal128';
    case 'number': return isNumeric(v) || v?._bsontype === 'Decimal128';
    case 'string': return t === 'string';
    case 'object': return isDocument(v);
    case 'array': return Array.isArray(v);
    case 'binData': return v?._bsontype === 'Binary' || Buffer.isBuffer(v) || v instanceof Uint8Array;
    case 'undefined': return v === undefined;
    case 'objectId': return v?._bsontype === 'ObjectId';
    case 'bool': return t === 'boolean';
    case 'date': return v instanceof Date;
    case 'null': return v === null;
    case 'regex': return v instanceof RegExp || v?._bsontype === 'BSONRegExp';
    case 'dbPointer': return v?._bsontype === 'DBRef';
    case 'javascript': return v?._bsontype === 'Code' && !v.scope;
    case 'javascriptWithScope': return v?._bsontype === 'Code' && !!v.scope;
    case 'symbol': return v?._bsontype === 'BSONSymbol';
    case 'timestamp': return v?._bsontype === 'Timestamp';
    case 'minKey': return v?._bsontype === 'MinKey';
    case 'maxKey': return v?._bsontype === 'MaxKey';
    default: throw new Error(`unknown $$type name ${name}`);
  }
}

export function show(v) {
  try {
    const s = EJSON.stringify(v, { relaxed: true });
    return s === undefined ? 'undefined' : s.length > 300 ? s.slice(0, 300) + '...' : s;
  } catch {
    return String(v);
  }
}

function bytesOf(v) {
  if (Buffer.isBuffer(v)) return v;
  if (v instanceof Uint8Array) return Buffer.from(v);
  if (v?._bsontype === 'Binary') return Buffer.from(v.buffer.subarray(0, v.position ?? v.buffer.length));
  return null;
}

// Equality of two non-document, non-array values (flexible numerics).
function scalarEqual(e, a) {
  if (isNumeric(e)) return isNumeric(a) && exactNumberEqual(e, a);
  if (e === null || e === undefined) return a === e;
  if (typeof e !== 'object') return e === a;
  if (a === null || typeof a !== 'object') return false;
  if (e instanceof Date) return a instanceof Date && e.getTime() === a.getTime();
  const eb = bytesOf(e);
  if (eb) {
    const ab = bytesOf(a);
    if (!ab || !eb.equals(ab)) return false;
    const es = e.sub_type ?? 0, as = a.sub_type ?? 0;
    return es === as;
  }
  if (e instanceof RegExp || e._bsontype === 'BSONRegExp') {
    const pat = (x) => (x instanceof RegExp ? x.source : x.pattern);
    const flg = (x) => [...(x.flags ?? x.options ?? '')].sort().join('');
    return (a instanceof RegExp || a._bsontype === 'BSONRegExp') && pat(e) === pat(a) && flg(e) === flg(a);
  }
  if (e._bsontype !== a._bsontype) return false;
  switch (e._bsontype) {
    case 'ObjectId': return e.equals(a);
    case 'Decimal128': return e.toString() === a.toString();
    case 'Timestamp': return e.t === a.t && e.i === a.i;
    case 'MinKey': case 'MaxKey': return true;
    default: return EJSON.stringify(e, { relaxed: false }) === EJSON.stringify(a, { relaxed: false });
  }
}

function isOperator(v) {
  if (!isDocument(v)) return false;
  const keys = Object.keys(v);
  return keys.length === 1 && keys[0].startsWith('$$');
}

// ctx: { entities: Map-like with get(name) }.
export function match(expected, actual, ctx, isRoot = true, path = '') {
  const at = path || '(root)';
  // The driver sends sort specifications as Maps (to keep key order).
  if (actual instanceof Map) actual = Object.fromEntries(actual);
  if (isOperator(expected)) return matchOperator(expected, actual, ctx, isRoot, path);
  if (isDocument(expected)) {
    if (!isDocument(actual)) return `${at}: expected a document ${show(expected)}, got ${show(actual)}`;
    for (const [k, ev] of Object.entries(expected)) {
      const sub = path ? `${path}.${k}` : k;
      const present = Object.prototype.hasOwnProperty.call(actual, k) && actual[k] !== undefined;
      if (isOperator(ev)) {
        const op = Object.keys(ev)[0];
        if (op === '$$exists') {
          if (ev[op] && !present) return `${sub}: expected field to exist`;
          if (!ev[op] && present) return `${sub}: expected no field, got ${show(actual[k])}`;
          continue;
        }
        if (op === '$$unsetOrMatches') {
          if (!present) continue;
          const r = match(ev[op], actual[k], ctx, false, sub);
          if (r) return r;
          continue;
        }
      }
      if (!present) return `${sub}: missing (expected ${show(ev)})`;
      const r = match(ev, actual[k], ctx, false, sub);
      if (r) return r;
    }
    if (!isRoot) {
      for (const k of Object.keys(actual)) {
        if (actual[k] === undefined) continue;
        if (!Object.prototype.hasOwnProperty.call(expected, k)) return `${path ? path + '.' : ''}${k}: unexpected extra field ${show(actual[k])}`;
      }
    }
    return null;
  }
  if (Array.isArray(expected)) {
    if (!Array.isArray(actual)) return `${at}: expected an array ${show(expected)}, got ${show(actual)}`;
    if (expected.length !== actual.length) {
      return `${at}: expected ${expected.length} elements, got ${actual.length}: ${show(actual)}`;
    }
    for (let i = 0; i < expected.length; i++) {
      const r = match(expected[i], actual[i], ctx, false, `${path}[${i}]`);
      if (r) return r;
    }
    return null;
  }
  if (!scalarEqual(expected, actual)) return `${at}: expected ${show(expected)}, got ${show(actual)}`;
  return null;
}

// Arrays of root-level documents (find, aggregate, list* results): each element is a root.
export function matchRootArray(expected, actual, ctx) {
  if (!Array.isArray(expected)) return match(expected, actual, ctx, true);
  if (!Array.isArray(actual)) return `expected an array of ${expected.length} documents, got ${show(actual)}`;
  if (expected.length !== actual.length) {
    return `expected ${expected.length} documents, got ${actual.length}: ${show(actual)}`;
  }
  for (let i = 0; i < expected.length; i++) {
    const r = match(expected[i], actual[i], ctx, true, `[${i}]`);
    if (r) return r;
  }
  return null;
}

function matchOperator(expected, actual, ctx, isRoot, path) {
  const at = path || '(root)';
  const op = Object.keys(expected)[0];
  const arg = expected[op];
  switch (op) {
    case '$$exists':
      // Only meaningful as a field value; at a value position it asserts presence.
      return (actual !== undefined) === !!arg ? null : `${at}: $$exists ${arg} failed`;
    case '$$unsetOrMatches':
      if (actual === undefined) return null;
      return match(arg, actual, ctx, isRoot, path);
    case '$$type': {
      const names = Array.isArray(arg) ? arg : [arg];
      if (actual === undefined) return `${at}: missing (expected type ${names.join('|')})`;
      return names.some((n) => typeMatches(n, actual)) ? null : `${at}: expected type ${names.join('|')}, got ${show(actual)}`;
    }
    case '$$sessionLsid': {
      const s = ctx.entities.get(arg, 'session');
      return match(s.id, actual, ctx, false, path);
    }
    case '$$matchesEntity':
      return match(ctx.entities.get(arg), actual, ctx, isRoot, path);
    case '$$matchesHexBytes': {
      const b = bytesOf(actual);
      if (!b) return `${at}: expected bytes ${arg}, got ${show(actual)}`;
      return b.toString('hex').toLowerCase() === String(arg).toLowerCase() ? null : `${at}: expected bytes ${arg}, got ${b.toString('hex')}`;
    }
    case '$$lte':
      if (!isNumeric(actual)) return `${at}: expected a number <= ${show(arg)}, got ${show(actual)}`;
      return toNumber(actual) <= toNumber(arg) ? null : `${at}: expected <= ${show(arg)}, got ${show(actual)}`;
    case '$$matchAsDocument': {
      if (typeof actual !== 'string') return `${at}: expected an extended JSON string, got ${show(actual)}`;
      let doc;
      try { doc = EJSON.parse(actual, { relaxed: true }); } catch (e) { return `${at}: not extended JSON: ${e.message}`; }
      return match(arg, doc, ctx, false, path);
    }
    case '$$matchAsRoot':
      return match(arg, actual, ctx, true, path);
    default:
      throw new Error(`unsupported special operator ${op}`);
  }
}

// Exact comparison (outcome data): no extra fields at any level, key order ignored,
// flexible numerics.
export function matchExact(expected, actual, path = '') {
  const at = path || '(root)';
  if (isDocument(expected)) {
    if (!isDocument(actual)) return `${at}: expected ${show(expected)}, got ${show(actual)}`;
    const ek = Object.keys(expected), ak = Object.keys(actual).filter((k) => actual[k] !== undefined);
    for (const k of ek) {
      if (!(k in actual)) return `${path ? path + '.' : ''}${k}: missing (expected ${show(expected[k])})`;
      const r = matchExact(expected[k], actual[k], path ? `${path}.${k}` : k);
      if (r) return r;
    }
    for (const k of ak) if (!(k in expected)) return `${path ? path + '.' : ''}${k}: unexpected field ${show(actual[k])}`;
    return null;
  }
  if (Array.isArray(expected)) {
    if (!Array.isArray(actual) || actual.length !== expected.length) return `${at}: expected ${show(expected)}, got ${show(actual)}`;
    for (let i = 0; i < expected.length; i++) {
      const r = matchExact(expected[i], actual[i], `${path}[${i}]`);
      if (r) return r;
    }
    return null;
  }
  return scalarEqual(expected, actual) ? null : `${at}: expected ${show(expected)}, got ${show(actual)}`;
}

// The Node driver (7.x) adds wtimeout: 10000 to the write concern of every
// commitTransaction and abortTransaction that has one (the transactions spec asks for it
// only on a retried commit), and its own runner lets nested documents carry extra
// fields. When the test's expected writeConcern names no wtimeout, that one added field
// is left out of the comparison (the command returned without it); everything else the
// driver sent is still compared.
const DRIVER_WTIMEOUT_MS = 10000;
export function withoutDriverWtimeout(expected, commandName, command) {
  const wc = command?.writeConcern;
  if (commandName !== 'commitTransaction' && commandName !== 'abortTransaction') return command;
  if (wc === null || typeof wc !== 'object' || wc.wtimeout === undefined) return command;
  if (Number(wc.wtimeout) !== DRIVER_WTIMEOUT_MS) return command;
  const ewc = expected?.writeConcern;
  if (!isDocument(ewc) || Object.keys(ewc).some((k) => k === 'wtimeout' || k.startsWith('$$'))) return command;
  const { wtimeout, ...rest } = wc;
  return { ...command, writeConcern: rest };
}
