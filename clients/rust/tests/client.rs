//! Behaviour of the client against a stand-in server: failures, timeouts,
//! cancellation.

mod common;

use std::io::ErrorKind;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use common::{dead_addr, FakeServer};
use locking_center::{CancelToken, Client, Error};

const LIMIT: Duration = Duration::from_secs(10);

#[test]
fn refused_connection_is_a_failure_not_busy() {
    let c = Client::new(dead_addr());
    assert!(matches!(c.lock("k"), Err(Error::Io(_))));
    assert!(matches!(c.try_lock("k"), Err(Error::Io(_))));
}

#[test]
fn answers_map_to_results() {
    let s = FakeServer::start(Some(b"-"));
    assert!(matches!(Client::new(&s.addr).lock("k"), Err(Error::Refused)));
    let s = FakeServer::start(Some(b"#"));
    assert!(!Client::new(&s.addr).try_lock("k").unwrap());
    assert!(matches!(Client::new(&s.addr).lock("k"), Err(Error::Protocol(b'#'))));
    let s = FakeServer::start(Some(b""));
    let r = Client::new(&s.addr).unlock("k");
    assert!(matches!(&r, Err(Error::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof), "{r:?}");
}

#[test]
fn timeout_withdraws() {
    let s = FakeServer::start(None);
    let r = Client::new(&s.addr).lock_timeout("k", Duration::from_millis(200));
    assert!(matches!(r, Err(Error::Timeout)), "{r:?}");
    s.peer_closed.recv_timeout(LIMIT).expect("the server never saw the connection close");
}

#[test]
fn cancel_withdraws_a_parked_lock() {
    let s = FakeServer::start(None);
    let c = Client::new(&s.addr);
    let token = CancelToken::new();
    let t = token.clone();
    let waiter = thread::spawn(move || c.lock_cancellable("k", &t));
    s.received.recv_timeout(LIMIT).expect("the request never arrived");
    token.cancel();
    let r = waiter.join().unwrap();
    assert!(matches!(r, Err(Error::Cancelled)), "{r:?}");
    s.peer_closed.recv_timeout(LIMIT).expect("the server never saw the connection close");
    let r = Client::new(&s.addr).lock_cancellable("k", &token);
    assert!(matches!(r, Err(Error::Cancelled)), "a cancelled token stays cancelled: {r:?}");
}

#[test]
fn errors_display() {
    assert_eq!(Error::InvalidKey { len: 128 }.to_string(), "key must be 1 to 127 bytes, got 128");
    assert_eq!(Error::Protocol(b'x').to_string(), "unexpected answer 0x78");
}

/// Runs `call` on its own thread and returns its result; a call still
/// running after LIMIT fails the test instead of hanging it.
fn within_limit<T: Send + 'static>(call: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(call());
    });
    rx.recv_timeout(LIMIT).expect("the call did not return")
}

fn is_read_timeout<T: std::fmt::Debug>(r: &locking_center::Result<T>) -> bool {
    matches!(r, Err(Error::Io(e)) if e.kind() == ErrorKind::TimedOut && e.to_string().starts_with("no answer within"))
}

#[test]
fn calls_that_do_not_wait_give_up_after_the_read_timeout() {
    let s = FakeServer::start(None);
    let c = Client::new(&s.addr).with_read_timeout(Some(Duration::from_millis(50)));
    type Call = fn(&Client) -> locking_center::Result<()>;
    let calls: [(&str, Call); 4] = [
        ("try_lock", |c| c.try_lock("k").map(drop)),
        ("unlock", |c| c.unlock("k")),
        ("reset_by_key", |c| c.reset_by_key("k")),
        ("reset_by_source", |c| c.reset_by_source("s")),
    ];
    for (name, call) in calls {
        let c = c.clone();
        let r = within_limit(move || call(&c));
        assert!(is_read_timeout(&r), "{name}: {r:?}");
    }
}

#[test]
fn the_release_of_wait_gives_up_after_the_read_timeout() {
    // The lock is granted at once; the unlock after it is never answered.
    let s = FakeServer::start_with(|action| (action == 1).then_some(&b"+"[..]), None);
    let c = Client::new(&s.addr).with_read_timeout(Some(Duration::from_millis(50)));
    let r = within_limit(move || c.wait("k"));
    assert!(is_read_timeout(&r), "{r:?}");
}

#[test]
fn lock_has_no_read_timeout() {
    let (grant, gate) = mpsc::channel();
    let s = FakeServer::start_with(|_| Some(&b"+"[..]), Some(gate));
    let c = Client::new(&s.addr).with_read_timeout(Some(Duration::from_millis(10)));
    let (tx, done) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(c.lock("k"));
    });
    s.received.recv_timeout(LIMIT).expect("the request never arrived");
    // Fifty read timeouts pass without an answer.
    let early = done.recv_timeout(Duration::from_millis(500));
    assert!(early.is_err(), "lock returned before its grant: {early:?}");
    grant.send(()).unwrap();
    let r = done.recv_timeout(LIMIT).expect("lock did not return after its grant");
    assert!(r.is_ok(), "{r:?}");
}
