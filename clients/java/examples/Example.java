import io.github.lockingcenter.LockingCenterClient;
import java.io.IOException;
import java.time.Duration;

/**
 * Takes a key, works while holding it, and releases it.
 *
 * <pre>java -cp build/classes examples/Example.java [host:port]   (default localhost:22119)</pre>
 */
public final class Example {
    public static void main(String[] args) throws IOException {
        String address = args.length > 0 ? args[0] : "localhost:22119";
        LockingCenterClient client = LockingCenterClient.builder(address).source("example-report-job").build();

        // Blocks until the key is ours; other holders of the key queue behind us.
        try (LockingCenterClient.Held held = client.hold("reports/daily")) {
            System.out.println("holding reports/daily");
        }

        // A tryLock that loses returns false; failures throw IOException.
        if (client.tryLock("reports/daily")) {
            System.out.println("took reports/daily at once");
            client.unlock("reports/daily");
        } else {
            System.out.println("reports/daily is busy");
        }

        // Wait at most 2 s: past that the request is withdrawn and false returned.
        if (client.tryLock("reports/daily", Duration.ofSeconds(2))) {
            client.unlock("reports/daily");
        } else {
            System.out.println("not granted within 2 s; the request was withdrawn");
        }
    }
}
