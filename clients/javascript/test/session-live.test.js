// The session client against real lcd servers built from this repository
// (see lcd.js): the README's example, a process killed while it holds three
// keys, tokens above 2^53, TLS with a client certificate and tokens, the
// refusals of authentication and rate limits as their own errors, and the
// farewell of a session the client counted expired.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import net from 'node:net';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';

import * as lc from '../src/index.js';
import { lcdBinary, startLcd } from './lcd.js';

const { Session } = lc;
const run = promisify(execFile);
const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const { why } = await lcdBinary();
const live = { skip: why ? `no lcd: ${why}` : false };

test('the README leads with the session example, and it runs', live, async (t) => {
  const readme = readFileSync(here('../README.md'), 'utf8');
  const example = readFileSync(here('../examples/session.mjs'), 'utf8');
  const body = example.slice(example.indexOf('import '));
  assert.ok(readme.includes(body.trim()), 'README.md does not show examples/session.mjs as it is');
  assert.ok(readme.indexOf('Session.connect') < readme.indexOf('new Client('), 'the session API does not come first');
  const { mutex } = await startLcd(t);
  const { stdout } = await run(process.execPath, [here('../examples/session.mjs'), mutex], { timeout: 20_000 });
  assert.match(stdout, /wrote "report of the day" with token \d+/);
  assert.match(stdout, /withLock gave 3/);
});

test('a process holding three keys killed with SIGKILL: every key free within TTL plus lock-delay, and not before', live, async (t) => {
  const { mutex } = await startLcd(t);
  const ttl = 2000;
  const delay = 1000;
  const keys = ['a', 'b', 'c'].map((k) => `javascript/kill-${k}`);
  const child = spawn(process.execPath, [here('./holder-child.mjs'), mutex, String(ttl), String(delay), ...keys], { stdio: ['ignore', 'pipe', 'inherit'] });
  const [line] = await once(child.stdout, 'data');
  assert.match(String(line), /^ready( \d+){3}/);
  const tokens = String(line).trim().split(' ').slice(1).map(BigInt);
  child.kill('SIGKILL');
  const killed = performance.now();
  await once(child, 'exit');
  const s = await Session.connect(mutex, { name: 'javascript-kill-watcher' });
  t.after(() => s.close());
  const freeAt = {};
  while (Object.keys(freeAt).length < keys.length && performance.now() - killed < 8000) {
    for (const key of keys) {
      if (freeAt[key] !== undefined) continue;
      const lk = await s.tryAcquire(key);
      if (lk) {
        freeAt[key] = performance.now() - killed;
        assert.ok(lk.token > tokens[keys.indexOf(key)], 'a later grant has a lower token');
        await lk.release();
      }
    }
    await sleep(10);
  }
  const times = keys.map((k) => Math.round(freeAt[k]));
  t.diagnostic(`TTL ${ttl} ms + lock-delay ${delay} ms; keys free ${times.join(', ')} ms after the kill`);
  for (const [i, ms] of times.entries()) {
    assert.ok(ms >= ttl + delay - 100, `${keys[i]} free ${ms} ms after the kill, before the TTL and the lock-delay`);
    assert.ok(ms <= ttl + delay + 1500, `${keys[i]} free only ${ms} ms after the kill`);
  }
});

test('tokens above 2^53 round-trip exactly, and the handle is a bigint', live, async (t) => {
  const { mutex } = await startLcd(t);
  const s = await Session.connect(mutex);
  t.after(() => s.close());
  const lk = await s.acquire('javascript/big');
  // lcd numbers tokens from its clock in nanoseconds: far above 2^53.
  assert.equal(typeof lk.token, 'bigint');
  assert.ok(lk.token > 2n ** 53n, String(lk.token));
  const info = await s.describe('javascript/big');
  assert.equal(info.holders[0].token, lk.token);
  assert.equal(info.holders[0].session, s.id);
  // The server matches the token exactly: one off is stale, the token itself releases.
  await assert.rejects(s.release('javascript/big', lk.token + 1n), lc.StaleTokenError);
  await assert.rejects(s.release('javascript/big', lk.token - 1n), lc.StaleTokenError);
  await s.release('javascript/big', lk.token);
  assert.equal(lk.state, 'released');
  assert.equal((await s.describe('javascript/big')).holders.length, 0);
});

test('CommonJS require gives a working client', live, async (t) => {
  const { mutex } = await startLcd(t);
  const script = `
    const { Session, SessionError } = require(${JSON.stringify(here('../src/index.cjs'))});
    (async () => {
      const s = await Session.connect(${JSON.stringify(mutex)});
      const lk = await s.acquire('javascript/cjs');
      await lk.release();
      await s.close();
      console.log(typeof lk.token, SessionError.name);
    })();`;
  const { stdout } = await run(process.execPath, ['-e', script], { timeout: 20_000 });
  assert.equal(stdout.trim(), 'bigint SessionError');
});

/** A CA, a server certificate for localhost and a client certificate, made with openssl; null without it. */
async function certificates() {
  const dir = mkdtempSync(join(tmpdir(), 'lc-js-tls-'));
  process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
  const ossl = (...args) => run('openssl', args, { cwd: dir });
  try {
    const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
    await ossl('req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.crt', '-days', '2', '-subj', '/CN=lc-js-ca');
    for (const [name, cn, eku] of [['server', 'localhost', 'serverAuth'], ['client', 'javascript-client', 'clientAuth']]) {
      await ossl('req', ...ec, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${cn}`);
      writeFileSync(join(dir, `${name}.ext`), `subjectAltName=DNS:${cn}\nextendedKeyUsage=${eku}\n`);
      await ossl('x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-out', `${name}.crt`, '-days', '2', '-extfile', `${name}.ext`);
    }
  } catch (err) {
    return err.code === 'ENOENT' ? null : Promise.reject(err);
  }
  return (name) => join(dir, name);
}

test('TLS with a client certificate and tokens: unauthenticated, forbidden and rate limited are their own errors', live, async (t) => {
  const file = await certificates();
  if (!file) return t.skip('no openssl');
  const token = 'javascript-token-0123456789abcdef';
  const burstToken = 'javascript-burst-0123456789abcdef';
  writeFileSync(file('tokens'), `javascript client ${token} javascript/\nburst client ${burstToken}\n`);
  const { mutex } = await startLcd(t, {
    TLS_CERT_FILE: file('server.crt'),
    TLS_KEY_FILE: file('server.key'),
    TLS_CLIENT_CA_FILE: file('ca.crt'),
    AUTH_TOKENS_FILE: file('tokens'),
    RATE_PER_SOURCE: '5',
    RATE_BURST: '5',
  });
  // The environment helper, as lc-cli's variables give it.
  const fromEnv = lc.optionsFromEnv({ LC_TOKEN: token, LC_CA_FILE: file('ca.crt'), LC_CERT_FILE: file('client.crt'), LC_KEY_FILE: file('client.key') });
  const tls = { ...fromEnv.tls, servername: 'localhost' };
  const s = await Session.connect(mutex, { token: fromEnv.token, tls });
  t.after(() => s.close());
  const lk = await s.acquire('javascript/tls', { note: 'over TLS' });
  assert.equal((await s.describe('javascript/tls')).holders[0].note, 'over TLS');
  await lk.release();

  const forbidden = await s.acquire('other/tls').catch((e) => e);
  assert.ok(forbidden instanceof lc.ForbiddenError, String(forbidden));
  assert.equal(forbidden.serverCode, 'forbidden');
  assert.ok(forbidden.serverMessage.length > 0);

  const wrong = await Session.connect(mutex, { token: `${token}-not`, tls }).catch((e) => e);
  assert.ok(wrong instanceof lc.UnauthenticatedError, String(wrong));
  const none = await Session.connect(mutex, { tls }).catch((e) => e);
  assert.ok(none instanceof lc.UnauthenticatedError, String(none));
  const noCert = await Session.connect(mutex, { token, tls: { ca: tls.ca, servername: 'localhost' } }).catch((e) => e);
  assert.ok(noCert instanceof lc.ConnectionError || noCert instanceof lc.TimeoutError, `without a client certificate: ${noCert}`);
  const plain = await Session.connect(mutex, { token, requestTimeoutMs: 1000 }).catch((e) => e);
  assert.ok(plain instanceof lc.SessionError, `without TLS: ${plain}`);

  // Another principal, with a rate of 5 a second: a burst of tries goes over it.
  const b = await Session.connect(mutex, { token: burstToken, tls });
  t.after(() => b.close());
  const results = await Promise.all(Array.from({ length: 20 }, (_, i) => b.tryAcquire(`burst/${i}`).catch((e) => e)));
  const limited = results.filter((r) => r instanceof lc.RateLimitedError);
  assert.ok(limited.length > 0, `no rate limit in ${results.map(String)}`);
  assert.equal(limited[0].serverCode, 'rate_limited');
  assert.ok(results.every((r) => r === null || r instanceof lc.Lock || r instanceof lc.RateLimitedError), results.map(String).join());
});

test('renew starts the lease again; a lock given a lease by renew is lost at its end', live, async (t) => {
  const { mutex } = await startLcd(t);
  const s = await Session.connect(mutex);
  t.after(() => s.close());
  const lk = await s.acquire('javascript/renew', { leaseMs: 500 });
  await sleep(300);
  await lk.renew();
  assert.ok(lk.leaseRemainingMs > 400, String(lk.leaseRemainingMs));
  await sleep(300); // 600 ms after the grant, 300 after the renew
  assert.equal(lk.held, true);
  await lk.release();
  const plain = await s.acquire('javascript/renew-plain');
  await plain.renew();
  assert.equal(plain.leaseRemainingMs, undefined);
  await plain.renew({ leaseMs: 300 });
  await once(plain.signal, 'abort');
  assert.equal(plain.cause.reason, 'lease_expired');
  const other = await Session.connect(mutex);
  t.after(() => other.close());
  assert.notEqual(await other.tryAcquire('javascript/renew-plain'), null, 'the key given up at the end of its lease is not free');
});

test('tasks sharing one session queue for one key in arrival order; a misspelt option is refused', live, async (t) => {
  const { mutex } = await startLcd(t);
  const s = await Session.connect(mutex);
  t.after(() => s.close());
  const key = 'javascript/shared-session';
  const first = await s.acquire(key);
  const order = [];
  const tasks = [];
  for (let i = 0; i < 30; i++) {
    tasks.push(s.withLock(key, async () => { order.push(i); }));
    // Each one parks before the next is sent: the order is the queue's.
    for (let n = 0; (await s.describe(key)).queue !== i + 1; n++) {
      assert.ok(n < 1000, `task ${i} did not park`);
      await sleep(2);
    }
  }
  await first.release();
  await Promise.all(tasks);
  assert.deepEqual(order, [...Array(30).keys()]);
  const re = await s.acquire(key, { reentrant: true });
  const again = await s.acquire(key, { reentrant: true });
  assert.equal(again.token, re.token, 'a reentrant acquire without an owner counts up');
  await again.release();
  await re.release();
  await assert.rejects(s.acquire(key, { leaseMS: 100 }), TypeError);
  await assert.rejects(s.acquire(key, { leaseMs: Number.NaN }), RangeError);
});

/**
 * A relay to target for one test: freeze() stops the bytes of every
 * connection it relays, both ways, leaving them open, and refuses new ones
 * until thaw(). closed resolves with the frames the client sent on each
 * connection that ended, in order of ending.
 */
async function relay(t, target) {
  const cut = target.lastIndexOf(':');
  const host = target.slice(0, cut);
  const port = Number(target.slice(cut + 1));
  const pairs = [];
  let refuse = false;
  const ended = [];
  const server = net.createServer((client) => {
    if (refuse) {
      client.destroy();
      return;
    }
    const up = net.connect({ host, port });
    const pair = { frozen: false, sent: [], socks: [client, up] };
    pairs.push(pair);
    const reader = new lc.frames.FrameReader();
    let preface = 4;
    client.on('data', (b) => {
      if (pair.frozen) return;
      const skip = Math.min(preface, b.length);
      preface -= skip;
      reader.push(b.subarray(skip));
      for (let f; (f = reader.next()) !== null; ) pair.sent.push(f);
      up.write(b);
    });
    up.on('data', (b) => {
      if (!pair.frozen) client.write(b);
    });
    const end = () => {
      if (pair.ended) return;
      pair.ended = true;
      ended.push(pair.sent);
      client.destroy();
      up.destroy();
    };
    for (const sock of [client, up]) {
      sock.on('error', end);
      sock.on('close', end);
    }
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(() => {
    for (const p of pairs) for (const sock of p.socks) sock.destroy();
    server.close();
  });
  return {
    address: `127.0.0.1:${server.address().port}`,
    ended,
    freeze() {
      refuse = true;
      for (const p of pairs) p.frozen = true;
    },
    thaw() {
      refuse = false;
    },
  };
}

test('a session counted expired while the server keeps it says farewell: a key acquired with a lock-delay keeps it, one without is free, one whose lease ended here keeps its own', live, async (t) => {
  const { mutex } = await startLcd(t);
  const r = await relay(t, mutex);
  const s = await Session.connect(r.address, { ttlMs: 3000 });
  const delayed = await s.acquire('javascript/farewell-delayed', { lockDelayMs: 20_000 });
  const plain = await s.acquire('javascript/farewell-plain');
  // Its lease ends on the client a margin before the session is counted
  // expired, and on the server only after (the session's margin is the
  // longer): its RELEASE with lapse is lost in the relay, and only the
  // farewell can give the key its lock-delay before the CLOSE frees it.
  const leased = await s.acquire('javascript/farewell-leased', { leaseMs: 2800, lockDelayMs: 20_000 });
  const id = s.id;
  r.freeze();
  // The server hears nothing more of the session and keeps it for its
  // TTL; the client counts it expired a margin before, and its farewell
  // goes through the relay from then on.
  s.signal.addEventListener('abort', () => r.thaw());
  await once(leased.signal, 'abort');
  assert.equal(leased.signal.reason.reason, 'lease_expired');
  await once(s.signal, 'abort');
  assert.ok(s.signal.reason instanceof lc.SessionExpiredError, String(s.signal.reason));
  let farewell;
  for (let n = 0; !(farewell = r.ended.find((sent) => sent.at(-1)?.type === lc.frames.Type.CLOSE)); n++) {
    assert.ok(n < 500, 'no farewell ended');
    await sleep(10);
  }
  const other = await Session.connect(mutex);
  t.after(() => other.close());
  assert.equal(await other.tryAcquire('javascript/farewell-delayed'), null, 'a key in its lock-delay is free after the farewell');
  assert.equal(await other.tryAcquire('javascript/farewell-leased'), null, 'a key whose lease ended on the client is free after the farewell');
  assert.notEqual(await other.tryAcquire('javascript/farewell-plain'), null, 'a key without a lock-delay is not free after the farewell');
  await other.close(); // before the server stops (the hooks stop it first)
  const { Type, Tag } = lc.frames;
  assert.deepEqual(farewell.map((f) => f.type), [Type.RESUME, Type.RELEASE, Type.RELEASE, Type.RELEASE, Type.CLOSE]);
  assert.equal(farewell[0].big(Tag.SESSION), id);
  assert.deepEqual(farewell.map((f) => f.id - farewell[0].id), [0n, 1n, 2n, 3n, 4n]);
  assert.deepEqual(
    farewell.slice(1, 4).map((f) => [f.big(Tag.TOKEN), f.num(Tag.LAPSE)]),
    [[delayed.token, 1], [plain.token, 1], [leased.token, 1]],
  );
});
