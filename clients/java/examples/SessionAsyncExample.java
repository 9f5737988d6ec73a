import io.github.lockingcenter.Lock;
import io.github.lockingcenter.Session;
import io.github.lockingcenter.SessionOptions;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * acquireAsync and its cancel, a session-state listener, and a lock
 * released on another thread than the one that took it.
 *
 * <pre>java -cp build/classes examples/SessionAsyncExample.java [host:port] [key prefix]</pre>
 */
public final class SessionAsyncExample {
    public static void main(String[] args) throws Exception {
        String address = args.length > 0 ? args[0] : "localhost:22119";
        String prefix = args.length > 1 ? args[1] : "";
        SessionOptions options = SessionOptions.defaults().name("async-job")
                .onStateChange(state -> System.out.println("session " + state));
        try (Session session = Session.connect(address, options)) {
            Lock first = session.acquire(prefix + "jobs/import");

            // Another acquire of the same key waits in the server's queue...
            CompletableFuture<Lock> second = session.acquireAsync(prefix + "jobs/import");
            // ...until cancel sends CANCEL, and the request leaves the queue.
            second.cancel(true);

            // No thread affinity: a lock taken here may be released by any thread.
            CompletableFuture.runAsync(() -> {
                try {
                    first.release();
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            }).get(10, TimeUnit.SECONDS);

            Lock third = session.acquireAsync(prefix + "jobs/import").get(10, TimeUnit.SECONDS);
            System.out.println("token " + third.tokenString());
            third.release();
        }
    }
}
