// Type-checked by test/session-types.test.js with tsc: the API as an ES module user writes it.
import {
  Session, Lock, LockLostError, TimeoutError, SessionError, LimitMismatchError, NotLeaderError,
  Client, LockingCenterError, optionsFromEnv, frames, type AcquireOptions, type LostReason, type KeyInfo,
} from '@locking-center/client';

export async function use(addr: string): Promise<void> {
  await using s = await Session.connect(addr, { name: 'x', ttlMs: 2000, token: 't', tls: { ca: 'pem', servername: 'localhost' } });
  const opts: AcquireOptions = { leaseMs: 100, lockDelayMs: 0, shared: false, limit: 2, priority: -1, reentrant: true, owner: 'o', note: 'n' };
  const lk: Lock = await s.acquire('k', { ...opts, signal: AbortSignal.timeout(10) });
  const token: bigint = lk.token;
  const busy: Lock | null = await s.tryAcquire('k');
  const busy2: Lock | null = await s.acquire(new Uint8Array([1, 2]), { waitMs: 0 });
  lk.signal.addEventListener('abort', () => {
    const why: LostReason = (lk.signal.reason as LockLostError).reason;
    void why;
  });
  {
    await using held = await s.acquire('k2');
    await held.renew({ leaseMs: 1000 });
  }
  const n: number = await s.withLock('k', async (l) => (l.held ? 1 : 0));
  const info: KeyInfo = await s.describe('k');
  const first: bigint | undefined = info.holders[0]?.token;
  try {
    await s.acquire('x', { waitMs: 5 });
  } catch (e) {
    if (e instanceof TimeoutError) void e.serverCode;
    if (e instanceof LimitMismatchError) void (e.limit + 1);
    if (e instanceof NotLeaderError) void e.leader;
    if (e instanceof SessionError) void e.code;
  }
  await s.release('k', token);
  lk.orphan();
  s.addEventListener('suspended', () => {});
  const state: 'connected' | 'suspended' | 'ended' = s.state;
  await new Client('a:1').lock('x');
  const e1 = new LockingCenterError('ERR_REFUSED', 'x');
  const { address, ...rest } = optionsFromEnv();
  const f = frames.decodeFrame(new Uint8Array(0));
  const id: bigint | undefined = f?.frame.id;
  // @ts-expect-error a token is a bigint, never a number
  const wrong: number = lk.token;
  // @ts-expect-error tryAcquire takes no waitMs
  await s.tryAcquire('k', { waitMs: 5 });
  void [busy, busy2, n, first, state, e1, address, rest, id, wrong];
}

export async function tryWith(s: Session): Promise<number | null> {
  const got: number | null = await s.withLock('k', () => 1, { waitMs: 0 });
  return got;
}
