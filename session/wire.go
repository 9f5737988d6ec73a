package session

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Preface is what a client of the session protocol sends first. No v1
// request begins with its first byte.
const Preface = "LC/2"

// MaxFrame bounds a frame's length field: the bytes after it.
const MaxFrame = 65536

// frameHeader is the size of a frame's type and id, which the length
// counts; the length field itself is 4 bytes more.
const frameHeader = 9

// Type is a frame's type byte.
type Type uint8

// Frame types; see docs/protocol.md.
const (
	TypeHello    Type = 0x01
	TypeResume   Type = 0x02
	TypeAcquire  Type = 0x03
	TypeRelease  Type = 0x04
	TypeRenew    Type = 0x05
	TypeCancel   Type = 0x06
	TypeDescribe Type = 0x07
	TypePing     Type = 0x08
	TypeClose    Type = 0x09
	TypeWatch    Type = 0x0A

	TypeWelcome Type = 0x81
	TypeGranted Type = 0x82
	TypeOK      Type = 0x83
	TypeRefused Type = 0x84
	TypeLost    Type = 0x85
	TypeInfo    Type = 0x86
	TypeGoodbye Type = 0x87
	TypeEvent   Type = 0x88
	TypeMore    Type = 0x89
)

// Tag names a field.
type Tag uint8

// Field tags; see docs/protocol.md.
const (
	TagKey        Tag = 0x01
	TagName       Tag = 0x02
	TagTTL        Tag = 0x03
	TagCredential Tag = 0x04
	TagSession    Tag = 0x05
	TagSecret     Tag = 0x06
	TagToken      Tag = 0x07
	TagWait       Tag = 0x08
	TagLease      Tag = 0x09
	TagDelay      Tag = 0x0A
	TagTarget     Tag = 0x0B
	TagServer     Tag = 0x0C
	TagCode       Tag = 0x0D
	TagMessage    Tag = 0x0E
	TagQueue      Tag = 0x0F
	TagApplied    Tag = 0x10
	TagLeft       Tag = 0x11
	TagHeldFor    Tag = 0x12
	TagKeepalive  Tag = 0x13
	TagRequest    Tag = 0x14
	TagMode       Tag = 0x15
	TagLimit      Tag = 0x16
	TagPriority   Tag = 0x17
	TagReentrant  Tag = 0x18
	TagOwner      Tag = 0x19
	TagCount      Tag = 0x1A
	TagLeader     Tag = 0x1B
	TagEvent      Tag = 0x1C
	TagAt         Tag = 0x1D
	TagMore       Tag = 0x1E
	TagNote       Tag = 0x1F
	TagHeld       Tag = 0x20
	TagParked     Tag = 0x21
	TagHolder     Tag = 0x22
	TagLapse      Tag = 0x23
)

// SecretLen is the size of a session's resume secret.
const SecretLen = 16

// fixedSize is the value size of each tag of fixed size; 0 for the others.
var fixedSize = [256]int{
	TagTTL: 4, TagSession: 8, TagSecret: SecretLen, TagToken: 8, TagWait: 4, TagLease: 4, TagDelay: 4,
	TagTarget: 8, TagCode: 1, TagQueue: 4, TagApplied: 8, TagLeft: 4, TagHeldFor: 4, TagKeepalive: 4,
	TagRequest: 8, TagMode: 1, TagLimit: 4, TagPriority: 4, TagReentrant: 1, TagCount: 4,
	TagEvent: 1, TagAt: 8, TagMore: 1, TagLapse: 1,
}

// maxSize bounds the variable tags' values; 0 for the others, which
// fixedSize bounds or which the server does not know.
var maxSize = [256]int{
	TagKey: 127, TagName: 127, TagCredential: 1024, TagServer: 255, TagMessage: 1024, TagOwner: 127, TagLeader: 255,
	TagNote: 1024, // mutex.MaxNoteLen
	TagHeld: MaxFrame, TagParked: MaxFrame, TagHolder: MaxFrame,
}

// listTag reports the tags that may repeat in a frame.
func listTag(t Tag) bool { return t == TagHeld || t == TagParked || t == TagHolder }

// Code says why a request was refused, a lock lost or a connection ended.
type Code uint8

// Codes; see docs/protocol.md.
const (
	CodeBusy            Code = 1
	CodeTimeout         Code = 2
	CodeCancelled       Code = 3
	CodeReset           Code = 4
	CodeStaleToken      Code = 5
	CodeDuplicate       Code = 6
	CodeBadRequest      Code = 7
	CodeUnsupported     Code = 8
	CodeSessionEnded    Code = 9
	CodeNotDurable      Code = 10
	CodeLeaseExpired    Code = 11
	CodeSessionExpired  Code = 12
	CodeProtocolError   Code = 13
	CodeUnknownSession  Code = 14
	CodeShuttingDown    Code = 15
	CodeDeadlock        Code = 16
	CodeLimitMismatch   Code = 17
	CodeUpgrade         Code = 18
	CodeNotLeader       Code = 19
	CodeSlowConsumer    Code = 20
	CodeUnauthenticated Code = 21
	CodeForbidden       Code = 22
	CodeRateLimited     Code = 23
	CodeOverLimit       Code = 24
)

var codeNames = map[Code]string{
	CodeBusy: "busy", CodeTimeout: "timeout", CodeCancelled: "cancelled", CodeReset: "reset",
	CodeStaleToken: "stale_token", CodeDuplicate: "duplicate", CodeBadRequest: "bad_request",
	CodeUnsupported: "unsupported", CodeSessionEnded: "session_ended", CodeNotDurable: "not_durable",
	CodeLeaseExpired: "lease_expired", CodeSessionExpired: "session_expired",
	CodeProtocolError: "protocol_error", CodeUnknownSession: "unknown_session",
	CodeShuttingDown: "shutting_down", CodeDeadlock: "deadlock", CodeLimitMismatch: "limit_mismatch",
	CodeUpgrade: "upgrade", CodeNotLeader: "not_leader", CodeSlowConsumer: "slow_consumer",
	CodeUnauthenticated: "unauthenticated", CodeForbidden: "forbidden", CodeRateLimited: "rate_limited",
	CodeOverLimit: "over_limit",
}

// String returns the code's name, as docs/protocol.md spells it.
func (c Code) String() string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return fmt.Sprintf("code(%d)", uint8(c))
}

// Errors of the codec.
var (
	// ErrProtocol: bytes the frame format does not allow. The server
	// answers GOODBYE protocol_error and closes the connection.
	ErrProtocol = errors.New("session: protocol error")
	// errIncomplete: a valid prefix of a frame that needs more bytes.
	errIncomplete = errors.New("session: incomplete frame")
)

// Field is one field of a frame; Value aliases the frame's bytes.
type Field struct {
	Tag   Tag
	Value []byte
}

// Frame is one decoded frame. Its fields alias the bytes it was decoded
// from.
type Frame struct {
	Type   Type
	ID     uint64
	Fields []Field
}

// knownType reports the frame types of either direction.
func knownType(t Type) bool {
	return t >= TypeHello && t <= TypeWatch || t >= TypeWelcome && t <= TypeMore
}

// ParseFrame decodes the frame at the start of b into f, reusing f's
// field slice, and returns the bytes it used. Errors: errIncomplete when b
// is a valid prefix that needs more bytes (b's first 4 bytes then give the
// whole length, checked against MaxFrame already), or an error wrapping
// ErrProtocol: a length under 9 or over MaxFrame, an unknown frame type,
// a field running past its frame, a fixed-size field of the wrong size, a
// variable field over its limit, or a tag other than a list's repeated.
func ParseFrame(b []byte, f *Frame) (int, error) {
	if len(b) < 4 {
		return 0, errIncomplete
	}
	n := binary.BigEndian.Uint32(b)
	if n < frameHeader || n > MaxFrame {
		return 0, fmt.Errorf("%w: frame length %d, want %d to %d", ErrProtocol, n, frameHeader, MaxFrame)
	}
	if len(b) < 4+frameHeader {
		return 0, errIncomplete
	}
	f.Type = Type(b[4])
	if !knownType(f.Type) {
		return 0, fmt.Errorf("%w: unknown frame type %#02x", ErrProtocol, b[4])
	}
	if len(b) < 4+int(n) {
		return 0, errIncomplete
	}
	f.ID = binary.BigEndian.Uint64(b[5:13])
	fields, err := parseFields(b[13:4+n], f.Fields[:0])
	if err != nil {
		return 0, err
	}
	f.Fields = fields
	return 4 + int(n), nil
}

// parseFields decodes a sequence of fields and appends them to out.
func parseFields(b []byte, out []Field) ([]Field, error) {
	var seen [256]bool
	for len(b) > 0 {
		if len(b) < 3 {
			return nil, fmt.Errorf("%w: a field header cut short", ErrProtocol)
		}
		tag := Tag(b[0])
		size := int(binary.BigEndian.Uint16(b[1:3]))
		if size > len(b)-3 {
			return nil, fmt.Errorf("%w: field %#02x runs past its frame", ErrProtocol, b[0])
		}
		if want := fixedSize[tag]; want != 0 && size != want {
			return nil, fmt.Errorf("%w: field %#02x of %d bytes, want %d", ErrProtocol, b[0], size, want)
		}
		if limit := maxSize[tag]; limit != 0 && size > limit {
			return nil, fmt.Errorf("%w: field %#02x of %d bytes, at most %d", ErrProtocol, b[0], size, limit)
		}
		if seen[tag] && !listTag(tag) {
			return nil, fmt.Errorf("%w: field %#02x given twice", ErrProtocol, b[0])
		}
		seen[tag] = true
		out = append(out, Field{Tag: tag, Value: b[3 : 3+size]})
		b = b[3+size:]
	}
	return out, nil
}

// Get returns the value of the first field tagged t, and whether there is
// one.
func (f *Frame) Get(t Tag) ([]byte, bool) {
	for _, fl := range f.Fields {
		if fl.Tag == t {
			return fl.Value, true
		}
	}
	return nil, false
}

// All returns the values of every field tagged t, in order.
func (f *Frame) All(t Tag) [][]byte {
	var out [][]byte
	for _, fl := range f.Fields {
		if fl.Tag == t {
			out = append(out, fl.Value)
		}
	}
	return out
}

// Uint returns the field tagged t as an unsigned integer of its size.
func (f *Frame) Uint(t Tag) (uint64, bool) {
	v, ok := f.Get(t)
	if !ok {
		return 0, false
	}
	return beUint(v), true
}

func beUint(v []byte) uint64 {
	var n uint64
	for _, c := range v {
		n = n<<8 | uint64(c)
	}
	return n
}

// --- encoding ---

// frameBuilder appends one frame to a buffer; End fills in its length.
type frameBuilder struct {
	b     []byte
	start int
}

// begin starts a frame of type t answering id at the end of b.
func begin(b []byte, t Type, id uint64) frameBuilder {
	start := len(b)
	b = append(b, 0, 0, 0, 0, byte(t))
	b = binary.BigEndian.AppendUint64(b, id)
	return frameBuilder{b: b, start: start}
}

func (fb *frameBuilder) bytes(t Tag, v []byte) {
	fb.b = append(fb.b, byte(t))
	fb.b = binary.BigEndian.AppendUint16(fb.b, uint16(len(v)))
	fb.b = append(fb.b, v...)
}

func (fb *frameBuilder) str(t Tag, v string) {
	fb.b = append(fb.b, byte(t))
	fb.b = binary.BigEndian.AppendUint16(fb.b, uint16(len(v)))
	fb.b = append(fb.b, v...)
}

func (fb *frameBuilder) u8(t Tag, v uint8) {
	fb.b = append(fb.b, byte(t), 0, 1, v)
}

func (fb *frameBuilder) u32(t Tag, v uint32) {
	fb.b = append(fb.b, byte(t), 0, 4)
	fb.b = binary.BigEndian.AppendUint32(fb.b, v)
}

func (fb *frameBuilder) u64(t Tag, v uint64) {
	fb.b = append(fb.b, byte(t), 0, 8)
	fb.b = binary.BigEndian.AppendUint64(fb.b, v)
}

// list starts a list item tagged t; close it with endList.
func (fb *frameBuilder) list(t Tag) int {
	fb.b = append(fb.b, byte(t), 0, 0)
	return len(fb.b)
}

func (fb *frameBuilder) endList(at int) {
	binary.BigEndian.PutUint16(fb.b[at-2:at], uint16(len(fb.b)-at))
}

// end fills in the frame's length and returns the buffer.
func (fb *frameBuilder) end() []byte {
	binary.BigEndian.PutUint32(fb.b[fb.start:], uint32(len(fb.b)-fb.start-4))
	return fb.b
}

// listAnswer builds an answer with list items (a WELCOME, an INFO) that
// may not fit in one frame: the first frame, of the answer's type, holds
// the fields head was given; MORE frames of the same id carry the items
// that do not fit after them (docs/protocol.md, Long answers).
type listAnswer struct {
	head  frameBuilder // the first frame, but for its list items
	items frameBuilder // the items, one after another (b only)
	ends  []int        // where each item ends in items.b
}

func newListAnswer(b []byte, t Type, id uint64) *listAnswer {
	return &listAnswer{head: begin(b, t, id)}
}

// item starts a list item tagged t in items; close it with endItem.
func (a *listAnswer) item(t Tag) int { return a.items.list(t) }

func (a *listAnswer) endItem(at int) {
	a.items.endList(at)
	a.ends = append(a.ends, len(a.items.b))
}

// moreField is the size of the field `more` that every frame of a long
// answer but its last carries.
const moreField = 4

// frames returns the frames of the answer: the first one alone, as it has
// always been, when everything fits in it.
func (a *listAnswer) frames() [][]byte {
	fb, items := a.head, a.items.b
	var out [][]byte
	start, i := 0, 0 // the first item not placed yet, in bytes and in ends
	for {
		size := len(fb.b) - fb.start - 4
		if size+len(items)-start <= MaxFrame {
			fb.b = append(fb.b, items[start:]...)
			return append(out, fb.end())
		}
		end := start
		for i < len(a.ends) && size+a.ends[i]-start+moreField <= MaxFrame {
			end = a.ends[i]
			i++
		}
		if end == start && i < len(a.ends) { // no item is that large: never loop for ever
			end = a.ends[i]
			i++
		}
		fb.b = append(fb.b, items[start:end]...)
		fb.u8(TagMore, 1)
		out = append(out, fb.end())
		fb, start = begin(nil, TypeMore, a.head.id()), end
	}
}

// id returns the request id of the frame being built.
func (fb *frameBuilder) id() uint64 { return binary.BigEndian.Uint64(fb.b[fb.start+5:]) }

// millis converts a duration in nanoseconds to whole milliseconds,
// rounded up and saturating at the largest u32.
func millis(ns int64) uint32 {
	if ns <= 0 {
		return 0
	}
	ms := (ns + 999_999) / 1_000_000
	if ms > 0xFFFFFFFF {
		return 0xFFFFFFFF
	}
	return uint32(ms)
}
