using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace LockingCenter.Scenario
{
    /// <summary>
    /// The live conformance scenario of the C# client. It runs against a
    /// server the harness started and prints one line per scenario,
    /// "ok ID" or "FAIL ID: reason".
    /// Environment: LC_ADDR (mutex port), LC_MANAGER_ADDR, LC_DEAD_ADDR
    /// (nothing listens there), LC_SILENT_ADDR (accepts, never answers),
    /// LC_PROBE (helper that inspects the server).
    /// </summary>
    static class Program
    {
        static string addr, managerAddr, deadAddr, silentAddr, probe;

        /// <summary>The read timeout of silent-server-times-out, and the bound each call must return well within.</summary>
        static readonly TimeSpan SilentTimeout = TimeSpan.FromSeconds(1);
        static readonly TimeSpan SilentBound = TimeSpan.FromSeconds(10);

        sealed class ScenarioFailure : Exception
        {
            public ScenarioFailure(string message) : base(message) { }
        }

        static void Fail(string why) => throw new ScenarioFailure(why);

        static int Main()
        {
            addr = Environment.GetEnvironmentVariable("LC_ADDR");
            managerAddr = Environment.GetEnvironmentVariable("LC_MANAGER_ADDR");
            deadAddr = Environment.GetEnvironmentVariable("LC_DEAD_ADDR");
            silentAddr = Environment.GetEnvironmentVariable("LC_SILENT_ADDR");
            probe = Environment.GetEnvironmentVariable("LC_PROBE");
            if (addr == null || managerAddr == null || deadAddr == null || silentAddr == null || probe == null)
            {
                Console.Error.WriteLine("scenario: LC_ADDR, LC_MANAGER_ADDR, LC_DEAD_ADDR, LC_SILENT_ADDR and LC_PROBE must be set");
                return 2;
            }
            var scenarios = new List<KeyValuePair<string, Action>>
            {
                Pair("lock-unlock", LockUnlock),
                Pair("trylock-busy", TryLockBusy),
                Pair("fifo-three", FifoThree),
                Pair("wait-holds-nothing", WaitHoldsNothing),
                Pair("reset-key", ResetKey),
                Pair("reset-source-withdraws", ResetSourceWithdraws),
                Pair("key-127-ok-128-refused", Key127Ok128Refused),
                Pair("binary-key", BinaryKey),
                Pair("refused-connection", RefusedConnection),
                Pair("cancel-withdraws", CancelWithdraws),
                Pair("silent-server-times-out", SilentServerTimesOut),
            };
            int failures = 0;
            foreach (var s in scenarios)
            {
                try
                {
                    s.Value();
                    Console.WriteLine("ok " + s.Key);
                }
                catch (Exception e)
                {
                    failures++;
                    string why = e is ScenarioFailure ? e.Message : e.GetType().Name + ": " + e.Message;
                    Console.WriteLine("FAIL " + s.Key + ": " + why.Replace('\n', ' '));
                }
                Console.Out.Flush();
            }
            return failures == 0 ? 0 : 1;
        }

        static KeyValuePair<string, Action> Pair(string id, Action run) => new KeyValuePair<string, Action>(id, run);

        /// <summary>Runs the probe; returns its exit code, its first output line in output.</summary>
        static int RunProbe(out string output, params string[] args)
        {
            var info = new ProcessStartInfo(probe, string.Join(" ", args.Select(Quote)))
            {
                UseShellExecute = false,
                RedirectStandardOutput = true,
            };
            using (Process p = Process.Start(info))
            {
                string all = p.StandardOutput.ReadToEnd();
                p.WaitForExit();
                output = all.Split('\n')[0].Trim();
                return p.ExitCode;
            }
        }

        static string Quote(string arg) => "\"" + arg.Replace("\\", "\\\\").Replace("\"", "\\\"") + "\"";

        /// <summary>Waits until key has exactly n parked waiters.</summary>
        static void AwaitWaiters(string key, int n)
        {
            string ignored;
            int rc = RunProbe(out ignored, "waiters", managerAddr, key, n.ToString());
            if (rc != 0) Fail("key " + key + " never had " + n + " waiter(s) (probe exit " + rc + ")");
        }

        /// <summary>Fails unless the holder of key is want ("free" when nobody holds it).</summary>
        static void ExpectHolder(byte[] key, string want)
        {
            string hex = BitConverter.ToString(key).Replace("-", "").ToLowerInvariant();
            string got;
            int rc = RunProbe(out got, "holder", managerAddr, hex);
            if (rc != 0) Fail("probe holder exit " + rc);
            if (got != want) Fail("holder of " + hex + " is " + got + ", want " + want);
        }

        static void ExpectHolder(string key, string want) => ExpectHolder(System.Text.Encoding.UTF8.GetBytes(key), want);

        /// <summary>
        /// Gives the waiting tasks 10 s to finish by themselves (none when
        /// resetNow); tasks still waiting after that are granted one by one by
        /// resets of key, so nothing is left behind. Returns whether all
        /// finished on their own.
        /// </summary>
        static bool Settle(LockingCenterClient c, string key, IEnumerable<Task> tasks, bool resetNow)
        {
            Task all = Task.WhenAll(tasks.ToArray()).ContinueWith(t => { }, TaskContinuationOptions.ExecuteSynchronously);
            bool onTime = !resetNow && all.Wait(TimeSpan.FromSeconds(10));
            while (!all.IsCompleted)
            {
                try
                {
                    c.ResetByKey(key);
                }
                catch (LockingCenterException)
                {
                    // the next round tries again
                }
                all.Wait(TimeSpan.FromSeconds(1));
            }
            return onTime;
        }

        /// <summary>
        /// Runs body with the waiting tasks it starts; whatever happens, they
        /// are settled and key is released by c afterwards.
        /// </summary>
        static void Guarded(LockingCenterClient c, string key, Action<List<Task>> body)
        {
            var tasks = new List<Task>();
            try
            {
                body(tasks);
                if (!Settle(c, key, tasks, false)) Fail("a waiter on " + key + " did not return within 10 s");
            }
            catch
            {
                Settle(c, key, tasks, true);
                throw;
            }
            finally
            {
                try
                {
                    c.Unlock(key);
                }
                catch (LockingCenterException)
                {
                    // the scenario's own failure is the one to report
                }
            }
        }

        /// <summary>Waits for t to finish (10 s at most) and returns its exception, or null.</summary>
        static Exception Outcome(Task t, string what)
        {
            if (!((IAsyncResult)t).AsyncWaitHandle.WaitOne(TimeSpan.FromSeconds(10))) Fail(what + " did not return within 10 s");
            return t.Exception?.GetBaseException() ?? (t.IsCanceled ? new OperationCanceledException() : null);
        }

        static void LockUnlock()
        {
            var c = new LockingCenterClient(addr, "csharp-one");
            c.Lock("csharp/lock-unlock");
            c.Unlock("csharp/lock-unlock");
            if (!c.TryLock("csharp/lock-unlock")) Fail("trylock after unlock was busy");
            c.Unlock("csharp/lock-unlock");
        }

        static void TryLockBusy()
        {
            var a = new LockingCenterClient(addr, "csharp-a");
            var b = new LockingCenterClient(addr, "csharp-b");
            Guarded(a, "csharp/trylock-busy", tasks =>
            {
                a.Lock("csharp/trylock-busy");
                if (b.TryLock("csharp/trylock-busy")) Fail("trylock of a held key acquired it");
            });
        }

        static void FifoThree()
        {
            const string k = "csharp/fifo-three";
            var holder = new LockingCenterClient(addr, "csharp-holder");
            var order = new List<int>();
            holder.Lock(k);
            Guarded(holder, k, tasks =>
            {
                for (int i = 1; i <= 3; i++)
                {
                    int turn = i;
                    var w = new LockingCenterClient(addr, "csharp-w" + turn);
                    tasks.Add(Task.Run(async () =>
                    {
                        await w.LockAsync(k);
                        lock (order) order.Add(turn);
                        await w.UnlockAsync(k);
                    }));
                    AwaitWaiters(k, turn);
                }
                holder.Unlock(k);
                for (int i = 0; i < 3; i++)
                {
                    Exception e = Outcome(tasks[i], "waiter " + (i + 1));
                    if (e != null) Fail("waiter " + (i + 1) + ": " + e.Message);
                }
                lock (order)
                {
                    if (!order.SequenceEqual(new[] { 1, 2, 3 })) Fail("granted in order " + string.Join(",", order) + ", want 1,2,3");
                }
            });
        }

        static void WaitHoldsNothing()
        {
            var c = new LockingCenterClient(addr, "csharp-wait");
            c.Wait("csharp/wait-holds-nothing");
            if (!c.TryLock("csharp/wait-holds-nothing")) Fail("key still held after wait");
            c.Unlock("csharp/wait-holds-nothing");
        }

        static void ResetKey()
        {
            const string k = "csharp/reset-key";
            var holder = new LockingCenterClient(addr, "csharp-holder");
            var other = new LockingCenterClient(addr, "csharp-waiter");
            holder.Lock(k);
            Guarded(holder, k, tasks =>
            {
                tasks.Add(other.LockAsync(k));
                AwaitWaiters(k, 1);
                holder.ResetByKey(k);
                Exception e = Outcome(tasks[0], "waiter");
                if (e != null) Fail("waiter after reset: " + e.Message);
                ExpectHolder(k, "csharp-waiter");
            });
        }

        static void ResetSourceWithdraws()
        {
            const string k = "csharp/reset-source-withdraws";
            var s1 = new LockingCenterClient(addr, "csharp-s1");
            var s2 = new LockingCenterClient(addr, "csharp-s2");
            s1.Lock(k);
            Guarded(s1, k, tasks =>
            {
                tasks.Add(Task.Run(async () =>
                {
                    await s2.LockAsync(k);
                    await s2.UnlockAsync(k); // only reached when the withdrawal did not happen
                }));
                AwaitWaiters(k, 1);
                s1.ResetBySource("csharp-s2");
                Exception e = Outcome(tasks[0], "withdrawn waiter");
                if (!(e is RequestFailedException)) Fail("withdrawn lock gave " + (e == null ? "a grant" : e.GetType().Name + ": " + e.Message) + ", want RequestFailedException");
                ExpectHolder(k, "csharp-s1");
            });
        }

        static void Key127Ok128Refused()
        {
            string key = ("csharp/key-127/" + new string('k', 128)).Substring(0, 128);
            var c = new LockingCenterClient(addr, "csharp-long");
            c.Lock(key.Substring(0, 127));
            c.Unlock(key.Substring(0, 127));
            try
            {
                new LockingCenterClient(deadAddr, "csharp-long").Lock(key);
                Fail("128-byte key was locked");
            }
            catch (ArgumentException)
            {
            }
            catch (LockingCenterException e)
            {
                Fail("128-byte key gave " + e.Message + ", want an invalid-key error");
            }
        }

        static void BinaryKey()
        {
            byte[] key = { 0x00, 0xff, 0x80, (byte)'a' };
            var c = new LockingCenterClient(addr, "csharp-binary");
            c.Lock(key);
            try
            {
                ExpectHolder(key, "csharp-binary");
            }
            finally
            {
                c.Unlock(key);
            }
            ExpectHolder(key, "free");
        }

        static void RefusedConnection()
        {
            var c = new LockingCenterClient(deadAddr, "csharp-dead");
            try
            {
                c.Lock("csharp/refused");
                Fail("lock against nothing succeeded");
            }
            catch (LockingCenterException)
            {
            }
            try
            {
                bool got = c.TryLock("csharp/refused");
                Fail("trylock against nothing gave " + (got ? "acquired" : "busy"));
            }
            catch (LockingCenterException)
            {
            }
        }

        static void CancelWithdraws()
        {
            const string k = "csharp/cancel-withdraws";
            var holder = new LockingCenterClient(addr, "csharp-holder");
            var a = new LockingCenterClient(addr, "csharp-a");
            var b = new LockingCenterClient(addr, "csharp-b");
            holder.Lock(k);
            using (var cancel = new CancellationTokenSource())
            {
                Guarded(holder, k, tasks =>
                {
                    tasks.Add(a.LockAsync(k, cancel.Token));
                    AwaitWaiters(k, 1);
                    cancel.Cancel();
                    Exception e = Outcome(tasks[0], "cancelled waiter");
                    if (!(e is OperationCanceledException)) Fail("cancelled lock gave " + (e == null ? "a grant" : e.GetType().Name + ": " + e.Message));
                    AwaitWaiters(k, 0);
                    tasks.Add(b.LockAsync(k));
                    AwaitWaiters(k, 1);
                    holder.Unlock(k);
                    e = Outcome(tasks[1], "second waiter");
                    if (e != null) Fail("second waiter: " + e.Message);
                    ExpectHolder(k, "csharp-b");
                });
            }
        }

        static void SilentServerTimesOut()
        {
            var c = new LockingCenterClient(silentAddr, "csharp-silent", readTimeout: SilentTimeout);
            const string k = "csharp/silent";
            var calls = new List<KeyValuePair<string, Func<Task>>>
            {
                new KeyValuePair<string, Func<Task>>("TryLock", async () =>
                {
                    if (!await c.TryLockAsync(k).ConfigureAwait(false)) Fail("TryLock at a silent server reported busy");
                }),
                new KeyValuePair<string, Func<Task>>("Unlock", () => c.UnlockAsync(k)),
                new KeyValuePair<string, Func<Task>>("ResetByKey", () => c.ResetByKeyAsync(k)),
                new KeyValuePair<string, Func<Task>>("ResetBySource", () => c.ResetBySourceAsync("csharp-silent")),
            };
            foreach (var call in calls)
            {
                var watch = Stopwatch.StartNew();
                Task t = Task.Run(call.Value);
                if (!((IAsyncResult)t).AsyncWaitHandle.WaitOne(SilentBound))
                {
                    Fail(call.Key + " at a silent server did not return within " + SilentBound.TotalSeconds + " s");
                }
                TimeSpan took = watch.Elapsed;
                Exception e = t.Exception?.GetBaseException();
                if (e is ScenarioFailure) throw e;
                if (e == null) Fail(call.Key + " at a silent server succeeded");
                if (!(e is LockingCenterException && e.InnerException is TimeoutException))
                {
                    Fail(call.Key + " at a silent server: " + e.GetType().Name + ": " + e.Message + ", want the read timeout");
                }
                if (took >= SilentBound) Fail(call.Key + " at a silent server took " + took.TotalSeconds + " s, want well under " + SilentBound.TotalSeconds);
            }
        }
    }
}
