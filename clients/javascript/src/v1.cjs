// Client of Locking-Center, a lock server that grants named keys to one
// holder at a time, in order of arrival. Node.js standard library only.
//
// Every call opens one TCP connection to the mutex port, sends one request,
// reads the one-byte answer and closes. A lock is not tied to the
// connection: it stays held until unlock or a reset.

'use strict';

const net = require('node:net');

/** Longest key and source, in bytes. */
const MAX_KEY_LEN = 127;
const MAX_SOURCE_LEN = 127;

/** Default bound on each TCP connect, in milliseconds. */
const DEFAULT_CONNECT_TIMEOUT = 5000;

/** Default bound on the answer of a call that does not wait for a key, in milliseconds. */
const DEFAULT_READ_TIMEOUT = 10000;

/** Action bytes of the mutex port. */
const Action = Object.freeze({
  LOCK: 1,
  UNLOCK: 2,
  RESET_KEY: 3,
  RESET_SOURCE: 4,
  TRY_LOCK: 5,
});

const ANSWER_OK = 0x2b; // '+'
const ANSWER_FAILED = 0x2d; // '-'
const ANSWER_BUSY = 0x23; // '#'

const ACTION_NAMES = Object.freeze({ 1: 'lock', 2: 'unlock', 3: 'reset', 4: 'reset source', 5: 'trylock' });

/**
 * Every failure of the client. `code` tells which:
 * ERR_INVALID_KEY and ERR_INVALID_SOURCE (nothing was sent), ERR_REFUSED
 * (the server answered '-'), ERR_PROTOCOL (an answer byte the protocol does
 * not define) and ERR_CONNECTION (connect, send or read failed, or no answer
 * came within the read timeout; `cause` holds the system error, with code
 * ETIMEDOUT for a timeout). A cancelled call rejects with its signal's
 * reason instead.
 */
class LockingCenterError extends Error {
  constructor(code, message, options) {
    super(message, options);
    this.name = 'LockingCenterError';
    this.code = code;
  }
}

const encoder = new TextEncoder();

function toBytes(value, what) {
  if (typeof value === 'string') return encoder.encode(value);
  if (value instanceof Uint8Array) return value;
  throw new TypeError(`${what} must be a string or a Uint8Array`);
}

function checkKey(key) {
  const b = toBytes(key, 'key');
  if (b.length < 1 || b.length > MAX_KEY_LEN) {
    throw new LockingCenterError('ERR_INVALID_KEY', `key must be 1 to ${MAX_KEY_LEN} bytes, got ${b.length}`);
  }
  return b;
}

function checkSource(source) {
  const b = toBytes(source, 'source');
  if (b.length > MAX_SOURCE_LEN) {
    throw new LockingCenterError('ERR_INVALID_SOURCE', `source must be at most ${MAX_SOURCE_LEN} bytes, got ${b.length}`);
  }
  return b;
}

/**
 * Returns the wire bytes of one request. The key is left out for
 * RESET_SOURCE, the source for UNLOCK and RESET_KEY. Lengths are not checked.
 */
function encodeRequest(action, key = new Uint8Array(0), source = new Uint8Array(0)) {
  if (!(action in ACTION_NAMES)) throw new RangeError(`unknown action ${action}`);
  const withKey = action !== Action.RESET_SOURCE;
  const withSource = action === Action.LOCK || action === Action.TRY_LOCK || action === Action.RESET_SOURCE;
  const parts = [Uint8Array.of(action)];
  if (withKey) parts.push(Uint8Array.of(key.length), key);
  if (withSource) parts.push(Uint8Array.of(source.length), source);
  return Buffer.concat(parts);
}

/**
 * Returns what an answer byte means for a request of `action`: 'ok' for
 * '+', 'busy' for '#' to TRY_LOCK, 'failed' for anything else.
 */
function interpretAnswer(action, answer) {
  if (answer === ANSWER_OK) return 'ok';
  if (answer === ANSWER_BUSY && action === Action.TRY_LOCK) return 'busy';
  return 'failed';
}

function splitAddress(address) {
  const m = /^\[?(.+?)\]?:(\d{1,5})$/.exec(address);
  if (!m || Number(m[2]) > 65535) throw new TypeError(`address must be host:port, got ${JSON.stringify(address)}`);
  return { host: m[1], port: Number(m[2]) };
}

/** A client of the mutex port at one address. */
class Client {
  #host;
  #port;
  #source;
  #connectTimeout;
  #readTimeout;

  /**
   * @param {string} address "host:port" of the mutex port.
   * @param {{source?: string|Uint8Array, connectTimeout?: number, readTimeout?: number}} [options]
   *   connectTimeout bounds each TCP connect; readTimeout bounds, from the
   *   connect to the answer, every call that does not wait for a key (all
   *   but lock, and wait until its key is free). Milliseconds; 0: no bound.
   */
  constructor(address, { source = '', connectTimeout = DEFAULT_CONNECT_TIMEOUT, readTimeout = DEFAULT_READ_TIMEOUT } = {}) {
    ({ host: this.#host, port: this.#port } = splitAddress(address));
    this.address = address;
    this.#source = checkSource(source);
    this.#connectTimeout = connectTimeout;
    this.#readTimeout = readTimeout;
  }

  /** Resolves once `key` is granted; no time limit unless `signal` aborts. */
  async lock(key, { signal } = {}) {
    await this.#call(Action.LOCK, checkKey(key), this.#source, signal);
  }

  /** Resolves true when `key` is now held by this client, false when busy. */
  async tryLock(key, { signal } = {}) {
    return (await this.#call(Action.TRY_LOCK, checkKey(key), this.#source, signal)) === 'ok';
  }

  /** Releases `key`, whoever holds it; releasing a free key succeeds. */
  async unlock(key, { signal } = {}) {
    await this.#call(Action.UNLOCK, checkKey(key), undefined, signal);
  }

  /** Resolves once `key` is free, holding nothing: lock, then unlock. */
  async wait(key, { signal } = {}) {
    const k = checkKey(key);
    await this.#call(Action.LOCK, k, this.#source, signal);
    await this.#call(Action.UNLOCK, k, undefined, undefined);
  }

  /** Takes `key` from its holder; the first parked request gets it. */
  async resetByKey(key, { signal } = {}) {
    await this.#call(Action.RESET_KEY, checkKey(key), undefined, signal);
  }

  /** Releases every key of `source` and withdraws its parked requests. */
  async resetBySource(source, { signal } = {}) {
    await this.#call(Action.RESET_SOURCE, undefined, checkSource(source), signal);
  }

  /** Locks `key`, runs `fn`, and unlocks whatever `fn` does. */
  async withLock(key, fn, { signal } = {}) {
    await this.lock(key, { signal });
    try {
      return await fn();
    } finally {
      await this.unlock(key);
    }
  }

  #call(action, key, source, signal) {
    const request = encodeRequest(action, key, source);
    const what = `${ACTION_NAMES[action]} at ${this.address}`;
    // A lock waits for its key as long as it takes: no read timeout.
    const readTimeout = action === Action.LOCK ? 0 : this.#readTimeout;
    return new Promise((resolve, reject) => {
      signal?.throwIfAborted();
      const sock = net.connect({ host: this.#host, port: this.#port });
      let timer;
      let settled = false;
      const finish = (err, result) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        sock.destroy();
        if (err) reject(err);
        else resolve(result);
      };
      const onAbort = () => finish(signal.reason);
      const ioFailure = (message, cause) =>
        finish(new LockingCenterError('ERR_CONNECTION', `${what}: ${message}`, cause && { cause }));
      signal?.addEventListener('abort', onAbort, { once: true });
      if (this.#connectTimeout > 0) {
        timer = setTimeout(() => ioFailure(`connect timed out after ${this.#connectTimeout} ms`), this.#connectTimeout);
      }
      sock.once('connect', () => {
        clearTimeout(timer);
        if (readTimeout > 0) {
          timer = setTimeout(() => {
            const cause = Object.assign(new Error(`read timed out after ${readTimeout} ms`), { code: 'ETIMEDOUT' });
            ioFailure(`no answer within ${readTimeout} ms`, cause);
          }, readTimeout);
        }
        sock.write(request);
      });
      sock.once('data', (chunk) => {
        const result = interpretAnswer(action, chunk[0]);
        if (result !== 'failed') finish(null, result);
        else if (chunk[0] === ANSWER_FAILED) finish(new LockingCenterError('ERR_REFUSED', `${what}: refused by the server`));
        else finish(new LockingCenterError('ERR_PROTOCOL', `${what}: unexpected answer 0x${chunk[0].toString(16)}`));
      });
      sock.once('error', (err) => ioFailure(err.message, err));
      sock.once('close', () => ioFailure('connection closed before the answer'));
    });
  }
}

module.exports = {
  MAX_KEY_LEN,
  MAX_SOURCE_LEN,
  DEFAULT_CONNECT_TIMEOUT,
  DEFAULT_READ_TIMEOUT,
  Action,
  encodeRequest,
  interpretAnswer,
  Client,
  LockingCenterError,
  // For the session client, not part of the package's API.
  toBytes,
  splitAddress,
};
