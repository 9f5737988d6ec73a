using System;
using System.Threading.Tasks;
using LockingCenter;

// Runs the session examples against a server:
//   mono SessionExample.exe localhost:22119
static class Program
{
    static int Main(string[] args) => Run(args.Length > 0 ? args[0] : "localhost:22119").GetAwaiter().GetResult();

    static async Task<int> Run(string address)
    {
        await SessionExamples.Basic(address);
        using (Session session = await Session.ConnectAsync(address))
        {
            Console.WriteLine("try: " + (await SessionExamples.Try(session) ? "held and released" : "busy"));
            Console.WriteLine("cancel: " + (await SessionExamples.Cancel(session, TimeSpan.FromSeconds(2)) ? "held and released" : "gave up"));
            Console.WriteLine("lease: lost " + ((object)await SessionExamples.Lease(session, 3) ?? "never"));
        }
        return 0;
    }
}
