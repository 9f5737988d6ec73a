using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.Linq;
using System.Threading;
using System.Threading.Tasks;

namespace LockingCenter.Bench
{
    /// <summary>
    /// Acquire+release cycles per second through one shared session: N tasks
    /// sharing one Session, each on its own key, against the lcd at ADDRESS;
    /// with --go BINARY, the Go client's program of
    /// clients/python/bench/session_bench.py in the same rounds (the script
    /// session-bench.sh builds it).
    ///
    ///   mono SessionBench.exe ADDRESS [--workers 16] [--seconds 5] [--rounds 3] [--go BINARY]
    ///
    /// Prints one line per round and client, then the medians, and for the C#
    /// client the process's CPU time per cycle.
    /// </summary>
    static class Program
    {
        static int Main(string[] args)
        {
            if (args.Length < 1)
            {
                Console.Error.WriteLine("usage: SessionBench ADDRESS [--workers N] [--seconds S] [--rounds R] [--go BINARY]");
                return 2;
            }
            string address = args[0], go = null;
            int workers = 16, rounds = 3;
            double seconds = 5;
            for (int i = 1; i + 1 < args.Length; i += 2)
            {
                switch (args[i])
                {
                    case "--workers": workers = int.Parse(args[i + 1]); break;
                    case "--seconds": seconds = double.Parse(args[i + 1], CultureInfo.InvariantCulture); break;
                    case "--rounds": rounds = int.Parse(args[i + 1]); break;
                    case "--go": go = args[i + 1]; break;
                    default:
                        Console.Error.WriteLine("unknown option " + args[i]);
                        return 2;
                }
            }
            var rates = new List<double>();
            var cpus = new List<double>();
            var goRates = new List<double>();
            for (int r = 1; r <= rounds; r++)
            {
                double[] got = Round(address, workers, seconds).GetAwaiter().GetResult();
                double rate = got[0], cpu = got[1];
                rates.Add(rate);
                cpus.Add(cpu);
                Console.WriteLine("round {0}: {1} tasks, one C# Session: {2:N0} cycles/s, {3:F0} µs CPU/cycle", r, workers, rate, cpu);
                if (go == null) continue;
                goRates.Add(GoRound(go, address, workers, seconds));
                Console.WriteLine("round {0}: {1} goroutines, one Go session: {2:N0} cycles/s", r, workers, goRates.Last());
            }
            Console.WriteLine("median C#: {0:N0} cycles/s, {1:F0} µs CPU/cycle", Median(rates), Median(cpus));
            if (go != null) Console.WriteLine("median Go: {0:N0} cycles/s", Median(goRates));
            return 0;
        }

        static double Median(List<double> xs)
        {
            var s = xs.OrderBy(x => x).ToList();
            return s.Count % 2 == 1 ? s[s.Count / 2] : (s[s.Count / 2 - 1] + s[s.Count / 2]) / 2;
        }

        /// <summary>One round: cycles per second, and µs of the process's CPU per cycle.</summary>
        static async Task<double[]> Round(string address, int workers, double seconds)
        {
            using (Session session = await Session.ConnectAsync(address, new SessionOptions { Name = "bench-csharp" }))
            {
                long cycles = 0;
                var stop = new CancellationTokenSource();
                var start = new TaskCompletionSource<bool>();
                Task[] tasks = Enumerable.Range(0, workers).Select(i => Task.Run(async () =>
                {
                    string key = "csharp/bench/t" + i;
                    await start.Task;
                    while (!stop.IsCancellationRequested)
                    {
                        LockHandle lk = await session.AcquireAsync(key);
                        await lk.ReleaseAsync();
                        Interlocked.Increment(ref cycles);
                    }
                })).ToArray();
                Process self = Process.GetCurrentProcess();
                TimeSpan cpu0 = self.TotalProcessorTime;
                var watch = Stopwatch.StartNew();
                start.SetResult(true);
                await Task.Delay(TimeSpan.FromSeconds(seconds));
                stop.Cancel();
                Task.WaitAll(tasks);
                double took = watch.Elapsed.TotalSeconds;
                self.Refresh();
                long n = Interlocked.Read(ref cycles);
                return new[] { n / took, (self.TotalProcessorTime - cpu0).TotalMilliseconds * 1000 / Math.Max(1, n) };
            }
        }

        static double GoRound(string binary, string address, int workers, double seconds)
        {
            var info = new ProcessStartInfo(binary, address + " " + workers + " " + seconds.ToString(CultureInfo.InvariantCulture))
            {
                UseShellExecute = false,
                RedirectStandardOutput = true,
            };
            using (Process p = Process.Start(info))
            {
                string output = p.StandardOutput.ReadToEnd();
                p.WaitForExit();
                return double.Parse(output.Trim(), CultureInfo.InvariantCulture);
            }
        }
    }
}
