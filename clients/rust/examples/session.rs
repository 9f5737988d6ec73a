//! The session API in a few lines: the README quotes it.
//!
//!     cargo run --example session -- localhost:22119

use std::time::Duration;

use locking_center::session::{AcquireOptions, Session, SessionOptions};

fn main() -> Result<(), locking_center::session::Error> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "localhost:22119".into());
    let session = Session::connect(&addr, SessionOptions::from_env().name("rust-example"))?;

    // Wait for the key, at most 5 s; the guard releases it when dropped.
    let lock = session.acquire("rust/example/report", AcquireOptions::new().wait(Duration::from_secs(5)))?;
    println!("holding {} with token {}", String::from_utf8_lossy(lock.key()), lock.token());
    lock.release()?; // or let it drop

    // A try: None when someone else holds the key.
    match session.try_acquire("rust/example/report", AcquireOptions::new())? {
        Some(lock) => println!("free: token {}", lock.token()),
        None => println!("busy"),
    }

    // A lease, counted down on the client too: wait_lost says when it ran out.
    let leased = session.acquire("rust/example/lease", AcquireOptions::new().lease(Duration::from_millis(300)))?;
    match leased.wait_lost(Duration::from_secs(2)) {
        Some(reason) => println!("lost: {reason}"),
        None => println!("still held"),
    }
    session.close()
}
