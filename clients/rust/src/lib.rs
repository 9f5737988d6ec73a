//! Client of Locking-Center, a lock server that grants named keys to one
//! holder at a time, in order of arrival. Standard library only.
//!
//! Every call opens one TCP connection to the mutex port, sends one request,
//! reads the one-byte answer and closes. A lock is not tied to the
//! connection: it stays held until [`Client::unlock`] or a reset, even after
//! the process exits.
//!
//! ```no_run
//! use locking_center::Client;
//!
//! let client = Client::new("localhost:22119").with_source("billing-worker");
//! client.lock("orders/batch-7")?;
//! // ... only one holder at a time gets here ...
//! client.unlock("orders/batch-7")?;
//! # Ok::<(), locking_center::Error>(())
//! ```
//!
//! Keys and sources are byte strings: anything that is `AsRef<[u8]>`, so
//! `&str` (sent as its UTF-8 bytes), `String`, `&[u8]` and `Vec<u8>` all do.

pub mod frame;
pub mod session;

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Longest key, in bytes. Keys are 1..=127 bytes.
pub const MAX_KEY_LEN: usize = 127;
/// Longest source, in bytes. Sources are 0..=127 bytes.
pub const MAX_SOURCE_LEN: usize = 127;
/// Bound on each TCP connect unless [`Client::with_connect_timeout`] says otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on the answer of every call that does not wait for a key unless
/// [`Client::with_read_timeout`] says otherwise.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(10);

const ANSWER_OK: u8 = b'+';
const ANSWER_FAILED: u8 = b'-';
const ANSWER_BUSY: u8 = b'#';

/// The action byte of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Action {
    Lock = 1,
    Unlock = 2,
    ResetKey = 3,
    ResetSource = 4,
    TryLock = 5,
}

impl Action {
    fn name(self) -> &'static str {
        match self {
            Action::Lock => "lock",
            Action::Unlock => "unlock",
            Action::ResetKey => "reset",
            Action::ResetSource => "reset source",
            Action::TryLock => "trylock",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What an answer byte means for a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `+`: done (for a lock: granted).
    Ok,
    /// `#` to a try-lock: another holder has the key. Not a failure.
    Busy,
    /// `-`, or a byte the protocol does not define for the request.
    Failed,
}

/// Every failure of the client. A lost try-lock is not one: it is `Ok(false)`.
#[derive(Debug)]
pub enum Error {
    /// The key is empty or longer than [`MAX_KEY_LEN`] bytes; nothing was sent.
    InvalidKey { len: usize },
    /// The source is longer than [`MAX_SOURCE_LEN`] bytes; nothing was sent.
    InvalidSource { len: usize },
    /// The server answered `-`: the request was malformed, could not be made
    /// durable, or was withdrawn by a reset of its source.
    Refused,
    /// The server answered a byte the protocol does not define for the request.
    Protocol(u8),
    /// The timeout of [`Client::lock_timeout`] or [`Client::wait_timeout`]
    /// passed; the request was withdrawn.
    Timeout,
    /// The [`CancelToken`] was cancelled; the request was withdrawn.
    Cancelled,
    /// Connect, send or read failed. A call that got no answer within the
    /// read timeout ([`Client::with_read_timeout`]) is an error of kind
    /// [`io::ErrorKind::TimedOut`]; whether the server applied it is unknown.
    Io(io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidKey { len } => write!(f, "key must be 1 to {MAX_KEY_LEN} bytes, got {len}"),
            Error::InvalidSource { len } => write!(f, "source must be at most {MAX_SOURCE_LEN} bytes, got {len}"),
            Error::Refused => f.write_str("refused by the server"),
            Error::Protocol(b) => write!(f, "unexpected answer 0x{b:02x}"),
            Error::Timeout => f.write_str("not granted in time; request withdrawn"),
            Error::Cancelled => f.write_str("cancelled; request withdrawn"),
            Error::Io(e) => write!(f, "i/o: {e}"),
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

/// Result of the client's calls.
pub type Result<T> = std::result::Result<T, Error>;

/// Returns the wire bytes of one request. The key is left out for
/// [`Action::ResetSource`], the source for [`Action::Unlock`] and
/// [`Action::ResetKey`].
///
/// Errors: [`Error::InvalidKey`] for a key (where the action has one) that is
/// empty or longer than [`MAX_KEY_LEN`]; [`Error::InvalidSource`] for a source
/// (where the action has one) longer than [`MAX_SOURCE_LEN`].
pub fn encode_request(action: Action, key: &[u8], source: &[u8]) -> Result<Vec<u8>> {
    let with_key = action != Action::ResetSource;
    let with_source = matches!(action, Action::Lock | Action::TryLock | Action::ResetSource);
    if with_key && (key.is_empty() || key.len() > MAX_KEY_LEN) {
        return Err(Error::InvalidKey { len: key.len() });
    }
    if with_source && source.len() > MAX_SOURCE_LEN {
        return Err(Error::InvalidSource { len: source.len() });
    }
    let mut b = Vec::with_capacity(3 + key.len() + source.len());
    b.push(action as u8);
    if with_key {
        b.push(key.len() as u8);
        b.extend_from_slice(key);
    }
    if with_source {
        b.push(source.len() as u8);
        b.extend_from_slice(source);
    }
    Ok(b)
}

/// Returns what `answer` means for a request of `action`.
pub fn interpret_answer(action: Action, answer: u8) -> Outcome {
    match answer {
        ANSWER_OK => Outcome::Ok,
        ANSWER_BUSY if action == Action::TryLock => Outcome::Busy,
        _ => Outcome::Failed,
    }
}

/// Cancels the lock requests it is passed to, from any thread: cancelling
/// closes their connections, so the server withdraws them, and the calls
/// return [`Error::Cancelled`]. Once cancelled it stays cancelled. Clones
/// share one state.
#[derive(Clone, Default)]
pub struct CancelToken {
    inner: Arc<Mutex<CancelState>>,
}

#[derive(Default)]
struct CancelState {
    cancelled: bool,
    next: u64,
    streams: HashMap<u64, TcpStream>,
    /// What a session's acquires run at the cancel (see [`session`]).
    callbacks: HashMap<u64, Box<dyn Fn() + Send>>,
}

impl fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelToken").field("cancelled", &self.is_cancelled()).finish()
    }
}

impl CancelToken {
    /// Returns a token that is not cancelled.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Cancels every call using this token, now and later.
    pub fn cancel(&self) {
        let mut st = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        st.cancelled = true;
        for s in st.streams.values() {
            let _ = s.shutdown(Shutdown::Both);
        }
        for f in st.callbacks.values() {
            f();
        }
    }

    /// Reports whether [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).cancelled
    }

    fn register(&self, stream: &TcpStream) -> Result<u64> {
        let mut st = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if st.cancelled {
            return Err(Error::Cancelled);
        }
        let id = st.next;
        st.next += 1;
        st.streams.insert(id, stream.try_clone().map_err(Error::Io)?);
        Ok(id)
    }

    fn unregister(&self, id: u64) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).streams.remove(&id);
    }

    /// Runs `f` at the cancel; `None` (and `f` never runs) when the token
    /// is cancelled already. Else an id for [`CancelToken::forget`].
    pub(crate) fn on_cancel(&self, f: Box<dyn Fn() + Send>) -> Option<u64> {
        let mut st = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if st.cancelled {
            return None;
        }
        let id = st.next;
        st.next += 1;
        st.callbacks.insert(id, f);
        Some(id)
    }

    pub(crate) fn forget(&self, id: u64) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).callbacks.remove(&id);
    }
}

/// A client of the mutex port at one address. It holds no connection
/// between calls; it is `Send + Sync` and cheap to clone.
#[derive(Clone, Debug)]
pub struct Client {
    addr: String,
    source: Vec<u8>,
    connect_timeout: Option<Duration>,
    read_timeout: Option<Duration>,
}

impl Client {
    /// Returns a client of the mutex port at `addr` ("host:port"), with an
    /// empty source (the server uses the client's IP address),
    /// [`DEFAULT_CONNECT_TIMEOUT`] and [`DEFAULT_READ_TIMEOUT`].
    pub fn new(addr: impl Into<String>) -> Client {
        Client {
            addr: addr.into(),
            source: Vec::new(),
            connect_timeout: Some(DEFAULT_CONNECT_TIMEOUT),
            read_timeout: Some(DEFAULT_READ_TIMEOUT),
        }
    }

    /// Names the owner of this client's locks; reset by source matches it.
    /// At most [`MAX_SOURCE_LEN`] bytes, or every call fails with
    /// [`Error::InvalidSource`].
    pub fn with_source(mut self, source: impl AsRef<[u8]>) -> Client {
        self.source = source.as_ref().to_vec();
        self
    }

    /// Bounds each TCP connect; `None` waits as long as the system does.
    pub fn with_connect_timeout(mut self, timeout: Option<Duration>) -> Client {
        self.connect_timeout = timeout;
        self
    }

    /// Bounds the send and the answer of every call that does not wait for
    /// a key: [`Client::try_lock`], [`Client::unlock`],
    /// [`Client::reset_by_key`], [`Client::reset_by_source`] and the release
    /// of [`Client::wait`]. One that runs out returns [`Error::Io`] of kind
    /// [`io::ErrorKind::TimedOut`]. `None` (or zero) leaves them unbounded.
    /// A lock never has a read timeout: it waits for its key.
    pub fn with_read_timeout(mut self, timeout: Option<Duration>) -> Client {
        self.read_timeout = timeout.filter(|t| !t.is_zero());
        self
    }

    /// The address the client connects to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Blocks until `key` is granted to this client, however long it takes.
    ///
    /// Errors: [`Error::InvalidKey`], [`Error::InvalidSource`],
    /// [`Error::Refused`] (e.g. withdrawn by a reset of the source),
    /// [`Error::Protocol`], [`Error::Io`].
    pub fn lock(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.call(Action::Lock, key.as_ref(), &self.source, Limit::None).map(drop)
    }

    /// As [`Client::lock`], but gives up after `timeout`: the connection is
    /// closed, so the request is withdrawn, and [`Error::Timeout`] returned.
    pub fn lock_timeout(&self, key: impl AsRef<[u8]>, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        self.call(Action::Lock, key.as_ref(), &self.source, Limit::Deadline(deadline)).map(drop)
    }

    /// As [`Client::lock`], but `cancel` can end the wait from another
    /// thread: the request is withdrawn and [`Error::Cancelled`] returned.
    pub fn lock_cancellable(&self, key: impl AsRef<[u8]>, cancel: &CancelToken) -> Result<()> {
        self.call(Action::Lock, key.as_ref(), &self.source, Limit::Cancel(cancel)).map(drop)
    }

    /// Takes `key` only if it is free now: `Ok(true)` when this client now
    /// holds it, `Ok(false)` when another holder has it. Errors as
    /// [`Client::lock`], and [`Error::Io`] of kind
    /// [`io::ErrorKind::TimedOut`] after the read timeout.
    pub fn try_lock(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        let o = self.call(Action::TryLock, key.as_ref(), &self.source, Limit::None)?;
        Ok(o == Outcome::Ok)
    }

    /// Releases `key`, whoever holds it; releasing a free key succeeds.
    pub fn unlock(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.call(Action::Unlock, key.as_ref(), b"", Limit::None).map(drop)
    }

    /// Blocks until `key` is free and returns holding nothing: the key is
    /// taken and released at once.
    pub fn wait(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.lock(key.as_ref())?;
        self.unlock(key)
    }

    /// As [`Client::wait`], giving up after `timeout` with [`Error::Timeout`].
    pub fn wait_timeout(&self, key: impl AsRef<[u8]>, timeout: Duration) -> Result<()> {
        self.lock_timeout(key.as_ref(), timeout)?;
        self.unlock(key)
    }

    /// Takes `key` from its holder; the first parked request gets it.
    pub fn reset_by_key(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.call(Action::ResetKey, key.as_ref(), b"", Limit::None).map(drop)
    }

    /// Releases every key held by `source` and withdraws its parked
    /// requests (their lock calls return [`Error::Refused`]).
    pub fn reset_by_source(&self, source: impl AsRef<[u8]>) -> Result<()> {
        self.call(Action::ResetSource, b"", source.as_ref(), Limit::None).map(drop)
    }

    fn connect(&self, limit: &Limit) -> Result<TcpStream> {
        let mut timeout = self.connect_timeout;
        if let Limit::Deadline(d) = limit {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout);
            }
            timeout = Some(timeout.map_or(left, |t| t.min(left)));
        }
        let timeout = match timeout {
            Some(t) => t,
            None => return TcpStream::connect(&self.addr).map_err(Error::Io),
        };
        let mut last = io::Error::new(io::ErrorKind::InvalidInput, format!("no address for {}", self.addr));
        for a in self.addr.to_socket_addrs().map_err(Error::Io)? {
            match TcpStream::connect_timeout(&a, timeout) {
                Ok(s) => return Ok(s),
                Err(e) => last = e,
            }
        }
        if matches!(limit, Limit::Deadline(_)) && last.kind() == io::ErrorKind::TimedOut {
            return Err(Error::Timeout);
        }
        Err(Error::Io(last))
    }

    fn call(&self, action: Action, key: &[u8], source: &[u8], limit: Limit) -> Result<Outcome> {
        let request = encode_request(action, key, source)?;
        let mut stream = self.connect(&limit)?;
        let registered = match limit {
            Limit::Cancel(c) => Some((c, c.register(&stream)?)),
            _ => None,
        };
        // A lock waits for its key as long as it takes: no read timeout.
        let read_timeout = if action == Action::Lock { None } else { self.read_timeout };
        let result = exchange(&mut stream, &request, &limit, read_timeout);
        if let Some((c, id)) = registered {
            c.unregister(id);
            if result.is_err() && c.is_cancelled() {
                return Err(Error::Cancelled);
            }
        }
        let answer = result?;
        match interpret_answer(action, answer) {
            Outcome::Failed if answer == ANSWER_FAILED => Err(Error::Refused),
            Outcome::Failed => Err(Error::Protocol(answer)),
            o => Ok(o),
        }
    }
}

/// What bounds a call besides the connect timeout.
enum Limit<'a> {
    None,
    Deadline(Instant),
    Cancel(&'a CancelToken),
}

/// Sends the request and reads the one answer byte, each bounded by
/// read_timeout when there is one.
fn exchange(stream: &mut TcpStream, request: &[u8], limit: &Limit, read_timeout: Option<Duration>) -> Result<u8> {
    if let Limit::Deadline(d) = limit {
        let left = d.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Timeout);
        }
        stream.set_read_timeout(Some(left)).map_err(Error::Io)?;
    }
    if read_timeout.is_some() {
        stream.set_read_timeout(read_timeout).map_err(Error::Io)?;
        stream.set_write_timeout(read_timeout).map_err(Error::Io)?;
    }
    // What a timed-out send or read becomes.
    let timed_out = |e: io::Error| match read_timeout {
        Some(t) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
            Error::Io(io::Error::new(io::ErrorKind::TimedOut, format!("no answer within {t:?}")))
        }
        _ => Error::Io(e),
    };
    stream.write_all(request).map_err(timed_out)?;
    let mut answer = [0u8; 1];
    match stream.read(&mut answer) {
        Ok(1) => Ok(answer[0]),
        Ok(_) => Err(Error::Io(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed before the answer"))),
        Err(e)
            if matches!(limit, Limit::Deadline(_))
                && matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) =>
        {
            Err(Error::Timeout)
        }
        Err(e) => Err(timed_out(e)),
    }
}
