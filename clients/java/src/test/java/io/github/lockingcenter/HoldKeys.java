package io.github.lockingcenter;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * The child of s-kill-client: opens a session (TTL 2 s) at args[0], takes
 * the keys args[1..] with a lock-delay of 1 s, prints "held" and their
 * tokens, and holds them until it is killed.
 */
public final class HoldKeys {
    private HoldKeys() {}

    public static void main(String[] args) throws Exception {
        Session s = Session.connect(args[0], SessionOptions.defaults().name("java-child").ttl(Duration.ofSeconds(2)));
        List<String> tokens = new ArrayList<>();
        for (int i = 1; i < args.length; i++) {
            tokens.add(s.acquire(args[i], AcquireOptions.defaults().lockDelay(Duration.ofSeconds(1))).tokenString());
        }
        System.out.println("held " + String.join(" ", tokens));
        System.out.flush();
        Thread.sleep(Long.MAX_VALUE);
    }
}
