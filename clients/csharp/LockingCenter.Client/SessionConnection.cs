using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;
using System.Net;
using System.Net.Security;
using System.Net.Sockets;
using System.Security.Authentication;
using System.Security.Cryptography.X509Certificates;
using System.Threading;
using System.Threading.Tasks;

namespace LockingCenter
{
    // The connections of a session: the handshake (preface, HELLO or RESUME,
    // WELCOME), the reader and writer of the attached connection, the
    // keepalive, and the redial that follows a drop.
    public sealed partial class Session
    {
        Conn conn;
        double heard, lastAck;
        Request ping;
        Replay replay;
        bool reconnecting;
        int reconnectRuns;
        Timer tickTimer, lostTimer;
        bool lostArmed;
        int at;
        string leader = "", silent = "";
        double shunUntil;
        static readonly Random Jitter = new Random();
        const double OpenFloorMs = 3000;

        /// <summary>One connection of a session.</summary>
        sealed class Conn
        {
            public string Addr;
            public Socket Socket;
            public Stream Stream;
            public readonly FrameReader Reader = new FrameReader();
            public readonly List<byte[]> Out = new List<byte[]>();
            public bool Writing, Dead;

            public void Kill()
            {
                Dead = true;
                try
                {
                    Stream?.Dispose();
                }
                catch (Exception e) when (e is IOException || e is ObjectDisposedException || e is SocketException)
                {
                }
                Socket.Dispose();
            }
        }

        sealed class Handshake
        {
            public Conn Conn;
            public Frame Welcome;
        }

        // --- writing and reading the attached connection ---

        /// <summary>Queues bytes for c; <see cref="Flush"/> sends them. Under the gate.</summary>
        void Write(Conn c, byte[] b) => c.Out.Add(b);

        /// <summary>What c has queued, in one buffer. Under the gate.</summary>
        static byte[] TakeOut(Conn c)
        {
            byte[] batch = c.Out.Count == 1 ? c.Out[0] : Join(c.Out);
            c.Out.Clear();
            return batch;
        }

        /// <summary>
        /// Writes batch to c, then whatever was queued meanwhile, until nothing
        /// is left, on the calling thread: one thread writes at a time, and the
        /// others' frames go out in its next write. A blocking write costs less
        /// under Mono than an asynchronous one, or a writer thread to wake.
        /// </summary>
        void Send(Conn c, byte[] batch)
        {
            while (batch != null)
            {
                try
                {
                    c.Stream.Write(batch, 0, batch.Length);
                }
                catch (Exception e) when (e is IOException || e is ObjectDisposedException || e is SocketException || e is InvalidOperationException)
                {
                    lock (Gate)
                    {
                        c.Writing = false;
                        OnDrop(c);
                    }
                    return;
                }
                lock (Gate)
                {
                    if (c.Out.Count == 0 || c.Dead)
                    {
                        c.Writing = false;
                        batch = null;
                    }
                    else
                    {
                        batch = TakeOut(c);
                    }
                }
            }
        }

        static byte[] Join(List<byte[]> parts)
        {
            var b = new byte[parts.Sum(p => p.Length)];
            int n = 0;
            foreach (byte[] p in parts)
            {
                Buffer.BlockCopy(p, 0, b, n, p.Length);
                n += p.Length;
            }
            return b;
        }

        /// <summary>The reader of c, a thread of its own: blocking reads cost less under Mono than asynchronous ones.</summary>
        void ReadLoop(Conn c)
        {
            var buf = new byte[64 * 1024];
            try
            {
                for (;;)
                {
                    int n = c.Stream.Read(buf, 0, buf.Length);
                    if (n == 0) break;
                    bool go;
                    lock (Gate)
                    {
                        if (conn != c) return;
                        c.Reader.Push(buf, 0, n);
                        go = Consume(c);
                    }
                    Flush();
                    if (!go) return;
                }
            }
            catch (Exception e) when (e is IOException || e is ObjectDisposedException || e is SocketException || e is InvalidOperationException)
            {
            }
            lock (Gate) OnDrop(c);
            Flush();
        }

        /// <summary>Applies the whole frames c has buffered; false once c is dropped. Under the gate.</summary>
        bool Consume(Conn c)
        {
            for (;;)
            {
                if (conn != c) return false;
                Frame f;
                try
                {
                    f = c.Reader.Next();
                }
                catch (SessionProtocolException)
                {
                    OnDrop(c); // a protocol error of the server: drop the connection and resume
                    return false;
                }
                if (f == null) return true;
                heard = Now;
                if (!Handle(f))
                {
                    OnDrop(c);
                    return false;
                }
            }
        }

        /// <summary>Attaches c to the session: its frames are read from now on. Under the gate.</summary>
        void Attach(Conn c)
        {
            conn = c;
            Raise(SessionState.Connected);
            if (c.Reader.Buffered > 0 && !Consume(c)) return;
            new Thread(() => ReadLoop(c)) { IsBackground = true, Name = "lc-session-reader" }.Start();
            Arm(0);
        }

        /// <summary>The connection c dropped (or is dropped): detach it and resume. Under the gate.</summary>
        void OnDrop(Conn c)
        {
            c.Kill();
            if (conn != c) return;
            conn = null;
            ping = null;
            replay = null;
            StartReconnect();
        }

        // --- keepalive ---

        /// <summary>Keeps the attached connection alive: the tick comes at the earlier of the next PING and the silence bound.</summary>
        void Arm(double delay)
        {
            if (tickTimer == null) tickTimer = new Timer(_ => Tick());
            tickTimer.Change((long)Math.Max(1, delay), Timeout.Infinite);
        }

        void Tick()
        {
            lock (Gate)
            {
                Conn c = conn;
                if (err != null || c == null) return;
                double t = Now;
                if (ping == null && t >= lastAck + keepalive)
                {
                    ping = NewRequest(FrameType.Ping, "ping", null);
                    Enqueue(ping, new List<Field>());
                }
                double dead = heard + SilenceOf(keepalive);
                if (t >= dead)
                {
                    Demote(c.Addr);
                    OnDrop(c);
                }
                else
                {
                    double next = ping != null ? dead : Math.Min(dead, lastAck + keepalive);
                    Arm(next - t);
                }
            }
            Flush();
        }

        /// <summary>The server answered a request sent at sentAt: it had heard from the session then. Under the gate.</summary>
        void Ack(double sentAt)
        {
            if (sentAt > lastAck) lastAck = sentAt;
            ArmLost();
        }

        double LostDeadline => lastAck + ttl - Margin(ttl);

        /// <summary>Arms the lost deadline's timer unless it is: the deadline only moves later, so a timer that fires early re-arms.</summary>
        void ArmLost()
        {
            if (err != null || lostArmed) return;
            lostArmed = true;
            if (lostTimer == null) lostTimer = new Timer(_ => LostDue());
            lostTimer.Change((long)Math.Max(1, LostDeadline - Now), Timeout.Infinite);
        }

        /// <summary>
        /// At the session's lost deadline (no answer for the TTL less a margin,
        /// counted from the sending of the last request answered) the server may
        /// have expired the session: it ends here as if it had.
        /// </summary>
        void LostDue()
        {
            lock (Gate)
            {
                lostArmed = false;
                if (err != null) return;
                if (Now < LostDeadline)
                {
                    ArmLost();
                    return;
                }
                string why = "no answer from the server within the session's TTL (" + ttl + " ms) less a margin of " + Margin(ttl) + " ms";
                EndLost(new SessionExpiredException("session " + id + ": " + why), LostReason.SessionExpired, why);
            }
            Flush();
        }

        // --- addresses ---

        /// <summary>The address to try next: the leader a node named, or the next address, passing over a shunned one.</summary>
        string Target()
        {
            if (leader.Length > 0) return leader;
            if (Shunned(addrs[at])) at = (at + 1) % addrs.Count;
            return addrs[at];
        }

        void Follow(string named)
        {
            if (!string.IsNullOrEmpty(named) && !Shunned(named)) leader = named;
        }

        /// <summary>
        /// Sends the node at addr, whose connection went silent, to the back of
        /// the addresses, and shuns it for as long again: a frozen leader keeps
        /// its port (the kernel accepts) and the other nodes name it until they
        /// have elected another.
        /// </summary>
        void Demote(string addr)
        {
            if (leader == addr) leader = "";
            int i = addrs.IndexOf(addr);
            if (i >= 0)
            {
                addrs.RemoveAt(i);
                addrs.Add(addr);
                at = 0;
            }
            silent = addr;
            shunUntil = Now + SilenceOf(keepalive);
        }

        bool Shunned(string addr) => addr == silent && addrs.Count > 1 && Now < shunUntil;

        /// <summary>Notes that a handshake at addr failed with e; reports whether another node may do better. Under the gate.</summary>
        bool FailedAt(string addr, Exception e)
        {
            if (leader == addr) leader = "";
            else if (addrs[at] == addr) at = (at + 1) % addrs.Count;
            var g = e as SessionException;
            if (g == null || g.GoodbyeCode < 0) return true;
            if (g.GoodbyeCode == Code.NotLeader && g.GoodbyeLeader != addr) Follow(g.GoodbyeLeader);
            return !IsFinal(g);
        }

        /// <summary>Whether a GOODBYE ends the hope of a session: a server that is stopping, over its connections or the source's rate may take it later, and a node that does not lead sends it on.</summary>
        static bool IsFinal(Exception e)
        {
            var g = e as SessionException;
            if (g == null || g.GoodbyeCode < 0) return false;
            switch (g.GoodbyeCode)
            {
                case Code.ShuttingDown:
                case Code.SessionEnded:
                case Code.RateLimited:
                case Code.OverLimit:
                case Code.NotLeader:
                    return false;
            }
            return true;
        }

        static SessionException Goodbye(Frame f, string addr)
        {
            int code = (int)(f.Num(Tag.Code) ?? 0);
            string named = f.Text(Tag.Leader) ?? "";
            SessionException e = Refusal.Of("session at " + addr + ": the server said goodbye", code, f.Text(Tag.Message) ?? "", named);
            e.GoodbyeCode = code;
            e.GoodbyeLeader = named;
            return e;
        }

        // --- the handshake ---

        /// <summary>
        /// Dials addr, writes bytes (the preface and the first frames) and
        /// reads the first answer: within the connect timeout (the TCP connect
        /// and the TLS handshake), the request timeout (the answer), and all of
        /// it within bound. Throws the GOODBYE's exception,
        /// SessionTimeoutException, SessionConnectionException or
        /// SessionProtocolException; OperationCanceledException for ct.
        /// </summary>
        async Task<Handshake> HandshakeAsync(string addr, byte[] bytes, double bound, CancellationToken ct)
        {
            double start = Now;
            string host;
            int port;
            LockingCenterClient.ParseAddress(addr, out host, out port);
            string phase = "no connection";
            bool timedOut = false;
            Socket socket = null;
            var c = new Conn { Addr = addr };
            Func<double, double> limit = l => Math.Max(0, Math.Min(l > 0 ? l : double.MaxValue, bound - (Now - start)));
            using (var killer = new Timer(_ =>
            {
                timedOut = true;
                lock (c) c.Socket?.Dispose();
            }))
            using (ct.Register(() =>
            {
                lock (c) c.Socket?.Dispose();
            }))
            {
                killer.Change((long)limit(connectTimeout), Timeout.Infinite);
                try
                {
                    IPAddress ip = await Resolve(host).ConfigureAwait(false);
                    socket = new Socket(ip.AddressFamily, SocketType.Stream, ProtocolType.Tcp) { NoDelay = true };
                    lock (c) c.Socket = socket;
                    if (timedOut || ct.IsCancellationRequested) socket.Dispose();
                    await socket.ConnectAsync(new IPEndPoint(ip, port)).ConfigureAwait(false);
                    Stream stream = new NetworkStream(socket, true);
                    if (tls != null)
                    {
                        var ssl = new SslStream(stream, false, (o, cert, chain, errors) => tls.Validate(tls.ServerName ?? host, cert, chain, errors));
                        var certs = new X509CertificateCollection();
                        if (tls.ClientCertificate != null) certs.Add(tls.ClientCertificate);
                        await ssl.AuthenticateAsClientAsync(tls.ServerName ?? host, certs, SslProtocols.Tls12, false).ConfigureAwait(false);
                        stream = ssl;
                    }
                    c.Stream = stream;
                    phase = "no answer";
                    killer.Change((long)limit(requestTimeout), Timeout.Infinite);
                    await stream.WriteAsync(bytes, 0, bytes.Length).ConfigureAwait(false);
                    var buf = new byte[16 * 1024];
                    for (;;)
                    {
                        Frame f = c.Reader.Next();
                        if (f != null)
                        {
                            killer.Change(Timeout.Infinite, Timeout.Infinite);
                            if (timedOut) break;
                            switch (f.Type)
                            {
                                case FrameType.Welcome:
                                    return new Handshake { Conn = c, Welcome = f };
                                case FrameType.Goodbye:
                                    throw Goodbye(f, addr);
                                case FrameType.Refused:
                                    // A field of the HELLO or RESUME the server does not know: a server older than this client.
                                    throw Refusal.Of("session at " + addr + ": the server refused the session's first frame",
                                        (int)(f.Num(Tag.Code) ?? 0), f.Text(Tag.Message) ?? "");
                            }
                            throw new SessionProtocolException(string.Format("session at {0}: frame 0x{1:x2} before the WELCOME", addr, f.Type));
                        }
                        int n = await stream.ReadAsync(buf, 0, buf.Length).ConfigureAwait(false);
                        if (n == 0)
                        {
                            if (c.Reader.Buffered == 1 && c.Reader.FirstUnread == (byte)'-')
                            {
                                throw new SessionProtocolException("session at " + addr + ": '-' to the session protocol's preface (a server without sessions?)");
                            }
                            throw new SessionConnectionException("session at " + addr + ": the connection closed before the answer");
                        }
                        c.Reader.Push(buf, 0, n);
                    }
                }
                catch (Exception e) when (!(e is SessionException))
                {
                    lock (c) c.Socket?.Dispose();
                    ct.ThrowIfCancellationRequested();
                    if (timedOut)
                    {
                        throw new SessionTimeoutException("session at " + addr + ": " + phase + " within " + Math.Round(Now - start) + " ms", null, null, e);
                    }
                    if (e is AuthenticationException)
                    {
                        throw new SessionConnectionException("session at " + addr + ": TLS: " + e.Message, e);
                    }
                    throw new SessionConnectionException("session at " + addr + ": " + e.Message, e);
                }
                catch (SessionException)
                {
                    lock (c) c.Socket?.Dispose();
                    throw;
                }
                lock (c) c.Socket?.Dispose();
                throw new SessionTimeoutException("session at " + addr + ": " + phase + " within " + Math.Round(Now - start) + " ms");
            }
        }

        static async Task<IPAddress> Resolve(string host)
        {
            IPAddress ip;
            if (IPAddress.TryParse(host, out ip)) return ip;
            IPAddress[] found = await Dns.GetHostAddressesAsync(host.Length == 0 ? "localhost" : host).ConfigureAwait(false);
            if (found.Length == 0) throw new SocketException((int)SocketError.HostNotFound);
            return found.FirstOrDefault(a => a.AddressFamily == AddressFamily.InterNetwork) ?? found[0];
        }

        byte[] HelloBytes()
        {
            var fields = new List<Field> { Field.Bytes(Tag.Name, name) };
            if (ttlAsked > 0) fields.Add(Field.U32(Tag.TtlMs, ttlAsked));
            if (credential != null) fields.Add(Field.Bytes(Tag.Credential, credential));
            return Wire.Preface.Concat(Wire.Encode(FrameType.Hello, 1, fields)).ToArray();
        }

        /// <summary>Opens the session: HELLO at each address in turn, following a node that names the leader, until one answers WELCOME.</summary>
        async Task OpenAsync(CancellationToken ct)
        {
            ct.ThrowIfCancellationRequested();
            byte[] bytes = HelloBytes();
            nextId = 1;
            // The keepalive is known from the WELCOME only; the TTL asked for
            // (or the server's default) bounds each attempt beforehand, but
            // never under OpenFloorMs: a process's first connection pays for
            // the runtime's warm-up (Mono compiles the socket and TLS paths as
            // it first runs them, a second or more on a loaded host), and no
            // session is at stake yet.
            double bound = Math.Max(SilenceOf((ttlAsked > 0 ? ttlAsked : ServerDefaultTtl) / 3), OpenFloorMs);
            Exception last = null;
            Handshake got = null;
            double sentAt = 0;
            for (int tries = 0; tries < 2 * addrs.Count + 1; tries++)
            {
                string addr;
                lock (Gate) addr = Target();
                sentAt = Now;
                try
                {
                    got = await HandshakeAsync(addr, bytes, bound, ct).ConfigureAwait(false);
                    break;
                }
                catch (SessionException e)
                {
                    last = e;
                }
                lock (Gate)
                {
                    if (!FailedAt(addr, last)) break;
                    if (leader.Length == 0 && at == 0) break; // each address once, and no leader named
                }
            }
            if (got == null)
            {
                var g = last as SessionException;
                if (g != null && g.GoodbyeCode == Code.NotLeader && addrs.Count > 1)
                {
                    throw new NotLeaderException("session at " + string.Join(",", addrs) + ": no address took the session; the last: " + g.Message,
                        g.ServerMessage, g.GoodbyeLeader);
                }
                throw last;
            }
            Frame w = got.Welcome;
            ulong? sid = w.U64(Tag.Session);
            byte[] sec = w.Get(Tag.Secret);
            uint? t = w.Num(Tag.TtlMs);
            if (sid == null || sec == null || t == null || t == 0)
            {
                got.Conn.Kill();
                throw new SessionProtocolException("session at " + got.Conn.Addr + ": a WELCOME without a session, secret or TTL");
            }
            lock (Gate)
            {
                id = sid.Value;
                secret = sec;
                ttl = t.Value;
                double k = w.Num(Tag.KeepaliveMs) ?? 0;
                keepalive = k <= 0 || k > ttl ? ttl / 3 : k;
                server = w.Text(Tag.Server) ?? "";
                lastAck = sentAt;
                heard = Now;
                ArmLost();
                Attach(got.Conn);
            }
            Flush();
        }

        /// <summary>The first bytes of a resume: the preface, RESUME, and a frame of type with no fields; and that frame's id. Under the gate.</summary>
        byte[] ResumeBytes(byte type, out ulong frameId)
        {
            nextId += 2;
            ulong rid = nextId - 1;
            frameId = nextId;
            var fields = new List<Field> { Field.U64(Tag.Session, id), Field.Bytes(Tag.Secret, secret) };
            if (credential != null) fields.Add(Field.Bytes(Tag.Credential, credential));
            return Wire.Preface.Concat(Wire.Encode(FrameType.Resume, rid, fields)).Concat(Wire.Encode(type, frameId, new List<Field>())).ToArray();
        }

        /// <summary>Under the gate.</summary>
        void StartReconnect()
        {
            if (reconnecting || err != null) return;
            reconnecting = true;
            int run = ++reconnectRuns;
            Raise(SessionState.Suspended);
            Task.Run(async () =>
            {
                try
                {
                    await Reconnect().ConfigureAwait(false);
                }
                finally
                {
                    // A resume lets go as it attaches (its connection may drop at
                    // once, and start the next run), so only this run's flag is cleared.
                    lock (Gate)
                    {
                        if (reconnectRuns == run) reconnecting = false;
                    }
                    Flush();
                }
            });
        }

        /// <summary>Resumes the session on a new connection, at once and then with a growing backoff, until it is back or has ended.</summary>
        async Task Reconnect()
        {
            int hops = 0; // leaders followed at once since the last backoff
            for (int attempt = 0; ; attempt++)
            {
                lock (Gate)
                {
                    if (leader.Length > 0 && hops <= addrs.Count)
                    {
                        // To the leader a node named, at once; nodes whose views disagree (an election) get the backoff.
                        attempt = 0;
                        hops++;
                    }
                    else
                    {
                        hops = 0;
                    }
                }
                if (attempt > 0)
                {
                    try
                    {
                        await Task.Delay(TimeSpan.FromMilliseconds(Backoff(attempt)), ended.Token).ConfigureAwait(false);
                    }
                    catch (OperationCanceledException)
                    {
                        return;
                    }
                }
                lock (Gate)
                {
                    if (err != null) return;
                }
                try
                {
                    await Resume().ConfigureAwait(false);
                    return;
                }
                catch (SessionException e)
                {
                    lock (Gate)
                    {
                        if (err != null) return;
                        if (IsFinal(e))
                        {
                            EndLost(e, LostReason.SessionExpired, "the session ended on the server while the client was away");
                            return;
                        }
                    }
                }
                finally
                {
                    Flush();
                }
            }
        }

        /// <summary>The wait before reconnect attempt n (from 1): 50 ms doubling, at most a quarter of the keepalive and 500 ms, jittered.</summary>
        double Backoff(int n)
        {
            double d = Math.Min(Math.Min(50 * Math.Pow(2, Math.Min(n - 1, 10)), Math.Max(keepalive / 4, 50)), 500);
            lock (Jitter) return d / 2 + Jitter.NextDouble() * d / 2;
        }

        /// <summary>
        /// Opens a connection and resumes the session on it: RESUME and a PING
        /// whose answer comes after everything the server owed the session. It
        /// attaches the connection and sends again what the server never got.
        /// </summary>
        async Task Resume()
        {
            byte[] bytes;
            ulong syncId;
            string addr;
            double bound;
            lock (Gate)
            {
                bytes = ResumeBytes(FrameType.Ping, out syncId);
                addr = Target();
                bound = SilenceOf(keepalive);
            }
            double sentAt = Now;
            Handshake got;
            try
            {
                got = await HandshakeAsync(addr, bytes, bound, CancellationToken.None).ConfigureAwait(false);
            }
            catch (SessionException e)
            {
                lock (Gate) FailedAt(addr, e);
                throw;
            }
            lock (Gate)
            {
                Replay rs;
                try
                {
                    rs = ParseResume(got.Welcome);
                }
                catch (SessionException)
                {
                    got.Conn.Kill();
                    throw;
                }
                if (err != null)
                {
                    got.Conn.Kill();
                    return;
                }
                rs.SentAt = sentAt;
                rs.SyncId = syncId;
                Ack(sentAt);
                heard = Now;
                replay = rs;
                var resend = new List<byte[]>();
                foreach (ulong rid in inflight.Keys.OrderBy(k => k).ToList())
                {
                    Request r = inflight[rid];
                    if (r.Type != FrameType.Describe)
                    {
                        if (rid <= rs.Applied) continue; // it arrived; the reconciliation settles it
                        if ((r.Type == FrameType.Acquire && r.Abandoned) || (r.Type == FrameType.Cancel && !inflight.ContainsKey(r.Target)))
                        {
                            inflight.Remove(rid); // it never arrived and nobody wants it
                            continue;
                        }
                    }
                    r.Resent = r.Sent;
                    r.Sent = true;
                    resend.Add(r.Frame);
                }
                reconnecting = false; // a drop of the connection attached now starts the next reconnection
                Attach(got.Conn);
                if (conn == got.Conn)
                {
                    foreach (byte[] b in resend) Write(got.Conn, b);
                }
            }
        }
    }

    public partial class SessionException
    {
        /// <summary>The code of the GOODBYE this tells, or -1.</summary>
        internal int GoodbyeCode = -1;

        /// <summary>The leader a GOODBYE not_leader named.</summary>
        internal string GoodbyeLeader = "";
    }
}
