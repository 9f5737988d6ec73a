using System;
using System.Threading;
using System.Threading.Tasks;

namespace LockingCenter
{
    /// <summary>
    /// One key of a session as an object, in the shape of DistributedLock's
    /// IDistributedLock: made once (<see cref="Session.CreateLock"/>), acquired
    /// many times, each acquire with the options it was made with.
    /// </summary>
    public sealed class SessionLock
    {
        readonly Session session;
        readonly AcquireOptions options;

        internal SessionLock(Session session, string name, AcquireOptions options)
        {
            this.session = session;
            Name = name;
            this.options = options;
        }

        /// <summary>The key.</summary>
        public string Name { get; }

        /// <summary>As <see cref="Session.AcquireAsync(string, TimeSpan?, CancellationToken, AcquireOptions)"/> of the key.</summary>
        public Task<LockHandle> AcquireAsync(TimeSpan? timeout = null, CancellationToken cancellationToken = default(CancellationToken)) =>
            session.AcquireAsync(Name, timeout, cancellationToken, options);

        /// <summary>As <see cref="Session.TryAcquireAsync(string, TimeSpan, CancellationToken, AcquireOptions)"/> of the key: null when busy.</summary>
        public Task<LockHandle> TryAcquireAsync(TimeSpan timeout = default(TimeSpan), CancellationToken cancellationToken = default(CancellationToken)) =>
            session.TryAcquireAsync(Name, timeout, cancellationToken, options);

        /// <summary>Blocking form of <see cref="AcquireAsync"/>.</summary>
        public LockHandle Acquire(TimeSpan? timeout = null, CancellationToken cancellationToken = default(CancellationToken)) =>
            AcquireAsync(timeout, cancellationToken).GetAwaiter().GetResult();

        /// <summary>Blocking form of <see cref="TryAcquireAsync"/>.</summary>
        public LockHandle TryAcquire(TimeSpan timeout = default(TimeSpan), CancellationToken cancellationToken = default(CancellationToken)) =>
            TryAcquireAsync(timeout, cancellationToken).GetAwaiter().GetResult();
    }
}
