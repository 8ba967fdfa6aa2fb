// Node.js driver against sabled --auth: the first user through the localhost
// exception, SCRAM-SHA-1 / SCRAM-SHA-256 logins with the reports' URL
// (authSource=admin; the driver authenticates speculatively inside hello),
// role checks (13), the same 18 for a wrong password and an unknown user, and
// TLS (tls=true&tlsCAFile=...) with a CA made by the openssl CLI.

import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { MongoClient, MongoServerError } from 'mongodb';
import { Sabled } from '../lib/sabled.mjs';

let server;
let certDir;

function url(user, pwd, extra = '') {
  return `mongodb://${user}:${pwd}@127.0.0.1:${server.port}/ycsb?authSource=admin` +
    `&directConnection=true&serverSelectionTimeoutMS=10000${extra}`;
}

async function withClient(u, fn) {
  const c = new MongoClient(u);
  try {
    await c.connect();
    return await fn(c);
  } finally {
    await c.close().catch(() => {});
  }
}

async function rejectsWith(code, p) {
  await assert.rejects(p, (e) => {
    assert.ok(e instanceof MongoServerError, String(e));
    assert.equal(e.code, code, e.message);
    return true;
  });
}

function makeCerts() {
  const d = mkdtempSync(path.join(tmpdir(), 'sable-node-tls-'));
  const ossl = (...args) => execFileSync('openssl', args, { cwd: d, stdio: 'ignore' });
  ossl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2', '-keyout', 'ca.key',
    '-out', 'ca.pem', '-subj', '/CN=Sable Node Test CA');
  writeFileSync(path.join(d, 'san.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
  ossl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'server.key', '-out', 'server.csr',
    '-subj', '/CN=127.0.0.1');
  ossl('x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key',
    '-CAcreateserial', '-days', '2', '-out', 'server.crt', '-extfile', 'san.ext');
  writeFileSync(path.join(d, 'server.pem'),
    readFileSync(path.join(d, 'server.crt'), 'utf8') + readFileSync(path.join(d, 'server.key'), 'utf8'));
  return d;
}

before(async () => {
  certDir = makeCerts();
  server = new Sabled();
  await server.start(['--auth', '--tlsMode', 'allowTLS',
    '--tlsCertificateKeyFile', path.join(certDir, 'server.pem')]);
  // Localhost exception: no user exists yet.
  await withClient(server.uri(), (c) =>
    c.db('admin').command({ createUser: 'admin', pwd: 'adminpw', roles: ['root'] }));
});

after(async () => {
  await server?.cleanup();
  if (certDir) rmSync(certDir, { recursive: true, force: true });
});

describe('authentication', () => {
  test('unauthenticated commands get 13; the localhost exception is closed', async () => {
    await withClient(server.uri(), async (c) => {
      assert.equal((await c.db('admin').command({ ping: 1 })).ok, 1);
      await rejectsWith(13, c.db('ycsb').collection('usertable').findOne({}));
      await rejectsWith(13, c.db('admin').command({ createUser: 'x', pwd: 'x', roles: [] }));
    });
  });

  for (const mech of ['SCRAM-SHA-1', 'SCRAM-SHA-256', '']) {
    test(`login ${mech || 'default mechanism'} with authSource=admin`, async () => {
      const extra = mech ? `&authMechanism=${mech}` : '';
      await withClient(url('admin', 'adminpw', extra), async (c) => {
        const coll = c.db('ycsb').collection('usertable');
        await coll.insertOne({ _id: `user-${mech}`, field0: 'v' });
        assert.equal((await coll.findOne({ _id: `user-${mech}` })).field0, 'v');
        const st = await c.db('admin').command({ connectionStatus: 1 });
        assert.deepEqual(st.authInfo.authenticatedUsers, [{ user: 'admin', db: 'admin' }]);
      });
    });
  }

  test('wrong password and unknown user: the same 18', async () => {
    const msgs = [];
    for (const [u, p] of [['admin', 'nope'], ['ghost', 'nope']]) {
      const c = new MongoClient(url(u, p));
      await assert.rejects(c.connect(), (e) => {
        assert.equal(e.code, 18);
        msgs.push(e.message);
        return true;
      });
      await c.close().catch(() => {});
    }
    assert.equal(msgs[0], msgs[1]);
    assert.match(server.output(), /"Authentication failed"/);
  });

  test('roles: read may find but not insert', async () => {
    await withClient(url('admin', 'adminpw'), async (c) => {
      await c.db('admin').command({ createUser: 'reader', pwd: 'rpw',
        roles: [{ role: 'read', db: 'ycsb' }] });
    });
    await withClient(url('reader', 'rpw'), async (c) => {
      await c.db('ycsb').collection('usertable').findOne({});
      await rejectsWith(13, c.db('ycsb').collection('usertable').insertOne({ a: 1 }));
      await rejectsWith(13, c.db('other').collection('x').findOne({}));
    });
  });
});

describe('tls', () => {
  test('tls=true with tlsCAFile, with and without auth', async () => {
    const ca = path.join(certDir, 'ca.pem');
    await withClient(url('admin', 'adminpw', `&tls=true&tlsCAFile=${ca}`), async (c) => {
      await c.db('ycsb').collection('tls').insertOne({ over: 'tls' });
      assert.equal((await c.db('ycsb').collection('tls').findOne({})).over, 'tls');
    });
    // allowTLS: plaintext still works on the same port.
    await withClient(url('admin', 'adminpw'), async (c) => {
      assert.equal((await c.db('ycsb').collection('tls').countDocuments({})), 1);
    });
  });
});
