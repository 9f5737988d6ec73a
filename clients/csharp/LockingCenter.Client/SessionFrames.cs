using System;
using System.Collections.Generic;
using System.Linq;
using System.Threading;

namespace LockingCenter
{
    // What the session does with the frames the server sends: answers,
    // grants, losses, GOODBYE, and the reconciliation after a resume. Every
    // method here runs under the gate.
    public sealed partial class Session
    {
        /// <summary>What the WELCOME of a resume listed, kept until the answer to its PING (everything the server owed has come by then).</summary>
        sealed class Replay
        {
            public ulong Applied, SyncId;
            public double SentAt;
            public readonly Dictionary<ulong, HeldItem> Held = new Dictionary<ulong, HeldItem>();
            public readonly Dictionary<ulong, ulong> ByRequest = new Dictionary<ulong, ulong>();
            public readonly HashSet<ulong> Parked = new HashSet<ulong>();
            public readonly HashSet<ulong> Fresh = new HashSet<ulong>();
        }

        sealed class HeldItem
        {
            public byte[] KeyBytes;
            public uint Count, Left;
            public bool Leased;
        }

        Replay ParseResume(Frame w)
        {
            ulong? sid = w.U64(Tag.Session);
            if (sid != id) throw new SessionProtocolException("the WELCOME of a resume names session " + sid);
            var rs = new Replay { Applied = w.U64(Tag.Applied) ?? 0 };
            foreach (Fields it in w.Items(Tag.Held))
            {
                ulong token = it.U64(Tag.Token) ?? 0;
                uint? left = it.Num(Tag.LeftMs);
                ulong request = it.U64(Tag.Request) ?? 0;
                rs.Held[token] = new HeldItem
                {
                    KeyBytes = it.Get(Tag.Key) ?? new byte[0],
                    Count = Math.Max(it.Num(Tag.Count) ?? 1, 1),
                    Left = left ?? 0,
                    Leased = left.HasValue,
                };
                rs.ByRequest[request] = token;
            }
            foreach (Fields it in w.Items(Tag.Parked)) rs.Parked.Add(it.U64(Tag.Request) ?? 0);
            return rs;
        }

        /// <summary>Applies one frame of the attached connection; false to drop the connection.</summary>
        bool Handle(Frame f)
        {
            switch (f.Type)
            {
                case FrameType.Granted:
                case FrameType.Ok:
                case FrameType.Refused:
                case FrameType.Info:
                {
                    if (ping != null && f.Id == ping.Id)
                    {
                        Ack(ping.SentAt);
                        ping = null;
                        return true;
                    }
                    if (replay != null && f.Id == replay.SyncId)
                    {
                        Reconcile();
                        return true;
                    }
                    Request r;
                    if (!inflight.TryGetValue(f.Id, out r)) return true;
                    int code = (int)(f.Num(Tag.Code) ?? 0);
                    // The old connection applied it after all; its own answer comes too.
                    if (f.Type == FrameType.Refused && code == Code.Duplicate && r.Resent) return true;
                    Ack(r.SentAt);
                    inflight.Remove(r.Id);
                    Answer(r, f, code);
                    return true;
                }
                case FrameType.Lost:
                    OnLost(f);
                    return true;
                case FrameType.Goodbye:
                {
                    SessionException e = Goodbye(f, conn.Addr);
                    if (e.GoodbyeCode == Code.SessionExpired || e.GoodbyeCode == Code.UnknownSession)
                    {
                        EndLost(e, LostReason.SessionExpired, "its session expired");
                    }
                    else if (e.GoodbyeCode == Code.ProtocolError)
                    {
                        EndLost(e, LostReason.NotHeld, "the server ended the session for a protocol error");
                    }
                    else if (e.GoodbyeCode == Code.NotLeader)
                    {
                        Follow(e.GoodbyeLeader);
                    }
                    return false; // shutting_down and the others: resume, elsewhere if need be
                }
            }
            return true; // EVENT, and frame types this client does not know
        }

        /// <summary>Applies the answer f (with its code) to r.</summary>
        void Answer(Request r, Frame f, int code)
        {
            string msg = f.Text(Tag.Message) ?? "";
            switch (r.Type)
            {
                case FrameType.Acquire:
                    if (f.Type == FrameType.Granted) OnGranted(r, f);
                    else if (f.Type == FrameType.Refused && r.NullWhenBusy && (code == Code.Busy || code == Code.Timeout)) Settle(r, null, null);
                    else if (f.Type == FrameType.Refused && code == Code.Busy) Settle(r, new SessionTimeoutException(What(r) + ": the key is busy (busy)", "busy", msg), null);
                    else if (f.Type == FrameType.Refused) Settle(r, Refusal.Of(What(r), code, msg), null);
                    return;
                case FrameType.Release:
                case FrameType.Renew:
                    if (f.Type == FrameType.Refused && code == Code.StaleToken)
                    {
                        Hold h;
                        LockLostException lost = LostError(r.KeyBytes, r.Token, LostReason.NotHeld, "the server no longer holds it", "stale_token");
                        if (holds.TryGetValue(r.Token, out h)) EndHold(h, lost);
                        Settle(r, r.Lock != null ? lost : Refusal.Of(What(r), code, msg), null);
                    }
                    else if (f.Type == FrameType.Refused)
                    {
                        Settle(r, Refusal.Of(What(r), code, msg), null);
                    }
                    else if (r.Type == FrameType.Renew)
                    {
                        Renewed(r, f);
                    }
                    else
                    {
                        Settle(r, null, null);
                    }
                    return;
                case FrameType.Close:
                    if (f.Type == FrameType.Refused)
                    {
                        Settle(r, Refusal.Of("close", code, msg), null);
                        return;
                    }
                    // Ended here, before the server's close of the connection can start a reconnect.
                    End(new SessionClosedException("session " + id + " closed"), true, h => LockState.Released, null);
                    Settle(r, null, null);
                    return;
                case FrameType.Describe:
                    if (f.Type == FrameType.Info) Settle(r, null, f);
                    else Settle(r, Refusal.Of(What(r), code, msg), null);
                    return;
            }
        }

        void Renewed(Request r, Frame f)
        {
            LockHandle lk = r.Lock;
            if (lk.StateLocked == LockState.Lost)
            {
                Settle(r, lk.CauseLocked, null);
                return;
            }
            uint? left = f.Num(Tag.LeftMs);
            if (left.HasValue && lk.Hold != null) SetLease(lk.Hold, MeasuredAt(r.SentAt), left.Value);
            Settle(r, null, null);
        }

        void OnGranted(Request r, Frame f)
        {
            ulong token = f.U64(Tag.Token) ?? 0;
            if (r.Abandoned)
            {
                EnqueueRelease(r.KeyBytes, token, null, false); // the grant crossed the cancel
                return;
            }
            uint? leftField = f.Num(Tag.LeftMs);
            uint left = leftField ?? 0;
            bool leased = leftField.HasValue;
            double from = MeasuredAt(r.SentAt);
            Replay rs = replay;
            if (rs != null)
            {
                if (r.Id > rs.Applied || rs.Parked.Contains(r.Id))
                {
                    rs.Fresh.Add(token);
                }
                else
                {
                    // A grant from before the resume.
                    HeldItem hi;
                    if (!rs.Held.TryGetValue(token, out hi))
                    {
                        Settle(r, new SessionConnectionException(What(r) + ": granted, then lost while the connection was down"), null);
                        return;
                    }
                    from = rs.SentAt;
                    left = hi.Left;
                    leased = hi.Leased;
                }
            }
            Grant(r, token, f.Num(Tag.Count) ?? 1, leased, from, left);
        }

        /// <summary>A LOST: every lock of its token ends.</summary>
        void OnLost(Frame f)
        {
            ulong token = f.U64(Tag.Token) ?? 0;
            int code = (int)(f.Num(Tag.Code) ?? 0);
            letGo.Remove(token);
            Hold h;
            if (holds.TryGetValue(token, out h))
            {
                EndHold(h, LostByCode(h, code));
                return;
            }
            // A grant whose GRANTED went with a dropped connection.
            Request r;
            if (inflight.TryGetValue(f.Id, out r) && r.Type == FrameType.Acquire && replay != null && r.Id <= replay.Applied)
            {
                inflight.Remove(r.Id);
                if (!r.Abandoned)
                {
                    Settle(r, new SessionConnectionException(What(r) + ": granted, then lost while the connection was down (" + Code.Name(code) + ")"), null);
                }
            }
        }

        LockLostException LostByCode(Hold h, int code)
        {
            string name = Code.Name(code);
            switch (code)
            {
                case Code.LeaseExpired: return LostError(h.KeyBytes, h.Token, LostReason.LeaseExpired, "its lease ran out", name);
                case Code.SessionExpired: return LostError(h.KeyBytes, h.Token, LostReason.SessionExpired, "its session expired", name);
                case Code.Reset: return LostError(h.KeyBytes, h.Token, LostReason.Reset, "a reset took it", name);
                case Code.SessionEnded: return LostError(h.KeyBytes, h.Token, LostReason.SessionClosed, "its session ended", name);
            }
            return LostError(h.KeyBytes, h.Token, LostReason.NotHeld, "the server took it back (" + name + ")", name);
        }

        /// <summary>
        /// Settles the session after a resume, once every frame the server owed
        /// it has come, against what the WELCOME listed: a lock not listed was
        /// lost while away; an acquire the server applied whose answer never
        /// came is granted if listed, else failed; a listed lock nobody here
        /// holds is released, unless it was orphaned.
        /// </summary>
        void Reconcile()
        {
            Replay rs = replay;
            replay = null;
            foreach (Hold h in holds.Values.ToList())
            {
                HeldItem hi;
                if (rs.Held.TryGetValue(h.Token, out hi))
                {
                    if (hi.Leased) SetLease(h, rs.SentAt, hi.Left);
                }
                else if (!rs.Fresh.Contains(h.Token))
                {
                    EndHold(h, LostError(h.KeyBytes, h.Token, LostReason.NotHeld, "lost while the connection was down", null));
                }
            }
            var unanswered = new List<Request>();
            foreach (ulong rid in inflight.Keys.OrderBy(k => k).ToList())
            {
                Request r = inflight[rid];
                if (rid > rs.Applied || (r.Type == FrameType.Acquire && rs.Parked.Contains(rid)) || r.Type == FrameType.Describe) continue;
                inflight.Remove(rid);
                ulong token;
                if (rs.ByRequest.TryGetValue(rid, out token) && r.Type == FrameType.Acquire && !r.Abandoned)
                {
                    GrantListed(r, token, rs);
                    continue;
                }
                unanswered.Add(r);
            }
            // What the server holds beyond the locks here and the releases in
            // flight: grants whose GRANTED went with the connection.
            var extra = new Dictionary<ulong, long>();
            foreach (KeyValuePair<ulong, HeldItem> kv in rs.Held)
            {
                Hold h;
                extra[kv.Key] = kv.Value.Count - (holds.TryGetValue(kv.Key, out h) ? h.Locks.Count : 0);
            }
            foreach (Request r in inflight.Values)
            {
                if (r.Type == FrameType.Release && extra.ContainsKey(r.Token)) extra[r.Token]--;
            }
            foreach (Request r in unanswered)
            {
                switch (r.Type)
                {
                    case FrameType.Acquire:
                        if (r.Abandoned) break;
                        ulong? token = Reentered(rs, extra, r);
                        if (token.HasValue)
                        {
                            extra[token.Value]--;
                            GrantListed(r, token.Value, rs);
                        }
                        else
                        {
                            Settle(r, new SessionConnectionException(What(r) + ": the answer was lost with the connection (refused, or granted and lost since)"), null);
                        }
                        break;
                    case FrameType.Renew:
                        if (rs.Held.ContainsKey(r.Token)) Settle(r, null, null);
                        else Settle(r, LostError(r.KeyBytes, r.Token, LostReason.NotHeld, "the server no longer holds it", null), null);
                        break;
                    default:
                        Settle(r, null, null);
                        break;
                }
            }
            foreach (KeyValuePair<ulong, HeldItem> kv in rs.Held)
            {
                if (letGo.Contains(kv.Key)) continue;
                long n;
                extra.TryGetValue(kv.Key, out n);
                for (; n > 0; n--) EnqueueRelease(kv.Value.KeyBytes, kv.Key, null, false);
            }
            letGo.RemoveWhere(t => !rs.Held.ContainsKey(t));
        }

        /// <summary>The listed lock that a reentrant acquire r counted up, if the counts say one did.</summary>
        static ulong? Reentered(Replay rs, Dictionary<ulong, long> extra, Request r)
        {
            if (!r.Reentrant) return null;
            foreach (KeyValuePair<ulong, HeldItem> kv in rs.Held)
            {
                if (kv.Value.KeyBytes.SequenceEqual(r.KeyBytes) && extra[kv.Key] > 0) return kv.Key;
            }
            return null;
        }

        void GrantListed(Request r, ulong token, Replay rs)
        {
            HeldItem hi = rs.Held[token];
            Grant(r, token, hi.Count, hi.Leased, rs.SentAt, hi.Left);
        }

        // --- locks ---

        /// <summary>Makes a handle of the hold of token for the acquire r (creating the hold); with leased, the lease ends left after from.</summary>
        void Grant(Request r, ulong token, uint count, bool leased, double from, uint left)
        {
            Hold h;
            if (!holds.TryGetValue(token, out h))
            {
                h = new Hold { KeyBytes = r.KeyBytes, Key = r.Key, Token = token };
                holds[token] = h;
            }
            var lk = new LockHandle(this, r.Key, h.KeyBytes, token, count, h);
            h.Locks.Add(lk);
            if (leased) SetLease(h, from, left);
            Settle(r, null, lk);
        }

        static LockLostException LostError(byte[] keyBytes, ulong token, LostReason reason, string why, string serverCode) =>
            new LockLostException("lock of " + Protocol.Printable(keyBytes) + " lost: " + why, reason, Protocol.Printable(keyBytes), token, serverCode);

        /// <summary>Ends one handle of its hold; the hold goes with its last handle.</summary>
        void DropLock(LockHandle lk, LockState state)
        {
            Hold h = lk.Hold;
            if (h != null)
            {
                h.Locks.Remove(lk);
                if (h.Locks.Count == 0) ForgetHold(h);
            }
            lk.End(state, null, after);
        }

        /// <summary>Ends every handle of h as lost with cause.</summary>
        void EndHold(Hold h, LockLostException cause)
        {
            ForgetHold(h);
            foreach (LockHandle lk in h.Locks) lk.End(LockState.Lost, cause, after);
            h.Locks.Clear();
        }

        void ForgetHold(Hold h)
        {
            Hold there;
            if (holds.TryGetValue(h.Token, out there) && there == h) holds.Remove(h.Token);
            h.Timer?.Dispose();
            h.Timer = null;
            h.LeaseEnd = null;
        }

        /// <summary>The earliest time at which the server can have measured a left_ms arriving now, in the answer to a request sent at sentAt.</summary>
        static double MeasuredAt(double sentAt) => Math.Max(Now - DeliveryBoundMs, sentAt);

        /// <summary>Makes h lost at from + left, less the margin, unless a renewal moves it.</summary>
        void SetLease(Hold h, double from, uint left)
        {
            h.Timer?.Dispose();
            int gen = ++h.Gen;
            h.LeaseEnd = from + left - Margin(left);
            h.Timer = new Timer(_ => LeaseDue(h, gen), null, (long)Math.Max(0, h.LeaseEnd.Value - Now), Timeout.Infinite);
        }

        /// <summary>
        /// Gives h up at the client's end of its lease, and releases it on the
        /// server by its token with lapse, so that the key keeps its
        /// lock-delay, before anything sent later (the answer is ignored:
        /// stale_token when the server's lease ended first, unsupported from a
        /// server that does not know lapse, which ends the lock at its own end
        /// of the lease).
        /// </summary>
        void LeaseDue(Hold h, int gen)
        {
            lock (Gate)
            {
                Hold there;
                if (!holds.TryGetValue(h.Token, out there) || there != h || h.Gen != gen) return;
                EndHold(h, LostError(h.KeyBytes, h.Token, LostReason.LeaseExpired, "its lease ran out", null));
                if (err == null) EnqueueRelease(h.KeyBytes, h.Token, null, true);
            }
            Flush();
        }

        /// <summary>Ends the session for e: every lock with lockEnd(hold) (and cause when lost), every request with e (a release with success when released).</summary>
        void End(Exception e, bool released, Func<Hold, LockState> lockEnd, Func<Hold, LockLostException> cause)
        {
            if (err != null) return;
            err = e;
            foreach (Hold h in holds.Values.ToList())
            {
                LockState state = lockEnd(h);
                ForgetHold(h);
                foreach (LockHandle lk in h.Locks) lk.End(state, cause?.Invoke(h), after);
                h.Locks.Clear();
            }
            foreach (Request r in inflight.Values.ToList())
            {
                if (r.Type == FrameType.Release && released) Settle(r, null, null);
                else Settle(r, e, null);
            }
            inflight.Clear();
            lostTimer?.Dispose();
            tickTimer?.Dispose();
            sweep?.Dispose();
            sweep = null;
            if (conn != null)
            {
                conn.Kill();
                conn = null;
            }
            Raise(SessionState.Ended);
            after.Add((Action)ended.Cancel);
        }

        /// <summary>Ends the session for e, its locks lost for reason.</summary>
        void EndLost(Exception e, LostReason reason, string why)
        {
            End(e, false, h => LockState.Lost, h => LostError(h.KeyBytes, h.Token, reason, why, null));
        }
    }
}
