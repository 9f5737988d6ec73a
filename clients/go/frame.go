package lockingcenter

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
)

// The session protocol's bytes (docs/protocol.md, "Mutex port, session
// protocol (v2)"): a connection begins with the preface, then frames go
// both ways. A frame is [length u32][type u8][id u64][fields], the length
// counting the bytes after itself (9 to maxFrame); a field is
// [tag u8][size u16][value]. Integers are big-endian.

// preface is the first thing a session connection sends.
const preface = "LC/2"

// maxFrame bounds a frame's length field; frameHead is what it counts
// before the fields.
const (
	maxFrame  = 65536
	frameHead = 9
)

// Frame types.
const (
	frameHello    byte = 0x01
	frameResume   byte = 0x02
	frameAcquire  byte = 0x03
	frameRelease  byte = 0x04
	frameRenew    byte = 0x05
	frameCancel   byte = 0x06
	frameDescribe byte = 0x07
	framePing     byte = 0x08
	frameClose    byte = 0x09
	frameWatch    byte = 0x0A

	frameWelcome byte = 0x81
	frameGranted byte = 0x82
	frameOK      byte = 0x83
	frameRefused byte = 0x84
	frameLost    byte = 0x85
	frameInfo    byte = 0x86
	frameGoodbye byte = 0x87
	frameEvent   byte = 0x88
	frameMore    byte = 0x89
)

// Field tags.
const (
	tagKey        byte = 0x01
	tagName       byte = 0x02
	tagTTL        byte = 0x03
	tagCredential byte = 0x04
	tagSession    byte = 0x05
	tagSecret     byte = 0x06
	tagToken      byte = 0x07
	tagWait       byte = 0x08
	tagLease      byte = 0x09
	tagDelay      byte = 0x0A
	tagTarget     byte = 0x0B
	tagServer     byte = 0x0C
	tagCode       byte = 0x0D
	tagMessage    byte = 0x0E
	tagQueue      byte = 0x0F
	tagApplied    byte = 0x10
	tagLeft       byte = 0x11
	tagHeldFor    byte = 0x12
	tagKeepalive  byte = 0x13
	tagRequest    byte = 0x14
	tagMode       byte = 0x15
	tagLimit      byte = 0x16
	tagPriority   byte = 0x17
	tagReentrant  byte = 0x18
	tagOwner      byte = 0x19
	tagCount      byte = 0x1A
	tagLeader     byte = 0x1B
	tagEvent      byte = 0x1C
	tagAt         byte = 0x1D
	tagMore       byte = 0x1E
	tagNote       byte = 0x1F
	tagHeld       byte = 0x20
	tagParked     byte = 0x21
	tagHolder     byte = 0x22
	tagLapse      byte = 0x23
)

// secretLen is the size of a session's resume secret.
const secretLen = 16

// fixedSize gives the value size of the tags of fixed size; a frame from
// the server with another size for one of them is malformed.
var fixedSize = [256]uint8{
	tagTTL: 4, tagSession: 8, tagSecret: secretLen, tagToken: 8, tagWait: 4, tagLease: 4, tagDelay: 4,
	tagTarget: 8, tagCode: 1, tagQueue: 4, tagApplied: 8, tagLeft: 4, tagHeldFor: 4, tagKeepalive: 4,
	tagRequest: 8, tagMode: 1, tagLimit: 4, tagPriority: 4, tagReentrant: 1, tagCount: 4,
	tagEvent: 1, tagAt: 8, tagMore: 1,
}

// Codes: why a request was refused, a lock lost or a connection ended.
const (
	codeBusy            = 1
	codeTimeout         = 2
	codeCancelled       = 3
	codeReset           = 4
	codeStaleToken      = 5
	codeDuplicate       = 6
	codeBadRequest      = 7
	codeUnsupported     = 8
	codeSessionEnded    = 9
	codeNotDurable      = 10
	codeLeaseExpired    = 11
	codeSessionExpired  = 12
	codeProtocolError   = 13
	codeUnknownSession  = 14
	codeShuttingDown    = 15
	codeDeadlock        = 16
	codeLimitMismatch   = 17
	codeUpgrade         = 18
	codeNotLeader       = 19
	codeSlowConsumer    = 20
	codeUnauthenticated = 21
	codeForbidden       = 22
	codeRateLimited     = 23
	codeOverLimit       = 24
)

var codeNames = [...]string{
	codeBusy: "busy", codeTimeout: "timeout", codeCancelled: "cancelled", codeReset: "reset",
	codeStaleToken: "stale_token", codeDuplicate: "duplicate", codeBadRequest: "bad_request",
	codeUnsupported: "unsupported", codeSessionEnded: "session_ended", codeNotDurable: "not_durable",
	codeLeaseExpired: "lease_expired", codeSessionExpired: "session_expired",
	codeProtocolError: "protocol_error", codeUnknownSession: "unknown_session",
	codeShuttingDown: "shutting_down", codeDeadlock: "deadlock", codeLimitMismatch: "limit_mismatch",
	codeUpgrade: "upgrade", codeNotLeader: "not_leader", codeSlowConsumer: "slow_consumer",
	codeUnauthenticated: "unauthenticated", codeForbidden: "forbidden", codeRateLimited: "rate_limited",
	codeOverLimit: "over_limit",
}

// codeName returns a code's name as docs/protocol.md spells it.
func codeName(c uint64) string {
	if c < uint64(len(codeNames)) && codeNames[c] != "" {
		return codeNames[c]
	}
	return fmt.Sprintf("code %d", c)
}

// field is one field of a frame. A decoded field's value aliases the
// bytes it was decoded from.
type field struct {
	tag   byte
	value []byte
}

// frame is one frame, either direction.
type frame struct {
	typ    byte
	id     uint64
	fields []field
}

func strField(tag byte, v string) field { return field{tag, []byte(v)} }
func u8Field(tag byte, v uint8) field   { return field{tag, []byte{v}} }
func u32Field(tag byte, v uint32) field { return field{tag, binary.BigEndian.AppendUint32(nil, v)} }
func u64Field(tag byte, v uint64) field { return field{tag, binary.BigEndian.AppendUint64(nil, v)} }

// appendFrame appends the bytes of f to b. It checks nothing: callers
// keep values within their limits.
func appendFrame(b []byte, f frame) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0, f.typ)
	b = binary.BigEndian.AppendUint64(b, f.id)
	b = appendFields(b, f.fields)
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

// appendFields appends a sequence of fields, as a frame or a list item
// holds them.
func appendFields(b []byte, fields []field) []byte {
	for _, f := range fields {
		b = append(b, f.tag)
		b = binary.BigEndian.AppendUint16(b, uint16(len(f.value)))
		b = append(b, f.value...)
	}
	return b
}

// parseFrame decodes the frame at the start of b. It returns the bytes
// used, 0 when b holds only part of a frame (its first 4 bytes, once in,
// give the whole length, which is then already checked). The errors wrap
// ErrProtocol: a length outside 9..maxFrame, a field running past its
// frame, or a field of fixed size with a value of another size.
func parseFrame(b []byte, f *frame) (int, error) {
	if len(b) < 4 {
		return 0, nil
	}
	n := binary.BigEndian.Uint32(b)
	if n < frameHead || n > maxFrame {
		return 0, fmt.Errorf("%w: frame length %d", ErrProtocol, n)
	}
	if len(b) < 4+int(n) {
		return 0, nil
	}
	f.typ = b[4]
	f.id = binary.BigEndian.Uint64(b[5:13])
	var err error
	if f.fields, err = parseFields(b[13:4+n], f.fields[:0]); err != nil {
		return 0, err
	}
	return 4 + int(n), nil
}

// parseFields decodes a sequence of fields and appends them to out.
func parseFields(b []byte, out []field) ([]field, error) {
	for len(b) > 0 {
		if len(b) < 3 {
			return nil, fmt.Errorf("%w: a field header cut short", ErrProtocol)
		}
		tag, size := b[0], int(binary.BigEndian.Uint16(b[1:3]))
		if size > len(b)-3 {
			return nil, fmt.Errorf("%w: field %#02x runs past its frame", ErrProtocol, tag)
		}
		if want := fixedSize[tag]; want != 0 && size != int(want) {
			return nil, fmt.Errorf("%w: field %#02x of %d bytes, want %d", ErrProtocol, tag, size, want)
		}
		out = append(out, field{tag, b[3 : 3+size]})
		b = b[3+size:]
	}
	return out, nil
}

// get returns the value of the first field tagged tag.
func (f *frame) get(tag byte) ([]byte, bool) {
	for _, fl := range f.fields {
		if fl.tag == tag {
			return fl.value, true
		}
	}
	return nil, false
}

// uint returns the field tagged tag as an unsigned integer (its size was
// checked when the frame was parsed).
func (f *frame) uint(tag byte) (uint64, bool) {
	v, ok := f.get(tag)
	var n uint64
	for _, c := range v {
		n = n<<8 | uint64(c)
	}
	return n, ok
}

// items decodes every list item tagged tag.
func (f *frame) items(tag byte) ([]frame, error) {
	var out []frame
	for _, fl := range f.fields {
		if fl.tag != tag {
			continue
		}
		fields, err := parseFields(fl.value, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, frame{fields: fields})
	}
	return out, nil
}

// frameReader reads frames from a connection into one buffer. A frame it
// returns aliases the buffer until the next call.
type frameReader struct {
	r   io.Reader
	buf []byte // buf[off:] is not parsed yet
	off int
	f   frame
}

// initialRead is the buffer of an idle connection; it grows for a larger
// frame.
const initialRead = 4096

// next returns the next frame, reading as much as it needs.
func (fr *frameReader) next() (*frame, error) {
	for {
		n, err := parseFrame(fr.buf[fr.off:], &fr.f)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			fr.off += n
			return &fr.f, nil
		}
		rest := fr.buf[fr.off:]
		need := initialRead
		if len(rest) >= 4 {
			need = max(need, 4+int(binary.BigEndian.Uint32(rest)))
		}
		if cap(fr.buf) < need {
			nb := make([]byte, len(rest), need)
			copy(nb, rest)
			fr.buf = nb
		} else {
			fr.buf = fr.buf[:copy(fr.buf[:cap(fr.buf)], rest)]
		}
		fr.off = 0
		m, err := fr.r.Read(fr.buf[len(fr.buf):cap(fr.buf)])
		fr.buf = fr.buf[:len(fr.buf)+m]
		if m == 0 && err == nil {
			err = io.ErrNoProgress
		}
		if m == 0 {
			return nil, err
		}
	}
}

// answer returns the next answer whole: the next frame, or, when it says
// more (docs/protocol.md, Long answers), that frame with the fields of the
// MORE frames that follow it, up to the last, joined to its own, without
// the field more. A joined answer owns its bytes; a single frame aliases
// the buffer as next's does. A GOODBYE inside an answer is returned in its
// place. Errors: those of next, or ErrProtocol for a MORE frame that
// continues no answer, or another frame inside one.
func (fr *frameReader) answer() (*frame, error) {
	f, err := fr.next()
	if err != nil {
		return nil, err
	}
	if f.typ == frameMore {
		return nil, fmt.Errorf("%w: a MORE frame (id %d) that continues no answer", ErrProtocol, f.id)
	}
	if !f.more() {
		return f, nil
	}
	whole := &frame{typ: f.typ, id: f.id}
	for {
		more := f.more()
		for _, fl := range f.fields {
			if fl.tag != tagMore {
				whole.fields = append(whole.fields, field{fl.tag, bytes.Clone(fl.value)})
			}
		}
		if !more {
			return whole, nil
		}
		if f, err = fr.next(); err != nil {
			return nil, err
		}
		if f.typ == frameGoodbye {
			return f, nil // the connection ends: the answer never came
		}
		if f.typ != frameMore || f.id != whole.id {
			return nil, fmt.Errorf("%w: frame %#02x (id %d) inside the answer to %d", ErrProtocol, f.typ, f.id, whole.id)
		}
	}
}

// more reports whether the answer of f goes on in a MORE frame.
func (f *frame) more() bool {
	v, ok := f.uint(tagMore)
	return ok && v != 0
}
