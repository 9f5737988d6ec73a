package io.github.lockingcenter;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.function.IntFunction;

/**
 * A stand-in for the mutex port on 127.0.0.1, for tests: it reads one whole
 * request per connection and answers a fixed byte, or with a null answer
 * never answers and counts down {@link #peerClosed} when the client goes.
 * The answer may also depend on the request's action byte, and wait for a
 * gate to open.
 */
final class FakeServer implements AutoCloseable {
    final List<byte[]> requests = new CopyOnWriteArrayList<>();
    final CountDownLatch received = new CountDownLatch(1);
    final CountDownLatch peerClosed = new CountDownLatch(1);
    private final ServerSocket listener;
    private final Thread thread;

    FakeServer(byte[] answer) throws IOException {
        this(action -> answer, null);
    }

    /** Answers answerFor(action byte), once gate (if not null) is open. */
    FakeServer(IntFunction<byte[]> answerFor, CountDownLatch gate) throws IOException {
        listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        thread = new Thread(() -> serve(answerFor, gate), "fake-server");
        thread.setDaemon(true);
        thread.start();
    }

    String address() {
        return "127.0.0.1:" + listener.getLocalPort();
    }

    byte[] lastRequest() {
        return requests.isEmpty() ? new byte[0] : requests.get(requests.size() - 1);
    }

    /** Length of the request at the start of b, or -1 while incomplete. */
    static int requestLength(byte[] b) {
        if (b.length == 0) {
            return -1;
        }
        int fields = b[0] == 1 || b[0] == 5 ? 2 : (b[0] >= 2 && b[0] <= 4 ? 1 : 0);
        int n = 1;
        for (int f = 0; f < fields; f++) {
            if (b.length <= n) {
                return -1;
            }
            n += 1 + (b[n] & 0xff);
        }
        return b.length >= n ? n : -1;
    }

    private void serve(IntFunction<byte[]> answerFor, CountDownLatch gate) {
        while (true) {
            try (Socket conn = listener.accept()) {
                InputStream in = conn.getInputStream();
                ByteArrayOutputStream buf = new ByteArrayOutputStream();
                byte[] chunk = new byte[512];
                while (requestLength(buf.toByteArray()) < 0) {
                    int n = in.read(chunk);
                    if (n < 0) {
                        break;
                    }
                    buf.write(chunk, 0, n);
                }
                byte[] request = buf.toByteArray();
                requests.add(request);
                received.countDown();
                byte[] answer = request.length == 0 ? null : answerFor.apply(request[0]);
                if (answer != null) {
                    if (gate != null) {
                        gate.await();
                    }
                    conn.getOutputStream().write(answer);
                    continue;
                }
                try {
                    while (in.read(chunk) >= 0) {
                        // drain until the client closes
                    }
                } catch (IOException e) {
                    // reset by the client: it went away all the same
                }
                peerClosed.countDown();
            } catch (IOException e) {
                return;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }

    @Override
    public void close() throws IOException {
        listener.close();
    }

    /** A 127.0.0.1 address where nothing listens. */
    static String deadAddress() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return "127.0.0.1:" + s.getLocalPort();
        }
    }
}
