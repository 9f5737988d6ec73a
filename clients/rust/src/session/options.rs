//! What a session and an acquire may ask for.

use std::time::Duration;

use crate::frame::{tag, Field};
use crate::CancelToken;

use super::error::{Error, Result};

/// Bound on each TCP connect unless [`SessionOptions::connect_timeout`] says otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on the answer of every call that waits for no key (the handshake,
/// a try, release, renew, close) unless [`SessionOptions::read_timeout`]
/// says otherwise.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest key, owner and session name, in bytes.
pub const MAX_NAME_LEN: usize = 127;
/// Longest holder's note and token, in bytes.
pub const MAX_NOTE_LEN: usize = 1024;

/// How to open a session. `SessionOptions::default()` asks for the
/// server's default TTL, with no name and no token.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    pub(crate) name: String,
    pub(crate) ttl: Option<Duration>,
    pub(crate) token: Option<String>,
    pub(crate) connect_timeout: Duration,
    pub(crate) read_timeout: Duration,
}

impl Default for SessionOptions {
    fn default() -> SessionOptions {
        SessionOptions {
            name: String::new(),
            ttl: None,
            token: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            read_timeout: DEFAULT_READ_TIMEOUT,
        }
    }
}

impl SessionOptions {
    /// The defaults, and the token in `LC_TOKEN` when it is set (the
    /// environment lc-cli reads).
    pub fn from_env() -> SessionOptions {
        let token = std::env::var("LC_TOKEN").ok().filter(|t| !t.is_empty());
        SessionOptions { token, ..SessionOptions::default() }
    }

    /// The session's name, its source (shown by `lc-cli keys -d`, matched by
    /// reset by source); empty lets the server use the client's address.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The TTL to ask for (the server clamps it to its range); without it
    /// the server's default (10 s).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The token (`credential`) for a server with authentication on; HELLO
    /// and every RESUME carry it.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Bounds each TCP connect.
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// Bounds the answer of every call that waits for no key.
    pub fn read_timeout(mut self, d: Duration) -> Self {
        self.read_timeout = d;
        self
    }

    pub(crate) fn check(&self) -> Result<()> {
        if self.name.len() > MAX_NAME_LEN {
            return Err(Error::InvalidArgument(format!(
                "a session name of {} bytes, over {MAX_NAME_LEN}",
                self.name.len()
            )));
        }
        if self.token.as_ref().map_or(false, |t| t.len() > MAX_NOTE_LEN) {
            return Err(Error::InvalidArgument(format!("a token over {MAX_NOTE_LEN} bytes")));
        }
        Ok(())
    }
}

/// What an acquire asks for. `AcquireOptions::default()` is an exclusive
/// lock that waits for ever, without a lease.
#[derive(Clone, Debug, Default)]
pub struct AcquireOptions {
    pub(crate) wait: Option<Duration>,
    pub(crate) lease: Option<Duration>,
    pub(crate) lock_delay: Option<Duration>,
    pub(crate) shared: bool,
    pub(crate) limit: Option<u32>,
    pub(crate) priority: i32,
    pub(crate) reentrant: bool,
    pub(crate) owner: Option<String>,
    pub(crate) note: Option<String>,
    pub(crate) cancel: Option<CancelToken>,
}

impl AcquireOptions {
    pub fn new() -> Self {
        AcquireOptions::default()
    }

    /// How long the acquire may wait in the key's queue, enforced by the
    /// server (`wait_ms`): past it the acquire fails with
    /// [`Error::Timeout`]. A wait of zero is sent as 1 ms: a try is
    /// [`Session::try_acquire`](super::Session::try_acquire).
    pub fn wait(mut self, d: Duration) -> Self {
        self.wait = Some(d.max(Duration::from_millis(1)));
        self
    }

    /// The lock's own lease: it ends at the latest this long after the
    /// grant unless renewed.
    pub fn lease(mut self, d: Duration) -> Self {
        self.lease = Some(d);
        self
    }

    /// The lock-delay (at most 60 s): when the lock is lost, not released,
    /// nobody gets the key for this long.
    pub fn lock_delay(mut self, d: Duration) -> Self {
        self.lock_delay = Some(d);
        self
    }

    /// A shared lock: any number of shared holders at once.
    pub fn shared(mut self) -> Self {
        self.shared = true;
        self
    }

    /// One of `n` places of a semaphore; every holder and waiter of the key
    /// names the same `n`.
    pub fn limit(mut self, n: u32) -> Self {
        self.limit = Some(n);
        self
    }

    /// Higher is served first; 0 by default.
    pub fn priority(mut self, p: i32) -> Self {
        self.priority = p;
        self
    }

    /// A holder of the key with the same owner counts up instead of
    /// waiting for itself.
    pub fn reentrant(mut self) -> Self {
        self.reentrant = true;
        self
    }

    /// Who within the session, for reentrancy and deadlock detection.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// The holder's note, shown wherever the lock is (at most 1,024 bytes).
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }

    /// Lets `token` end the wait from another thread: the client sends
    /// CANCEL, the request leaves the queue, the acquire returns
    /// [`Error::Cancelled`].
    pub fn cancel(mut self, token: &CancelToken) -> Self {
        self.cancel = Some(token.clone());
        self
    }

    /// The fields of an ACQUIRE of `key`, in the order of their tags.
    pub fn fields(&self, key: &[u8]) -> Result<Vec<Field>> {
        check_key(key)?;
        let mut f = vec![Field::bytes(tag::KEY, key)];
        if let Some(w) = self.wait {
            f.push(Field::u32(tag::WAIT_MS, millis(w)));
        }
        if let Some(l) = self.lease.filter(|l| !l.is_zero()) {
            f.push(Field::u32(tag::LEASE_MS, millis(l)));
        }
        if let Some(d) = self.lock_delay {
            f.push(Field::u32(tag::DELAY_MS, millis(d)));
        }
        if self.shared {
            f.push(Field::u8(tag::MODE, 1));
        }
        if let Some(n) = self.limit {
            f.push(Field::u32(tag::LIMIT, n));
        }
        if self.priority != 0 {
            f.push(Field::u32(tag::PRIORITY, self.priority as u32));
        }
        if self.reentrant {
            f.push(Field::u8(tag::REENTRANT, 1));
        }
        if let Some(o) = &self.owner {
            if o.len() > MAX_NAME_LEN {
                return Err(Error::InvalidArgument(format!("an owner of {} bytes, over {MAX_NAME_LEN}", o.len())));
            }
            f.push(Field::bytes(tag::OWNER, o));
        }
        if let Some(n) = &self.note {
            if n.len() > MAX_NOTE_LEN {
                return Err(Error::InvalidArgument(format!("a note of {} bytes, over {MAX_NOTE_LEN}", n.len())));
            }
            f.push(Field::bytes(tag::NOTE, n));
        }
        Ok(f)
    }
}

/// Checks that `key` is 1 to 127 bytes.
pub(crate) fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() || key.len() > MAX_NAME_LEN {
        return Err(Error::InvalidArgument(format!("a key must be 1 to {MAX_NAME_LEN} bytes, got {}", key.len())));
    }
    Ok(())
}

/// Whole milliseconds, rounded up, at most `u32::MAX`.
pub(crate) fn millis(d: Duration) -> u32 {
    let ms = (d.as_nanos() + 999_999) / 1_000_000;
    ms.min(u128::from(u32::MAX)) as u32
}
