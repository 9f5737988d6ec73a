package manager

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Command is the first byte of a management request.
type Command byte

// The commands of the management port.
const (
	CmdListKeys    Command = 1
	CmdListHolders Command = 2
	CmdResetKey    Command = 3
	CmdResetSource Command = 4
)

const (
	statusOK     byte = '+'
	statusFailed byte = '-'
	maxString         = 127
)

// Errors of the management protocol.
var (
	// ErrMalformed: bytes the management protocol does not allow.
	ErrMalformed = errors.New("manager: malformed message")
	// ErrFailed: the server answered '-'.
	ErrFailed = errors.New("manager: server refused the request")
	// errIncomplete: a valid prefix that needs more bytes.
	errIncomplete = errors.New("manager: incomplete message")
)

// Holder is one held key as the management port reports it.
type Holder struct {
	Key        string
	Source     string
	RemoteAddr string
	Acquired   time.Time     // wall clock of the grant
	Held       time.Duration // how long it has been held, by the server's clock
	Waiters    int           // requests parked behind the holder
}

// Request is one decoded management request. Arg is the key of
// CmdResetKey or the source of CmdResetSource.
type Request struct {
	Cmd Command
	Arg string
}

// decodeRequest decodes a whole request. Errors: ErrMalformed,
// errIncomplete.
func decodeRequest(b []byte) (Request, int, error) {
	if len(b) == 0 {
		return Request{}, 0, errIncomplete
	}
	r := Request{Cmd: Command(b[0])}
	switch r.Cmd {
	case CmdListKeys, CmdListHolders:
		return r, 1, nil
	case CmdResetKey, CmdResetSource:
		if len(b) < 2 {
			return Request{}, 0, errIncomplete
		}
		n := int(b[1])
		if n > maxString || n == 0 && r.Cmd == CmdResetKey {
			return Request{}, 0, ErrMalformed
		}
		if len(b) < 2+n {
			return Request{}, 0, errIncomplete
		}
		r.Arg = string(b[2 : 2+n])
		return r, 2 + n, nil
	}
	return Request{}, 0, ErrMalformed
}

// appendRequest appends the wire form of r.
func appendRequest(b []byte, r Request) []byte {
	b = append(b, byte(r.Cmd))
	if r.Cmd == CmdResetKey || r.Cmd == CmdResetSource {
		b = appendString(b, r.Arg)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	return append(append(b, byte(len(s))), s...)
}

// appendKeys appends a '+' and the body of a key list.
func appendKeys(b []byte, keys []string) []byte {
	b = append(b, statusOK)
	b = binary.BigEndian.AppendUint32(b, uint32(len(keys)))
	for _, k := range keys {
		b = appendString(b, k)
	}
	return b
}

// appendHolders appends a '+' and the body of a holder list.
func appendHolders(b []byte, hs []Holder) []byte {
	b = append(b, statusOK)
	b = binary.BigEndian.AppendUint32(b, uint32(len(hs)))
	for _, h := range hs {
		b = appendString(b, h.Key)
		b = appendString(b, h.Source)
		b = appendString(b, h.RemoteAddr)
		b = binary.BigEndian.AppendUint64(b, uint64(h.Acquired.UnixNano()))
		b = binary.BigEndian.AppendUint64(b, uint64(h.Held))
		b = binary.BigEndian.AppendUint32(b, uint32(h.Waiters))
	}
	return b
}

// reader walks a response body, refusing to read past its end.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil || n > len(r.b) {
		r.err = ErrMalformed
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) string() string {
	n := r.take(1)
	if n == nil {
		return ""
	}
	return string(r.take(int(n[0])))
}

func (r *reader) u32() uint32 {
	if b := r.take(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if b := r.take(8); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

// count reads a list length and checks it against the bytes left, each
// item taking at least minItem bytes, before anything is allocated.
func (r *reader) count(minItem int) int {
	n := int(r.u32())
	if r.err == nil && n > len(r.b)/minItem {
		r.err = ErrMalformed
		return 0
	}
	return n
}

// decodeKeys decodes the body of a key list (after '+').
func decodeKeys(b []byte) ([]string, error) {
	r := &reader{b: b}
	keys := make([]string, r.count(2))
	for i := range keys {
		keys[i] = r.string()
	}
	return keys, r.finish()
}

// decodeHolders decodes the body of a holder list (after '+').
func decodeHolders(b []byte) ([]Holder, error) {
	r := &reader{b: b}
	hs := make([]Holder, r.count(3+8+8+4))
	for i := range hs {
		hs[i] = Holder{
			Key:        r.string(),
			Source:     r.string(),
			RemoteAddr: r.string(),
			Acquired:   time.Unix(0, int64(r.u64())),
			Held:       time.Duration(r.u64()),
			Waiters:    int(r.u32()),
		}
	}
	return hs, r.finish()
}

func (r *reader) finish() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d bytes after the body", ErrMalformed, len(r.b))
	}
	return r.err
}
