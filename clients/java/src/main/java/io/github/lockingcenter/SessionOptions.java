package io.github.lockingcenter;

import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.function.Consumer;
import javax.net.ssl.SSLContext;

/**
 * How a session connects. Immutable: each method returns a copy with one
 * thing changed, from {@link #defaults()} (no name, the server's TTL,
 * connect timeout 5 s, read timeout 10 s, plain TCP, no token).
 */
public final class SessionOptions {
    private static final SessionOptions DEFAULTS = new SessionOptions();

    String name = "";
    long ttlMs;
    long connectTimeoutMs = 5_000;
    long readTimeoutMs = 10_000;
    String token;
    SSLContext ssl;
    String serverName;
    Consumer<ConnectionState> listener;

    private SessionOptions() {}

    private SessionOptions copy() {
        SessionOptions o = new SessionOptions();
        o.name = name;
        o.ttlMs = ttlMs;
        o.connectTimeoutMs = connectTimeoutMs;
        o.readTimeoutMs = readTimeoutMs;
        o.token = token;
        o.ssl = ssl;
        o.serverName = serverName;
        o.listener = listener;
        return o;
    }

    public static SessionOptions defaults() {
        return DEFAULTS;
    }

    /**
     * The options lc-cli reads from the environment: {@code LC_TOKEN} (the
     * token), {@code LC_CA_FILE} (TLS, verified by that CA), and with it
     * {@code LC_CERT_FILE} and {@code LC_KEY_FILE} (a client certificate;
     * the key PEM PKCS#8, "BEGIN PRIVATE KEY", RSA, EC or Ed25519). Unset
     * or empty variables are left out.
     *
     * @throws IOException when a file cannot be read or parsed
     */
    public static SessionOptions fromEnv() throws IOException {
        return DEFAULTS.withEnv(System.getenv());
    }

    SessionOptions withEnv(Map<String, String> env) throws IOException {
        SessionOptions o = this;
        String token = env.getOrDefault("LC_TOKEN", "");
        if (!token.isEmpty()) {
            o = o.token(token);
        }
        String ca = env.getOrDefault("LC_CA_FILE", "");
        String cert = env.getOrDefault("LC_CERT_FILE", "");
        String key = env.getOrDefault("LC_KEY_FILE", "");
        if (!ca.isEmpty() || !cert.isEmpty()) {
            o = o.tls(Tls.context(ca.isEmpty() ? null : Path.of(ca), cert.isEmpty() ? null : Path.of(cert),
                    key.isEmpty() ? null : Path.of(key)));
        }
        return o;
    }

    /** The session's name, its source on the server (at most 127 bytes; empty: the client's IP address). */
    public SessionOptions name(String name) {
        if (Codec.utf8(name, "name").length > Protocol.MAX_SOURCE_LENGTH) {
            throw new IllegalArgumentException("name over 127 bytes");
        }
        SessionOptions o = copy();
        o.name = name;
        return o;
    }

    /** The session TTL to ask for (the server clamps it; zero: the server's default, 10 s). */
    public SessionOptions ttl(Duration d) {
        SessionOptions o = copy();
        o.ttlMs = AcquireOptions.millis(d, "ttl");
        return o;
    }

    /** Bound of each TCP connect (and TLS handshake); zero: the system's. */
    public SessionOptions connectTimeout(Duration d) {
        SessionOptions o = copy();
        o.connectTimeoutMs = AcquireOptions.millis(d, "connect timeout");
        return o;
    }

    /**
     * Bound of every answer that does not wait for a key: the session's
     * first answer, release, renew, describe, close. Zero: none (the
     * session's TTL still ends the wait).
     */
    public SessionOptions readTimeout(Duration d) {
        SessionOptions o = copy();
        o.readTimeoutMs = AcquireOptions.millis(d, "read timeout");
        return o;
    }

    /** The token (the {@code credential} field) of a server with authentication on; at most 1,024 bytes. */
    public SessionOptions token(String token) {
        if (token != null && Codec.utf8(token, "token").length > 1024) {
            throw new IllegalArgumentException("token over 1,024 bytes");
        }
        SessionOptions o = copy();
        o.token = token;
        return o;
    }

    /** Speaks TLS with ctx on every connection; the server's certificate must name the host dialled, or {@link #serverName}. */
    public SessionOptions tls(SSLContext ctx) {
        SessionOptions o = copy();
        o.ssl = ctx;
        return o;
    }

    /** The name the server's certificate must carry (and SNI), when it is not the host of the address. */
    public SessionOptions serverName(String name) {
        SessionOptions o = copy();
        o.serverName = name;
        return o;
    }

    /**
     * Hears every change of the connection's state, CONNECTED first, on
     * the session's callback thread. {@link Session#addStateListener} adds
     * more after the connect.
     */
    public SessionOptions onStateChange(Consumer<ConnectionState> listener) {
        SessionOptions o = copy();
        o.listener = listener;
        return o;
    }
}
