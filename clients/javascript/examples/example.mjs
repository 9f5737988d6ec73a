// Takes a key, works while holding it, and releases it.
//
//   node examples/example.mjs [host:port]   (default localhost:22119)

import { Client } from '../src/index.js';

const client = new Client(process.argv[2] ?? 'localhost:22119', { source: 'example-report-job' });

// Resolves once the key is ours; other holders of the key queue behind us.
await client.withLock('reports/daily', async () => {
  console.log('holding reports/daily');
});

// A tryLock that loses resolves false; failures reject.
if (await client.tryLock('reports/daily')) {
  console.log('took reports/daily at once');
  await client.unlock('reports/daily');
} else {
  console.log('reports/daily is busy');
}

// Give up after 2 s: the abort closes the connection, which withdraws the request.
try {
  await client.lock('reports/daily', { signal: AbortSignal.timeout(2000) });
  await client.unlock('reports/daily');
} catch (err) {
  if (err.name !== 'TimeoutError') throw err;
  console.log('not granted within 2 s; the request was withdrawn');
}
