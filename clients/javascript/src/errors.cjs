'use strict';
// The session client's errors: one family, SessionError, whose `code` says
// which failure it is, a class per failure, each with the server's code and
// words when the server said something. (v1 has LockingCenterError.)

/**
 * The base of the session API's errors. `serverCode` is the code the server
 * answered with, as docs/protocol.md names it ('timeout', 'forbidden', ...),
 * and `serverMessage` its words; both are undefined when the failure is the
 * client's own (a bound that ran out, a dropped connection).
 */
class SessionError extends Error {
  constructor(code, message, { serverCode, serverMessage, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.code = code;
    this.serverCode = serverCode;
    this.serverMessage = serverMessage;
  }
}

const families = [
  // [class name, code]
  ['TimeoutError', 'ERR_TIMEOUT'],
  ['CancelledError', 'ERR_CANCELLED'],
  ['ResetError', 'ERR_RESET'],
  ['StaleTokenError', 'ERR_STALE_TOKEN'],
  ['SessionExpiredError', 'ERR_SESSION_EXPIRED'],
  ['SessionClosedError', 'ERR_SESSION_CLOSED'],
  ['UnauthenticatedError', 'ERR_UNAUTHENTICATED'],
  ['ForbiddenError', 'ERR_FORBIDDEN'],
  ['RateLimitedError', 'ERR_RATE_LIMITED'],
  ['OverLimitError', 'ERR_OVER_LIMIT'],
  ['DeadlockError', 'ERR_DEADLOCK'],
  ['UpgradeRefusedError', 'ERR_UPGRADE'],
  ['ProtocolError', 'ERR_PROTOCOL'],
  ['ConnectionError', 'ERR_CONNECTION'],
  ['RefusedError', 'ERR_REFUSED'],
];

const classes = {};
for (const [name, code] of families) {
  // A named class per failure, so that `instanceof` and `err.name` both tell it.
  classes[name] = {
    [name]: class extends SessionError {
      constructor(message, details) {
        super(code, message, details);
      }
    },
  }[name];
}

/** The acquire's limit is not the key's; `limit` is the key's, as the server's words name it (0 when they name none). */
class LimitMismatchError extends SessionError {
  constructor(message, details = {}) {
    super('ERR_LIMIT_MISMATCH', message, details);
    this.limit = lastNumber(details.serverMessage ?? '');
  }
}

/** Every address failed and the last said it does not lead; `leader` is the leader it named, if any. */
class NotLeaderError extends SessionError {
  constructor(message, details = {}) {
    super('ERR_NOT_LEADER', message, details);
    this.leader = details.leader;
  }
}

/**
 * A lock that ended without a release. `reason` says why:
 * 'lease_expired' (its lease ran out, by the server's count or the
 * client's), 'session_expired' (the session's TTL passed), 'reset' (a reset
 * took it), 'session_closed' (its session ended without telling the
 * server), 'not_held' (the server no longer holds it, for a reason it did
 * not send).
 */
class LockLostError extends SessionError {
  constructor(message, { reason, key, token, ...details } = {}) {
    super('ERR_LOCK_LOST', message, details);
    this.reason = reason;
    this.key = key;
    this.token = token;
  }
}

/** The last decimal number in s that fits a u32, or 0: how a limit_mismatch message names the key's limit. */
function lastNumber(s) {
  const m = /(\d+)\D*$/.exec(s);
  if (!m) return 0;
  const n = Number(m[1]);
  return n <= 0xffffffff ? n : 0;
}

module.exports = {
  SessionError,
  ...classes,
  LimitMismatchError,
  NotLeaderError,
  LockLostError,
};
