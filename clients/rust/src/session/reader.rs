//! Frames from the server: the reader of each connection, which routes
//! every frame to the request it answers, and the reconciliation after a
//! resume.

use std::collections::HashMap;
use std::net::Shutdown;
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::frame::{code, tag, typ, Frame};

use super::conn::{FrameReader, ReadError};
use super::guard::Cell;
use super::{deliver, eprintln_debug, lock, margin, Error, Hold, Inner, LostReason, Replay, Reply, Request, State};

impl Inner {
    pub(super) fn start_reader(self: &Arc<Self>, generation: u64, mut rd: FrameReader) {
        let me = self.clone();
        let spawned = thread::Builder::new().name("lc-session-reader".into()).spawn(move || {
            // Every whole frame of a read under one hold of the lock; the
            // callers are woken after it.
            let mut go_on = true;
            while go_on {
                let mut g = lock(&me.st);
                if g.generation != generation || g.conn.is_none() {
                    break;
                }
                g.heard = Instant::now();
                loop {
                    match rd.buffered() {
                        Ok(Some(f)) => {
                            if me.handle(&mut g, f) {
                                continue;
                            }
                            go_on = false;
                        }
                        Ok(None) => {}
                        Err(e) => {
                            if let ReadError::Format(e) = e {
                                eprintln_debug(&format!("session {}: dropping a connection: {e}", me.id));
                            }
                            go_on = false;
                        }
                    }
                    break;
                }
                let pending = std::mem::take(&mut g.pending);
                drop(g);
                me.hand_over(pending);
                if go_on && rd.fill().is_err() {
                    break;
                }
            }
            let mut g = lock(&me.st);
            me.detach(&mut g, generation);
            let _ = rd.stream.shutdown(Shutdown::Both);
        });
        if spawned.is_err() {
            let mut g = lock(&self.st);
            self.detach(&mut g, generation);
        }
    }

    /// Wakes the callers of the answers in `pending`. A grant whose caller
    /// has gone (it gave up the wait as the grant came) is released.
    fn hand_over(&self, pending: Vec<(Sender<Reply>, Reply)>) {
        for (tx, r) in pending {
            if let Err(mpsc::SendError(Reply::Granted(token, cell, _))) = tx.send(r) {
                let mut g = lock(&self.st);
                if let Some(key) = g.holds.get(&token).map(|h| h.key.clone()) {
                    if self.drop_cell(&mut g, token, &cell) {
                        self.release_quietly(&mut g, &key, token);
                    }
                }
            }
        }
    }

    pub(super) fn detach(&self, g: &mut State, generation: u64) {
        if g.generation == generation {
            if let Some(c) = g.conn.take() {
                let _ = c.stream.shutdown(Shutdown::Both);
            }
            g.out.clear();
            g.ping = None;
            g.replay = None;
            self.wake.notify_all();
        }
    }

    /// Applies one frame from the attached connection; false: stop reading
    /// it.
    fn handle(self: &Arc<Self>, g: &mut State, f: Frame) -> bool {
        match f.typ {
            typ::GRANTED | typ::OK | typ::REFUSED | typ::INFO => {
                if let Some((id, sent_at)) = g.ping {
                    if id == f.id {
                        self.ack(g, sent_at);
                        g.ping = None;
                        return true;
                    }
                }
                if g.replay.as_ref().map_or(false, |r| r.sync == f.id) {
                    self.reconcile(g);
                    return true;
                }
                let c = f.uint(tag::CODE).unwrap_or(0);
                let r = match g.inflight.get(&f.id) {
                    Some(r) => r,
                    None => return true,
                };
                if f.typ == typ::REFUSED && c == code::DUPLICATE && r.resent {
                    return true; // the old connection applied it: its answer comes too
                }
                let r = g.inflight.remove(&f.id).expect("looked up above");
                self.ack(g, r.sent_at);
                self.answer(g, r, &f, c);
                true
            }
            typ::LOST => {
                self.lost(g, &f);
                true
            }
            typ::GOODBYE => {
                let c = f.uint(tag::CODE).unwrap_or(0);
                let msg = format!("the server said goodbye: {}", f.text(tag::MESSAGE));
                match c {
                    code::SESSION_EXPIRED | code::UNKNOWN_SESSION => {
                        self.end(g, Error::SessionExpired(msg), LostReason::SessionExpired);
                    }
                    code::PROTOCOL_ERROR => self.end(g, Error::Protocol(msg), LostReason::SessionClosed),
                    code::UNAUTHENTICATED => self.end(g, Error::Unauthenticated(msg), LostReason::SessionClosed),
                    code::NOT_LEADER => {
                        let leader = f.text(tag::LEADER);
                        if !leader.is_empty() {
                            self.follow(g, leader);
                        }
                    }
                    _ => {}
                }
                false
            }
            typ::MORE => false, // a MORE that follows no frame with more: the server broke the protocol
            _ => true,          // EVENT, and frames this client does not know
        }
    }

    fn answer(self: &Arc<Self>, g: &mut State, r: Request, f: &Frame, c: u64) {
        let msg = f.text(tag::MESSAGE);
        match r.typ {
            typ::ACQUIRE => match f.typ {
                typ::GRANTED => self.granted(g, r, f),
                typ::REFUSED if r.abandoned => {}
                typ::REFUSED if c == code::BUSY => deliver(g, r.reply, Reply::Busy),
                typ::REFUSED => deliver(g, r.reply, Reply::Done(Err(Error::refused(c, msg)))),
                _ => {}
            },
            typ::RELEASE | typ::RENEW => {
                let res = if f.typ == typ::REFUSED {
                    if c == code::STALE_TOKEN {
                        Self::end_hold(g, r.token, LostReason::StaleToken, "the server no longer holds it");
                        if r.typ == typ::RELEASE && r.by_token && g.released.contains(&r.token) {
                            Ok(())
                        } else {
                            Err(Error::refused(c, msg))
                        }
                    } else {
                        Err(Error::refused(c, msg))
                    }
                } else {
                    if r.typ == typ::RELEASE {
                        Self::remember_released(g, r.token);
                    } else if let (Some(left), Some(h)) = (f.uint(tag::LEFT_MS), g.holds.get_mut(&r.token)) {
                        let left = Duration::from_millis(left);
                        h.deadline = Some(Self::measured_at(r.sent_at) + left - margin(left));
                        self.wake.notify_all();
                    }
                    Ok(())
                };
                deliver(g, r.reply, Reply::Done(res));
            }
            typ::CLOSE => {
                deliver(g, r.reply, Reply::Done(Ok(())));
                // Before the server's close of the connection, which must
                // not bring a resume.
                self.end(g, Error::Closed("the session was closed".into()), LostReason::SessionClosed);
            }
            _ => {}
        }
    }

    fn granted(self: &Arc<Self>, g: &mut State, r: Request, f: &Frame) {
        let token = f.uint(tag::TOKEN).unwrap_or(0);
        if r.abandoned {
            self.release_quietly(g, &r.key, token);
            return;
        }
        let count = f.uint(tag::COUNT).unwrap_or(1) as u32;
        let mut from = Self::measured_at(r.sent_at);
        let mut left = f.uint(tag::LEFT_MS).map(Duration::from_millis);
        let id = f.id;
        if let Some(rs) = g.replay.as_mut() {
            if id > rs.applied || rs.parked.contains(&id) {
                rs.fresh.insert(token);
            } else {
                let h = match rs.held.get(&token) {
                    Some(h) => h,
                    None => {
                        deliver(
                            g,
                            r.reply,
                            Reply::Done(Err(Error::LockLost(
                                LostReason::WhileAway,
                                "granted, then lost while the connection was down".into(),
                            ))),
                        );
                        return;
                    }
                };
                from = rs.sent_at;
                left = h.left;
            }
        }
        self.grant(g, r, token, count, from, left);
    }

    fn grant(&self, g: &mut State, r: Request, token: u64, count: u32, from: Instant, left: Option<Duration>) {
        let cell = Cell::new();
        let h = g.holds.entry(token).or_insert_with(|| Hold { key: r.key.clone(), cells: Vec::new(), deadline: None });
        h.cells.push(cell.clone());
        if let Some(left) = left {
            h.deadline = Some(from + left - margin(left));
            self.wake.notify_all();
        }
        match r.reply {
            Some(tx) => g.pending.push((tx, Reply::Granted(token, cell, count))),
            None => {
                self.drop_cell(g, token, &cell);
                self.release_quietly(g, &r.key, token);
            }
        }
    }

    fn lost(&self, g: &mut State, f: &Frame) {
        let token = f.uint(tag::TOKEN).unwrap_or(0);
        let reason = LostReason::from_code(f.uint(tag::CODE).unwrap_or(0));
        g.let_go.remove(&token);
        if g.holds.contains_key(&token) {
            Self::end_hold(g, token, reason, &format!("the server took it: {reason}"));
            return;
        }
        // A grant whose GRANTED went with a dropped connection.
        let applied = g.replay.as_ref().map_or(0, |r| r.applied);
        if f.id <= applied && g.inflight.get(&f.id).map_or(false, |r| r.typ == typ::ACQUIRE) {
            let r = g.inflight.remove(&f.id).expect("looked up above");
            deliver(
                g,
                r.reply,
                Reply::Done(Err(Error::LockLost(reason, "granted, then lost while the connection was down".into()))),
            );
        }
    }

    /// Settles the session after a resume, once every frame the server owed
    /// it has arrived, against what the WELCOME listed.
    fn reconcile(&self, g: &mut State) {
        let rs = match g.replay.take() {
            Some(rs) => rs,
            None => return,
        };
        let tokens: Vec<u64> = g.holds.keys().copied().collect();
        for token in tokens {
            if let Some(h) = rs.held.get(&token) {
                if let (Some(left), Some(hold)) = (h.left, g.holds.get_mut(&token)) {
                    hold.deadline = Some(rs.sent_at + left - margin(left));
                }
            } else if !rs.fresh.contains(&token) {
                Self::end_hold(g, token, LostReason::WhileAway, "lost while the connection was down");
            }
        }
        let ids: Vec<u64> = g.inflight.range(..=rs.applied).map(|(id, _)| *id).collect();
        let mut unanswered = Vec::new();
        for id in ids {
            let r = &g.inflight[&id];
            if r.typ == typ::ACQUIRE && rs.parked.contains(&id) {
                continue; // still waiting: answered later
            }
            let r = g.inflight.remove(&id).expect("listed above");
            match rs.by_request.get(&id) {
                Some(&token) if r.typ == typ::ACQUIRE && !r.abandoned => self.grant_listed(g, r, token, &rs),
                _ => unanswered.push(r),
            }
        }
        // What the server holds beyond the locks here and the releases in
        // flight: grants whose GRANTED went with the connection.
        let mut extra: HashMap<u64, i64> = HashMap::new();
        for (token, h) in &rs.held {
            let here = g.holds.get(token).map_or(0, |x| x.cells.len() as i64);
            extra.insert(*token, i64::from(h.count) - here);
        }
        for r in g.inflight.values() {
            if r.typ == typ::RELEASE {
                *extra.entry(r.token).or_default() -= 1;
            }
        }
        for r in unanswered {
            match r.typ {
                typ::ACQUIRE if !r.abandoned => {
                    let re = rs
                        .held
                        .iter()
                        .find(|(t, h)| r.reentrant && h.key == r.key && extra.get(t).copied().unwrap_or(0) > 0)
                        .map(|(t, _)| *t);
                    if let Some(token) = re {
                        *extra.entry(token).or_default() -= 1;
                        self.grant_listed(g, r, token, &rs);
                    } else {
                        deliver(
                            g,
                            r.reply,
                            Reply::Done(Err(Error::LockLost(
                                LostReason::WhileAway,
                                "the answer was lost with the connection: refused, or granted and lost since".into(),
                            ))),
                        );
                    }
                }
                typ::RENEW if !rs.held.contains_key(&r.token) => {
                    deliver(
                        g,
                        r.reply,
                        Reply::Done(Err(Error::LockLost(
                            LostReason::WhileAway,
                            "lost while the connection was down".into(),
                        ))),
                    );
                }
                _ => deliver(g, r.reply, Reply::Done(Ok(()))),
            }
        }
        for (token, h) in &rs.held {
            if g.let_go.contains(token) {
                continue;
            }
            for _ in 0..extra.get(token).copied().unwrap_or(0).max(0) {
                self.release_quietly(g, &h.key, *token);
            }
        }
        g.let_go.retain(|t| rs.held.contains_key(t));
        self.wake.notify_all();
    }

    fn grant_listed(&self, g: &mut State, r: Request, token: u64, rs: &Replay) {
        let h = &rs.held[&token];
        self.grant(g, r, token, h.count, rs.sent_at, h.left);
    }
}
