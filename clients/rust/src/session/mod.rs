//! The session protocol (docs/protocol.md, "Mutex port, session protocol
//! (v2)"), with threads.
//!
//! A [`Session`] keeps one TCP connection to the mutex port. Two threads
//! serve it: a reader that routes each frame from the server to the
//! request it answers, by request id, and a driver that writes what the
//! session queued, pings when the connection is idle, ends locks at their
//! lease deadlines, and reconnects and resumes the session when the
//! connection drops or goes silent. Every lock of the session is a
//! [`LockGuard`].
//!
//! Here: the session's state and the requests its callers make; in
//! `reader.rs` the frames from the server and the reconciliation after a
//! resume; in `driver.rs` the writes, the deadlines and the resume; in
//! `conn.rs` dialling and reading frames; in `guard.rs` the guard.
//!
//! ```no_run
//! use locking_center::session::{AcquireOptions, Session, SessionOptions};
//!
//! let session = Session::connect("localhost:22119", SessionOptions::default().name("billing"))?;
//! let lock = session.acquire("orders/batch-7", AcquireOptions::new())?;
//! // ... give lock.token() to the resource with every write ...
//! lock.release()?;
//! session.close()?;
//! # Ok::<(), locking_center::session::Error>(())
//! ```

mod conn;
mod driver;
mod error;
mod guard;
mod options;
mod reader;

pub use error::{Error, LostReason, Result};
pub use guard::LockGuard;
pub use options::{
    AcquireOptions, SessionOptions, DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT, MAX_NAME_LEN, MAX_NOTE_LEN,
};

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use crate::frame::{tag, typ, Field, Frame, PREFACE};
use conn::{addresses, Route};
use guard::Cell;
use options::{check_key, millis};

/// The delay the client allows between the server's measuring of a
/// `left_ms` and the reading of its frame here: a lease is counted from
/// the frame's arrival less this bound, or from the sending of the request
/// when that is later.
pub const DELIVERY_BOUND: Duration = Duration::from_millis(100);

/// What the client takes off a duration the server measures, for the drift
/// between the two clocks: a tenth, at least 50 ms, at most half.
pub fn margin(d: Duration) -> Duration {
    (d / 10).max(Duration::from_millis(50)).min(d / 2)
}

/// How long a connection may bring nothing before the session counts it
/// dead, for the server's keepalive `k`: `k` plus a tenth of it, at least
/// 250 ms. It also bounds each attempt of a resume.
pub fn silence(k: Duration) -> Duration {
    k + (k / 10).max(Duration::from_millis(250))
}

/// Released tokens remembered, so that releasing one again is no error.
const RELEASED_MEMORY: usize = 4096;

/// A session with a Locking-Center server. It is `Send + Sync`: share it
/// (by reference or in an `Arc`) among threads. Dropping it closes it, as
/// [`Session::close`] does.
pub struct Session {
    inner: Arc<Inner>,
}

/// What the server gave the session at its HELLO, and its state.
struct Inner {
    opts: SessionOptions,
    id: u64,
    secret: Vec<u8>,
    ttl: Duration,
    keepalive: Duration,
    st: Mutex<State>,
    /// Wakes the driver: something to write, a deadline moved, the end.
    wake: Condvar,
}

/// Everything of the session that changes, under one lock.
struct State {
    /// Every address to try, in turn, and the index of the next.
    addrs: Vec<String>,
    at: usize,
    /// The leader a GOODBYE `not_leader` named: tried first.
    leader: Option<String>,
    /// The address whose connection last went silent, and until when it
    /// is neither tried nor followed.
    shunned: Option<(String, Instant)>,
    /// The attached connection; `None` while the session resumes.
    conn: Option<Conn>,
    /// Counts connections: a reader whose connection is no longer the
    /// attached one stops.
    generation: u64,
    /// When the attached connection last brought a frame.
    heard: Instant,
    /// Frames queued for the attached connection.
    out: Vec<u8>,
    /// The last request id used.
    next_id: u64,
    /// Requests sent or to send, not answered, by id.
    inflight: BTreeMap<u64, Request>,
    /// The locks the server holds for the session, by token.
    holds: HashMap<u64, Hold>,
    /// Tokens of orphaned locks: a resume does not release them.
    let_go: HashSet<u64>,
    /// Tokens released lately (at most `RELEASED_MEMORY`), oldest first in
    /// `released_order`.
    released: HashSet<u64>,
    released_order: VecDeque<u64>,
    /// When the latest request the server answered was sent: the server
    /// had heard from the session then.
    last_ack: Instant,
    /// The PING in flight: its id and when it went.
    ping: Option<(u64, Instant)>,
    /// Between a resume's WELCOME and the answer to its PING.
    replay: Option<Replay>,
    /// Why the session ended; `None` while it lives.
    ended: Option<Error>,
    /// The state of the backoff's jitter.
    seed: u64,
    /// A thread writes `out` now (a caller, or the driver).
    writing: bool,
    /// A thread resumes the session now.
    reconnecting: bool,
    /// Answers the reader hands over once it lets go of the lock.
    pending: Vec<(Sender<Reply>, Reply)>,
}

/// The attached connection.
struct Conn {
    generation: u64,
    addr: String,
    stream: Arc<TcpStream>,
}

/// What a caller waiting for an answer hears.
enum Reply {
    /// A grant: the token, the new guard's cell, the reentrancy count.
    Granted(u64, Arc<Cell>, u32),
    /// A try found the key held.
    Busy,
    /// Any other answer, and every failure.
    Done(Result<()>),
    /// Sent by a [`CancelToken`](crate::CancelToken).
    CancelAsked,
}

/// One request, from its queuing until its answer.
struct Request {
    typ: u8,
    /// Its bytes, to send again after a drop.
    frame: Vec<u8>,
    /// When it was queued.
    sent_at: Instant,
    /// Queued on a connection: it may have arrived.
    sent: bool,
    /// Sent again after a resume: a `duplicate` for it is the old
    /// connection's, applied after all.
    resent: bool,
    /// Who waits for the answer; `None`: nobody.
    reply: Option<Sender<Reply>>,
    /// The key of an acquire, release or renew.
    key: Vec<u8>,
    /// The token of a release or renew.
    token: u64,
    /// The acquire a CANCEL cancels.
    target: u64,
    /// An acquire with `reentrant`.
    reentrant: bool,
    /// An acquire whose caller gave up: a grant is released.
    abandoned: bool,
    /// A release that a [`Session::release`] by token asked for: stale
    /// for a token released here is no error.
    by_token: bool,
    /// A release at the client's end of the lease.
    lapse: bool,
}

impl Request {
    fn new(typ: u8) -> Request {
        Request {
            typ,
            frame: Vec::new(),
            sent_at: Instant::now(),
            sent: false,
            resent: false,
            reply: None,
            key: Vec::new(),
            token: 0,
            target: 0,
            reentrant: false,
            abandoned: false,
            by_token: false,
            lapse: false,
        }
    }
}

/// A lock the server holds for the session, with the guards that count in
/// it (more than one after reentrant acquires).
struct Hold {
    key: Vec<u8>,
    cells: Vec<Arc<Cell>>,
    deadline: Option<Instant>,
}

/// What a resume's WELCOME said, kept until the answer to the PING sent
/// with the RESUME: every frame the server owed the session comes first.
struct Replay {
    sent_at: Instant,
    sync: u64,
    applied: u64,
    held: HashMap<u64, Held>,
    by_request: HashMap<u64, u64>,
    parked: HashSet<u64>,
    fresh: HashSet<u64>,
}

struct Held {
    key: Vec<u8>,
    count: u32,
    left: Option<Duration>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Session {
    /// Connects to the mutex port at `addr` ("host:port", or a comma list
    /// of the nodes of a cluster) and opens a session. With several
    /// addresses it tries each in turn and follows a node that names the
    /// leader (GOODBYE `not_leader`). Each attempt is bounded by the
    /// connect and read timeouts.
    pub fn connect(addr: &str, opts: SessionOptions) -> Result<Session> {
        opts.check()?;
        let addrs = addresses(addr);
        if addrs.is_empty() {
            return Err(Error::InvalidArgument(format!("no address in {addr:?}")));
        }
        let mut hello = vec![Field::bytes(tag::NAME, &opts.name)];
        if let Some(ttl) = opts.ttl.filter(|t| !t.is_zero()) {
            hello.push(Field::u32(tag::TTL_MS, millis(ttl)));
        }
        if let Some(t) = &opts.token {
            hello.push(Field::bytes(tag::CREDENTIAL, t));
        }
        let mut first = PREFACE.to_vec();
        Frame::new(typ::HELLO, 1, hello).encode_into(&mut first);
        let bound = opts.connect_timeout + opts.read_timeout;
        let mut route = Route { addrs, at: 0, leader: None };
        let sent_at = Instant::now();
        let (stream, rd, w) = route.open(&first, &opts, bound)?;
        let (id, secret, ttl_ms) = match (w.uint(tag::SESSION), w.get(tag::SECRET), w.uint(tag::TTL_MS)) {
            (Some(id), Some(secret), Some(ttl_ms)) => (id, secret, ttl_ms),
            _ => return Err(Error::Protocol("a WELCOME without a session, secret or TTL".into())),
        };
        let ttl = Duration::from_millis(ttl_ms.max(1));
        let mut keepalive = Duration::from_millis(w.uint(tag::KEEPALIVE_MS).unwrap_or(0));
        if keepalive.is_zero() || keepalive > ttl {
            keepalive = ttl / 3;
        }
        let _ = stream.set_write_timeout(Some(silence(keepalive)));
        let addr_used = route.current();
        let now = Instant::now();
        let st = State {
            addrs: route.addrs,
            at: route.at,
            leader: None,
            shunned: None,
            conn: Some(Conn { generation: 1, addr: addr_used, stream: stream.clone() }),
            generation: 1,
            heard: now,
            out: Vec::new(),
            next_id: 1,
            inflight: BTreeMap::new(),
            holds: HashMap::new(),
            let_go: HashSet::new(),
            released: HashSet::new(),
            released_order: VecDeque::new(),
            last_ack: sent_at,
            ping: None,
            replay: None,
            ended: None,
            writing: false,
            reconnecting: false,
            pending: Vec::new(),
            seed: (id ^ (now.elapsed().as_nanos() as u64)) | 1,
        };
        let inner = Arc::new(Inner {
            opts,
            id,
            secret: secret.to_vec(),
            ttl,
            keepalive,
            st: Mutex::new(st),
            wake: Condvar::new(),
        });
        inner.start_reader(1, rd);
        let driver = inner.clone();
        thread::Builder::new().name("lc-session-driver".into()).spawn(move || driver.drive()).map_err(Error::Io)?;
        Ok(Session { inner })
    }

    /// The session's id on the server.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The TTL the server granted.
    pub fn ttl(&self) -> Duration {
        self.inner.ttl
    }

    /// The interval at which the session pings an idle connection.
    pub fn keepalive(&self) -> Duration {
        self.inner.keepalive
    }

    /// `None` while the session lives, then why it ended.
    pub fn ended(&self) -> Option<Error> {
        lock(&self.inner.st).ended.as_ref().map(Error::duplicate)
    }

    /// The address of the connection attached now, if any.
    pub fn address(&self) -> Option<String> {
        lock(&self.inner.st).conn.as_ref().map(|c| c.addr.clone())
    }

    /// Waits until the session holds `key`, however long that takes,
    /// through reconnections, unless `opts` bounds the wait
    /// ([`AcquireOptions::wait`], enforced by the server) or gives a
    /// [`CancelToken`](crate::CancelToken).
    pub fn acquire(&self, key: impl AsRef<[u8]>, opts: AcquireOptions) -> Result<LockGuard> {
        let wait = opts.wait;
        match self.inner.acquire(key.as_ref(), opts, None)? {
            Some(g) => Ok(g),
            None => Err(Error::Timeout(format!("the key was busy for the wait of {wait:?}"))),
        }
    }

    /// Takes `key` only if it is free now: `Ok(None)` when it is held (or in
    /// its lock-delay). The answer is bounded by the read timeout.
    pub fn try_acquire(&self, key: impl AsRef<[u8]>, mut opts: AcquireOptions) -> Result<Option<LockGuard>> {
        opts.wait = Some(Duration::ZERO);
        let bound = self.inner.opts.read_timeout;
        self.inner.acquire(key.as_ref(), opts, Some(bound))
    }

    /// Releases the session's lock of `key` by its fencing token (one
    /// orphaned, or kept across a restart of the program's logic). A token
    /// released here before is no error; one the session does not hold is
    /// [`Error::LockLost`] with [`LostReason::StaleToken`].
    pub fn release(&self, key: impl AsRef<[u8]>, token: u64) -> Result<()> {
        let key = key.as_ref();
        check_key(key)?;
        let (tx, rx) = mpsc::channel();
        {
            let mut g = lock(&self.inner.st);
            if let Some(e) = &g.ended {
                return Err(e.duplicate());
            }
            g.let_go.remove(&token);
            if let Some(h) = g.holds.remove(&token) {
                for c in &h.cells {
                    c.end(LostReason::SessionClosed, "released by its token");
                }
            }
            let mut r = Request::new(typ::RELEASE);
            r.by_token = true;
            self.inner.enqueue_release(&mut g, key, token, Some(tx), r);
            self.inner.flush(g);
        }
        self.inner.await_done(&rx, "release")
    }

    /// Ends the session: CLOSE releases every lock at once and withdraws
    /// every waiting request. Waits for the answer at most the read
    /// timeout; locks end with [`LostReason::SessionClosed`]. Calling it
    /// again returns `Ok(())`.
    pub fn close(&self) -> Result<()> {
        self.inner.close()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.inner.close();
    }
}

impl Inner {
    fn silence(&self) -> Duration {
        silence(self.keepalive)
    }

    fn lost_deadline(&self, g: &State) -> Instant {
        g.last_ack + self.ttl - margin(self.ttl)
    }

    /// Gives `r` the next request id and queues its frame for the attached
    /// connection; without one it waits in `inflight` for the next. The
    /// caller then writes it ([`Inner::flush`]) or wakes the driver.
    fn enqueue(&self, g: &mut State, mut r: Request, fields: Vec<Field>) -> u64 {
        g.next_id += 1;
        let id = g.next_id;
        r.sent_at = Instant::now();
        r.frame = Frame::new(r.typ, id, fields).encode();
        if g.conn.is_some() {
            g.out.extend_from_slice(&r.frame);
            r.sent = true;
        }
        g.inflight.insert(id, r);
        id
    }

    /// Writes what is queued on the attached connection, unless another
    /// thread is writing (it takes this too, before it stops), and lets go
    /// of the lock `g`. For callers that wait for an answer anyway: one
    /// thread hop less than the driver's write.
    fn flush<'a>(&'a self, mut g: MutexGuard<'a, State>) {
        if g.writing {
            return;
        }
        g.writing = true;
        loop {
            let stream = match g.conn.as_ref() {
                Some(c) if !g.out.is_empty() => c.stream.clone(),
                _ => break,
            };
            let out = std::mem::take(&mut g.out);
            drop(g);
            if (&*stream).write_all(&out).is_err() {
                let _ = stream.shutdown(Shutdown::Both); // the reader sees it and detaches
            }
            g = lock(&self.st);
        }
        g.writing = false;
    }

    /// Wakes the driver, which writes what is queued: for what must not
    /// wait for the network (a guard's drop, the reader).
    fn poke(&self) {
        self.wake.notify_all();
    }

    fn enqueue_release(&self, g: &mut State, key: &[u8], token: u64, reply: Option<Sender<Reply>>, mut r: Request) {
        r.key = key.to_vec();
        r.token = token;
        r.reply = reply;
        let mut fields = vec![Field::bytes(tag::KEY, key), Field::u64(tag::TOKEN, token)];
        if r.lapse {
            fields.push(Field::u8(tag::LAPSE, 1));
        }
        self.enqueue(g, r, fields);
    }

    /// A RELEASE nobody waits for, written by the driver.
    fn release_quietly(&self, g: &mut State, key: &[u8], token: u64) {
        self.enqueue_release(g, key, token, None, Request::new(typ::RELEASE));
        self.poke();
    }

    fn remember_released(g: &mut State, token: u64) {
        if g.released.insert(token) {
            g.released_order.push_back(token);
            if g.released_order.len() > RELEASED_MEMORY {
                if let Some(old) = g.released_order.pop_front() {
                    g.released.remove(&old);
                }
            }
        }
    }

    fn acquire(
        self: &Arc<Self>,
        key: &[u8],
        opts: AcquireOptions,
        bound: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        let fields = opts.fields(key)?;
        let (tx, rx) = mpsc::channel();
        let mut registered = None;
        if let Some(c) = &opts.cancel {
            let tx = tx.clone();
            match c.on_cancel(Box::new(move || {
                let _ = tx.send(Reply::CancelAsked);
            })) {
                Some(id) => registered = Some((c.clone(), id)),
                None => return Err(Error::Cancelled("cancelled before the acquire was sent".into())),
            }
        }
        let id = {
            let mut g = lock(&self.st);
            if let Some(e) = &g.ended {
                return Err(e.duplicate());
            }
            let mut r = Request::new(typ::ACQUIRE);
            r.key = key.to_vec();
            r.reentrant = opts.reentrant;
            r.reply = Some(tx);
            let id = self.enqueue(&mut g, r, fields);
            self.flush(g);
            id
        };
        let got = match bound {
            Some(b) => rx.recv_timeout(b).map_err(|e| e == RecvTimeoutError::Timeout),
            None => rx.recv().map_err(|_| false),
        };
        if let Some((c, rid)) = registered {
            c.forget(rid);
        }
        let gave_up = match &got {
            Ok(Reply::CancelAsked) => Some(true),
            Err(true) => Some(false),
            _ => None,
        };
        let reply = match got {
            _ if gave_up.is_some() => {
                let cancelled = gave_up == Some(true);
                let mut g = lock(&self.st);
                // An answer that crossed the cancel, or one on its way
                // from the reader when the request is no longer in flight.
                let mut late = answer_in(&rx, Duration::ZERO);
                if late.is_none() {
                    if self.abandon(&mut g, id) {
                        self.poke();
                    } else {
                        drop(g);
                        late = answer_in(&rx, self.opts.read_timeout);
                        g = lock(&self.st);
                    }
                }
                match late {
                    Some(Reply::Granted(token, cell, _)) => {
                        self.drop_cell(&mut g, token, &cell);
                        cell.end(LostReason::SessionClosed, "released: the acquire was given up");
                        self.release_quietly(&mut g, key, token);
                    }
                    Some(Reply::Done(Err(e))) => return Err(e),
                    Some(Reply::Busy) => return Ok(None),
                    _ => {}
                }
                return Err(if cancelled {
                    Error::Cancelled(format!("acquire {}: cancelled", String::from_utf8_lossy(key)))
                } else {
                    Error::Timeout(format!(
                        "acquire {}: no answer within {:?}",
                        String::from_utf8_lossy(key),
                        bound.unwrap_or_default()
                    ))
                });
            }
            Err(_) => return Err(Error::Closed("the session ended".into())),
            Ok(r) => r,
        };
        match reply {
            Reply::Granted(token, cell, count) => {
                Ok(Some(LockGuard { session: self.clone(), key: key.to_vec(), token, count, cell, live: true }))
            }
            Reply::Busy => Ok(None),
            Reply::Done(Err(e)) => Err(e),
            Reply::Done(Ok(())) | Reply::CancelAsked => {
                Err(Error::Protocol("an acquire answered without a grant".into()))
            }
        }
    }

    /// Gives up an acquire whose caller has gone: one that never left the
    /// client is forgotten, another is cancelled on the server. False when
    /// it was answered already.
    fn abandon(&self, g: &mut State, id: u64) -> bool {
        let r = match g.inflight.get_mut(&id) {
            Some(r) => r,
            None => return false,
        };
        if !r.sent {
            g.inflight.remove(&id);
            return true;
        }
        r.abandoned = true;
        r.reply = None;
        let mut c = Request::new(typ::CANCEL);
        c.target = id;
        self.enqueue(g, c, vec![Field::u64(tag::TARGET, id)]);
        true
    }

    /// Waits for the answer to a request that waits for no key, within the
    /// read timeout.
    fn await_done(&self, rx: &Receiver<Reply>, what: &str) -> Result<()> {
        match rx.recv_timeout(self.opts.read_timeout) {
            Ok(Reply::Done(r)) => r,
            Ok(_) => Err(Error::Protocol(format!("{what}: an answer of another kind"))),
            Err(RecvTimeoutError::Timeout) => Err(Error::Timeout(format!(
                "{what}: no answer within {:?}; it is sent again after a reconnect",
                self.opts.read_timeout
            ))),
            Err(RecvTimeoutError::Disconnected) => Err(Error::Closed(format!("{what}: the session ended"))),
        }
    }

    /// Takes `cell` out of the hold of `token`; the hold goes with its last.
    fn drop_cell(&self, g: &mut State, token: u64, cell: &Arc<Cell>) -> bool {
        let h = match g.holds.get_mut(&token) {
            Some(h) => h,
            None => return false,
        };
        let before = h.cells.len();
        h.cells.retain(|c| !Arc::ptr_eq(c, cell));
        let found = h.cells.len() != before;
        if h.cells.is_empty() {
            g.holds.remove(&token);
        }
        found
    }

    fn end_hold(g: &mut State, token: u64, reason: LostReason, why: &str) {
        if let Some(h) = g.holds.remove(&token) {
            for c in &h.cells {
                c.end(reason, why);
            }
        }
    }

    /// Ends the session for `err`: every lock with `reason`, every request
    /// with the error.
    fn end(&self, g: &mut State, err: Error, reason: LostReason) {
        if g.ended.is_some() {
            return;
        }
        let why = err.message();
        for (_, h) in g.holds.drain() {
            for c in &h.cells {
                c.end(reason, &why);
            }
        }
        for (_, r) in std::mem::take(&mut g.inflight) {
            if let Some(tx) = r.reply {
                let _ = tx.send(Reply::Done(Err(err.duplicate())));
            }
        }
        if let Some(c) = g.conn.take() {
            let _ = c.stream.shutdown(Shutdown::Both);
        }
        g.ended = Some(err);
        self.wake.notify_all();
    }

    fn close(&self) -> Result<()> {
        let (tx, rx) = mpsc::channel();
        {
            let mut g = lock(&self.st);
            if g.ended.is_some() {
                return Ok(());
            }
            let mut r = Request::new(typ::CLOSE);
            r.reply = Some(tx);
            self.enqueue(&mut g, r, Vec::new());
            self.flush(g);
        }
        let res = self.await_done(&rx, "close");
        let mut g = lock(&self.st);
        self.end(&mut g, Error::Closed("the session was closed".into()), LostReason::SessionClosed);
        res
    }

    fn ack(&self, g: &mut State, sent_at: Instant) {
        if sent_at > g.last_ack {
            g.last_ack = sent_at;
        }
    }

    /// The earliest time at which the server can have measured a `left_ms`
    /// that arrives now in the answer to a request sent at `sent_at`.
    fn measured_at(sent_at: Instant) -> Instant {
        let now = Instant::now();
        match now.checked_sub(DELIVERY_BOUND) {
            Some(from) if from > sent_at => from,
            _ => sent_at,
        }
    }
}

/// The answer `rx` has within `wait`, passing over the cancel's messages.
fn answer_in(rx: &Receiver<Reply>, wait: Duration) -> Option<Reply> {
    let deadline = Instant::now() + wait;
    loop {
        let r = match deadline.checked_duration_since(Instant::now()) {
            Some(left) if !left.is_zero() => rx.recv_timeout(left).ok(),
            _ => rx.try_recv().ok(),
        };
        match r {
            Some(Reply::CancelAsked) => continue,
            other => return other,
        }
    }
}

/// Hands `r` to the caller of `reply` once the reader lets go of the lock.
fn deliver(g: &mut State, reply: Option<Sender<Reply>>, r: Reply) {
    if let Some(tx) = reply {
        g.pending.push((tx, r));
    }
}

/// Chatter for whoever runs with `LC_DEBUG` set.
fn eprintln_debug(msg: &str) {
    if std::env::var_os("LC_DEBUG").is_some() {
        eprintln!("locking_center: {msg}");
    }
}
