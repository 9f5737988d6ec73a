using System;
using System.Collections.Generic;
using System.Threading;
using System.Threading.Tasks;

namespace LockingCenter
{
    /// <summary>Where a <see cref="LockHandle"/> is in its life.</summary>
    public enum LockState
    {
        /// <summary>The session holds the lock.</summary>
        Held,
        /// <summary>Released by this handle.</summary>
        Released,
        /// <summary>Given up by <see cref="LockHandle.Orphan"/>: the server still holds it until the session ends or its lease runs out.</summary>
        Orphaned,
        /// <summary>Ended without a release: see <see cref="LockHandle.LostReason"/>.</summary>
        Lost,
    }

    /// <summary>
    /// A lock the session holds: one grant, from the grant until its release,
    /// its orphaning or its loss. Disposing it releases it; it may be released
    /// from any thread or task, and releasing twice is no error.
    /// <see cref="HandleLostToken"/> is cancelled when the lock is lost (never
    /// by a release or an orphaning), with <see cref="LostReason"/> set first.
    /// </summary>
    public sealed class LockHandle : IDisposable
#if !NETSTANDARD2_0
        , IAsyncDisposable
#endif
    {
        readonly Session session;
        readonly CancellationTokenSource lost = new CancellationTokenSource();
        LockLostException cause;
        Task release;

        internal LockHandle(Session session, string key, byte[] keyBytes, ulong token, uint count, Hold hold)
        {
            this.session = session;
            Key = key;
            KeyBytes = keyBytes;
            FencingToken = token;
            Count = count;
            Hold = hold;
        }

        /// <summary>The key, as given to the acquire (a binary key as its printable form).</summary>
        public string Key { get; }

        internal byte[] KeyBytes { get; }

        internal Hold Hold { get; set; }

        /// <summary>The fencing token: give it with every write to the resource the lock guards, which refuses tokens below the highest it has seen.</summary>
        public ulong FencingToken { get; }

        /// <summary>The reentrancy count the server gave at the grant (1 unless reentrant).</summary>
        public uint Count { get; }

        /// <summary>
        /// Cancelled once the lock is lost, with <see cref="LostReason"/> and
        /// <see cref="LossException"/> set before. Callbacks registered on it run
        /// on the session's reader thread: keep them short, and never wait there
        /// for an answer of the same session.
        /// </summary>
        public CancellationToken HandleLostToken => lost.Token;

        /// <summary>Why the lock was lost, or null while it has not been.</summary>
        public LostReason? LostReason
        {
            get
            {
                LockLostException c = LossException;
                return c == null ? (LostReason?)null : c.Reason;
            }
        }

        /// <summary>The exception that tells the loss, or null.</summary>
        public LockLostException LossException
        {
            get
            {
                lock (session.Gate) return cause;
            }
        }

        /// <summary>Where the lock is in its life.</summary>
        public LockState State
        {
            get
            {
                lock (session.Gate) return StateLocked;
            }
        }

        internal LockState StateLocked { get; private set; }

        /// <summary>Whether the session still holds the lock.</summary>
        public bool IsHeld => State == LockState.Held;

        /// <summary>What is left of the lease by the client's count (which ends before the server's), or null for a lock without a lease or no longer held.</summary>
        public TimeSpan? LeaseRemaining
        {
            get
            {
                lock (session.Gate)
                {
                    double? end = Hold?.LeaseEnd;
                    if (end == null) return null;
                    return TimeSpan.FromMilliseconds(Math.Max(0, end.Value - Session.Now));
                }
            }
        }

        /// <summary>
        /// Releases the lock by its token; completes once the server has, at
        /// most the session's request timeout later
        /// (<see cref="SessionTimeoutException"/> then: the release stays
        /// queued and goes out after a reconnect). Idempotent: later calls give
        /// the first's task. Fails with the <see cref="LockLostException"/> of a
        /// lock lost before it: the work it guarded ran partly unprotected.
        /// </summary>
        public Task ReleaseAsync()
        {
            Task t;
            lock (session.Gate) t = release ?? (release = session.ReleaseLocked(this));
            session.Flush();
            return t;
        }

        /// <summary>Blocking form of <see cref="ReleaseAsync"/>.</summary>
        public void Release() => ReleaseAsync().GetAwaiter().GetResult();

        /// <summary>
        /// Starts the lease again from now, for <paramref name="lease"/> or the
        /// lock's last lease, and moves the client's end of the lock with it.
        /// Bounded by the request timeout. Fails with the
        /// <see cref="LockLostException"/> when the lock is lost.
        /// </summary>
        public Task RenewAsync(TimeSpan? lease = null, CancellationToken cancellationToken = default(CancellationToken)) =>
            session.RenewAsync(this, lease, cancellationToken);

        /// <summary>Stops tracking the lock without releasing it: the server keeps it until the session ends or its lease runs out.</summary>
        public void Orphan() => session.Orphan(this);

        /// <summary>Releases the lock, as <see cref="ReleaseAsync"/>; a lock already lost is no error here (its loss was told by <see cref="HandleLostToken"/>).</summary>
        public void Dispose() => Quietly().GetAwaiter().GetResult();

#if !NETSTANDARD2_0
        /// <summary>Releases the lock, as <see cref="Dispose"/>, without blocking: <c>await using</c> (C# 8) calls it.</summary>
        public ValueTask DisposeAsync() => new ValueTask(Quietly());
#endif

        Task Quietly() => Session.Ignoring<LockLostException>(ReleaseAsync());

        /// <summary>Ends the handle: released, orphaned, or lost with its exception. Called under the session's gate.</summary>
        internal void End(LockState state, LockLostException lossCause, List<After> after)
        {
            if (StateLocked != LockState.Held) return;
            StateLocked = state;
            Hold = null;
            if (state != LockState.Lost) return;
            cause = lossCause;
            after.Add((Action)lost.Cancel);
        }

        internal LockLostException CauseLocked => cause;

        /// <inheritdoc/>
        public override string ToString() => "lock of " + Key + " (token " + FencingToken + ")";
    }

    /// <summary>What the server knows of a key (DESCRIBE).</summary>
    public sealed class KeyInfo
    {
        internal KeyInfo(string key, uint queue, TimeSpan? delayLeft, IReadOnlyList<HolderInfo> holders)
        {
            Key = key;
            Queue = queue;
            DelayLeft = delayLeft;
            Holders = holders;
        }

        /// <summary>The key.</summary>
        public string Key { get; }

        /// <summary>Requests waiting for the key.</summary>
        public uint Queue { get; }

        /// <summary>What is left of a lock-delay, or null.</summary>
        public TimeSpan? DelayLeft { get; }

        /// <summary>The holders, none for a free key.</summary>
        public IReadOnlyList<HolderInfo> Holders { get; }
    }

    /// <summary>One holder of a key.</summary>
    public sealed class HolderInfo
    {
        internal HolderInfo(Fields h)
        {
            Token = h.U64(Tag.Token) ?? 0;
            Name = h.Text(Tag.Name) ?? "";
            Session = h.U64(Tag.Session) ?? 0;
            Held = TimeSpan.FromMilliseconds(h.Num(Tag.HeldMs) ?? 0);
            Shared = h.Num(Tag.Mode) == 1;
            Count = h.Num(Tag.Count) ?? 1;
            uint? left = h.Num(Tag.LeftMs);
            LeaseLeft = left == null ? (TimeSpan?)null : TimeSpan.FromMilliseconds(left.Value);
            Note = h.Text(Tag.Note);
        }

        /// <summary>Its fencing token.</summary>
        public ulong Token { get; }

        /// <summary>Its session's source.</summary>
        public string Name { get; }

        /// <summary>Its session id (0 for a v1 holder).</summary>
        public ulong Session { get; }

        /// <summary>How long it has held the key.</summary>
        public TimeSpan Held { get; }

        /// <summary>Whether it holds the key shared.</summary>
        public bool Shared { get; }

        /// <summary>Its reentrancy count.</summary>
        public uint Count { get; }

        /// <summary>What is left of its lease, or null.</summary>
        public TimeSpan? LeaseLeft { get; }

        /// <summary>Its note, or null.</summary>
        public string Note { get; }
    }
}
