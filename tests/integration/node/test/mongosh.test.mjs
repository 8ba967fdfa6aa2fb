// mongosh smoke test: the real shell (npm package mongosh) connects, inserts
// and reads back.  Telemetry is off and HOME is a temporary directory so the
// shell neither phones home nor touches the user's files.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Sabled } from '../lib/sabled.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const mongosh = path.join(here, '..', 'node_modules', '.bin', 'mongosh');

let server;
let home;

before(async () => {
  server = new Sabled();
  await server.start();
  home = mkdtempSync(path.join(os.tmpdir(), 'mongosh-home-'));
});

after(async () => {
  await server?.cleanup();
  if (home) rmSync(home, { recursive: true, force: true });
});

function shell(uri, script) {
  return new Promise((resolve) => {
    execFile(mongosh, [uri, '--quiet', '--norc', '--eval', script], {
      env: { ...process.env, HOME: home, MONGOSH_FORCE_DISABLE_TELEMETRY_FOR_TESTING: '1' },
      timeout: 60000,
    }, (err, stdout, stderr) => resolve({ code: err ? (err.code ?? 1) : 0, stdout, stderr }));
  });
}

test('mongosh insertOne + findOne', { skip: !existsSync(mongosh) && 'mongosh not installed' }, async () => {
  const uri = `mongodb://127.0.0.1:${server.port}/shelltest?directConnection=true`;
  const r = await shell(uri, 'db.t.insertOne({a:1}); printjson(db.t.findOne())');
  assert.equal(r.code, 0, r.stderr + r.stdout);
  assert.match(r.stdout, /_id: ObjectId\(['"][0-9a-f]{24}['"]\)/);
  assert.match(r.stdout, /a: 1/);
  const r2 = await shell(uri, 'print(db.t.countDocuments()); print(db.version()); '
    + 'print(JSON.stringify(db.adminCommand({ping:1})))');
  assert.equal(r2.code, 0, r2.stderr + r2.stdout);
  const lines = r2.stdout.trim().split('\n');
  assert.equal(lines[0], '1');
  assert.match(lines[1], /^7\.0\./);
  assert.equal(lines[2], '{"ok":1}');
});

// db.currentOp() in mongosh runs the $currentOp aggregation stage on admin.
test('mongosh db.currentOp()', { skip: !existsSync(mongosh) && 'mongosh not installed' }, async () => {
  const uri = `mongodb://127.0.0.1:${server.port}/shelltest?directConnection=true`;
  const r = await shell(uri, 'const c = db.currentOp(); print(c.ok); '
    + 'print(c.inprog.some((o) => o.type === "op" && o.command && o.command.aggregate === 1)); '
    + 'print(db.currentOp({ "command.comment": "no-such-op" }).inprog.length); '
    + 'print(db.currentOp(true).ok)');
  assert.equal(r.code, 0, r.stderr + r.stdout);
  assert.deepEqual(r.stdout.trim().split('\n'), ['1', 'true', '0', '1']);
});
