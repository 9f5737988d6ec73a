using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Text.RegularExpressions;
using System.Threading;
using System.Threading.Tasks;

namespace LockingCenter.Tests
{
    /// <summary>
    /// The lcd the live tests use: LC_ADDR when the environment names one (the
    /// conformance harness's), else one started from the binary LC_LCD names,
    /// on 127.0.0.1 and a port of its choosing, stopped when the tests end.
    /// Without either the live tests are skipped.
    /// </summary>
    static class LiveLcd
    {
        static string address;
        static Process started;

        public static string Address
        {
            get
            {
                if (address != null) return address;
                string given = Environment.GetEnvironmentVariable("LC_ADDR");
                if (!string.IsNullOrEmpty(given)) return address = given;
                string binary = Environment.GetEnvironmentVariable("LC_LCD");
                if (string.IsNullOrEmpty(binary)) throw new SkipTest("no lcd: set LC_ADDR or LC_LCD");
                var info = new ProcessStartInfo(binary) { UseShellExecute = false, RedirectStandardError = true };
                info.EnvironmentVariables["BIND_ADDRESS"] = "127.0.0.1:0";
                info.EnvironmentVariables["HTTP_ADDRESS"] = "";
                info.EnvironmentVariables["LOG_FORMAT"] = "text";
                info.EnvironmentVariables["SESSION_TTL_MIN"] = "1s";
                started = Process.Start(info);
                AppDomain.CurrentDomain.ProcessExit += (o, e) => Stop();
                for (string line = started.StandardError.ReadLine(); line != null; line = started.StandardError.ReadLine())
                {
                    Match m = Regex.Match(line, @"msg=""lcd started"".* mutex=(\S+)");
                    if (!m.Success) continue;
                    address = m.Groups[1].Value;
                    Process p = started;
                    new Thread(() =>
                    {
                        while (p.StandardError.ReadLine() != null)
                        {
                        }
                    }) { IsBackground = true }.Start();
                    return address;
                }
                throw new TestFailure("lcd at " + binary + " exited before it started");
            }
        }

        public static void Stop()
        {
            if (started == null || started.HasExited) return;
            started.Kill();
            started.WaitForExit();
        }
    }

    /// <summary>A test that cannot run here (no server); the runner reports it and counts it neither way.</summary>
    sealed class SkipTest : Exception
    {
        public SkipTest(string message) : base(message) { }
    }

    static class SessionTests
    {
        static string Key(string name) => "csharp/unit/" + name;

        static async Task<T> Within<T>(Task<T> t, string what)
        {
            if (await Task.WhenAny(t, Task.Delay(15000)) != t) throw new TestFailure(what + ": not done within 15 s");
            return await t;
        }

        static async Task Within(Task t, string what)
        {
            if (await Task.WhenAny(t, Task.Delay(15000)) != t) throw new TestFailure(what + ": not done within 15 s");
            await t;
        }

        /// <summary>64 tasks on one session contend for 8 keys: each key grants in the order its requests were sent, and nothing is left waiting.</summary>
        [Test]
        static async Task SixtyFourTasksEightKeysFifo()
        {
            string address = LiveLcd.Address;
            const int tasks = 64, keys = 8, rounds = 5;
            using (Session holder = await Session.ConnectAsync(address))
            using (Session session = await Session.ConnectAsync(address))
            {
                var held = new List<LockHandle>();
                for (int k = 0; k < keys; k++) held.Add(await holder.AcquireAsync(Key("fifo-" + k)));
                var grants = new List<int>[keys];
                for (int k = 0; k < keys; k++) grants[k] = new List<int>();
                var acquires = new Task<LockHandle>[tasks];
                // Sent in this order on the session's one connection, so queued in it.
                for (int i = 0; i < tasks; i++) acquires[i] = session.AcquireAsync(Key("fifo-" + i % keys));
                for (int k = 0; k < keys; k++)
                {
                    // DESCRIBE on the same connection comes after the acquires.
                    KeyInfo info = await session.DescribeAsync(Key("fifo-" + k));
                    Check.That(info.Queue == tasks / keys, "key " + k + ": " + info.Queue + " waiting, want " + tasks / keys);
                }
                Task[] work = Enumerable.Range(0, tasks).Select(i => Task.Run(async () =>
                {
                    LockHandle lk = await acquires[i];
                    lock (grants) grants[i % keys].Add(i);
                    await lk.ReleaseAsync();
                    // Then free-for-all rounds: every acquire is granted in the end.
                    for (int r = 0; r < rounds; r++)
                    {
                        LockHandle again = await session.AcquireAsync(Key("fifo-" + (i + r) % keys));
                        await again.ReleaseAsync();
                    }
                })).ToArray();
                foreach (LockHandle h in held) await h.ReleaseAsync();
                await Within(Task.WhenAll(work), "64 tasks");
                for (int k = 0; k < keys; k++)
                {
                    List<int> order = grants[k];
                    Check.That(order.SequenceEqual(order.OrderBy(x => x)) && order.Count == tasks / keys,
                        "key " + k + " granted in the order " + string.Join(",", order));
                    KeyInfo info = await session.DescribeAsync(Key("fifo-" + k));
                    Check.That(info.Queue == 0 && info.Holders.Count == 0, "key " + k + " left with " + info.Queue + " waiting, " + info.Holders.Count + " holders");
                }
            }
        }

        [Test]
        static async Task CancelledAcquireLeavesTheQueue()
        {
            string address = LiveLcd.Address;
            using (Session holder = await Session.ConnectAsync(address))
            using (Session session = await Session.ConnectAsync(address))
            {
                LockHandle lk = await holder.AcquireAsync(Key("cancel"));
                var cts = new CancellationTokenSource();
                Task<LockHandle> waiting = session.AcquireAsync(Key("cancel"), null, cts.Token);
                Check.That((await session.DescribeAsync(Key("cancel"))).Queue == 1, "the acquire did not park");
                cts.Cancel();
                try
                {
                    await Within(waiting, "the cancelled acquire");
                    throw new TestFailure("the cancelled acquire was granted");
                }
                catch (OperationCanceledException e)
                {
                    Check.That(e.CancellationToken == cts.Token, "cancelled with another token");
                }
                // The CANCEL went before this DESCRIBE on the same connection.
                Check.That((await session.DescribeAsync(Key("cancel"))).Queue == 0, "the cancelled acquire is still queued");
                await lk.ReleaseAsync();
            }
        }

        [Test]
        static async Task BusyIsNullAndReleaseIsIdempotent()
        {
            string address = LiveLcd.Address;
            using (Session a = await Session.ConnectAsync(address))
            using (Session b = await Session.ConnectAsync(address))
            {
                LockHandle lk = await a.AcquireAsync(Key("busy"));
                Check.That(await b.TryAcquireAsync(Key("busy")) == null, "a try of a held key was not null");
                Check.That(b.TryAcquire(Key("busy")) == null, "a blocking try of a held key was not null");
                SessionLock named = b.CreateLock(Key("busy"));
                Check.That(named.Name == Key("busy") && await named.TryAcquireAsync() == null, "a try of a held key through CreateLock was not null");
                Check.That(await b.TryAcquireAsync(Key("busy"), TimeSpan.FromMilliseconds(100)) == null, "a bounded try of a held key was not null");
                var e = await Throws<SessionTimeoutException>(b.AcquireAsync(Key("busy"), TimeSpan.FromMilliseconds(100)), "a bounded acquire");
                Check.That(e.ServerCode == "timeout", "bounded acquire: " + e.ServerCode);
                await lk.ReleaseAsync();
                await lk.ReleaseAsync();
                lk.Dispose();
                Check.That(lk.State == LockState.Released && !lk.HandleLostToken.IsCancellationRequested, "a released lock: " + lk.State);
                LockHandle next = await named.TryAcquireAsync();
                Check.That(next != null && next.FencingToken > lk.FencingToken, "the next holder's token is not above");
                await next.ReleaseAsync();
            }
        }

        [Test]
        static async Task ResetIsLostWithItsReason()
        {
            string address = LiveLcd.Address;
            using (Session s = await Session.ConnectAsync(address))
            {
                LockHandle lk = await s.AcquireAsync(Key("reset"));
                var lost = new TaskCompletionSource<bool>();
                lk.HandleLostToken.Register(() => lost.TrySetResult(true));
                await new LockingCenterClient(address).ResetByKeyAsync(Key("reset"));
                await Within(lost.Task, "the loss");
                Check.That(lk.LostReason == LostReason.Reset && lk.State == LockState.Lost, "lost with " + lk.LostReason);
                var e = await Throws<LockLostException>(lk.ReleaseAsync(), "release of a lost lock");
                Check.That(e.Reason == LostReason.Reset && e.Token == lk.FencingToken, "release gave " + e.Reason);
                lk.Dispose(); // no error: the loss was told
            }
        }

        [Test]
        static async Task EveryExampleRuns()
        {
            string address = LiveLcd.Address;
            await SessionExamples.Basic(address);
            using (Session session = await Session.ConnectAsync(address))
            using (Session other = await Session.ConnectAsync(address))
            {
                Check.That(await SessionExamples.Try(session), "the try example found the key busy");
                LockHandle lk = await other.AcquireAsync("csharp/nightly-report");
                Check.That(!await SessionExamples.Try(session), "the try example got a held key");
                Check.That(!await SessionExamples.Cancel(session, TimeSpan.FromMilliseconds(200)), "the cancel example got a held key");
                await lk.ReleaseAsync();
                Check.That(await SessionExamples.Cancel(session, TimeSpan.FromSeconds(5)), "the cancel example gave up on a free key");
                Check.That(await SessionExamples.Lease(session, 3) == null, "the lease example lost its lock");
            }
            // With the harness's TLS server when there is one (its certificate names localhost), else in plain TCP.
            string tls = Environment.GetEnvironmentVariable("LC_TLS_ADDR");
            if (!string.IsNullOrEmpty(tls) && !string.IsNullOrEmpty(Environment.GetEnvironmentVariable("LC_CA_FILE")))
            {
                Check.That(await SessionExamples.FromEnvironment(tls.Replace("127.0.0.1", "localhost")) > 0, "the environment example got no token");
                return;
            }
            foreach (string name in new[] { "LC_TOKEN", "LC_CA_FILE", "LC_CERT_FILE", "LC_KEY_FILE", "LC_TLS" }) Environment.SetEnvironmentVariable(name, null);
            Check.That(await SessionExamples.FromEnvironment(address) > 0, "the environment example got no token");
        }

        /// <summary>Every region of SessionExample/Examples.cs is quoted in README.md as it is, so the README shows code that the test above runs.</summary>
        [Test]
        static void TheReadmeQuotesTheExamples()
        {
            string dir = Path.GetDirectoryName(Path.GetFullPath(SessionCodecTests.VectorsPath));
            string readme = File.ReadAllText(Path.Combine(dir, "..", "csharp", "README.md"));
            string examples = File.ReadAllText(Path.Combine(dir, "..", "csharp", "SessionExample", "Examples.cs"));
            MatchCollection regions = Regex.Matches(examples, @"// #region (\w+)\n(.*?)\n[ ]*// #endregion \1", RegexOptions.Singleline);
            Check.That(regions.Count >= 5, "only " + regions.Count + " example regions");
            foreach (Match m in regions)
            {
                string[] lines = m.Groups[2].Value.Split('\n');
                int indent = lines.Where(l => l.Trim().Length > 0).Min(l => l.Length - l.TrimStart().Length);
                string quoted = string.Join("\n", lines.Select(l => l.Length >= indent ? l.Substring(indent) : l.Trim()));
                Check.That(readme.Contains("```csharp\n" + quoted + "\n```"), "README.md does not quote the example " + m.Groups[1].Value + " as it is");
            }
        }

        static async Task<T> Throws<T>(Task t, string what) where T : Exception
        {
            try
            {
                await Within(t, what);
            }
            catch (T e)
            {
                return e;
            }
            catch (Exception e)
            {
                throw new TestFailure(what + ": threw " + e.GetType().Name + " (" + e.Message + "), want " + typeof(T).Name);
            }
            throw new TestFailure(what + ": did not throw " + typeof(T).Name);
        }

        // --- against the fake server ---

        static IEnumerable<byte[]> None => Enumerable.Empty<byte[]>();

        /// <summary>A connection that answers nothing for the keepalive and a margin is dead: the session leaves it and resumes.</summary>
        [Test]
        static async Task SilentConnectionIsLeftAndResumeRefusedEndsTheSession()
        {
            using (var fake = new FakeSessionServer((n, f) =>
            {
                if (n == 0 && f.Type == FrameType.Hello) return new[] { FakeSessionServer.Welcome(f.Id, 5000, 200) };
                if (n == 1 && f.Type == FrameType.Resume)
                {
                    return new[]
                    {
                        Wire.Encode(FrameType.Goodbye, f.Id, new List<Field> { Field.U8(Tag.Code, Code.UnknownSession), Field.Bytes(Tag.Message, new byte[0]) }),
                    };
                }
                return None; // silent after the WELCOME
            }))
            {
                Session s = await Session.ConnectAsync(fake.Address);
                var states = new List<SessionState>();
                var ended = new TaskCompletionSource<bool>();
                s.StateChanged += (o, st) =>
                {
                    lock (states) states.Add(st);
                };
                s.EndedToken.Register(() => ended.TrySetResult(true));
                Check.That(fake.Next().Value.Type == FrameType.Hello, "the first frame was no HELLO");
                KeyValuePair<int, Frame> ping = fake.Next();
                Check.That(ping.Key == 0 && ping.Value.Type == FrameType.Ping, "the idle session sent no PING");
                await Within(ended.Task, "the end of the session");
                Check.That(s.EndReason is SessionExpiredException, "ended with " + s.EndReason);
                lock (states) Check.That(states.Contains(SessionState.Suspended) && states.Last() == SessionState.Ended, "states " + string.Join(",", states));
                var after = await Throws<SessionExpiredException>(s.AcquireAsync("k"), "an acquire after the end");
                Check.That(after.ServerCode == "unknown_session", "the end's code " + after.ServerCode);
            }
        }

        /// <summary>A lock given up at the client's own end of its lease is released by token with lapse=1.</summary>
        [Test]
        static async Task LeaseGivenUpByTheClientSendsLapse()
        {
            const ulong token = 0x8000000000000001;
            using (var fake = new FakeSessionServer((n, f) =>
            {
                switch (f.Type)
                {
                    case FrameType.Hello: return new[] { FakeSessionServer.Welcome(f.Id, 10000, 3000) };
                    case FrameType.Acquire:
                        return new[]
                        {
                            Wire.Encode(FrameType.Granted, f.Id, new List<Field>
                            {
                                Field.Bytes(Tag.Key, f.Get(Tag.Key)), Field.U64(Tag.Token, token), Field.U32(Tag.Count, 1), Field.U32(Tag.LeftMs, 300),
                            }),
                        };
                    case FrameType.Release:
                    case FrameType.Close: return new[] { FakeSessionServer.Ok(f) };
                }
                return None;
            }))
            using (Session s = await Session.ConnectAsync(fake.Address))
            {
                LockHandle lk = await s.AcquireAsync("k", null, default(CancellationToken), new AcquireOptions { Lease = TimeSpan.FromMilliseconds(300) });
                Check.That(lk.FencingToken == token, "token " + lk.FencingToken);
                Check.That(lk.LeaseRemaining.HasValue && lk.LeaseRemaining.Value < TimeSpan.FromMilliseconds(300), "the client's lease is not shorter than the server's");
                Frame release = null;
                for (int i = 0; i < 5 && release == null; i++)
                {
                    Frame f = fake.Next().Value;
                    if (f.Type == FrameType.Release) release = f;
                }
                Check.That(release != null, "no RELEASE at the client's end of the lease");
                Check.That(release.U64(Tag.Token) == token && release.Num(Tag.Lapse) == 1, "the RELEASE has no lapse=1 with the token");
                Check.That(lk.LostReason == LostReason.LeaseExpired, "lost with " + lk.LostReason);
            }
        }

        /// <summary>
        /// After a drop, the WELCOME of the resume settles what was in flight:
        /// an acquire at or below applied that the server lists as held is
        /// granted with the listed token, one above applied is sent again with
        /// its id, and a lock held before the drop keeps its token.
        /// </summary>
        [Test]
        static async Task ResumeSettlesWhatWasInFlight()
        {
            var keyA = new byte[] { 0x61 };
            Func<byte[], ulong, ulong, byte[]> granted = (key, id, token) => Wire.Encode(FrameType.Granted, id, new List<Field>
            {
                Field.Bytes(Tag.Key, key), Field.U64(Tag.Token, token), Field.U32(Tag.Count, 1),
            });
            Func<byte[], ulong, ulong, byte[]> heldItem = (key, token, request) => Wire.Encode(0, 0, new List<Field>
            {
                Field.Bytes(Tag.Key, key), Field.U64(Tag.Token, token), Field.U64(Tag.Request, request), Field.U8(Tag.Mode, 0), Field.U32(Tag.Count, 1),
            }).Skip(13).ToArray();
            ulong firstAcquire = 0, lost = 0, resent = 0;
            using (var fake = new FakeSessionServer((n, f) =>
            {
                if (f.Type == FrameType.Hello) return new[] { FakeSessionServer.Welcome(f.Id, 10000, 3000) };
                if (n == 0 && f.Type == FrameType.Acquire && firstAcquire == 0)
                {
                    firstAcquire = f.Id;
                    return new[] { granted(f.Get(Tag.Key), f.Id, 70) };
                }
                if (n == 0 && f.Type == FrameType.Acquire && lost == 0)
                {
                    lost = f.Id; // applied, its answer lost with the connection
                    return None;
                }
                if (n == 0 && f.Type == FrameType.Acquire) return null; // never applied: the connection drops
                if (n == 1 && f.Type == FrameType.Resume)
                {
                    return new[]
                    {
                        Wire.Encode(FrameType.Welcome, f.Id, new List<Field>
                        {
                            Field.U64(Tag.Session, 1), Field.Bytes(Tag.Secret, new byte[16]), Field.U32(Tag.TtlMs, 10000),
                            Field.U32(Tag.KeepaliveMs, 3000), Field.Bytes(Tag.Server, new byte[] { 0x66 }), Field.U64(Tag.Applied, lost),
                            Field.Bytes(Tag.Held, heldItem(keyA, 70, firstAcquire)), Field.Bytes(Tag.Held, heldItem(new byte[] { 0x62 }, 71, lost)),
                        }),
                    };
                }
                if (n == 1 && f.Type == FrameType.Acquire)
                {
                    resent = f.Id;
                    return new[] { granted(f.Get(Tag.Key), f.Id, 72) };
                }
                return new[] { FakeSessionServer.Ok(f) };
            }))
            using (Session s = await Session.ConnectAsync(fake.Address))
            {
                LockHandle a = await s.AcquireAsync("a");
                Task<LockHandle> b = s.AcquireAsync("b");
                while (lost == 0) fake.Next();
                Task<LockHandle> c = s.AcquireAsync("c");
                LockHandle gotB = await Within(b, "the acquire whose answer was lost");
                LockHandle gotC = await Within(c, "the acquire sent again");
                Check.That(gotB.FencingToken == 71, "b granted with token " + gotB.FencingToken + ", want the listed 71");
                Check.That(gotC.FencingToken == 72 && resent > lost, "c granted with " + gotC.FencingToken + " at id " + resent);
                Check.That(a.IsHeld && a.FencingToken == 70, "the lock held before the drop: " + a.State);
            }
        }

        [Test]
        static void OptionsFromTheEnvironment()
        {
            SessionOptions o = SessionOptions.FromEnvironment(new Dictionary<string, string> { { "LC_TOKEN", "t0k" }, { "LC_SOURCE", "job-1" }, { "LC_TLS", "true" } });
            Check.That(o.Token == "t0k" && o.Name == "job-1" && o.Tls != null && o.Tls.CaFile == null, "LC_TOKEN, LC_SOURCE, LC_TLS");
            Check.That(SessionOptions.FromEnvironment(new Dictionary<string, string>()).Tls == null, "TLS without a variable asking for it");
            Check.Throws<NotSupportedException>(() => SessionOptions.FromEnvironment(new Dictionary<string, string> { { "LC_KEY_FILE", "k.pem" } }),
                "LC_KEY_FILE");
            Check.Throws<IOException>(() => SessionOptions.FromEnvironment(new Dictionary<string, string> { { "LC_CA_FILE", "/nonexistent/ca.crt" } }),
                "a CA file that is not there");
        }

        /// <summary>GOODBYE not_leader with a leader: the session follows it.</summary>
        [Test]
        static async Task NotLeaderIsFollowed()
        {
            using (var leader = new FakeSessionServer((n, f) => new[] { f.Type == FrameType.Hello ? FakeSessionServer.Welcome(f.Id, 10000, 3000) : FakeSessionServer.Ok(f) }))
            using (var follower = new FakeSessionServer((n, f) => new[]
            {
                Wire.Encode(FrameType.Goodbye, f.Id, new List<Field>
                {
                    Field.U8(Tag.Code, Code.NotLeader), Field.Bytes(Tag.Message, new byte[0]), Field.Bytes(Tag.Leader, System.Text.Encoding.ASCII.GetBytes(leader.Address)),
                }),
            }))
            {
                using (Session s = await Session.ConnectAsync(follower.Address))
                {
                    Check.That(s.State == SessionState.Connected && s.Server == "f", "not connected to the leader");
                }
            }
            FakeSessionServer.Script nobody = (n, f) => new[]
            {
                Wire.Encode(FrameType.Goodbye, f.Id, new List<Field> { Field.U8(Tag.Code, Code.NotLeader), Field.Bytes(Tag.Message, new byte[] { 0x6e }) }),
            };
            using (var a = new FakeSessionServer(nobody))
            using (var b = new FakeSessionServer(nobody))
            {
                var e = await Throws<NotLeaderException>(Session.ConnectAsync(a.Address + "," + b.Address), "a cluster whose nodes do not lead");
                Check.That(e.ServerMessage == "n", "the server's words: " + e.ServerMessage);
            }
        }
    }
}
