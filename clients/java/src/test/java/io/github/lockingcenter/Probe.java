package io.github.lockingcenter;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;

/** The conformance probe's commands (clients/conformance/SESSIONS.md), run as processes. */
final class Probe {
    private final String path;

    Probe(String path) {
        this.path = path;
    }

    /** Runs the probe and returns its standard output; fails on a non-zero exit. */
    String run(String... args) throws Exception {
        List<String> cmd = new ArrayList<>();
        cmd.add(path);
        cmd.addAll(List.of(args));
        Process p = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        int code = p.waitFor();
        if (code != 0) {
            throw new SessionConformance.Failure("probe " + String.join(" ", args) + ": exit " + code);
        }
        return out;
    }

    /** Blocks until key has exactly n parked waiters (the probe gives up after 10 s). */
    void waiters(String manager, String key, int n) throws Exception {
        run("waiters", manager, key, Integer.toString(n));
    }

    /** The holders of key: token, session and, when there is one, the note. */
    List<String[]> holders(String manager, String key) throws Exception {
        List<String[]> out = new ArrayList<>();
        for (String line : run("holders", manager, key).split("\n")) {
            if (!line.isEmpty()) {
                out.add(line.split(" ", 3));
            }
        }
        return out;
    }

    static String show(List<String[]> hs) {
        StringBuilder b = new StringBuilder("[");
        for (String[] h : hs) {
            b.append(b.length() > 1 ? "; " : "").append(String.join(" ", h));
        }
        return b.append("]").toString();
    }

    /** A probe session-lock process: a Go session that waits for a key and holds it until released. */
    static final class SessionLock {
        private final Process p;
        private final Thread reader;

        SessionLock(Process p, Consumer<Exception> granted) {
            this.p = p;
            reader = new Thread(() -> {
                try {
                    BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
                    String line = r.readLine();
                    granted.accept(line != null && line.startsWith("granted ") ? null
                            : new IOException("probe session-lock printed " + line));
                    while (r.readLine() != null) {
                        // drained until it exits
                    }
                } catch (IOException e) {
                    granted.accept(e);
                }
            });
            reader.setDaemon(true);
            reader.start();
        }

        /** Makes it release the key and waits for its exit. */
        void release() throws Exception {
            p.getOutputStream().close();
            if (p.waitFor() != 0) {
                throw new IOException("probe session-lock exited " + p.exitValue());
            }
        }

        void stop() {
            p.destroyForcibly();
        }
    }

    /** Starts probe session-lock on key at addr; granted hears of its grant (null) or its failure. */
    SessionLock sessionLock(String addr, String key, Consumer<Exception> granted) throws IOException {
        Process p = new ProcessBuilder(path, "session-lock", addr, key).redirectError(ProcessBuilder.Redirect.INHERIT).start();
        return new SessionLock(p, granted);
    }
}
