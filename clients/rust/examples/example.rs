//! Takes a key, works while holding it, and releases it.
//!
//!     cargo run --example example -- [host:port]   (default localhost:22119)

use std::time::Duration;

use locking_center::{Client, Error};

fn main() -> Result<(), Error> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "localhost:22119".into());
    let client = Client::new(addr).with_source("example-report-job");

    // Blocks until the key is ours; other holders of the key queue behind us.
    client.lock("reports/daily")?;
    println!("holding reports/daily");
    client.unlock("reports/daily")?;

    // A try_lock that loses is Ok(false); failures are Err.
    if client.try_lock("reports/daily")? {
        println!("took reports/daily at once");
        client.unlock("reports/daily")?;
    } else {
        println!("reports/daily is busy");
    }

    // Give up after 2 s: the connection is closed, which withdraws the request.
    match client.lock_timeout("reports/daily", Duration::from_secs(2)) {
        Ok(()) => client.unlock("reports/daily")?,
        Err(Error::Timeout) => println!("not granted within 2 s; the request was withdrawn"),
        Err(e) => return Err(e),
    }
    Ok(())
}
