//! Session scenarios of clients/conformance/sessions.sh for the Rust
//! client (clients/conformance/SESSIONS.md).
//!
//!     session-conformance [ID...]
//!     session-conformance hold ADDR TTL_MS DELAY_MS KEY...
//!
//! Runs every scenario, or those named, in SESSIONS.md's order, and prints
//! one line per scenario, "ok <id>" or "FAIL <id>: <reason>"; chatter goes
//! to standard error. `hold` is the child process of s-kill-client: it
//! holds the keys in one session and prints "held" until it is killed.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use locking_center::session::{AcquireOptions, Error, LockGuard, LostReason, Session, SessionOptions};
use locking_center::CancelToken;

type Outcome = Result<(), String>;

/// A scenario: its id and what runs it.
type Scenario = (&'static str, fn() -> Outcome);

/// Turns any error into the scenario's failure, with what was being done.
trait Context<T> {
    fn ctx(self, what: &str) -> Result<T, String>;
}

impl<T, E: std::fmt::Display> Context<T> for Result<T, E> {
    fn ctx(self, what: &str) -> Result<T, String> {
        self.map_err(|e| format!("{what}: {e}"))
    }
}

fn env(name: &str) -> Result<String, String> {
    std::env::var(name).ok().filter(|v| !v.is_empty()).ok_or_else(|| format!("{name} is not set"))
}

fn log(msg: &str) {
    eprintln!("  {msg}");
}

/// The run's id, the same for every key of the run.
fn run_id() -> String {
    static RUN: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
    let mut run = RUN.lock().unwrap_or_else(|e| e.into_inner());
    run.get_or_insert_with(|| {
        let t = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() % 1_000_000_000).unwrap_or(0);
        t.to_string()
    })
    .clone()
}

/// Keys of one run differ from those of a run before against the same servers.
fn key(name: &str) -> String {
    format!("rust/{name}/{}", run_id())
}

fn probe(args: &[&str]) -> Result<String, String> {
    let out = Command::new(env("LC_PROBE")?).args(args).output().ctx("run the probe")?;
    if !out.status.success() {
        return Err(format!(
            "probe {}: {}: {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn waiters(manager: &str, k: &str, n: usize) -> Outcome {
    probe(&["waiters", manager, k, &n.to_string()]).map(drop)
}

/// (token, session, note) of every holder of k.
fn holders(manager: &str, k: &str) -> Result<Vec<(u64, u64, String)>, String> {
    let mut out = Vec::new();
    for line in probe(&["holders", manager, k])?.lines() {
        let mut parts = line.splitn(3, ' ');
        let token = parts.next().unwrap_or("").parse().ctx("holders: token")?;
        let session = parts.next().unwrap_or("").parse().ctx("holders: session")?;
        out.push((token, session, parts.next().unwrap_or("").to_string()));
    }
    Ok(out)
}

fn expect_held(manager: &str, k: &str, token: u64) -> Outcome {
    let got: Vec<u64> = holders(manager, k)?.into_iter().map(|h| h.0).collect();
    if got != [token] {
        return Err(format!("holders of {k}: {got:?}, want [{token}]"));
    }
    Ok(())
}

fn single() -> Result<(String, String), String> {
    Ok((env("LC_ADDR")?, env("LC_MANAGER_ADDR")?))
}

fn open(addr: &str, name: &str) -> Result<Session, String> {
    Session::connect(addr, SessionOptions::default().name(name)).ctx(&format!("session at {addr}"))
}

fn open_ttl(addr: &str, name: &str, ttl: Duration) -> Result<Session, String> {
    Session::connect(addr, SessionOptions::default().name(name).ttl(ttl)).ctx(&format!("session at {addr}"))
}

fn plain() -> AcquireOptions {
    AcquireOptions::new()
}

/// Runs `f` on a thread; the receiver hears its result.
fn background<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> mpsc::Receiver<T> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx
}

fn join<T>(rx: &mpsc::Receiver<T>, within: Duration, what: &str) -> Result<T, String> {
    rx.recv_timeout(within).map_err(|_| format!("{what}: no result within {within:?}"))
}

fn s_acquire_release() -> Outcome {
    let (addr, _) = single()?;
    let k = key("acquire-release");
    let s = open(&addr, "rust-ar")?;
    let a = s.acquire(&k, plain()).ctx("acquire")?;
    let first = a.token();
    a.release().ctx("release")?;
    let b = s.acquire(&k, plain()).ctx("second acquire")?;
    if b.token() <= first {
        return Err(format!("second token {} not above the first {first}", b.token()));
    }
    let token = b.token();
    b.release().ctx("release")?;
    s.release(&k, token).ctx("release of a released lock, by its token")?;
    Ok(())
}

fn s_try_busy() -> Outcome {
    let (addr, _) = single()?;
    let k = key("try-busy");
    let (h, t) = (open(&addr, "rust-holder")?, open(&addr, "rust-try")?);
    let _held = h.acquire(&k, plain()).ctx("acquire")?;
    match t.try_acquire(&k, plain()) {
        Ok(None) => Ok(()),
        Ok(Some(g)) => Err(format!("a try of a held key was granted: {g:?}")),
        Err(e) => Err(format!("a try of a held key failed: {e}")),
    }
}

fn s_wait_bound() -> Outcome {
    let (addr, manager) = single()?;
    let k = key("wait-bound");
    let (h, w) = (open(&addr, "rust-holder")?, open(&addr, "rust-waiter")?);
    let _held = h.acquire(&k, plain()).ctx("acquire")?;
    let start = Instant::now();
    match w.acquire(&k, plain().wait(Duration::from_millis(500))) {
        Err(Error::Timeout(m)) => log(&format!("timeout after {:?}: {m}", start.elapsed())),
        Err(e) => return Err(format!("a bounded wait failed otherwise: {e}")),
        Ok(_) => return Err("a bounded wait of a held key was granted".into()),
    }
    let took = start.elapsed();
    if took < Duration::from_millis(450) || took > Duration::from_secs(3) {
        return Err(format!("the wait bound of 500 ms took {took:?}"));
    }
    waiters(&manager, &k, 0)
}

fn s_cancel() -> Outcome {
    let (addr, manager) = single()?;
    let k = key("cancel");
    let h = open(&addr, "rust-holder")?;
    let b = std::sync::Arc::new(open(&addr, "rust-cancel")?);
    let held = h.acquire(&k, plain()).ctx("acquire")?;
    let cancel = CancelToken::new();
    let (b2, k2, c2) = (b.clone(), k.clone(), cancel.clone());
    let parked = background(move || b2.acquire(&k2, plain().cancel(&c2)).map(drop));
    waiters(&manager, &k, 1)?;
    cancel.cancel();
    let start = Instant::now();
    match join(&parked, Duration::from_secs(5), "the cancelled acquire")? {
        Err(Error::Cancelled(_)) => {}
        other => return Err(format!("the cancelled acquire gave {other:?}")),
    }
    waiters(&manager, &k, 0)?;
    if start.elapsed() > Duration::from_secs(1) {
        return Err(format!("the queue emptied {:?} after the cancel, want 1 s", start.elapsed()));
    }
    let (b2, k2) = (b.clone(), k.clone());
    let next = background(move || b2.acquire(&k2, plain()).map(|g| g.token()));
    waiters(&manager, &k, 1)?;
    held.release().ctx("release")?;
    join(&next, Duration::from_secs(10), "the next waiter")?.ctx("the next waiter")?;
    Ok(())
}

fn s_stale_release() -> Outcome {
    let (addr, manager) = single()?;
    let k = key("stale");
    let (h, o) = (open(&addr, "rust-holder")?, open(&addr, "rust-other")?);
    let lk = h.acquire(&k, plain()).ctx("acquire")?;
    for (who, s, token) in [("another session", &o, lk.token()), ("a wrong token", &h, lk.token() + 1)] {
        match s.release(&k, token) {
            Err(Error::LockLost(LostReason::StaleToken, _)) => {}
            other => return Err(format!("release by {who}: {other:?}, want a stale token")),
        }
    }
    expect_held(&manager, &k, lk.token())?;
    lk.release().ctx("release")
}

fn s_lease_expiry() -> Outcome {
    let (addr, _) = single()?;
    let k = key("lease");
    let (s, o) = (open(&addr, "rust-lease")?, open(&addr, "rust-after")?);
    let start = Instant::now();
    let lk =
        s.acquire(&k, plain().lease(Duration::from_millis(500)).lock_delay(Duration::from_secs(2))).ctx("acquire")?;
    let reason = lk.wait_lost(Duration::from_secs(2));
    let lost_at = Instant::now();
    log(&format!("lease lost after {:?}: {reason:?}", start.elapsed()));
    if reason != Some(LostReason::LeaseExpired) {
        return Err(format!("lost: {reason:?}, want lease expired within 2 s"));
    }
    if let Some(g) = o.try_acquire(&k, plain()).ctx("try after the loss")? {
        return Err(format!("a try right after the loss was granted ({}): no lock-delay", g.token()));
    }
    let g = o.acquire(&k, plain().wait(Duration::from_secs(5))).ctx("acquire after the loss")?;
    let after = lost_at.elapsed();
    log(&format!("granted {after:?} after the loss"));
    if after > Duration::from_secs(5) {
        return Err(format!("granted {after:?} after the loss, want within 5 s"));
    }
    g.release().ctx("release")
}

/// The child of s-kill-client: holds the keys until killed.
fn hold(args: &[String]) -> ExitCode {
    let (addr, ttl, delay, keys) = match args {
        [addr, ttl, delay, keys @ ..] => (addr, ttl, delay, keys),
        _ => {
            eprintln!("usage: session-conformance hold ADDR TTL_MS DELAY_MS KEY...");
            return ExitCode::from(2);
        }
    };
    let ms = |s: &String| Duration::from_millis(s.parse().unwrap_or(0));
    let run = || -> Result<(Session, Vec<LockGuard>), Error> {
        let s = Session::connect(addr, SessionOptions::default().name("rust-kill").ttl(ms(ttl)))?;
        let mut held = Vec::new();
        for k in keys {
            held.push(s.acquire(k, AcquireOptions::new().lock_delay(ms(delay)))?);
        }
        Ok((s, held))
    };
    match run() {
        Ok(_kept) => {
            println!("held");
            let _ = std::io::stdout().flush();
            loop {
                thread::park();
            }
        }
        Err(e) => {
            println!("failed {e}");
            ExitCode::FAILURE
        }
    }
}

fn s_kill_client() -> Outcome {
    let (addr, manager) = single()?;
    let keys: Vec<String> = (0..3).map(|i| key(&format!("kill-{i}"))).collect();
    let exe = std::env::current_exe().ctx("the program's path")?;
    let mut child = Command::new(exe)
        .args(["hold", &addr, "2000", "1000"])
        .args(&keys)
        .stdout(Stdio::piped())
        .spawn()
        .ctx("start the child")?;
    let result = (|| {
        let mut line = String::new();
        BufReader::new(child.stdout.take().ok_or("no stdout")?).read_line(&mut line).ctx("read the child")?;
        if !line.starts_with("held") {
            return Err(format!("the child said {line:?}"));
        }
        child.kill().ctx("kill the child")?;
        let killed = Instant::now();
        let _ = child.wait();
        let s = open(&addr, "rust-after-kill")?;
        thread::sleep((killed + Duration::from_secs(1)).saturating_duration_since(Instant::now()));
        for k in &keys {
            if holders(&manager, k)?.is_empty() {
                return Err(format!("{k} free 1 s after the kill, before its TTL and lock-delay"));
            }
        }
        let mut free = Vec::new();
        while free.len() < keys.len() && killed.elapsed() < Duration::from_secs(5) {
            for k in &keys {
                if !free.iter().any(|(f, _)| f == k) {
                    if let Some(g) = s.try_acquire(k, plain()).ctx("try")? {
                        free.push((k.clone(), killed.elapsed()));
                        g.release().ctx("release")?;
                    }
                }
            }
            thread::sleep(Duration::from_millis(10));
        }
        log(&format!("free after the kill: {:?}", free.iter().map(|f| f.1).collect::<Vec<_>>()));
        if free.len() < keys.len() {
            return Err(format!("{} keys still held 5 s after the kill", keys.len() - free.len()));
        }
        Ok(())
    })();
    stop(&mut child);
    result
}

fn stop(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn s_resume() -> Outcome {
    let (addr, manager) = single()?;
    let (proxy, ctl) = (env("LC_PROXY_ADDR")?, env("LC_PROXY_CTL")?);
    let (ka, kb) = (key("resume-a"), key("resume-b"));
    let s = std::sync::Arc::new(open_ttl(&proxy, "rust-resume", Duration::from_secs(5))?);
    let o = open(&addr, "rust-b")?;
    let a = s.acquire(&ka, plain()).ctx("acquire A")?;
    let b_held = o.acquire(&kb, plain()).ctx("acquire B by the other")?;
    let (s2, kb2) = (s.clone(), kb.clone());
    let parked = background(move || s2.acquire(&kb2, plain()));
    waiters(&manager, &kb, 1)?;
    probe(&["cut", &ctl])?;
    b_held.release().ctx("release B")?;
    let got = join(&parked, Duration::from_secs(10), "the parked acquire after the cut")?
        .ctx("the parked acquire after the cut")?;
    expect_held(&manager, &ka, a.token())?;
    expect_held(&manager, &kb, got.token())?;
    if let Some(r) = a.lost() {
        return Err(format!("lock A lost over the cut: {r}"));
    }
    a.release().ctx("release A")?;
    got.release().ctx("release B")
}

fn cluster() -> Result<(String, Vec<String>), String> {
    Ok((env("LC_CLUSTER")?, env("LC_CLUSTER_MANAGER")?.split(',').map(String::from).collect()))
}

fn leader_manager(managers: &[String]) -> Result<String, String> {
    let i: usize = probe(&["leader", &managers.join(",")])?.trim().parse().ctx("probe leader")?;
    managers.get(i).cloned().ok_or_else(|| format!("leader index {i}"))
}

fn s_leader_stop() -> Outcome {
    let (addrs, managers) = cluster()?;
    let k = key("leader-stop");
    let s = open_ttl(&addrs, "rust-ls", Duration::from_secs(3))?;
    let lk = s.acquire(&k, plain()).ctx("acquire")?;
    let stopped: usize = probe(&["signal-leader", "STOP"])?.trim().parse().ctx("signal-leader")?;
    log(&format!("stopped node {stopped}"));
    thread::sleep(Duration::from_secs(6));
    probe(&["signal-leader", "CONT"])?;
    if let Some(e) = s.ended() {
        return Err(format!("the session ended: {e}"));
    }
    if let Some(r) = lk.lost() {
        return Err(format!("the lock was lost: {r}"));
    }
    let live: Vec<String> =
        managers.iter().enumerate().filter(|(i, _)| *i != stopped).map(|(_, m)| m.clone()).collect();
    expect_held(&leader_manager(&live)?, &k, lk.token())?;
    log(&format!("session on {:?}", s.address()));
    lk.release().ctx("release")
}

fn s_leader_kill() -> Outcome {
    let (addrs, managers) = cluster()?;
    let (k1, k2) = (key("leader-kill-1"), key("leader-kill-2"));
    let s = std::sync::Arc::new(open_ttl(&addrs, "rust-lk", Duration::from_secs(5))?);
    let o = open_ttl(&addrs, "rust-lk-2", Duration::from_secs(5))?;
    let held = s.acquire(&k1, plain()).ctx("acquire")?;
    let other = o.acquire(&k2, plain()).ctx("acquire by the other")?;
    let (s2, k22) = (s.clone(), k2.clone());
    let parked = background(move || s2.acquire(&k22, plain()));
    waiters(&leader_manager(&managers)?, &k2, 1)?;
    let killed: usize = probe(&["signal-leader", "KILL"])?.trim().parse().ctx("signal-leader")?;
    log(&format!("killed node {killed}"));
    let live: Vec<String> = managers.iter().enumerate().filter(|(i, _)| *i != killed).map(|(_, m)| m.clone()).collect();
    expect_held(&leader_manager(&live)?, &k1, held.token())?;
    other.release().ctx("release by the other")?;
    let got = join(&parked, Duration::from_secs(15), "the parked acquire after the failover")?
        .ctx("the parked acquire after the failover")?;
    expect_held(&leader_manager(&live)?, &k2, got.token())?;
    if let Some(r) = held.lost() {
        return Err(format!("the held lock was lost: {r}"));
    }
    Ok(())
}

/// TLS through a terminator: the standard library has no TLS, so the
/// client speaks plain TCP to `probe tls-proxy` on 127.0.0.1, which
/// speaks TLS to LC_TLS_ADDR and verifies it with LC_CA_FILE.
fn s_tls_token() -> Outcome {
    let (target, ca, token) = (env("LC_TLS_ADDR")?, env("LC_CA_FILE")?, env("LC_TOKEN")?);
    let mut terminator = Command::new(env("LC_PROBE")?)
        .args(["tls-proxy", &target, &ca])
        .stdout(Stdio::piped())
        .spawn()
        .ctx("start probe tls-proxy")?;
    let result = (|| {
        let mut line = String::new();
        BufReader::new(terminator.stdout.take().ok_or("no stdout")?).read_line(&mut line).ctx("read tls-proxy")?;
        let addr = line.split_whitespace().next().ok_or_else(|| format!("tls-proxy said {line:?}"))?.to_string();
        let opts = SessionOptions::default().name("rust-tls");
        let s = Session::connect(&addr, opts.clone().token(&token)).ctx("session with the token")?;
        s.acquire(key("tls"), plain()).ctx("acquire")?.release().ctx("release")?;
        match s.acquire("outside/rust", plain()) {
            Err(Error::Forbidden(_)) => {}
            other => return Err(format!("a key outside rust/: {other:?}, want forbidden")),
        }
        match Session::connect(&addr, opts.token(format!("{token}-wrong"))) {
            Err(Error::Unauthenticated(_)) => Ok(()),
            Err(e) => Err(format!("a wrong token: {e}, want unauthenticated")),
            Ok(_) => Err("a wrong token opened a session".into()),
        }
    })();
    let _ = terminator.kill();
    let _ = terminator.wait();
    result
}

fn s_modes() -> Outcome {
    let (addr, manager) = single()?;
    let (ks, kp, kr, kq) = (key("shared"), key("pool"), key("reentrant"), key("priority"));
    let a = open(&addr, "rust-m0")?;
    let b = std::sync::Arc::new(open(&addr, "rust-m1")?);
    let c = std::sync::Arc::new(open(&addr, "rust-m2")?);
    let r1 = a.acquire(&ks, plain().shared()).ctx("shared 1")?;
    let r2 = b.acquire(&ks, plain().shared()).ctx("shared 2")?;
    if holders(&manager, &ks)?.len() != 2 {
        return Err(format!("shared: holders {:?}", holders(&manager, &ks)?));
    }
    r1.release().ctx("release")?;
    r2.release().ctx("release")?;
    let p1 = a.acquire(&kp, plain().limit(2)).ctx("semaphore 1")?;
    let p2 = b.acquire(&kp, plain().limit(2)).ctx("semaphore 2")?;
    if let Some(g) = c.try_acquire(&kp, plain().limit(2)).ctx("semaphore try")? {
        return Err(format!("a third try of a semaphore of 2 was granted: {g:?}"));
    }
    p1.release().ctx("release")?;
    p2.release().ctx("release")?;
    let x = a.acquire(&kr, plain().reentrant().owner("job")).ctx("reentrant 1")?;
    let y = a.acquire(&kr, plain().reentrant().owner("job")).ctx("reentrant 2")?;
    if x.token() != y.token() || y.count() != 2 {
        return Err(format!("reentrant: tokens {} and {}, count {}", x.token(), y.token(), y.count()));
    }
    y.release().ctx("release")?;
    expect_held(&manager, &kr, x.token())?;
    x.release().ctx("release")?;
    let h = a.acquire(&kq, plain()).ctx("acquire")?;
    let (tx, order) = mpsc::channel();
    let take = |s: std::sync::Arc<Session>, name: &'static str, prio: i32| {
        let (tx, kq) = (tx.clone(), kq.clone());
        background(move || {
            let g = s.acquire(&kq, AcquireOptions::new().priority(prio))?;
            let _ = tx.send(name);
            g.release()
        })
    };
    let low = take(b.clone(), "low", 1);
    waiters(&manager, &kq, 1)?;
    let high = take(c.clone(), "high", 5);
    waiters(&manager, &kq, 2)?;
    h.release().ctx("release")?;
    for w in [low, high] {
        join(&w, Duration::from_secs(10), "a priority waiter")?.ctx("a priority waiter")?;
    }
    let got: Vec<&str> = order.try_iter().collect();
    if got != ["high", "low"] {
        return Err(format!("grant order {got:?}, want the higher priority first"));
    }
    Ok(())
}

fn s_note() -> Outcome {
    let (addr, manager) = single()?;
    let (k, note) = (key("note"), "nightly build 42 on ci-7, ünïcode");
    let s = open(&addr, "rust-note")?;
    let lk = s.acquire(&k, plain().note(note)).ctx("acquire")?;
    let got = holders(&manager, &k)?;
    if got != [(lk.token(), s.id(), note.to_string())] {
        return Err(format!("holders {got:?}, want the note {note:?}"));
    }
    lk.release().ctx("release")
}

fn s_big_token() -> Outcome {
    let (addr, manager) = (env("LC_BIG_ADDR")?, env("LC_BIG_MANAGER")?);
    let k = key("big");
    let s = open(&addr, "rust-big")?;
    let lk = s.acquire(&k, plain()).ctx("acquire")?;
    if lk.token() <= 1 << 63 {
        return Err(format!("token {} is not above 2^63", lk.token()));
    }
    expect_held(&manager, &k, lk.token())?;
    log(&format!("token {} (2^63 + {})", lk.token(), lk.token() - (1 << 63)));
    lk.release().ctx("release")
}

fn s_silent_server() -> Outcome {
    let addr = env("LC_SILENT_ADDR")?;
    let start = Instant::now();
    let opts = SessionOptions::default().name("rust-silent").read_timeout(Duration::from_secs(3));
    match Session::connect(&addr, opts) {
        Err(Error::Timeout(m)) => log(&format!("{m} after {:?}", start.elapsed())),
        Err(e) => return Err(format!("a silent server gave {e}, want a timeout")),
        Ok(_) => return Err("a session opened at a silent server".into()),
    }
    if start.elapsed() > Duration::from_secs(10) {
        return Err(format!("the timeout took {:?}", start.elapsed()));
    }
    Ok(())
}

fn s_fifo_mixed() -> Outcome {
    let (addr, manager) = single()?;
    let k = key("fifo-mixed");
    let h = open(&addr, "rust-f")?;
    let held = h.acquire(&k, plain()).ctx("acquire")?;
    let mut mine = Vec::new();
    let mut probes: Vec<(usize, Child)> = Vec::new();
    let result = (|| {
        for i in 0..5 {
            if i % 2 == 0 {
                let s = open(&addr, &format!("rust-f{i}"))?;
                let k = k.clone();
                mine.push((i, background(move || s.acquire(&k, plain()).map(|g| g.token()))));
            } else {
                let p = Command::new(env("LC_PROBE")?)
                    .args(["session-lock", &addr, &k])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()
                    .ctx("start probe session-lock")?;
                probes.push((i, p));
            }
            waiters(&manager, &k, i + 1)?;
        }
        held.release().ctx("release")?;
        let mut tokens = [0u64; 5];
        for (i, p) in probes.iter_mut() {
            let mut line = String::new();
            BufReader::new(p.stdout.take().ok_or("no stdout")?).read_line(&mut line).ctx("read session-lock")?;
            let t = line.strip_prefix("granted ").ok_or_else(|| format!("probe session-lock said {line:?}"))?;
            tokens[*i] = t.trim().parse().ctx("session-lock token")?;
            drop(p.stdin.take()); // releases
            let _ = p.wait();
        }
        for (i, rx) in &mine {
            tokens[*i] = join(rx, Duration::from_secs(10), "a Rust waiter")?.ctx("a Rust waiter")?;
        }
        let mut order: Vec<usize> = (0..5).collect();
        order.sort_by_key(|&i| tokens[i]);
        if order != [0, 1, 2, 3, 4] {
            return Err(format!("granted in the order {order:?}, want [0, 1, 2, 3, 4]"));
        }
        Ok(())
    })();
    for (_, p) in probes.iter_mut() {
        stop(p);
    }
    result
}

const SCENARIOS: &[Scenario] = &[
    ("s-acquire-release", s_acquire_release),
    ("s-try-busy", s_try_busy),
    ("s-wait-bound", s_wait_bound),
    ("s-cancel", s_cancel),
    ("s-stale-release", s_stale_release),
    ("s-lease-expiry", s_lease_expiry),
    ("s-kill-client", s_kill_client),
    ("s-resume", s_resume),
    ("s-leader-stop", s_leader_stop),
    ("s-leader-kill", s_leader_kill),
    ("s-tls-token", s_tls_token),
    ("s-modes", s_modes),
    ("s-note", s_note),
    ("s-big-token", s_big_token),
    ("s-silent-server", s_silent_server),
    ("s-fifo-mixed", s_fifo_mixed),
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("hold") {
        return hold(&args[1..]);
    }
    if let Some(bad) = args.iter().find(|a| !SCENARIOS.iter().any(|(n, _)| n == a)) {
        eprintln!("session-conformance: unknown scenario {bad}");
        return ExitCode::from(2);
    }
    let mut failed = false;
    for (name, scenario) in SCENARIOS {
        if !args.is_empty() && !args.iter().any(|a| a == name) {
            continue;
        }
        eprintln!("== {name}");
        let start = Instant::now();
        match scenario() {
            Ok(()) => println!("ok {name}"),
            Err(e) => {
                failed = true;
                println!("FAIL {name}: {}", e.replace('\n', " "));
            }
        }
        let _ = std::io::stdout().flush();
        log(&format!("{:?}", start.elapsed()));
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
