using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using System.Text;
using System.Threading;
using System.Threading.Tasks;

namespace LockingCenter
{
    /// <summary>Where a <see cref="Session"/> is in its life.</summary>
    public enum SessionState
    {
        /// <summary>A connection is attached.</summary>
        Connected,
        /// <summary>The connection dropped; the session reconnects and resumes on its own, within its TTL.</summary>
        Suspended,
        /// <summary>Closed, or expired: see <see cref="Session.EndedToken"/>.</summary>
        Ended,
    }

    /// <summary>
    /// A session of the session protocol with a Locking-Center server, or the
    /// nodes of a cluster (docs/protocol.md, "Mutex port, session protocol
    /// (v2)"): one connection, kept open, carrying many requests at once. A
    /// session pings when it has nothing else to say; when its connection
    /// drops, goes silent or is sent away (GOODBYE not_leader) it redials (the
    /// leader named, then every address in turn) and resumes, its locks and
    /// waiting requests intact, within the TTL. Every member is safe to call
    /// from any thread.
    /// </summary>
    public sealed partial class Session : IDisposable
#if !NETSTANDARD2_0
        , IAsyncDisposable
#endif
    {
        /// <summary>The delay allowed between the server's measuring of a left_ms and its frame's arrival here: a lease is counted from the arrival less this, or from the request's sending when that is later.</summary>
        public static readonly TimeSpan DeliveryBound = TimeSpan.FromMilliseconds(DeliveryBoundMs);

        const double DeliveryBoundMs = 100;
        const int MaxNote = 1024, MaxCredential = 1024, MaxDelayMs = 60000;
        const double ServerDefaultTtl = 10000;

        static readonly Stopwatch Clock = Stopwatch.StartNew();

        /// <summary>Milliseconds on the monotonic clock.</summary>
        internal static double Now => Clock.Elapsed.TotalMilliseconds;

        /// <summary>What the client takes off a duration the server measures, for clock drift: a tenth, at least 50 ms, at most half.</summary>
        internal static double Margin(double d) => Math.Min(Math.Max(d / 10, 50), d / 2);

        /// <summary>How long a connection may bring nothing before it counts as dead, for the server's keepalive k: k plus a tenth of it, at least 250 ms.</summary>
        internal static double SilenceOf(double k) => k + Math.Max(k / 10, 250);

        static readonly UTF8Encoding StrictUtf8 = new UTF8Encoding(false, true);

        internal readonly object Gate = new object();
        List<After> after = new List<After>();

        readonly List<string> addrs;
        readonly byte[] name;
        readonly uint ttlAsked;
        readonly byte[] credential;
        readonly SessionTls tls;
        readonly double connectTimeout, requestTimeout;

        ulong id;
        byte[] secret;
        double ttl, keepalive;
        string server = "";

        ulong nextId;
        long ownerSeq;
        readonly Dictionary<ulong, Request> inflight = new Dictionary<ulong, Request>();
        readonly Dictionary<ulong, Hold> holds = new Dictionary<ulong, Hold>();
        readonly HashSet<ulong> letGo = new HashSet<ulong>();
        readonly HashSet<Request> bounded = new HashSet<Request>();
        Timer sweep;
        Exception err;
        readonly CancellationTokenSource ended = new CancellationTokenSource();
        Task closing;

        Session(string addresses, SessionOptions o)
        {
            addrs = AddressList(addresses);
            name = Protocol.ToBytes(o.Name ?? "", "Name");
            Protocol.CheckSource(name);
            if (o.Ttl.HasValue && o.Ttl.Value > TimeSpan.Zero) ttlAsked = Ms(o.Ttl.Value, "Ttl");
            if (!string.IsNullOrEmpty(o.Token))
            {
                credential = Protocol.ToBytes(o.Token, "Token");
                if (credential.Length > MaxCredential) throw new ArgumentException("token must be at most 1024 bytes", "Token");
            }
            tls = o.Tls;
            tls?.Load();
            connectTimeout = o.ConnectTimeout.TotalMilliseconds;
            requestTimeout = o.RequestTimeout.TotalMilliseconds;
        }

        /// <summary>
        /// Connects to the mutex port at <paramref name="addresses"/>
        /// ("host:port", or a comma-separated list: the nodes of a cluster) and
        /// opens a session. With several it tries each in turn and follows a
        /// node that names the leader. Bounded: a server that answers nothing
        /// fails with <see cref="SessionTimeoutException"/> after a third of the
        /// TTL and a margin.
        /// </summary>
        /// <exception cref="SessionTimeoutException">No answer within the bound.</exception>
        /// <exception cref="SessionConnectionException">No connection.</exception>
        /// <exception cref="NotLeaderException">Every address said it does not lead.</exception>
        /// <exception cref="UnauthenticatedException">The server refused the token.</exception>
        public static async Task<Session> ConnectAsync(string addresses, SessionOptions options = null,
            CancellationToken cancellationToken = default(CancellationToken))
        {
            var s = new Session(addresses, options ?? new SessionOptions());
            await s.OpenAsync(cancellationToken).ConfigureAwait(false);
            return s;
        }

        /// <summary>The session's id on the server.</summary>
        public ulong Id => id;

        /// <summary>The TTL the server granted.</summary>
        public TimeSpan Ttl => TimeSpan.FromMilliseconds(ttl);

        /// <summary>How often the session pings an idle connection (the server's keepalive_ms).</summary>
        public TimeSpan Keepalive => TimeSpan.FromMilliseconds(keepalive);

        /// <summary>The server's identity, from its WELCOME.</summary>
        public string Server
        {
            get
            {
                lock (Gate) return server;
            }
        }

        /// <summary>Where the session is in its life.</summary>
        public SessionState State
        {
            get
            {
                lock (Gate) return err != null ? SessionState.Ended : conn != null ? SessionState.Connected : SessionState.Suspended;
            }
        }

        /// <summary>Cancelled when the session has ended; <see cref="EndReason"/> says why.</summary>
        public CancellationToken EndedToken => ended.Token;

        /// <summary>Why the session ended (<see cref="SessionClosedException"/> after a close, <see cref="SessionExpiredException"/>, ...), or null.</summary>
        public Exception EndReason
        {
            get
            {
                lock (Gate) return err;
            }
        }

        /// <summary>Raised when the session is suspended (the connection dropped), connected again (resumed), or ended; on the session's own thread, before what it settled next, so keep the handler short.</summary>
        public event EventHandler<SessionState> StateChanged;

        /// <summary>
        /// Asks for <paramref name="key"/> (1 to 127 bytes of UTF-8) and
        /// returns the handle once the session holds it, through reconnections.
        /// <paramref name="timeout"/> bounds the wait on the server (sent as
        /// wait_ms; null or <see cref="Timeout.InfiniteTimeSpan"/>: for ever).
        /// Cancelling <paramref name="cancellationToken"/> takes the request out
        /// of the server's queue (CANCEL) and throws
        /// <see cref="OperationCanceledException"/>.
        /// </summary>
        /// <exception cref="SessionTimeoutException">The wait ran out, or the key was busy with a timeout of zero.</exception>
        public Task<LockHandle> AcquireAsync(string key, TimeSpan? timeout = null,
            CancellationToken cancellationToken = default(CancellationToken), AcquireOptions options = null) =>
            AcquireCore(Protocol.ToBytes(key ?? throw new ArgumentNullException(nameof(key)), nameof(key)), key, timeout, false, cancellationToken, options);

        /// <summary>As <see cref="AcquireAsync(string, TimeSpan?, CancellationToken, AcquireOptions)"/>, with a binary key.</summary>
        public Task<LockHandle> AcquireAsync(byte[] key, TimeSpan? timeout = null,
            CancellationToken cancellationToken = default(CancellationToken), AcquireOptions options = null) =>
            AcquireCore(Copy(key), null, timeout, false, cancellationToken, options);

        /// <summary>
        /// As <see cref="AcquireAsync(string, TimeSpan?, CancellationToken, AcquireOptions)"/>,
        /// but the key being held (or in lock-delay) is no failure: returns null
        /// when the key is busy (<paramref name="timeout"/> zero, the default:
        /// one try) or when the wait ran out.
        /// </summary>
        public Task<LockHandle> TryAcquireAsync(string key, TimeSpan timeout = default(TimeSpan),
            CancellationToken cancellationToken = default(CancellationToken), AcquireOptions options = null) =>
            AcquireCore(Protocol.ToBytes(key ?? throw new ArgumentNullException(nameof(key)), nameof(key)), key, timeout, true, cancellationToken, options);

        /// <summary>As <see cref="TryAcquireAsync(string, TimeSpan, CancellationToken, AcquireOptions)"/>, with a binary key.</summary>
        public Task<LockHandle> TryAcquireAsync(byte[] key, TimeSpan timeout = default(TimeSpan),
            CancellationToken cancellationToken = default(CancellationToken), AcquireOptions options = null) =>
            AcquireCore(Copy(key), null, timeout, true, cancellationToken, options);

        /// <summary>The key <paramref name="name"/> as an object to acquire again and again with <paramref name="options"/> (DistributedLock's CreateLock).</summary>
        public SessionLock CreateLock(string name, AcquireOptions options = null)
        {
            Protocol.CheckKey(Protocol.ToBytes(name ?? throw new ArgumentNullException(nameof(name)), nameof(name)));
            return new SessionLock(this, name, options);
        }

        /// <summary>Blocking form of <see cref="AcquireAsync(string, TimeSpan?, CancellationToken, AcquireOptions)"/>.</summary>
        public LockHandle Acquire(string key, TimeSpan? timeout = null,
            CancellationToken cancellationToken = default(CancellationToken), AcquireOptions options = null) =>
            AcquireAsync(key, timeout, cancellationToken, options).GetAwaiter().GetResult();

        /// <summary>Blocking form of <see cref="TryAcquireAsync(string, TimeSpan, CancellationToken, AcquireOptions)"/>.</summary>
        public LockHandle TryAcquire(string key, TimeSpan timeout = default(TimeSpan),
            CancellationToken cancellationToken = default(CancellationToken), AcquireOptions options = null) =>
            TryAcquireAsync(key, timeout, cancellationToken, options).GetAwaiter().GetResult();

        /// <summary>
        /// Releases the lock of <paramref name="key"/> with
        /// <paramref name="token"/>: a lock of this session's handles is
        /// released as its handle would be; another token is sent as it is, and
        /// fails with <see cref="StaleTokenException"/> when the session does not
        /// hold it. Bounded by the request timeout.
        /// </summary>
        public Task ReleaseAsync(string key, ulong token)
        {
            byte[] keyBytes = Protocol.ToBytes(key ?? throw new ArgumentNullException(nameof(key)), nameof(key));
            Protocol.CheckKey(keyBytes);
            Task t;
            LockHandle mine = null;
            lock (Gate)
            {
                Hold h;
                if (holds.TryGetValue(token, out h) && h.KeyBytes.SequenceEqual(keyBytes) && h.Locks.Count > 0) mine = h.Locks[h.Locks.Count - 1];
                else if (err != null) return Task.FromException(err);
            }
            if (mine != null) return mine.ReleaseAsync();
            lock (Gate)
            {
                if (err != null) return Task.FromException(err);
                t = Bounded(FrameType.Release, "release", keyBytes, new List<Field> { Field.Bytes(Tag.Key, keyBytes), Field.U64(Tag.Token, token) },
                    r => r.Token = token);
            }
            Flush();
            return t;
        }

        /// <summary>What the server knows of <paramref name="key"/>: its holders, its queue and its lock-delay. Bounded by the request timeout.</summary>
        public async Task<KeyInfo> DescribeAsync(string key)
        {
            byte[] keyBytes = Protocol.ToBytes(key ?? throw new ArgumentNullException(nameof(key)), nameof(key));
            Protocol.CheckKey(keyBytes);
            Task<object> t;
            lock (Gate)
            {
                if (err != null) throw err;
                t = Bounded(FrameType.Describe, "describe", keyBytes, new List<Field> { Field.Bytes(Tag.Key, keyBytes) }, null);
            }
            Flush();
            var f = (Frame)await t.ConfigureAwait(false);
            uint? delay = f.Num(Tag.LeftMs);
            return new KeyInfo(key, f.Num(Tag.Queue) ?? 0, delay == null ? (TimeSpan?)null : TimeSpan.FromMilliseconds(delay.Value),
                f.Items(Tag.Holder).Select(h => new HolderInfo(h)).ToList());
        }

        /// <summary>
        /// Ends the session: CLOSE releases every lock at once (orphaned ones
        /// too) and withdraws every waiting request, which fail with
        /// <see cref="SessionClosedException"/>. Completes once the server has
        /// answered, at most the request timeout later; when the server could
        /// not be told, the locks end as lost (<see cref="LostReason.SessionClosed"/>:
        /// the server ends them with the TTL) and this throws why. Idempotent.
        /// </summary>
        public Task CloseAsync()
        {
            var start = new Task<Task>(CloseCore);
            lock (Gate)
            {
                if (closing != null) return closing;
                closing = start.Unwrap();
            }
            start.RunSynchronously(); // outside the gate, as every caller of Flush
            return closing;
        }

        /// <summary>Closes the session as <see cref="CloseAsync"/>, blocking; a failure to tell the server is not thrown (the locks end as lost).</summary>
        public void Dispose() => CloseQuietly().GetAwaiter().GetResult();

#if !NETSTANDARD2_0
        /// <summary>Closes the session as <see cref="Dispose"/>, without blocking.</summary>
        public ValueTask DisposeAsync() => new ValueTask(CloseQuietly());
#endif

        Task CloseQuietly() => Ignoring<SessionException>(CloseAsync());

        /// <summary>Awaits t, taking a failure of type T for success.</summary>
        internal static async Task Ignoring<T>(Task t) where T : Exception
        {
            try
            {
                await t.ConfigureAwait(false);
            }
            catch (T)
            {
            }
        }

        // --- arguments ---

        static byte[] Copy(byte[] key) => (byte[])(key ?? throw new ArgumentNullException(nameof(key))).Clone();

        static uint Ms(TimeSpan t, string what)
        {
            double ms = Math.Ceiling(t.TotalMilliseconds);
            if (ms < 0 || ms > uint.MaxValue) throw new ArgumentOutOfRangeException(what, t, what + " must be 0 to " + uint.MaxValue + " ms");
            return (uint)ms;
        }

        static List<string> AddressList(string addresses)
        {
            if (addresses == null) throw new ArgumentNullException(nameof(addresses));
            var list = new List<string>();
            foreach (string part in addresses.Split(','))
            {
                string a = part.Trim();
                if (a.Length == 0 || list.Contains(a)) continue;
                string host;
                int port;
                LockingCenterClient.ParseAddress(a, out host, out port);
                list.Add(a);
            }
            if (list.Count == 0) throw new ArgumentException("no address given", nameof(addresses));
            return list;
        }

        /// <summary>The ACQUIRE fields of key for the options.</summary>
        static List<Field> AcquireFields(byte[] key, uint? waitMs, AcquireOptions o, string owner)
        {
            var f = new List<Field> { Field.Bytes(Tag.Key, key) };
            if (waitMs.HasValue) f.Add(Field.U32(Tag.WaitMs, waitMs.Value));
            if (o.Lease.HasValue && o.Lease.Value > TimeSpan.Zero) f.Add(Field.U32(Tag.LeaseMs, Ms(o.Lease.Value, "Lease")));
            if (o.LockDelay.HasValue)
            {
                uint d = Ms(o.LockDelay.Value, "LockDelay");
                if (d > MaxDelayMs) throw new ArgumentOutOfRangeException("LockDelay", o.LockDelay, "lock-delay must be at most 60 s");
                f.Add(Field.U32(Tag.DelayMs, d));
            }
            if (o.Shared) f.Add(Field.U8(Tag.Mode, 1));
            if (o.Limit > 1)
            {
                if (o.Shared) throw new ArgumentException("a semaphore (limit above 1) cannot be shared", "Limit");
                f.Add(Field.U32(Tag.Limit, o.Limit));
            }
            if (o.Priority != 0) f.Add(Field.U32(Tag.Priority, unchecked((uint)o.Priority)));
            if (o.Reentrant) f.Add(Field.U8(Tag.Reentrant, 1));
            if (!string.IsNullOrEmpty(owner))
            {
                byte[] b = Protocol.ToBytes(owner, "Owner");
                if (b.Length > Protocol.MaxSourceLength) throw new ArgumentException("owner must be at most 127 bytes, got " + b.Length, "Owner");
                f.Add(Field.Bytes(Tag.Owner, b));
            }
            if (!string.IsNullOrEmpty(o.Note))
            {
                byte[] b;
                try
                {
                    b = StrictUtf8.GetBytes(o.Note);
                }
                catch (EncoderFallbackException)
                {
                    throw new ArgumentException("note must be well-formed text (a lone surrogate cannot be UTF-8)", "Note");
                }
                if (b.Length > MaxNote) throw new ArgumentException("note must be at most 1024 bytes of UTF-8, got " + b.Length, "Note");
                f.Add(Field.Bytes(Tag.Note, b));
            }
            return f;
        }

        // --- requests ---

        Task<LockHandle> AcquireCore(byte[] keyBytes, string key, TimeSpan? timeout, bool nullWhenBusy, CancellationToken ct, AcquireOptions options)
        {
            Protocol.CheckKey(keyBytes);
            AcquireOptions o = options ?? new AcquireOptions();
            uint? waitMs = timeout.HasValue && timeout.Value != Timeout.InfiniteTimeSpan ? Ms(timeout.Value, "timeout") : (uint?)null;
            // Without an owner each acquire is its own, as if it came from a
            // client of its own: concurrent acquires of one key on one session
            // queue instead of waiting for themselves (refused deadlock). A
            // reentrant acquire without one shares the session's owner.
            string owner = o.Owner ?? (o.Reentrant ? null : "task-" + Interlocked.Increment(ref ownerSeq));
            List<Field> fields = AcquireFields(keyBytes, waitMs, o, owner);
            if (ct.IsCancellationRequested) return Task.FromCanceled<LockHandle>(ct);
            Request r;
            lock (Gate)
            {
                if (err != null) return Task.FromException<LockHandle>(err);
                r = NewRequest(FrameType.Acquire, "acquire", keyBytes);
                r.Key = key ?? Protocol.Printable(keyBytes);
                r.NullWhenBusy = nullWhenBusy;
                r.Reentrant = o.Reentrant;
                if (waitMs.HasValue && requestTimeout > 0)
                {
                    double bound = waitMs.Value + requestTimeout;
                    SetDeadline(r, bound, () => AbandonLocked(r, new SessionTimeoutException(What(r) + ": no answer within " + bound + " ms")));
                }
                Enqueue(r, fields);
            }
            if (ct.CanBeCanceled)
            {
                // The callback only hands over, so that disposing it under the gate never waits for it.
                CancellationTokenRegistration reg = ct.Register(() => ThreadPool.QueueUserWorkItem(_ => Abandon(r, new OperationCanceledException(ct))));
                lock (Gate)
                {
                    if (r.Done) reg.Dispose();
                    else r.Registration = reg;
                }
            }
            Flush();
            return r.Granted.Task;
        }

        static Request NewRequest(byte type, string op, byte[] keyBytes)
        {
            var r = new Request { Type = type, Op = op, KeyBytes = keyBytes };
            if (type == FrameType.Acquire) r.Granted = new TaskCompletionSource<LockHandle>(TaskCreationOptions.RunContinuationsAsynchronously);
            else r.Tcs = new TaskCompletionSource<object>(TaskCreationOptions.RunContinuationsAsynchronously);
            return r;
        }

        /// <summary>A request that waits for no key: its task fails with SessionTimeoutException after the request timeout. Under the gate.</summary>
        Task<object> Bounded(byte type, string op, byte[] keyBytes, List<Field> fields, Action<Request> init)
        {
            Request r = NewRequest(type, op, keyBytes);
            init?.Invoke(r);
            Bound(r, "");
            Enqueue(r, fields);
            return r.Tcs.Task;
        }

        void Bound(Request r, string more)
        {
            if (requestTimeout <= 0) return;
            SetDeadline(r, requestTimeout, () => Settle(r, new SessionTimeoutException(What(r) + ": no answer within " + requestTimeout + " ms" + more), null));
        }

        /// <summary>Gives r the next id and queues its frame for the attached connection; without one, r waits in inflight for the next. Under the gate.</summary>
        void Enqueue(Request r, List<Field> fields)
        {
            r.Id = ++nextId;
            r.SentAt = Now;
            r.Frame = Wire.Encode(r.Type, r.Id, fields);
            if (r.Type != FrameType.Ping) inflight[r.Id] = r;
            if (conn != null)
            {
                Write(conn, r.Frame);
                r.Sent = true;
            }
        }

        Request EnqueueRelease(byte[] keyBytes, ulong token, LockHandle lk, bool lapse)
        {
            Request r = NewRequest(FrameType.Release, "release", keyBytes);
            r.Token = token;
            r.Lock = lk;
            var fields = new List<Field> { Field.Bytes(Tag.Key, keyBytes), Field.U64(Tag.Token, token) };
            if (lapse) fields.Add(Field.U8(Tag.Lapse, 1));
            Enqueue(r, fields);
            return r;
        }

        /// <summary>Gives up an acquire whose caller has gone: one never sent is forgotten, another cancelled on the server.</summary>
        void Abandon(Request r, Exception reason)
        {
            lock (Gate) AbandonLocked(r, reason);
            Flush();
        }

        void AbandonLocked(Request r, Exception reason)
        {
            if (r.Done) return;
            Settle(r, reason, null);
            Request there;
            if (!inflight.TryGetValue(r.Id, out there) || there != r) return;
            if (!r.Sent)
            {
                inflight.Remove(r.Id);
                return;
            }
            r.Abandoned = true;
            Request c = NewRequest(FrameType.Cancel, "cancel", r.KeyBytes);
            c.Target = r.Id;
            Enqueue(c, new List<Field> { Field.U64(Tag.Target, r.Id) });
        }

        /// <summary>
        /// Runs onDeadline (under the gate) if r is not settled within ms. One
        /// sweep a tenth of a second serves every bounded request, cheaper than
        /// a timer each. Under the gate.
        /// </summary>
        void SetDeadline(Request r, double ms, Action onDeadline)
        {
            r.Deadline = Now + ms;
            r.OnDeadline = onDeadline;
            bounded.Add(r);
            if (sweep == null) sweep = new Timer(_ => Sweep(), null, SweepMs, SweepMs);
        }

        const int SweepMs = 100;

        void Sweep()
        {
            lock (Gate)
            {
                double now = Now;
                foreach (Request r in bounded.Where(x => now >= x.Deadline).ToList())
                {
                    bounded.Remove(r);
                    r.OnDeadline();
                }
                if (bounded.Count == 0 && sweep != null)
                {
                    sweep.Dispose();
                    sweep = null;
                }
            }
            Flush();
        }

        /// <summary>Settles a request once: err fails it, else value completes it. Under the gate.</summary>
        void Settle(Request r, Exception e, object value)
        {
            if (r.Done) return;
            r.Done = true;
            if (r.OnDeadline != null) bounded.Remove(r);
            if (r.Registration.HasValue)
            {
                CancellationTokenRegistration reg = r.Registration.Value;
                after.Add((Action)reg.Dispose);
            }
            // Completed outside the gate, in the order the session settled them.
            after.Add(new After { Request = r, Error = e, Value = value });
        }

        /// <summary>
        /// Runs, outside the gate, what the gate's holders left to do: it sends
        /// the frames queued for the connection, unless another thread is
        /// sending them (then that one sends these too, in the same write), and
        /// runs the completions, the cancellation of loss tokens and the events,
        /// in the order they were settled. Every method that takes the gate
        /// calls it after it lets go.
        /// </summary>
        internal void Flush()
        {
            for (;;)
            {
                List<After> run = null;
                Conn writer = null;
                byte[] batch = null;
                lock (Gate)
                {
                    if (conn != null && !conn.Writing && conn.Out.Count > 0)
                    {
                        writer = conn;
                        writer.Writing = true;
                        batch = TakeOut(writer);
                    }
                    else if (after.Count > 0)
                    {
                        run = after;
                        after = new List<After>();
                    }
                    else
                    {
                        return;
                    }
                }
                if (writer != null)
                {
                    Send(writer, batch);
                    continue;
                }
                foreach (After a in run)
                {
                    try
                    {
                        a.Run();
                    }
                    catch (Exception e) when (!(e is OutOfMemoryException))
                    {
                        // A callback of the user's failed; it is theirs to handle.
                    }
                }
            }
        }

        void Raise(SessionState state)
        {
            EventHandler<SessionState> h = StateChanged;
            if (h != null) after.Add((Action)(() => h(this, state)));
        }

        /// <summary>LockHandle.ReleaseAsync, under the gate.</summary>
        internal Task ReleaseLocked(LockHandle lk)
        {
            if (lk.StateLocked == LockState.Lost) return Task.FromException(lk.CauseLocked);
            if (lk.StateLocked != LockState.Held) return Task.CompletedTask;
            Hold h = lk.Hold;
            DropLock(lk, LockState.Released);
            if (err != null) return Task.CompletedTask; // the session's end released it, or will
            Request r = EnqueueRelease(h.KeyBytes, lk.FencingToken, lk, false);
            Bound(r, "; it is sent again after a reconnect");
            return r.Tcs.Task;
        }

        internal async Task RenewAsync(LockHandle lk, TimeSpan? lease, CancellationToken ct)
        {
            var fields = new List<Field> { Field.Bytes(Tag.Key, lk.KeyBytes), Field.U64(Tag.Token, lk.FencingToken) };
            if (lease.HasValue && lease.Value > TimeSpan.Zero) fields.Add(Field.U32(Tag.LeaseMs, Ms(lease.Value, "lease")));
            ct.ThrowIfCancellationRequested();
            Task<object> t;
            lock (Gate)
            {
                if (lk.StateLocked == LockState.Lost) throw lk.CauseLocked;
                if (lk.StateLocked != LockState.Held) throw new InvalidOperationException("renew " + lk.Key + ": the lock was " + lk.StateLocked.ToString().ToLowerInvariant());
                t = Bounded(FrameType.Renew, "renew", lk.KeyBytes, fields, r =>
                {
                    r.Lock = lk;
                    r.Token = lk.FencingToken;
                });
            }
            Flush();
            if (!ct.CanBeCanceled)
            {
                await t.ConfigureAwait(false);
                return;
            }
            var gaveUp = new TaskCompletionSource<object>(TaskCreationOptions.RunContinuationsAsynchronously);
            using (ct.Register(() => gaveUp.TrySetCanceled(ct)))
            {
                await (await Task.WhenAny(t, gaveUp.Task).ConfigureAwait(false)).ConfigureAwait(false);
            }
        }

        internal void Orphan(LockHandle lk)
        {
            lock (Gate)
            {
                if (lk.StateLocked != LockState.Held) return;
                letGo.Add(lk.FencingToken);
                DropLock(lk, LockState.Orphaned);
            }
            Flush();
        }

        async Task CloseCore()
        {
            Task<object> t;
            Request r;
            lock (Gate)
            {
                if (err != null) return;
                r = NewRequest(FrameType.Close, "close", null);
                Bound(r, "");
                Enqueue(r, new List<Field>());
                t = r.Tcs.Task;
            }
            Flush();
            try
            {
                await t.ConfigureAwait(false);
            }
            catch (SessionTimeoutException)
            {
                lock (Gate)
                {
                    if (err != null) return; // the session ended meanwhile: expired, or refused for good
                    inflight.Remove(r.Id);
                    EndLost(new SessionClosedException("session " + id + " closed"), LostReason.SessionClosed,
                        "close could not tell the server; it ends the lock with the session's TTL");
                }
                Flush();
                throw;
            }
            catch (SessionException)
            {
                lock (Gate)
                {
                    if (err != null) return;
                }
                throw;
            }
        }

        internal static string What(Request r) => r.KeyBytes == null ? r.Op : r.Op + " " + Protocol.Printable(r.KeyBytes);
    }

    /// <summary>A request of the session, sent or to send, until it is answered.</summary>
    internal sealed class Request
    {
        public byte Type;
        public ulong Id;
        public byte[] Frame;
        public double SentAt;
        public bool Sent, Resent, Done, Abandoned;
        public string Op, Key;
        public byte[] KeyBytes;
        public bool NullWhenBusy, Reentrant;
        public ulong Token, Target;
        public LockHandle Lock;
        public double Deadline;
        public Action OnDeadline;
        public CancellationTokenRegistration? Registration;
        public TaskCompletionSource<object> Tcs;
        public TaskCompletionSource<LockHandle> Granted;

        /// <summary>Completes the request's task: cancelled, failed, or with value.</summary>
        public void Complete(Exception e, object value)
        {
            var oce = e as OperationCanceledException;
            if (Granted != null)
            {
                if (oce != null) Granted.TrySetCanceled(oce.CancellationToken);
                else if (e != null) Granted.TrySetException(e);
                else Granted.TrySetResult((LockHandle)value);
            }
            else if (oce != null) Tcs.TrySetCanceled(oce.CancellationToken);
            else if (e != null) Tcs.TrySetException(e);
            else Tcs.TrySetResult(value);
        }
    }

    /// <summary>What the gate's holders leave to run outside it: a request to complete, or an action.</summary>
    internal struct After
    {
        public Request Request;
        public Exception Error;
        public object Value;
        public Action Action;

        public static implicit operator After(Action a) => new After { Action = a };

        public void Run()
        {
            if (Request != null) Request.Complete(Error, Value);
            else Action();
        }
    }

    /// <summary>One lock the server holds for the session (a token), and the handles on it (more than one when reentrant).</summary>
    internal sealed class Hold
    {
        public byte[] KeyBytes;
        public string Key;
        public ulong Token;
        public readonly List<LockHandle> Locks = new List<LockHandle>();
        public Timer Timer;
        public int Gen;
        public double? LeaseEnd;
    }
}
