// Type-checked by test/session-types.test.js with tsc: the API as a CommonJS user writes it.
import lc = require('@locking-center/client');

export async function use(addr: string): Promise<bigint> {
  const s = await lc.Session.connect(['a:1', addr], { requestTimeoutMs: 1000 });
  const lk = await s.acquire('k');
  await lk[Symbol.asyncDispose]();
  await s.close();
  if (lk.cause instanceof lc.LockLostError) return lk.cause.token;
  return lk.token;
}
