// The session scenarios of clients/conformance/SESSIONS.md for the
// JavaScript session client, in the contract's order:
//
//   node session-conformance.mjs            every scenario
//   node session-conformance.mjs s-resume   only those named
//
// Reads the harness's environment (LC_ADDR, LC_MANAGER_ADDR, LC_PROXY_ADDR,
// ...; see SESSIONS.md), prints "ok <id>" or "FAIL <id>: <reason>" per
// scenario, chatter on standard error. Exits 1 when a scenario failed.

import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';

import { runScenarios } from './scenario-runner.mjs';
import { Session, TimeoutError, StaleTokenError, UnauthenticatedError, ForbiddenError, LockLostError } from './src/index.js';

const run = promisify(execFile);
const env = process.env;
const PREFIX = 'javascript/';
const LIMIT = 25_000; // ms a scenario may take
const log = (...a) => console.error('#', ...a);

function need(...names) {
  const missing = names.filter((n) => !env[n]);
  if (missing.length) throw new Error(`${missing.join(', ')} not set`);
}

function expect(cond, message) {
  if (!cond) throw new Error(message);
}

/** Sessions opened by a scenario, closed at its end whatever happens. */
const opened = [];
async function session(addr, options = {}) {
  const s = await Session.connect(addr, { name: 'javascript-conformance', ...options });
  opened.push(s);
  return s;
}

async function probe(...args) {
  try {
    const { stdout } = await run(env.LC_PROBE, args, { timeout: 15_000 });
    return stdout;
  } catch (err) {
    throw new Error(`probe ${args.join(' ')}: ${err.stderr?.trim() || err.message}`);
  }
}

const waiters = (manager, key, n) => probe('waiters', manager, key, String(n));

/** The holders of key as "probe holders" prints them: [{ token, session, note }]. */
async function holders(manager, key) {
  const out = await probe('holders', manager, key);
  return out
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => {
      const [token, sess, ...note] = l.split(' ');
      return { token: BigInt(token), session: BigInt(sess), note: note.join(' ') };
    });
}

/** Settles to the error a promise rejects with, or null. */
const outcome = (p) => p.then(() => null, (err) => err);

/** Resolves once cond() is true, polling; rejects after ms. */
async function until(cond, ms, what) {
  const end = performance.now() + ms;
  while (!(await cond())) {
    if (performance.now() > end) throw new Error(`${what} not within ${ms} ms`);
    await sleep(20);
  }
}

const scenarios = {
  async 's-acquire-release'() {
    need('LC_ADDR');
    const key = PREFIX + 's-acquire-release';
    const s = await session(env.LC_ADDR);
    const a = await s.acquire(key);
    await a.release();
    const b = await s.acquire(key);
    expect(b.token > a.token, `second token ${b.token} not above the first ${a.token}`);
    await a.release(); // again: no error
    await b.release();
    await b.release();
  },

  async 's-try-busy'() {
    need('LC_ADDR');
    const key = PREFIX + 's-try-busy';
    const holder = await session(env.LC_ADDR);
    const other = await session(env.LC_ADDR);
    const lk = await holder.acquire(key);
    const got = await other.tryAcquire(key);
    expect(got === null, `try of a held key gave ${got}, want null`);
    await lk.release();
    const now = await other.tryAcquire(key);
    expect(now !== null, 'try of a free key gave null');
    await now.release();
  },

  async 's-wait-bound'() {
    need('LC_ADDR', 'LC_MANAGER_ADDR', 'LC_PROBE');
    const key = PREFIX + 's-wait-bound';
    const holder = await session(env.LC_ADDR);
    const other = await session(env.LC_ADDR);
    const lk = await holder.acquire(key);
    const start = performance.now();
    const err = await outcome(other.acquire(key, { waitMs: 500 }));
    const took = performance.now() - start;
    expect(err instanceof TimeoutError && err.serverCode === 'timeout', `wait of 500 ms: ${err}, want TimeoutError (timeout)`);
    expect(took >= 450 && took < 3000, `the wait ended after ${Math.round(took)} ms`);
    await waiters(env.LC_MANAGER_ADDR, key, 0);
    await lk.release();
  },

  async 's-cancel'() {
    need('LC_ADDR', 'LC_MANAGER_ADDR', 'LC_PROBE');
    const key = PREFIX + 's-cancel';
    const holder = await session(env.LC_ADDR);
    const a = await session(env.LC_ADDR);
    const b = await session(env.LC_ADDR);
    const lk = await holder.acquire(key);
    const ac = new AbortController();
    const cancelled = outcome(a.acquire(key, { signal: ac.signal }));
    await waiters(env.LC_MANAGER_ADDR, key, 1);
    const why = new Error('given up');
    ac.abort(why);
    const start = performance.now();
    expect((await cancelled) === why, 'the abandoned acquire did not reject with the signal\'s reason');
    await waiters(env.LC_MANAGER_ADDR, key, 0);
    const took = performance.now() - start;
    expect(took < 1000, `the queue emptied ${Math.round(took)} ms after the abort, want under 1000`);
    const next = b.acquire(key);
    await waiters(env.LC_MANAGER_ADDR, key, 1);
    await lk.release();
    const got = await next;
    expect(got.token > lk.token, 'the next waiter got no later token');
    await got.release();
  },

  async 's-stale-release'() {
    need('LC_ADDR', 'LC_MANAGER_ADDR', 'LC_PROBE');
    const key = PREFIX + 's-stale-release';
    const holder = await session(env.LC_ADDR);
    const other = await session(env.LC_ADDR);
    const lk = await holder.acquire(key);
    const err = await outcome(other.release(key, lk.token));
    expect(err instanceof StaleTokenError && err.serverCode === 'stale_token', `release of another session's token: ${err}, want StaleTokenError`);
    const err2 = await outcome(holder.release(key, lk.token + 1n));
    expect(err2 instanceof StaleTokenError, `release of a token never granted: ${err2}, want StaleTokenError`);
    const h = await holders(env.LC_MANAGER_ADDR, key);
    expect(h.length === 1 && h[0].token === lk.token, `holders after the stale releases: ${JSON.stringify(h.map((x) => String(x.token)))}, want ${lk.token}`);
    expect(lk.held, 'the holder no longer counts its lock held');
    await lk.release();
  },

  async 's-lease-expiry'() {
    need('LC_ADDR');
    const key = PREFIX + 's-lease-expiry';
    const s = await session(env.LC_ADDR);
    const other = await session(env.LC_ADDR);
    const start = performance.now();
    const lk = await s.acquire(key, { leaseMs: 500, lockDelayMs: 2000 });
    const lost = once(lk.signal, 'abort');
    const t = setTimeout(() => {}, 2000);
    await Promise.race([lost, sleep(2000)]);
    clearTimeout(t);
    const took = performance.now() - start;
    expect(lk.signal.aborted, 'the lock was not reported lost within 2 s');
    const reason = lk.signal.reason;
    expect(reason instanceof LockLostError && reason.reason === 'lease_expired', `lost with ${reason}, want lease_expired`);
    log(`s-lease-expiry: lost after ${Math.round(took)} ms`);
    // What the session sends after the loss comes after its release (with
    // lapse) of the lock: the key is in its lock-delay of 2 s.
    await s.describe(key);
    const early = await other.tryAcquire(key);
    if (early) await early.release();
    expect(early === null, 'a try right after the loss was granted: the lock-delay was skipped');
    const got = await other.acquire(key, { signal: AbortSignal.timeout(Math.round(Math.max(100, 5000 - (performance.now() - start - took)))) });
    await got.release();
    expect((await outcome(lk.release()))?.reason === 'lease_expired', 'release of the lost lock did not reject with its loss');
  },

  async 's-kill-client'() {
    need('LC_ADDR');
    const keys = [1, 2, 3].map((i) => `${PREFIX}s-kill-client-${i}`);
    const child = spawn(process.execPath, [new URL('./test/holder-child.mjs', import.meta.url).pathname, env.LC_ADDR, '2000', '1000', ...keys], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    const [line] = await Promise.race([once(child.stdout, 'data'), sleep(10_000).then(() => ['timeout'])]);
    expect(String(line).startsWith('ready'), `the child said ${String(line).trim()}`);
    child.kill('SIGKILL');
    const killed = performance.now();
    await once(child, 'exit');
    const s = await session(env.LC_ADDR);
    const freeAt = new Map();
    let heldAt1s = true;
    while (freeAt.size < keys.length && performance.now() - killed < 5000) {
      for (const key of keys) {
        if (freeAt.has(key)) continue;
        const got = await s.tryAcquire(key);
        if (got) {
          freeAt.set(key, performance.now() - killed);
          await got.release();
        }
      }
      if (performance.now() - killed < 1000 && freeAt.size > 0) heldAt1s = false;
      await sleep(25);
    }
    log(`s-kill-client: free after ${[...freeAt.values()].map((t) => `${Math.round(t)} ms`).join(', ')} (TTL 2000 ms + lock-delay 1000 ms)`);
    expect(heldAt1s, 'a key was free within 1 s of the kill');
    expect(freeAt.size === keys.length, `only ${freeAt.size} of ${keys.length} keys free 5 s after the kill`);
  },

  async 's-resume'() {
    need('LC_PROXY_ADDR', 'LC_PROXY_CTL', 'LC_ADDR', 'LC_MANAGER_ADDR', 'LC_PROBE');
    const keyA = PREFIX + 's-resume-a';
    const keyB = PREFIX + 's-resume-b';
    const s = await session(env.LC_PROXY_ADDR, { ttlMs: 5000 });
    const other = await session(env.LC_ADDR);
    const a = await s.acquire(keyA);
    const b = await other.acquire(keyB);
    const parked = s.acquire(keyB);
    await waiters(env.LC_MANAGER_ADDR, keyB, 1);
    let suspended = 0;
    let resumed = 0;
    s.addEventListener('suspended', () => suspended++);
    s.addEventListener('resumed', () => resumed++);
    await probe('cut', env.LC_PROXY_CTL);
    await b.release();
    const got = await Promise.race([parked, sleep(5000).then(() => null)]);
    expect(got !== null, 'the parked acquire was not granted within 5 s of the cut');
    expect(suspended >= 1 && resumed >= 1, `suspended ${suspended}, resumed ${resumed} times: the connection was not cut and resumed`);
    expect(a.held, `the lock of A was lost: ${a.cause}`);
    const h = await holders(env.LC_MANAGER_ADDR, keyA);
    expect(h.length === 1 && h[0].token === a.token && h[0].session === s.id, `holders of A: ${h.map((x) => `${x.token}/${x.session}`)}, want ${a.token}/${s.id}`);
    await got.release();
    await a.release();
  },

  async 's-leader-stop'() {
    need('LC_CLUSTER', 'LC_CLUSTER_MANAGER', 'LC_PROBE');
    const key = PREFIX + 's-leader-stop';
    const s = await session(env.LC_CLUSTER, { ttlMs: 3000 });
    const lk = await s.acquire(key);
    const stopped = Number((await probe('signal-leader', 'STOP')).trim());
    log(`s-leader-stop: stopped node ${stopped}`);
    try {
      await sleep(6000);
    } finally {
      await probe('signal-leader', 'CONT');
    }
    expect(s.state !== 'ended', `the session ended: ${s.signal.reason}`);
    expect(lk.held, `the lock was lost: ${lk.cause}`);
    const managers = env.LC_CLUSTER_MANAGER.split(',');
    const leader = Number((await probe('leader', env.LC_CLUSTER_MANAGER)).trim());
    const h = await holders(managers[leader], key);
    expect(h.length === 1 && h[0].token === lk.token, `holders: ${h.map((x) => x.token)}, want ${lk.token}`);
    await lk.release();
  },

  async 's-leader-kill'() {
    need('LC_CLUSTER', 'LC_CLUSTER_MANAGER', 'LC_PROBE');
    const managers = env.LC_CLUSTER_MANAGER.split(',');
    const key = PREFIX + 's-leader-kill';
    const key2 = PREFIX + 's-leader-kill-2';
    const s = await session(env.LC_CLUSTER);
    const other = await session(env.LC_CLUSTER);
    const lk = await s.acquire(key);
    const held = await other.acquire(key2);
    const parked = s.acquire(key2);
    const leader = Number((await probe('leader', env.LC_CLUSTER_MANAGER)).trim());
    await waiters(managers[leader], key2, 1);
    const killed = Number((await probe('signal-leader', 'KILL')).trim());
    log(`s-leader-kill: killed node ${killed}`);
    const start = performance.now();
    await held.release(); // once the other session is at the new leader
    const got = await Promise.race([parked, sleep(15_000).then(() => null)]);
    expect(got !== null, 'the parked acquire was not granted within 15 s of the kill');
    log(`s-leader-kill: the parked acquire granted ${Math.round(performance.now() - start)} ms after the kill`);
    expect(lk.held, `the held lock was lost: ${lk.cause}`);
    const live = managers.filter((_, i) => i !== killed).join(',');
    const now = Number((await probe('leader', live)).trim());
    const h = await holders(live.split(',')[now], key);
    expect(h.length === 1 && h[0].token === lk.token, `holders at the new leader: ${h.map((x) => x.token)}, want ${lk.token}`);
    await got.release();
    await lk.release();
  },

  async 's-tls-token'() {
    need('LC_TLS_ADDR', 'LC_CA_FILE', 'LC_TOKEN');
    const tls = { ca: readFileSync(env.LC_CA_FILE), servername: 'localhost' };
    const s = await session(env.LC_TLS_ADDR, { token: env.LC_TOKEN, tls });
    const lk = await s.acquire(PREFIX + 's-tls-token');
    await lk.release();
    const wrong = await outcome(session(env.LC_TLS_ADDR, { token: `${env.LC_TOKEN}-wrong`, tls }));
    expect(wrong instanceof UnauthenticatedError, `a wrong token: ${wrong}, want UnauthenticatedError`);
    const outside = await outcome(s.acquire('outside/s-tls-token'));
    expect(outside instanceof ForbiddenError, `a key outside javascript/: ${outside}, want ForbiddenError`);
  },

  async 's-modes'() {
    need('LC_ADDR', 'LC_MANAGER_ADDR', 'LC_PROBE');
    const s1 = await session(env.LC_ADDR);
    const s2 = await session(env.LC_ADDR);
    const s3 = await session(env.LC_ADDR);
    // Shared: two holders at once.
    const shared = PREFIX + 's-modes-shared';
    const r1 = await s1.acquire(shared, { shared: true });
    const r2 = await s2.tryAcquire(shared, { shared: true });
    expect(r2 !== null && r2.token !== r1.token, 'a second shared holder was not let in');
    expect((await s3.tryAcquire(shared)) === null, 'an exclusive try beside shared holders was not busy');
    await r1.release();
    await r2.release();
    // A semaphore of 2.
    const pool = PREFIX + 's-modes-pool';
    const p1 = await s1.acquire(pool, { limit: 2 });
    const p2 = await s2.tryAcquire(pool, { limit: 2 });
    expect(p2 !== null, 'the second place of a semaphore of 2 was busy');
    expect((await s3.tryAcquire(pool, { limit: 2 })) === null, 'a third try of a semaphore of 2 was not busy');
    await p1.release();
    await p2.release();
    // Reentrant, same owner: same token, counted up.
    const re = PREFIX + 's-modes-reentrant';
    const e1 = await s1.acquire(re, { reentrant: true, owner: 'job' });
    const e2 = await s1.acquire(re, { reentrant: true, owner: 'job' });
    expect(e2.token === e1.token && e2.count === 2, `reentrant acquire: token ${e2.token} count ${e2.count}, want ${e1.token} count 2`);
    await e2.release();
    expect((await s2.tryAcquire(re)) === null, 'the key was let go after one of two releases');
    await e1.release();
    // Priority: the higher waiter first.
    const pri = PREFIX + 's-modes-priority';
    const hold = await s1.acquire(pri);
    const order = [];
    const low = s2.acquire(pri, { priority: 1 }).then((l) => (order.push('low'), l));
    await waiters(env.LC_MANAGER_ADDR, pri, 1);
    const high = s3.acquire(pri, { priority: 5 }).then((l) => (order.push('high'), l));
    await waiters(env.LC_MANAGER_ADDR, pri, 2);
    await hold.release();
    await (await high).release();
    await (await low).release();
    expect(order.join() === 'high,low', `grant order ${order}, want high,low`);
  },

  async 's-note'() {
    need('LC_ADDR', 'LC_MANAGER_ADDR', 'LC_PROBE');
    const key = PREFIX + 's-note';
    const note = 'nightly report · run 42 from javascript';
    const s = await session(env.LC_ADDR);
    const lk = await s.acquire(key, { note });
    const h = await holders(env.LC_MANAGER_ADDR, key);
    expect(h.length === 1 && h[0].token === lk.token && h[0].note === note, `holders: ${JSON.stringify(h.map((x) => [String(x.token), x.note]))}`);
    await lk.release();
  },

  async 's-big-token'() {
    need('LC_BIG_ADDR', 'LC_PROBE');
    const key = PREFIX + 's-big-token';
    const s = await session(env.LC_BIG_ADDR);
    const lk = await s.acquire(key);
    expect(typeof lk.token === 'bigint' && lk.token > 2n ** 63n, `token ${lk.token}, want above 2^63`);
    // Against the big-token lcd's management port (LC_BIG_MANAGER) when the harness
    // gives one, else against the server's own DESCRIBE.
    if (env.LC_BIG_MANAGER) {
      const h = await holders(env.LC_BIG_MANAGER, key);
      expect(h.length === 1 && h[0].token === lk.token, `probe holders printed ${h.map((x) => x.token)}, want ${lk.token}`);
    } else {
      log('s-big-token: no LC_BIG_MANAGER; the token is checked against DESCRIBE');
      const info = await s.describe(key);
      expect(info.holders.length === 1 && info.holders[0].token === lk.token, `DESCRIBE gave ${info.holders.map((x) => x.token)}, want ${lk.token}`);
    }
    expect(String(lk.token) === lk.token.toString(10) && BigInt(String(lk.token)) === lk.token, 'the token does not round-trip through text');
    await lk.release();
  },

  async 's-silent-server'() {
    need('LC_SILENT_ADDR');
    const start = performance.now();
    const err = await Promise.race([outcome(Session.connect(env.LC_SILENT_ADDR, { name: 'javascript-silent' })), sleep(12_000).then(() => 'hang')]);
    const took = performance.now() - start;
    expect(err !== 'hang', 'connect to a silent server did not return within 12 s');
    expect(err instanceof TimeoutError, `connect to a silent server: ${err}, want TimeoutError`);
    expect(took < 10_000, `connect to a silent server failed after ${Math.round(took)} ms, want under 10 s`);
    log(`s-silent-server: TimeoutError after ${Math.round(took)} ms`);
  },

  async 's-fifo-mixed'() {
    need('LC_ADDR', 'LC_MANAGER_ADDR', 'LC_PROBE');
    const key = PREFIX + 's-fifo-mixed';
    const holder = await session(env.LC_ADDR);
    const lk = await holder.acquire(key);
    const order = [];
    const done = [];
    const children = [];
    try {
      for (let i = 1; i <= 5; i++) {
        if (i % 2 === 1) {
          const s = await session(env.LC_ADDR);
          done.push(
            s.acquire(key).then(async (l) => {
              order.push(i);
              await sleep(20);
              await l.release();
            }),
          );
        } else {
          const child = spawn(env.LC_PROBE, ['session-lock', env.LC_ADDR, key], { stdio: ['pipe', 'pipe', 'inherit'] });
          children.push(child);
          done.push(
            new Promise((resolve, reject) => {
              let out = '';
              child.stdout.on('data', (d) => {
                out += d;
                if (out.includes('granted ')) {
                  order.push(i);
                  child.stdin.end();
                }
              });
              child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`probe session-lock exited ${code}`))));
            }),
          );
        }
        await waiters(env.LC_MANAGER_ADDR, key, i);
      }
      await lk.release();
      await Promise.race([Promise.all(done), sleep(15_000).then(() => Promise.reject(new Error(`granted so far: ${order}`)))]);
    } finally {
      for (const c of children) c.kill();
    }
    expect(order.join() === '1,2,3,4,5', `grant order ${order}, want 1,2,3,4,5`);
  },
};

const only = process.argv.slice(2);
for (const id of only) {
  if (!(id in scenarios)) {
    console.error(`unknown scenario ${id}; known: ${Object.keys(scenarios).join(' ')}`);
    process.exit(2);
  }
}
let started = performance.now();
const passed = await runScenarios(scenarios, {
  limit: LIMIT,
  only,
  async after(id) {
    await Promise.allSettled(opened.splice(0).map((s) => Promise.race([s.close(), sleep(2000)])));
    log(`${id}: ${Math.round(performance.now() - started)} ms`);
    started = performance.now();
  },
});
process.exit(passed ? 0 : 1);
