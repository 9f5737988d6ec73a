// The session protocol's codec: every frame of
// clients/testdata/session-vectors.json encoded and decoded byte for byte,
// long answers joined, and a decoder that, fed anything, returns frames or
// throws the client's ProtocolError and nothing else.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

import { frames, ProtocolError } from '../src/index.js';

const { decodeFrame, decodeFields, encodeFrame, encodeFields, FrameReader, Type, Tag, Code, PREFACE } = frames;
const vectors = JSON.parse(readFileSync(new URL('../../testdata/session-vectors.json', import.meta.url), 'utf8'));
const hex = (s) => Buffer.from(s, 'hex');
const toHex = (b) => Buffer.from(b).toString('hex');

test('the preface, types, tags and codes are the vectors\'', () => {
  assert.equal(toHex(PREFACE), vectors.preface_hex);
  for (const [name, n] of Object.entries(vectors.types)) assert.equal(Type[name.toUpperCase()], n, name);
  for (const [name, n] of Object.entries(vectors.tags)) assert.equal(Tag[name.toUpperCase()], n, name);
  assert.deepEqual({ ...Code }, vectors.codes);
});

test('every vector frame encodes to its bytes', () => {
  assert.ok(vectors.frames.length >= 30);
  for (const v of vectors.frames) {
    const fields = v.fields.map((f) => ({ tag: f.tag, value: hex(f.value_hex) }));
    assert.equal(toHex(encodeFrame(v.type, BigInt(v.id), fields)), v.frame_hex, v.name);
  }
});

test('every vector frame decodes to its type, id and fields', () => {
  for (const v of vectors.frames) {
    const bytes = hex(v.frame_hex);
    const got = decodeFrame(bytes);
    assert.equal(got.size, bytes.length, v.name);
    assert.equal(got.frame.type, v.type, v.name);
    assert.equal(got.frame.id, BigInt(v.id), v.name);
    assert.deepEqual(got.frame.list.map((f) => ({ tag: f.tag, value_hex: toHex(f.value) })), v.fields, v.name);
    for (const f of got.frame.list) {
      // A list item's fields encode back to its value.
      if (f.items) assert.equal(toHex(encodeFields(f.items.list)), toHex(f.value), `${v.name}: item of tag ${f.tag}`);
    }
    // Cut anywhere before its end, a frame is not there yet.
    for (const n of [0, 3, 4, 12, bytes.length - 1]) assert.equal(decodeFrame(bytes.subarray(0, n)), null, `${v.name} cut at ${n}`);
  }
});

test('fields read as the protocol types them: tokens above 2^53 and 2^63 exactly', () => {
  for (const token of [2n ** 53n + 1n, 2n ** 63n + 12345n, 2n ** 64n - 1n]) {
    const b = encodeFrame(Type.GRANTED, 2n ** 64n - 2n, [
      { tag: Tag.KEY, value: Buffer.from('k') },
      { tag: Tag.TOKEN, value: Buffer.from(token.toString(16).padStart(16, '0'), 'hex') },
      { tag: Tag.COUNT, value: Buffer.from('00000001', 'hex') },
    ]);
    const { frame } = decodeFrame(b);
    assert.equal(frame.big(Tag.TOKEN), token);
    assert.equal(typeof frame.big(Tag.TOKEN), 'bigint');
    assert.equal(frame.id, 2n ** 64n - 2n);
    assert.equal(frame.num(Tag.COUNT), 1);
    assert.equal(frame.text(Tag.KEY), 'k');
  }
  const welcome = decodeFrame(hex(vectors.frames.find((v) => v.name === 'welcome of a resume').frame_hex)).frame;
  const held = welcome.items(Tag.HELD);
  assert.equal(held.length, 2);
  assert.equal(held[1].num(Tag.LEFT_MS), 0x7148);
  assert.equal(held[1].num(Tag.MODE), 1);
  assert.equal(welcome.items(Tag.PARKED)[0].big(Tag.REQUEST), 5n);
});

test('a long answer is joined from its MORE frames, in order, without more', () => {
  const byName = (name) => hex(vectors.frames.find((v) => v.name === name).frame_hex);
  const r = new FrameReader();
  const parts = [byName('welcome of a resume, the first of three frames'), byName('more of a welcome, another to come'), byName('more of a welcome, the last')];
  const all = Buffer.concat(parts);
  // Byte by byte: nothing until the last frame's last byte.
  for (let i = 0; i < all.length - 1; i++) {
    r.push(all.subarray(i, i + 1));
    assert.equal(r.next(), null, `byte ${i}`);
  }
  r.push(all.subarray(all.length - 1));
  const w = r.next();
  assert.equal(w.type, Type.WELCOME);
  assert.equal(w.has(Tag.MORE), false);
  const first = decodeFrame(parts[0]).frame;
  assert.equal(w.items(Tag.HELD).length, first.items(Tag.HELD).length);
  assert.equal(w.items(Tag.PARKED).length, 2);
  assert.equal(r.next(), null);

  // A MORE that continues nothing, or another frame inside an answer, is the server's protocol error.
  const lone = new FrameReader();
  lone.push(byName('more of a welcome, the last'));
  assert.throws(() => lone.next(), ProtocolError);
  const cut = new FrameReader();
  cut.push(Buffer.concat([parts[0], byName('ok')]));
  assert.throws(() => cut.next(), ProtocolError);
  // A GOODBYE inside one ends it: the answer never came.
  const bye = new FrameReader();
  bye.push(Buffer.concat([parts[0], byName('goodbye')]));
  assert.equal(bye.next().type, Type.GOODBYE);
});

test('malformed frames are protocol errors', () => {
  const cases = {
    'length under 9': '00000008010000000000000001',
    'length over the limit': '0001000101',
    'a field past its frame': '0000000d8300000000000000010d0005',
    'a field header cut short': '0000000b830000000000000001 0d00'.replace(' ', ''),
    'a fixed-size field of another size': '0000000e820000000000000001070001ff',
    'a tag given twice': '000000118300000000000000011100010111000101'.replace(/^(.{26})/, '$1'),
    'a key over 127 bytes': '0000008c82000000000000000101 0080'.replace(' ', '') + '61'.repeat(128),
    'a bad list item': '0000000f860000000000000001220003070001',
  };
  // Fix the lengths of the cases written by hand.
  for (const [name, h] of Object.entries(cases)) {
    let b = hex(h);
    if (name !== 'length under 9' && name !== 'length over the limit') {
      b = Buffer.from(b);
      b.writeUInt32BE(b.length - 4, 0);
    }
    assert.throws(() => decodeFrame(b), ProtocolError, name);
  }
  assert.throws(() => decodeFields(hex('110004000000')), ProtocolError, 'left_ms of 4 bytes with 3 there');
});

test('the decoder throws nothing but ProtocolError, whatever it is fed', () => {
  // Seeded, so that a failure can be replayed: mutations of every vector, then random bytes.
  let seed = Number(process.env.LC_FUZZ_SEED ?? 0x5eed);
  const rand = (n) => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed % n;
  };
  const seeds = vectors.frames.map((v) => hex(v.frame_hex));
  let decoded = 0;
  let refused = 0;
  const feed = (b) => {
    try {
      const got = decodeFrame(b);
      if (got) {
        decoded++;
        const f = got.frame;
        for (const x of f.list) {
          f.get(x.tag);
          if (x.value.length === 1 || x.value.length === 4) f.num(x.tag);
          if (x.value.length === 8) f.big(x.tag);
        }
      }
      const r = new FrameReader();
      r.push(b);
      while (r.next() !== null);
    } catch (err) {
      if (!(err instanceof ProtocolError)) throw new Error(`${err} for ${toHex(b)}`);
      refused++;
    }
  };
  for (let i = 0; i < 20000; i++) {
    const b = Buffer.from(seeds[rand(seeds.length)]);
    const n = 1 + rand(4);
    for (let j = 0; j < n; j++) {
      switch (rand(4)) {
        case 0:
          b[rand(b.length)] = rand(256);
          break;
        case 1:
          b[4 + rand(b.length - 4)] ^= 1 << rand(8);
          break;
        case 2:
          b.writeUInt32BE(rand(b.length + 8), 0);
          break;
        default:
          b[13 + rand(Math.max(1, b.length - 13))] = rand(256);
      }
    }
    feed(b.subarray(0, rand(4) === 0 ? rand(b.length + 1) : b.length));
  }
  for (let i = 0; i < 5000; i++) {
    const n = rand(80);
    const b = Buffer.alloc(n);
    for (let j = 0; j < n; j++) b[j] = rand(256);
    if (n >= 4 && rand(2)) b.writeUInt32BE(n - 4, 0);
    feed(b);
  }
  assert.ok(decoded > 100 && refused > 1000, `decoded ${decoded}, refused ${refused}`);
});

test('CommonJS and ES modules give the same objects', () => {
  const require = createRequire(import.meta.url);
  const cjs = require('../src/index.cjs');
  assert.equal(cjs.ProtocolError, ProtocolError);
  assert.equal(cjs.frames, frames);
});
