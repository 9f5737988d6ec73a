import io.github.lockingcenter.Session;
import io.github.lockingcenter.SessionOptions;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Acquire+release cycles per second through one shared session: N threads
 * sharing one Session, each on its own key, against the lcd at ADDRESS;
 * with --go, N goroutines sharing one session of the Go client in the same
 * rounds (the Go program of clients/python/bench/session_bench.py, built by
 * it: go build, offline).
 *
 * <pre>java -cp build/classes bench/SessionBench.java ADDRESS [--workers 16] [--seconds 5] [--rounds 3] [--go]</pre>
 *
 * Run from clients/java after building the classes. Prints one line per
 * round and client, then the medians: cycles per second, and for Java the
 * process's CPU time per cycle. A warm-up of 3 s runs before the rounds.
 */
public final class SessionBench {
    public static void main(String[] args) throws Exception {
        String address = args[0];
        int workers = 16, rounds = 3;
        double seconds = 5;
        boolean go = false;
        for (int i = 1; i < args.length; i++) {
            switch (args[i]) {
                case "--workers": workers = Integer.parseInt(args[++i]); break;
                case "--seconds": seconds = Double.parseDouble(args[++i]); break;
                case "--rounds": rounds = Integer.parseInt(args[++i]); break;
                case "--go": go = true; break;
                default: throw new IllegalArgumentException("unknown argument " + args[i]);
            }
        }
        String goBinary = go ? goBinary() : null;
        round(address, workers, 3);
        List<Double> java = new ArrayList<>(), cpu = new ArrayList<>(), goRates = new ArrayList<>();
        for (int r = 1; r <= rounds; r++) {
            double[] got = round(address, workers, seconds);
            java.add(got[0]);
            cpu.add(got[1]);
            System.out.printf("round %d: %d threads, one Java Session: %,.0f cycles/s, %.0f µs CPU/cycle%n", r, workers, got[0], got[1]);
            if (goBinary != null) {
                Process p = new ProcessBuilder(goBinary, address, Integer.toString(workers), Double.toString(seconds))
                        .redirectError(ProcessBuilder.Redirect.INHERIT).start();
                double rate = Double.parseDouble(new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).trim());
                if (p.waitFor() != 0) {
                    throw new IllegalStateException("the Go program failed");
                }
                goRates.add(rate);
                System.out.printf("round %d: %d goroutines, one Go session: %,.0f cycles/s%n", r, workers, rate);
            }
        }
        System.out.printf("median java: %,.0f cycles/s, %.0f µs CPU/cycle%n", median(java), median(cpu));
        if (goBinary != null) {
            System.out.printf("median go: %,.0f cycles/s%n", median(goRates));
        }
    }

    /** One round: cycles per second and the process's CPU microseconds per cycle. */
    static double[] round(String address, int workers, double seconds) throws Exception {
        try (Session s = Session.connect(address, SessionOptions.defaults().name("bench-java"))) {
            AtomicBoolean stop = new AtomicBoolean();
            AtomicLong total = new AtomicLong();
            CyclicBarrier start = new CyclicBarrier(workers + 1);
            List<Thread> threads = new ArrayList<>();
            for (int i = 0; i < workers; i++) {
                String key = "java/bench/t" + i;
                Thread t = new Thread(() -> {
                    try {
                        start.await();
                        long n = 0;
                        while (!stop.get()) {
                            s.acquire(key).release();
                            n++;
                        }
                        total.addAndGet(n);
                    } catch (Exception e) {
                        throw new RuntimeException(e);
                    }
                });
                t.start();
                threads.add(t);
            }
            start.await();
            long t0 = System.nanoTime(), c0 = cpuNanos();
            Thread.sleep((long) (seconds * 1000));
            stop.set(true);
            for (Thread t : threads) {
                t.join();
            }
            long n = total.get();
            double elapsed = (System.nanoTime() - t0) / 1e9;
            return new double[] {n / elapsed, (cpuNanos() - c0) / 1e3 / n};
        }
    }

    static long cpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean()).getProcessCpuTime();
    }

    static double median(List<Double> xs) {
        List<Double> s = new ArrayList<>(xs);
        s.sort(null);
        int n = s.size();
        return n % 2 == 1 ? s.get(n / 2) : (s.get(n / 2 - 1) + s.get(n / 2)) / 2;
    }

    /** Builds the Go program of the Python client's benchmark, with its own builder. */
    static String goBinary() throws Exception {
        Path bench = Path.of("..", "python", "bench").toAbsolutePath().normalize();
        Process p = new ProcessBuilder("python3", "-c",
                "import sys; sys.path.insert(0, sys.argv[1]); import session_bench; print(session_bench.go_binary())",
                bench.toString()).redirectError(ProcessBuilder.Redirect.INHERIT).start();
        String path = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).trim();
        if (p.waitFor() != 0 || path.isEmpty()) {
            throw new IllegalStateException("building the Go program failed");
        }
        return path;
    }
}
