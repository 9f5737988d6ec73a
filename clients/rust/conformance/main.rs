//! Live scenarios of clients/conformance/run.sh for the Rust client.
//!
//! Reads LC_ADDR, LC_MANAGER_ADDR, LC_DEAD_ADDR, LC_SILENT_ADDR and LC_PROBE;
//! prints one line per scenario, "ok <id>" or "FAIL <id>: <reason>". Exits 1 when a scenario
//! failed, 2 when the environment is incomplete.

use std::env;
use std::process::{exit, Command};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use locking_center::{CancelToken, Client, Error};

/// How long a background call may take before the scenario fails.
const LIMIT: Duration = Duration::from_secs(60);
const PREFIX: &str = "rust/";
/// The read timeout of silent-server-times-out, and the bound each call
/// must return well within.
const SILENT_TIMEOUT: Duration = Duration::from_secs(1);
const SILENT_BOUND: Duration = Duration::from_secs(10);

type Outcome = Result<(), String>;
type Scenario = (&'static str, fn(&Env) -> Outcome);

struct Env {
    addr: String,
    manager: String,
    dead: String,
    silent: String,
    probe: String,
}

impl Env {
    fn client(&self, source: &str) -> Client {
        Client::new(&self.addr).with_source(source)
    }

    /// Blocks until `key` has exactly `n` parked waiters (the probe gives
    /// up after 10 s).
    fn waiters(&self, key: &str, n: usize) -> Outcome {
        let out = Command::new(&self.probe)
            .args(["waiters", &self.manager, key, &n.to_string()])
            .output()
            .map_err(|e| format!("run probe: {e}"))?;
        if !out.status.success() {
            return Err(format!("probe waiters {key:?} {n}: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(())
    }

    fn expect_holder(&self, key: &[u8], want: &str) -> Outcome {
        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
        let out = Command::new(&self.probe)
            .args(["holder", &self.manager, &hex])
            .output()
            .map_err(|e| format!("run probe: {e}"))?;
        let got = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !out.status.success() || got != want {
            return Err(format!("holder of {hex} is {got:?} (probe {}), want {want:?}", out.status));
        }
        Ok(())
    }
}

/// A call running on its own thread.
struct Background(mpsc::Receiver<locking_center::Result<()>>);

impl Background {
    fn start(f: impl FnOnce() -> locking_center::Result<()> + Send + 'static) -> Background {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let _ = tx.send(f());
        });
        Background(rx)
    }

    fn join(self) -> Result<locking_center::Result<()>, String> {
        self.join_within(LIMIT)
    }

    fn join_within(self, limit: Duration) -> Result<locking_center::Result<()>, String> {
        self.0.recv_timeout(limit).map_err(|_| format!("background call still blocked after {limit:?}"))
    }
}

fn ensure(cond: bool, msg: impl FnOnce() -> String) -> Outcome {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}

fn s<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

fn lock_unlock(e: &Env) -> Outcome {
    let key = format!("{PREFIX}lock-unlock");
    let c = e.client("rust-lock-unlock");
    c.lock(&key).map_err(s)?;
    e.expect_holder(key.as_bytes(), "rust-lock-unlock")?;
    c.unlock(&key).map_err(s)?;
    ensure(c.try_lock(&key).map_err(s)?, || "try_lock after unlock lost".into())?;
    c.unlock(&key).map_err(s)
}

fn trylock_busy(e: &Env) -> Outcome {
    let key = format!("{PREFIX}trylock-busy");
    let a = e.client("rust-a");
    a.lock(&key).map_err(s)?;
    let r = (|| -> Outcome {
        ensure(!e.client("rust-b").try_lock(&key).map_err(s)?, || "try_lock of a held key won".into())?;
        e.expect_holder(key.as_bytes(), "rust-a")
    })();
    a.unlock(&key).map_err(s)?;
    r
}

fn fifo_three(e: &Env) -> Outcome {
    let key = format!("{PREFIX}fifo-three");
    let holder = e.client("rust-holder");
    holder.lock(&key).map_err(s)?;
    let turns = Arc::new(Mutex::new(Vec::new()));
    let mut waiting = Vec::new();
    let parked = (|| -> Outcome {
        for i in 1..=3 {
            let (w, k, t) = (e.client(&format!("rust-w{i}")), key.clone(), turns.clone());
            waiting.push(Background::start(move || {
                w.lock(&k)?;
                t.lock().unwrap().push(i);
                w.unlock(&k)
            }));
            e.waiters(&key, i)?;
        }
        Ok(())
    })();
    holder.unlock(&key).map_err(s)?;
    parked?;
    for (i, w) in waiting.into_iter().enumerate() {
        w.join()?.map_err(|err| format!("waiter {}: {err}", i + 1))?;
    }
    let got = turns.lock().unwrap().clone();
    ensure(got == [1, 2, 3], || format!("grant order {got:?}, want [1, 2, 3]"))
}

fn wait_holds_nothing(e: &Env) -> Outcome {
    let key = format!("{PREFIX}wait-holds-nothing");
    let c = e.client("rust-wait");
    c.wait(&key).map_err(s)?;
    e.expect_holder(key.as_bytes(), "free")?;
    ensure(e.client("rust-other").try_lock(&key).map_err(s)?, || "try_lock after wait lost".into())?;
    c.unlock(&key).map_err(s)
}

fn reset_key(e: &Env) -> Outcome {
    let key = format!("{PREFIX}reset-key");
    e.client("rust-holder").lock(&key).map_err(s)?;
    let (waiter, k) = (e.client("rust-waiter"), key.clone());
    let w = Background::start(move || waiter.lock(&k));
    e.waiters(&key, 1)?;
    e.client("").reset_by_key(&key).map_err(s)?;
    w.join()?.map_err(|err| format!("waiter after reset: {err}"))?;
    e.expect_holder(key.as_bytes(), "rust-waiter")?;
    e.client("").unlock(&key).map_err(s)
}

fn reset_source_withdraws(e: &Env) -> Outcome {
    let key = format!("{PREFIX}reset-source");
    let holder = e.client("rust-s1");
    holder.lock(&key).map_err(s)?;
    let r = (|| -> Outcome {
        let (waiter, k) = (e.client("rust-s2"), key.clone());
        let w = Background::start(move || waiter.lock(&k));
        e.waiters(&key, 1)?;
        e.client("").reset_by_source("rust-s2").map_err(s)?;
        let got = w.join()?;
        ensure(matches!(got, Err(Error::Refused)), || format!("withdrawn waiter: {got:?}, want Error::Refused"))?;
        e.expect_holder(key.as_bytes(), "rust-s1")
    })();
    holder.unlock(&key).map_err(s)?;
    r
}

fn key_lengths(e: &Env) -> Outcome {
    let mut long = format!("{PREFIX}key-127-");
    long.push_str(&"k".repeat(127 - long.len()));
    let c = e.client("rust-long");
    c.lock(&long).map_err(s)?;
    e.expect_holder(long.as_bytes(), "rust-long")?;
    c.unlock(&long).map_err(s)?;
    let dead = Client::new(&e.dead);
    for key in [format!("{long}k"), String::new()] {
        let r = dead.lock(&key);
        ensure(matches!(r, Err(Error::InvalidKey { .. })), || format!("lock of a {}-byte key: {r:?}", key.len()))?;
        let r = dead.try_lock(&key);
        ensure(matches!(r, Err(Error::InvalidKey { .. })), || format!("try_lock of a {}-byte key: {r:?}", key.len()))?;
    }
    Ok(())
}

fn binary_key(e: &Env) -> Outcome {
    let mut key = PREFIX.as_bytes().to_vec();
    key.extend_from_slice(&[0x00, 0xff, 0x80, b'a']);
    let c = e.client("rust-binary");
    c.lock(&key).map_err(s)?;
    e.expect_holder(&key, "rust-binary")?;
    c.unlock(&key).map_err(s)?;
    e.expect_holder(&key, "free")
}

fn refused_connection(e: &Env) -> Outcome {
    let dead = Client::new(&e.dead);
    let key = format!("{PREFIX}refused");
    let r = dead.lock(&key);
    ensure(matches!(r, Err(Error::Io(_))), || format!("lock at a dead address: {r:?}, want Error::Io"))?;
    let r = dead.try_lock(&key);
    ensure(matches!(r, Err(Error::Io(_))), || format!("try_lock at a dead address: {r:?}, want Error::Io"))
}

fn cancel_withdraws(e: &Env) -> Outcome {
    let key = format!("{PREFIX}cancel");
    let holder = e.client("rust-holder");
    holder.lock(&key).map_err(s)?;
    let parked = (|| -> Result<Background, String> {
        let token = CancelToken::new();
        let (a, k, t) = (e.client("rust-a"), key.clone(), token.clone());
        let wa = Background::start(move || a.lock_cancellable(&k, &t));
        e.waiters(&key, 1)?;
        token.cancel();
        let got = wa.join()?;
        ensure(matches!(got, Err(Error::Cancelled)), || format!("cancelled waiter: {got:?}, want Error::Cancelled"))?;
        e.waiters(&key, 0)?;
        let (b, k) = (e.client("rust-b"), key.clone());
        let wb = Background::start(move || b.lock(&k));
        e.waiters(&key, 1)?;
        Ok(wb)
    })();
    holder.unlock(&key).map_err(s)?;
    parked?.join()?.map_err(|err| format!("waiter B: {err}"))?;
    e.expect_holder(key.as_bytes(), "rust-b")?;
    e.client("").unlock(&key).map_err(s)
}

fn silent_server_times_out(e: &Env) -> Outcome {
    let c = Client::new(&e.silent).with_source("rust-silent").with_read_timeout(Some(SILENT_TIMEOUT));
    let key = format!("{PREFIX}silent");
    type Call = fn(&Client, &str) -> locking_center::Result<()>;
    let calls: [(&str, Call); 4] = [
        ("try_lock", |c, k| match c.try_lock(k) {
            Ok(false) => Err(Error::Io(std::io::Error::new(std::io::ErrorKind::Other, "busy"))),
            r => r.map(drop),
        }),
        ("unlock", |c, k| c.unlock(k)),
        ("reset_by_key", |c, k| c.reset_by_key(k)),
        ("reset_by_source", |c, _| c.reset_by_source("rust-silent")),
    ];
    for (name, call) in calls {
        let (c, k) = (c.clone(), key.clone());
        let start = Instant::now();
        let r = Background::start(move || call(&c, &k)).join_within(SILENT_BOUND)?;
        let took = start.elapsed();
        match r {
            Err(Error::Io(err)) if err.kind() == std::io::ErrorKind::TimedOut => {}
            r => return Err(format!("{name} at a silent server: {r:?}, want Error::Io of kind TimedOut")),
        }
        ensure(took < SILENT_BOUND, || {
            format!("{name} at a silent server took {took:?}, want well under {SILENT_BOUND:?}")
        })?;
    }
    Ok(())
}

fn main() {
    let var = |name: &str| {
        env::var(name).unwrap_or_else(|_| {
            eprintln!("conformance: {name} must be set");
            exit(2)
        })
    };
    let e = Env {
        addr: var("LC_ADDR"),
        manager: var("LC_MANAGER_ADDR"),
        dead: var("LC_DEAD_ADDR"),
        silent: var("LC_SILENT_ADDR"),
        probe: var("LC_PROBE"),
    };
    let scenarios: [Scenario; 11] = [
        ("lock-unlock", lock_unlock),
        ("trylock-busy", trylock_busy),
        ("fifo-three", fifo_three),
        ("wait-holds-nothing", wait_holds_nothing),
        ("reset-key", reset_key),
        ("reset-source-withdraws", reset_source_withdraws),
        ("key-127-ok-128-refused", key_lengths),
        ("binary-key", binary_key),
        ("refused-connection", refused_connection),
        ("cancel-withdraws", cancel_withdraws),
        ("silent-server-times-out", silent_server_times_out),
    ];
    let mut failed = false;
    for (id, run) in scenarios {
        match run(&e) {
            Ok(()) => println!("ok {id}"),
            Err(reason) => {
                failed = true;
                println!("FAIL {id}: {}", reason.replace('\n', " "));
            }
        }
    }
    exit(i32::from(failed));
}
