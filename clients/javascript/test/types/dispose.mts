// Compiled by test/session-types.test.js with tsc and run against a stand-in
// server: `await using` releases the lock, then closes the session.
import { Session } from '@locking-center/client';

export async function main(addr: string): Promise<string[]> {
  const log: string[] = [];
  {
    await using s = await Session.connect(addr);
    {
      await using lk = await s.acquire('k');
      log.push(`held ${lk.token}`);
    }
    log.push('released');
  }
  log.push('closed');
  return log;
}
