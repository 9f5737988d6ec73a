// Behaviour of the client against a stand-in server: failures and abort.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';

import { Client } from '../src/index.js';
import { fakeServer, deadAddress } from './fakeserver.js';

test('a refused connection is a failure, not busy', async () => {
  const c = new Client(await deadAddress());
  await assert.rejects(c.lock('k'), { code: 'ERR_CONNECTION' });
  await assert.rejects(c.tryLock('k'), { code: 'ERR_CONNECTION' });
});

test('answers map to results and errors', async () => {
  const cases = [
    ['-', (c) => c.lock('k'), { code: 'ERR_REFUSED' }],
    ['#', (c) => c.lock('k'), { code: 'ERR_PROTOCOL' }],
    ['', (c) => c.unlock('k'), { code: 'ERR_CONNECTION' }],
  ];
  for (const [answer, call, want] of cases) {
    const server = await fakeServer(Buffer.from(answer));
    try {
      await assert.rejects(call(new Client(server.address)), want, `answer ${JSON.stringify(answer)}`);
    } finally {
      await server.close();
    }
  }
  const busy = await fakeServer(Buffer.from('#'));
  try {
    assert.equal(await new Client(busy.address).tryLock('k'), false);
  } finally {
    await busy.close();
  }
});

test('aborting a parked lock closes its connection', async () => {
  const server = await fakeServer(null);
  try {
    const ac = new AbortController();
    const pending = new Client(server.address).lock('k', { signal: ac.signal });
    await server.received;
    ac.abort();
    await assert.rejects(pending, { name: 'AbortError' });
    await server.peerClosed;
  } finally {
    await server.close();
  }
});

test('an aborted signal sends nothing', async () => {
  const server = await fakeServer(Buffer.from('+'));
  try {
    await assert.rejects(new Client(server.address).lock('k', { signal: AbortSignal.abort() }), { name: 'AbortError' });
    assert.equal(server.requests.length, 0);
  } finally {
    await server.close();
  }
});

test('withLock unlocks when the function throws', async () => {
  const server = await fakeServer(Buffer.from('+'));
  try {
    const c = new Client(server.address, { source: 's' });
    await assert.rejects(c.withLock(Uint8Array.of(0x6b, 0), () => { throw new Error('boom'); }), /boom/);
    assert.deepEqual(server.requests.map((r) => r.toString('hex')), ['01026b000173', '02026b00']);
  } finally {
    await server.close();
  }
});

test('bad arguments', async () => {
  for (const a of ['localhost', 'localhost:', ':1', 'host:port', 'host:99999']) {
    assert.throws(() => new Client(a), TypeError, a);
  }
  await assert.rejects(new Client('127.0.0.1:1').lock(7), TypeError);
});

test('calls that do not wait for a key give up after the read timeout', async () => {
  const server = await fakeServer(null);
  try {
    const c = new Client(server.address, { readTimeout: 50 });
    // The signal only keeps a client without a read timeout from hanging the test.
    const signal = AbortSignal.timeout(10_000);
    const calls = {
      tryLock: () => c.tryLock('k', { signal }),
      unlock: () => c.unlock('k', { signal }),
      resetByKey: () => c.resetByKey('k', { signal }),
      resetBySource: () => c.resetBySource('s', { signal }),
    };
    for (const [name, call] of Object.entries(calls)) {
      await assert.rejects(call(), (err) => {
        assert.equal(err.code, 'ERR_CONNECTION', `${name}: ${err}`);
        assert.equal(err.cause?.code, 'ETIMEDOUT', `${name}: ${err}`);
        assert.match(err.message, /no answer within 50 ms/);
        return true;
      }, name);
    }
  } finally {
    await server.close();
  }
});

test('the release of wait gives up after the read timeout', async () => {
  // The lock is granted at once; the unlock after it is never answered.
  const server = await fakeServer((action) => (action === 1 ? Buffer.from('+') : null));
  try {
    const wait = new Client(server.address, { readTimeout: 50 }).wait('k');
    const hang = sleep(10_000, 'hang', { ref: false });
    const err = await Promise.race([wait.then(() => null, (e) => e), hang]);
    assert.notEqual(err, 'hang', 'wait whose release is never answered did not end');
    assert.equal(err?.cause?.code, 'ETIMEDOUT', String(err));
    assert.match(err.message, /^unlock /);
  } finally {
    await server.close();
  }
});

test('a lock has no read timeout', async () => {
  let grant;
  const granted = new Promise((r) => (grant = r));
  const server = await fakeServer(() => granted);
  try {
    const pending = new Client(server.address, { readTimeout: 10 }).lock('k');
    let settled = false;
    pending.then(() => (settled = true), () => (settled = true));
    await server.received;
    await sleep(500); // fifty read timeouts
    assert.equal(settled, false, 'lock settled before its grant');
    grant(Buffer.from('+'));
    await pending;
  } finally {
    await server.close();
  }
});
