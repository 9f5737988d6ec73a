//! Behaviour of the client against a stand-in server: failures, timeouts,
//! cancellation.

mod common;

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
