// Behaviour of the client against a stand-in server: failures and abort.

import { test } from 'node:test';
import assert from 'node:assert/strict';

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
