//! The session against a scripted server on 127.0.0.1: what it sends, and
//! what it makes of the answers (resume, reconciliation, leader, refusals,
//! the client's lease deadline, a silent connection).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use locking_center::frame::{code, decode, tag, typ, Field, Frame, PREFACE};
use locking_center::session::{AcquireOptions, Error, LostReason, Session, SessionOptions};

const SECRET: [u8; 16] = [0xa5; 16];
const SESSION: u64 = 42;

/// One connection of the scripted server.
struct Peer {
    conn: TcpStream,
    buf: Vec<u8>,
}

impl Peer {
    /// Reads the preface, then returns the peer.
    fn accept(ln: &TcpListener) -> Peer {
        let (conn, _) = ln.accept().expect("accept");
        let mut p = Peer { conn, buf: Vec::new() };
        while p.buf.len() < 4 {
            p.more();
        }
        assert_eq!(&p.buf[..4], PREFACE, "the preface first");
        p.buf.drain(..4);
        p
    }

    /// Accepts a connection and answers its HELLO, with a keepalive long
    /// enough that no PING comes.
    fn opened(ln: &TcpListener) -> Peer {
        let mut p = Peer::accept(ln);
        p.hello(60_000);
        p
    }

    fn more(&mut self) {
        let mut chunk = [0u8; 4096];
        let n = self.conn.read(&mut chunk).expect("read");
        assert!(n > 0, "the client closed the connection");
        self.buf.extend_from_slice(&chunk[..n]);
    }

    fn frame(&mut self) -> Frame {
        loop {
            if let Some((f, n)) = decode(&self.buf).expect("a well-formed frame") {
                self.buf.drain(..n);
                return f;
            }
            self.more();
        }
    }

    /// The next frame that is not a PING (each PING answered OK).
    fn request(&mut self) -> Frame {
        loop {
            let f = self.frame();
            if f.typ != typ::PING {
                return f;
            }
            self.send(Frame::new(typ::OK, f.id, vec![]));
        }
    }

    fn send(&mut self, f: Frame) {
        self.conn.write_all(&f.encode()).expect("write");
    }

    fn welcome(&mut self, id: u64, keepalive_ms: u32, more: Vec<Field>) {
        self.welcome_ttl(id, 10_000, keepalive_ms, more);
    }

    fn welcome_ttl(&mut self, id: u64, ttl_ms: u32, keepalive_ms: u32, more: Vec<Field>) {
        let mut fields = vec![
            Field::u64(tag::SESSION, SESSION),
            Field::bytes(tag::SECRET, SECRET),
            Field::u32(tag::TTL_MS, ttl_ms),
            Field::u32(tag::KEEPALIVE_MS, keepalive_ms),
            Field::bytes(tag::SERVER, "fake"),
        ];
        fields.extend(more);
        self.send(Frame::new(typ::WELCOME, id, fields));
    }

    /// Answers the HELLO.
    fn hello(&mut self, keepalive_ms: u32) {
        let h = self.frame();
        assert_eq!(h.typ, typ::HELLO);
        self.welcome(h.id, keepalive_ms, vec![]);
    }

    /// A GOODBYE answering `id`, with the leader when one is given.
    fn goodbye(&mut self, id: u64, c: u64, message: &str, leader: Option<&str>) {
        let mut fields = vec![Field::u8(tag::CODE, c as u8), Field::bytes(tag::MESSAGE, message)];
        if let Some(l) = leader {
            fields.push(Field::bytes(tag::LEADER, l));
        }
        self.send(Frame::new(typ::GOODBYE, id, fields));
    }

    /// Answers the CLOSE that ends the test.
    fn close(&mut self) {
        let c = self.request();
        assert_eq!(c.typ, typ::CLOSE);
        self.send(Frame::new(typ::OK, c.id, vec![]));
    }

    fn grant(&mut self, acquire: &Frame, token: u64, lease_ms: Option<u32>) {
        let mut fields = vec![
            Field::bytes(tag::KEY, acquire.get(tag::KEY).unwrap()),
            Field::u64(tag::TOKEN, token),
            Field::u32(tag::COUNT, 1),
        ];
        if let Some(l) = lease_ms {
            fields.push(Field::u32(tag::LEFT_MS, l));
        }
        self.send(Frame::new(typ::GRANTED, acquire.id, fields));
    }
}

fn listen() -> (TcpListener, String) {
    let ln = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = ln.local_addr().unwrap().to_string();
    (ln, addr)
}

fn opts() -> SessionOptions {
    SessionOptions::default().name("fake-test").read_timeout(Duration::from_secs(5))
}

/// A guard's drop hands the RELEASE to the writer: it returns while the
/// server has not answered, and the RELEASE names the lock's token.
#[test]
fn drop_sends_release_without_waiting_for_the_answer() {
    let (ln, addr) = listen();
    let (seen, heard) = mpsc::channel();
    let server = thread::spawn(move || {
        let mut p = Peer::opened(&ln);
        let a = p.request();
        assert_eq!(a.typ, typ::ACQUIRE);
        p.grant(&a, 7, None);
        let r = p.request();
        seen.send((r.typ, r.uint(tag::TOKEN), r.get(tag::LAPSE).is_some())).unwrap();
        p.close();
    });
    let s = Session::connect(&addr, opts()).unwrap();
    let g = s.acquire("k", AcquireOptions::new()).unwrap();
    assert_eq!(g.token(), 7);
    drop(g);
    assert_eq!(heard.recv().unwrap(), (typ::RELEASE, Some(7), false));
    s.close().unwrap();
    server.join().unwrap();
}

/// A try that finds the key held is Ok(None); refusals are their errors,
/// with the server's words.
#[test]
fn busy_is_none_and_refusals_are_errors() {
    let (ln, addr) = listen();
    let server = thread::spawn(move || {
        let mut p = Peer::opened(&ln);
        for (c, msg) in [(code::BUSY, "held"), (code::FORBIDDEN, "not yours"), (code::DEADLOCK, "cycle")] {
            let a = p.request();
            p.send(Frame::new(
                typ::REFUSED,
                a.id,
                vec![Field::u8(tag::CODE, c as u8), Field::bytes(tag::MESSAGE, msg)],
            ));
        }
        p.close();
    });
    let s = Session::connect(&addr, opts()).unwrap();
    assert!(s.try_acquire("k", AcquireOptions::new()).unwrap().is_none());
    match s.acquire("k", AcquireOptions::new()) {
        Err(Error::Forbidden(m)) => assert_eq!(m, "not yours"),
        other => panic!("forbidden: {other:?}"),
    }
    assert!(matches!(s.acquire("k", AcquireOptions::new()), Err(Error::Deadlock(_))));
    s.close().unwrap();
    server.join().unwrap();
}

/// After a drop the session resumes with its id and secret; the lock
/// WELCOME lists keeps its token, and an acquire whose GRANTED went with
/// the connection is granted from WELCOME's held item.
#[test]
fn resume_keeps_held_locks_and_settles_answers_lost_with_the_connection() {
    let (ln, addr) = listen();
    let server = thread::spawn(move || {
        let mut p = Peer::opened(&ln);
        let a = p.request();
        p.grant(&a, 7, None);
        let b = p.request();
        assert_eq!(b.get(tag::KEY), Some(&b"b"[..]));
        drop(p); // the GRANTED of b never leaves
        let mut p = Peer::accept(&ln);
        let r = p.frame();
        assert_eq!((r.typ, r.uint(tag::SESSION), r.get(tag::SECRET)), (typ::RESUME, Some(SESSION), Some(&SECRET[..])));
        let item = |key: &str, token: u64, request: u64| {
            Field::item(
                tag::HELD,
                &[
                    Field::bytes(tag::KEY, key),
                    Field::u64(tag::TOKEN, token),
                    Field::u64(tag::REQUEST, request),
                    Field::u8(tag::MODE, 0),
                    Field::u32(tag::COUNT, 1),
                ],
            )
        };
        p.welcome(r.id, 60_000, vec![Field::u64(tag::APPLIED, b.id), item("a", 7, a.id), item("b", 9, b.id)]);
        let ping = p.frame();
        assert_eq!(ping.typ, typ::PING, "a PING follows the RESUME");
        p.send(Frame::new(typ::OK, ping.id, vec![]));
        p.close(); // and nothing before it: the server applied both acquires
    });
    let s = std::sync::Arc::new(Session::connect(&addr, opts()).unwrap());
    let a = s.acquire("a", AcquireOptions::new()).unwrap();
    let b = s.acquire("b", AcquireOptions::new()).unwrap();
    assert_eq!((a.token(), b.token()), (7, 9));
    assert_eq!(a.lost(), None);
    a.orphan();
    b.orphan();
    s.close().unwrap();
    server.join().unwrap();
}

/// A resume the server refuses for good ends the session: its locks are
/// lost with the reason, and calls fail with SessionExpired.
#[test]
fn unknown_session_at_resume_ends_the_session() {
    let (ln, addr) = listen();
    let server = thread::spawn(move || {
        let mut p = Peer::opened(&ln);
        let a = p.request();
        p.grant(&a, 7, None);
        drop(p);
        let mut p = Peer::accept(&ln);
        let r = p.frame();
        p.goodbye(r.id, code::UNKNOWN_SESSION, "no such session", None);
    });
    let s = Session::connect(&addr, opts()).unwrap();
    let a = s.acquire("a", AcquireOptions::new()).unwrap();
    assert_eq!(a.wait_lost(Duration::from_secs(30)), Some(LostReason::SessionExpired));
    assert!(matches!(s.acquire("b", AcquireOptions::new()), Err(Error::SessionExpired(_))));
    assert!(matches!(a.release(), Err(Error::LockLost(LostReason::SessionExpired, _))));
    server.join().unwrap();
}

/// A node that does not lead names the leader: the session opens there.
#[test]
fn connect_follows_the_leader() {
    let (follower, faddr) = listen();
    let (leader, laddr) = listen();
    let named = laddr.clone();
    let f = thread::spawn(move || {
        let mut p = Peer::accept(&follower);
        let h = p.frame();
        p.goodbye(h.id, code::NOT_LEADER, "not the leader", Some(&named));
    });
    let l = thread::spawn(move || {
        let mut p = Peer::opened(&leader);
        p.close();
    });
    let s = Session::connect(&faddr, opts()).unwrap();
    assert_eq!(s.address(), Some(laddr));
    s.close().unwrap();
    f.join().unwrap();
    l.join().unwrap();
}

/// GOODBYE unauthenticated to the HELLO is its own error.
#[test]
fn a_refused_token_is_unauthenticated() {
    let (ln, addr) = listen();
    let server = thread::spawn(move || {
        let mut p = Peer::accept(&ln);
        let h = p.frame();
        assert_eq!(h.get(tag::CREDENTIAL), Some(&b"wrong"[..]));
        p.goodbye(h.id, code::UNAUTHENTICATED, "bad token", None);
    });
    match Session::connect(&addr, opts().token("wrong")) {
        Err(Error::Unauthenticated(m)) => assert!(m.contains("bad token"), "{m}"),
        Err(e) => panic!("want unauthenticated, got {e}"),
        Ok(_) => panic!("a refused token opened a session"),
    }
    server.join().unwrap();
}

/// At the client's end of a lease the guard is lost with LeaseExpired, and
/// the lock is released by its token with lapse.
#[test]
fn the_clients_lease_deadline_releases_with_lapse() {
    let (ln, addr) = listen();
    let (seen, heard) = mpsc::channel();
    let server = thread::spawn(move || {
        let mut p = Peer::opened(&ln);
        let a = p.request();
        assert_eq!(a.uint(tag::LEASE_MS), Some(200));
        p.grant(&a, 11, Some(200));
        let r = p.request();
        seen.send((r.typ, r.uint(tag::TOKEN), r.uint(tag::LAPSE))).unwrap();
        p.send(Frame::new(typ::OK, r.id, vec![]));
        p.close();
    });
    let s = Session::connect(&addr, opts()).unwrap();
    let g = s.acquire("k", AcquireOptions::new().lease(Duration::from_millis(200))).unwrap();
    assert_eq!(g.wait_lost(Duration::from_secs(30)), Some(LostReason::LeaseExpired));
    assert_eq!(heard.recv().unwrap(), (typ::RELEASE, Some(11), Some(1)));
    drop(g); // lost: nothing more is sent
    s.close().unwrap();
    server.join().unwrap();
}

/// A connection that brings nothing for the keepalive and its margin is
/// dropped, and the session resumes on a new one.
#[test]
fn a_silent_connection_is_left_for_a_resume() {
    let (ln, addr) = listen();
    let (resumed, heard) = mpsc::channel();
    let server = thread::spawn(move || {
        let mut p = Peer::accept(&ln);
        p.hello(100); // then answers nothing, not even the PING
        let mut q = Peer::accept(&ln);
        let r = q.frame();
        assert_eq!((r.typ, r.uint(tag::SESSION)), (typ::RESUME, Some(SESSION)));
        q.welcome(r.id, 60_000, vec![Field::u64(tag::APPLIED, 0)]);
        resumed.send(()).unwrap();
        drop(p);
        q.close();
    });
    let s = Session::connect(&addr, opts()).unwrap();
    heard.recv().unwrap();
    s.close().unwrap();
    server.join().unwrap();
}

/// A cancel from another thread sends CANCEL naming the parked acquire,
/// and the acquire returns Cancelled.
#[test]
fn cancel_sends_cancel_for_the_parked_acquire() {
    let (ln, addr) = listen();
    let (parked, heard) = mpsc::channel();
    let server = thread::spawn(move || {
        let mut p = Peer::opened(&ln);
        let a = p.request();
        parked.send(()).unwrap();
        let c = p.request();
        assert_eq!((c.typ, c.uint(tag::TARGET)), (typ::CANCEL, Some(a.id)));
        let refused = vec![Field::u8(tag::CODE, code::CANCELLED as u8), Field::bytes(tag::MESSAGE, "cancelled")];
        p.send(Frame::new(typ::REFUSED, a.id, refused));
        p.send(Frame::new(typ::OK, c.id, vec![]));
        p.close();
    });
    let s = Session::connect(&addr, opts()).unwrap();
    let token = locking_center::CancelToken::new();
    let canceller = {
        let token = token.clone();
        thread::spawn(move || {
            heard.recv().unwrap();
            token.cancel();
        })
    };
    assert!(matches!(s.acquire("k", AcquireOptions::new().cancel(&token)), Err(Error::Cancelled(_))));
    canceller.join().unwrap();
    s.close().unwrap();
    server.join().unwrap();
}

/// A renew the server refuses as stale ends the guard with StaleToken.
#[test]
fn a_stale_renew_loses_the_lock() {
    let (ln, addr) = listen();
    let server = thread::spawn(move || {
        let mut p = Peer::opened(&ln);
        let a = p.request();
        p.grant(&a, 5, None);
        let r = p.request();
        assert_eq!((r.typ, r.uint(tag::TOKEN), r.uint(tag::LEASE_MS)), (typ::RENEW, Some(5), Some(1500)));
        let refused = vec![Field::u8(tag::CODE, code::STALE_TOKEN as u8), Field::bytes(tag::MESSAGE, "stale")];
        p.send(Frame::new(typ::REFUSED, r.id, refused));
        p.close();
    });
    let s = Session::connect(&addr, opts()).unwrap();
    let g = s.acquire("k", AcquireOptions::new()).unwrap();
    assert!(matches!(g.renew(Some(Duration::from_millis(1500))), Err(Error::LockLost(LostReason::StaleToken, _))));
    assert_eq!(g.lost(), Some(LostReason::StaleToken));
    drop(g); // lost: no RELEASE
    s.close().unwrap();
    server.join().unwrap();
}

/// Sessions and guards cross threads, and so do errors.
#[test]
fn sessions_guards_and_errors_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Session>();
    send_sync::<locking_center::session::LockGuard>();
    send_sync::<Error>();
    send_sync::<locking_center::CancelToken>();
}

/// The client's lease deadline holds while the session is away: a resume
/// that hangs (the server takes the connection and answers nothing) does
/// not hold the loss back.
#[test]
fn a_lease_runs_out_while_the_session_resumes() {
    let (ln, addr) = listen();
    let (done, end) = mpsc::channel::<()>();
    let server = thread::spawn(move || {
        let mut p = Peer::opened(&ln);
        let a = p.request();
        p.grant(&a, 3, Some(300));
        drop(p); // and the resume's connection waits in the backlog, unanswered
        let _ = end.recv();
    });
    let s = Session::connect(&addr, opts().read_timeout(Duration::from_millis(500))).unwrap();
    let g = s.acquire("k", AcquireOptions::new().lease(Duration::from_millis(300))).unwrap();
    assert_eq!(g.wait_lost(Duration::from_secs(30)), Some(LostReason::LeaseExpired));
    drop(s); // its CLOSE has no answer; the read timeout ends the wait
    done.send(()).unwrap();
    server.join().unwrap();
}

/// A session that has had no answer for its TTL less the margin ends on
/// the client, its locks lost, and the client closes it on the server:
/// RESUME, a RELEASE with lapse of each lock it held (not the orphaned
/// one) and of each lock whose RELEASE went unanswered (a lease that ran
/// out on the client while the server was silent), in the order of their
/// tokens, and CLOSE in one write, with ids in that order, so that each
/// key keeps its lock-delay. The RELEASEs' answers are passed over; the
/// CLOSE's ends the farewell.
#[test]
fn a_session_the_client_counts_expired_is_closed_on_the_server() {
    let (ln, addr) = listen();
    let server = thread::spawn(move || {
        let mut p = Peer::accept(&ln);
        let h = p.frame();
        p.welcome_ttl(h.id, 1_000, 300, vec![]);
        for token in [4, 5, 6] {
            let a = p.request();
            p.grant(&a, token, None);
        }
        let a = p.request();
        p.grant(&a, 7, Some(100));
        // The RELEASE with lapse at the end of its lease goes unanswered.
        let r = p.request();
        assert_eq!((r.typ, r.uint(tag::TOKEN), r.uint(tag::LAPSE)), (typ::RELEASE, Some(7), Some(1)));
        // Then silence: resumes (RESUME and PING) get nothing, until one
        // brings something else.
        let mut silent = vec![p];
        let (mut q, r, second) = loop {
            let mut q = Peer::accept(&ln);
            let r = q.frame();
            assert_eq!(
                (r.typ, r.uint(tag::SESSION), r.get(tag::SECRET)),
                (typ::RESUME, Some(SESSION), Some(&SECRET[..]))
            );
            let f = q.frame();
            if f.typ != typ::PING {
                break (q, r, f);
            }
            silent.push(q);
        };
        let mut released = Vec::new();
        let mut release = |f: &Frame, id: u64| {
            assert_eq!((f.typ, f.id, f.uint(tag::LAPSE)), (typ::RELEASE, id, Some(1)), "{f:?}");
            released.push((f.get(tag::KEY).unwrap().to_vec(), f.uint(tag::TOKEN).unwrap()));
        };
        release(&second, r.id + 1);
        let third = q.frame();
        release(&third, r.id + 2);
        let fourth = q.frame();
        release(&fourth, r.id + 3);
        let close = q.frame();
        assert_eq!(released, vec![(b"a".to_vec(), 4), (b"b".to_vec(), 5), (b"l".to_vec(), 7)]);
        assert_eq!((close.typ, close.id), (typ::CLOSE, r.id + 4));
        q.welcome_ttl(r.id, 1_000, 300, vec![]);
        q.send(Frame::new(typ::OK, second.id, vec![]));
        let refused = vec![Field::u8(tag::CODE, code::STALE_TOKEN as u8), Field::bytes(tag::MESSAGE, "stale")];
        q.send(Frame::new(typ::REFUSED, third.id, refused));
        let mut rest = [0u8; 64];
        q.conn.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        let early = q.conn.read(&mut rest);
        assert!(early.is_err(), "the client left before the CLOSE's answer: {early:?}");
        q.conn.set_read_timeout(None).unwrap();
        q.send(Frame::new(typ::OK, close.id, vec![]));
        assert_eq!(q.conn.read(&mut rest).expect("read"), 0, "the client sends nothing after the CLOSE");
    });
    let s = Session::connect(&addr, opts()).unwrap();
    let a = s.acquire("a", AcquireOptions::new()).unwrap();
    let b = s.acquire("b", AcquireOptions::new()).unwrap();
    s.acquire("o", AcquireOptions::new()).unwrap().orphan();
    let l = s.acquire("l", AcquireOptions::new().lease(Duration::from_millis(100))).unwrap();
    assert_eq!(l.wait_lost(Duration::from_secs(30)), Some(LostReason::LeaseExpired));
    assert_eq!(a.wait_lost(Duration::from_secs(30)), Some(LostReason::SessionExpired));
    // The session's end, once seen, has ended every lock.
    assert!(matches!(s.ended(), Some(Error::SessionExpired(_))));
    assert_eq!(b.lost(), Some(LostReason::SessionExpired));
    server.join().unwrap();
}
