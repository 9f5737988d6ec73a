package io.github.lockingcenter;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** A small JSON reader for the shared vectors file: objects become Maps, arrays Lists, numbers Doubles. */
final class Json {
    private final String s;
    private int i;

    private Json(String s) {
        this.s = s;
    }

    static Object parse(String text) {
        Json p = new Json(text);
        Object v = p.value();
        p.ws();
        if (p.i != text.length()) {
            throw p.error("trailing characters");
        }
        return v;
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> obj(Object o) {
        return (Map<String, Object>) o;
    }

    @SuppressWarnings("unchecked")
    static List<Object> arr(Object o) {
        return (List<Object>) o;
    }

    /** Decodes the hex string member {@code name}; an absent member is empty. */
    static byte[] hex(Map<String, Object> m, String name) {
        String h = (String) m.getOrDefault(name, "");
        byte[] out = new byte[h.length() / 2];
        for (int k = 0; k < out.length; k++) {
            out[k] = (byte) Integer.parseInt(h.substring(2 * k, 2 * k + 2), 16);
        }
        return out;
    }

    static String toHex(byte[] b) {
        StringBuilder sb = new StringBuilder();
        for (byte x : b) {
            sb.append(String.format("%02x", x & 0xff));
        }
        return sb.toString();
    }

    private IllegalArgumentException error(String what) {
        return new IllegalArgumentException("json: " + what + " at " + i);
    }

    private void ws() {
        while (i < s.length() && Character.isWhitespace(s.charAt(i))) {
            i++;
        }
    }

    private char peek() {
        ws();
        if (i >= s.length()) {
            throw error("unexpected end");
        }
        return s.charAt(i);
    }

    private void eat(char c) {
        if (peek() != c) {
            throw error("want '" + c + "'");
        }
        i++;
    }

    private Object value() {
        char c = peek();
        if (c == '{') {
            Map<String, Object> m = new LinkedHashMap<>();
            eat('{');
            if (peek() == '}') {
                i++;
                return m;
            }
            do {
                String k = string();
                eat(':');
                m.put(k, value());
            } while (peek() == ',' && i++ >= 0);
            eat('}');
            return m;
        }
        if (c == '[') {
            List<Object> a = new ArrayList<>();
            eat('[');
            if (peek() == ']') {
                i++;
                return a;
            }
            do {
                a.add(value());
            } while (peek() == ',' && i++ >= 0);
            eat(']');
            return a;
        }
        if (c == '"') {
            return string();
        }
        int start = i;
        while (i < s.length() && ",]} \t\r\n".indexOf(s.charAt(i)) < 0) {
            i++;
        }
        String lit = s.substring(start, i);
        switch (lit) {
            case "null":
                return null;
            case "true":
                return Boolean.TRUE;
            case "false":
                return Boolean.FALSE;
            default:
                return Double.parseDouble(lit);
        }
    }

    private String string() {
        eat('"');
        StringBuilder sb = new StringBuilder();
        while (true) {
            char c = s.charAt(i++);
            if (c == '"') {
                return sb.toString();
            }
            if (c != '\\') {
                sb.append(c);
                continue;
            }
            char e = s.charAt(i++);
            switch (e) {
                case 'n': sb.append('\n'); break;
                case 't': sb.append('\t'); break;
                case 'r': sb.append('\r'); break;
                case 'b': sb.append('\b'); break;
                case 'f': sb.append('\f'); break;
                case 'u':
                    sb.append((char) Integer.parseInt(s.substring(i, i + 4), 16));
                    i += 4;
                    break;
                default: sb.append(e);
            }
        }
    }
}
