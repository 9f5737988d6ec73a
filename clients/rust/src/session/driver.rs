//! The session's driver: it writes what is queued, pings, keeps the
//! deadlines of leases and of the session, and resumes the session when a
//! connection drops or goes silent.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::net::Shutdown;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::frame::{code, find, find_uint, tag, typ, Field, Frame, PREFACE};

use super::conn::{handshake, Failure, Route};
use super::{lock, margin, Conn, Error, Held, Inner, LostReason, Replay, Request, State};

impl Inner {
    /// The session's loop: writes what is queued, pings, ends leases at the
    /// client's deadline, drops a silent connection and resumes the
    /// session, until it ends.
    pub(super) fn drive(self: Arc<Self>) {
        let mut g = lock(&self.st);
        loop {
            if g.ended.is_some() {
                return;
            }
            let now = Instant::now();
            if now >= self.lost_deadline(&g) {
                let why = format!(
                    "no answer from the server within the session's TTL ({:?}) less a margin of {:?}",
                    self.ttl,
                    margin(self.ttl)
                );
                let parting = Self::parting(&g);
                self.end(&mut g, Error::SessionExpired(why), LostReason::SessionExpired);
                drop(g);
                self.farewell(&parting);
                return;
            }
            let mut next = self.lost_deadline(&g);
            next = next.min(self.expire_leases(&mut g, now));
            let conn = match g.conn.as_ref() {
                Some(c) => c,
                None => {
                    // The resume runs on a thread of its own, so that the
                    // deadlines of leases and of the session are kept
                    // meanwhile.
                    if !g.reconnecting {
                        g.reconnecting = true;
                        let me = self.clone();
                        let spawned = thread::Builder::new().name("lc-session-resume".into()).spawn(move || {
                            me.reconnect();
                            lock(&me.st).reconnecting = false;
                            me.wake.notify_all();
                        });
                        if spawned.is_err() {
                            drop(g);
                            self.reconnect();
                            g = lock(&self.st);
                            g.reconnecting = false;
                            continue;
                        }
                    }
                    let wait = next.saturating_duration_since(now).max(Duration::from_millis(1));
                    g = self.wake.wait_timeout(g, wait).unwrap_or_else(|e| e.into_inner()).0;
                    continue;
                }
            };
            let (generation, addr, stream) = (conn.generation, conn.addr.clone(), conn.stream.clone());
            if now >= g.heard + self.silence() {
                self.detach(&mut g, generation);
                self.demote(&mut g, &addr);
                continue;
            }
            next = next.min(g.heard + self.silence());
            if g.ping.is_none() {
                let due = g.last_ack + self.keepalive;
                if now >= due {
                    g.next_id += 1;
                    let id = g.next_id;
                    g.ping = Some((id, now));
                    Frame::new(typ::PING, id, Vec::new()).encode_into(&mut g.out);
                } else {
                    next = next.min(due);
                }
            }
            if !g.out.is_empty() && !g.writing {
                let out = std::mem::take(&mut g.out);
                g.writing = true;
                drop(g);
                if (&*stream).write_all(&out).is_err() {
                    let _ = stream.shutdown(Shutdown::Both); // the reader sees it and detaches
                }
                g = lock(&self.st);
                g.writing = false;
                continue;
            }
            let wait = next.saturating_duration_since(now).max(Duration::from_millis(1));
            g = self.wake.wait_timeout(g, wait).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// Gives up the locks whose lease ran out by the client's count, each
    /// released by its token with `lapse`, so the server keeps the key's
    /// lock-delay. Returns the next lease deadline.
    fn expire_leases(&self, g: &mut State, now: Instant) -> Instant {
        let mut next = now + Duration::from_secs(3600);
        let due: Vec<u64> = g
            .holds
            .iter()
            .filter_map(|(t, h)| match h.deadline {
                Some(d) if d <= now => Some(*t),
                Some(d) => {
                    next = next.min(d);
                    None
                }
                None => None,
            })
            .collect();
        for token in due {
            let key = g.holds[&token].key.clone();
            Self::end_hold(g, token, LostReason::LeaseExpired, "its lease ran out by the client's count");
            let mut r = Request::new(typ::RELEASE);
            r.lapse = true;
            self.enqueue_release(g, &key, token, None, r);
        }
        next
    }

    /// A RELEASE with `lapse` of each lock the server may hold for the
    /// session, to go with the farewell, in the order of their tokens (ids
    /// are given when it is sent): the locks held and not orphaned, and
    /// those whose RELEASE is still unanswered (a lease that ran out here,
    /// a release under way, queued or sent while the server was out of
    /// reach).
    fn parting(g: &State) -> Vec<Frame> {
        let mut parting: BTreeMap<u64, &[u8]> = g
            .holds
            .iter()
            .filter(|(t, _)| !g.let_go.contains(*t))
            .map(|(t, h)| (*t, &h.key[..]))
            .collect();
        for r in g.inflight.values().filter(|r| r.typ == typ::RELEASE) {
            parting.insert(r.token, &r.key[..]);
        }
        parting
            .into_iter()
            .map(|(t, key)| {
                let fields = vec![Field::bytes(tag::KEY, key), Field::u64(tag::TOKEN, t), Field::u8(tag::LAPSE, 1)];
                Frame::new(typ::RELEASE, 0, fields)
            })
            .collect()
    }

    pub(super) fn follow(&self, g: &mut State, leader: String) {
        if !self.is_shunned(g, &leader) {
            g.leader = Some(leader);
        }
    }

    fn is_shunned(&self, g: &State, addr: &str) -> bool {
        g.addrs.len() > 1 && g.shunned.as_ref().map_or(false, |(a, until)| a == addr && Instant::now() < *until)
    }

    /// Sends the node at `addr`, whose connection went silent, to the back
    /// of the addresses, and shuns it for as long again.
    fn demote(&self, g: &mut State, addr: &str) {
        if g.leader.as_deref() == Some(addr) {
            g.leader = None;
        }
        if let Some(i) = g.addrs.iter().position(|a| a == addr) {
            let a = g.addrs.remove(i);
            g.addrs.push(a);
            g.at = 0;
        }
        g.shunned = Some((addr.to_string(), Instant::now() + self.silence()));
    }

    fn target(&self, g: &mut State) -> String {
        if let Some(l) = &g.leader {
            return l.clone();
        }
        if self.is_shunned(g, &g.addrs[g.at].clone()) {
            g.at = (g.at + 1) % g.addrs.len();
        }
        g.addrs[g.at].clone()
    }

    /// A random wait before reconnect attempt `n` (from 1): 50 ms doubling,
    /// at most a quarter of the keepalive and at most 500 ms, jittered.
    fn backoff(&self, g: &mut State, n: u32) -> Duration {
        let cap = (self.keepalive / 4).max(Duration::from_millis(50)).min(Duration::from_millis(500));
        let d = (Duration::from_millis(50) * (1u32 << n.saturating_sub(1).min(10))).min(cap);
        g.seed ^= g.seed << 13;
        g.seed ^= g.seed >> 7;
        g.seed ^= g.seed << 17;
        d / 2 + Duration::from_nanos(g.seed % (d.as_nanos() as u64 / 2 + 1))
    }

    /// Resumes the session on a new connection, at once and then with a
    /// growing backoff, until it is attached or the session has ended.
    fn reconnect(self: &Arc<Self>) {
        let mut attempt = 0u32;
        let mut hops = 0;
        loop {
            let mut g = lock(&self.st);
            if g.ended.is_some() || g.conn.is_some() {
                return;
            }
            if Instant::now() >= self.lost_deadline(&g) {
                return; // the driver ends the session
            }
            if g.leader.is_some() && hops <= g.addrs.len() {
                attempt = 0;
                hops += 1;
            } else {
                hops = 0;
            }
            if attempt > 0 {
                let d = self.backoff(&mut g, attempt);
                let until = (Instant::now() + d).min(self.lost_deadline(&g));
                while Instant::now() < until && g.ended.is_none() {
                    let left = until.saturating_duration_since(Instant::now());
                    g = self.wake.wait_timeout(g, left).unwrap_or_else(|e| e.into_inner()).0;
                }
            }
            attempt += 1;
            drop(g);
            match self.resume() {
                Ok(()) => return,
                Err(f) if !f.retry() => {
                    let mut g = lock(&self.st);
                    let err = match f {
                        Failure::Goodbye { code: code::UNAUTHENTICATED, message, .. } => {
                            Error::Unauthenticated(message)
                        }
                        Failure::Goodbye { message, .. } => Error::SessionExpired(format!(
                            "the session ended on the server while the client was away: {message}"
                        )),
                        Failure::Other(e) => e,
                    };
                    self.end(&mut g, err, LostReason::SessionExpired);
                    return;
                }
                Err(_) => {}
            }
        }
    }

    /// The first bytes of a resume: the preface, RESUME, the frames of
    /// `mid`, and a frame of type `then` without fields, with the next
    /// request ids in that order; the address to try, and the last frame's
    /// id.
    fn resume_with(&self, then: u8, mid: &[Frame]) -> (Vec<u8>, u64, String) {
        let mut g = lock(&self.st);
        let rid = g.next_id + 1;
        g.next_id += 2 + mid.len() as u64;
        let id = g.next_id;
        let mut fields = vec![Field::u64(tag::SESSION, self.id), Field::bytes(tag::SECRET, &self.secret)];
        if let Some(t) = &self.opts.token {
            fields.push(Field::bytes(tag::CREDENTIAL, t));
        }
        let mut b = PREFACE.to_vec();
        Frame::new(typ::RESUME, rid, fields).encode_into(&mut b);
        for (f, fid) in mid.iter().zip(rid + 1..) {
            Frame { id: fid, ..f.clone() }.encode_into(&mut b);
        }
        Frame::new(then, id, Vec::new()).encode_into(&mut b);
        (b, id, self.target(&mut g))
    }

    /// Notes that a handshake at `addr` failed: the next try goes to the
    /// leader it named, or to the next address.
    fn failed_at(&self, g: &mut State, addr: &str, f: &Failure) {
        let mut route = Route { addrs: g.addrs.clone(), at: g.at, leader: g.leader.clone() };
        route.failed(addr, f);
        g.at = route.at;
        g.leader = None;
        if let Some(l) = route.leader {
            self.follow(g, l);
        }
    }

    /// Closes on the server a session the client counted expired (the
    /// server may keep it, and its locks, until its own TTL, or longer
    /// after an election): RESUME, the RELEASEs of `parting` and CLOSE in
    /// one write, at each address in turn until a server answers, each
    /// attempt within the silence bound. The RELEASEs carry `lapse`, so
    /// each lock ends as its lease running out would and its key keeps
    /// the lock-delay its acquire asked for; a CLOSE alone would free the
    /// key at once, while this process may still be writing under the
    /// lock. (A server without `lapse` refuses them `unsupported`, and its
    /// CLOSE frees the locks without the delay.) Their answers are passed
    /// over; the CLOSE's ends the wait. Best effort: nothing else of the
    /// session goes with it.
    fn farewell(&self, parting: &[Frame]) {
        let tries = lock(&self.st).addrs.len();
        for _ in 0..tries {
            let (first, close, addr) = self.resume_with(typ::CLOSE, parting);
            match handshake(&addr, &first, &self.opts, self.silence()) {
                Ok((stream, mut rd, _)) => {
                    let _ = stream.set_read_timeout(Some(self.silence()));
                    while let Ok(f) = rd.next() {
                        if (f.typ == typ::OK && f.id == close) || f.typ == typ::GOODBYE {
                            break;
                        }
                    }
                    let _ = stream.shutdown(Shutdown::Both);
                    return;
                }
                Err(f) if f.retry() => self.failed_at(&mut lock(&self.st), &addr, &f),
                Err(_) => return, // the server no longer knows the session
            }
        }
    }

    /// One attempt to resume: RESUME and a PING in one write; on WELCOME
    /// the connection is attached, the requests the server never got are
    /// queued again and a reader started.
    fn resume(self: &Arc<Self>) -> std::result::Result<(), Failure> {
        let (first, sync, addr) = self.resume_with(typ::PING, &[]);
        let sent_at = Instant::now();
        let res = handshake(&addr, &first, &self.opts, self.silence());
        let mut g = lock(&self.st);
        let (stream, rd, w) = match res {
            Ok(x) => x,
            Err(f) => {
                self.failed_at(&mut g, &addr, &f);
                return Err(f);
            }
        };
        if w.uint(tag::SESSION) != Some(self.id) {
            return Err(Failure::Other(Error::Protocol("the WELCOME of a resume names another session".into())));
        }
        if g.ended.is_some() {
            let _ = stream.shutdown(Shutdown::Both);
            return Ok(());
        }
        let mut rs = Replay {
            sent_at,
            sync,
            applied: w.uint(tag::APPLIED).unwrap_or(0),
            held: HashMap::new(),
            by_request: HashMap::new(),
            parked: HashSet::new(),
            fresh: HashSet::new(),
        };
        for it in w.items(tag::HELD) {
            let token = find_uint(&it, tag::TOKEN).unwrap_or(0);
            let key = find(&it, tag::KEY).unwrap_or_default().to_vec();
            let count = find_uint(&it, tag::COUNT).unwrap_or(1).max(1) as u32;
            let left = find_uint(&it, tag::LEFT_MS).map(Duration::from_millis);
            if let Some(req) = find_uint(&it, tag::REQUEST) {
                rs.by_request.insert(req, token);
            }
            rs.held.insert(token, Held { key, count, left });
        }
        for it in w.items(tag::PARKED) {
            if let Some(req) = find_uint(&it, tag::REQUEST) {
                rs.parked.insert(req);
            }
        }
        let _ = stream.set_write_timeout(Some(self.silence()));
        self.ack(&mut g, sent_at);
        g.heard = Instant::now();
        let mut out = Vec::new();
        let ids: Vec<u64> = g.inflight.keys().copied().collect();
        for id in ids {
            if id <= rs.applied {
                continue; // it arrived; the reconciliation settles it
            }
            let gone_target = {
                let r = &g.inflight[&id];
                r.typ == typ::CANCEL && !g.inflight.contains_key(&r.target)
            };
            let r = g.inflight.get_mut(&id).expect("listed above");
            if (r.typ == typ::ACQUIRE && r.abandoned) || gone_target {
                g.inflight.remove(&id);
                continue;
            }
            r.resent = r.sent;
            r.sent = true;
            out.extend_from_slice(&r.frame);
        }
        g.generation += 1;
        let generation = g.generation;
        g.conn = Some(Conn { generation, addr, stream });
        g.out = out;
        g.ping = None;
        g.replay = Some(rs);
        self.wake.notify_all();
        drop(g);
        self.start_reader(generation, rd);
        Ok(())
    }
}
