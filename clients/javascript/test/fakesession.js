// A stand-in for the session protocol's server, for tests: it reads the
// preface and the frames of each connection and hands them to a script,
// which answers with conn.send(type, id, fields). Fields are given as
// { tag: value }, a value being a number (u32), a bigint (u64), a string
// or a Buffer; conn.sendRaw writes bytes as they are.

import net from 'node:net';
import { once } from 'node:events';

import { frames } from '../src/index.js';

const { Tag, Type, Code, FrameReader, encodeFrame } = frames;

const u8Tags = new Set([Tag.CODE, Tag.MODE, Tag.REENTRANT, Tag.EVENT, Tag.MORE]);

/** Fields of an object { TAG_NAME or tag number: value }, in order. */
export function fields(obj) {
  return Object.entries(obj).map(([k, v]) => {
    const tag = Number.isNaN(Number(k)) ? Tag[k] : Number(k);
    let value;
    if (Buffer.isBuffer(v)) value = v;
    else if (typeof v === 'bigint') {
      value = Buffer.alloc(8);
      value.writeBigUInt64BE(v);
    } else if (typeof v === 'number') {
      value = u8Tags.has(tag) ? Buffer.of(v) : Buffer.alloc(4);
      if (!u8Tags.has(tag)) value.writeUInt32BE(v >>> 0);
    } else value = Buffer.from(v);
    return { tag, value };
  });
}

/**
 * Starts the stand-in; script(frame, conn) is called for every frame of every
 * connection (conn.index counts connections from 0). Returns { address,
 * conns, frames (every frame, with its connection's index), close() }.
 */
export async function fakeSessionServer(script) {
  const conns = [];
  const seen = [];
  const server = net.createServer((sock) => {
    const conn = {
      index: conns.length,
      sock,
      preface: false,
      send(type, id, obj = {}) {
        if (!sock.destroyed) sock.write(encodeFrame(type, BigInt(id), fields(obj)));
      },
      sendRaw(b) {
        if (!sock.destroyed) sock.write(b);
      },
      welcome(id, obj = {}) {
        this.send(Type.WELCOME, id, { SESSION: 7n, SECRET: Buffer.alloc(16, 0xa5), TTL_MS: 10000, KEEPALIVE_MS: 3334, SERVER: 'fake', ...obj });
      },
    };
    conns.push(conn);
    sock.on('error', () => {});
    const reader = new FrameReader();
    let buf = Buffer.alloc(0);
    sock.on('data', (chunk) => {
      if (!conn.preface) {
        buf = Buffer.concat([buf, chunk]);
        if (buf.length < 4) return;
        conn.preface = true;
        chunk = buf.subarray(4);
      }
      reader.push(chunk);
      for (let f; (f = reader.next()) !== null; ) {
        seen.push({ conn: conn.index, frame: f });
        script(f, conn);
      }
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    address: `127.0.0.1:${server.address().port}`,
    conns,
    frames: seen,
    async close() {
      for (const c of conns) c.sock.destroy();
      server.close();
      await once(server, 'close');
    },
  };
}

/** A script that opens sessions and answers PING, and hands every other frame to rest. */
export function sessionScript(rest = () => {}, welcome = {}) {
  return (f, conn) => {
    if (f.type === Type.HELLO || f.type === Type.RESUME) conn.welcome(f.id, welcome);
    else if (f.type === Type.PING) conn.send(Type.OK, f.id);
    else rest(f, conn);
  };
}

export { Tag, Type, Code };
