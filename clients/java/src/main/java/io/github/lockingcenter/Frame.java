package io.github.lockingcenter;

import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * One frame of the session protocol (docs/protocol.md, "Mutex port, session
 * protocol (v2)"): {@code [length u32][type u8][id u64][fields]}, each field
 * {@code [tag u8][size u16][value]}, integers big-endian and unsigned.
 * {@link #encode} writes the bytes; {@link #decode} and {@link #read} check
 * them as the server does (length, fields within their frame, a tag once
 * except the list tags, fixed sizes and byte limits) and throw
 * {@link SessionException.Protocol} for anything else.
 */
final class Frame {
    static final byte[] PREFACE = {0x4C, 0x43, 0x2F, 0x32};
    static final int MAX_LENGTH = 65_536;
    static final int HEAD = 9;

    static final int HELLO = 0x01, RESUME = 0x02, ACQUIRE = 0x03, RELEASE = 0x04, RENEW = 0x05, CANCEL = 0x06,
            DESCRIBE = 0x07, PING = 0x08, CLOSE = 0x09, WATCH = 0x0A;
    static final int WELCOME = 0x81, GRANTED = 0x82, OK = 0x83, REFUSED = 0x84, LOST = 0x85, INFO = 0x86,
            GOODBYE = 0x87, EVENT = 0x88, MORE = 0x89;

    static final int KEY = 0x01, NAME = 0x02, TTL = 0x03, CREDENTIAL = 0x04, SESSION = 0x05, SECRET = 0x06,
            TOKEN = 0x07, WAIT = 0x08, LEASE = 0x09, DELAY = 0x0A, TARGET = 0x0B, SERVER = 0x0C, CODE = 0x0D,
            MESSAGE = 0x0E, QUEUE = 0x0F, APPLIED = 0x10, LEFT = 0x11, HELD_MS = 0x12, KEEPALIVE = 0x13,
            REQUEST = 0x14, MODE = 0x15, LIMIT = 0x16, PRIORITY = 0x17, REENTRANT = 0x18, OWNER = 0x19,
            COUNT = 0x1A, LEADER = 0x1B, EVENT_KIND = 0x1C, AT = 0x1D, MORE_FLAG = 0x1E, NOTE = 0x1F,
            HELD = 0x20, PARKED = 0x21, HOLDER = 0x22, LAPSE = 0x23;

    static final int SECRET_LENGTH = 16;

    /** Size of each fixed-size field, 0 for the others. */
    private static final int[] FIXED = new int[256];
    /** Longest value of each byte-string field, 0 for no limit of its own. */
    private static final int[] LIMIT_OF = new int[256];

    static {
        for (int t : new int[] {CODE, MODE, REENTRANT, EVENT_KIND, MORE_FLAG, LAPSE}) {
            FIXED[t] = 1;
        }
        for (int t : new int[] {TTL, WAIT, LEASE, DELAY, QUEUE, LEFT, HELD_MS, KEEPALIVE, LIMIT, PRIORITY, COUNT}) {
            FIXED[t] = 4;
        }
        for (int t : new int[] {SESSION, TOKEN, TARGET, APPLIED, REQUEST, AT}) {
            FIXED[t] = 8;
        }
        FIXED[SECRET] = SECRET_LENGTH;
        LIMIT_OF[KEY] = 127;
        LIMIT_OF[NAME] = 127;
        LIMIT_OF[OWNER] = 127;
        LIMIT_OF[SERVER] = 255;
        LIMIT_OF[LEADER] = 255;
        LIMIT_OF[CREDENTIAL] = 1024;
        LIMIT_OF[MESSAGE] = 1024;
        LIMIT_OF[NOTE] = 1024;
    }

    /** One field: its tag and its value's bytes. */
    record Field(int tag, byte[] value) {
        static Field bytes(int tag, byte[] v) {
            return new Field(tag, v);
        }

        static Field str(int tag, String v) {
            return new Field(tag, v.getBytes(StandardCharsets.UTF_8));
        }

        static Field u8(int tag, int v) {
            return new Field(tag, new byte[] {(byte) v});
        }

        static Field u32(int tag, long v) {
            return new Field(tag, new byte[] {(byte) (v >>> 24), (byte) (v >>> 16), (byte) (v >>> 8), (byte) v});
        }

        static Field u64(int tag, long v) {
            byte[] b = new byte[8];
            for (int i = 0; i < 8; i++) {
                b[i] = (byte) (v >>> (56 - 8 * i));
            }
            return new Field(tag, b);
        }
    }

    final int type;
    final long id;
    final List<Field> fields;

    Frame(int type, long id, List<Field> fields) {
        this.type = type;
        this.id = id;
        this.fields = fields;
    }

    /** The value of tag, or null when the frame has none. */
    byte[] get(int tag) {
        for (Field f : fields) {
            if (f.tag == tag) {
                return f.value;
            }
        }
        return null;
    }

    boolean has(int tag) {
        return get(tag) != null;
    }

    /** The unsigned integer of tag (a long holding up to 64 bits), or dflt when absent. */
    long uint(int tag, long dflt) {
        byte[] v = get(tag);
        if (v == null) {
            return dflt;
        }
        long n = 0;
        for (byte b : v) {
            n = n << 8 | (b & 0xff);
        }
        return n;
    }

    String string(int tag) {
        byte[] v = get(tag);
        return v == null ? "" : new String(v, StandardCharsets.UTF_8);
    }

    /** The list items of tag, in order, each a frame of its own fields (type and id 0). */
    List<Frame> items(int tag) throws SessionException.Protocol {
        List<Frame> out = new ArrayList<>();
        for (Field f : fields) {
            if (f.tag == tag) {
                out.add(new Frame(0, 0, parseFields(f.value, 0, f.value.length)));
            }
        }
        return out;
    }

    /** Appends the bytes of a frame to out. */
    static void encode(ByteArrayOutputStream out, int type, long id, List<Field> fields) {
        int n = HEAD;
        for (Field f : fields) {
            n += 3 + f.value.length;
        }
        byte[] b = new byte[4 + n];
        putInt(b, 0, n);
        b[4] = (byte) type;
        putLong(b, 5, id);
        int at = 4 + HEAD;
        for (Field f : fields) {
            b[at] = (byte) f.tag;
            b[at + 1] = (byte) (f.value.length >>> 8);
            b[at + 2] = (byte) f.value.length;
            System.arraycopy(f.value, 0, b, at + 3, f.value.length);
            at += 3 + f.value.length;
        }
        out.write(b, 0, b.length);
    }

    static byte[] encode(int type, long id, List<Field> fields) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        encode(out, type, id, fields);
        return out.toByteArray();
    }

    /** Decodes exactly one whole frame. */
    static Frame decode(byte[] b) throws SessionException.Protocol {
        if (b.length < 4) {
            throw protocol("a frame of " + b.length + " bytes");
        }
        long n = checkLength(getInt(b, 0));
        if (b.length != 4 + n) {
            throw protocol("a frame of length " + n + " in " + b.length + " bytes");
        }
        return body(b, 4, (int) n);
    }

    /**
     * Reads the next frame from in; an EOFException when the stream ends
     * between frames or inside one.
     */
    static Frame read(InputStream in, byte[] head) throws IOException {
        readFully(in, head, 0, 4);
        int n = (int) checkLength(getInt(head, 0));
        byte[] b = new byte[n];
        readFully(in, b, 0, n);
        return body(b, 0, n);
    }

    private static void readFully(InputStream in, byte[] b, int off, int n) throws IOException {
        while (n > 0) {
            int got = in.read(b, off, n);
            if (got < 0) {
                throw new EOFException("the connection ended");
            }
            off += got;
            n -= got;
        }
    }

    private static long checkLength(long n) throws SessionException.Protocol {
        if (n < HEAD || n > MAX_LENGTH) {
            throw protocol("frame length " + n + ", want 9 to " + MAX_LENGTH);
        }
        return n;
    }

    private static Frame body(byte[] b, int off, int n) throws SessionException.Protocol {
        int type = b[off] & 0xff;
        long id = getLong(b, off + 1);
        return new Frame(type, id, parseFields(b, off + HEAD, off + n));
    }

    static List<Field> parseFields(byte[] b, int at, int end) throws SessionException.Protocol {
        List<Field> out = new ArrayList<>();
        boolean[] seen = new boolean[256];
        while (at < end) {
            if (end - at < 3) {
                throw protocol("a field header cut short");
            }
            int tag = b[at] & 0xff;
            int size = (b[at + 1] & 0xff) << 8 | (b[at + 2] & 0xff);
            if (size > end - at - 3) {
                throw protocol(String.format("field 0x%02x runs past its frame", tag));
            }
            if (FIXED[tag] != 0 && size != FIXED[tag]) {
                throw protocol(String.format("field 0x%02x of %d bytes, want %d", tag, size, FIXED[tag]));
            }
            if (LIMIT_OF[tag] != 0 && size > LIMIT_OF[tag]) {
                throw protocol(String.format("field 0x%02x of %d bytes, over its limit of %d", tag, size, LIMIT_OF[tag]));
            }
            boolean list = tag == HELD || tag == PARKED || tag == HOLDER;
            if (seen[tag] && !list) {
                throw protocol(String.format("field 0x%02x given twice", tag));
            }
            seen[tag] = true;
            byte[] v = new byte[size];
            System.arraycopy(b, at + 3, v, 0, size);
            if (list) {
                parseFields(v, 0, size); // an item must parse too
            }
            out.add(new Field(tag, v));
            at += 3 + size;
        }
        return Collections.unmodifiableList(out);
    }

    private static SessionException.Protocol protocol(String what) {
        return new SessionException.Protocol("malformed frame from the server: " + what);
    }

    static long getInt(byte[] b, int at) {
        return (b[at] & 0xffL) << 24 | (b[at + 1] & 0xff) << 16 | (b[at + 2] & 0xff) << 8 | (b[at + 3] & 0xff);
    }

    static long getLong(byte[] b, int at) {
        long n = 0;
        for (int i = 0; i < 8; i++) {
            n = n << 8 | (b[at + i] & 0xff);
        }
        return n;
    }

    private static void putInt(byte[] b, int at, int v) {
        b[at] = (byte) (v >>> 24);
        b[at + 1] = (byte) (v >>> 16);
        b[at + 2] = (byte) (v >>> 8);
        b[at + 3] = (byte) v;
    }

    private static void putLong(byte[] b, int at, long v) {
        for (int i = 0; i < 8; i++) {
            b[at + i] = (byte) (v >>> (56 - 8 * i));
        }
    }

    /** The protocol's name of a code ("busy", "stale_token", ...). */
    static String codeName(long code) {
        String[] names = {null, "busy", "timeout", "cancelled", "reset", "stale_token", "duplicate", "bad_request",
            "unsupported", "session_ended", "not_durable", "lease_expired", "session_expired", "protocol_error",
            "unknown_session", "shutting_down", "deadlock", "limit_mismatch", "upgrade", "not_leader",
            "slow_consumer", "unauthenticated", "forbidden", "rate_limited", "over_limit"};
        return code > 0 && code < names.length ? names[(int) code] : "code " + code;
    }
}
