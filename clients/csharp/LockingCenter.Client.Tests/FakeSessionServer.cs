using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.IO;
using System.Net;
using System.Net.Sockets;
using System.Threading;

namespace LockingCenter.Tests
{
    /// <summary>
    /// A scripted session port on 127.0.0.1: each connection's preface is
    /// read, then every frame the client sends goes to the script, which
    /// returns the frames to answer with (none: silence; null: close the
    /// connection). Received frames
    /// are kept, with their connection's number, for the test to wait on.
    /// </summary>
    sealed class FakeSessionServer : IDisposable
    {
        public delegate IEnumerable<byte[]> Script(int connection, Frame frame);

        readonly TcpListener listener = new TcpListener(IPAddress.Loopback, 0);
        readonly Script script;
        readonly List<TcpClient> clients = new List<TcpClient>();
        readonly Thread accepter;
        int connections;

        /// <summary>Every frame received: the connection's number (from 0) and the frame.</summary>
        public readonly BlockingCollection<KeyValuePair<int, Frame>> Received = new BlockingCollection<KeyValuePair<int, Frame>>();

        public FakeSessionServer(Script script)
        {
            this.script = script;
            listener.Start();
            accepter = new Thread(Accept) { IsBackground = true };
            accepter.Start();
        }

        public string Address => "127.0.0.1:" + ((IPEndPoint)listener.LocalEndpoint).Port;

        /// <summary>The WELCOME of a new session 1 with a TTL and keepalive of the test's choosing.</summary>
        public static byte[] Welcome(ulong id, uint ttlMs, uint keepaliveMs) => Wire.Encode(FrameType.Welcome, id, new List<Field>
        {
            Field.U64(Tag.Session, 1), Field.Bytes(Tag.Secret, new byte[16]), Field.U32(Tag.TtlMs, ttlMs),
            Field.U32(Tag.KeepaliveMs, keepaliveMs), Field.Bytes(Tag.Server, new byte[] { 0x66 }),
        });

        /// <summary>An OK answering f.</summary>
        public static byte[] Ok(Frame f) => Wire.Encode(FrameType.Ok, f.Id, new List<Field>());

        /// <summary>The next frame received, within ten seconds.</summary>
        public KeyValuePair<int, Frame> Next()
        {
            KeyValuePair<int, Frame> got;
            if (!Received.TryTake(out got, TimeSpan.FromSeconds(10))) throw new TestFailure("the fake server received nothing within 10 s");
            return got;
        }

        void Accept()
        {
            try
            {
                for (;;)
                {
                    TcpClient c = listener.AcceptTcpClient();
                    lock (clients) clients.Add(c);
                    int n = connections++;
                    new Thread(() => Serve(n, c)) { IsBackground = true }.Start();
                }
            }
            catch (Exception e) when (e is SocketException || e is ObjectDisposedException || e is InvalidOperationException)
            {
                // Disposed.
            }
        }

        void Serve(int n, TcpClient c)
        {
            try
            {
                NetworkStream s = c.GetStream();
                var preface = new byte[4];
                for (int got = 0; got < 4;)
                {
                    int k = s.Read(preface, got, 4 - got);
                    if (k == 0) return;
                    got += k;
                }
                var reader = new FrameReader();
                var buf = new byte[4096];
                for (;;)
                {
                    int k = s.Read(buf, 0, buf.Length);
                    if (k == 0) return;
                    reader.Push(buf, 0, k);
                    for (Frame f = reader.Next(); f != null; f = reader.Next())
                    {
                        Received.Add(new KeyValuePair<int, Frame>(n, f));
                        IEnumerable<byte[]> answers = script(n, f);
                        if (answers == null)
                        {
                            c.Close();
                            return;
                        }
                        foreach (byte[] answer in answers) s.Write(answer, 0, answer.Length);
                    }
                }
            }
            catch (Exception e) when (e is IOException || e is SocketException || e is ObjectDisposedException)
            {
                // The client went, or the server is disposed.
            }
        }

        public void Dispose()
        {
            listener.Stop();
            lock (clients)
            {
                foreach (TcpClient c in clients) c.Close();
            }
        }
    }
}
