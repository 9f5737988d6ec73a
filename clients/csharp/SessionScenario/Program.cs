using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace LockingCenter.SessionScenario
{
    /// <summary>
    /// The session scenarios of clients/conformance/SESSIONS.md for the C#
    /// session client, in the contract's order:
    ///
    ///   mono SessionScenario.exe              every scenario
    ///   mono SessionScenario.exe s-resume     only those named
    ///   mono SessionScenario.exe hold ADDR TTL_MS DELAY_MS KEY...
    ///                                         (the child of s-kill-client: holds the keys, prints "ready", waits)
    ///
    /// Reads the harness's environment (LC_ADDR, LC_MANAGER_ADDR,
    /// LC_PROXY_ADDR, ...), prints "ok ID" or "FAIL ID: reason" per scenario,
    /// chatter on standard error. Exits 1 when a scenario failed.
    /// </summary>
    static class Program
    {
        const string Prefix = "csharp/";
        static readonly TimeSpan Limit = TimeSpan.FromSeconds(25);
        static readonly List<Session> Opened = new List<Session>();

        sealed class ScenarioFailure : Exception
        {
            public ScenarioFailure(string message) : base(message) { }
        }

        static void Expect(bool condition, string message)
        {
            if (!condition) throw new ScenarioFailure(message);
        }

        static void Log(string line) => Console.Error.WriteLine("# " + line);

        static string Env(string name)
        {
            string v = Environment.GetEnvironmentVariable(name);
            if (string.IsNullOrEmpty(v)) throw new ScenarioFailure(name + " not set");
            return v;
        }

        static int Main(string[] args)
        {
            if (args.Length > 0 && args[0] == "hold") return Hold(args).GetAwaiter().GetResult();
            var scenarios = new List<KeyValuePair<string, Func<Task>>>
            {
                Pair("s-acquire-release", AcquireRelease),
                Pair("s-try-busy", TryBusy),
                Pair("s-wait-bound", WaitBound),
                Pair("s-cancel", Cancel),
                Pair("s-stale-release", StaleRelease),
                Pair("s-lease-expiry", LeaseExpiry),
                Pair("s-kill-client", KillClient),
                Pair("s-resume", Resume),
                Pair("s-leader-stop", LeaderStop),
                Pair("s-leader-kill", LeaderKill),
                Pair("s-tls-token", TlsToken),
                Pair("s-modes", Modes),
                Pair("s-note", Note),
                Pair("s-big-token", BigToken),
                Pair("s-silent-server", SilentServer),
                Pair("s-fifo-mixed", FifoMixed),
            };
            foreach (string id in args)
            {
                if (scenarios.All(s => s.Key != id))
                {
                    Console.Error.WriteLine("unknown scenario " + id + "; known: " + string.Join(" ", scenarios.Select(s => s.Key)));
                    return 2;
                }
            }
            int failures = 0;
            foreach (var s in scenarios)
            {
                if (args.Length > 0 && !args.Contains(s.Key)) continue;
                var watch = Stopwatch.StartNew();
                try
                {
                    Task run = s.Value();
                    if (!run.Wait(Limit)) throw new ScenarioFailure("not done after " + Limit.TotalSeconds + " s");
                    Console.WriteLine("ok " + s.Key);
                }
                catch (Exception e)
                {
                    failures++;
                    if (e is AggregateException && e.InnerException != null) e = e.InnerException;
                    string why = e is ScenarioFailure ? e.Message : e.GetType().Name + ": " + e.Message;
                    Console.WriteLine("FAIL " + s.Key + ": " + why.Replace('\n', ' '));
                }
                Console.Out.Flush();
                CloseOpened();
                Log(s.Key + ": " + watch.ElapsedMilliseconds + " ms");
            }
            return failures == 0 ? 0 : 1;
        }

        static KeyValuePair<string, Func<Task>> Pair(string id, Func<Task> run) => new KeyValuePair<string, Func<Task>>(id, run);

        static void CloseOpened()
        {
            Session[] all;
            lock (Opened)
            {
                all = Opened.ToArray();
                Opened.Clear();
            }
            Task.WaitAll(all.Select(s => Task.WhenAny(Quiet(s.CloseAsync()), Task.Delay(2000))).ToArray());
        }

        static async Task Quiet(Task t)
        {
            try
            {
                await t;
            }
            catch (Exception)
            {
                // The scenario's own checks said what mattered.
            }
        }

        /// <summary>A session closed at the scenario's end whatever happens.</summary>
        static async Task<Session> Open(string addr, SessionOptions o = null)
        {
            o = o ?? new SessionOptions();
            o.Name = o.Name ?? "csharp-conformance";
            Session s = await Session.ConnectAsync(addr, o);
            lock (Opened) Opened.Add(s);
            return s;
        }

        /// <summary>Runs the probe with args; its standard output, or a failure with its standard error.</summary>
        static async Task<string> Probe(params string[] args)
        {
            var info = new ProcessStartInfo(Env("LC_PROBE"), string.Join(" ", args.Select(Quote)))
            {
                UseShellExecute = false,
                RedirectStandardOutput = true,
                RedirectStandardError = true,
            };
            using (Process p = Process.Start(info))
            {
                Task<string> output = p.StandardOutput.ReadToEndAsync();
                Task<string> errors = p.StandardError.ReadToEndAsync();
                bool exited = await Task.Run(() => p.WaitForExit(15000));
                if (!exited)
                {
                    p.Kill();
                    throw new ScenarioFailure("probe " + string.Join(" ", args) + ": no exit within 15 s");
                }
                p.WaitForExit();
                if (p.ExitCode != 0) throw new ScenarioFailure("probe " + string.Join(" ", args) + ": " + (await errors).Trim());
                return await output;
            }
        }

        static string Quote(string a) => "'" + a.Replace("'", "'\\''") + "'";

        static Task Waiters(string manager, string key, int n) => Probe("waiters", manager, key, n.ToString());

        struct HolderLine
        {
            public string Token, Session, Note;
        }

        /// <summary>The holders of key as "probe holders" prints them, the token exactly as printed.</summary>
        static async Task<List<HolderLine>> Holders(string manager, string key)
        {
            string text = await Probe("holders", manager, key);
            var list = new List<HolderLine>();
            foreach (string line in text.Split('\n'))
            {
                if (line.Length == 0) continue;
                string[] parts = line.Split(new[] { ' ' }, 3);
                list.Add(new HolderLine { Token = parts[0], Session = parts.Length > 1 ? parts[1] : "", Note = parts.Length > 2 ? parts[2] : "" });
            }
            return list;
        }

        static string Tokens(List<HolderLine> h) => "[" + string.Join(" ", h.Select(x => x.Token)) + "]";

        static async Task<Exception> Outcome(Task t)
        {
            try
            {
                await t;
                return null;
            }
            catch (Exception e)
            {
                return e;
            }
        }

        static async Task<int> Leader(string managers) => int.Parse((await Probe("leader", managers)).Trim());

        // --- the scenarios ---

        /// <summary>Two sessions of LC_ADDR, the first holding a key.</summary>
        sealed class HeldByOne
        {
            public Session Holder, Other;
            public LockHandle Lock;

            public static async Task<HeldByOne> Open(string key)
            {
                var h = new HeldByOne { Holder = await Program.Open(Env("LC_ADDR")), Other = await Program.Open(Env("LC_ADDR")) };
                h.Lock = await h.Holder.AcquireAsync(key);
                return h;
            }
        }

        static async Task AcquireRelease()
        {
            string key = Prefix + "s-acquire-release";
            Session s = await Open(Env("LC_ADDR"));
            LockHandle a = await s.AcquireAsync(key);
            await a.ReleaseAsync();
            LockHandle b = await s.AcquireAsync(key);
            Expect(b.FencingToken > a.FencingToken, "second token " + b.FencingToken + " not above the first " + a.FencingToken);
            await a.ReleaseAsync(); // again: no error
            await b.ReleaseAsync();
            b.Dispose();
        }

        static async Task TryBusy()
        {
            string key = Prefix + "s-try-busy";
            HeldByOne held = await HeldByOne.Open(key);
            Session other = held.Other;
            LockHandle lk = held.Lock;
            LockHandle got = await other.TryAcquireAsync(key);
            Expect(got == null, "try of a held key gave " + got + ", want null");
            await lk.ReleaseAsync();
            LockHandle now = await other.TryAcquireAsync(key);
            Expect(now != null, "try of a free key gave null");
            await now.ReleaseAsync();
        }

        static async Task WaitBound()
        {
            string key = Prefix + "s-wait-bound";
            HeldByOne held = await HeldByOne.Open(key);
            Session other = held.Other;
            LockHandle lk = held.Lock;
            var watch = Stopwatch.StartNew();
            Exception e = await Outcome(other.AcquireAsync(key, TimeSpan.FromMilliseconds(500)));
            long took = watch.ElapsedMilliseconds;
            var te = e as SessionTimeoutException;
            Expect(te != null && te.ServerCode == "timeout", "wait of 500 ms: " + e + ", want SessionTimeoutException (timeout)");
            Expect(took >= 450 && took < 3000, "the wait ended after " + took + " ms");
            await Waiters(Env("LC_MANAGER_ADDR"), key, 0);
            await lk.ReleaseAsync();
        }

        static async Task Cancel()
        {
            string key = Prefix + "s-cancel";
            string manager = Env("LC_MANAGER_ADDR");
            Session holder = await Open(Env("LC_ADDR"));
            Session a = await Open(Env("LC_ADDR"));
            Session b = await Open(Env("LC_ADDR"));
            LockHandle lk = await holder.AcquireAsync(key);
            var cts = new CancellationTokenSource();
            Task<LockHandle> abandoned = a.AcquireAsync(key, null, cts.Token);
            await Waiters(manager, key, 1);
            cts.Cancel();
            var watch = Stopwatch.StartNew();
            Exception e = await Outcome(abandoned);
            Expect(e is OperationCanceledException, "the abandoned acquire gave " + e + ", want OperationCanceledException");
            await Waiters(manager, key, 0);
            long took = watch.ElapsedMilliseconds;
            Expect(took < 1000, "the queue emptied " + took + " ms after the cancel, want under 1000");
            Task<LockHandle> next = b.AcquireAsync(key);
            await Waiters(manager, key, 1);
            await lk.ReleaseAsync();
            LockHandle got = await next;
            Expect(got.FencingToken > lk.FencingToken, "the next waiter got no later token");
            await got.ReleaseAsync();
        }

        static async Task StaleRelease()
        {
            string key = Prefix + "s-stale-release";
            HeldByOne held = await HeldByOne.Open(key);
            Session holder = held.Holder, other = held.Other;
            LockHandle lk = held.Lock;
            Exception e = await Outcome(other.ReleaseAsync(key, lk.FencingToken));
            Expect(e is StaleTokenException && ((StaleTokenException)e).ServerCode == "stale_token",
                "release of another session's token: " + e + ", want StaleTokenException");
            Exception e2 = await Outcome(holder.ReleaseAsync(key, lk.FencingToken + 1));
            Expect(e2 is StaleTokenException, "release of a token never granted: " + e2 + ", want StaleTokenException");
            List<HolderLine> h = await Holders(Env("LC_MANAGER_ADDR"), key);
            Expect(h.Count == 1 && h[0].Token == lk.FencingToken.ToString(), "holders after the stale releases: " + Tokens(h) + ", want " + lk.FencingToken);
            Expect(lk.IsHeld, "the holder no longer counts its lock held");
            await lk.ReleaseAsync();
        }

        static async Task LeaseExpiry()
        {
            string key = Prefix + "s-lease-expiry";
            Session s = await Open(Env("LC_ADDR"));
            Session other = await Open(Env("LC_ADDR"));
            var watch = Stopwatch.StartNew();
            LockHandle lk = await s.AcquireAsync(key, null, default(CancellationToken),
                new AcquireOptions { Lease = TimeSpan.FromMilliseconds(500), LockDelay = TimeSpan.FromSeconds(2) });
            var lost = new TaskCompletionSource<bool>();
            using (lk.HandleLostToken.Register(() => lost.TrySetResult(true)))
            {
                await Task.WhenAny(lost.Task, Task.Delay(2000));
            }
            Expect(lk.HandleLostToken.IsCancellationRequested, "the lock was not reported lost within 2 s");
            var lostAt = Stopwatch.StartNew();
            Log("s-lease-expiry: lost after " + watch.ElapsedMilliseconds + " ms");
            Expect(lk.LostReason == LostReason.LeaseExpired, "lost with " + lk.LostReason + ", want LeaseExpired");
            LockHandle early = await other.TryAcquireAsync(key);
            Expect(early == null, "a try at the loss got the key: no lock-delay");
            LockHandle got = await other.AcquireAsync(key, TimeSpan.FromSeconds(5));
            Log("s-lease-expiry: granted " + lostAt.ElapsedMilliseconds + " ms after the loss");
            Expect(lostAt.ElapsedMilliseconds < 5000, "granted " + lostAt.ElapsedMilliseconds + " ms after the loss");
            await got.ReleaseAsync();
            Exception e = await Outcome(lk.ReleaseAsync());
            Expect(e is LockLostException && ((LockLostException)e).Reason == LostReason.LeaseExpired,
                "release of the lost lock gave " + e + ", want its LockLostException");
        }

        /// <summary>The child of s-kill-client: holds keys in a session of TTL ttl ms, lock-delay delay ms, prints "ready", waits to be killed.</summary>
        static async Task<int> Hold(string[] args)
        {
            var s = await Session.ConnectAsync(args[1], new SessionOptions { Name = "csharp-holder", Ttl = TimeSpan.FromMilliseconds(int.Parse(args[2])) });
            var o = new AcquireOptions { LockDelay = TimeSpan.FromMilliseconds(int.Parse(args[3])) };
            foreach (string key in args.Skip(4)) await s.AcquireAsync(key, null, default(CancellationToken), o);
            Console.WriteLine("ready");
            Console.Out.Flush();
            await Task.Delay(Timeout.Infinite);
            return 0;
        }

        static async Task KillClient()
        {
            string addr = Env("LC_ADDR");
            string[] keys = { Prefix + "s-kill-client-1", Prefix + "s-kill-client-2", Prefix + "s-kill-client-3" };
            string self = typeof(Program).Assembly.Location;
            var info = new ProcessStartInfo("mono", Quote(self) + " hold " + addr + " 2000 1000 " + string.Join(" ", keys))
            {
                UseShellExecute = false,
                RedirectStandardOutput = true,
            };
            Session s = await Open(addr);
            using (Process child = Process.Start(info))
            {
                try
                {
                    Task<string> line = child.StandardOutput.ReadLineAsync();
                    Expect(await Task.WhenAny(line, Task.Delay(10000)) == line, "the child said nothing within 10 s");
                    Expect(line.Result == "ready", "the child said " + line.Result);
                }
                finally
                {
                    child.Kill(); // SIGKILL
                }
                child.WaitForExit();
            }
            var killed = Stopwatch.StartNew();
            var freeAt = new Dictionary<string, long>();
            bool heldAt1s = true;
            while (freeAt.Count < keys.Length && killed.ElapsedMilliseconds < 5000)
            {
                foreach (string key in keys)
                {
                    if (freeAt.ContainsKey(key)) continue;
                    LockHandle got = await s.TryAcquireAsync(key);
                    if (got == null) continue;
                    freeAt[key] = killed.ElapsedMilliseconds;
                    await got.ReleaseAsync();
                }
                if (killed.ElapsedMilliseconds < 1000 && freeAt.Count > 0) heldAt1s = false;
                await Task.Delay(25);
            }
            Log("s-kill-client: free after " + string.Join(", ", freeAt.Values.Select(t => t + " ms")) + " (TTL 2000 ms + lock-delay 1000 ms)");
            Expect(heldAt1s, "a key was free within 1 s of the kill");
            Expect(freeAt.Count == keys.Length, "only " + freeAt.Count + " of " + keys.Length + " keys free 5 s after the kill");
        }

        static async Task Resume()
        {
            string keyA = Prefix + "s-resume-a", keyB = Prefix + "s-resume-b";
            string manager = Env("LC_MANAGER_ADDR");
            Session s = await Open(Env("LC_PROXY_ADDR"), new SessionOptions { Ttl = TimeSpan.FromSeconds(5) });
            Session other = await Open(Env("LC_ADDR"));
            LockHandle a = await s.AcquireAsync(keyA);
            LockHandle b = await other.AcquireAsync(keyB);
            Task<LockHandle> parked = s.AcquireAsync(keyB);
            await Waiters(manager, keyB, 1);
            int suspended = 0, resumed = 0;
            s.StateChanged += (o, state) =>
            {
                if (state == SessionState.Suspended) Interlocked.Increment(ref suspended);
                if (state == SessionState.Connected) Interlocked.Increment(ref resumed);
            };
            await Probe("cut", Env("LC_PROXY_CTL"));
            await b.ReleaseAsync();
            Expect(await Task.WhenAny(parked, Task.Delay(5000)) == parked, "the parked acquire was not granted within 5 s of the cut");
            LockHandle got = await parked;
            Expect(suspended >= 1 && resumed >= 1, "suspended " + suspended + ", resumed " + resumed + " times: the connection was not cut and resumed");
            Expect(a.IsHeld, "the lock of A was lost: " + a.LossException);
            List<HolderLine> h = await Holders(manager, keyA);
            Expect(h.Count == 1 && h[0].Token == a.FencingToken.ToString() && h[0].Session == s.Id.ToString(),
                "holders of A: " + string.Join(",", h.Select(x => x.Token + "/" + x.Session)) + ", want " + a.FencingToken + "/" + s.Id);
            await got.ReleaseAsync();
            await a.ReleaseAsync();
        }

        static async Task LeaderStop()
        {
            string key = Prefix + "s-leader-stop";
            Session s = await Open(Env("LC_CLUSTER"), new SessionOptions { Ttl = TimeSpan.FromSeconds(3) });
            LockHandle lk = await s.AcquireAsync(key);
            string stopped = (await Probe("signal-leader", "STOP")).Trim();
            Log("s-leader-stop: stopped node " + stopped);
            try
            {
                await Task.Delay(6000);
            }
            finally
            {
                await Probe("signal-leader", "CONT");
            }
            Expect(s.State != SessionState.Ended, "the session ended: " + s.EndReason);
            Expect(lk.IsHeld, "the lock was lost: " + lk.LossException);
            string[] managers = Env("LC_CLUSTER_MANAGER").Split(',');
            int leader = await Leader(Env("LC_CLUSTER_MANAGER"));
            List<HolderLine> h = await Holders(managers[leader], key);
            Expect(h.Count == 1 && h[0].Token == lk.FencingToken.ToString(), "holders: " + Tokens(h) + ", want " + lk.FencingToken);
            await lk.ReleaseAsync();
        }

        static async Task LeaderKill()
        {
            string[] managers = Env("LC_CLUSTER_MANAGER").Split(',');
            string key = Prefix + "s-leader-kill", key2 = Prefix + "s-leader-kill-2";
            Session s = await Open(Env("LC_CLUSTER"));
            Session other = await Open(Env("LC_CLUSTER"));
            LockHandle lk = await s.AcquireAsync(key);
            LockHandle held = await other.AcquireAsync(key2);
            Task<LockHandle> parked = s.AcquireAsync(key2);
            int leader = await Leader(Env("LC_CLUSTER_MANAGER"));
            await Waiters(managers[leader], key2, 1);
            int killed = int.Parse((await Probe("signal-leader", "KILL")).Trim());
            Log("s-leader-kill: killed node " + killed);
            var watch = Stopwatch.StartNew();
            await held.ReleaseAsync(); // once the other session is at the new leader
            Expect(await Task.WhenAny(parked, Task.Delay(15000)) == parked, "the parked acquire was not granted within 15 s of the kill");
            LockHandle got = await parked;
            Log("s-leader-kill: the parked acquire granted " + watch.ElapsedMilliseconds + " ms after the kill");
            Expect(lk.IsHeld, "the held lock was lost: " + lk.LossException);
            string live = string.Join(",", managers.Where((m, i) => i != killed));
            int now = await Leader(live);
            List<HolderLine> h = await Holders(live.Split(',')[now], key);
            Expect(h.Count == 1 && h[0].Token == lk.FencingToken.ToString(), "holders at the new leader: " + Tokens(h) + ", want " + lk.FencingToken);
            await got.ReleaseAsync();
            await lk.ReleaseAsync();
        }

        static async Task TlsToken()
        {
            string addr = Env("LC_TLS_ADDR");
            Env("LC_CA_FILE");
            Env("LC_TOKEN");
            // LC_TOKEN and LC_CA_FILE as any program of the client reads them.
            SessionOptions o = SessionOptions.FromEnvironment();
            o.Tls.ServerName = "localhost";
            Session s = await Open(addr, o);
            LockHandle lk = await s.AcquireAsync(Prefix + "s-tls-token");
            await lk.ReleaseAsync();
            SessionOptions wrong = SessionOptions.FromEnvironment();
            wrong.Tls.ServerName = "localhost";
            wrong.Token += "-wrong";
            Exception e = await Outcome(Open(addr, wrong));
            Expect(e is UnauthenticatedException, "a wrong token: " + e + ", want UnauthenticatedException");
            Exception outside = await Outcome(s.AcquireAsync("outside/s-tls-token"));
            Expect(outside is ForbiddenException, "a key outside csharp/: " + outside + ", want ForbiddenException");
        }

        static async Task Modes()
        {
            string addr = Env("LC_ADDR"), manager = Env("LC_MANAGER_ADDR");
            Session s1 = await Open(addr), s2 = await Open(addr), s3 = await Open(addr);
            var none = default(CancellationToken);
            // Shared: two holders at once.
            string shared = Prefix + "s-modes-shared";
            var sharedOptions = new AcquireOptions { Shared = true };
            LockHandle r1 = await s1.AcquireAsync(shared, null, none, sharedOptions);
            LockHandle r2 = await s2.TryAcquireAsync(shared, TimeSpan.Zero, none, sharedOptions);
            Expect(r2 != null && r2.FencingToken != r1.FencingToken, "a second shared holder was not let in");
            Expect(await s3.TryAcquireAsync(shared) == null, "an exclusive try beside shared holders was not busy");
            await r1.ReleaseAsync();
            await r2.ReleaseAsync();
            // A semaphore of 2.
            string pool = Prefix + "s-modes-pool";
            var two = new AcquireOptions { Limit = 2 };
            LockHandle p1 = await s1.AcquireAsync(pool, null, none, two);
            LockHandle p2 = await s2.TryAcquireAsync(pool, TimeSpan.Zero, none, two);
            Expect(p2 != null, "the second place of a semaphore of 2 was busy");
            Expect(await s3.TryAcquireAsync(pool, TimeSpan.Zero, none, two) == null, "a third try of a semaphore of 2 was not busy");
            await p1.ReleaseAsync();
            await p2.ReleaseAsync();
            // Reentrant, same owner: same token, counted up.
            string re = Prefix + "s-modes-reentrant";
            var job = new AcquireOptions { Reentrant = true, Owner = "job" };
            LockHandle e1 = await s1.AcquireAsync(re, null, none, job);
            LockHandle e2 = await s1.AcquireAsync(re, null, none, job);
            Expect(e2.FencingToken == e1.FencingToken && e2.Count == 2,
                "reentrant acquire: token " + e2.FencingToken + " count " + e2.Count + ", want " + e1.FencingToken + " count 2");
            await e2.ReleaseAsync();
            Expect(await s2.TryAcquireAsync(re) == null, "the key was let go after one of two releases");
            await e1.ReleaseAsync();
            // Priority: the higher waiter first.
            string pri = Prefix + "s-modes-priority";
            LockHandle hold = await s1.AcquireAsync(pri);
            var order = new List<string>();
            Func<Task<LockHandle>, string, Task<LockHandle>> note = async (t, what) =>
            {
                LockHandle l = await t;
                lock (order) order.Add(what);
                return l;
            };
            Task<LockHandle> low = note(s2.AcquireAsync(pri, null, none, new AcquireOptions { Priority = 1 }), "low");
            await Waiters(manager, pri, 1);
            Task<LockHandle> high = note(s3.AcquireAsync(pri, null, none, new AcquireOptions { Priority = 5 }), "high");
            await Waiters(manager, pri, 2);
            await hold.ReleaseAsync();
            await (await high).ReleaseAsync();
            await (await low).ReleaseAsync();
            Expect(string.Join(",", order) == "high,low", "grant order " + string.Join(",", order) + ", want high,low");
        }

        static async Task Note()
        {
            string key = Prefix + "s-note";
            const string text = "nightly report · run 42 from csharp";
            Session s = await Open(Env("LC_ADDR"));
            LockHandle lk = await s.AcquireAsync(key, null, default(CancellationToken), new AcquireOptions { Note = text });
            List<HolderLine> h = await Holders(Env("LC_MANAGER_ADDR"), key);
            Expect(h.Count == 1 && h[0].Token == lk.FencingToken.ToString() && h[0].Note == text,
                "holders: " + string.Join(",", h.Select(x => x.Token + " " + x.Note)));
            await lk.ReleaseAsync();
        }

        static async Task BigToken()
        {
            string key = Prefix + "s-big-token";
            Session s = await Open(Env("LC_BIG_ADDR"));
            LockHandle lk = await s.AcquireAsync(key);
            Expect(lk.FencingToken > (ulong)1 << 63, "token " + lk.FencingToken + ", want above 2^63");
            List<HolderLine> h = await Holders(Env("LC_BIG_MANAGER"), key);
            Expect(h.Count == 1 && h[0].Token == lk.FencingToken.ToString(), "probe holders printed " + Tokens(h) + ", want " + lk.FencingToken);
            KeyInfo info = await s.DescribeAsync(key);
            Expect(info.Holders.Count == 1 && info.Holders[0].Token == lk.FencingToken, "DESCRIBE gave " + string.Join(" ", info.Holders.Select(x => x.Token)));
            await lk.ReleaseAsync();
        }

        static async Task SilentServer()
        {
            string addr = Env("LC_SILENT_ADDR");
            var watch = Stopwatch.StartNew();
            Task<Session> connect = Session.ConnectAsync(addr, new SessionOptions { Name = "csharp-silent" });
            Expect(await Task.WhenAny(connect, Task.Delay(12000)) == connect, "connect to a silent server did not return within 12 s");
            long took = watch.ElapsedMilliseconds;
            Exception e = await Outcome(connect);
            Expect(e is SessionTimeoutException, "connect to a silent server: " + e + ", want SessionTimeoutException");
            Expect(took < 10000, "connect to a silent server failed after " + took + " ms, want under 10 s");
            Log("s-silent-server: SessionTimeoutException after " + took + " ms");
        }

        static async Task FifoMixed()
        {
            string addr = Env("LC_ADDR"), manager = Env("LC_MANAGER_ADDR");
            string key = Prefix + "s-fifo-mixed";
            Session holder = await Open(addr);
            LockHandle lk = await holder.AcquireAsync(key);
            var order = new List<int>();
            var done = new List<Task>();
            var children = new List<Process>();
            try
            {
                for (int i = 1; i <= 5; i++)
                {
                    int n = i;
                    if (i % 2 == 1)
                    {
                        Session s = await Open(addr);
                        done.Add(Task.Run(async () =>
                        {
                            LockHandle l = await s.AcquireAsync(key);
                            lock (order) order.Add(n);
                            await l.ReleaseAsync();
                        }));
                    }
                    else
                    {
                        var info = new ProcessStartInfo(Env("LC_PROBE"), "session-lock " + addr + " " + Quote(key))
                        {
                            UseShellExecute = false,
                            RedirectStandardInput = true,
                            RedirectStandardOutput = true,
                        };
                        Process child = Process.Start(info);
                        children.Add(child);
                        done.Add(Task.Run(async () =>
                        {
                            for (;;)
                            {
                                string line = await child.StandardOutput.ReadLineAsync();
                                if (line == null) throw new ScenarioFailure("probe session-lock ended before its grant");
                                if (!line.StartsWith("granted ")) continue;
                                lock (order) order.Add(n);
                                child.StandardInput.Close();
                                break;
                            }
                            await Task.Run(() => child.WaitForExit());
                            if (child.ExitCode != 0) throw new ScenarioFailure("probe session-lock exited " + child.ExitCode);
                        }));
                    }
                    await Waiters(manager, key, i);
                }
                await lk.ReleaseAsync();
                Task all = Task.WhenAll(done);
                Expect(await Task.WhenAny(all, Task.Delay(15000)) == all, "granted so far: " + string.Join(",", order));
                await all;
            }
            finally
            {
                foreach (Process c in children)
                {
                    if (!c.HasExited) c.Kill();
                    c.Dispose();
                }
            }
            Expect(string.Join(",", order) == "1,2,3,4,5", "grant order " + string.Join(",", order) + ", want 1,2,3,4,5");
        }
    }
}
