// The session client against a stand-in server: what each answer becomes
// for the caller, and what the client sends when it gives up, loses a
// connection or is sent to another node.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';

import * as lc from '../src/index.js';
import { fakeSessionServer, sessionScript, fields, Tag, Type, Code } from './fakesession.js';
import { deadAddress } from './fakeserver.js';

const { Session } = lc;

/** Waits until cond() holds, at most ms. */
async function until(cond, ms = 5000) {
  const end = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > end) throw new Error('condition not met in time');
    await sleep(5);
  }
}

const framesOf = (server, type) => server.frames.filter((x) => x.frame.type === type).map((x) => x.frame);

test('the HELLO carries the name, TTL and token; the WELCOME gives id, TTL, keepalive and server', async () => {
  const server = await fakeSessionServer(sessionScript(() => {}, { SESSION: 2n ** 64n - 1n, TTL_MS: 4000, KEEPALIVE_MS: 1000, SERVER: 'fake 1' }));
  try {
    const s = await Session.connect(server.address, { name: 'job-1', ttlMs: 4000, token: 'secret-token' });
    const [hello] = framesOf(server, Type.HELLO);
    assert.equal(hello.id, 1n);
    assert.equal(hello.text(Tag.NAME), 'job-1');
    assert.equal(hello.num(Tag.TTL_MS), 4000);
    assert.equal(hello.text(Tag.CREDENTIAL), 'secret-token');
    assert.equal(s.id, 2n ** 64n - 1n);
    assert.equal(s.ttlMs, 4000);
    assert.equal(s.keepaliveMs, 1000);
    assert.equal(s.server, 'fake 1');
    assert.equal(s.state, 'connected');
    s.close().catch(() => {});
  } finally {
    await server.close();
  }
});

test('a token of 2^64 - 1 is the handle\'s, exactly, and goes back in the RELEASE', async () => {
  const token = 2n ** 64n - 1n;
  const server = await fakeSessionServer(
    sessionScript((f, conn) => {
      if (f.type === Type.ACQUIRE) conn.send(Type.GRANTED, f.id, { KEY: f.get(Tag.KEY), TOKEN: token, COUNT: 1 });
      if (f.type === Type.RELEASE) conn.send(Type.OK, f.id);
      if (f.type === Type.CLOSE) conn.send(Type.OK, f.id);
    }),
  );
  try {
    // What `await using` does (Node 20 parses no such statement; TypeScript compiles it to this).
    const s = await Session.connect(server.address);
    const lk = await s.acquire('k');
    assert.equal(typeof lk.token, 'bigint');
    assert.equal(lk.token, token);
    await lk[Symbol.asyncDispose]();
    await s[Symbol.asyncDispose]();
    assert.equal(s.state, 'ended');
    const [release] = framesOf(server, Type.RELEASE);
    assert.equal(release.get(Tag.TOKEN).toString('hex'), 'ffffffffffffffff');
    assert.equal(release.text(Tag.KEY), 'k');
  } finally {
    await server.close();
  }
});

test('every acquire option goes out as docs/protocol.md lays it out', async () => {
  const server = await fakeSessionServer(sessionScript((f, conn) => conn.send(Type.REFUSED, f.id, { CODE: Code.busy, MESSAGE: 'held' })));
  try {
    const s = await Session.connect(server.address);
    const got = await s.acquire(Uint8Array.of(0, 0xff), {
      waitMs: 0, leaseMs: 30000, lockDelayMs: 2000, shared: true, priority: -2, reentrant: true, owner: 'worker-3', note: 'deploy · 42',
    });
    assert.equal(got, null);
    const [a] = framesOf(server, Type.ACQUIRE);
    assert.equal(a.get(Tag.KEY).toString('hex'), '00ff');
    assert.equal(a.num(Tag.WAIT_MS), 0);
    assert.equal(a.num(Tag.LEASE_MS), 30000);
    assert.equal(a.num(Tag.DELAY_MS), 2000);
    assert.equal(a.num(Tag.MODE), 1);
    assert.equal(a.get(Tag.PRIORITY).toString('hex'), 'fffffffe');
    assert.equal(a.num(Tag.REENTRANT), 1);
    assert.equal(a.text(Tag.OWNER), 'worker-3');
    assert.equal(a.text(Tag.NOTE), 'deploy · 42');
    await s.acquire('pool', { limit: 4, waitMs: 0 });
    assert.equal(framesOf(server, Type.ACQUIRE)[1].num(Tag.LIMIT), 4);
    // Refused before anything is sent.
    await assert.rejects(s.acquire(''), { code: 'ERR_INVALID_KEY' });
    await assert.rejects(s.acquire('k'.repeat(128)), { code: 'ERR_INVALID_KEY' });
    await assert.rejects(s.acquire('k', { owner: 'o'.repeat(128) }), { code: 'ERR_INVALID_OWNER' });
    await assert.rejects(s.acquire('k', { note: 'n'.repeat(1025) }), { code: 'ERR_INVALID_NOTE' });
    await assert.rejects(s.acquire('k', { note: Uint8Array.of(0xff) }), { code: 'ERR_INVALID_NOTE' });
    await assert.rejects(s.acquire('k', { note: '\ud800' }), { code: 'ERR_INVALID_NOTE' });
    await assert.rejects(s.acquire('k', { lockDelayMs: 60001 }), RangeError);
    await assert.rejects(s.acquire('k', { shared: true, limit: 2 }), RangeError);
    await assert.rejects(s.acquire('k', { priority: 2 ** 31 }), RangeError);
    assert.equal(framesOf(server, Type.ACQUIRE).length, 2);
    s.close().catch(() => {});
  } finally {
    await server.close();
  }
});

test('each refusal is its own error, with the server\'s code and words; busy is null', async () => {
  const cases = [
    ['timeout', lc.TimeoutError],
    ['cancelled', lc.CancelledError],
    ['reset', lc.ResetError],
    ['deadlock', lc.DeadlockError],
    ['limit_mismatch', lc.LimitMismatchError],
    ['upgrade', lc.UpgradeRefusedError],
    ['forbidden', lc.ForbiddenError],
    ['rate_limited', lc.RateLimitedError],
    ['over_limit', lc.OverLimitError],
    ['session_expired', lc.SessionExpiredError],
    ['session_ended', lc.SessionClosedError],
    ['bad_request', lc.RefusedError],
    ['not_durable', lc.RefusedError],
  ];
  let answer;
  const server = await fakeSessionServer(sessionScript((f, conn) => conn.send(Type.REFUSED, f.id, { CODE: Code[answer], MESSAGE: `words of ${answer}: limit 3` })));
  try {
    const s = await Session.connect(server.address);
    for (const [code, cls] of cases) {
      answer = code;
      const err = await s.acquire('k').then(() => null, (e) => e);
      assert.ok(err instanceof cls, `${code}: ${err}`);
      assert.ok(err instanceof lc.SessionError, code);
      assert.equal(err.serverCode, code);
      assert.equal(err.serverMessage, `words of ${code}: limit 3`);
      assert.match(err.message, /acquire "k"/);
    }
    answer = 'limit_mismatch';
    assert.equal((await s.acquire('k').catch((e) => e)).limit, 3);
    answer = 'busy';
    assert.equal(await s.tryAcquire('k'), null);
    s.close().catch(() => {});
  } finally {
    await server.close();
  }
});

test('a refused session is its own error: unauthenticated, rate limited, over limit', async () => {
  const cases = [
    ['unauthenticated', lc.UnauthenticatedError],
    ['rate_limited', lc.RateLimitedError],
    ['over_limit', lc.OverLimitError],
    ['unknown_session', lc.SessionExpiredError],
  ];
  for (const [code, cls] of cases) {
    const server = await fakeSessionServer((f, conn) => conn.send(Type.GOODBYE, f.id, { CODE: Code[code], MESSAGE: 'no' }));
    try {
      const err = await Session.connect(server.address).catch((e) => e);
      assert.ok(err instanceof cls, `${code}: ${err}`);
      assert.equal(err.serverCode, code);
      assert.equal(err.serverMessage, 'no');
    } finally {
      await server.close();
    }
  }
  const v1 = await fakeSessionServer((f, conn) => conn.sock.end('-'));
  try {
    await assert.rejects(Session.connect(v1.address), lc.ProtocolError);
  } finally {
    await v1.close();
  }
  await assert.rejects(Session.connect(await deadAddress()), lc.ConnectionError);
});

test('a node that does not lead sends the session to the leader; every node refusing is NotLeaderError', async () => {
  const leader = await fakeSessionServer(sessionScript());
  const follower = await fakeSessionServer((f, conn) => conn.send(Type.GOODBYE, f.id, { CODE: Code.not_leader, MESSAGE: 'not the leader', LEADER: leader.address }));
  const lost = await fakeSessionServer((f, conn) => conn.send(Type.GOODBYE, f.id, { CODE: Code.not_leader, MESSAGE: 'no leader' }));
  try {
    const s = await Session.connect([follower.address, lost.address]);
    assert.equal(framesOf(leader, Type.HELLO).length, 1);
    assert.equal(framesOf(lost, Type.HELLO).length, 0, 'the node named as leader went first');
    s.close().catch(() => {});
    const err = await Session.connect(`${lost.address},${lost.address}`).catch((e) => e);
    assert.ok(err instanceof lc.NotLeaderError, String(err));
    const dead = await deadAddress();
    const err2 = await Session.connect([dead, lost.address]).catch((e) => e);
    assert.ok(err2 instanceof lc.NotLeaderError, String(err2));
  } finally {
    await Promise.all([leader.close(), follower.close(), lost.close()]);
  }
});

test('an abandoned acquire is cancelled on the server; a grant that crosses the cancel is released', async () => {
  let grantAfterCancel = false;
  const server = await fakeSessionServer(
    sessionScript((f, conn) => {
      if (f.type === Type.CANCEL) {
        const target = f.big(Tag.TARGET);
        if (grantAfterCancel) conn.send(Type.GRANTED, target, { KEY: 'k', TOKEN: 99n, COUNT: 1 });
        else conn.send(Type.REFUSED, target, { CODE: Code.cancelled, MESSAGE: '' });
        conn.send(Type.OK, f.id);
      }
      if (f.type === Type.RELEASE) conn.send(Type.OK, f.id);
    }),
  );
  try {
    const s = await Session.connect(server.address);
    const ac = new AbortController();
    const p = s.acquire('k', { signal: ac.signal });
    await until(() => framesOf(server, Type.ACQUIRE).length === 1);
    ac.abort();
    await assert.rejects(p, { name: 'AbortError' });
    await until(() => framesOf(server, Type.CANCEL).length === 1);
    assert.equal(framesOf(server, Type.CANCEL)[0].big(Tag.TARGET), framesOf(server, Type.ACQUIRE)[0].id);
    // A timeout signal, and a grant crossing the cancel.
    grantAfterCancel = true;
    const p2 = s.acquire('k', { signal: AbortSignal.timeout(50) });
    await assert.rejects(p2, { name: 'TimeoutError' });
    await until(() => framesOf(server, Type.RELEASE).length === 1);
    assert.equal(framesOf(server, Type.RELEASE)[0].big(Tag.TOKEN), 99n);
    // An aborted signal sends nothing.
    await assert.rejects(s.acquire('k', { signal: AbortSignal.abort() }), { name: 'AbortError' });
    assert.equal(framesOf(server, Type.ACQUIRE).length, 2);
    s.close().catch(() => {});
  } finally {
    await server.close();
  }
});

test('a lease is counted from the grant less the margin: lost as lease_expired, released by its token', async () => {
  const server = await fakeSessionServer(
    sessionScript((f, conn) => {
      if (f.type === Type.ACQUIRE) conn.send(Type.GRANTED, f.id, { KEY: f.get(Tag.KEY), TOKEN: 5n, COUNT: 1, LEFT_MS: f.num(Tag.LEASE_MS) });
      if (f.type === Type.RELEASE) conn.send(Type.REFUSED, f.id, { CODE: Code.stale_token, MESSAGE: 'gone' });
    }),
  );
  try {
    const s = await Session.connect(server.address);
    const start = performance.now();
    const lk = await s.acquire('k', { leaseMs: 400 });
    assert.ok(lk.leaseRemainingMs <= 400 - 50 && lk.leaseRemainingMs > 200, String(lk.leaseRemainingMs));
    await once(lk.signal, 'abort');
    const took = performance.now() - start;
    assert.ok(took >= 330 && took < 400, `lost after ${took} ms, want the lease less its margin of 50 ms`);
    assert.ok(lk.signal.reason instanceof lc.LockLostError);
    assert.equal(lk.signal.reason.reason, 'lease_expired');
    assert.equal(lk.signal.reason.token, 5n);
    assert.equal(lk.state, 'lost');
    await until(() => framesOf(server, Type.RELEASE).length === 1);
    assert.equal(framesOf(server, Type.RELEASE)[0].big(Tag.TOKEN), 5n);
    await assert.rejects(lk.release(), lc.LockLostError);
    s.close().catch(() => {});
  } finally {
    await server.close();
  }
});

test('a LOST ends the handle with its typed reason', async () => {
  const reasons = { lease_expired: 'lease_expired', session_expired: 'session_expired', reset: 'reset', session_ended: 'session_closed', not_durable: 'not_held' };
  let token = 0n;
  const server = await fakeSessionServer(
    sessionScript((f, conn) => {
      if (f.type === Type.ACQUIRE) conn.send(Type.GRANTED, f.id, { KEY: f.get(Tag.KEY), TOKEN: ++token, COUNT: 1 });
    }),
  );
  try {
    const s = await Session.connect(server.address);
    for (const [code, reason] of Object.entries(reasons)) {
      const lk = await s.acquire('k');
      server.conns[0].send(Type.LOST, framesOf(server, Type.ACQUIRE).at(-1).id, { KEY: 'k', TOKEN: lk.token, CODE: Code[code] });
      await once(lk.signal, 'abort');
      assert.equal(lk.cause.reason, reason, code);
      assert.equal(lk.signal.reason, lk.cause);
      assert.equal(lk.held, false);
    }
    s.close().catch(() => {});
  } finally {
    await server.close();
  }
});

test('a silent connection is dropped after the keepalive and its margin, and the session resumes with what the server never applied', async () => {
  let silent = false;
  const server = await fakeSessionServer((f, conn) => {
    if (f.type === Type.HELLO) conn.welcome(f.id, { TTL_MS: 3000, KEEPALIVE_MS: 300 });
    if (f.type === Type.RESUME) {
      conn.welcome(f.id, {
        TTL_MS: 3000,
        KEEPALIVE_MS: 300,
        APPLIED: framesOf(server, Type.ACQUIRE)[0].id, // the first acquire arrived, the second never did
        PARKED: Buffer.from(lcFields({ KEY: 'a', REQUEST: framesOf(server, Type.ACQUIRE)[0].id })),
      });
    }
    if (f.type === Type.PING && !silent) conn.send(Type.OK, f.id);
    if (f.type === Type.ACQUIRE && conn.index === 1 && f.text(Tag.KEY) === 'b') conn.send(Type.GRANTED, f.id, { KEY: 'b', TOKEN: 11n, COUNT: 1 });
  });
  try {
    const s = await Session.connect(server.address, { ttlMs: 3000 });
    await until(() => framesOf(server, Type.PING).length >= 2, 2000); // pings at the keepalive
    const a = s.acquire('a');
    await until(() => framesOf(server, Type.ACQUIRE).length === 1);
    silent = true;
    server.conns[0].sock.pause(); // it reads nothing more
    const b = s.acquire('b');
    const suspended = once(s, 'suspended');
    const start = performance.now();
    await suspended;
    const took = performance.now() - start;
    assert.ok(took < 300 + 250 + 350, `dropped after ${took} ms`);
    silent = false;
    const lb = await b;
    assert.equal(lb.token, 11n);
    const [resume] = framesOf(server, Type.RESUME);
    assert.equal(resume.big(Tag.SESSION), 7n);
    assert.equal(resume.get(Tag.SECRET).toString('hex'), 'a5'.repeat(16));
    const resent = server.frames.filter((x) => x.conn === 1 && x.frame.type === Type.ACQUIRE).map((x) => x.frame);
    assert.deepEqual(resent.map((f) => f.text(Tag.KEY)), ['b'], 'the acquire above applied went again, the one at or below did not');
    assert.equal(resent[0].id, framesOf(server, Type.ACQUIRE)[1].id, 'sent again with its own id');
    // The parked acquire is granted on the new connection later.
    server.conns[1].send(Type.GRANTED, framesOf(server, Type.ACQUIRE)[0].id, { KEY: 'a', TOKEN: 12n, COUNT: 1 });
    assert.equal((await a).token, 12n);
    s.close().catch(() => {});
  } finally {
    await server.close();
  }
});

test('after a resume, a lock the WELCOME does not list is lost; a listed grant whose answer was lost is delivered', async () => {
  let phase = 0;
  const server = await fakeSessionServer((f, conn) => {
    if (f.type === Type.HELLO) conn.welcome(f.id);
    if (f.type === Type.ACQUIRE && phase === 0) conn.send(Type.GRANTED, f.id, { KEY: f.get(Tag.KEY), TOKEN: 20n, COUNT: 1 });
    if (f.type === Type.RESUME) {
      const [first, second] = framesOf(server, Type.ACQUIRE);
      // A long answer: the held item of the second acquire comes in a MORE frame.
      conn.welcome(f.id, { APPLIED: second.id, HELD: Buffer.from(lcFields({ KEY: 'b', TOKEN: 21n, REQUEST: second.id, MODE: 0, COUNT: 1 })), MORE: 1 });
      conn.send(Type.MORE, f.id, { PARKED: Buffer.from(lcFields({ KEY: 'x', REQUEST: 999n })) });
      assert.ok(first);
    }
    if (f.type === Type.PING) conn.send(Type.OK, f.id);
  });
  try {
    const s = await Session.connect(server.address);
    const a = await s.acquire('a');
    const aLost = once(a.signal, 'abort');
    phase = 1;
    const b = s.acquire('b'); // the server applies it, but its GRANTED goes with the connection
    await until(() => framesOf(server, Type.ACQUIRE).length === 2);
    server.conns[0].sock.destroy();
    const lb = await b;
    assert.equal(lb.token, 21n);
    await aLost;
    assert.equal(a.cause.reason, 'not_held');
    assert.equal(s.state, 'connected');
    s.close().catch(() => {});
  } finally {
    await server.close();
  }
});

test('a session whose server answers nothing for its TTL less the margin ends as expired, its locks lost', async () => {
  const server = await fakeSessionServer((f, conn) => {
    if (f.type === Type.HELLO) conn.welcome(f.id, { TTL_MS: 1000, KEEPALIVE_MS: 5000 });
    if (f.type === Type.ACQUIRE) conn.send(Type.GRANTED, f.id, { KEY: f.get(Tag.KEY), TOKEN: 3n, COUNT: 1 });
  });
  try {
    const s = await Session.connect(server.address, { ttlMs: 1000 });
    const lk = await s.acquire('k');
    const start = performance.now();
    await once(s.signal, 'abort');
    const took = performance.now() - start;
    assert.ok(took < 1000, `ended after ${took} ms`);
    assert.ok(s.signal.reason instanceof lc.SessionExpiredError, String(s.signal.reason));
    assert.equal(lk.cause.reason, 'session_expired');
    await assert.rejects(s.acquire('k'), lc.SessionExpiredError);
    await s.close();
  } finally {
    await server.close();
  }
});

test('the farewell of a session counted expired releases with lapse each lock it held or was releasing, by token, between its RESUME and its CLOSE', async () => {
  const tokens = { l: 2n, d: 3n, p: 4n, o: 5n };
  const server = await fakeSessionServer((f, conn) => {
    if (f.type === Type.HELLO) conn.welcome(f.id, { TTL_MS: 1000, KEEPALIVE_MS: 5000 });
    if (f.type === Type.ACQUIRE) {
      const lease = f.num(Tag.LEASE_MS);
      conn.send(Type.GRANTED, f.id, { KEY: f.get(Tag.KEY), TOKEN: tokens[f.text(Tag.KEY)], COUNT: 1, ...(lease && { LEFT_MS: lease }) });
    }
    // A resume is answered only when a CLOSE follows it (the farewell):
    // the session is still kept here, but the client hears nothing before.
    if (f.type === Type.RESUME) conn.sent = [f];
    if (f.type === Type.RELEASE) conn.sent?.push(f);
    if (f.type === Type.CLOSE && conn.sent) {
      const [resume, ...releases] = conn.sent;
      conn.welcome(resume.id, { TTL_MS: 1000, KEEPALIVE_MS: 5000 });
      for (const r of releases) conn.send(Type.REFUSED, r.id, { CODE: Code.stale_token, MESSAGE: 'passed over' });
      conn.send(Type.OK, f.id);
    }
  });
  try {
    const s = await Session.connect(server.address, { ttlMs: 1000 });
    await s.acquire('d', { lockDelayMs: 5000 });
    await s.acquire('p');
    (await s.acquire('o')).orphan();
    // Its lease ends here before the session does; its RELEASE with lapse
    // is unanswered, and goes with the farewell too.
    const leased = await s.acquire('l', { leaseMs: 200, lockDelayMs: 5000 });
    await once(leased.signal, 'abort');
    assert.equal(leased.signal.reason.reason, 'lease_expired');
    await until(() => framesOf(server, Type.RELEASE).length === 1);
    const [lapsed] = framesOf(server, Type.RELEASE);
    assert.deepEqual([lapsed.big(Tag.TOKEN), lapsed.num(Tag.LAPSE)], [2n, 1]);
    assert.equal(s.state, 'connected');
    await once(s.signal, 'abort');
    assert.ok(s.signal.reason instanceof lc.SessionExpiredError, String(s.signal.reason));
    await until(() => server.frames.some((x) => x.conn > 0 && x.frame.type === Type.CLOSE));
    const farewell = server.frames.filter((x) => x.conn === server.frames.find((y) => y.frame.type === Type.CLOSE).conn).map((x) => x.frame);
    assert.deepEqual(farewell.map((f) => f.type), [Type.RESUME, Type.RELEASE, Type.RELEASE, Type.RELEASE, Type.CLOSE]);
    const [resume, ...rest] = farewell;
    assert.equal(resume.big(Tag.SESSION), 7n);
    assert.deepEqual(rest.map((f) => f.id), [1n, 2n, 3n, 4n].map((n) => resume.id + n), 'ids in order');
    assert.deepEqual(
      rest.slice(0, 3).map((f) => [f.text(Tag.KEY), f.big(Tag.TOKEN), f.num(Tag.LAPSE)]),
      [['l', 2n, 1], ['d', 3n, 1], ['p', 4n, 1]],
      'a RELEASE with lapse of each lock held or being released, by token, none of the one orphaned',
    );
    await s.close();
  } finally {
    await server.close();
  }
});

test('calls that wait for no key are bounded by the request timeout', async () => {
  const server = await fakeSessionServer((f, conn) => {
    if (f.type === Type.HELLO) conn.welcome(f.id);
    if (f.type === Type.ACQUIRE && f.num(Tag.WAIT_MS) === undefined) conn.send(Type.GRANTED, f.id, { KEY: f.get(Tag.KEY), TOKEN: 3n, COUNT: 1 });
    if (f.type === Type.PING) conn.send(Type.OK, f.id);
  });
  try {
    const s = await Session.connect(server.address, { requestTimeoutMs: 100 });
    const lk = await s.acquire('k');
    for (const [name, call] of [
      ['tryAcquire', () => s.tryAcquire('t')],
      ['acquire with waitMs', () => s.acquire('w', { waitMs: 50 })],
      ['release', () => lk.release()],
      ['release by token', () => s.release('x', 1n)],
      ['describe', () => s.describe('k')],
      ['close', () => s.close()],
    ]) {
      const start = performance.now();
      await assert.rejects(call(), lc.TimeoutError, name);
      assert.ok(performance.now() - start < 1000, name);
    }
  } finally {
    await server.close();
  }
});

test('close sends CLOSE; waiting acquires end with SessionClosedError and locks as released', async () => {
  const server = await fakeSessionServer(
    sessionScript((f, conn) => {
      if (f.type === Type.ACQUIRE && f.text(Tag.KEY) === 'held') conn.send(Type.GRANTED, f.id, { KEY: 'held', TOKEN: 1n, COUNT: 1 });
      if (f.type === Type.CLOSE) {
        conn.send(Type.OK, f.id);
        conn.sock.end();
      }
    }),
  );
  try {
    const s = await Session.connect(server.address);
    const lk = await s.acquire('held');
    const waiting = s.acquire('waits');
    let ended = 0;
    s.addEventListener('ended', () => ended++);
    await s.close();
    await s.close();
    await assert.rejects(waiting, lc.SessionClosedError);
    assert.equal(lk.state, 'released');
    assert.equal(lk.signal.aborted, false);
    assert.equal(s.state, 'ended');
    assert.ok(s.signal.reason instanceof lc.SessionClosedError);
    assert.equal(ended, 1);
    await assert.rejects(s.acquire('k'), lc.SessionClosedError);
    await sleep(50);
    assert.equal(framesOf(server, Type.RESUME).length, 0, 'no resume after the close');
  } finally {
    await server.close();
  }
});

test('the environment helper reads the lc-cli names', async (t) => {
  const { mkdtempSync, writeFileSync, rmSync } = await import('node:fs');
  const dir = mkdtempSync(`${(await import('node:os')).tmpdir()}/lc-env-`);
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  for (const f of ['ca', 'cert', 'key']) writeFileSync(`${dir}/${f}.pem`, `${f} pem`);
  const o = lc.optionsFromEnv({ LC_TOKEN: 't0k', LC_CA_FILE: `${dir}/ca.pem`, LC_CERT_FILE: `${dir}/cert.pem`, LC_KEY_FILE: `${dir}/key.pem`, LC_ADDRESS: 'h:1', LC_SOURCE: 'job' });
  assert.equal(o.token, 't0k');
  assert.equal(o.address, 'h:1');
  assert.equal(o.name, 'job');
  assert.equal(String(o.tls.ca), 'ca pem');
  assert.equal(String(o.tls.cert), 'cert pem');
  assert.equal(String(o.tls.key), 'key pem');
  assert.deepEqual(lc.optionsFromEnv({ LC_TLS: 'true' }), { tls: true });
  assert.deepEqual(lc.optionsFromEnv({}), {});
  assert.throws(() => lc.optionsFromEnv({ LC_CERT_FILE: `${dir}/cert.pem` }), TypeError);
});

/** The bytes of a list item's fields. */
const lcFields = (obj) => lc.frames.encodeFields(fields(obj));
