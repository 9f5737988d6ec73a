package io.github.lockingcenter;

import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;

/** Strings to the bytes the protocol carries. */
final class Codec {
    private Codec() {}

    /** The UTF-8 of s; IllegalArgumentException when s is not valid Unicode (a lone surrogate). */
    static byte[] utf8(String s, String what) {
        try {
            ByteBuffer b = StandardCharsets.UTF_8.newEncoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .encode(CharBuffer.wrap(s));
            byte[] out = new byte[b.remaining()];
            b.get(out);
            return out;
        } catch (CharacterCodingException e) {
            throw new IllegalArgumentException(what + " is not valid Unicode", e);
        }
    }

    /** The key's bytes, checked: 1 to 127. */
    static byte[] key(String key) {
        byte[] b = utf8(key, "key");
        Protocol.checkKey(b);
        return b;
    }
}
