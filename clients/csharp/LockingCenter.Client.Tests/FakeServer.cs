using System;
using System.Collections.Generic;
using System.IO;
using System.Net;
using System.Net.Sockets;
using System.Threading;

namespace LockingCenter.Tests
{
    /// <summary>
    /// A scripted mutex port on 127.0.0.1: it serves a number of connections,
    /// one request each, and answers them as told.
    /// </summary>
    sealed class FakeServer : IDisposable
    {
        public enum Reply { Answer, Hang, Close }

        readonly TcpListener listener = new TcpListener(IPAddress.Loopback, 0);
        readonly Thread thread;
        readonly Func<byte, Reply> replyFor;
        readonly ManualResetEventSlim gate;
        readonly byte answer;
        readonly List<byte[]> requests = new List<byte[]>();
        bool peerClosed;

        public FakeServer(int connections, Reply reply, byte answer = Protocol.AnswerOk)
            : this(connections, action => reply, answer, null)
        {
        }

        /// <summary>
        /// A server that replies to each request as replyFor its action byte
        /// says; with a gate, an answer waits until the gate is set.
        /// </summary>
        public FakeServer(int connections, Func<byte, Reply> replyFor, byte answer, ManualResetEventSlim gate)
        {
            this.replyFor = replyFor;
            this.gate = gate;
            this.answer = answer;
            listener.Start();
            Address = "127.0.0.1:" + ((IPEndPoint)listener.LocalEndpoint).Port;
            thread = new Thread(() => Serve(connections)) { IsBackground = true };
            thread.Start();
        }

        public string Address { get; }

        /// <summary>The requests received, in order. Final after Dispose.</summary>
        public List<byte[]> Requests
        {
            get { lock (requests) return new List<byte[]>(requests); }
        }

        /// <summary>Whether a Hang connection saw its peer close. Final after Dispose.</summary>
        public bool PeerClosed => Volatile.Read(ref peerClosed);

        /// <summary>Blocks until n complete requests have arrived.</summary>
        public void WaitRequests(int n)
        {
            lock (requests)
            {
                while (requests.Count < n) Monitor.Wait(requests);
            }
        }

        /// <summary>
        /// Stops the server. Connections not yet made are refused, so a
        /// client that never connected cannot hang a test.
        /// </summary>
        public void Dispose()
        {
            listener.Stop();
            thread.Join();
        }

        /// <summary>The length of the complete request at the start of b, or 0 while incomplete.</summary>
        static int RequestLength(List<byte> b)
        {
            if (b.Count == 0) return 0;
            var action = (RequestAction)b[0];
            int at = 1;
            bool withKey = action != RequestAction.ResetSource;
            bool withSource = action == RequestAction.Lock || action == RequestAction.TryLock || action == RequestAction.ResetSource;
            foreach (bool field in new[] { withKey, withSource })
            {
                if (!field) continue;
                if (b.Count < at + 1 || b.Count < at + 1 + b[at]) return 0;
                at += 1 + b[at];
            }
            return at;
        }

        void Serve(int connections)
        {
            for (int i = 0; i < connections; i++)
            {
                Socket c;
                try
                {
                    c = listener.AcceptSocket();
                }
                catch (Exception e) when (e is SocketException || e is ObjectDisposedException || e is InvalidOperationException)
                {
                    return;
                }
                using (c)
                {
                    c.ReceiveTimeout = 10000; // a misbehaving client fails its test instead of hanging it
                    var got = new List<byte>();
                    var buf = new byte[512];
                    try
                    {
                        while (RequestLength(got) == 0)
                        {
                            int n = c.Receive(buf);
                            if (n == 0) break;
                            for (int k = 0; k < n; k++) got.Add(buf[k]);
                        }
                    }
                    catch (SocketException)
                    {
                    }
                    lock (requests)
                    {
                        requests.Add(got.ToArray());
                        Monitor.PulseAll(requests);
                    }
                    Reply reply = got.Count > 0 ? replyFor(got[0]) : Reply.Close;
                    try
                    {
                        if (reply == Reply.Answer && gate != null) gate.Wait();
                        if (reply == Reply.Answer) c.Send(new[] { answer });
                        if (reply == Reply.Hang) Volatile.Write(ref peerClosed, c.Receive(buf) == 0);
                    }
                    catch (SocketException e)
                    {
                        if (reply == Reply.Hang) Volatile.Write(ref peerClosed, e.SocketErrorCode != SocketError.TimedOut && e.SocketErrorCode != SocketError.WouldBlock);
                    }
                }
            }
        }

        /// <summary>Reports whether no connection reached the listener.</summary>
        public static bool NothingPending(TcpListener listener) => !listener.Pending();
    }
}
