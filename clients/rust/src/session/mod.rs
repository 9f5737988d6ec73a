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

mod error;
mod options;

pub use error::{Error, LostReason, Result};
pub use options::{
    AcquireOptions, SessionOptions, DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT, MAX_NAME_LEN, MAX_NOTE_LEN,
};

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use crate::frame::{self, code, find, find_uint, tag, typ, Field, FormatError, Frame, PREFACE};
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

struct State {
    addrs: Vec<String>,
    at: usize,
    leader: Option<String>,
    /// The address whose connection last went silent, and until when it
    /// is neither tried nor followed.
    shunned: Option<(String, Instant)>,
    conn: Option<Conn>,
    generation: u64,
    heard: Instant,
    out: Vec<u8>,
    next_id: u64,
    inflight: BTreeMap<u64, Request>,
    holds: HashMap<u64, Hold>,
    let_go: HashSet<u64>,
    released: HashSet<u64>,
    released_order: VecDeque<u64>,
    last_ack: Instant,
    ping: Option<(u64, Instant)>,
    replay: Option<Replay>,
    ended: Option<Error>,
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
    Granted(u64, Arc<Cell>, u32),
    Busy,
    Done(Result<()>),
    /// Sent by a [`CancelToken`](crate::CancelToken).
    CancelAsked,
}

/// One request, from its queuing until its answer.
struct Request {
    typ: u8,
    frame: Vec<u8>,
    sent_at: Instant,
    sent: bool,
    resent: bool,
    reply: Option<Sender<Reply>>,
    key: Vec<u8>,
    token: u64,
    target: u64,
    reentrant: bool,
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

/// What one guard knows of its lock's end.
struct Cell {
    lost: Mutex<Option<(LostReason, String)>>,
    changed: Condvar,
}

impl Cell {
    fn new() -> Arc<Cell> {
        Arc::new(Cell { lost: Mutex::new(None), changed: Condvar::new() })
    }
    fn end(&self, reason: LostReason, why: &str) {
        let mut l = lock(&self.lost);
        if l.is_none() {
            *l = Some((reason, why.to_string()));
            self.changed.notify_all();
        }
    }
    fn reason(&self) -> Option<(LostReason, String)> {
        lock(&self.lost).clone()
    }
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

/// A handshake that did not open or resume the session.
enum Failure {
    Goodbye { code: u64, message: String, leader: String },
    Other(Error),
}

impl Failure {
    fn error(&self) -> Error {
        match self {
            Failure::Goodbye { code, message, .. } => {
                Error::refused(*code, format!("the server said goodbye: {message}"))
            }
            Failure::Other(e) => e.duplicate(),
        }
    }
    /// Whether another node, or a later try, may do better.
    fn retry(&self) -> bool {
        match self {
            Failure::Goodbye { code: c, .. } => matches!(
                *c,
                code::SHUTTING_DOWN | code::SESSION_ENDED | code::RATE_LIMITED | code::OVER_LIMIT | code::NOT_LEADER
            ),
            Failure::Other(Error::Protocol(_)) | Failure::Other(Error::Refused { .. }) => false,
            Failure::Other(_) => true,
        }
    }
}

/// Reads whole frames from a connection.
struct FrameReader {
    stream: Arc<TcpStream>,
    buf: Vec<u8>,
    start: usize,
    chunk: Box<[u8]>,
}

enum ReadError {
    Io(io::Error),
    Format(FormatError),
}

impl FrameReader {
    fn new(stream: Arc<TcpStream>) -> FrameReader {
        FrameReader { stream, buf: Vec::new(), start: 0, chunk: vec![0; 64 * 1024].into_boxed_slice() }
    }

    /// The next whole frame of what was read, if there is one.
    fn buffered(&mut self) -> std::result::Result<Option<Frame>, ReadError> {
        match frame::decode(&self.buf[self.start..]) {
            Ok(Some((f, n))) => {
                self.start += n;
                if self.start == self.buf.len() {
                    self.buf.clear();
                    self.start = 0;
                }
                Ok(Some(f))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(ReadError::Format(e)),
        }
    }

    /// Reads what the connection has, waiting for at least a byte.
    fn fill(&mut self) -> std::result::Result<(), ReadError> {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        match (&*self.stream).read(&mut self.chunk) {
            Ok(0) => {
                Err(ReadError::Io(io::Error::new(io::ErrorKind::UnexpectedEof, "the server closed the connection")))
            }
            Ok(n) => {
                self.buf.extend_from_slice(&self.chunk[..n]);
                Ok(())
            }
            Err(e) => Err(ReadError::Io(e)),
        }
    }

    fn next(&mut self) -> std::result::Result<Frame, ReadError> {
        loop {
            if let Some(f) = self.buffered()? {
                return Ok(f);
            }
            self.fill()?;
        }
    }

    /// The next frame, and the MORE frames that continue it, joined.
    fn answer(&mut self) -> std::result::Result<Frame, ReadError> {
        let mut f = self.next()?;
        while f.get(tag::MORE) == Some(&[1]) {
            f.fields.retain(|x| x.tag != tag::MORE);
            let m = self.next()?;
            if m.typ != typ::MORE || m.id != f.id {
                return Err(ReadError::Format(FormatError(format!(
                    "frame 0x{:02x} id {} where the MORE of id {} belongs",
                    m.typ, m.id, f.id
                ))));
            }
            f.fields.extend(m.fields);
        }
        f.fields.retain(|x| x.tag != tag::MORE);
        Ok(f)
    }
}

/// The addresses of a comma list, blanks dropped, each once, in order.
fn addresses(list: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in list.split(',').map(str::trim).filter(|a| !a.is_empty()) {
        if !out.iter().any(|o| o == a) {
            out.push(a.to_string());
        }
    }
    out
}

fn timed_out(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut)
}

/// Dials `addr`, writes `first` and reads the answer: a WELCOME (with its
/// MORE frames), all within `bound`.
fn handshake(
    addr: &str,
    first: &[u8],
    opts: &SessionOptions,
    bound: Duration,
) -> std::result::Result<(Arc<TcpStream>, FrameReader, Frame), Failure> {
    let deadline = Instant::now() + bound;
    let io_err = |e: io::Error| Failure::Other(Error::Io(io::Error::new(e.kind(), format!("{addr}: {e}"))));
    let sockets = addr.to_socket_addrs().map_err(io_err)?;
    let mut last = io::Error::new(io::ErrorKind::InvalidInput, "no address");
    let mut stream = None;
    for sa in sockets {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match TcpStream::connect_timeout(&sa, opts.connect_timeout.min(left)) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = e,
        }
    }
    let stream = match stream {
        Some(s) => s,
        None if timed_out(&last) => {
            return Err(Failure::Other(Error::Timeout(format!("{addr}: no connection within the bound: {last}"))));
        }
        None => return Err(io_err(last)),
    };
    let _ = stream.set_nodelay(true);
    let left = deadline.saturating_duration_since(Instant::now()).min(opts.read_timeout).max(Duration::from_millis(1));
    stream.set_read_timeout(Some(left)).map_err(io_err)?;
    stream.set_write_timeout(Some(left)).map_err(io_err)?;
    let stream = Arc::new(stream);
    let mut rd = FrameReader::new(stream.clone());
    let silent = |what: &str| Failure::Other(Error::Timeout(format!("{addr}: no {what} within {left:?}")));
    if let Err(e) = (&*stream).write_all(first) {
        return Err(if timed_out(&e) { silent("write") } else { io_err(e) });
    }
    let f = match rd.answer() {
        Ok(f) => f,
        Err(ReadError::Io(e)) if timed_out(&e) => return Err(silent("answer")),
        Err(ReadError::Io(_)) if rd.buf.get(rd.start..) == Some(b"-") => {
            return Err(Failure::Other(Error::Protocol(format!(
                "{addr}: '-' to the session protocol's preface (a server without sessions?)"
            ))))
        }
        Err(ReadError::Io(e)) => return Err(io_err(e)),
        Err(ReadError::Format(e)) => return Err(Failure::Other(Error::Protocol(format!("{addr}: {e}")))),
    };
    match f.typ {
        typ::WELCOME => {
            stream.set_read_timeout(None).map_err(io_err)?;
            Ok((stream, rd, f))
        }
        typ::GOODBYE => Err(Failure::Goodbye {
            code: f.uint(tag::CODE).unwrap_or(0),
            message: f.text(tag::MESSAGE),
            leader: f.text(tag::LEADER),
        }),
        typ::REFUSED => {
            let c = f.uint(tag::CODE).unwrap_or(0);
            Err(Failure::Other(Error::Refused {
                code: c,
                message: format!("the server refused the session's first frame: {}", f.text(tag::MESSAGE)),
            }))
        }
        other => Err(Failure::Other(Error::Protocol(format!("{addr}: frame 0x{other:02x} before the WELCOME")))),
    }
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

/// The addresses of a session and which to try next.
struct Route {
    addrs: Vec<String>,
    at: usize,
    leader: Option<String>,
}

impl Route {
    fn current(&self) -> String {
        self.leader.clone().unwrap_or_else(|| self.addrs[self.at].clone())
    }

    /// Notes a failed handshake at `addr`: the next try goes to the leader
    /// it named, or to the next address.
    fn failed(&mut self, addr: &str, f: &Failure) {
        if self.leader.as_deref() == Some(addr) {
            self.leader = None;
        } else if self.addrs[self.at] == addr {
            self.at = (self.at + 1) % self.addrs.len();
        }
        if let Failure::Goodbye { code: code::NOT_LEADER, leader, .. } = f {
            if !leader.is_empty() && leader != addr {
                self.leader = Some(leader.clone());
            }
        }
    }

    /// Sends `first` to each address in turn, following a node that names
    /// the leader, until one answers WELCOME.
    fn open(
        &mut self,
        first: &[u8],
        opts: &SessionOptions,
        bound: Duration,
    ) -> Result<(Arc<TcpStream>, FrameReader, Frame)> {
        let mut last = None;
        for _ in 0..2 * self.addrs.len() + 1 {
            let addr = self.current();
            match handshake(&addr, first, opts, bound) {
                Ok(x) => return Ok(x),
                Err(f) => {
                    self.failed(&addr, &f);
                    let retry = f.retry();
                    last = Some(f);
                    if !retry || (self.leader.is_none() && self.at == 0) {
                        break;
                    }
                }
            }
        }
        Err(last.map_or_else(|| Error::NotLeader("no address".into()), |f| f.error()))
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

    // --- the reader ---

    fn start_reader(self: &Arc<Self>, generation: u64, mut rd: FrameReader) {
        let me = self.clone();
        let spawned = thread::Builder::new().name("lc-session-reader".into()).spawn(move || {
            // Every whole frame of a read under one hold of the lock; the
            // callers are woken after it.
            let mut go_on = true;
            while go_on {
                let mut g = lock(&me.st);
                if g.generation != generation || g.conn.is_none() {
                    break;
                }
                g.heard = Instant::now();
                loop {
                    match rd.buffered() {
                        Ok(Some(f)) => {
                            if me.handle(&mut g, f) {
                                continue;
                            }
                            go_on = false;
                        }
                        Ok(None) => {}
                        Err(e) => {
                            if let ReadError::Format(e) = e {
                                eprintln_debug(&format!("session {}: dropping a connection: {e}", me.id));
                            }
                            go_on = false;
                        }
                    }
                    break;
                }
                let pending = std::mem::take(&mut g.pending);
                drop(g);
                me.hand_over(pending);
                if go_on && rd.fill().is_err() {
                    break;
                }
            }
            let mut g = lock(&me.st);
            me.detach(&mut g, generation);
            let _ = rd.stream.shutdown(Shutdown::Both);
        });
        if spawned.is_err() {
            let mut g = lock(&self.st);
            self.detach(&mut g, generation);
        }
    }

    /// Wakes the callers of the answers in `pending`. A grant whose caller
    /// has gone (it gave up the wait as the grant came) is released.
    fn hand_over(&self, pending: Vec<(Sender<Reply>, Reply)>) {
        for (tx, r) in pending {
            if let Err(mpsc::SendError(Reply::Granted(token, cell, _))) = tx.send(r) {
                let mut g = lock(&self.st);
                if let Some(key) = g.holds.get(&token).map(|h| h.key.clone()) {
                    if self.drop_cell(&mut g, token, &cell) {
                        self.release_quietly(&mut g, &key, token);
                    }
                }
            }
        }
    }

    fn detach(&self, g: &mut State, generation: u64) {
        if g.generation == generation {
            if let Some(c) = g.conn.take() {
                let _ = c.stream.shutdown(Shutdown::Both);
            }
            g.out.clear();
            g.ping = None;
            g.replay = None;
            self.wake.notify_all();
        }
    }

    /// Applies one frame from the attached connection; false: stop reading
    /// it.
    fn handle(self: &Arc<Self>, g: &mut State, f: Frame) -> bool {
        match f.typ {
            typ::GRANTED | typ::OK | typ::REFUSED | typ::INFO => {
                if let Some((id, sent_at)) = g.ping {
                    if id == f.id {
                        self.ack(g, sent_at);
                        g.ping = None;
                        return true;
                    }
                }
                if g.replay.as_ref().map_or(false, |r| r.sync == f.id) {
                    self.reconcile(g);
                    return true;
                }
                let c = f.uint(tag::CODE).unwrap_or(0);
                let r = match g.inflight.get(&f.id) {
                    Some(r) => r,
                    None => return true,
                };
                if f.typ == typ::REFUSED && c == code::DUPLICATE && r.resent {
                    return true; // the old connection applied it: its answer comes too
                }
                let r = g.inflight.remove(&f.id).expect("looked up above");
                self.ack(g, r.sent_at);
                self.answer(g, r, &f, c);
                true
            }
            typ::LOST => {
                self.lost(g, &f);
                true
            }
            typ::GOODBYE => {
                let c = f.uint(tag::CODE).unwrap_or(0);
                let msg = format!("the server said goodbye: {}", f.text(tag::MESSAGE));
                match c {
                    code::SESSION_EXPIRED | code::UNKNOWN_SESSION => {
                        self.end(g, Error::SessionExpired(msg), LostReason::SessionExpired);
                    }
                    code::PROTOCOL_ERROR => self.end(g, Error::Protocol(msg), LostReason::SessionClosed),
                    code::UNAUTHENTICATED => self.end(g, Error::Unauthenticated(msg), LostReason::SessionClosed),
                    code::NOT_LEADER => {
                        let leader = f.text(tag::LEADER);
                        if !leader.is_empty() {
                            self.follow(g, leader);
                        }
                    }
                    _ => {}
                }
                false
            }
            typ::MORE => false, // a MORE that follows no frame with more: the server broke the protocol
            _ => true,          // EVENT, and frames this client does not know
        }
    }

    fn answer(self: &Arc<Self>, g: &mut State, r: Request, f: &Frame, c: u64) {
        let msg = f.text(tag::MESSAGE);
        match r.typ {
            typ::ACQUIRE => match f.typ {
                typ::GRANTED => self.granted(g, r, f),
                typ::REFUSED if r.abandoned => {}
                typ::REFUSED if c == code::BUSY => deliver(g, r.reply, Reply::Busy),
                typ::REFUSED => deliver(g, r.reply, Reply::Done(Err(Error::refused(c, msg)))),
                _ => {}
            },
            typ::RELEASE | typ::RENEW => {
                let res = if f.typ == typ::REFUSED {
                    if c == code::STALE_TOKEN {
                        Self::end_hold(g, r.token, LostReason::StaleToken, "the server no longer holds it");
                        if r.typ == typ::RELEASE && r.by_token && g.released.contains(&r.token) {
                            Ok(())
                        } else {
                            Err(Error::refused(c, msg))
                        }
                    } else {
                        Err(Error::refused(c, msg))
                    }
                } else {
                    if r.typ == typ::RELEASE {
                        Self::remember_released(g, r.token);
                    } else if let (Some(left), Some(h)) = (f.uint(tag::LEFT_MS), g.holds.get_mut(&r.token)) {
                        let left = Duration::from_millis(left);
                        h.deadline = Some(Self::measured_at(r.sent_at) + left - margin(left));
                        self.wake.notify_all();
                    }
                    Ok(())
                };
                deliver(g, r.reply, Reply::Done(res));
            }
            typ::CLOSE => {
                deliver(g, r.reply, Reply::Done(Ok(())));
                // Before the server's close of the connection, which must
                // not bring a resume.
                self.end(g, Error::Closed("the session was closed".into()), LostReason::SessionClosed);
            }
            _ => {}
        }
    }

    fn granted(self: &Arc<Self>, g: &mut State, r: Request, f: &Frame) {
        let token = f.uint(tag::TOKEN).unwrap_or(0);
        if r.abandoned {
            self.release_quietly(g, &r.key, token);
            return;
        }
        let count = f.uint(tag::COUNT).unwrap_or(1) as u32;
        let mut from = Self::measured_at(r.sent_at);
        let mut left = f.uint(tag::LEFT_MS).map(Duration::from_millis);
        let id = f.id;
        if let Some(rs) = g.replay.as_mut() {
            if id > rs.applied || rs.parked.contains(&id) {
                rs.fresh.insert(token);
            } else {
                let h = match rs.held.get(&token) {
                    Some(h) => h,
                    None => {
                        deliver(
                            g,
                            r.reply,
                            Reply::Done(Err(Error::LockLost(
                                LostReason::WhileAway,
                                "granted, then lost while the connection was down".into(),
                            ))),
                        );
                        return;
                    }
                };
                from = rs.sent_at;
                left = h.left;
            }
        }
        self.grant(g, r, token, count, from, left);
    }

    fn grant(&self, g: &mut State, r: Request, token: u64, count: u32, from: Instant, left: Option<Duration>) {
        let cell = Cell::new();
        let h = g.holds.entry(token).or_insert_with(|| Hold { key: r.key.clone(), cells: Vec::new(), deadline: None });
        h.cells.push(cell.clone());
        if let Some(left) = left {
            h.deadline = Some(from + left - margin(left));
            self.wake.notify_all();
        }
        match r.reply {
            Some(tx) => g.pending.push((tx, Reply::Granted(token, cell, count))),
            None => {
                self.drop_cell(g, token, &cell);
                self.release_quietly(g, &r.key, token);
            }
        }
    }

    fn lost(&self, g: &mut State, f: &Frame) {
        let token = f.uint(tag::TOKEN).unwrap_or(0);
        let reason = LostReason::from_code(f.uint(tag::CODE).unwrap_or(0));
        g.let_go.remove(&token);
        if g.holds.contains_key(&token) {
            Self::end_hold(g, token, reason, &format!("the server took it: {reason}"));
            return;
        }
        // A grant whose GRANTED went with a dropped connection.
        let applied = g.replay.as_ref().map_or(0, |r| r.applied);
        if f.id <= applied && g.inflight.get(&f.id).map_or(false, |r| r.typ == typ::ACQUIRE) {
            let r = g.inflight.remove(&f.id).expect("looked up above");
            deliver(
                g,
                r.reply,
                Reply::Done(Err(Error::LockLost(reason, "granted, then lost while the connection was down".into()))),
            );
        }
    }

    /// Settles the session after a resume, once every frame the server owed
    /// it has arrived, against what the WELCOME listed.
    fn reconcile(&self, g: &mut State) {
        let rs = match g.replay.take() {
            Some(rs) => rs,
            None => return,
        };
        let tokens: Vec<u64> = g.holds.keys().copied().collect();
        for token in tokens {
            if let Some(h) = rs.held.get(&token) {
                if let (Some(left), Some(hold)) = (h.left, g.holds.get_mut(&token)) {
                    hold.deadline = Some(rs.sent_at + left - margin(left));
                }
            } else if !rs.fresh.contains(&token) {
                Self::end_hold(g, token, LostReason::WhileAway, "lost while the connection was down");
            }
        }
        let ids: Vec<u64> = g.inflight.range(..=rs.applied).map(|(id, _)| *id).collect();
        let mut unanswered = Vec::new();
        for id in ids {
            let r = &g.inflight[&id];
            if r.typ == typ::ACQUIRE && rs.parked.contains(&id) {
                continue; // still waiting: answered later
            }
            let r = g.inflight.remove(&id).expect("listed above");
            match rs.by_request.get(&id) {
                Some(&token) if r.typ == typ::ACQUIRE && !r.abandoned => self.grant_listed(g, r, token, &rs),
                _ => unanswered.push(r),
            }
        }
        // What the server holds beyond the locks here and the releases in
        // flight: grants whose GRANTED went with the connection.
        let mut extra: HashMap<u64, i64> = HashMap::new();
        for (token, h) in &rs.held {
            let here = g.holds.get(token).map_or(0, |x| x.cells.len() as i64);
            extra.insert(*token, i64::from(h.count) - here);
        }
        for r in g.inflight.values() {
            if r.typ == typ::RELEASE {
                *extra.entry(r.token).or_default() -= 1;
            }
        }
        for r in unanswered {
            match r.typ {
                typ::ACQUIRE if !r.abandoned => {
                    let re = rs
                        .held
                        .iter()
                        .find(|(t, h)| r.reentrant && h.key == r.key && extra.get(t).copied().unwrap_or(0) > 0)
                        .map(|(t, _)| *t);
                    if let Some(token) = re {
                        *extra.entry(token).or_default() -= 1;
                        self.grant_listed(g, r, token, &rs);
                    } else {
                        deliver(
                            g,
                            r.reply,
                            Reply::Done(Err(Error::LockLost(
                                LostReason::WhileAway,
                                "the answer was lost with the connection: refused, or granted and lost since".into(),
                            ))),
                        );
                    }
                }
                typ::RENEW if !rs.held.contains_key(&r.token) => {
                    deliver(
                        g,
                        r.reply,
                        Reply::Done(Err(Error::LockLost(
                            LostReason::WhileAway,
                            "lost while the connection was down".into(),
                        ))),
                    );
                }
                _ => deliver(g, r.reply, Reply::Done(Ok(()))),
            }
        }
        for (token, h) in &rs.held {
            if g.let_go.contains(token) {
                continue;
            }
            for _ in 0..extra.get(token).copied().unwrap_or(0).max(0) {
                self.release_quietly(g, &h.key, *token);
            }
        }
        g.let_go.retain(|t| rs.held.contains_key(t));
        self.wake.notify_all();
    }

    fn grant_listed(&self, g: &mut State, r: Request, token: u64, rs: &Replay) {
        let h = &rs.held[&token];
        self.grant(g, r, token, h.count, rs.sent_at, h.left);
    }

    // --- the driver ---

    /// The session's loop: writes what is queued, pings, ends leases at the
    /// client's deadline, drops a silent connection and resumes the
    /// session, until it ends.
    fn drive(self: Arc<Self>) {
        let mut g = lock(&self.st);
        loop {
            if g.ended.is_some() {
                return;
            }
            let now = Instant::now();
            if now >= self.lost_deadline(&g) {
                let why = format!(
                    "no answer from the server within the session's TTL ({:?}) less a margin of {:?}",
                    self.ttl,
                    margin(self.ttl)
                );
                self.end(&mut g, Error::SessionExpired(why), LostReason::SessionExpired);
                return;
            }
            let mut next = self.lost_deadline(&g);
            next = next.min(self.expire_leases(&mut g, now));
            let conn = match g.conn.as_ref() {
                Some(c) => c,
                None => {
                    // The resume runs on a thread of its own, so that the
                    // deadlines of leases and of the session are kept
                    // meanwhile.
                    if !g.reconnecting {
                        g.reconnecting = true;
                        let me = self.clone();
                        let spawned = thread::Builder::new().name("lc-session-resume".into()).spawn(move || {
                            me.reconnect();
                            lock(&me.st).reconnecting = false;
                            me.wake.notify_all();
                        });
                        if spawned.is_err() {
                            drop(g);
                            self.reconnect();
                            g = lock(&self.st);
                            g.reconnecting = false;
                            continue;
                        }
                    }
                    let wait = next.saturating_duration_since(now).max(Duration::from_millis(1));
                    g = self.wake.wait_timeout(g, wait).unwrap_or_else(|e| e.into_inner()).0;
                    continue;
                }
            };
            let (generation, addr, stream) = (conn.generation, conn.addr.clone(), conn.stream.clone());
            if now >= g.heard + self.silence() {
                self.detach(&mut g, generation);
                self.demote(&mut g, &addr);
                continue;
            }
            next = next.min(g.heard + self.silence());
            if g.ping.is_none() {
                let due = g.last_ack + self.keepalive;
                if now >= due {
                    g.next_id += 1;
                    let id = g.next_id;
                    g.ping = Some((id, now));
                    Frame::new(typ::PING, id, Vec::new()).encode_into(&mut g.out);
                } else {
                    next = next.min(due);
                }
            }
            if !g.out.is_empty() && !g.writing {
                let out = std::mem::take(&mut g.out);
                g.writing = true;
                drop(g);
                if (&*stream).write_all(&out).is_err() {
                    let _ = stream.shutdown(Shutdown::Both); // the reader sees it and detaches
                }
                g = lock(&self.st);
                g.writing = false;
                continue;
            }
            let wait = next.saturating_duration_since(now).max(Duration::from_millis(1));
            g = self.wake.wait_timeout(g, wait).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// Gives up the locks whose lease ran out by the client's count, each
    /// released by its token with `lapse`, so the server keeps the key's
    /// lock-delay. Returns the next lease deadline.
    fn expire_leases(&self, g: &mut State, now: Instant) -> Instant {
        let mut next = now + Duration::from_secs(3600);
        let due: Vec<u64> = g
            .holds
            .iter()
            .filter_map(|(t, h)| match h.deadline {
                Some(d) if d <= now => Some(*t),
                Some(d) => {
                    next = next.min(d);
                    None
                }
                None => None,
            })
            .collect();
        for token in due {
            let key = g.holds[&token].key.clone();
            Self::end_hold(g, token, LostReason::LeaseExpired, "its lease ran out by the client's count");
            let mut r = Request::new(typ::RELEASE);
            r.lapse = true;
            self.enqueue_release(g, &key, token, None, r);
        }
        next
    }

    fn follow(&self, g: &mut State, leader: String) {
        if !self.is_shunned(g, &leader) {
            g.leader = Some(leader);
        }
    }

    fn is_shunned(&self, g: &State, addr: &str) -> bool {
        g.addrs.len() > 1 && g.shunned.as_ref().map_or(false, |(a, until)| a == addr && Instant::now() < *until)
    }

    /// Sends the node at `addr`, whose connection went silent, to the back
    /// of the addresses, and shuns it for as long again.
    fn demote(&self, g: &mut State, addr: &str) {
        if g.leader.as_deref() == Some(addr) {
            g.leader = None;
        }
        if let Some(i) = g.addrs.iter().position(|a| a == addr) {
            let a = g.addrs.remove(i);
            g.addrs.push(a);
            g.at = 0;
        }
        g.shunned = Some((addr.to_string(), Instant::now() + self.silence()));
    }

    fn target(&self, g: &mut State) -> String {
        if let Some(l) = &g.leader {
            return l.clone();
        }
        if self.is_shunned(g, &g.addrs[g.at].clone()) {
            g.at = (g.at + 1) % g.addrs.len();
        }
        g.addrs[g.at].clone()
    }

    /// A random wait before reconnect attempt `n` (from 1): 50 ms doubling,
    /// at most a quarter of the keepalive and at most 500 ms, jittered.
    fn backoff(&self, g: &mut State, n: u32) -> Duration {
        let cap = (self.keepalive / 4).max(Duration::from_millis(50)).min(Duration::from_millis(500));
        let d = (Duration::from_millis(50) * (1u32 << n.saturating_sub(1).min(10))).min(cap);
        g.seed ^= g.seed << 13;
        g.seed ^= g.seed >> 7;
        g.seed ^= g.seed << 17;
        d / 2 + Duration::from_nanos(g.seed % (d.as_nanos() as u64 / 2 + 1))
    }

    /// Resumes the session on a new connection, at once and then with a
    /// growing backoff, until it is attached or the session has ended.
    fn reconnect(self: &Arc<Self>) {
        let mut attempt = 0u32;
        let mut hops = 0;
        loop {
            let mut g = lock(&self.st);
            if g.ended.is_some() || g.conn.is_some() {
                return;
            }
            if Instant::now() >= self.lost_deadline(&g) {
                return; // the driver ends the session
            }
            if g.leader.is_some() && hops <= g.addrs.len() {
                attempt = 0;
                hops += 1;
            } else {
                hops = 0;
            }
            if attempt > 0 {
                let d = self.backoff(&mut g, attempt);
                let until = (Instant::now() + d).min(self.lost_deadline(&g));
                while Instant::now() < until && g.ended.is_none() {
                    let left = until.saturating_duration_since(Instant::now());
                    g = self.wake.wait_timeout(g, left).unwrap_or_else(|e| e.into_inner()).0;
                }
            }
            attempt += 1;
            drop(g);
            match self.resume() {
                Ok(()) => return,
                Err(f) if !f.retry() => {
                    let mut g = lock(&self.st);
                    let err = match f {
                        Failure::Goodbye { code: code::UNAUTHENTICATED, message, .. } => {
                            Error::Unauthenticated(message)
                        }
                        Failure::Goodbye { message, .. } => Error::SessionExpired(format!(
                            "the session ended on the server while the client was away: {message}"
                        )),
                        Failure::Other(e) => e,
                    };
                    self.end(&mut g, err, LostReason::SessionExpired);
                    return;
                }
                Err(_) => {}
            }
        }
    }

    /// One attempt to resume: RESUME and a PING in one write; on WELCOME
    /// the connection is attached, the requests the server never got are
    /// queued again and a reader started.
    fn resume(self: &Arc<Self>) -> std::result::Result<(), Failure> {
        let (first, sync, addr) = {
            let mut g = lock(&self.st);
            g.next_id += 2;
            let (rid, sync) = (g.next_id - 1, g.next_id);
            let mut fields = vec![Field::u64(tag::SESSION, self.id), Field::bytes(tag::SECRET, &self.secret)];
            if let Some(t) = &self.opts.token {
                fields.push(Field::bytes(tag::CREDENTIAL, t));
            }
            let mut b = PREFACE.to_vec();
            Frame::new(typ::RESUME, rid, fields).encode_into(&mut b);
            Frame::new(typ::PING, sync, Vec::new()).encode_into(&mut b);
            (b, sync, self.target(&mut g))
        };
        let sent_at = Instant::now();
        let res = handshake(&addr, &first, &self.opts, self.silence());
        let mut g = lock(&self.st);
        let (stream, rd, w) = match res {
            Ok(x) => x,
            Err(f) => {
                let mut route = Route { addrs: g.addrs.clone(), at: g.at, leader: g.leader.clone() };
                route.failed(&addr, &f);
                g.at = route.at;
                g.leader = None;
                if let Some(l) = route.leader {
                    self.follow(&mut g, l);
                }
                return Err(f);
            }
        };
        if w.uint(tag::SESSION) != Some(self.id) {
            return Err(Failure::Other(Error::Protocol("the WELCOME of a resume names another session".into())));
        }
        if g.ended.is_some() {
            let _ = stream.shutdown(Shutdown::Both);
            return Ok(());
        }
        let mut rs = Replay {
            sent_at,
            sync,
            applied: w.uint(tag::APPLIED).unwrap_or(0),
            held: HashMap::new(),
            by_request: HashMap::new(),
            parked: HashSet::new(),
            fresh: HashSet::new(),
        };
        for it in w.items(tag::HELD) {
            let token = find_uint(&it, tag::TOKEN).unwrap_or(0);
            let key = find(&it, tag::KEY).unwrap_or_default().to_vec();
            let count = find_uint(&it, tag::COUNT).unwrap_or(1).max(1) as u32;
            let left = find_uint(&it, tag::LEFT_MS).map(Duration::from_millis);
            if let Some(req) = find_uint(&it, tag::REQUEST) {
                rs.by_request.insert(req, token);
            }
            rs.held.insert(token, Held { key, count, left });
        }
        for it in w.items(tag::PARKED) {
            if let Some(req) = find_uint(&it, tag::REQUEST) {
                rs.parked.insert(req);
            }
        }
        let _ = stream.set_write_timeout(Some(self.silence()));
        self.ack(&mut g, sent_at);
        g.heard = Instant::now();
        let mut out = Vec::new();
        let ids: Vec<u64> = g.inflight.keys().copied().collect();
        for id in ids {
            if id <= rs.applied {
                continue; // it arrived; the reconciliation settles it
            }
            let gone_target = {
                let r = &g.inflight[&id];
                r.typ == typ::CANCEL && !g.inflight.contains_key(&r.target)
            };
            let r = g.inflight.get_mut(&id).expect("listed above");
            if (r.typ == typ::ACQUIRE && r.abandoned) || gone_target {
                g.inflight.remove(&id);
                continue;
            }
            r.resent = r.sent;
            r.sent = true;
            out.extend_from_slice(&r.frame);
        }
        g.generation += 1;
        let generation = g.generation;
        g.conn = Some(Conn { generation, addr, stream });
        g.out = out;
        g.ping = None;
        g.replay = Some(rs);
        self.wake.notify_all();
        drop(g);
        self.start_reader(generation, rd);
        Ok(())
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

/// A lock the session holds. Dropping it releases it: the RELEASE goes to
/// the session's writer and nothing waits for the network. It is `Send +
/// Sync`: another thread may wait for its loss with
/// [`LockGuard::wait_lost`] while this one works.
pub struct LockGuard {
    session: Arc<Inner>,
    key: Vec<u8>,
    token: u64,
    count: u32,
    cell: Arc<Cell>,
    live: bool,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &String::from_utf8_lossy(&self.key))
            .field("token", &self.token)
            .field("lost", &self.lost())
            .finish()
    }
}

impl LockGuard {
    /// The lock's fencing token: give it to the resource with every write.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The key.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    /// The reentrancy count the grant reported (1 for a first acquire).
    pub fn count(&self) -> u32 {
        self.count
    }

    /// `None` while the lock is held, then why it was lost.
    pub fn lost(&self) -> Option<LostReason> {
        self.cell.reason().map(|(r, _)| r)
    }

    /// Waits at most `timeout` for the lock to be lost: why, or `None` when
    /// it is still held.
    pub fn wait_lost(&self, timeout: Duration) -> Option<LostReason> {
        let deadline = Instant::now() + timeout;
        let mut l = lock(&self.cell.lost);
        loop {
            if let Some((r, _)) = &*l {
                return Some(*r);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            l = self.cell.changed.wait_timeout(l, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// Releases the lock and waits for the server's answer, at most the
    /// read timeout. A lock already lost returns [`Error::LockLost`] with
    /// its reason.
    pub fn release(mut self) -> Result<()> {
        self.live = false;
        let (tx, rx) = mpsc::channel();
        {
            let mut g = lock(&self.session.st);
            if let Some((r, m)) = self.cell.reason() {
                return Err(Error::LockLost(r, m));
            }
            self.session.drop_cell(&mut g, self.token, &self.cell);
            self.cell.end(LostReason::SessionClosed, "released");
            self.session.enqueue_release(&mut g, &self.key, self.token, Some(tx), Request::new(typ::RELEASE));
            self.session.flush(g);
        }
        self.session.await_done(&rx, "release")
    }

    /// Starts the lease again, for `lease` or, with `None`, the last lease
    /// the lock had. Waits for the answer at most the read timeout.
    pub fn renew(&self, lease: Option<Duration>) -> Result<()> {
        let (tx, rx) = mpsc::channel();
        {
            let mut g = lock(&self.session.st);
            if let Some((r, m)) = self.cell.reason() {
                return Err(Error::LockLost(r, m));
            }
            if let Some(e) = &g.ended {
                return Err(e.duplicate());
            }
            let mut fields = vec![Field::bytes(tag::KEY, &self.key), Field::u64(tag::TOKEN, self.token)];
            if let Some(l) = lease {
                fields.push(Field::u32(tag::LEASE_MS, millis(l)));
            }
            let mut r = Request::new(typ::RENEW);
            r.key = self.key.clone();
            r.token = self.token;
            r.reply = Some(tx);
            self.session.enqueue(&mut g, r, fields);
            self.session.flush(g);
        }
        self.session.await_done(&rx, "renew")
    }

    /// Stops caring about the lock without releasing it: the server keeps
    /// it until the session ends, its lease runs out, or
    /// [`Session::release`] by its token.
    pub fn orphan(mut self) {
        self.live = false;
        let mut g = lock(&self.session.st);
        if self.cell.reason().is_none() {
            g.let_go.insert(self.token);
            self.session.drop_cell(&mut g, self.token, &self.cell);
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.live {
            return;
        }
        let mut g = lock(&self.session.st);
        if self.cell.reason().is_some() || g.ended.is_some() {
            return;
        }
        self.session.drop_cell(&mut g, self.token, &self.cell);
        self.cell.end(LostReason::SessionClosed, "released");
        self.session.release_quietly(&mut g, &self.key, self.token);
    }
}
