package io.github.lockingcenter;

import java.time.Duration;
import java.util.List;

/**
 * What {@link Session#describe} read of a key: its holders (none when
 * free), how many requests wait, and what is left of its lock-delay.
 */
public record KeyInfo(String key, long queue, Duration lockDelayLeft, List<Holder> holders) {
    /** One holder of a key. The token is unsigned ({@link Long#toUnsignedString}); session 0 is a v1 holder. */
    public record Holder(long token, String name, long session, Duration held, boolean shared, long count,
            Duration leaseLeft, String note) {}
}
