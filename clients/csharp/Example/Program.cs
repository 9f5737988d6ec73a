using System;
using System.Threading;
using System.Threading.Tasks;
using LockingCenter;

// Takes a lock, does the work, releases it.
//   dotnet run --project Example -- localhost:22119
static class Example
{
    static int Main(string[] args) => Run(args).GetAwaiter().GetResult();

    static async Task<int> Run(string[] args)
    {
        string address = args.Length > 0 ? args[0] : "localhost:22119";
        const string key = "orders/batch-7";
        var client = new LockingCenterClient(address, "example-worker");
        try
        {
            await client.LockAsync(key); // waits until the key is ours
            try
            {
                Console.WriteLine("holding " + key);
                // ... exclusive work ...
            }
            finally
            {
                await client.UnlockAsync(key);
            }

            // TryLock never queues: false means busy, which is not an error.
            if (await client.TryLockAsync(key))
            {
                Console.WriteLine("trylock " + key + ": acquired");
                await client.UnlockAsync(key);
            }
            else
            {
                Console.WriteLine("trylock " + key + ": busy");
            }

            // Give up after two seconds; the server then withdraws the request.
            using (var deadline = new CancellationTokenSource(TimeSpan.FromSeconds(2)))
            {
                await client.LockAsync(key, deadline.Token);
                await client.UnlockAsync(key);
            }
        }
        catch (OperationCanceledException)
        {
            Console.Error.WriteLine("gave up waiting for " + key);
            return 1;
        }
        catch (LockingCenterException e) // the server refused, or the network failed
        {
            Console.Error.WriteLine(e.Message);
            return 1;
        }
        return 0;
    }
}
