using System;
using System.Globalization;
using System.Net;
using System.Net.Sockets;
using System.Threading;
using System.Threading.Tasks;

namespace LockingCenter
{
    /// <summary>
    /// A client of one Locking-Center server, which grants named keys to one
    /// holder at a time, waiters served in order of arrival.
    /// </summary>
    /// <remarks>
    /// Every call opens one TCP connection to the mutex port, sends one
    /// request, reads the one-byte answer and closes. A lock is not tied to
    /// the connection: it stays held until an unlock or a reset, even after
    /// the process exits. Keys and sources are byte strings: pass a
    /// <c>byte[]</c>, or a <c>string</c>, which is sent as UTF-8. Keys are 1
    /// to 127 bytes and sources at most 127; both are checked before anything
    /// is sent. The client holds no connection and is safe to share between
    /// threads.
    ///
    /// Failures throw <see cref="LockingCenterException"/> (a '-' answer is
    /// its subclass <see cref="RequestFailedException"/>). Cancelling a
    /// <see cref="CancellationToken"/> closes the connection, so the server
    /// withdraws a waiting lock, and throws
    /// <see cref="OperationCanceledException"/>. A blocking lock has no
    /// timeout of its own; bound it with a token, for example
    /// <c>new CancellationTokenSource(TimeSpan.FromSeconds(10)).Token</c>.
    /// Every call that does not wait for a key (try-lock, unlock, both
    /// resets, and the release of a wait) gives up after
    /// <see cref="ReadTimeout"/> with a <see cref="LockingCenterException"/>
    /// whose inner exception is a <see cref="TimeoutException"/>.
    /// </remarks>
    public sealed class LockingCenterClient
    {
        /// <summary>The connect timeout unless the constructor is given one.</summary>
        public static readonly TimeSpan DefaultConnectTimeout = TimeSpan.FromSeconds(5);

        /// <summary>The read timeout unless the constructor is given one.</summary>
        public static readonly TimeSpan DefaultReadTimeout = TimeSpan.FromSeconds(10);

        readonly string host;
        readonly int port;
        readonly byte[] source;

        /// <summary>
        /// A client of the server at <paramref name="address"/>,
        /// "host:port" or "[ipv6]:port". <paramref name="source"/> names the
        /// owner of the locks for reset by source; null or empty lets the
        /// server use the client's IP address. <paramref name="connectTimeout"/>
        /// bounds each connect (default <see cref="DefaultConnectTimeout"/>;
        /// zero or less: no bound but the system's). <paramref name="readTimeout"/>
        /// bounds, from the connect to the answer, every call that does not
        /// wait for a key (default <see cref="DefaultReadTimeout"/>; zero or
        /// less: no bound).
        /// </summary>
        /// <exception cref="ArgumentException">A malformed address, or a source
        /// over 127 bytes.</exception>
        public LockingCenterClient(string address, string source = null, TimeSpan? connectTimeout = null, TimeSpan? readTimeout = null)
            : this(address, source == null ? new byte[0] : Protocol.ToBytes(source, nameof(source)), connectTimeout, readTimeout)
        {
        }

        /// <summary>As the other constructor, with the source as bytes.</summary>
        /// <exception cref="ArgumentException">A malformed address, or a source
        /// over 127 bytes.</exception>
        public LockingCenterClient(string address, byte[] source, TimeSpan? connectTimeout = null, TimeSpan? readTimeout = null)
        {
            if (address == null) throw new ArgumentNullException(nameof(address));
            this.source = source == null ? new byte[0] : (byte[])source.Clone();
            Protocol.CheckSource(this.source);
            ParseAddress(address, out host, out port);
            Address = address;
            ConnectTimeout = connectTimeout ?? DefaultConnectTimeout;
            ReadTimeout = readTimeout ?? DefaultReadTimeout;
        }

        /// <summary>The address the client connects to.</summary>
        public string Address { get; }

        /// <summary>Bound of each connect; zero or less means the system's.</summary>
        public TimeSpan ConnectTimeout { get; }

        /// <summary>
        /// Bound, from the connect to the answer, of every call that does not
        /// wait for a key: try-lock, unlock, both resets and the release of a
        /// wait. Zero or less means none. A lock never has one.
        /// </summary>
        public TimeSpan ReadTimeout { get; }

        /// <summary>A copy of the source sent with locks (empty: the server uses the IP address).</summary>
        public byte[] Source => (byte[])source.Clone();

        /// <summary>
        /// Waits until <paramref name="key"/> is granted to this client,
        /// however long that takes.
        /// </summary>
        /// <exception cref="ArgumentException">The key is empty or over 127 bytes.</exception>
        /// <exception cref="RequestFailedException">The server refused the request, or a reset of the source withdrew it.</exception>
        /// <exception cref="LockingCenterException">The network failed.</exception>
        /// <exception cref="OperationCanceledException">The token was cancelled; the request is withdrawn.</exception>
        public Task LockAsync(byte[] key, CancellationToken cancellationToken = default(CancellationToken)) =>
            Request(RequestAction.Lock, key, source, cancellationToken);

        /// <inheritdoc cref="LockAsync(byte[], CancellationToken)"/>
        public Task LockAsync(string key, CancellationToken cancellationToken = default(CancellationToken)) =>
            LockAsync(Key(key), cancellationToken);

        /// <summary>
        /// Takes <paramref name="key"/> only if it is free now: true when this
        /// client now holds it, false when another holder has it (busy, not a
        /// failure).
        /// </summary>
        /// <exception cref="ArgumentException">The key is empty or over 127 bytes.</exception>
        /// <exception cref="LockingCenterException">The server refused the request, the network failed, or no
        /// answer came within <see cref="ReadTimeout"/>.</exception>
        public async Task<bool> TryLockAsync(byte[] key, CancellationToken cancellationToken = default(CancellationToken)) =>
            await Request(RequestAction.TryLock, key, source, cancellationToken).ConfigureAwait(false) == Outcome.Ok;

        /// <inheritdoc cref="TryLockAsync(byte[], CancellationToken)"/>
        public Task<bool> TryLockAsync(string key, CancellationToken cancellationToken = default(CancellationToken)) =>
            TryLockAsync(Key(key), cancellationToken);

        /// <summary>Releases <paramref name="key"/>, whoever holds it; releasing a free key succeeds.</summary>
        /// <exception cref="ArgumentException">The key is empty or over 127 bytes.</exception>
        /// <exception cref="LockingCenterException">The server refused the request, or the network failed.</exception>
        public Task UnlockAsync(byte[] key, CancellationToken cancellationToken = default(CancellationToken)) =>
            Request(RequestAction.Unlock, key, null, cancellationToken);

        /// <inheritdoc cref="UnlockAsync(byte[], CancellationToken)"/>
        public Task UnlockAsync(string key, CancellationToken cancellationToken = default(CancellationToken)) =>
            UnlockAsync(Key(key), cancellationToken);

        /// <summary>
        /// Waits until <paramref name="key"/> is free and returns holding
        /// nothing: it takes the key and releases it at once. The token
        /// bounds the wait, not the release.
        /// </summary>
        /// <exception cref="ArgumentException">The key is empty or over 127 bytes.</exception>
        /// <exception cref="LockingCenterException">The server refused the request, or the network failed.</exception>
        /// <exception cref="OperationCanceledException">The token was cancelled while waiting.</exception>
        public Task WaitAsync(byte[] key, CancellationToken cancellationToken = default(CancellationToken))
        {
            var lockTask = LockAsync(key, cancellationToken);
            return ReleaseAfter(lockTask, key);
        }

        /// <inheritdoc cref="WaitAsync(byte[], CancellationToken)"/>
        public Task WaitAsync(string key, CancellationToken cancellationToken = default(CancellationToken)) =>
            WaitAsync(Key(key), cancellationToken);

        /// <summary>Takes <paramref name="key"/> from its holder; the first waiter gets it.</summary>
        /// <exception cref="ArgumentException">The key is empty or over 127 bytes.</exception>
        /// <exception cref="LockingCenterException">The server refused the request, or the network failed.</exception>
        public Task ResetByKeyAsync(byte[] key, CancellationToken cancellationToken = default(CancellationToken)) =>
            Request(RequestAction.ResetKey, key, null, cancellationToken);

        /// <inheritdoc cref="ResetByKeyAsync(byte[], CancellationToken)"/>
        public Task ResetByKeyAsync(string key, CancellationToken cancellationToken = default(CancellationToken)) =>
            ResetByKeyAsync(Key(key), cancellationToken);

        /// <summary>
        /// Releases every key held by <paramref name="source"/> and withdraws
        /// every waiting request of it (those throw <see cref="RequestFailedException"/>).
        /// </summary>
        /// <exception cref="ArgumentException">The source is over 127 bytes.</exception>
        /// <exception cref="LockingCenterException">The server refused the request, or the network failed.</exception>
        public Task ResetBySourceAsync(byte[] source, CancellationToken cancellationToken = default(CancellationToken)) =>
            Request(RequestAction.ResetSource, null, source ?? throw new ArgumentNullException(nameof(source)), cancellationToken);

        /// <inheritdoc cref="ResetBySourceAsync(byte[], CancellationToken)"/>
        public Task ResetBySourceAsync(string source, CancellationToken cancellationToken = default(CancellationToken)) =>
            ResetBySourceAsync(Protocol.ToBytes(source, nameof(source)), cancellationToken);

        /// <summary>Blocking form of <see cref="LockAsync(byte[], CancellationToken)"/>.</summary>
        public void Lock(byte[] key, CancellationToken cancellationToken = default(CancellationToken)) =>
            LockAsync(key, cancellationToken).GetAwaiter().GetResult();

        /// <summary>Blocking form of <see cref="LockAsync(string, CancellationToken)"/>.</summary>
        public void Lock(string key, CancellationToken cancellationToken = default(CancellationToken)) =>
            LockAsync(key, cancellationToken).GetAwaiter().GetResult();

        /// <summary>Blocking form of <see cref="TryLockAsync(byte[], CancellationToken)"/>.</summary>
        public bool TryLock(byte[] key, CancellationToken cancellationToken = default(CancellationToken)) =>
            TryLockAsync(key, cancellationToken).GetAwaiter().GetResult();

        /// <summary>Blocking form of <see cref="TryLockAsync(string, CancellationToken)"/>.</summary>
        public bool TryLock(string key, CancellationToken cancellationToken = default(CancellationToken)) =>
            TryLockAsync(key, cancellationToken).GetAwaiter().GetResult();

        /// <summary>Blocking form of <see cref="UnlockAsync(byte[], CancellationToken)"/>.</summary>
        public void Unlock(byte[] key, CancellationToken cancellationToken = default(CancellationToken)) =>
            UnlockAsync(key, cancellationToken).GetAwaiter().GetResult();

        /// <summary>Blocking form of <see cref="UnlockAsync(string, CancellationToken)"/>.</summary>
        public void Unlock(string key, CancellationToken cancellationToken = default(CancellationToken)) =>
            UnlockAsync(key, cancellationToken).GetAwaiter().GetResult();

        /// <summary>Blocking form of <see cref="WaitAsync(byte[], CancellationToken)"/>.</summary>
        public void Wait(byte[] key, CancellationToken cancellationToken = default(CancellationToken)) =>
            WaitAsync(key, cancellationToken).GetAwaiter().GetResult();

        /// <summary>Blocking form of <see cref="WaitAsync(string, CancellationToken)"/>.</summary>
        public void Wait(string key, CancellationToken cancellationToken = default(CancellationToken)) =>
            WaitAsync(key, cancellationToken).GetAwaiter().GetResult();

        /// <summary>Blocking form of <see cref="ResetByKeyAsync(byte[], CancellationToken)"/>.</summary>
        public void ResetByKey(byte[] key, CancellationToken cancellationToken = default(CancellationToken)) =>
            ResetByKeyAsync(key, cancellationToken).GetAwaiter().GetResult();

        /// <summary>Blocking form of <see cref="ResetByKeyAsync(string, CancellationToken)"/>.</summary>
        public void ResetByKey(string key, CancellationToken cancellationToken = default(CancellationToken)) =>
            ResetByKeyAsync(key, cancellationToken).GetAwaiter().GetResult();

        /// <summary>Blocking form of <see cref="ResetBySourceAsync(byte[], CancellationToken)"/>.</summary>
        public void ResetBySource(byte[] source, CancellationToken cancellationToken = default(CancellationToken)) =>
            ResetBySourceAsync(source, cancellationToken).GetAwaiter().GetResult();

        /// <summary>Blocking form of <see cref="ResetBySourceAsync(string, CancellationToken)"/>.</summary>
        public void ResetBySource(string source, CancellationToken cancellationToken = default(CancellationToken)) =>
            ResetBySourceAsync(source, cancellationToken).GetAwaiter().GetResult();

        static byte[] Key(string key) => Protocol.ToBytes(key, nameof(key));

        async Task ReleaseAfter(Task lockTask, byte[] key)
        {
            await lockTask.ConfigureAwait(false);
            await UnlockAsync(key, CancellationToken.None).ConfigureAwait(false);
        }

        /// <summary>
        /// Encodes the request at once, so invalid arguments throw before any
        /// connection, then performs it.
        /// </summary>
        Task<Outcome> Request(RequestAction action, byte[] key, byte[] requestSource, CancellationToken ct)
        {
            byte[] request = Protocol.EncodeRequest(action, key, requestSource);
            string what = Protocol.Name(action) + " " + Protocol.Printable(action == RequestAction.ResetSource ? requestSource : key) +
                          " at " + Address;
            return Call(action, request, what, ct);
        }

        async Task<Outcome> Call(RequestAction action, byte[] request, string what, CancellationToken ct)
        {
            ct.ThrowIfCancellationRequested();
            using (Socket socket = await Connect(what, ct).ConfigureAwait(false))
            using (var timer = new CancellationTokenSource())
            using (var either = CancellationTokenSource.CreateLinkedTokenSource(ct, timer.Token))
            {
                // A lock waits for its key as long as it takes: no read timeout.
                if (action != RequestAction.Lock && ReadTimeout > TimeSpan.Zero) timer.CancelAfter(ReadTimeout);
                byte answer;
                try
                {
                    answer = await Exchange(socket, request, what, either.Token).ConfigureAwait(false);
                }
                catch (OperationCanceledException) when (timer.IsCancellationRequested && !ct.IsCancellationRequested)
                {
                    string after = ReadTimeout.TotalMilliseconds.ToString(CultureInfo.InvariantCulture) + " ms";
                    throw new LockingCenterException(what + ": no answer within " + after,
                        new TimeoutException("no answer within " + after));
                }
                try
                {
                    return Protocol.DecodeAnswer(action, answer);
                }
                catch (LockingCenterException e)
                {
                    throw e is RequestFailedException
                        ? new RequestFailedException(what + ": the server refused the request")
                        : (LockingCenterException)new UnexpectedAnswerException(what + ": " + e.Message);
                }
            }
        }

        async Task<Socket> Connect(string what, CancellationToken ct)
        {
            IPAddress[] addresses;
            IPAddress literal;
            if (IPAddress.TryParse(host, out literal))
            {
                addresses = new[] { literal };
            }
            else
            {
                try
                {
                    addresses = await Dns.GetHostAddressesAsync(host.Length == 0 ? "localhost" : host).ConfigureAwait(false);
                }
                catch (SocketException e)
                {
                    throw new LockingCenterException(what + ": resolve " + host + ": " + e.Message, e);
                }
            }
            Exception last = null;
            foreach (IPAddress ip in addresses)
            {
                var socket = new Socket(ip.AddressFamily, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
                using (var timer = new CancellationTokenSource())
                using (var either = CancellationTokenSource.CreateLinkedTokenSource(ct, timer.Token))
                {
                    if (ConnectTimeout > TimeSpan.Zero) timer.CancelAfter(ConnectTimeout);
                    Exception failure = null;
                    CancellationTokenRegistration closeOnCancel = either.Token.Register(socket.Dispose);
                    try
                    {
                        await socket.ConnectAsync(new IPEndPoint(ip, port)).ConfigureAwait(false);
                    }
                    catch (Exception e) when (e is SocketException || e is ObjectDisposedException)
                    {
                        failure = e;
                    }
                    finally
                    {
                        closeOnCancel.Dispose(); // after this the socket is closed only by us
                    }
                    if (failure == null && !either.IsCancellationRequested) return socket;
                    socket.Dispose();
                    ct.ThrowIfCancellationRequested();
                    last = timer.IsCancellationRequested
                        ? new TimeoutException("connect timed out after " + ConnectTimeout, failure)
                        : failure;
                }
            }
            throw new LockingCenterException(what + ": connect: " + (last == null ? "no address" : last.Message), last);
        }

        /// <summary>
        /// Sends the request and reads the answer byte. Cancelling closes the
        /// socket, which ends a waiting receive and withdraws the request.
        /// </summary>
        static async Task<byte> Exchange(Socket socket, byte[] request, string what, CancellationToken ct)
        {
            using (ct.Register(socket.Dispose))
            {
                try
                {
                    int sent = 0;
                    while (sent < request.Length)
                    {
                        sent += await socket.SendAsync(new ArraySegment<byte>(request, sent, request.Length - sent), SocketFlags.None)
                            .ConfigureAwait(false);
                    }
                    var answer = new byte[1];
                    int n = await socket.ReceiveAsync(new ArraySegment<byte>(answer), SocketFlags.None).ConfigureAwait(false);
                    if (n == 1) return answer[0];
                }
                catch (Exception e) when (e is SocketException || e is ObjectDisposedException)
                {
                    ct.ThrowIfCancellationRequested();
                    throw new LockingCenterException(what + ": " + e.Message, e);
                }
                ct.ThrowIfCancellationRequested();
                throw new LockingCenterException(what + ": the connection closed before the answer");
            }
        }

        internal static void ParseAddress(string address, out string host, out int port)
        {
            int colon = address.LastIndexOf(':');
            if (colon < 0) throw new ArgumentException("address must be host:port: " + address, nameof(address));
            host = address.Substring(0, colon);
            string portText = address.Substring(colon + 1);
            if (host.Length >= 2 && host[0] == '[' && host[host.Length - 1] == ']')
            {
                host = host.Substring(1, host.Length - 2);
            }
            else if (host.IndexOfAny(new[] { '[', ']', ':' }) >= 0)
            {
                throw new ArgumentException("an IPv6 address must be in brackets: " + address, nameof(address));
            }
            bool digits = portText.Length > 0 && portText.Length <= 5;
            foreach (char c in portText) digits &= c >= '0' && c <= '9';
            if (!digits || !int.TryParse(portText, NumberStyles.None, CultureInfo.InvariantCulture, out port) || port < 1 || port > 65535)
            {
                throw new ArgumentException("bad port in address " + address, nameof(address));
            }
        }
    }
}
