// A process that holds keys until it is killed, for the kill -9 checks:
//
//   node holder-child.mjs ADDR TTL_MS LOCK_DELAY_MS KEY...
//
// Opens a session with that TTL, acquires every key with that lock-delay,
// prints "ready" and the tokens, and waits.

import { Session } from '../src/index.js';

const [addr, ttl, delay, ...keys] = process.argv.slice(2);
if (!addr) process.exit(0); // run by `node --test test/`, which takes every file here for a test
const s = await Session.connect(addr, { name: 'javascript-holder-child', ttlMs: Number(ttl) });
const locks = await Promise.all(keys.map((k) => s.acquire(k, { lockDelayMs: Number(delay) })));
process.stdout.write(`ready ${locks.map((l) => l.token).join(' ')}\n`);
setInterval(() => {}, 1 << 30);
