//! Acquire+release cycles per second through one shared session: N threads
//! sharing one `Session`, each on its own key, against the lcd at ADDRESS;
//! with `--go BINARY`, the Go client's program of
//! clients/python/bench/session_bench.py (N goroutines sharing one
//! session) in the same rounds.
//!
//!     cargo run --release --offline --example session_bench -- ADDRESS \
//!         [--workers 16] [--seconds 5] [--rounds 3] [--go BINARY]
//!
//! Prints one line per round and client, then the medians: cycles per
//! second, and for Rust the process's CPU time (user and system, from
//! /proc/self/stat) per cycle, which depends less on what else the machine
//! runs.

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use locking_center::session::{AcquireOptions, Session, SessionOptions};

/// The process's user and system CPU time, in seconds (Linux).
fn cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command's closing parenthesis: utime and stime are
    // the 12th and 13th, in clock ticks (100 a second on Linux).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest.split_whitespace().map(|x| x.parse().unwrap_or(0.0)).collect();
    f.get(11).zip(f.get(12)).map_or(0.0, |(u, s)| (u + s) / 100.0)
}

/// One round: cycles per second and µs of CPU per cycle.
fn round(addr: &str, workers: usize, seconds: f64) -> (f64, f64) {
    let session = Arc::new(Session::connect(addr, SessionOptions::default().name("bench-rust")).expect("session"));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(workers + 1));
    let threads: Vec<_> = (0..workers)
        .map(|i| {
            let (session, stop, start) = (session.clone(), stop.clone(), start.clone());
            thread::spawn(move || {
                let key = format!("rust/bench/t{i}");
                start.wait();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    session.acquire(&key, AcquireOptions::new()).expect("acquire").release().expect("release");
                    n += 1;
                }
                n
            })
        })
        .collect();
    start.wait();
    let (t0, c0) = (Instant::now(), cpu());
    thread::sleep(Duration::from_secs_f64(seconds));
    stop.store(true, Ordering::Relaxed);
    let n: u64 = threads.into_iter().map(|t| t.join().expect("worker")).sum();
    let (elapsed, spent) = (t0.elapsed().as_secs_f64(), cpu() - c0);
    session.close().expect("close");
    (n as f64 / elapsed, spent / n as f64 * 1e6)
}

fn go_round(binary: &str, addr: &str, workers: usize, seconds: f64) -> f64 {
    let out = Command::new(binary)
        .args([addr, &workers.to_string(), &seconds.to_string()])
        .output()
        .expect("run the Go program");
    assert!(out.status.success(), "the Go program: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().parse().expect("the Go program's figure")
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let addr = args.first().cloned().unwrap_or_else(|| "localhost:22119".into());
    let opt = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let workers: usize = opt("--workers").map_or(16, |v| v.parse().expect("--workers"));
    let seconds: f64 = opt("--seconds").map_or(5.0, |v| v.parse().expect("--seconds"));
    let rounds: usize = opt("--rounds").map_or(3, |v| v.parse().expect("--rounds"));
    let go = opt("--go");
    let (mut rates, mut spent, mut go_rates) = (Vec::new(), Vec::new(), Vec::new());
    for r in 1..=rounds {
        let (rate, us) = round(&addr, workers, seconds);
        println!("round {r}: {workers} threads, one Rust Session: {rate:.0} cycles/s, {us:.0} µs CPU/cycle");
        rates.push(rate);
        spent.push(us);
        if let Some(bin) = &go {
            let rate = go_round(bin, &addr, workers, seconds);
            println!("round {r}: {workers} goroutines, one Go session: {rate:.0} cycles/s");
            go_rates.push(rate);
        }
    }
    println!("median rust: {:.0} cycles/s, {:.0} µs CPU/cycle", median(rates), median(spent));
    if !go_rates.is_empty() {
        println!("median go: {:.0} cycles/s", median(go_rates));
    }
}
