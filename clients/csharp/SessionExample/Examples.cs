using System;
using System.Threading;
using System.Threading.Tasks;
using LockingCenter;

/// <summary>The examples README.md quotes; the unit tests run each against a live lcd.</summary>
public static class SessionExamples
{
    // The resource the lock guards: it keeps the highest token it has seen
    // and refuses writes that carry a lower one.
    static ulong highestSeen;

    static void WriteReport(ulong fencingToken, CancellationToken lost)
    {
        lost.ThrowIfCancellationRequested();
        if (fencingToken < highestSeen) throw new InvalidOperationException("a stale holder");
        highestSeen = fencingToken;
    }

    /// <summary>Acquire, work under the fencing token, release.</summary>
    public static async Task Basic(string address)
    {
        // #region basic
        Session session = await Session.ConnectAsync(address, new SessionOptions { Name = "report-job" });
        try
        {
            // Waits up to 30 s in the key's queue (the server counts the wait).
            LockHandle lk = await session.AcquireAsync("csharp/nightly-report", TimeSpan.FromSeconds(30));
            try
            {
                // Give the fencing token with every write; stop when the lock is lost.
                WriteReport(lk.FencingToken, lk.HandleLostToken);
            }
            finally
            {
                await lk.DisposeAsync(); // releases: `await using (var lk = ...)` with a C# 8 compiler
            }
        }
        finally
        {
            await session.CloseAsync();
        }
        // #endregion basic
    }

    /// <summary>A try: null when the key is busy.</summary>
    public static async Task<bool> Try(Session session)
    {
        // #region try
        LockHandle lk = await session.TryAcquireAsync("csharp/nightly-report");
        if (lk == null) return false; // busy: someone else holds it, no error
        using (lk)
        {
            WriteReport(lk.FencingToken, lk.HandleLostToken);
        }
        return true;
        // #endregion try
    }

    /// <summary>Giving up a wait by cancellation: the request leaves the server's queue.</summary>
    public static async Task<bool> Cancel(Session session, TimeSpan patience)
    {
        // #region cancel
        using (var giveUp = new CancellationTokenSource(patience))
        {
            try
            {
                using (LockHandle lk = await session.AcquireAsync("csharp/nightly-report", null, giveUp.Token))
                {
                    WriteReport(lk.FencingToken, lk.HandleLostToken);
                    return true;
                }
            }
            catch (OperationCanceledException)
            {
                return false; // CANCEL went to the server: nothing of ours is left in the queue
            }
        }
        // #endregion cancel
    }

    /// <summary>A lease, renewed while the work goes on, and the loss with its reason.</summary>
    public static async Task<LostReason?> Lease(Session session, int steps)
    {
        // #region lease
        var options = new AcquireOptions
        {
            Lease = TimeSpan.FromSeconds(2),      // the lock ends 2 s after its grant or last renew
            LockDelay = TimeSpan.FromSeconds(1),  // and, if lost, nobody gets the key for 1 s more
            Note = "nightly report, host " + Environment.MachineName,
        };
        LockHandle lk = await session.AcquireAsync("csharp/nightly-report", TimeSpan.FromSeconds(30), default(CancellationToken), options);
        lk.HandleLostToken.Register(() => Console.Error.WriteLine("lost: " + lk.LostReason)); // LeaseExpired, Reset, SessionExpired, ...
        try
        {
            for (int i = 0; i < steps && !lk.HandleLostToken.IsCancellationRequested; i++)
            {
                WriteReport(lk.FencingToken, lk.HandleLostToken);
                await lk.RenewAsync(); // another 2 s from now
            }
        }
        finally
        {
            await lk.DisposeAsync();
        }
        return lk.LostReason; // null: it was never lost
        // #endregion lease
    }

    /// <summary>TLS and a token from the environment, as lc-cli reads them.</summary>
    public static async Task<ulong> FromEnvironment(string address)
    {
        // #region environment
        // LC_TOKEN, LC_CA_FILE, LC_CERT_FILE (PKCS#12), LC_TLS, LC_SOURCE
        SessionOptions options = SessionOptions.FromEnvironment();
        using (Session session = await Session.ConnectAsync(address, options))
        using (LockHandle lk = await session.AcquireAsync("csharp/nightly-report"))
        {
            return lk.FencingToken;
        }
        // #endregion environment
    }
}
