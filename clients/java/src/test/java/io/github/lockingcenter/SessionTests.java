package io.github.lockingcenter;

import java.io.ByteArrayInputStream;
import java.io.EOFException;
import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The session client's unit tests: the codec against
 * clients/testdata/session-vectors.json, mutated and random frames, and,
 * against the lcd at LC_ADDR, 64 threads on one session and the README's
 * examples. {@code java -Dvectors=... -cp ... io.github.lockingcenter.SessionTests}.
 */
final class SessionTests {
    private SessionTests() {}

    static Map<String, Object> vectors() throws Exception {
        Path path = Path.of(System.getProperty("vectors", "../testdata/session-vectors.json"));
        return Json.obj(Json.parse(Files.readString(path)));
    }

    static List<Frame.Field> fields(Map<String, Object> frame) {
        List<Frame.Field> out = new ArrayList<>();
        for (Object o : Json.arr(frame.get("fields"))) {
            Map<String, Object> f = Json.obj(o);
            out.add(new Frame.Field(((Double) f.get("tag")).intValue(), Json.hex(f, "value_hex")));
        }
        return out;
    }

    static void codec(Check check) throws Exception {
        Map<String, Object> v = vectors();
        Check.equal(Json.toHex(Frame.PREFACE), v.get("preface_hex"), "preface");
        for (Object o : Json.arr(v.get("frames"))) {
            Map<String, Object> fr = Json.obj(o);
            String name = (String) fr.get("name");
            check.test("vector: " + name, () -> {
                int type = ((Double) fr.get("type")).intValue();
                long id = ((Double) fr.get("id")).longValue();
                List<Frame.Field> want = fields(fr);
                Check.equal(Json.toHex(Frame.encode(type, id, want)), fr.get("frame_hex"), "encoded");
                Frame got = Frame.decode(Json.hex(fr, "frame_hex"));
                Check.equal(got.type, type, "type");
                Check.equal(got.id, id, "id");
                Check.equal(got.fields.size(), want.size(), "number of fields");
                for (int i = 0; i < want.size(); i++) {
                    Check.equal(got.fields.get(i).tag(), want.get(i).tag(), "tag " + i);
                    Check.equal(Json.toHex(got.fields.get(i).value()), Json.toHex(want.get(i).value()), "value " + i);
                    int tag = want.get(i).tag();
                    if (tag == Frame.HELD || tag == Frame.PARKED || tag == Frame.HOLDER) {
                        Check.isTrue(!got.items(tag).isEmpty(), "list items parse");
                    }
                }
                // Read from a stream, the same frame comes out.
                Frame read = Frame.read(new ByteArrayInputStream(Json.hex(fr, "frame_hex")), new byte[4]);
                Check.equal(Json.toHex(Frame.encode(read.type, read.id, read.fields)), fr.get("frame_hex"), "read");
            });
        }
        check.test("vectors: the code names", () -> {
            for (Map.Entry<String, Object> c : Json.obj(v.get("codes")).entrySet()) {
                Check.equal(Frame.codeName(((Double) c.getValue()).longValue()), c.getKey(), "code");
            }
        });
        check.test("unsigned integers above 2^63", () -> {
            Frame f = Frame.decode(Frame.encode(Frame.GRANTED, -2, List.of(Frame.Field.u64(Frame.TOKEN, -1L))));
            Check.equal(Long.toUnsignedString(f.uint(Frame.TOKEN, 0)), "18446744073709551615", "token");
            Check.equal(Long.toUnsignedString(f.id), "18446744073709551614", "id");
        });
        check.test("malformed frames are protocol errors", () -> {
            byte[][] bad = {
                hex("0000000801000000000000000"), // length 8
                hex("000100010100000000000000010000"), // length over the limit
                hex("0000000c83000000000000000101"), // a field header cut short
                hex("0000000e8300000000000000010100ff"), // a field past its frame
                hex("000000108300000000000000010d000201ff"), // code of 2 bytes
                hex("000000148300000000000000010d0001010d000101"), // code twice
            };
            for (byte[] b : bad) {
                Throwable t = Check.thrown(() -> Frame.decode(b), "decode of " + Json.toHex(b));
                Check.isTrue(t instanceof SessionException.Protocol, Json.toHex(b) + ": " + t);
            }
        });
    }

    static byte[] hex(String h) {
        if (h.length() % 2 == 1) {
            h = h + "0";
        }
        return Json.hex(Map.of("h", h), "h");
    }

    /** Mutated vectors and random bytes: the decoder gives a frame or the protocol error, nothing else. */
    static void fuzz(Check check) throws Exception {
        List<byte[]> seeds = new ArrayList<>();
        for (Object o : Json.arr(vectors().get("frames"))) {
            seeds.add(Json.hex(Json.obj(o), "frame_hex"));
        }
        check.test("fuzz: mutated and random frames", () -> {
            Random rnd = new Random(7);
            int protocol = 0;
            for (int n = 0; n < 200_000; n++) {
                byte[] b;
                if (n % 10 == 0) {
                    b = new byte[rnd.nextInt(64)];
                    rnd.nextBytes(b);
                } else {
                    byte[] s = seeds.get(rnd.nextInt(seeds.size()));
                    b = Arrays.copyOf(s, Math.max(0, s.length + (rnd.nextInt(5) == 0 ? rnd.nextInt(9) - 4 : 0)));
                    for (int k = rnd.nextInt(4); k >= 0 && b.length > 0; k--) {
                        b[rnd.nextInt(b.length)] ^= (byte) (1 << rnd.nextInt(8));
                    }
                }
                try {
                    Frame f = Frame.decode(b);
                    for (int tag : new int[] {Frame.HELD, Frame.PARKED, Frame.HOLDER}) {
                        f.items(tag);
                    }
                } catch (SessionException.Protocol e) {
                    protocol++;
                }
                try {
                    Frame.read(new ByteArrayInputStream(b), new byte[4]);
                } catch (SessionException.Protocol | EOFException e) {
                    // what a stream may give
                }
            }
            Check.isTrue(protocol > 10_000, "only " + protocol + " of the mutations were protocol errors");
        });
    }

    /**
     * 64 threads on one session, 8 keys: each key's waiters, parked one after
     * the other, are granted in that order, and nothing is left waiting.
     */
    static void threads(Check check, String addr) {
        check.test("64 threads on one session: FIFO per key, nothing left waiting", () -> {
            try (Session s = Session.connect(addr, SessionOptions.defaults().name("java-threads"))) {
                int keys = 8, per = 8;
                List<Lock> holders = new ArrayList<>();
                List<ConcurrentLinkedQueue<Integer>> order = new ArrayList<>();
                CountDownLatch done = new CountDownLatch(keys * per);
                AtomicInteger[] inside = new AtomicInteger[keys];
                List<Throwable> errors = new java.util.concurrent.CopyOnWriteArrayList<>();
                for (int k = 0; k < keys; k++) {
                    holders.add(s.acquire("java/threads-" + k));
                    order.add(new ConcurrentLinkedQueue<>());
                    inside[k] = new AtomicInteger();
                }
                for (int j = 0; j < per; j++) {
                    for (int k = 0; k < keys; k++) {
                        int key = k, waiter = j;
                        Thread t = new Thread(() -> {
                            try {
                                Lock l = s.acquire("java/threads-" + key);
                                Check.isTrue(inside[key].incrementAndGet() == 1, "two holders of a key at once");
                                order.get(key).add(waiter);
                                inside[key].decrementAndGet();
                                l.release();
                            } catch (Throwable e) {
                                errors.add(e);
                            } finally {
                                done.countDown();
                            }
                        });
                        t.start();
                    }
                    for (int k = 0; k < keys; k++) {
                        awaitQueue(s, "java/threads-" + k, j + 1);
                    }
                }
                for (Lock l : holders) {
                    l.release(); // from this thread: the locks were taken on the same thread, the others' on theirs
                }
                Check.isTrue(done.await(30, TimeUnit.SECONDS), "the waiters did not all finish");
                Check.isTrue(errors.isEmpty(), "errors: " + errors);
                for (int k = 0; k < keys; k++) {
                    Check.equal(new ArrayList<>(order.get(k)), List.of(0, 1, 2, 3, 4, 5, 6, 7), "grant order of key " + k);
                    KeyInfo info = s.describe("java/threads-" + k);
                    Check.equal(info.queue(), 0L, "queue of key " + k);
                    Check.equal(info.holders().size(), 0, "holders of key " + k);
                }
            }
        });
        check.test("64 threads on one session: a lock released on another thread", () -> {
            try (Session s = Session.connect(addr, SessionOptions.defaults().name("java-threads-2"))) {
                Lock l = s.acquire("java/threads-affinity");
                Thread t = new Thread(() -> {
                    try {
                        l.release();
                    } catch (Exception e) {
                        throw new RuntimeException(e);
                    }
                });
                t.start();
                t.join();
                Check.isTrue(!l.isHeld(), "released on another thread, still held");
                Check.isTrue(s.tryAcquire("java/threads-affinity").isPresent(), "the key is still held");
            }
        });
    }

    /** Polls DESCRIBE (a probe of the server's state, not a sleep) until key has n waiters, within 10 s. */
    static void awaitQueue(Session s, String key, long n) throws Exception {
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (s.describe(key).queue() != n) {
            Check.isTrue(System.nanoTime() - end < 0, key + " never had " + n + " waiters");
            Thread.onSpinWait();
        }
    }

    /** Runs every example of examples/ that the README quotes, against addr. */
    static void examples(Check check, String addr) {
        File[] files = new File("examples").listFiles((d, n) -> n.startsWith("Session") && n.endsWith(".java"));
        Check.isTrue(files != null && files.length > 0, "no session examples");
        for (File f : files) {
            check.test("example " + f.getName(), () -> {
                Path java = Path.of(System.getProperty("java.home"), "bin", "java");
                String cp = System.getProperty("java.class.path").split(File.pathSeparator)[0];
                Process p = new ProcessBuilder(java.toString(), "-cp", cp, f.getPath(), addr)
                        .redirectErrorStream(true).start();
                String out = new String(p.getInputStream().readAllBytes());
                Check.isTrue(p.waitFor(60, TimeUnit.SECONDS), "still running");
                Check.equal(p.exitValue(), 0, "exit status; output:\n" + out);
                Check.isTrue(Files.readString(Path.of("README.md")).contains(f.getName()), "the README does not name it");
            });
        }
        check.test("every Java block of the README is the code of an example", () -> {
            StringBuilder code = new StringBuilder();
            for (File f : new File("examples").listFiles((d, n) -> n.endsWith(".java"))) {
                code.append(trimmed(Files.readString(f.toPath()))).append('\n');
            }
            String readme = Files.readString(Path.of("README.md"));
            int blocks = 0;
            for (int at = readme.indexOf("```java\n"); at >= 0; at = readme.indexOf("```java\n", at + 1)) {
                String block = readme.substring(at + 8, readme.indexOf("```", at + 8));
                Check.isTrue(code.indexOf(trimmed(block)) >= 0, "a README block is in no example:\n" + block);
                blocks++;
            }
            Check.isTrue(blocks >= 3, "only " + blocks + " Java blocks in the README");
        });
    }

    /** The lines of s without their indentation, blank lines dropped. */
    static String trimmed(String s) {
        StringBuilder b = new StringBuilder();
        for (String line : s.split("\n")) {
            if (!line.isBlank()) {
                b.append(line.strip()).append('\n');
            }
        }
        return b.toString();
    }

    /** PEM keys: PKCS#8 of each algorithm is read back; a PKCS#1 key is refused with what to do. */
    static void pem(Check check) {
        for (String alg : new String[] {"RSA", "EC", "Ed25519"}) {
            check.test("PEM: a PKCS#8 " + alg + " key", () -> {
                java.security.KeyPair kp = java.security.KeyPairGenerator.getInstance(alg).generateKeyPair();
                Path f = Files.createTempFile("lc-key", ".pem");
                try {
                    Files.writeString(f, "-----BEGIN PRIVATE KEY-----\n"
                            + java.util.Base64.getMimeEncoder().encodeToString(kp.getPrivate().getEncoded())
                            + "\n-----END PRIVATE KEY-----\n");
                    Check.isTrue(Arrays.equals(Tls.privateKey(f).getEncoded(), kp.getPrivate().getEncoded()), "another key came back");
                } finally {
                    Files.delete(f);
                }
            });
        }
        check.test("PEM: a PKCS#1 key is refused", () -> {
            Path f = Files.createTempFile("lc-key", ".pem");
            try {
                Files.writeString(f, "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n");
                Throwable t = Check.thrown(() -> Tls.privateKey(f), "PKCS#1");
                Check.isTrue(t instanceof java.io.IOException && t.getMessage().contains("pkcs8"), "refusal: " + t);
            } finally {
                Files.delete(f);
            }
        });
    }

    /** SessionOptions.fromEnv against the harness's TLS server, with its CA and token from the environment. */
    static void env(Check check) {
        String addr = System.getenv("LC_TLS_ADDR");
        if (addr == null || addr.isEmpty()) {
            return;
        }
        check.test("fromEnv: LC_TOKEN and LC_CA_FILE", () -> {
            try (Session s = Session.connect(addr, SessionOptions.fromEnv().serverName("localhost").name("java-env"))) {
                s.acquire("java/env").release();
            }
            Throwable t = Check.thrown(() -> Session.connect(addr, SessionOptions.defaults()
                    .withEnv(Map.of("LC_CA_FILE", System.getenv("LC_CA_FILE"))).serverName("localhost")), "without a token");
            Check.isTrue(t instanceof SessionException.Unauthenticated, "without a token: " + t);
        });
    }

    public static void main(String[] args) throws Exception {
        Check check = new Check();
        codec(check);
        fuzz(check);
        pem(check);
        SessionFakeTest.run(check);
        env(check);
        String addr = System.getenv("LC_ADDR");
        if (addr == null || addr.isEmpty()) {
            check.test("a server to test against (LC_ADDR)", () -> {
                throw new AssertionError("LC_ADDR is not set");
            });
        } else {
            threads(check, addr);
            examples(check, addr);
        }
        System.exit(check.finish());
    }
}
