//! The connections of a session: dialling, the first frames, reading
//! whole frames, and the addresses to try.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::frame::{self, code, tag, typ, FormatError, Frame};

use super::{Error, SessionOptions};

/// A handshake that did not open or resume the session.
pub(super) enum Failure {
    Goodbye { code: u64, message: String, leader: String },
    Other(Error),
}

impl Failure {
    pub(super) fn error(&self) -> Error {
        match self {
            Failure::Goodbye { code, message, .. } => {
                Error::refused(*code, format!("the server said goodbye: {message}"))
            }
            Failure::Other(e) => e.duplicate(),
        }
    }
    /// Whether another node, or a later try, may do better.
    pub(super) fn retry(&self) -> bool {
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
pub(super) struct FrameReader {
    pub(super) stream: Arc<TcpStream>,
    buf: Vec<u8>,
    start: usize,
    chunk: Box<[u8]>,
}

pub(super) enum ReadError {
    Io(io::Error),
    Format(FormatError),
}

impl FrameReader {
    pub(super) fn new(stream: Arc<TcpStream>) -> FrameReader {
        FrameReader { stream, buf: Vec::new(), start: 0, chunk: vec![0; 64 * 1024].into_boxed_slice() }
    }

    /// The next whole frame of what was read, if there is one.
    pub(super) fn buffered(&mut self) -> std::result::Result<Option<Frame>, ReadError> {
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
    pub(super) fn fill(&mut self) -> std::result::Result<(), ReadError> {
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

    pub(super) fn next(&mut self) -> std::result::Result<Frame, ReadError> {
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
pub(super) fn addresses(list: &str) -> Vec<String> {
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
pub(super) fn handshake(
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

/// The addresses of a session and which to try next.
pub(super) struct Route {
    pub(super) addrs: Vec<String>,
    pub(super) at: usize,
    pub(super) leader: Option<String>,
}

impl Route {
    pub(super) fn current(&self) -> String {
        self.leader.clone().unwrap_or_else(|| self.addrs[self.at].clone())
    }

    /// Notes a failed handshake at `addr`: the next try goes to the leader
    /// it named, or to the next address.
    pub(super) fn failed(&mut self, addr: &str, f: &Failure) {
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
    pub(super) fn open(
        &mut self,
        first: &[u8],
        opts: &SessionOptions,
        bound: Duration,
    ) -> super::Result<(Arc<TcpStream>, FrameReader, Frame)> {
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
