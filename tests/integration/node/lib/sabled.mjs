// sabled.mjs: start and stop a real sabled for the Node.js integration tests.
// Each Sabled owns a temporary directory (dbpath + log), listens on a free
// 127.0.0.1 port and is killed and removed by cleanup() whatever happened.
// The binary is $SABLED or <repo>/build/sabled.
// What cleanup() was not called for (a test that failed before it, a file
// ended by SIGTERM, SIGINT or SIGHUP, made exits here) is killed and removed
// when the process exits; a process killed with SIGKILL leaves its
// directories (sabled-node-*) behind.

import { spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync, openSync, closeSync, readFileSync, existsSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { MongoClient } from 'mongodb';

const here = path.dirname(fileURLToPath(import.meta.url));
export const REPO = path.resolve(here, '..', '..', '..', '..');

export function sabledPath() {
  return process.env.SABLED || path.join(REPO, 'build', 'sabled');
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

function portIsFree(port) {
  return new Promise((resolve) => {
    const srv = net.createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

// The first of n consecutive free ports, below 32768: Linux gives outgoing
// connections (other tests' clients, under ctest -j) ports from there up, so a
// range taken from freePort() may be half used by the time a launcher binds it.
export async function freePortRange(n) {
  for (let tries = 0; tries < 200; tries++) {
    const base = 20000 + Math.floor(Math.random() * (12000 - n));
    let ok = true;
    for (let p = base; p < base + n && ok; p++) ok = await portIsFree(p);
    if (ok) return base;
  }
  throw new Error('no free port range');
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Every Sabled from its creation until cleanup() removed its directory, and
// the other clean-ups registered with onExit until they ran.
const live = new Set();
const atExit = new Set();

// Run fn (synchronous: nothing asynchronous runs at exit) when the process
// exits without having called the function this returns, which runs fn now.
export function onExit(fn) {
  atExit.add(fn);
  return () => {
    if (atExit.delete(fn)) fn();
  };
}

process.on('exit', () => {
  for (const fn of atExit) {
    try {
      fn();
    } catch { /* the others still run */ }
  }
  atExit.clear();
  for (const s of live) {
    try {
      if (s.proc && s.exitCode === null) s.proc.kill('SIGKILL');
    } catch { /* gone already */ }
    rmSync(s.root, { recursive: true, force: true });
  }
  live.clear();
});
for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP']) {
  process.once(sig, () => process.exit(128 + os.constants.signals[sig]));
}

export class Sabled {
  constructor() {
    this.root = mkdtempSync(path.join(os.tmpdir(), 'sabled-node-'));
    this.dbpath = path.join(this.root, 'db');
    mkdirSync(this.dbpath);
    this.logpath = path.join(this.root, 'sabled.log');
    this.proc = null;
    this.exitCode = null;
    live.add(this);
  }

  async start(extraArgs = []) {
    if (!existsSync(sabledPath())) {
      throw new Error(`sabled not found at ${sabledPath()} (scripts/build.sh or set SABLED)`);
    }
    this.port = await freePort();
    const out = openSync(path.join(this.root, 'stdout.txt'), 'a');
    const err = openSync(path.join(this.root, 'stderr.txt'), 'a');
    // The Unix-domain socket (on by default, as mongod's) in the server's own
    // directory: a SIGKILL leaves nothing in /tmp (a socket path holds 107 bytes).
    const sock = this.root.length < 80 ? ['--unixSocketPrefix', this.root] : [];
    this.proc = spawn(sabledPath(), ['--port', String(this.port), '--bind_ip', '127.0.0.1',
      '--dbpath', this.dbpath, '--logpath', this.logpath, ...sock, ...extraArgs],
    { stdio: ['ignore', out, err], cwd: this.root });
    closeSync(out);
    closeSync(err);
    this.exited = new Promise((resolve) => this.proc.on('exit', (code, sig) => {
      this.exitCode = code ?? sig;
      resolve(this.exitCode);
    }));
    await this.waitReady();
    return this;
  }

  uri(opts = '') {
    return `mongodb://127.0.0.1:${this.port}/?directConnection=true${opts ? '&' + opts : ''}`;
  }

  async waitReady(timeoutMs = 30000) {
    const deadline = Date.now() + timeoutMs;
    let last;
    while (Date.now() < deadline) {
      if (this.exitCode !== null) {
        throw new Error(`sabled exited (${this.exitCode}) before answering:\n${this.output()}`);
      }
      const c = new MongoClient(this.uri(), { serverSelectionTimeoutMS: 500, connectTimeoutMS: 500 });
      try {
        await c.connect();
        const r = await c.db('admin').command({ ping: 1 });
        if (r.ok === 1) return;
      } catch (e) {
        last = e;
      } finally {
        await c.close().catch(() => {});
      }
      await sleep(100);
    }
    throw new Error(`sabled did not answer within ${timeoutMs} ms: ${last}\n${this.output()}`);
  }

  output() {
    let s = '';
    for (const f of ['stdout.txt', 'stderr.txt', 'sabled.log']) {
      const p = path.join(this.root, f);
      if (existsSync(p)) s += readFileSync(p, 'utf8').slice(-3000) + '\n';
    }
    return s;
  }

  async stop() {
    if (this.proc && this.exitCode === null) {
      this.proc.kill('SIGTERM');
      const t = setTimeout(() => this.proc.kill('SIGKILL'), 30000);
      await this.exited;
      clearTimeout(t);
    }
    return this.exitCode;
  }

  async cleanup() {
    try {
      await this.stop();
    } finally {
      rmSync(this.root, { recursive: true, force: true });
      live.delete(this);
    }
  }
}
