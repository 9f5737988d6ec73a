// A session: take a key, work while holding it, hand its fencing token to
// what the work writes, and let it go.
//
//   node examples/session.mjs [host:port]   (default localhost:22119)

import { Session, LockLostError } from '../src/index.js'; // in an application: '@locking-center/client'

/** Stands in for a store that keeps the highest token it has seen and refuses older ones. */
const store = {
  highest: 0n,
  write(token, text) {
    if (token < this.highest) throw new Error(`stale token ${token}`);
    this.highest = token;
    console.log(`wrote ${JSON.stringify(text)} with token ${token}`);
  },
};

const session = await Session.connect(process.argv[2] ?? 'localhost:22119', { name: 'example-report-job', ttlMs: 10_000 });
try {
  // Wait at most 5 s (the server keeps the bound); the lock lives 30 s unless renewed.
  const lock = await session.acquire('reports/daily', { waitMs: 5000, leaseMs: 30_000, note: 'daily report, example' });
  try {
    lock.signal.throwIfAborted(); // lost (lease, session, reset)? signal.reason says why
    store.write(lock.token, 'report of the day');
  } finally {
    await lock.release();
  }

  // A try: null when somebody else holds the key, never an error.
  const again = await session.tryAcquire('reports/daily');
  console.log(again ? `took it again at once, token ${again.token}` : 'reports/daily is busy');
  await again?.release();

  // withLock releases the key whatever the function does.
  const rows = await session.withLock('reports/daily', async (lk) => {
    store.write(lk.token, 'a correction');
    return 3;
  });
  console.log(`withLock gave ${rows}`);
} catch (err) {
  if (err instanceof LockLostError) console.error(`lost the lock: ${err.reason}`);
  throw err;
} finally {
  await session.close();
}
