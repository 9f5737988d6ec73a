'use strict';
// The session protocol's bytes (docs/protocol.md, "Mutex port, session
// protocol (v2)"): a connection begins with the preface "LC/2", then frames
// go both ways. A frame is [length u32][type u8][id u64][fields], the
// length counting the bytes after itself (9 to 65,536); a field is
// [tag u8][size u16][value]. Integers are big-endian and unsigned.

const { ProtocolError } = require('./errors.cjs');

const PREFACE = Buffer.from('LC/2', 'latin1');
const MAX_FRAME = 65536;
const FRAME_HEAD = 9;

const Type = Object.freeze({
  HELLO: 0x01,
  RESUME: 0x02,
  ACQUIRE: 0x03,
  RELEASE: 0x04,
  RENEW: 0x05,
  CANCEL: 0x06,
  DESCRIBE: 0x07,
  PING: 0x08,
  CLOSE: 0x09,
  WATCH: 0x0a,
  WELCOME: 0x81,
  GRANTED: 0x82,
  OK: 0x83,
  REFUSED: 0x84,
  LOST: 0x85,
  INFO: 0x86,
  GOODBYE: 0x87,
  EVENT: 0x88,
  MORE: 0x89,
});

const Tag = Object.freeze({
  KEY: 0x01,
  NAME: 0x02,
  TTL_MS: 0x03,
  CREDENTIAL: 0x04,
  SESSION: 0x05,
  SECRET: 0x06,
  TOKEN: 0x07,
  WAIT_MS: 0x08,
  LEASE_MS: 0x09,
  DELAY_MS: 0x0a,
  TARGET: 0x0b,
  SERVER: 0x0c,
  CODE: 0x0d,
  MESSAGE: 0x0e,
  QUEUE: 0x0f,
  APPLIED: 0x10,
  LEFT_MS: 0x11,
  HELD_MS: 0x12,
  KEEPALIVE_MS: 0x13,
  REQUEST: 0x14,
  MODE: 0x15,
  LIMIT: 0x16,
  PRIORITY: 0x17,
  REENTRANT: 0x18,
  OWNER: 0x19,
  COUNT: 0x1a,
  LEADER: 0x1b,
  EVENT: 0x1c,
  AT_MS: 0x1d,
  MORE: 0x1e,
  NOTE: 0x1f,
  HELD: 0x20,
  PARKED: 0x21,
  HOLDER: 0x22,
  LAPSE: 0x23,
});

const Code = Object.freeze({
  busy: 1,
  timeout: 2,
  cancelled: 3,
  reset: 4,
  stale_token: 5,
  duplicate: 6,
  bad_request: 7,
  unsupported: 8,
  session_ended: 9,
  not_durable: 10,
  lease_expired: 11,
  session_expired: 12,
  protocol_error: 13,
  unknown_session: 14,
  shutting_down: 15,
  deadlock: 16,
  limit_mismatch: 17,
  upgrade: 18,
  not_leader: 19,
  slow_consumer: 20,
  unauthenticated: 21,
  forbidden: 22,
  rate_limited: 23,
  over_limit: 24,
});

const codeNames = Object.fromEntries(Object.entries(Code).map(([name, n]) => [n, name]));

/** A code's name as docs/protocol.md spells it, or "code N" for one it does not list. */
function codeName(code) {
  return codeNames[code] ?? `code ${code}`;
}

// What a field's value may be: a fixed size (the integers, the secret), or
// a byte string of at most so many bytes. List tags hold fields of their own.
const fixedSize = new Uint8Array(256);
const maxSize = new Uint16Array(256).fill(0xffff);
for (const [tag, size] of [
  [Tag.TTL_MS, 4], [Tag.SESSION, 8], [Tag.SECRET, 16], [Tag.TOKEN, 8], [Tag.WAIT_MS, 4],
  [Tag.LEASE_MS, 4], [Tag.DELAY_MS, 4], [Tag.TARGET, 8], [Tag.CODE, 1], [Tag.QUEUE, 4],
  [Tag.APPLIED, 8], [Tag.LEFT_MS, 4], [Tag.HELD_MS, 4], [Tag.KEEPALIVE_MS, 4], [Tag.REQUEST, 8],
  [Tag.MODE, 1], [Tag.LIMIT, 4], [Tag.PRIORITY, 4], [Tag.REENTRANT, 1], [Tag.COUNT, 4],
  [Tag.EVENT, 1], [Tag.AT_MS, 8], [Tag.MORE, 1],
]) fixedSize[tag] = size;
for (const [tag, size] of [
  [Tag.KEY, 127], [Tag.NAME, 127], [Tag.CREDENTIAL, 1024], [Tag.SERVER, 255], [Tag.MESSAGE, 1024],
  [Tag.OWNER, 127], [Tag.LEADER, 255], [Tag.NOTE, 1024],
]) maxSize[tag] = size;
const isList = (tag) => tag === Tag.HELD || tag === Tag.PARKED || tag === Tag.HOLDER;

/**
 * The fields of a frame or of a list item, in order. Values are Buffers
 * (views of the bytes decoded); list items are decoded into `items`.
 */
class Fields {
  constructor(list) {
    /** @type {{tag: number, value: Buffer, items?: Fields}[]} */
    this.list = list;
  }

  /** The value of tag, or undefined. */
  get(tag) {
    for (const f of this.list) if (f.tag === tag) return f.value;
    return undefined;
  }

  has(tag) {
    return this.get(tag) !== undefined;
  }

  /** A u8 or u32 field as a number (undefined when absent). */
  num(tag) {
    const v = this.get(tag);
    if (v === undefined) return undefined;
    return v.length === 1 ? v[0] : v.readUInt32BE(0);
  }

  /** A u64 field as a bigint (undefined when absent). */
  big(tag) {
    const v = this.get(tag);
    return v === undefined ? undefined : v.readBigUInt64BE(0);
  }

  /** A byte string field as UTF-8 text (undefined when absent). */
  text(tag) {
    const v = this.get(tag);
    return v === undefined ? undefined : v.toString('utf8');
  }

  /** Every list item of tag, in order. */
  items(tag) {
    const out = [];
    for (const f of this.list) if (f.tag === tag) out.push(f.items);
    return out;
  }
}

/** A decoded frame: its type, its request id (a bigint) and its fields. */
class Frame extends Fields {
  constructor(type, id, list) {
    super(list);
    this.type = type;
    this.id = id;
  }
}

/**
 * Decodes a sequence of fields. Throws ProtocolError for a field that runs
 * past the end, a fixed-size field of another size, a byte string over its
 * limit, a tag given twice (list tags excepted), or a malformed list item.
 */
function decodeFields(b) {
  const list = [];
  let seenLo = 0; // a bit per tag below 32, then below 64; higher tags are checked by search
  let seenHi = 0;
  let off = 0;
  while (off < b.length) {
    if (b.length - off < 3) throw new ProtocolError('a field header cut short');
    const tag = b[off];
    const size = b.readUInt16BE(off + 1);
    if (size > b.length - off - 3) throw new ProtocolError(`field 0x${hex2(tag)} runs past its frame`);
    const want = fixedSize[tag];
    if (want !== 0 && size !== want) throw new ProtocolError(`field 0x${hex2(tag)} of ${size} bytes, want ${want}`);
    if (size > maxSize[tag]) throw new ProtocolError(`field 0x${hex2(tag)} of ${size} bytes, over its limit of ${maxSize[tag]}`);
    const value = b.subarray(off + 3, off + 3 + size);
    const field = { tag, value };
    if (isList(tag)) {
      field.items = decodeFields(value);
    } else if (tag < 32) {
      if (seenLo & (1 << tag)) throw new ProtocolError(`field 0x${hex2(tag)} given twice`);
      seenLo |= 1 << tag;
    } else if (tag < 64) {
      if (seenHi & (1 << (tag - 32))) throw new ProtocolError(`field 0x${hex2(tag)} given twice`);
      seenHi |= 1 << (tag - 32);
    } else if (list.some((f) => f.tag === tag)) {
      throw new ProtocolError(`field 0x${hex2(tag)} given twice`);
    }
    list.push(field);
    off += 3 + size;
  }
  return new Fields(list);
}

const hex2 = (n) => n.toString(16).padStart(2, '0');

/**
 * Decodes the frame at the start of b. Returns { frame, size } (size: the
 * bytes it took), or null when b holds only part of a frame. Throws
 * ProtocolError for a length outside 9..65,536 (known from the first four
 * bytes) or malformed fields.
 */
function decodeFrame(b) {
  if (b.length < 4) return null;
  const n = b.readUInt32BE(0);
  if (n < FRAME_HEAD || n > MAX_FRAME) throw new ProtocolError(`frame length ${n}, want 9 to ${MAX_FRAME}`);
  if (b.length < 4 + n) return null;
  const fields = decodeFields(b.subarray(13, 4 + n));
  return { frame: new Frame(b[4], b.readBigUInt64BE(5), fields.list), size: 4 + n };
}

/** The bytes of a sequence of fields: [{tag, value}], value a Uint8Array. */
function encodeFields(fields) {
  let n = 0;
  for (const f of fields) n += 3 + f.value.length;
  const b = Buffer.allocUnsafe(n);
  let off = 0;
  for (const f of fields) {
    b[off] = f.tag;
    b.writeUInt16BE(f.value.length, off + 1);
    b.set(f.value, off + 3);
    off += 3 + f.value.length;
  }
  return b;
}

/** The bytes of a frame of type with request id (a bigint or a safe integer) and fields. */
function encodeFrame(type, id, fields = []) {
  const body = encodeFields(fields);
  const b = Buffer.allocUnsafe(13 + body.length);
  b.writeUInt32BE(9 + body.length, 0);
  b[4] = type;
  b.writeBigUInt64BE(BigInt(id), 5);
  body.copy(b, 13);
  return b;
}

// Field constructors.
const u8 = (tag, v) => ({ tag, value: Buffer.of(v) });
const u32 = (tag, v) => {
  const value = Buffer.allocUnsafe(4);
  value.writeUInt32BE(v >>> 0, 0);
  return { tag, value };
};
const u64 = (tag, v) => {
  const value = Buffer.allocUnsafe(8);
  value.writeBigUInt64BE(BigInt(v), 0);
  return { tag, value };
};
const bytes = (tag, v) => ({ tag, value: typeof v === 'string' ? Buffer.from(v, 'utf8') : v });

/**
 * Reads the frames of a connection from the chunks pushed into it, and
 * joins a long answer (docs/protocol.md, Long answers) into one frame: a
 * WELCOME or INFO with `more` is returned once its last MORE frame has
 * come, with every item in order and without the field `more`. A GOODBYE
 * inside such an answer is returned in its place (the answer never came).
 */
class FrameReader {
  constructor() {
    this.buf = Buffer.alloc(0);
    this.pending = null; // the answer being joined
  }

  push(chunk) {
    this.buf = this.buf.length === 0 ? chunk : Buffer.concat([this.buf, chunk]);
  }

  /** What is left unread, as bytes. */
  rest() {
    return this.buf;
  }

  /** The next whole answer, or null until more bytes come. Throws ProtocolError. */
  next() {
    for (;;) {
      const got = decodeFrame(this.buf);
      if (got === null) return null;
      this.buf = this.buf.subarray(got.size);
      const f = got.frame;
      const more = f.num(Tag.MORE) > 0;
      if (this.pending === null) {
        if (f.type === Type.MORE) throw new ProtocolError(`a MORE frame (id ${f.id}) that continues no answer`);
        if (!more) return f;
        this.pending = new Frame(f.type, f.id, f.list.filter((x) => x.tag !== Tag.MORE));
        continue;
      }
      if (f.type === Type.GOODBYE) {
        this.pending = null;
        return f;
      }
      if (f.type !== Type.MORE || f.id !== this.pending.id) {
        throw new ProtocolError(`frame 0x${hex2(f.type)} (id ${f.id}) inside the answer to ${this.pending.id}`);
      }
      for (const x of f.list) if (x.tag !== Tag.MORE) this.pending.list.push(x);
      if (!more) {
        const whole = this.pending;
        this.pending = null;
        return whole;
      }
    }
  }
}

module.exports = {
  PREFACE,
  MAX_FRAME,
  Type,
  Tag,
  Code,
  codeName,
  Fields,
  Frame,
  FrameReader,
  decodeFrame,
  decodeFields,
  encodeFrame,
  encodeFields,
  field: { u8, u32, u64, bytes },
};
