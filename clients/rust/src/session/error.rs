//! The errors of the session client, and why a lock ends.

use std::fmt;
use std::io;

use crate::frame::code;

/// Why a lock ended without a release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LostReason {
    /// Its lease ran out before a renew (by the server's clock, or by the
    /// client's own count, which ends first).
    LeaseExpired,
    /// The session's TTL passed: on the server, or by the client's count
    /// when it had no answer for the TTL less a margin.
    SessionExpired,
    /// A reset took the key.
    Reset,
    /// The session was closed, or it ended before the server could be told.
    SessionClosed,
    /// The server answered that the session does not hold the token now.
    StaleToken,
    /// A resumed session no longer listed the lock: it was lost while the
    /// connection was down.
    WhileAway,
    /// A code this client does not know.
    Other(u64),
}

impl LostReason {
    /// The reason a LOST frame's code gives.
    pub fn from_code(c: u64) -> LostReason {
        match c {
            code::LEASE_EXPIRED => LostReason::LeaseExpired,
            code::SESSION_EXPIRED => LostReason::SessionExpired,
            code::RESET => LostReason::Reset,
            code::SESSION_ENDED => LostReason::SessionClosed,
            code::STALE_TOKEN => LostReason::StaleToken,
            other => LostReason::Other(other),
        }
    }
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LostReason::LeaseExpired => f.write_str("lease expired"),
            LostReason::SessionExpired => f.write_str("session expired"),
            LostReason::Reset => f.write_str("reset"),
            LostReason::SessionClosed => f.write_str("session closed"),
            LostReason::StaleToken => f.write_str("stale token"),
            LostReason::WhileAway => f.write_str("lost while disconnected"),
            LostReason::Other(c) => write!(f, "{}", code::name(*c)),
        }
    }
}

/// Every failure of the session client; each carries the server's words,
/// or the client's when the server said nothing. A try that finds the key
/// held is not one: it is `Ok(None)`.
#[derive(Debug)]
pub enum Error {
    /// The wait an acquire allowed ran out on the server (its `timeout`;
    /// the request left the queue), or a call that waits for no key had no
    /// answer within the session's bound.
    Timeout(String),
    /// A [`CancelToken`](crate::CancelToken) ended the wait; the request
    /// left the server's queue.
    Cancelled(String),
    /// The lock is gone: why, and the words.
    LockLost(LostReason, String),
    /// The session is over: its TTL passed, or the server no longer knows it.
    SessionExpired(String),
    /// The session was closed with [`Session::close`](super::Session::close).
    Closed(String),
    /// No address led to a node that leads the cluster.
    NotLeader(String),
    /// The server did not take the session's token.
    Unauthenticated(String),
    /// The token's principal may not use that key.
    Forbidden(String),
    /// The source sent more requests than the server allows; nothing changed.
    RateLimited(String),
    /// The source holds or waits for as many as the server allows, or the
    /// server has as many connections as it allows; nothing changed.
    OverLimit(String),
    /// Waiting would close a cycle of waits; the request did not wait.
    Deadlock(String),
    /// The key is a semaphore of another limit; the message names it.
    LimitMismatch(String),
    /// A shared holder asked for the key exclusively.
    Upgrade(String),
    /// Another refusal of the server (`bad_request`, `reset`,
    /// `not_durable`, `unsupported`, ...): its code and words.
    Refused { code: u64, message: String },
    /// An argument the protocol cannot carry (a key of 0 or over 127
    /// bytes, an owner or name over 127, a note over 1,024); nothing was sent.
    InvalidArgument(String),
    /// The server sent bytes that break the protocol, or ended the
    /// connection for bytes of ours it could not parse.
    Protocol(String),
    /// Connect, send or receive failed.
    Io(io::Error),
}

impl Error {
    /// The error a REFUSED (or GOODBYE) with `c` and `message` means.
    pub(crate) fn refused(c: u64, message: String) -> Error {
        match c {
            code::TIMEOUT => Error::Timeout(message),
            code::CANCELLED => Error::Cancelled(message),
            code::STALE_TOKEN => Error::LockLost(LostReason::StaleToken, message),
            code::SESSION_EXPIRED | code::UNKNOWN_SESSION => Error::SessionExpired(message),
            code::SESSION_ENDED => Error::Closed(message),
            code::NOT_LEADER => Error::NotLeader(message),
            code::UNAUTHENTICATED => Error::Unauthenticated(message),
            code::FORBIDDEN => Error::Forbidden(message),
            code::RATE_LIMITED => Error::RateLimited(message),
            code::OVER_LIMIT => Error::OverLimit(message),
            code::DEADLOCK => Error::Deadlock(message),
            code::LIMIT_MISMATCH => Error::LimitMismatch(message),
            code::UPGRADE => Error::Upgrade(message),
            code::PROTOCOL_ERROR => Error::Protocol(message),
            _ => Error::Refused { code: c, message },
        }
    }

    /// The words the error carries.
    pub fn message(&self) -> String {
        match self {
            Error::Timeout(m)
            | Error::Cancelled(m)
            | Error::LockLost(_, m)
            | Error::SessionExpired(m)
            | Error::Closed(m)
            | Error::NotLeader(m)
            | Error::Unauthenticated(m)
            | Error::Forbidden(m)
            | Error::RateLimited(m)
            | Error::OverLimit(m)
            | Error::Deadlock(m)
            | Error::LimitMismatch(m)
            | Error::Upgrade(m)
            | Error::Refused { message: m, .. }
            | Error::InvalidArgument(m)
            | Error::Protocol(m) => m.clone(),
            Error::Io(e) => e.to_string(),
        }
    }

    /// A copy, for an error that several callers are told (the end of a
    /// session); an i/o error keeps its kind and words.
    pub(crate) fn duplicate(&self) -> Error {
        match self {
            Error::Io(e) => Error::Io(io::Error::new(e.kind(), e.to_string())),
            Error::LockLost(r, m) => Error::LockLost(*r, m.clone()),
            Error::Refused { code, message } => Error::Refused { code: *code, message: message.clone() },
            other => {
                let m = other.message();
                match other {
                    Error::Timeout(_) => Error::Timeout(m),
                    Error::Cancelled(_) => Error::Cancelled(m),
                    Error::SessionExpired(_) => Error::SessionExpired(m),
                    Error::Closed(_) => Error::Closed(m),
                    Error::NotLeader(_) => Error::NotLeader(m),
                    Error::Unauthenticated(_) => Error::Unauthenticated(m),
                    Error::Forbidden(_) => Error::Forbidden(m),
                    Error::RateLimited(_) => Error::RateLimited(m),
                    Error::OverLimit(_) => Error::OverLimit(m),
                    Error::Deadlock(_) => Error::Deadlock(m),
                    Error::LimitMismatch(_) => Error::LimitMismatch(m),
                    Error::Upgrade(_) => Error::Upgrade(m),
                    Error::InvalidArgument(_) => Error::InvalidArgument(m),
                    _ => Error::Protocol(m),
                }
            }
        }
    }

    /// What the error is, in one word, for [`fmt::Display`].
    fn kind(&self) -> &'static str {
        match self {
            Error::Timeout(_) => "timeout",
            Error::Cancelled(_) => "cancelled",
            Error::LockLost(..) => "lock lost",
            Error::SessionExpired(_) => "session expired",
            Error::Closed(_) => "session closed",
            Error::NotLeader(_) => "not leader",
            Error::Unauthenticated(_) => "unauthenticated",
            Error::Forbidden(_) => "forbidden",
            Error::RateLimited(_) => "rate limited",
            Error::OverLimit(_) => "over limit",
            Error::Deadlock(_) => "deadlock",
            Error::LimitMismatch(_) => "limit mismatch",
            Error::Upgrade(_) => "upgrade refused",
            Error::Refused { .. } => "refused",
            Error::InvalidArgument(_) => "invalid argument",
            Error::Protocol(_) => "protocol error",
            Error::Io(_) => "i/o",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::LockLost(r, m) => write!(f, "lock lost ({r}): {m}"),
            Error::Refused { code: c, message } => write!(f, "refused ({}): {message}", code::name(*c)),
            other => write!(f, "{}: {}", other.kind(), other.message()),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// Result of the session client's calls.
pub type Result<T> = std::result::Result<T, Error>;
