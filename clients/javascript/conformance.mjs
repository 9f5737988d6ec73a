// Live scenarios of clients/conformance/run.sh for the JavaScript client.
//
// Reads LC_ADDR, LC_MANAGER_ADDR, LC_DEAD_ADDR, LC_SILENT_ADDR and LC_PROBE;
// prints one line per scenario, "ok <id>" or "FAIL <id>: <reason>". Exits 1 when a scenario
// failed, 2 when the environment is incomplete.

import { execFile } from 'node:child_process';
import { promisify } from 'node:util';

import { Client, LockingCenterError } from './src/index.js';
import { runScenarios } from './scenario-runner.mjs';

const run = promisify(execFile);
const LIMIT = 60_000; // ms a scenario may take
const PREFIX = 'javascript/';
const SILENT_TIMEOUT = 1000; // ms, the read timeout of silent-server-times-out
const SILENT_BOUND = 10 * SILENT_TIMEOUT; // each call must return well within this

const env = {
  addr: process.env.LC_ADDR,
  manager: process.env.LC_MANAGER_ADDR,
  dead: process.env.LC_DEAD_ADDR,
  silent: process.env.LC_SILENT_ADDR,
  probe: process.env.LC_PROBE,
};
if (!env.addr || !env.manager || !env.dead || !env.silent || !env.probe) {
  console.error('conformance: LC_ADDR, LC_MANAGER_ADDR, LC_DEAD_ADDR, LC_SILENT_ADDR and LC_PROBE must be set');
  process.exit(2);
}

const client = (source = '') => new Client(env.addr, { source });

/** Resolves once key has exactly n parked waiters (the probe gives up after 10 s). */
async function waiters(key, n) {
  try {
    await run(env.probe, ['waiters', env.manager, key, String(n)]);
  } catch (err) {
    throw new Error(`probe waiters ${JSON.stringify(key)} ${n}: ${err.stderr?.trim() || err.message}`);
  }
}

async function expectHolder(key, want) {
  const hexKey = Buffer.from(typeof key === 'string' ? Buffer.from(key) : key).toString('hex');
  const { stdout } = await run(env.probe, ['holder', env.manager, hexKey]);
  if (stdout.trim() !== want) throw new Error(`holder of ${hexKey} is ${JSON.stringify(stdout.trim())}, want ${JSON.stringify(want)}`);
}

/** Settles to the error a promise rejects with, or null. */
const outcome = (p) => p.then(() => null, (err) => err);

function expect(cond, message) {
  if (!cond) throw new Error(message);
}

const scenarios = {
  async 'lock-unlock'() {
    const key = PREFIX + 'lock-unlock';
    const c = client('javascript-lock-unlock');
    await c.lock(key);
    await expectHolder(key, 'javascript-lock-unlock');
    await c.unlock(key);
    expect(await c.tryLock(key), 'tryLock after unlock lost');
    await c.unlock(key);
  },

  async 'trylock-busy'() {
    const key = PREFIX + 'trylock-busy';
    const a = client('javascript-a');
    await a.lock(key);
    try {
      expect((await client('javascript-b').tryLock(key)) === false, 'tryLock of a held key won');
      await expectHolder(key, 'javascript-a');
    } finally {
      await a.unlock(key);
    }
  },

  async 'fifo-three'() {
    const key = PREFIX + 'fifo-three';
    const holder = client('javascript-holder');
    await holder.lock(key);
    const turns = [];
    const waiting = [];
    try {
      for (const i of [1, 2, 3]) {
        const w = client(`javascript-w${i}`);
        waiting.push(w.withLock(key, () => turns.push(i)));
        await waiters(key, i);
      }
    } finally {
      await holder.unlock(key);
    }
    await Promise.all(waiting);
    expect(turns.join() === '1,2,3', `grant order ${turns}, want 1,2,3`);
  },

  async 'wait-holds-nothing'() {
    const key = PREFIX + 'wait-holds-nothing';
    const c = client('javascript-wait');
    await c.wait(key);
    await expectHolder(key, 'free');
    expect(await client('javascript-other').tryLock(key), 'tryLock after wait lost');
    await c.unlock(key);
  },

  async 'reset-key'() {
    const key = PREFIX + 'reset-key';
    await client('javascript-holder').lock(key);
    const waiter = client('javascript-waiter');
    const granted = outcome(waiter.lock(key));
    await waiters(key, 1);
    await client().resetByKey(key);
    const err = await granted;
    expect(err === null, `waiter after reset: ${err}`);
    await expectHolder(key, 'javascript-waiter');
    await waiter.unlock(key);
  },

  async 'reset-source-withdraws'() {
    const key = PREFIX + 'reset-source';
    const holder = client('javascript-s1');
    await holder.lock(key);
    try {
      const withdrawn = outcome(client('javascript-s2').lock(key));
      await waiters(key, 1);
      await client().resetBySource('javascript-s2');
      const err = await withdrawn;
      expect(err instanceof LockingCenterError && err.code === 'ERR_REFUSED', `withdrawn waiter: ${err}, want ERR_REFUSED`);
      await expectHolder(key, 'javascript-s1');
    } finally {
      await holder.unlock(key);
    }
  },

  async 'key-127-ok-128-refused'() {
    let long = PREFIX + 'key-127-';
    long += 'k'.repeat(127 - long.length);
    const c = client('javascript-long');
    await c.lock(long);
    await expectHolder(long, 'javascript-long');
    await c.unlock(long);
    const dead = new Client(env.dead);
    for (const key of [long + 'k', '']) {
      for (const call of ['lock', 'tryLock']) {
        const err = await outcome(dead[call](key));
        expect(err?.code === 'ERR_INVALID_KEY', `${call} of a ${key.length}-byte key: ${err}, want ERR_INVALID_KEY`);
      }
    }
  },

  async 'binary-key'() {
    const key = Buffer.concat([Buffer.from(PREFIX), Buffer.from([0x00, 0xff, 0x80, 0x61])]);
    const c = client('javascript-binary');
    await c.lock(key);
    await expectHolder(key, 'javascript-binary');
    await c.unlock(key);
    await expectHolder(key, 'free');
  },

  async 'refused-connection'() {
    const dead = new Client(env.dead);
    for (const call of ['lock', 'tryLock']) {
      const err = await outcome(dead[call](PREFIX + 'refused'));
      expect(err?.code === 'ERR_CONNECTION', `${call} at a dead address: ${err}, want ERR_CONNECTION`);
    }
  },

  async 'cancel-withdraws'() {
    const key = PREFIX + 'cancel';
    const holder = client('javascript-holder');
    await holder.lock(key);
    const b = client('javascript-b');
    let grantedB;
    try {
      const ac = new AbortController();
      const cancelled = outcome(client('javascript-a').lock(key, { signal: ac.signal }));
      await waiters(key, 1);
      ac.abort();
      const err = await cancelled;
      expect(err?.name === 'AbortError', `cancelled waiter: ${err}, want AbortError`);
      await waiters(key, 0);
      grantedB = outcome(b.lock(key));
      await waiters(key, 1);
    } finally {
      await holder.unlock(key);
    }
    const err = await grantedB;
    expect(err === null, `waiter B: ${err}`);
    await expectHolder(key, 'javascript-b');
    await b.unlock(key);
  },

  async 'silent-server-times-out'() {
    const c = new Client(env.silent, { source: 'javascript-silent', readTimeout: SILENT_TIMEOUT });
    const key = PREFIX + 'silent';
    const calls = {
      tryLock: () => c.tryLock(key),
      unlock: () => c.unlock(key),
      resetByKey: () => c.resetByKey(key),
      resetBySource: () => c.resetBySource('javascript-silent'),
    };
    for (const [name, call] of Object.entries(calls)) {
      let timer;
      const bound = new Promise((resolve) => (timer = setTimeout(resolve, SILENT_BOUND, 'bound')));
      const start = performance.now();
      const result = await Promise.race([call().then((v) => ({ value: v }), (err) => ({ err })), bound]);
      const took = performance.now() - start;
      clearTimeout(timer);
      expect(result !== 'bound', `${name} at a silent server did not return within ${SILENT_BOUND} ms`);
      expect(!('value' in result), `${name} at a silent server resolved ${result.value}${result.value === false ? ' (busy)' : ''}`);
      const { err } = result;
      expect(err?.code === 'ERR_CONNECTION' && err.cause?.code === 'ETIMEDOUT', `${name} at a silent server: ${err}, want the read timeout`);
      expect(took < SILENT_BOUND, `${name} at a silent server took ${Math.round(took)} ms, want well under ${SILENT_BOUND}`);
    }
  },
};

process.exit((await runScenarios(scenarios, { limit: LIMIT })) ? 0 : 1);
