using System;
using System.Linq;
using System.Reflection;
using System.Threading.Tasks;

namespace LockingCenter.Tests
{
    /// <summary>Marks a test: a static method returning void or Task.</summary>
    [AttributeUsage(AttributeTargets.Method)]
    sealed class TestAttribute : Attribute { }

    /// <summary>A failed expectation.</summary>
    sealed class TestFailure : Exception
    {
        public TestFailure(string message) : base(message) { }
    }

    static class Check
    {
        public static void That(bool condition, string message)
        {
            if (!condition) throw new TestFailure(message);
        }

        /// <summary>Runs body and returns the exception of type T it throws; fails otherwise.</summary>
        public static T Throws<T>(Action body, string what) where T : Exception
        {
            try
            {
                body();
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
    }

    /// <summary>
    /// Runs every [Test] of this assembly and prints "ok NAME" or
    /// "FAIL NAME: reason" per test, then "N passed, M failed".
    /// Usage: LockingCenter.Client.Tests [path/to/vectors.json]
    /// </summary>
    static class Program
    {
        static int Main(string[] args)
        {
            try
            {
                string vectors = args.Length > 0 ? args[0] : "../testdata/vectors.json";
                Vectors.Load(vectors);
                SessionCodecTests.Load(vectors);
            }
            catch (Exception e)
            {
                Console.WriteLine("FAIL load: " + e.Message);
                Console.WriteLine("0 passed, 1 failed");
                return 1;
            }
            var tests = typeof(Program).Assembly.GetTypes()
                .SelectMany(t => t.GetMethods(BindingFlags.Static | BindingFlags.Public | BindingFlags.NonPublic))
                .Where(m => m.GetCustomAttributes(typeof(TestAttribute), false).Length > 0)
                .OrderBy(m => m.MetadataToken)
                .ToList();
            int passed = 0, failed = 0, skipped = 0;
            foreach (MethodInfo test in tests)
            {
                string name = test.DeclaringType.Name + "." + test.Name;
                try
                {
                    var task = test.Invoke(null, null) as Task;
                    task?.GetAwaiter().GetResult();
                    passed++;
                    Console.WriteLine("ok   " + name);
                }
                catch (Exception e)
                {
                    if (e is TargetInvocationException && e.InnerException != null) e = e.InnerException;
                    if (e is SkipTest)
                    {
                        skipped++;
                        Console.WriteLine("skip " + name + ": " + e.Message);
                        continue;
                    }
                    failed++;
                    Console.WriteLine("FAIL " + name + ": " + (e is TestFailure ? e.Message : e.ToString()));
                }
            }
            LiveLcd.Stop();
            if (tests.Count == 0) failed++;
            Console.WriteLine(passed + " passed, " + failed + " failed" + (skipped > 0 ? ", " + skipped + " skipped" : ""));
            return failed == 0 ? 0 : 1;
        }
    }
}
