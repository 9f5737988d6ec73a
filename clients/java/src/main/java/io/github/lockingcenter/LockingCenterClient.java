package io.github.lockingcenter;

import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetSocketAddress;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Objects;

/**
 * Client of Locking-Center, a lock server that grants named keys to one
 * holder at a time, in order of arrival.
 *
 * <p>Every call opens one TCP connection to the mutex port, sends one
 * request, reads the one-byte answer and closes. A lock is not tied to the
 * connection: it stays held until {@link #unlock} or a reset, even after the
 * process exits. The client holds no connection between calls and is safe
 * for use by many threads.
 *
 * <p>Keys and sources are byte strings; {@code String} overloads send the
 * text as UTF-8. Keys are 1 to 127 bytes and sources at most 127; a bad one
 * throws {@link IllegalArgumentException} before anything is sent.
 *
 * <p>Failures are {@link IOException}s: {@link RefusedException} when the
 * server answered {@code '-'}, {@link UnexpectedAnswerException} for an
 * answer the protocol does not define, and the usual {@code java.net}
 * exceptions for I/O. A try-lock that loses is not a failure: it returns
 * {@code false}.
 *
 * <p>Every call that does not wait for a key ({@link #tryLock(byte[])},
 * {@link #unlock}, {@link #resetByKey}, {@link #resetBySource} and the
 * release of {@link #waitFor}) gives up after the read timeout, 10 s unless
 * the builder says otherwise, with a {@link SocketTimeoutException}; whether
 * the server applied it is then unknown. A lock never has a read timeout.
 *
 * <p>A blocking lock is cancelled by interrupting its thread (for example
 * with {@code Future.cancel(true)}): the connection is closed, so the server
 * withdraws the request, and the call throws
 * {@link java.nio.channels.ClosedByInterruptException}.
 *
 * <pre>{@code
 * var client = LockingCenterClient.builder("localhost:22119").source("billing-worker").build();
 * try (var held = client.hold("orders/batch-7")) {
 *     // only one holder at a time gets here
 * }
 * }</pre>
 */
public final class LockingCenterClient {
    /** Bound on each TCP connect unless the builder says otherwise. */
    public static final Duration DEFAULT_CONNECT_TIMEOUT = Duration.ofSeconds(5);

    /** Bound on the answer of every call that does not wait for a key unless the builder says otherwise. */
    public static final Duration DEFAULT_READ_TIMEOUT = Duration.ofSeconds(10);

    private static final byte[] NONE = new byte[0];

    private final String host;
    private final int port;
    private final byte[] source;
    private final Duration connectTimeout;
    private final Duration readTimeout;

    private LockingCenterClient(Builder b) {
        int colon = b.address.lastIndexOf(':');
        String h = colon > 0 ? b.address.substring(0, colon) : "";
        int p = -1;
        try {
            p = colon > 0 ? Integer.parseInt(b.address.substring(colon + 1)) : -1;
        } catch (NumberFormatException e) {
            // reported below
        }
        if (h.isEmpty() || p < 0 || p > 65535) {
            throw new IllegalArgumentException("address must be host:port, got \"" + b.address + "\"");
        }
        this.host = h.startsWith("[") && h.endsWith("]") ? h.substring(1, h.length() - 1) : h;
        this.port = p;
        Protocol.checkSource(b.source);
        this.source = b.source.clone();
        this.connectTimeout = b.connectTimeout;
        this.readTimeout = b.readTimeout;
    }

    /** A client of the mutex port at {@code address} ("host:port"), with no source. */
    public LockingCenterClient(String address) {
        this(builder(address));
    }

    /** Starts a client of the mutex port at {@code address} ("host:port"). */
    public static Builder builder(String address) {
        return new Builder(address);
    }

    /** Options of a client. */
    public static final class Builder {
        private final String address;
        private byte[] source = NONE;
        private Duration connectTimeout = DEFAULT_CONNECT_TIMEOUT;
        private Duration readTimeout = DEFAULT_READ_TIMEOUT;

        private Builder(String address) {
            this.address = Objects.requireNonNull(address, "address");
        }

        /**
         * Names the owner of this client's locks (at most 127 bytes); reset
         * by source matches it. Empty, the default, lets the server use the
         * client's IP address.
         */
        public Builder source(byte[] source) {
            this.source = Objects.requireNonNull(source, "source").clone();
            return this;
        }

        /** As {@link #source(byte[])}, the text as UTF-8. */
        public Builder source(String source) {
            return source(source.getBytes(StandardCharsets.UTF_8));
        }

        /** Bounds each TCP connect; {@link Duration#ZERO} waits as long as the system does. */
        public Builder connectTimeout(Duration timeout) {
            if (timeout.isNegative()) {
                throw new IllegalArgumentException("connect timeout must not be negative");
            }
            this.connectTimeout = timeout;
            return this;
        }

        /**
         * Bounds the answer of every call that does not wait for a key (all
         * but {@code lock}, {@code hold}, the timed {@code tryLock} and the
         * wait of {@code waitFor}); one that runs out throws
         * {@link SocketTimeoutException}. {@link Duration#ZERO} leaves them
         * unbounded. Default {@link #DEFAULT_READ_TIMEOUT}.
         */
        public Builder readTimeout(Duration timeout) {
            if (timeout.isNegative()) {
                throw new IllegalArgumentException("read timeout must not be negative");
            }
            this.readTimeout = timeout;
            return this;
        }

        /**
         * Returns the client.
         *
         * @throws IllegalArgumentException for a malformed address or a long source
         */
        public LockingCenterClient build() {
            return new LockingCenterClient(this);
        }
    }

    /** The address the client connects to, "host:port". */
    public String address() {
        return host + ":" + port;
    }

    /**
     * Blocks until {@code key} is granted to this client, however long it
     * takes. Interrupting the thread withdraws the request.
     */
    public void lock(byte[] key) throws IOException {
        call(Action.LOCK, key, source, null);
    }

    /** As {@link #lock(byte[])}, the key as UTF-8. */
    public void lock(String key) throws IOException {
        lock(utf8(key));
    }

    /** Takes {@code key} only if it is free now: true when this client now holds it, false when another does. */
    public boolean tryLock(byte[] key) throws IOException {
        return call(Action.TRY_LOCK, key, source, null) == Outcome.OK;
    }

    /** As {@link #tryLock(byte[])}, the key as UTF-8. */
    public boolean tryLock(String key) throws IOException {
        return tryLock(utf8(key));
    }

    /**
     * Waits up to {@code timeout} for {@code key}: true when granted, false
     * when the time passed first (the request is then withdrawn).
     */
    public boolean tryLock(byte[] key, Duration timeout) throws IOException {
        if (timeout.isNegative() || timeout.isZero()) {
            throw new IllegalArgumentException("timeout must be above zero");
        }
        try {
            call(Action.LOCK, key, source, timeout);
            return true;
        } catch (SocketTimeoutException e) {
            return false;
        }
    }

    /** As {@link #tryLock(byte[], Duration)}, the key as UTF-8. */
    public boolean tryLock(String key, Duration timeout) throws IOException {
        return tryLock(utf8(key), timeout);
    }

    /** Releases {@code key}, whoever holds it; releasing a free key succeeds. */
    public void unlock(byte[] key) throws IOException {
        call(Action.UNLOCK, key, null, null);
    }

    /** As {@link #unlock(byte[])}, the key as UTF-8. */
    public void unlock(String key) throws IOException {
        unlock(utf8(key));
    }

    /** Blocks until {@code key} is free and returns holding nothing (the key is taken and released at once). */
    public void waitFor(byte[] key) throws IOException {
        lock(key);
        unlock(key);
    }

    /** As {@link #waitFor(byte[])}, the key as UTF-8. */
    public void waitFor(String key) throws IOException {
        waitFor(utf8(key));
    }

    /** Takes {@code key} from its holder; the first parked request gets it. */
    public void resetByKey(byte[] key) throws IOException {
        call(Action.RESET_KEY, key, null, null);
    }

    /** As {@link #resetByKey(byte[])}, the key as UTF-8. */
    public void resetByKey(String key) throws IOException {
        resetByKey(utf8(key));
    }

    /** Releases every key {@code source} holds and withdraws its parked requests (they throw {@link RefusedException}). */
    public void resetBySource(byte[] source) throws IOException {
        call(Action.RESET_SOURCE, null, source, null);
    }

    /** As {@link #resetBySource(byte[])}, the source as UTF-8. */
    public void resetBySource(String source) throws IOException {
        resetBySource(utf8(source));
    }

    /** A key held through {@link #hold}: closing it unlocks the key. */
    public interface Held extends AutoCloseable {
        @Override
        void close() throws IOException;
    }

    /** Locks {@code key} and returns a handle whose {@code close()} unlocks it, for try-with-resources. */
    public Held hold(byte[] key) throws IOException {
        byte[] k = key.clone();
        lock(k);
        return () -> unlock(k);
    }

    /** As {@link #hold(byte[])}, the key as UTF-8. */
    public Held hold(String key) throws IOException {
        return hold(utf8(key));
    }

    private static byte[] utf8(String s) {
        return Objects.requireNonNull(s).getBytes(StandardCharsets.UTF_8);
    }

    /**
     * Sends one request and returns OK or BUSY. A lock reads within timeout,
     * or without limit when it is null; every other action within the read
     * timeout.
     */
    private Outcome call(Action action, byte[] key, byte[] src, Duration timeout) throws IOException {
        byte[] request = Protocol.encodeRequest(action, key, src);
        String what = action.name().toLowerCase() + " at " + address();
        try (SocketChannel ch = SocketChannel.open()) {
            ch.socket().connect(new InetSocketAddress(host, port), (int) connectTimeout.toMillis());
            ByteBuffer out = ByteBuffer.wrap(request);
            while (out.hasRemaining()) {
                ch.write(out);
            }
            // The socket's stream honours the read timeout and, being the
            // channel's, closes on interrupt.
            Duration limit = action == Action.LOCK ? timeout : readTimeout;
            ch.socket().setSoTimeout(limit == null || limit.isZero() ? 0 : (int) Math.min(Integer.MAX_VALUE, Math.max(1, limit.toMillis())));
            InputStream in = ch.socket().getInputStream();
            int answer;
            try {
                answer = in.read();
            } catch (SocketTimeoutException e) {
                if (action == Action.LOCK) {
                    throw e;
                }
                SocketTimeoutException t = new SocketTimeoutException(what + ": no answer within " + limit.toMillis() + " ms");
                t.initCause(e);
                throw t;
            }
            if (answer < 0) {
                throw new EOFException(what + ": connection closed before the answer");
            }
            Outcome o = Protocol.interpretAnswer(action, (byte) answer);
            if (o != Outcome.FAILED) {
                return o;
            }
            if (answer == Protocol.ANSWER_FAILED) {
                throw new RefusedException(what + ": refused by the server");
            }
            throw new UnexpectedAnswerException(what + ": unexpected answer 0x" + Integer.toHexString(answer), (byte) answer);
        }
    }
}
