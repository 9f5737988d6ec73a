'use strict';
// The session client: one connection per session, kept open, carrying many
// requests at once (docs/protocol.md, "Mutex port, session protocol (v2)").
// A session pings when it has nothing else to say, and when its connection
// drops, goes silent or is sent away (GOODBYE not_leader) it redials (the
// leader named, then every address in turn) and resumes, its locks and
// waiting requests intact, within the TTL.

const net = require('node:net');
const tls = require('node:tls');
const fs = require('node:fs');
const { performance } = require('node:perf_hooks');

const { PREFACE, Type, Tag, Code, codeName, FrameReader, encodeFrame, field } = require('./frame.cjs');
const E = require('./errors.cjs');
const { toBytes, splitAddress, MAX_KEY_LEN, MAX_SOURCE_LEN, DEFAULT_CONNECT_TIMEOUT } = require('./v1.cjs');

// TypeScript's `await using` looks for Symbol.asyncDispose; Node 20 before
// 20.4 has none.
if (typeof Symbol.asyncDispose !== 'symbol') {
  Object.defineProperty(Symbol, 'asyncDispose', { value: Symbol.for('Symbol.asyncDispose') });
}

/** Default bound, in milliseconds, on every call that does not wait for a key. */
const DEFAULT_REQUEST_TIMEOUT = 10000;
/** Longest holder's note, in bytes of UTF-8. */
const MAX_NOTE_LEN = 1024;
const MAX_CREDENTIAL_LEN = 1024;
const MAX_DELAY_MS = 60000;
/** The TTL a server gives a session that asks for none (SESSION_TTL's default). */
const SERVER_DEFAULT_TTL = 10000;
/**
 * The delay the client allows between the server's measuring of a left_ms
 * and the reading of its frame here (the log, the network, the event loop):
 * a lease is counted from the frame's arrival less this, or from the
 * request's sending when that is later.
 */
const DELIVERY_BOUND_MS = 100;

const now = () => performance.now();
/** What the client takes off a duration the server measures, for clock drift: a tenth, at least 50 ms, at most half. */
const margin = (d) => Math.min(Math.max(d / 10, 50), d / 2);
/**
 * How long a connection may bring nothing before it counts as dead, for
 * the server's keepalive k: k (the ping is due then on an idle connection)
 * plus a tenth of k, at least 250 ms, for its answer. It bounds each
 * connect and handshake of a resume too, so that a frozen node (its kernel
 * still accepts) costs no more than a silent connection.
 */
const silenceOf = (k) => k + Math.max(k / 10, 250);

const kGoodbye = Symbol('goodbye');
const decoder = new TextDecoder('utf-8', { fatal: true });

function checkedKey(key) {
  const b = toBytes(key, 'key');
  if (b.length < 1 || b.length > MAX_KEY_LEN) {
    throw new E.SessionError('ERR_INVALID_KEY', `key must be 1 to ${MAX_KEY_LEN} bytes, got ${b.length}`);
  }
  return Buffer.from(b.buffer, b.byteOffset, b.length);
}

function checkedU32(value, what, max = 0xffffffff) {
  if (!Number.isInteger(value) || value < 0 || value > max) throw new RangeError(`${what} must be an integer from 0 to ${max}, got ${value}`);
  return value;
}

function keyText(keyBytes) {
  try {
    return JSON.stringify(decoder.decode(keyBytes));
  } catch {
    return `0x${keyBytes.toString('hex')}`;
  }
}

const ACQUIRE_OPTIONS = new Set(['signal', 'waitMs', 'leaseMs', 'lockDelayMs', 'shared', 'limit', 'priority', 'reentrant', 'owner', 'note']);

/** Refuses an option acquire does not know: a misspelt one would be ignored, and change what the lock means. */
function checkOptionNames(o) {
  for (const name of Object.keys(o)) {
    if (!ACQUIRE_OPTIONS.has(name)) throw new TypeError(`unknown acquire option ${JSON.stringify(name)} (known: ${[...ACQUIRE_OPTIONS].join(', ')})`);
  }
}

/** The ACQUIRE fields of key for the options of acquire. */
function acquireFields(keyBytes, o) {
  checkOptionNames(o);
  const f = [field.bytes(Tag.KEY, keyBytes)];
  if (o.waitMs !== undefined) f.push(field.u32(Tag.WAIT_MS, checkedU32(o.waitMs, 'waitMs')));
  if (o.leaseMs !== undefined && o.leaseMs !== 0) f.push(field.u32(Tag.LEASE_MS, checkedU32(o.leaseMs, 'leaseMs')));
  if (o.lockDelayMs !== undefined) f.push(field.u32(Tag.DELAY_MS, checkedU32(o.lockDelayMs, 'lockDelayMs', MAX_DELAY_MS)));
  if (o.shared) f.push(field.u8(Tag.MODE, 1));
  if (o.limit !== undefined && o.limit !== 0) {
    checkedU32(o.limit, 'limit');
    if (o.shared && o.limit > 1) throw new RangeError('a semaphore (limit above 1) cannot be shared');
    f.push(field.u32(Tag.LIMIT, o.limit));
  }
  if (o.priority !== undefined && o.priority !== 0) {
    if (!Number.isInteger(o.priority) || o.priority < -0x80000000 || o.priority > 0x7fffffff) {
      throw new RangeError(`priority must be a 32-bit signed integer, got ${o.priority}`);
    }
    f.push(field.u32(Tag.PRIORITY, o.priority));
  }
  if (o.reentrant) f.push(field.u8(Tag.REENTRANT, 1));
  if (o.owner !== undefined && o.owner !== '') {
    const b = toBytes(o.owner, 'owner');
    if (b.length > MAX_SOURCE_LEN) throw new E.SessionError('ERR_INVALID_OWNER', `owner must be at most ${MAX_SOURCE_LEN} bytes, got ${b.length}`);
    if (b.length) f.push(field.bytes(Tag.OWNER, Buffer.from(b)));
  }
  if (o.note !== undefined && o.note !== '') {
    let b;
    if (typeof o.note === 'string') {
      if (!o.note.isWellFormed()) throw new E.SessionError('ERR_INVALID_NOTE', 'note must be well-formed text (a lone surrogate cannot be UTF-8)');
      b = Buffer.from(o.note, 'utf8');
    } else {
      b = Buffer.from(toBytes(o.note, 'note'));
      try {
        decoder.decode(b);
      } catch {
        throw new E.SessionError('ERR_INVALID_NOTE', 'note must be UTF-8');
      }
    }
    if (b.length > MAX_NOTE_LEN) throw new E.SessionError('ERR_INVALID_NOTE', `note must be at most ${MAX_NOTE_LEN} bytes of UTF-8, got ${b.length}`);
    if (b.length) f.push(field.bytes(Tag.NOTE, b));
  }
  return f;
}

/** The error of a REFUSED (or a GOODBYE) with code and message, for what (e.g. 'acquire "k"'). */
function refusal(what, code, message, extra = {}) {
  const name = codeName(code);
  const details = { serverCode: name, serverMessage: message, ...extra };
  const text = `${what}: ${name}${message ? `: ${message}` : ''}`;
  switch (code) {
    case Code.timeout:
      return new E.TimeoutError(`${what}: the wait ran out on the server (${name})`, details);
    case Code.cancelled:
      return new E.CancelledError(text, details);
    case Code.reset:
      return new E.ResetError(`${what}: a reset withdrew the request (${name})`, details);
    case Code.stale_token:
      return new E.StaleTokenError(`${what}: the token is not a holder of the key (${name})`, details);
    case Code.session_expired:
    case Code.unknown_session:
      return new E.SessionExpiredError(text, details);
    case Code.session_ended:
      return new E.SessionClosedError(text, details);
    case Code.unauthenticated:
      return new E.UnauthenticatedError(text, details);
    case Code.forbidden:
      return new E.ForbiddenError(text, details);
    case Code.rate_limited:
      return new E.RateLimitedError(text, details);
    case Code.over_limit:
      return new E.OverLimitError(text, details);
    case Code.deadlock:
      return new E.DeadlockError(text, details);
    case Code.limit_mismatch:
      return new E.LimitMismatchError(text, details);
    case Code.upgrade:
      return new E.UpgradeRefusedError(text, details);
    case Code.protocol_error:
      return new E.ProtocolError(text, details);
    case Code.not_leader:
      return new E.NotLeaderError(text, details);
  }
  return new E.RefusedError(text, details);
}

/** The error of a GOODBYE frame f at addr; its code and leader ride along for the redial. */
function goodbye(f, addr) {
  const code = f.num(Tag.CODE);
  const leader = f.text(Tag.LEADER) || '';
  const err = refusal(`session at ${addr}: the server said goodbye`, code, f.text(Tag.MESSAGE) ?? '', code === Code.not_leader ? { leader } : {});
  err[kGoodbye] = { code, leader };
  return err;
}

/**
 * Whether a GOODBYE error ends the hope of a session: a server that is
 * stopping, over its connections or the source's rate may take it later,
 * and a node that does not lead sends it on.
 */
function isFinal(err) {
  const g = err?.[kGoodbye];
  if (!g) return false;
  return ![Code.shutting_down, Code.session_ended, Code.rate_limited, Code.over_limit, Code.not_leader].includes(g.code);
}

/** Splits "a:1,b:2" or ["a:1", ...] into distinct addresses, in order. */
function addressList(addrs) {
  const list = Array.isArray(addrs) ? addrs : [addrs];
  const out = [];
  for (const item of list) {
    if (typeof item !== 'string') throw new TypeError('an address must be a "host:port" string');
    for (let a of item.split(',')) {
      a = a.trim();
      if (a === '' || out.includes(a)) continue;
      splitAddress(a); // throws TypeError when malformed
      out.push(a);
    }
  }
  if (out.length === 0) throw new TypeError('no address given');
  return out;
}

/**
 * Options for Session.connect from the environment, as lc-cli reads them:
 * LC_TOKEN (the token), LC_CA_FILE (PEM CAs the server must chain to),
 * LC_CERT_FILE and LC_KEY_FILE (a client certificate and its key), LC_TLS
 * ("true": TLS with the system's roots), and LC_ADDRESS, LC_SOURCE for
 * `address` and `name`. A CA or certificate turns TLS on. Files are read
 * here, so a missing one throws at once.
 */
function optionsFromEnv(env = process.env) {
  const out = {};
  if (env.LC_ADDRESS) out.address = env.LC_ADDRESS;
  if (env.LC_SOURCE) out.name = env.LC_SOURCE;
  if (env.LC_TOKEN) out.token = env.LC_TOKEN;
  const t = {};
  if (env.LC_CA_FILE) t.ca = fs.readFileSync(env.LC_CA_FILE);
  if (env.LC_CERT_FILE) t.cert = fs.readFileSync(env.LC_CERT_FILE);
  if (env.LC_KEY_FILE) t.key = fs.readFileSync(env.LC_KEY_FILE);
  if (!!t.cert !== !!t.key) throw new TypeError('LC_CERT_FILE and LC_KEY_FILE go together');
  if (Object.keys(t).length > 0) out.tls = t;
  else if (/^(1|true|yes)$/i.test(env.LC_TLS ?? '')) out.tls = true;
  return out;
}

/** One connection of a session. */
class Conn {
  constructor(addr, socket) {
    this.addr = addr;
    this.socket = socket;
    this.reader = new FrameReader();
    this.out = [];
    this.flushing = false;
  }

  write(buf) {
    this.out.push(buf);
    if (!this.flushing) {
      this.flushing = true;
      process.nextTick(() => this.flush());
    }
  }

  flush() {
    this.flushing = false;
    if (this.out.length === 0 || this.socket.destroyed) return;
    const b = this.out.length === 1 ? this.out[0] : Buffer.concat(this.out);
    this.out = [];
    this.socket.write(b);
  }
}

/**
 * A lock the session holds: a handle on one grant, from the grant until
 * release(), orphan() or its loss. `signal` aborts, with a LockLostError as
 * its reason, when the lock is lost; release and orphan do not abort it.
 */
class Lock {
  #session;
  #ac = new AbortController();
  #state = 'held';
  #cause;
  #release;

  /** @internal */
  constructor(session, key, keyBytes, token, count, hold) {
    this.#session = session;
    /** The key, as given to acquire. */
    this.key = key;
    /** The fencing token, a bigint: give it with every write to the resource the lock guards. */
    this.token = token;
    /** The reentrancy count the server gave at the grant (1 unless reentrant). */
    this.count = count;
    this._keyBytes = keyBytes;
    this._hold = hold;
  }

  /** Aborted, with a LockLostError as its reason, once the lock is lost. */
  get signal() {
    return this.#ac.signal;
  }

  /** 'held', 'released', 'orphaned' or 'lost'. */
  get state() {
    return this.#state;
  }

  /** Whether the session still holds the lock. */
  get held() {
    return this.#state === 'held';
  }

  /** The LockLostError of a lost lock, else undefined. */
  get cause() {
    return this.#cause;
  }

  /**
   * Milliseconds left of the lease by the client's count (which ends before
   * the server's can), or undefined for a lock without one.
   */
  get leaseRemainingMs() {
    const end = this._hold?.leaseEnd;
    return end === undefined ? undefined : Math.max(0, end - now());
  }

  /**
   * Releases the lock; resolves once the server has, at most the session's
   * request timeout later (TimeoutError then: the release stays queued and
   * goes out after a reconnect). Idempotent: later calls give the first's
   * promise. Rejects with the LockLostError of a lock lost before it.
   */
  release() {
    this.#release ??= this.#session._release(this);
    return this.#release;
  }

  /**
   * Starts the lease again from now, for leaseMs or the lock's last lease,
   * and moves the client's end of the lock with it. Bounded by the request
   * timeout. Rejects with the LockLostError when the lock is lost.
   */
  renew({ leaseMs, signal } = {}) {
    return this.#session._renew(this, leaseMs, signal);
  }

  /** Stops tracking the lock without releasing it: the server keeps it until the session ends or its lease runs out. */
  orphan() {
    this.#session._orphan(this);
  }

  async [Symbol.asyncDispose]() {
    await this.release();
  }

  /** @internal Ends the handle: 'released', 'orphaned', or 'lost' with its error. */
  _end(state, cause) {
    if (this.#state !== 'held') return;
    this.#state = state;
    this._hold = null;
    if (state === 'lost') {
      this.#cause = cause;
      this.#ac.abort(cause);
    }
  }
}

/**
 * A session of the session protocol with a Locking-Center server (or the
 * nodes of a cluster). Open one with Session.connect; end it with close()
 * (or `await using`). Events: 'suspended' (the connection dropped; the
 * session resumes on its own), 'resumed', 'ended' (see `signal`).
 */
class Session extends EventTarget {
  #addrs;
  #at = 0;
  #leader = '';
  #silent = '';
  #shunUntil = 0;
  #name;
  #ttlAsked;
  #token;
  #tls;
  #connectTimeout;
  #requestTimeout;

  #id = 0n;
  #secret;
  #ttl = 0;
  #keepalive = 0;
  #server = '';

  #conn = null;
  #heard = 0;
  #nextId = 0n;
  #ownerSeq = 0; // the default owners of acquires
  #inflight = new Map(); // by id: sent or to send, not answered
  #holds = new Map(); // by token: the locks of the session
  #letGo = new Set(); // tokens left to the server by orphan()
  #lastAck = 0; // when the latest request the server answered was sent
  #lostTimer = null;
  #tickTimer = null;
  #ping = null;
  #replay = null; // between a resume's WELCOME and the answer to its PING
  #reconnecting = false;
  #err = null; // why the session ended
  #ac = new AbortController();
  #closing = null;
  #farewell = false;
  #parting = []; // farewell: the fields of a RELEASE with lapse of each lock the session held or was releasing

  /** @internal Use Session.connect. */
  constructor(addresses, options = {}) {
    super();
    this.#addrs = addressList(addresses);
    const name = toBytes(options.name ?? '', 'name');
    if (name.length > MAX_SOURCE_LEN) throw new E.SessionError('ERR_INVALID_SOURCE', `name must be at most ${MAX_SOURCE_LEN} bytes, got ${name.length}`);
    this.#name = Buffer.from(name);
    this.#ttlAsked = options.ttlMs ? checkedU32(Math.ceil(options.ttlMs), 'ttlMs') : 0;
    if (options.token !== undefined && options.token !== '') {
      const t = Buffer.from(String(options.token), 'utf8');
      if (t.length > MAX_CREDENTIAL_LEN) throw new RangeError(`token must be at most ${MAX_CREDENTIAL_LEN} bytes`);
      this.#token = t;
    }
    this.#tls = options.tls === true ? {} : options.tls || null;
    this.#connectTimeout = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT;
    this.#requestTimeout = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT;
  }

  /**
   * Connects to the mutex port at addresses ("host:port", a comma list, or
   * an array: the nodes of a cluster) and opens a session. With several it
   * tries each once, in turn, and follows a node that names the leader.
   * Options: name (the session's source), ttlMs, token, tls (true, or
   * node:tls options: ca, cert, key, servername, ...), connectTimeoutMs
   * (each TCP connect and TLS handshake; default 5000), requestTimeoutMs
   * (the bound on every call that does not wait for a key; default 10000),
   * signal.
   */
  static async connect(addresses, options = {}) {
    const s = new Session(addresses, options);
    await s.#open(options.signal);
    return s;
  }

  /** The session's id on the server, a bigint. */
  get id() {
    return this.#id;
  }

  /** The TTL the server granted, in milliseconds. */
  get ttlMs() {
    return this.#ttl;
  }

  /** How often the session pings an idle connection, in milliseconds (the server's keepalive_ms). */
  get keepaliveMs() {
    return this.#keepalive;
  }

  /** The server's identity, from its WELCOME. */
  get server() {
    return this.#server;
  }

  /** 'connected', 'suspended' (reconnecting) or 'ended'. */
  get state() {
    if (this.#err) return 'ended';
    return this.#conn ? 'connected' : 'suspended';
  }

  /** Aborted when the session has ended, with why as its reason: SessionClosedError after close(), SessionExpiredError, ... */
  get signal() {
    return this.#ac.signal;
  }

  /**
   * Asks for key (1 to 127 bytes, a string as UTF-8 or a Uint8Array) and
   * resolves to a Lock once the session holds it, however long that takes,
   * through reconnections. Options: signal (abandons the wait: the request
   * leaves the server's queue; rejects with the signal's reason), waitMs
   * (the server's bound on the wait: TimeoutError; 0 tries once and
   * resolves null when the key is busy), leaseMs, lockDelayMs, shared,
   * limit, priority, reentrant, owner, note.
   */
  acquire(key, options = {}) {
    let keyBytes;
    let fields;
    try {
      keyBytes = checkedKey(key);
      // Without an owner each acquire is its own, as if it came from a client
      // of its own: concurrent acquires of one key on one session queue
      // instead of waiting for themselves (refused deadlock). A reentrant
      // acquire without one shares the session's owner, so that it counts up.
      const owner = options.owner === undefined && !options.reentrant ? `task-${++this.#ownerSeq}` : options.owner;
      fields = acquireFields(keyBytes, { ...options, owner });
    } catch (err) {
      return Promise.reject(err);
    }
    const { signal } = options;
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.#err) return Promise.reject(this.#err);
    return new Promise((resolve, reject) => {
      const r = this.#request(Type.ACQUIRE, resolve, reject);
      r.key = key;
      r.keyBytes = keyBytes;
      r.op = 'acquire';
      r.try = options.waitMs === 0;
      r.reentrant = !!options.reentrant;
      if (signal) {
        const onAbort = () => this.#abandon(r, signal.reason);
        signal.addEventListener('abort', onAbort, { once: true });
        r.cleanup = () => signal.removeEventListener('abort', onAbort);
      }
      if (options.waitMs !== undefined) {
        const bound = options.waitMs + this.#requestTimeout;
        r.timer = setTimeout(() => this.#abandon(r, new E.TimeoutError(`${what(r)}: no answer within ${bound} ms`)), bound);
      }
      this.#enqueue(r, fields);
    });
  }

  /** acquire with waitMs 0: resolves to the Lock, or null when the key is held (or in lock-delay). */
  tryAcquire(key, options = {}) {
    return this.acquire(key, { ...options, waitMs: 0 });
  }

  /**
   * Acquires key, runs fn(lock), and releases the lock whatever fn does;
   * resolves to fn's result. When fn succeeded but the lock was lost
   * meanwhile, rejects with the LockLostError: fn ran partly unprotected.
   * With waitMs 0 and the key busy, fn does not run and withLock resolves
   * null.
   */
  async withLock(key, fn, options = {}) {
    const lk = await this.acquire(key, options);
    if (lk === null) return null;
    let result;
    try {
      result = await fn(lk);
    } catch (err) {
      lk.release().catch(() => {});
      throw err;
    }
    await lk.release();
    return result;
  }

  /**
   * Releases the lock of key with token, whoever in this session holds it:
   * a lock of this session's handles is released as its handle would;
   * another token is sent as it is, and rejects with StaleTokenError when
   * the session does not hold it. Bounded by the request timeout.
   */
  release(key, token) {
    let keyBytes;
    try {
      keyBytes = checkedKey(key);
      if (typeof token !== 'bigint') throw new TypeError('token must be a bigint');
    } catch (err) {
      return Promise.reject(err);
    }
    const h = this.#holds.get(token);
    if (h && h.keyBytes.equals(keyBytes) && h.locks.length > 0) return h.locks[h.locks.length - 1].release();
    if (this.#err) return Promise.reject(this.#err);
    return this.#bounded(Type.RELEASE, 'release', [field.bytes(Tag.KEY, keyBytes), field.u64(Tag.TOKEN, token)], (r) => {
      r.keyBytes = keyBytes;
      r.token = token;
    });
  }

  /**
   * What the server knows of key: { key, queue, delayLeftMs, holders: [{
   * token, name, session, heldMs, mode, count, leftMs, note }] }. Bounded
   * by the request timeout.
   */
  describe(key) {
    let keyBytes;
    try {
      keyBytes = checkedKey(key);
    } catch (err) {
      return Promise.reject(err);
    }
    if (this.#err) return Promise.reject(this.#err);
    return this.#bounded(Type.DESCRIBE, 'describe', [field.bytes(Tag.KEY, keyBytes)], (r) => {
      r.key = key;
      r.keyBytes = keyBytes;
    });
  }

  /**
   * Ends the session: CLOSE releases every lock at once (orphaned ones too)
   * and withdraws every waiting request, which reject with
   * SessionClosedError. Resolves once the server has answered, at most the
   * request timeout later; when the server could not be told, the locks
   * end as lost ('session_closed': the server ends them with the TTL) and
   * close rejects with why. Idempotent.
   */
  close() {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async [Symbol.asyncDispose]() {
    await this.close();
  }

  // --- requests ---

  #request(type, resolve, reject) {
    return { type, id: 0n, frame: null, sentAt: 0, sent: false, resent: false, done: false, resolve, reject, timer: null, cleanup: null, abandoned: false };
  }

  /** A request that waits for no key: its promise rejects with TimeoutError after the request timeout. */
  #bounded(type, op, fields, init) {
    return new Promise((resolve, reject) => {
      const r = this.#request(type, resolve, reject);
      r.op = op;
      init?.(r);
      if (this.#requestTimeout > 0) {
        r.timer = setTimeout(() => settle(r, new E.TimeoutError(`${what(r)}: no answer within ${this.#requestTimeout} ms`)), this.#requestTimeout);
      }
      this.#enqueue(r, fields);
    });
  }

  /** Gives r the next id and queues its frame for the attached connection; without one, r waits in inflight for the next. */
  #enqueue(r, fields) {
    r.id = ++this.#nextId;
    r.sentAt = now();
    r.frame = encodeFrame(r.type, r.id, fields);
    if (r.type !== Type.PING) this.#inflight.set(r.id, r);
    if (this.#conn) {
      this.#conn.write(r.frame);
      r.sent = true;
    }
  }

  #enqueueRelease(keyBytes, token, lock, resolve, reject, lapse = false) {
    const r = this.#request(Type.RELEASE, resolve, reject);
    r.keyBytes = keyBytes;
    r.token = token;
    r.lock = lock;
    r.op = 'release';
    this.#enqueue(r, releaseFields(keyBytes, token, lapse));
    return r;
  }

  /** Gives up an acquire whose caller has gone: one never sent is forgotten, another cancelled on the server. */
  #abandon(r, reason) {
    if (r.done) return;
    settle(r, reason);
    if (this.#inflight.get(r.id) !== r) return;
    if (!r.sent) {
      this.#inflight.delete(r.id);
      return;
    }
    r.abandoned = true;
    const c = this.#request(Type.CANCEL, null, null);
    c.target = r.id;
    this.#enqueue(c, [field.u64(Tag.TARGET, r.id)]);
  }

  /** @internal Lock.release. */
  _release(lk) {
    if (lk.state === 'lost') return Promise.reject(lk.cause);
    if (lk.state !== 'held') return Promise.resolve();
    const h = lk._hold;
    this.#dropLock(lk, 'released');
    if (this.#err) return Promise.resolve(); // the session's end released it, or will
    return new Promise((resolve, reject) => {
      const r = this.#enqueueRelease(h.keyBytes, lk.token, lk, resolve, reject);
      if (this.#requestTimeout > 0) {
        r.timer = setTimeout(
          () => settle(r, new E.TimeoutError(`${what(r)}: no answer within ${this.#requestTimeout} ms; it is sent again after a reconnect`)),
          this.#requestTimeout,
        );
      }
    });
  }

  /** @internal Lock.renew. */
  _renew(lk, leaseMs, signal) {
    if (lk.state === 'lost') return Promise.reject(lk.cause);
    if (lk.state !== 'held') return Promise.reject(new E.SessionError('ERR_NOT_HELD', `renew ${keyText(lk._keyBytes)}: the lock was ${lk.state}`));
    if (signal?.aborted) return Promise.reject(signal.reason);
    const fields = [field.bytes(Tag.KEY, lk._keyBytes), field.u64(Tag.TOKEN, lk.token)];
    try {
      if (leaseMs) fields.push(field.u32(Tag.LEASE_MS, checkedU32(leaseMs, 'leaseMs')));
    } catch (err) {
      return Promise.reject(err);
    }
    const p = this.#bounded(Type.RENEW, 'renew', fields, (r) => {
      r.lock = lk;
      r.token = lk.token;
      r.keyBytes = lk._keyBytes;
    });
    if (!signal) return p;
    return new Promise((resolve, reject) => {
      const onAbort = () => reject(signal.reason);
      signal.addEventListener('abort', onAbort, { once: true });
      p.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
    });
  }

  /** @internal Lock.orphan. */
  _orphan(lk) {
    if (lk.state !== 'held') return;
    this.#letGo.add(lk.token);
    this.#dropLock(lk, 'orphaned');
  }

  // --- locks ---

  /** Makes a Lock of the hold of token for the acquire r (creating the hold); with leased, the lease ends left after from. */
  #grant(r, token, count, leased, from, left) {
    let h = this.#holds.get(token);
    if (!h) {
      h = { keyBytes: Buffer.from(r.keyBytes), token, locks: [], timer: null, gen: 0, leaseEnd: undefined };
      this.#holds.set(token, h);
    }
    const lk = new Lock(this, r.key, h.keyBytes, token, count, h);
    h.locks.push(lk);
    if (leased) this.#setLease(h, from, left);
    settle(r, null, lk);
  }

  #lostError(keyBytes, token, reason, why) {
    return new E.LockLostError(`lock of ${keyText(keyBytes)} lost: ${why}`, { reason, key: keyBytes, token });
  }

  /** Ends one lock of its hold; the hold goes with its last lock. */
  #dropLock(lk, state, cause) {
    const h = lk._hold;
    if (h) {
      h.locks = h.locks.filter((x) => x !== lk);
      if (h.locks.length === 0) this.#forgetHold(h);
    }
    lk._end(state, cause);
  }

  /** Ends every lock of h as lost with cause. */
  #endHold(h, cause) {
    this.#forgetHold(h);
    for (const lk of h.locks) lk._end('lost', cause);
    h.locks = [];
  }

  #forgetHold(h) {
    if (this.#holds.get(h.token) === h) this.#holds.delete(h.token);
    if (h.timer) clearTimeout(h.timer);
    h.timer = null;
  }

  /** The earliest time at which the server can have measured a left_ms arriving now, in the answer to a request sent at sentAt. */
  #measuredAt(sentAt) {
    return Math.max(now() - DELIVERY_BOUND_MS, sentAt);
  }

  /** Makes h lost at from + left, less the margin, unless a renewal moves it. */
  #setLease(h, from, left) {
    if (h.timer) clearTimeout(h.timer);
    const gen = ++h.gen;
    h.leaseEnd = from + left - margin(left);
    h.timer = setTimeout(() => this.#leaseDue(h, gen), Math.max(0, h.leaseEnd - now()));
    h.timer.unref?.();
  }

  /**
   * Gives h up at the client's end of its lease, and ends it on the server
   * by its token, before anything sent later: one RELEASE with lapse, which
   * the server treats as the lease running out (the key keeps its
   * lock-delay, whatever the count). Its answer does not matter:
   * stale_token when the server's lease ended first, unsupported from a
   * server older than lapse, whose own lease end then ends the lock.
   */
  #leaseDue(h, gen) {
    if (this.#holds.get(h.token) !== h || h.gen !== gen) return;
    this.#endHold(h, this.#lostError(h.keyBytes, h.token, 'lease_expired', 'its lease ran out'));
    this.#enqueueRelease(h.keyBytes, h.token, null, null, null, true);
  }

  /** The server answered a request sent at sentAt: it had heard from the session then. */
  #ack(sentAt) {
    if (sentAt > this.#lastAck) this.#lastAck = sentAt;
    this.#armLost();
  }

  #lostDeadline() {
    return this.#lastAck + this.#ttl - margin(this.#ttl);
  }

  #armLost() {
    if (this.#lostTimer || this.#err) return;
    this.#lostTimer = setTimeout(() => this.#lostDue(), Math.max(0, this.#lostDeadline() - now()));
    this.#lostTimer.unref?.();
  }

  /**
   * At the session's lost deadline (no answer for the TTL less a margin,
   * counted from the sending of the last request answered) the server may
   * expire the session: it ends here as if it had, and the client closes it
   * on the server, best effort, so that what the server still holds for it
   * is freed before its TTL.
   */
  #lostDue() {
    this.#lostTimer = null;
    if (this.#err) return;
    if (now() < this.#lostDeadline()) {
      this.#armLost();
      return;
    }
    const why = `no answer from the server within the session's TTL (${this.#ttl} ms) less a margin of ${margin(this.#ttl)} ms`;
    this.#farewell = true;
    // The locks held, and those whose RELEASE is still unanswered (a lease
    // given up here, a release under way): the server may hold any.
    const parting = new Map();
    for (const h of this.#holds.values()) {
      if (!this.#letGo.has(h.token)) parting.set(h.token, h.keyBytes);
    }
    for (const r of this.#inflight.values()) {
      if (r.type === Type.RELEASE) parting.set(r.token, r.keyBytes);
    }
    for (const token of sorted(parting.keys())) {
      this.#parting.push(releaseFields(parting.get(token), token, true));
    }
    this.#endLost(new E.SessionExpiredError(`session ${this.#id}: ${why}`), 'session_expired', why);
  }

  /**
   * Ends the session for err: every lock with lockEnd(hold) ([state, cause]),
   * every request with err (a release with success when released).
   */
  #end(err, released, lockEnd) {
    if (this.#err) return;
    this.#err = err;
    for (const h of [...this.#holds.values()]) {
      const [state, cause] = lockEnd(h);
      this.#forgetHold(h);
      for (const lk of h.locks) lk._end(state, cause);
      h.locks = [];
    }
    for (const r of this.#inflight.values()) {
      if (r.type === Type.RELEASE && released) settle(r, null, undefined);
      else settle(r, err);
    }
    this.#inflight.clear();
    clearTimeout(this.#lostTimer);
    clearTimeout(this.#tickTimer);
    if (this.#conn) {
      this.#conn.socket.destroy();
      this.#conn = null;
    }
    this.#ac.abort(err);
    this.dispatchEvent(new Event('ended'));
    if (this.#farewell && !this.#closing) this.#sayFarewell();
  }

  /** Ends the session for err, its locks lost for reason. */
  #endLost(err, reason, why) {
    this.#end(err, false, (h) => ['lost', this.#lostError(h.keyBytes, h.token, reason, why)]);
  }

  // --- connections ---

  #silence() {
    return silenceOf(this.#keepalive);
  }

  /**
   * Dials addr, writes bytes (the preface and the first frames) and reads
   * the first answer: within the connect timeout (the TCP connect and the
   * TLS handshake), the request timeout (the answer) and all of it within
   * bound when not 0. Resolves to { conn, welcome } with the socket paused;
   * rejects with the GOODBYE's error, TimeoutError, ConnectionError or
   * ProtocolError.
   */
  #handshake(addr, bytes, bound, signal) {
    return new Promise((resolve, reject) => {
      const start = now();
      const { host, port } = splitAddress(addr);
      const socket = this.#tls ? tls.connect({ host, port, ...this.#tls }) : net.connect({ host, port });
      socket.setNoDelay(true);
      const conn = new Conn(addr, socket);
      let timer = null;
      let done = false;
      const finish = (err, welcome) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        socket.removeListener('data', onData);
        socket.removeListener('error', onError);
        socket.removeListener('close', onClose);
        socket.on('error', () => {}); // the session's handlers come with attach
        if (err) {
          socket.destroy();
          reject(err);
          return;
        }
        socket.pause();
        resolve({ conn, welcome });
      };
      const arm = (limit, what) => {
        clearTimeout(timer);
        const total = bound > 0 ? bound - (now() - start) : Infinity;
        const ms = Math.min(limit > 0 ? limit : Infinity, total);
        if (ms === Infinity) return;
        const left = Math.max(0, Math.ceil(ms));
        timer = setTimeout(() => finish(new E.TimeoutError(`session at ${addr}: ${what} within ${Math.round(now() - start)} ms`)), left);
      };
      const onAbort = () => finish(signal.reason);
      const onError = (e) => finish(new E.ConnectionError(`session at ${addr}: ${e.message}`, { cause: e }));
      const onClose = () => {
        if (conn.reader.rest().length === 1 && conn.reader.rest()[0] === 0x2d) {
          finish(new E.ProtocolError(`session at ${addr}: '-' to the session protocol's preface (a server without sessions?)`));
        } else {
          finish(new E.ConnectionError(`session at ${addr}: the connection closed before the answer`));
        }
      };
      const onData = (chunk) => {
        conn.reader.push(chunk);
        let f;
        try {
          f = conn.reader.next();
        } catch (err) {
          finish(err);
          return;
        }
        if (f === null) return;
        switch (f.type) {
          case Type.WELCOME:
            finish(null, f);
            return;
          case Type.GOODBYE:
            finish(goodbye(f, addr));
            return;
          case Type.REFUSED:
            // A field of the HELLO or RESUME the server does not know: a server older than this client.
            finish(refusal(`session at ${addr}: the server refused the session's first frame`, f.num(Tag.CODE), f.text(Tag.MESSAGE) ?? ''));
            return;
        }
        finish(new E.ProtocolError(`session at ${addr}: frame 0x${f.type.toString(16)} before the WELCOME`));
      };
      if (signal) {
        if (signal.aborted) {
          queueMicrotask(onAbort);
        } else {
          signal.addEventListener('abort', onAbort, { once: true });
        }
      }
      socket.on('data', onData);
      socket.on('error', onError);
      socket.on('close', onClose);
      arm(this.#connectTimeout, 'no connection');
      socket.once(this.#tls ? 'secureConnect' : 'connect', () => {
        arm(this.#requestTimeout, 'no answer');
        socket.write(bytes);
      });
    });
  }

  /** Attaches conn to the session: its frames are read from now on. */
  #attach(conn) {
    this.#conn = conn;
    const { socket } = conn;
    socket.on('data', (chunk) => this.#onData(conn, chunk));
    socket.on('error', () => {});
    socket.on('close', () => this.#onDrop(conn));
    socket.resume();
    if (conn.reader.rest().length > 0) this.#onData(conn, Buffer.alloc(0));
    this.#arm(0);
  }

  #onData(conn, chunk) {
    if (chunk.length) conn.reader.push(chunk);
    for (;;) {
      if (this.#conn !== conn) return;
      let f;
      try {
        f = conn.reader.next();
      } catch {
        this.#onDrop(conn); // a protocol error of the server: drop the connection and resume
        return;
      }
      if (f === null) return;
      this.#heard = now();
      if (!this.#handle(f)) {
        this.#onDrop(conn);
        return;
      }
    }
  }

  /** The connection conn dropped (or is dropped): detach it and resume. */
  #onDrop(conn) {
    conn.socket.destroy();
    if (this.#conn !== conn) return;
    this.#detach();
    this.#startReconnect();
  }

  #detach() {
    this.#conn = null;
    this.#ping = null;
    this.#replay = null;
    clearTimeout(this.#tickTimer);
    this.#tickTimer = null;
  }

  /**
   * Keeps the attached connection alive: a PING when the server has
   * answered nothing for the keepalive, and a drop (its node demoted) when
   * the connection has brought nothing for the silence bound. The timer
   * fires at the earlier of the two; both only move later, so a timer that
   * fires early re-arms.
   */
  #arm(delay) {
    clearTimeout(this.#tickTimer);
    this.#tickTimer = setTimeout(() => this.#tick(), delay);
    this.#tickTimer.unref?.();
  }

  #tick() {
    this.#tickTimer = null;
    const c = this.#conn;
    if (this.#err || !c) return;
    const t = now();
    if (!this.#ping && t >= this.#lastAck + this.#keepalive) {
      this.#ping = this.#request(Type.PING, null, null);
      this.#enqueue(this.#ping, []);
    }
    const dead = this.#heard + this.#silence();
    if (t >= dead) {
      this.#demote(c.addr);
      this.#onDrop(c);
      return;
    }
    const next = this.#ping ? dead : Math.min(dead, this.#lastAck + this.#keepalive);
    this.#arm(Math.max(1, next - t));
  }

  /** The address to try next: the leader a node named, or the next address, passing over a shunned one. */
  #target() {
    if (this.#leader) return this.#leader;
    if (this.#shunned(this.#addrs[this.#at])) this.#at = (this.#at + 1) % this.#addrs.length;
    return this.#addrs[this.#at];
  }

  #follow(leader) {
    if (leader && !this.#shunned(leader)) this.#leader = leader;
  }

  /**
   * Sends the node at addr, whose connection went silent, to the back of
   * the addresses, and shuns it for as long again: a frozen leader keeps
   * its port (the kernel accepts) and the other nodes name it until they
   * have elected another.
   */
  #demote(addr) {
    if (this.#leader === addr) this.#leader = '';
    const i = this.#addrs.indexOf(addr);
    if (i >= 0) {
      this.#addrs.splice(i, 1);
      this.#addrs.push(addr);
      this.#at = 0;
    }
    this.#silent = addr;
    this.#shunUntil = now() + this.#silence();
  }

  #shunned(addr) {
    return addr === this.#silent && this.#addrs.length > 1 && now() < this.#shunUntil;
  }

  /** Notes that a handshake at addr failed with err; reports whether another node may do better. */
  #failedAt(addr, err) {
    if (this.#leader === addr) this.#leader = '';
    else if (this.#addrs[this.#at] === addr) this.#at = (this.#at + 1) % this.#addrs.length;
    const g = err?.[kGoodbye];
    if (!g) return true;
    if (g.code === Code.not_leader && g.leader !== addr) this.#follow(g.leader);
    return !isFinal(err);
  }

  #helloBytes() {
    const fields = [field.bytes(Tag.NAME, this.#name)];
    if (this.#ttlAsked > 0) fields.push(field.u32(Tag.TTL_MS, this.#ttlAsked));
    if (this.#token) fields.push(field.bytes(Tag.CREDENTIAL, this.#token));
    return Buffer.concat([PREFACE, encodeFrame(Type.HELLO, 1n, fields)]);
  }

  /** Opens the session: HELLO at each address in turn, following a node that names the leader, until one answers WELCOME. */
  async #open(signal) {
    signal?.throwIfAborted();
    const bytes = this.#helloBytes();
    this.#nextId = 1n;
    // The keepalive is known from the WELCOME only; the TTL asked for (or
    // the server's default) bounds each attempt beforehand.
    const bound = silenceOf((this.#ttlAsked || SERVER_DEFAULT_TTL) / 3);
    let err;
    let got;
    for (let tries = 0; tries < 2 * this.#addrs.length + 1; tries++) {
      const addr = this.#target();
      const sentAt = now();
      try {
        got = await this.#handshake(addr, bytes, bound, signal);
        got.sentAt = sentAt;
        break;
      } catch (e) {
        err = e;
      }
      if (signal?.aborted) throw signal.reason;
      if (!this.#failedAt(addr, err)) break;
      if (this.#leader === '' && this.#at === 0) break; // each address once, and no leader named
    }
    if (!got) {
      if (err?.[kGoodbye]?.code === Code.not_leader && this.#addrs.length > 1) {
        throw new E.NotLeaderError(`session at ${this.#addrs.join(',')}: no address took the session; the last: ${err.message}`, {
          serverCode: err.serverCode,
          serverMessage: err.serverMessage,
          leader: err.leader,
        });
      }
      throw err;
    }
    const w = got.welcome;
    const id = w.big(Tag.SESSION);
    const secret = w.get(Tag.SECRET);
    const ttl = w.num(Tag.TTL_MS);
    if (id === undefined || secret === undefined || !ttl) {
      got.conn.socket.destroy();
      throw new E.ProtocolError(`session at ${got.conn.addr}: a WELCOME without a session, secret or TTL`);
    }
    this.#id = id;
    this.#secret = Buffer.from(secret);
    this.#ttl = ttl;
    let k = w.num(Tag.KEEPALIVE_MS) ?? 0;
    if (k <= 0 || k > ttl) k = ttl / 3;
    this.#keepalive = k;
    this.#server = w.text(Tag.SERVER) ?? '';
    this.#lastAck = got.sentAt;
    this.#heard = now();
    this.#armLost();
    this.#attach(got.conn);
  }

  /**
   * The first bytes of a resume: the preface, RESUME, a RELEASE of each
   * field list of releases, and a frame of type with no fields, with the
   * next ids in that order; and the last frame's id.
   */
  #resumeBytes(type, releases = []) {
    const rid = this.#nextId + 1n;
    this.#nextId += BigInt(2 + releases.length);
    const id = this.#nextId;
    const fields = [field.u64(Tag.SESSION, this.#id), field.bytes(Tag.SECRET, this.#secret)];
    if (this.#token) fields.push(field.bytes(Tag.CREDENTIAL, this.#token));
    const mid = releases.map((f, i) => encodeFrame(Type.RELEASE, rid + 1n + BigInt(i), f));
    return { bytes: Buffer.concat([PREFACE, encodeFrame(Type.RESUME, rid, fields), ...mid, encodeFrame(type, id, [])]), id };
  }

  #startReconnect() {
    if (this.#reconnecting || this.#err) return;
    this.#reconnecting = true;
    this.dispatchEvent(new Event('suspended'));
    this.#reconnect().finally(() => {
      this.#reconnecting = false;
    });
  }

  /** Resumes the session on a new connection, at once and then with a growing backoff, until it is back or has ended. */
  async #reconnect() {
    let hops = 0; // leaders followed at once since the last backoff
    for (let attempt = 0; ; attempt++) {
      if (this.#leader && hops <= this.#addrs.length) {
        // To the leader a node named, at once; nodes whose views disagree (an election) get the backoff.
        attempt = 0;
        hops++;
      } else {
        hops = 0;
      }
      if (attempt > 0) await this.#sleep(this.#backoff(attempt));
      if (this.#err) return;
      try {
        await this.#resume();
        this.dispatchEvent(new Event('resumed'));
        return;
      } catch (err) {
        if (this.#err) return;
        if (isFinal(err)) {
          this.#endLost(err, 'session_expired', 'the session ended on the server while the client was away');
          return;
        }
      }
    }
  }

  /** The wait before reconnect attempt n (from 1): 50 ms doubling, at most a quarter of the keepalive and 500 ms, jittered. */
  #backoff(n) {
    const d = Math.min(50 * 2 ** Math.min(n - 1, 10), Math.max(this.#keepalive / 4, 50), 500);
    return d / 2 + Math.random() * (d / 2);
  }

  /** Waits ms, or until the session ends. */
  #sleep(ms) {
    const { signal } = this.#ac;
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(t);
        signal.removeEventListener('abort', done);
        resolve();
      };
      const t = setTimeout(done, ms);
      signal.addEventListener('abort', done, { once: true });
    });
  }

  /**
   * Opens a connection and resumes the session on it: RESUME and a PING
   * whose answer comes after everything the server owed the session. It
   * attaches the connection and sends again what the server never got.
   */
  async #resume() {
    const { bytes, id: syncId } = this.#resumeBytes(Type.PING);
    const sentAt = now();
    const addr = this.#target();
    let got;
    try {
      got = await this.#handshake(addr, bytes, this.#silence());
    } catch (err) {
      this.#failedAt(addr, err);
      throw err;
    }
    let rs;
    try {
      rs = this.#parseResume(got.welcome);
    } catch (err) {
      got.conn.socket.destroy();
      throw err;
    }
    if (this.#err) {
      got.conn.socket.destroy();
      throw this.#err;
    }
    rs.sentAt = sentAt;
    rs.syncId = syncId;
    this.#ack(sentAt);
    this.#heard = now();
    this.#replay = rs;
    const out = [];
    for (const id of sorted(this.#inflight.keys())) {
      const r = this.#inflight.get(id);
      if (r.type !== Type.DESCRIBE) {
        if (id <= rs.applied) continue; // it arrived; the reconciliation settles it
        if ((r.type === Type.ACQUIRE && r.abandoned) || (r.type === Type.CANCEL && !this.#inflight.has(r.target))) {
          this.#inflight.delete(id); // it never arrived and nobody wants it
          continue;
        }
      }
      r.resent = r.sent;
      r.sent = true;
      out.push(r.frame);
    }
    this.#attach(got.conn);
    for (const b of out) got.conn.write(b);
  }

  #parseResume(w) {
    const id = w.big(Tag.SESSION);
    if (id !== this.#id) throw new E.ProtocolError(`the WELCOME of a resume names session ${id}`);
    const rs = { applied: w.big(Tag.APPLIED) ?? 0n, held: new Map(), byReq: new Map(), parked: new Set(), fresh: new Set() };
    for (const it of w.items(Tag.HELD)) {
      const token = it.big(Tag.TOKEN) ?? 0n;
      const left = it.num(Tag.LEFT_MS);
      const request = it.big(Tag.REQUEST) ?? 0n;
      rs.held.set(token, {
        keyBytes: Buffer.from(it.get(Tag.KEY) ?? Buffer.alloc(0)),
        request,
        count: Math.max(it.num(Tag.COUNT) ?? 1, 1),
        left: left ?? 0,
        leased: left !== undefined,
      });
      rs.byReq.set(request, token);
    }
    for (const it of w.items(Tag.PARKED)) rs.parked.add(it.big(Tag.REQUEST) ?? 0n);
    return rs;
  }

  // --- frames from the server ---

  /** Applies one frame of the attached connection; false to drop the connection. */
  #handle(f) {
    switch (f.type) {
      case Type.GRANTED:
      case Type.OK:
      case Type.REFUSED:
      case Type.INFO: {
        if (this.#ping && f.id === this.#ping.id) {
          this.#ack(this.#ping.sentAt);
          this.#ping = null;
          return true;
        }
        if (this.#replay && f.id === this.#replay.syncId) {
          this.#reconcile();
          return true;
        }
        const r = this.#inflight.get(f.id);
        if (!r) return true;
        const code = f.num(Tag.CODE);
        // The old connection applied it after all; its own answer comes too.
        if (f.type === Type.REFUSED && code === Code.duplicate && r.resent) return true;
        this.#ack(r.sentAt);
        this.#inflight.delete(r.id);
        this.#answer(r, f, code);
        return true;
      }
      case Type.LOST:
        this.#lost(f);
        return true;
      case Type.GOODBYE: {
        const err = goodbye(f, this.#conn.addr);
        const code = err[kGoodbye].code;
        if (code === Code.session_expired || code === Code.unknown_session) {
          this.#endLost(err, 'session_expired', 'its session expired');
        } else if (code === Code.protocol_error) {
          this.#endLost(err, 'not_held', 'the server ended the session for a protocol error');
        } else if (code === Code.not_leader) {
          this.#follow(err.leader);
        }
        return false; // shutting_down and the others: resume, elsewhere if need be
      }
    }
    return true; // EVENT, and frame types this client does not know
  }

  /** Applies the answer f (with its code) to r. */
  #answer(r, f, code) {
    const msg = f.text(Tag.MESSAGE) ?? '';
    switch (r.type) {
      case Type.ACQUIRE:
        if (f.type === Type.GRANTED) this.#granted(r, f);
        else if (f.type === Type.REFUSED && code === Code.busy && r.try) settle(r, null, null);
        else if (f.type === Type.REFUSED) settle(r, refusal(what(r), code, msg));
        return;
      case Type.RELEASE:
      case Type.RENEW: {
        if (f.type === Type.REFUSED && code === Code.stale_token) {
          const h = this.#holds.get(r.token);
          const lost = this.#lostError(r.keyBytes, r.token, 'not_held', 'the server no longer holds it');
          if (h) this.#endHold(h, lost);
          settle(r, r.lock ? lost : refusal(what(r), code, msg));
        } else if (f.type === Type.REFUSED) {
          settle(r, refusal(what(r), code, msg));
        } else if (r.type === Type.RENEW) {
          this.#renewed(r, f);
        } else {
          settle(r, null, undefined);
        }
        return;
      }
      case Type.CLOSE:
        if (f.type === Type.REFUSED) {
          settle(r, refusal('close', code, msg));
          return;
        }
        // Ended here, before the server's close of the connection can start a reconnect.
        this.#end(new E.SessionClosedError(`session ${this.#id} closed`), true, () => ['released']);
        settle(r, null, undefined);
        return;
      case Type.DESCRIBE:
        if (f.type === Type.INFO) settle(r, null, parseInfo(r.key, f));
        else settle(r, refusal(what(r), code, msg));
    }
  }

  #renewed(r, f) {
    const lk = r.lock;
    if (lk.state === 'lost') {
      settle(r, lk.cause);
      return;
    }
    const left = f.num(Tag.LEFT_MS);
    if (left !== undefined && lk._hold) this.#setLease(lk._hold, this.#measuredAt(r.sentAt), left);
    settle(r, null, undefined);
  }

  #granted(r, f) {
    const token = f.big(Tag.TOKEN) ?? 0n;
    if (r.abandoned) {
      this.#enqueueRelease(r.keyBytes, token, null, null, null); // the grant crossed the cancel
      return;
    }
    let left = f.num(Tag.LEFT_MS);
    let leased = left !== undefined;
    let from = this.#measuredAt(r.sentAt);
    const rs = this.#replay;
    if (rs) {
      if (r.id > rs.applied || rs.parked.has(r.id)) {
        rs.fresh.add(token);
      } else {
        // A grant from before the resume.
        const hi = rs.held.get(token);
        if (!hi) {
          settle(r, new E.ConnectionError(`${what(r)}: granted, then lost while the connection was down`));
          return;
        }
        from = rs.sentAt;
        left = hi.left;
        leased = hi.leased;
      }
    }
    this.#grant(r, token, f.num(Tag.COUNT) ?? 1, leased, from, left);
  }

  /** A LOST: every lock of its token ends. */
  #lost(f) {
    const token = f.big(Tag.TOKEN) ?? 0n;
    const code = f.num(Tag.CODE);
    this.#letGo.delete(token);
    const h = this.#holds.get(token);
    if (h) {
      this.#endHold(h, this.#lostByCode(h, code));
      return;
    }
    // A grant whose GRANTED went with a dropped connection.
    const r = this.#inflight.get(f.id);
    if (r && r.type === Type.ACQUIRE && this.#replay && r.id <= this.#replay.applied) {
      this.#inflight.delete(r.id);
      if (!r.abandoned) settle(r, new E.ConnectionError(`${what(r)}: granted, then lost while the connection was down (${codeName(code)})`));
    }
  }

  #lostByCode(h, code) {
    switch (code) {
      case Code.lease_expired:
        return this.#lostError(h.keyBytes, h.token, 'lease_expired', 'its lease ran out');
      case Code.session_expired:
        return this.#lostError(h.keyBytes, h.token, 'session_expired', 'its session expired');
      case Code.reset:
        return this.#lostError(h.keyBytes, h.token, 'reset', 'a reset took it');
      case Code.session_ended:
        return this.#lostError(h.keyBytes, h.token, 'session_closed', 'its session ended');
    }
    return this.#lostError(h.keyBytes, h.token, 'not_held', `the server took it back (${codeName(code)})`);
  }

  /**
   * Settles the session after a resume, once every frame the server owed
   * it has come, against what the WELCOME listed: a lock not listed was
   * lost while away; an acquire the server applied whose answer never came
   * is granted if listed, else failed; a listed lock nobody here holds is
   * released, unless it was orphaned.
   */
  #reconcile() {
    const rs = this.#replay;
    this.#replay = null;
    for (const h of [...this.#holds.values()]) {
      const hi = rs.held.get(h.token);
      if (hi) {
        if (hi.leased) this.#setLease(h, rs.sentAt, hi.left);
      } else if (!rs.fresh.has(h.token)) {
        this.#endHold(h, this.#lostError(h.keyBytes, h.token, 'not_held', 'lost while the connection was down'));
      }
    }
    const unanswered = [];
    for (const id of sorted(this.#inflight.keys())) {
      const r = this.#inflight.get(id);
      if (id > rs.applied || (r.type === Type.ACQUIRE && rs.parked.has(id)) || r.type === Type.DESCRIBE) continue;
      this.#inflight.delete(id);
      const token = rs.byReq.get(id);
      if (token !== undefined && r.type === Type.ACQUIRE && !r.abandoned) {
        this.#grantListed(r, token, rs);
        continue;
      }
      unanswered.push(r);
    }
    // What the server holds beyond the locks here and the releases in
    // flight: grants whose GRANTED went with the connection.
    const extra = new Map();
    for (const [token, hi] of rs.held) extra.set(token, hi.count - (this.#holds.get(token)?.locks.length ?? 0));
    for (const r of this.#inflight.values()) {
      if (r.type === Type.RELEASE && extra.has(r.token)) extra.set(r.token, extra.get(r.token) - 1);
    }
    for (const r of unanswered) {
      switch (r.type) {
        case Type.ACQUIRE: {
          if (r.abandoned) break;
          const token = reentered(rs, extra, r);
          if (token !== undefined) {
            extra.set(token, extra.get(token) - 1);
            this.#grantListed(r, token, rs);
          } else {
            settle(r, new E.ConnectionError(`${what(r)}: the answer was lost with the connection (refused, or granted and lost since)`));
          }
          break;
        }
        case Type.RENEW:
          if (rs.held.has(r.token)) settle(r, null, undefined);
          else settle(r, this.#lostError(r.keyBytes, r.token, 'not_held', 'the server no longer holds it'));
          break;
        default:
          settle(r, null, undefined);
      }
    }
    for (const [token, hi] of rs.held) {
      if (this.#letGo.has(token)) continue;
      for (let n = extra.get(token) ?? 0; n > 0; n--) this.#enqueueRelease(hi.keyBytes, token, null, null, null);
    }
    for (const token of this.#letGo) if (!rs.held.has(token)) this.#letGo.delete(token);
  }

  #grantListed(r, token, rs) {
    const hi = rs.held.get(token);
    this.#grant(r, token, hi.count, hi.leased, rs.sentAt, hi.left);
  }

  // --- the end ---

  async #close() {
    if (this.#err) return;
    let answered;
    const p = new Promise((resolve, reject) => {
      const r = this.#request(Type.CLOSE, resolve, reject);
      this.#enqueue(r, []);
      answered = r;
    });
    let timer;
    const bound = new Promise((_, reject) => {
      if (this.#requestTimeout > 0) {
        timer = setTimeout(() => reject(new E.TimeoutError(`close session ${this.#id}: no answer within ${this.#requestTimeout} ms`)), this.#requestTimeout);
      }
    });
    try {
      await Promise.race([p, bound]);
    } catch (err) {
      clearTimeout(timer);
      if (this.#err) {
        // The session ended meanwhile: expired, or refused for good.
        return;
      }
      this.#inflight.delete(answered.id);
      this.#endLost(new E.SessionClosedError(`session ${this.#id} closed`), 'session_closed', 'close could not tell the server; it ends the lock with the session\'s TTL');
      throw err;
    }
    clearTimeout(timer);
  }

  /**
   * Closes on the server a session the client counted expired: RESUME, a
   * RELEASE with lapse of each lock the session held or was releasing
   * (parting) and CLOSE, tried at the addresses in turn with the
   * reconnect's backoff, until a server answers the CLOSE (or says it no
   * longer knows the session) or close() is called. The RELEASEs end those locks as their leases running
   * out would, so each key keeps the lock-delay its acquire asked for; a
   * CLOSE alone frees them at once, and a next holder could be granted
   * while this process still writes. Their answers are passed over: a
   * server older than lapse refuses them unsupported, and its CLOSE then
   * frees the locks without the delay. Its sockets and timers do not keep
   * Node running.
   */
  async #sayFarewell() {
    for (let attempt = 1; !this.#closing; attempt++) {
      if (await this.#closeOnServer()) return;
      await new Promise((resolve) => setTimeout(resolve, this.#backoff(attempt)).unref());
    }
  }

  async #closeOnServer() {
    const { bytes, id: cid } = this.#resumeBytes(Type.CLOSE, this.#parting);
    const addr = this.#target();
    let got;
    try {
      got = await this.#handshake(addr, bytes, this.#silence());
    } catch (err) {
      return !this.#failedAt(addr, err);
    }
    const { conn } = got;
    conn.socket.unref();
    return new Promise((resolve) => {
      const timer = setTimeout(() => finish(false), this.#silence());
      timer.unref();
      const finish = (ok) => {
        clearTimeout(timer);
        conn.socket.destroy();
        resolve(ok);
      };
      const onData = (chunk) => {
        conn.reader.push(chunk);
        for (;;) {
          let f;
          try {
            f = conn.reader.next();
          } catch {
            finish(false);
            return;
          }
          if (f === null) return;
          if (f.type === Type.OK && f.id === cid) {
            finish(true);
            return;
          }
          if (f.type === Type.GOODBYE) {
            const g = goodbye(f, addr);
            if (g[kGoodbye].code === Code.not_leader) this.#follow(g.leader);
            finish(isFinal(g));
            return;
          }
        }
      };
      conn.socket.on('data', onData);
      conn.socket.on('error', () => finish(false));
      conn.socket.on('close', () => finish(false));
      conn.socket.resume();
      onData(Buffer.alloc(0));
    });
  }
}

/** The fields of a RELEASE of token on keyBytes; with lapse, one that ends it as its lease running out would. */
function releaseFields(keyBytes, token, lapse) {
  const fields = [field.bytes(Tag.KEY, keyBytes), field.u64(Tag.TOKEN, token)];
  if (lapse) fields.push(field.u8(Tag.LAPSE, 1));
  return fields;
}

/** The bigints of values, smallest first. */
function sorted(values) {
  return [...values].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}

/** How a message names request r: 'acquire "k"'. */
function what(r) {
  return `${r.op} ${keyText(r.keyBytes)}`;
}

/** Settles a request once: err rejects, else value resolves. */
function settle(r, err, value) {
  if (r.done) return;
  r.done = true;
  if (r.timer) clearTimeout(r.timer);
  r.cleanup?.();
  if (err) r.reject?.(err);
  else r.resolve?.(value);
}

/** The listed lock that a reentrant acquire r counted up, if the counts say one did. */
function reentered(rs, extra, r) {
  if (!r.reentrant) return undefined;
  for (const [token, hi] of rs.held) {
    if (hi.keyBytes.equals(r.keyBytes) && extra.get(token) > 0) return token;
  }
  return undefined;
}

function parseInfo(key, f) {
  return {
    key,
    queue: f.num(Tag.QUEUE) ?? 0,
    delayLeftMs: f.num(Tag.LEFT_MS),
    holders: f.items(Tag.HOLDER).map((h) => ({
      token: h.big(Tag.TOKEN) ?? 0n,
      name: h.text(Tag.NAME) ?? '',
      session: h.big(Tag.SESSION) ?? 0n,
      heldMs: h.num(Tag.HELD_MS) ?? 0,
      mode: h.num(Tag.MODE) === 1 ? 'shared' : 'exclusive',
      count: h.num(Tag.COUNT) ?? 1,
      leftMs: h.num(Tag.LEFT_MS),
      note: h.text(Tag.NOTE),
    })),
  };
}

module.exports = {
  Session,
  Lock,
  optionsFromEnv,
  DEFAULT_REQUEST_TIMEOUT,
  MAX_NOTE_LEN,
};
