import io.github.lockingcenter.AcquireOptions;
import io.github.lockingcenter.Lock;
import io.github.lockingcenter.Session;
import io.github.lockingcenter.SessionException;
import io.github.lockingcenter.SessionOptions;
import java.time.Duration;
import java.util.Optional;

/**
 * One session, several locks: take a key, try one, wait a bounded time,
 * and hold one with a lease.
 *
 * <pre>java -cp build/classes examples/SessionExample.java [host:port] [key prefix]</pre>
 */
public final class SessionExample {
    public static void main(String[] args) throws Exception {
        String address = args.length > 0 ? args[0] : "localhost:22119";
        String prefix = args.length > 1 ? args[1] : "";
        try (Session session = Session.connect(address, SessionOptions.defaults().name("report-job"))) {
            // Blocks until the key is ours; the token goes with every write to the resource.
            try (Lock lock = session.acquire(prefix + "reports/daily")) {
                System.out.println("holding " + lock.key() + ", fencing token " + lock.tokenString());
            }

            // A try: an empty Optional when someone else holds the key, never an exception.
            Optional<Lock> maybe = session.tryAcquire(prefix + "reports/daily");
            if (maybe.isPresent()) {
                maybe.get().release();
            } else {
                System.out.println("busy");
            }

            // Wait at most 2 s, measured by the server; past that the request has left the queue.
            try (Lock lock = session.acquire(prefix + "reports/weekly",
                    AcquireOptions.defaults().waitFor(Duration.ofSeconds(2)))) {
                System.out.println("holding " + lock.key());
            } catch (SessionException.Timeout e) {
                System.out.println("not granted within 2 s");
            }

            // A lease ends the lock unless renewed; onLost says when and why it ended.
            Lock leased = session.acquire(prefix + "reports/monthly",
                    AcquireOptions.defaults().lease(Duration.ofSeconds(30)).note("monthly report on " + address));
            leased.onLost((lock, reason) -> System.out.println(lock.key() + " lost: " + reason));
            leased.renew();
            leased.release();
        }
    }
}
