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

// --- The session protocol ---

/** Default bound, in milliseconds, on every session call that does not wait for a key. */
export declare const DEFAULT_REQUEST_TIMEOUT: number;
/** Longest holder's note, in bytes of UTF-8. */
export declare const MAX_NOTE_LEN: 1024;

export interface SessionOptions {
  /** The session's source (shown by lc-cli keys -d, matched by reset by source), at most 127 bytes; empty: the client's IP. */
  name?: Bytes;
  /** The session TTL to ask for, in milliseconds; the server clamps it (1 s to 5 min by default). Default: the server's (10 s). */
  ttlMs?: number;
  /** A token for a server with authentication on (the HELLO's and every RESUME's credential), at most 1,024 bytes. */
  token?: string;
  /** TLS: true (the system's roots), or node:tls options (ca, cert, key, servername, ...). */
  tls?: boolean | import('node:tls').ConnectionOptions;
  /** Bound on each TCP connect and TLS handshake, in milliseconds. Default 5000. */
  connectTimeoutMs?: number;
  /** Bound on every call that does not wait for a key (the handshake's answer, tryAcquire, release, renew, describe, close), in milliseconds. Default 10000. */
  requestTimeoutMs?: number;
  /** Gives up Session.connect; it rejects with the signal's reason. */
  signal?: AbortSignal;
}

export interface AcquireOptions {
  /** Abandons the wait: the request leaves the server's queue (CANCEL) and the promise rejects with the signal's reason. */
  signal?: AbortSignal;
  /** The server's bound on the wait, in milliseconds: TimeoutError when it runs out. 0 tries once: null when busy. Absent: wait for ever. */
  waitMs?: number;
  /** A lease: the lock ends this long after its grant unless renewed (LockLostError 'lease_expired'). */
  leaseMs?: number;
  /** Lock-delay: after a loss by expiry nobody gets the key for this long; at most 60,000. Default: the server's LOCK_DELAY. */
  lockDelayMs?: number;
  /** Shared mode: any number of shared holders, and no exclusive one, at once. */
  shared?: boolean;
  /** A semaphore of this many (exclusive) holders; every acquire of the key must name the same. */
  limit?: number;
  /** Higher is served first (a signed 32-bit integer); 0 by default. */
  priority?: number;
  /** A holder of the key with the same owner counts up (same token) instead of deadlocking. */
  reentrant?: boolean;
  /** Who within the session asks, for reentrancy and deadlock detection; at most 127 bytes. */
  owner?: Bytes;
  /** The holder's note: UTF-8, at most 1,024 bytes, shown wherever the lock is. Not secret. */
  note?: Bytes;
}

/** Why a lock was lost. */
export type LostReason = 'lease_expired' | 'session_expired' | 'reset' | 'session_closed' | 'not_held';

/** A lock the session holds, from its grant until release(), orphan() or its loss. */
export declare class Lock implements AsyncDisposable {
  private constructor();
  /** The key, as given to acquire. */
  readonly key: Bytes;
  /** The fencing token: give it with every write to the resource the lock guards. */
  readonly token: bigint;
  /** The reentrancy count the server gave at the grant (1 unless reentrant). */
  readonly count: number;
  /** Aborted, with a LockLostError as its reason, once the lock is lost (not on release or orphan). */
  readonly signal: AbortSignal;
  readonly state: 'held' | 'released' | 'orphaned' | 'lost';
  readonly held: boolean;
  /** The LockLostError of a lost lock. */
  readonly cause: LockLostError | undefined;
  /** Milliseconds left of the lease by the client's count, which ends before the server's can; undefined without a lease. */
  readonly leaseRemainingMs: number | undefined;
  /** Releases the lock; idempotent. Rejects with the LockLostError of a lock lost before, TimeoutError after the request timeout. */
  release(): Promise<void>;
  /** Starts the lease again from now (for leaseMs, or the last lease). */
  renew(options?: { leaseMs?: number; signal?: AbortSignal }): Promise<void>;
  /** Stops tracking the lock without releasing it. */
  orphan(): void;
  [Symbol.asyncDispose](): Promise<void>;
}

export interface KeyHolder {
  token: bigint;
  name: string;
  /** The holding session's id; 0n for a v1 holder. */
  session: bigint;
  heldMs: number;
  mode: 'exclusive' | 'shared';
  count: number;
  /** What is left of its lease, when it has one. */
  leftMs: number | undefined;
  note: string | undefined;
}

export interface KeyInfo {
  key: Bytes;
  /** Requests waiting for the key. */
  queue: number;
  /** What is left of a lock-delay. */
  delayLeftMs: number | undefined;
  holders: KeyHolder[];
}

/**
 * A session with a Locking-Center server, or the nodes of a cluster: one connection, kept alive,
 * resumed after a drop within the TTL. Events: 'suspended', 'resumed', 'ended'.
 */
export declare class Session extends EventTarget implements AsyncDisposable {
  private constructor();
  /** Opens a session at addresses ("host:port", a comma list, or an array). */
  static connect(addresses: string | string[], options?: SessionOptions): Promise<Session>;
  readonly id: bigint;
  readonly ttlMs: number;
  readonly keepaliveMs: number;
  readonly server: string;
  readonly state: 'connected' | 'suspended' | 'ended';
  /** Aborted when the session ends, with why as its reason. */
  readonly signal: AbortSignal;
  /** Resolves to the Lock once held; with waitMs 0, to null when the key is busy. */
  acquire(key: Bytes, options: AcquireOptions & { waitMs: 0 }): Promise<Lock | null>;
  acquire(key: Bytes, options?: AcquireOptions): Promise<Lock>;
  /** acquire with waitMs 0: the Lock, or null when the key is held or in lock-delay. */
  tryAcquire(key: Bytes, options?: Omit<AcquireOptions, 'waitMs'>): Promise<Lock | null>;
  /** Acquires key, runs fn, releases whatever fn does; resolves to fn's result (null when waitMs 0 found the key busy). */
  withLock<T>(key: Bytes, fn: (lock: Lock) => T | Promise<T>, options: AcquireOptions & { waitMs: 0 }): Promise<T | null>;
  withLock<T>(key: Bytes, fn: (lock: Lock) => T | Promise<T>, options?: AcquireOptions): Promise<T>;
  /** Releases the lock of key with token in this session; StaleTokenError when the session does not hold it. */
  release(key: Bytes, token: bigint): Promise<void>;
  describe(key: Bytes): Promise<KeyInfo>;
  /** Ends the session, releasing every lock and withdrawing every wait. Idempotent. */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** Session options from LC_TOKEN, LC_CA_FILE, LC_CERT_FILE, LC_KEY_FILE, LC_TLS, LC_ADDRESS and LC_SOURCE. */
export declare function optionsFromEnv(env?: Record<string, string | undefined>): SessionOptions & { address?: string };

export type SessionErrorCode =
  | 'ERR_INVALID_KEY'
  | 'ERR_INVALID_SOURCE'
  | 'ERR_INVALID_OWNER'
  | 'ERR_INVALID_NOTE'
  | 'ERR_NOT_HELD'
  | 'ERR_TIMEOUT'
  | 'ERR_CANCELLED'
  | 'ERR_RESET'
  | 'ERR_STALE_TOKEN'
  | 'ERR_LOCK_LOST'
  | 'ERR_SESSION_EXPIRED'
  | 'ERR_SESSION_CLOSED'
  | 'ERR_NOT_LEADER'
  | 'ERR_UNAUTHENTICATED'
  | 'ERR_FORBIDDEN'
  | 'ERR_RATE_LIMITED'
  | 'ERR_OVER_LIMIT'
  | 'ERR_DEADLOCK'
  | 'ERR_LIMIT_MISMATCH'
  | 'ERR_UPGRADE'
  | 'ERR_PROTOCOL'
  | 'ERR_CONNECTION'
  | 'ERR_REFUSED';

export interface SessionErrorDetails {
  serverCode?: string;
  serverMessage?: string;
  cause?: unknown;
}

/** Every failure of the session API. */
export declare class SessionError extends Error {
  readonly code: SessionErrorCode;
  /** The server's code, as docs/protocol.md names it ('timeout', 'forbidden', ...); undefined for the client's own failures. */
  readonly serverCode: string | undefined;
  /** The server's words. */
  readonly serverMessage: string | undefined;
  constructor(code: SessionErrorCode, message: string, details?: SessionErrorDetails);
}
/** The server's wait bound (waitMs) ran out, or the client's own bound on a call or a connect. */
export declare class TimeoutError extends SessionError {
  constructor(message: string, details?: SessionErrorDetails);
}
/** The server cancelled the wait. */
export declare class CancelledError extends SessionError {
  constructor(message: string, details?: SessionErrorDetails);
}
/** A reset withdrew the request. */
export declare class ResetError extends SessionError {
  constructor(message: string, details?: SessionErrorDetails);
}
/** session.release named a token the session does not hold. */
export declare class StaleTokenError extends SessionError {
  constructor(message: string, details?: SessionErrorDetails);
}
export declare class SessionExpiredError extends SessionError {
  constructor(message: string, details?: SessionErrorDetails);
}
export declare class SessionClosedError extends SessionError {
  constructor(message: string, details?: SessionErrorDetails);
}
export declare class UnauthenticatedError extends SessionError {
  constructor(message: string, details?: SessionErrorDetails);
}
export declare class ForbiddenError extends SessionError {
  constructor(message: string, details?: SessionErrorDetails);
}
export declare class RateLimitedError extends SessionError {
  constructor(message: string, details?: SessionErrorDetails);
}
export declare class OverLimitError extends SessionError {
  constructor(message: string, details?: SessionErrorDetails);
}
export declare class DeadlockError extends SessionError {
  constructor(message: string, details?: SessionErrorDetails);
}
export declare class UpgradeRefusedError extends SessionError {
  constructor(message: string, details?: SessionErrorDetails);
}
export declare class ProtocolError extends SessionError {
  constructor(message: string, details?: SessionErrorDetails);
}
export declare class ConnectionError extends SessionError {
  constructor(message: string, details?: SessionErrorDetails);
}
/** Any other refusal (bad_request, not_durable, ...): serverCode says which. */
export declare class RefusedError extends SessionError {
  constructor(message: string, details?: SessionErrorDetails);
}
export declare class LimitMismatchError extends SessionError {
  /** The key's limit, as the server's words name it; 0 when they name none. */
  readonly limit: number;
  constructor(message: string, details?: SessionErrorDetails);
}
export declare class NotLeaderError extends SessionError {
  /** The leader the last node named, if any. */
  readonly leader: string | undefined;
  constructor(message: string, details?: SessionErrorDetails & { leader?: string });
}
export declare class LockLostError extends SessionError {
  readonly reason: LostReason;
  readonly key: Uint8Array;
  readonly token: bigint;
  constructor(message: string, details?: SessionErrorDetails & { reason?: LostReason; key?: Uint8Array; token?: bigint });
}

/** One field of a frame: its tag and value; a list item's fields in `items`. */
export interface FrameField {
  tag: number;
  value: Uint8Array;
  items?: FrameFields;
}

export interface FrameFields {
  readonly list: FrameField[];
  get(tag: number): Uint8Array | undefined;
  has(tag: number): boolean;
  /** A u8 or u32 field. */
  num(tag: number): number | undefined;
  /** A u64 field. */
  big(tag: number): bigint | undefined;
  text(tag: number): string | undefined;
  items(tag: number): FrameFields[];
}

export interface Frame extends FrameFields {
  readonly type: number;
  readonly id: bigint;
}

/** The session protocol's bytes, for tests and tools. */
export declare const frames: {
  readonly PREFACE: Uint8Array;
  readonly MAX_FRAME: 65536;
  readonly Type: Readonly<Record<string, number>>;
  readonly Tag: Readonly<Record<string, number>>;
  readonly Code: Readonly<Record<string, number>>;
  codeName(code: number): string;
  /** The frame at the start of bytes and its size, or null when bytes hold only part of one. Throws ProtocolError. */
  decodeFrame(bytes: Uint8Array): { frame: Frame; size: number } | null;
  decodeFields(bytes: Uint8Array): FrameFields;
  encodeFrame(type: number, id: bigint | number, fields?: { tag: number; value: Uint8Array }[]): Uint8Array;
  encodeFields(fields: { tag: number; value: Uint8Array }[]): Uint8Array;
  /** Joins long answers (MORE frames). */
  FrameReader: new () => { push(chunk: Uint8Array): void; next(): Frame | null };
};
