// Acquire+release cycles of tasks sharing one session.
//
//   node bench.mjs ADDR [TASKS=16] [SECONDS=5] [ROUNDS=3] [--hot]
//
// Each task loops acquire (waiting) and release of its own key (with
// --hot, all tasks one key, each task an owner) for SECONDS, ROUNDS times; prints the cycles
// per second of each round and their median, and the process's CPU per
// cycle.

import { Session } from './src/index.js';

const args = process.argv.slice(2).filter((a) => a !== '--hot');
const hot = process.argv.includes('--hot');
const [addr, tasks = '16', seconds = '5', rounds = '3'] = args;
if (!addr) {
  console.error('usage: node bench.mjs ADDR [TASKS] [SECONDS] [ROUNDS] [--hot]');
  process.exit(2);
}

const s = await Session.connect(addr, { name: 'javascript-bench' });
const results = [];
for (let round = 1; round <= Number(rounds); round++) {
  let cycles = 0;
  let stop = false;
  const cpu0 = process.cpuUsage();
  const start = performance.now();
  const timer = setTimeout(() => (stop = true), Number(seconds) * 1000);
  await Promise.all(
    Array.from({ length: Number(tasks) }, async (_, i) => {
      const key = hot ? 'javascript/bench/hot' : `javascript/bench/${i}`;
      // On one key, each task is an owner of its own: one owner's second acquire would wait for itself.
      const options = hot ? { owner: `task-${i}` } : {};
      while (!stop) {
        const lk = await s.acquire(key, options);
        await lk.release();
        cycles++;
      }
    }),
  );
  clearTimeout(timer);
  const took = (performance.now() - start) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const rate = cycles / took;
  results.push(rate);
  console.log(`round ${round}: ${cycles} cycles in ${took.toFixed(2)} s: ${Math.round(rate)} cycles/s, client CPU ${((cpu.user + cpu.system) / cycles).toFixed(1)} µs/cycle`);
}
await s.close();
results.sort((a, b) => a - b);
console.log(`median: ${Math.round(results[Math.floor(results.length / 2)])} cycles/s (${tasks} tasks, one session${hot ? ', one key' : ', a key each'})`);
