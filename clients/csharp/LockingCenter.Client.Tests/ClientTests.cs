using System;
using System.Collections.Generic;
using System.Linq;
using System.Net;
using System.Net.Sockets;
using System.Text;
using System.Threading;
using System.Threading.Tasks;

namespace LockingCenter.Tests
{
    /// <summary>The encoder and the answer table against vectors.json, and
    /// the network path against a scripted server.</summary>
    static class ClientTests
    {
        static readonly UTF8Encoding StrictUtf8 = new UTF8Encoding(false, true);

        /// <summary>Runs the client call for action; "ok", "busy" or "failed".</summary>
        static string Perform(LockingCenterClient c, RequestAction action, byte[] key, byte[] source)
        {
            try
            {
                switch (action)
                {
                    case RequestAction.Lock: c.Lock(key); break;
                    case RequestAction.Unlock: c.Unlock(key); break;
                    case RequestAction.ResetKey: c.ResetByKey(key); break;
                    case RequestAction.ResetSource: c.ResetBySource(source); break;
                    case RequestAction.TryLock: return c.TryLock(key) ? "ok" : "busy";
                }
                return "ok";
            }
            catch (LockingCenterException)
            {
                return "failed";
            }
        }

        [Test]
        static void EncoderMatchesVectors()
        {
            var seen = new HashSet<RequestAction>();
            foreach (var v in Vectors.List("requests"))
            {
                string name = Vectors.Text(v, "name");
                RequestAction action = Vectors.Action(v);
                Check.That((double)action == (double)v["action_byte"], name + ": action_byte disagrees with actions");
                byte[] got = Protocol.EncodeRequest(action, Vectors.Bytes(v, "key_hex"), Vectors.Bytes(v, "source_hex"));
                Check.That(got.SequenceEqual(Vectors.Bytes(v, "request_hex")), name + ": encoded " + Vectors.Hex(got));
                seen.Add(action);
            }
            Check.That(seen.Count == 5, "vectors cover " + seen.Count + " of 5 actions");
        }

        [Test]
        static void AnswersMatchVectors()
        {
            foreach (var v in Vectors.List("answers"))
            {
                byte[] answer = Vectors.Bytes(v, "answer_hex");
                Check.That(answer.Length == 1, "answer_hex is not one byte");
                string got;
                try
                {
                    got = Protocol.DecodeAnswer(Vectors.Action(v), answer[0]) == Outcome.Busy ? "busy" : "ok";
                }
                catch (LockingCenterException)
                {
                    got = "failed";
                }
                Check.That(got == Vectors.Text(v, "result"), Vectors.Text(v, "action") + " answer " + Vectors.Hex(answer) + ": got " + got);
            }
        }

        [Test]
        static void ClientSendsVectorBytes()
        {
            foreach (var v in Vectors.List("requests"))
            {
                string name = Vectors.Text(v, "name");
                byte[] key = Vectors.Bytes(v, "key_hex"), source = Vectors.Bytes(v, "source_hex");
                byte[] want = Vectors.Bytes(v, "request_hex");
                using (var server = new FakeServer(1, FakeServer.Reply.Answer))
                {
                    string got = Perform(new LockingCenterClient(server.Address, source), Vectors.Action(v), key, source);
                    server.Dispose();
                    Check.That(got == "ok", name + ": " + got);
                    Check.That(server.Requests[0].SequenceEqual(want), name + ": server received " + Vectors.Hex(server.Requests[0]));
                }
                // Text keys and sources are sent as UTF-8.
                if (Vectors.Action(v) != RequestAction.Lock || !IsUtf8(key) || !IsUtf8(source)) continue;
                using (var server = new FakeServer(1, FakeServer.Reply.Answer))
                {
                    new LockingCenterClient(server.Address, Encoding.UTF8.GetString(source)).Lock(Encoding.UTF8.GetString(key));
                    server.Dispose();
                    Check.That(server.Requests[0].SequenceEqual(want), name + ": as text, server received " + Vectors.Hex(server.Requests[0]));
                }
            }
        }

        static bool IsUtf8(byte[] b)
        {
            try
            {
                StrictUtf8.GetString(b);
                return true;
            }
            catch (ArgumentException)
            {
                return false;
            }
        }

        [Test]
        static void ClientMapsAnswers()
        {
            foreach (var v in Vectors.List("answers"))
            {
                byte[] answer = Vectors.Bytes(v, "answer_hex");
                using (var server = new FakeServer(1, FakeServer.Reply.Answer, answer[0]))
                {
                    string got = Perform(new LockingCenterClient(server.Address), Vectors.Action(v), new byte[] { (byte)'k' }, new byte[0]);
                    Check.That(got == Vectors.Text(v, "result"), Vectors.Text(v, "action") + " answer " + Vectors.Hex(answer) + ": got " + got);
                }
            }
            using (var server = new FakeServer(1, FakeServer.Reply.Answer, Protocol.AnswerFailed))
            {
                Check.Throws<RequestFailedException>(() => new LockingCenterClient(server.Address).Lock("k"), "'-' to a lock");
            }
        }

        [Test]
        static void InvalidKeysAreNeverSent()
        {
            var listener = new TcpListener(IPAddress.Loopback, 0);
            listener.Start();
            var c = new LockingCenterClient("127.0.0.1:" + ((IPEndPoint)listener.LocalEndpoint).Port, "src");
            var calls = new List<Action<byte[]>>
            {
                k => c.Lock(k),
                k => c.LockAsync(k, new CancellationTokenSource(1000).Token).Wait(),
                k => c.TryLock(k),
                k => c.Unlock(k),
                k => c.Wait(k),
                k => c.ResetByKey(k),
                k => c.LockAsync(k),
                k => Protocol.EncodeRequest(RequestAction.Lock, k, null),
            };
            foreach (var v in Vectors.List("invalid_keys"))
            {
                byte[] key = Vectors.Bytes(v, "key_hex");
                for (int i = 0; i < calls.Count; i++)
                {
                    Check.Throws<ArgumentException>(() => calls[i](key), Vectors.Text(v, "name") + ", call " + i);
                }
            }
            Check.Throws<ArgumentException>(() => c.Lock(""), "empty text key");
            Check.Throws<ArgumentException>(() => c.Lock(new string('k', 64) + new string('\u00fc', 32)), "128-byte text key");
            Check.Throws<ArgumentException>(() => c.Lock("\ud800"), "lone surrogate");
            bool clean = FakeServer.NothingPending(listener);
            listener.Stop();
            Check.That(clean, "a connection reached the server");
        }

        [Test]
        static void InvalidSourcesAreNeverSent()
        {
            var listener = new TcpListener(IPAddress.Loopback, 0);
            listener.Start();
            string addr = "127.0.0.1:" + ((IPEndPoint)listener.LocalEndpoint).Port;
            var c = new LockingCenterClient(addr);
            foreach (var v in Vectors.List("invalid_sources"))
            {
                string name = Vectors.Text(v, "name");
                byte[] source = Vectors.Bytes(v, "source_hex");
                Check.Throws<ArgumentException>(() => new LockingCenterClient(addr, source), name + ": constructor");
                Check.Throws<ArgumentException>(() => c.ResetBySource(source), name + ": reset by source");
                Check.Throws<ArgumentException>(() => Protocol.EncodeRequest(RequestAction.TryLock, new byte[] { 1 }, source), name + ": encode");
            }
            bool clean = FakeServer.NothingPending(listener);
            listener.Stop();
            Check.That(clean, "a connection reached the server");
        }

        [Test]
        static void CancelClosesConnection()
        {
            using (var server = new FakeServer(1, FakeServer.Reply.Hang))
            using (var cts = new CancellationTokenSource())
            {
                Task locking = new LockingCenterClient(server.Address).LockAsync("k", cts.Token);
                server.WaitRequests(1);
                Check.That(!locking.IsCompleted, "lock returned while the server had not answered");
                cts.Cancel();
                Check.Throws<OperationCanceledException>(() => locking.GetAwaiter().GetResult(), "cancelled lock");
                server.Dispose();
                Check.That(server.PeerClosed, "server did not see the connection close");
            }
        }

        [Test]
        static void DeadlineClosesConnection()
        {
            using (var server = new FakeServer(1, FakeServer.Reply.Hang))
            using (var cts = new CancellationTokenSource(TimeSpan.FromMilliseconds(50)))
            {
                Check.Throws<OperationCanceledException>(() => new LockingCenterClient(server.Address).Lock("k", cts.Token), "lock past its deadline");
                server.Dispose();
                Check.That(server.PeerClosed, "server did not see the connection close");
            }
        }

        [Test]
        static void CancelledTokenStopsBeforeConnecting()
        {
            var listener = new TcpListener(IPAddress.Loopback, 0);
            listener.Start();
            var c = new LockingCenterClient("127.0.0.1:" + ((IPEndPoint)listener.LocalEndpoint).Port);
            Check.Throws<OperationCanceledException>(() => c.Wait("k", new CancellationToken(true)), "wait with a cancelled token");
            bool clean = FakeServer.NothingPending(listener);
            listener.Stop();
            Check.That(clean, "a cancelled call connected");
        }

        [Test]
        static void WaitLocksThenUnlocks()
        {
            using (var server = new FakeServer(2, FakeServer.Reply.Answer))
            {
                new LockingCenterClient(server.Address, "s").Wait("key");
                server.Dispose();
                Check.That(server.Requests.Count == 2, "requests: " + server.Requests.Count);
                Check.That(server.Requests[0].SequenceEqual(new byte[] { 1, 3, (byte)'k', (byte)'e', (byte)'y', 1, (byte)'s' }), "first request is not lock");
                Check.That(server.Requests[1].SequenceEqual(new byte[] { 2, 3, (byte)'k', (byte)'e', (byte)'y' }), "second request is not unlock");
            }
        }

        [Test]
        static void ClosedWithoutAnswer()
        {
            using (var server = new FakeServer(1, FakeServer.Reply.Close))
            {
                Check.Throws<LockingCenterException>(() => new LockingCenterClient(server.Address).TryLock("k"), "trylock closed unanswered");
            }
        }

        [Test]
        static void RefusedConnectionIsAFailure()
        {
            var listener = new TcpListener(IPAddress.Loopback, 0);
            listener.Start();
            string addr = "127.0.0.1:" + ((IPEndPoint)listener.LocalEndpoint).Port;
            listener.Stop(); // the port is now closed
            var e = Check.Throws<LockingCenterException>(() => new LockingCenterClient(addr).TryLock("k"), "trylock at a closed port");
            var socketError = e.InnerException as SocketException;
            Check.That(socketError != null && socketError.SocketErrorCode == SocketError.ConnectionRefused,
                "inner exception: " + (e.InnerException == null ? "none" : e.InnerException.Message));
        }

        /// <summary>What call threw, or null; a call still running after 10 s fails the test.</summary>
        static Exception Within10s(Action call)
        {
            Task t = Task.Run(call);
            if (!((IAsyncResult)t).AsyncWaitHandle.WaitOne(TimeSpan.FromSeconds(10)))
            {
                throw new TestFailure("the call did not return within 10 s");
            }
            return t.Exception?.GetBaseException();
        }

        static bool IsReadTimeout(Exception e) =>
            e is LockingCenterException && e.InnerException is TimeoutException && e.Message.Contains("no answer within 50 ms");

        [Test]
        static void CallsThatDoNotWaitGiveUpAfterTheReadTimeout()
        {
            var calls = new List<KeyValuePair<string, Action<LockingCenterClient>>>
            {
                new KeyValuePair<string, Action<LockingCenterClient>>("TryLock", c => c.TryLock("k")),
                new KeyValuePair<string, Action<LockingCenterClient>>("Unlock", c => c.Unlock("k")),
                new KeyValuePair<string, Action<LockingCenterClient>>("ResetByKey", c => c.ResetByKey("k")),
                new KeyValuePair<string, Action<LockingCenterClient>>("ResetBySource", c => c.ResetBySource("s")),
            };
            foreach (var call in calls)
            {
                using (var server = new FakeServer(1, FakeServer.Reply.Hang))
                {
                    var c = new LockingCenterClient(server.Address, "s", readTimeout: TimeSpan.FromMilliseconds(50));
                    Exception e = Within10s(() => call.Value(c));
                    Check.That(IsReadTimeout(e), call.Key + ": " + (e == null ? "no exception" : e.GetType().Name + ": " + e.Message));
                }
            }
        }

        [Test]
        static void TheReleaseOfWaitGivesUpAfterTheReadTimeout()
        {
            // The lock is granted at once; the unlock after it is never answered.
            Func<byte, FakeServer.Reply> grantsOnly = action =>
                action == (byte)RequestAction.Lock ? FakeServer.Reply.Answer : FakeServer.Reply.Hang;
            using (var server = new FakeServer(2, grantsOnly, Protocol.AnswerOk, null))
            {
                var c = new LockingCenterClient(server.Address, "s", readTimeout: TimeSpan.FromMilliseconds(50));
                Exception e = Within10s(() => c.Wait("k"));
                Check.That(IsReadTimeout(e) && e.Message.StartsWith("unlock", StringComparison.Ordinal),
                    "wait: " + (e == null ? "no exception" : e.Message));
            }
        }

        [Test]
        static void ALockHasNoReadTimeout()
        {
            using (var grant = new ManualResetEventSlim(false))
            using (var server = new FakeServer(1, action => FakeServer.Reply.Answer, Protocol.AnswerOk, grant))
            {
                try
                {
                    var c = new LockingCenterClient(server.Address, "s", readTimeout: TimeSpan.FromMilliseconds(10));
                    Task locking = c.LockAsync("k");
                    server.WaitRequests(1);
                    // Fifty read timeouts pass without an answer.
                    bool early = ((IAsyncResult)locking).AsyncWaitHandle.WaitOne(TimeSpan.FromMilliseconds(500));
                    Check.That(!early, "lock returned before its grant: " + locking.Exception?.GetBaseException().Message);
                    grant.Set();
                    Check.That(Within10s(() => locking.GetAwaiter().GetResult()) == null, "lock after its grant failed");
                }
                finally
                {
                    grant.Set(); // the server's thread must not wait for it at Dispose
                }
            }
        }

        [Test]
        static void Addresses()
        {
            foreach (string ok in new[] { "localhost:22119", "127.0.0.1:1", "[::1]:22119", ":22119" })
            {
                Check.That(new LockingCenterClient(ok).Address == ok, ok);
            }
            foreach (string bad in new[] { "localhost", "localhost:", "localhost:0", "localhost:65536", "localhost:12x",
                                           "::1:22119", "[::1:22119", "localhost:+80", "localhost:099999" })
            {
                Check.Throws<ArgumentException>(() => new LockingCenterClient(bad), bad);
            }
            Check.That(new LockingCenterClient("h:1").ConnectTimeout == LockingCenterClient.DefaultConnectTimeout, "default connect timeout");
            Check.That(new LockingCenterClient("h:1").ReadTimeout == LockingCenterClient.DefaultReadTimeout, "default read timeout");
            Check.That(new LockingCenterClient("h:1", "s").Source.SequenceEqual(new[] { (byte)'s' }), "source");
        }
    }
}
