/** A key or a source: bytes as they are, or a string sent as UTF-8. */
export type Bytes = string | Uint8Array;

/** Longest key and source, in bytes. */
export declare const MAX_KEY_LEN: 127;
export declare const MAX_SOURCE_LEN: 127;

/** Default bound on each TCP connect, in milliseconds. */
export declare const DEFAULT_CONNECT_TIMEOUT: number;

/** Default bound on the answer of a call that does not wait for a key, in milliseconds. */
export declare const DEFAULT_READ_TIMEOUT: number;

/** Action bytes of the mutex port. */
export declare const Action: Readonly<{
  LOCK: 1;
  UNLOCK: 2;
  RESET_KEY: 3;
  RESET_SOURCE: 4;
  TRY_LOCK: 5;
}>;
export type ActionByte = (typeof Action)[keyof typeof Action];

/** What an answer byte means: 'busy' is a lost tryLock, not a failure. */
export type Result = 'ok' | 'busy' | 'failed';

export type ErrorCode =
  | 'ERR_INVALID_KEY' // key empty or over 127 bytes; nothing was sent
  | 'ERR_INVALID_SOURCE' // source over 127 bytes; nothing was sent
  | 'ERR_REFUSED' // the server answered '-' (malformed, not durable, or withdrawn by a reset)
  | 'ERR_PROTOCOL' // an answer byte the protocol does not define for the request
  | 'ERR_CONNECTION'; // connect, send or read failed, or the read timeout passed; `cause` holds the system error (code ETIMEDOUT for a timeout)

/** Every failure of the client. A cancelled call rejects with its signal's reason instead. */
export declare class LockingCenterError extends Error {
  readonly name: 'LockingCenterError';
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown });
}

export interface ClientOptions {
  /** Owner of this client's locks, at most 127 bytes; empty lets the server use the client's IP. */
  source?: Bytes;
  /** Bound on each TCP connect in milliseconds; 0 waits as long as the system does. Default 5000. */
  connectTimeout?: number;
  /**
   * Bound in milliseconds, from the connect to the answer, on every call that does not wait for a key:
   * tryLock, unlock, resetByKey, resetBySource and the release of wait (ERR_CONNECTION, cause code
   * ETIMEDOUT). lock, and wait until its key is free, have none. 0: no bound. Default 10000.
   */
  readTimeout?: number;
}

export interface CallOptions {
  /** Aborting closes the connection: a parked lock request is withdrawn, and the call rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** A client of the mutex port at one address. It holds no connection between calls. */
export declare class Client {
  /** @param address "host:port" of the mutex port. @throws TypeError for a malformed address, LockingCenterError ERR_INVALID_SOURCE. */
  constructor(address: string, options?: ClientOptions);
  readonly address: string;
  /** Resolves once `key` is granted, however long that takes, unless `signal` aborts. */
  lock(key: Bytes, options?: CallOptions): Promise<void>;
  /** Resolves true when this client now holds `key`, false when another holder has it. */
  tryLock(key: Bytes, options?: CallOptions): Promise<boolean>;
  /** Releases `key`, whoever holds it; releasing a free key succeeds. */
  unlock(key: Bytes, options?: CallOptions): Promise<void>;
  /** Resolves once `key` is free, holding nothing (locks, then unlocks). */
  wait(key: Bytes, options?: CallOptions): Promise<void>;
  /** Takes `key` from its holder; the first parked request gets it. */
  resetByKey(key: Bytes, options?: CallOptions): Promise<void>;
  /** Releases every key held by `source` and withdraws its parked requests (their locks reject with ERR_REFUSED). */
  resetBySource(source: Bytes, options?: CallOptions): Promise<void>;
  /** Locks `key`, runs `fn`, and unlocks whatever `fn` does; resolves to what `fn` returns. */
  withLock<T>(key: Bytes, fn: () => T | Promise<T>, options?: CallOptions): Promise<T>;
}

/** The wire bytes of one request. The key is left out for RESET_SOURCE, the source for UNLOCK and RESET_KEY. */
export declare function encodeRequest(action: ActionByte, key?: Uint8Array, source?: Uint8Array): Uint8Array;

/** What `answer` means for a request of `action`. */
export declare function interpretAnswer(action: ActionByte, answer: number): Result;
