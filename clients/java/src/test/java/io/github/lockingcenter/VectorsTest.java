package io.github.lockingcenter;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** Checks the encoder and the answer table against clients/testdata/vectors.json. */
final class VectorsTest {
    private VectorsTest() {}

    static Map<String, Object> vectors() throws Exception {
        Path path = Path.of(System.getProperty("vectors", "../testdata/vectors.json"));
        return Json.obj(Json.parse(Files.readString(path)));
    }

    static Action action(Map<String, Object> v, String name) {
        int b = ((Double) Json.obj(v.get("actions")).get(name)).intValue();
        for (Action a : Action.values()) {
            if (a.wire() == b) {
                return a;
            }
        }
        throw new IllegalArgumentException("unknown action byte " + b);
    }

    /** Runs the client call for action and names its result as the vectors do. */
    static String resultOf(LockingCenterClient c, String action, byte[] key, byte[] source) {
        try {
            switch (action) {
                case "lock": c.lock(key); return "ok";
                case "trylock": return c.tryLock(key) ? "ok" : "busy";
                case "unlock": c.unlock(key); return "ok";
                case "reset-key": c.resetByKey(key); return "ok";
                case "reset-source": c.resetBySource(source); return "ok";
                default: throw new IllegalArgumentException("unknown action " + action);
            }
        } catch (LockingCenterException e) {
            return "failed";
        } catch (Exception e) {
            throw new AssertionError(action + ": " + e, e);
        }
    }

    static String utf8OrNull(byte[] b) {
        try {
            return StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(b)).toString();
        } catch (CharacterCodingException e) {
            return null;
        }
    }

    static void run(Check check) throws Exception {
        Map<String, Object> v = vectors();
        List<Object> requests = Json.arr(v.get("requests"));

        check.test("encodeRequest matches every request vector", () -> {
            Check.isTrue(!requests.isEmpty(), "no request vectors");
            for (Object o : requests) {
                Map<String, Object> r = Json.obj(o);
                Action a = action(v, (String) r.get("action"));
                Check.equal((double) a.wire(), r.get("action_byte"), (String) r.get("name"));
                byte[] got = Protocol.encodeRequest(a, Json.hex(r, "key_hex"), Json.hex(r, "source_hex"));
                Check.equal(Json.toHex(got), r.get("request_hex"), (String) r.get("name"));
            }
        });

        check.test("the client sends every vector, as bytes and as text", () -> {
            try (FakeServer server = new FakeServer(new byte[] {'+'})) {
                for (Object o : requests) {
                    Map<String, Object> r = Json.obj(o);
                    String name = (String) r.get("name");
                    byte[] key = Json.hex(r, "key_hex");
                    byte[] source = Json.hex(r, "source_hex");
                    LockingCenterClient c = LockingCenterClient.builder(server.address()).source(source).build();
                    Check.equal(resultOf(c, (String) r.get("action"), key, source), "ok", name);
                    Check.equal(Json.toHex(server.lastRequest()), r.get("request_hex"), name);
                    String keyText = utf8OrNull(key);
                    String sourceText = utf8OrNull(source);
                    if (keyText == null || sourceText == null || !"lock".equals(r.get("action"))) {
                        continue;
                    }
                    LockingCenterClient.builder(server.address()).source(sourceText).build().lock(keyText);
                    Check.equal(Json.toHex(server.lastRequest()), r.get("request_hex"), name + " as text");
                }
            }
        });

        check.test("interpretAnswer matches every answer vector", () -> {
            for (Object o : Json.arr(v.get("answers"))) {
                Map<String, Object> a = Json.obj(o);
                Action act = action(v, (String) a.get("action"));
                Outcome got = Protocol.interpretAnswer(act, Json.hex(a, "answer_hex")[0]);
                Check.equal(got.name().toLowerCase(), a.get("result"), act + " " + a.get("answer_hex"));
            }
        });

        check.test("the client reports every answer vector", () -> {
            for (Object o : Json.arr(v.get("answers"))) {
                Map<String, Object> a = Json.obj(o);
                try (FakeServer server = new FakeServer(Json.hex(a, "answer_hex"))) {
                    LockingCenterClient c = LockingCenterClient.builder(server.address()).source("vectors").build();
                    String got = resultOf(c, (String) a.get("action"), "k".getBytes(), "vectors".getBytes());
                    Check.equal(got, a.get("result"), a.get("action") + " " + a.get("answer_hex"));
                }
            }
        });

        check.test("invalid keys and sources are refused before connecting", () -> {
            LockingCenterClient c = new LockingCenterClient(FakeServer.deadAddress());
            for (Object o : Json.arr(v.get("invalid_keys"))) {
                Map<String, Object> k = Json.obj(o);
                byte[] key = Json.hex(k, "key_hex");
                List<Check.Body> calls = new ArrayList<>();
                calls.add(() -> c.lock(key));
                calls.add(() -> c.tryLock(key));
                calls.add(() -> c.unlock(key));
                calls.add(() -> c.waitFor(key));
                calls.add(() -> c.resetByKey(key));
                for (Check.Body call : calls) {
                    Throwable t = Check.thrown(call, "key " + k.get("name"));
                    Check.isTrue(t instanceof IllegalArgumentException, "key " + k.get("name") + ": " + t);
                }
            }
            for (Object o : Json.arr(v.get("invalid_sources"))) {
                Map<String, Object> s = Json.obj(o);
                byte[] source = Json.hex(s, "source_hex");
                Throwable t = Check.thrown(() -> c.resetBySource(source), "source " + s.get("name"));
                Check.isTrue(t instanceof IllegalArgumentException, "source " + s.get("name") + ": " + t);
                t = Check.thrown(() -> LockingCenterClient.builder(c.address()).source(source).build(), "builder");
                Check.isTrue(t instanceof IllegalArgumentException, "builder source " + s.get("name") + ": " + t);
            }
        });
    }
}
