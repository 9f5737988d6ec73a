// A stand-in for the mutex port, for tests: it reads one whole request per
// connection and answers a fixed byte, or never answers (answer null). A
// function as answer is asked per request, with its action byte, and may
// return a promise.

import net from 'node:net';
import { once } from 'node:events';

const FIELDS = { 1: 2, 2: 1, 3: 1, 4: 1, 5: 2 };

function requestLength(buf) {
  if (buf.length === 0) return -1;
  let n = 1;
  for (let i = 0; i < (FIELDS[buf[0]] ?? 0); i++) {
    if (buf.length <= n) return -1;
    n += 1 + buf[n];
  }
  return buf.length >= n ? n : -1;
}

export async function fakeServer(answer) {
  const requests = [];
  let onRequest = () => {};
  let onPeerClosed = () => {};
  const received = new Promise((r) => (onRequest = r));
  const peerClosed = new Promise((r) => (onPeerClosed = r));
  const sockets = new Set();
  const server = net.createServer((sock) => {
    sockets.add(sock);
    sock.on('close', () => sockets.delete(sock));
    let buf = Buffer.alloc(0);
    let answered = false;
    let reply = null;
    sock.on('data', async (chunk) => {
      if (answered) return;
      buf = Buffer.concat([buf, chunk]);
      if (requestLength(buf) < 0) return;
      answered = true;
      requests.push(buf);
      onRequest();
      reply = typeof answer === 'function' ? await answer(buf[0]) : answer;
      if (reply !== null && !sock.destroyed) sock.end(reply);
    });
    sock.on('end', () => {
      if (reply === null) onPeerClosed();
    });
    sock.on('error', () => {
      if (reply === null) onPeerClosed();
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    address: `127.0.0.1:${server.address().port}`,
    requests,
    received,
    peerClosed,
    async close() {
      for (const s of sockets) s.destroy();
      server.close();
      await once(server, 'close');
    },
  };
}

/** A 127.0.0.1 address where nothing listens. */
export async function deadAddress() {
  const server = net.createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address();
  server.close();
  await once(server, 'close');
  return `127.0.0.1:${port}`;
}
