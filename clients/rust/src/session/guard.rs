//! The lock a session holds, as its user sees it.

use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::frame::{tag, typ, Field};

use super::options::millis;
use super::{lock, Error, Inner, LostReason, Request, Result};

/// What one guard knows of its lock's end.
pub(super) struct Cell {
    pub(super) lost: Mutex<Option<(LostReason, String)>>,
    changed: Condvar,
}

impl Cell {
    pub(super) fn new() -> Arc<Cell> {
        Arc::new(Cell { lost: Mutex::new(None), changed: Condvar::new() })
    }
    pub(super) fn end(&self, reason: LostReason, why: &str) {
        let mut l = lock(&self.lost);
        if l.is_none() {
            *l = Some((reason, why.to_string()));
            self.changed.notify_all();
        }
    }
    pub(super) fn reason(&self) -> Option<(LostReason, String)> {
        lock(&self.lost).clone()
    }
}

/// A lock the session holds. Dropping it releases it: the RELEASE goes to
/// the session's writer and nothing waits for the network. It is `Send +
/// Sync`: another thread may wait for its loss with
/// [`LockGuard::wait_lost`] while this one works.
pub struct LockGuard {
    pub(super) session: Arc<Inner>,
    pub(super) key: Vec<u8>,
    pub(super) token: u64,
    pub(super) count: u32,
    pub(super) cell: Arc<Cell>,
    /// False once released or orphaned: the drop sends nothing.
    pub(super) live: bool,
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
    /// [`Session::release`](super::Session::release) by its token.
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
