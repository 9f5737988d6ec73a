// Package frame encodes frames of the session protocol for the benchmark
// and its floor server, and reads them from a connection (decoding them
// with session.ParseFrame). docs/protocol.md gives the bytes.
package frame

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"slices"

	"github.com/locking-center/locking-center/session"
)

// Append appends one frame of type t and request id with fields, in
// order, to b and returns the extended buffer. Values are not checked
// against their tags' sizes.
func Append(b []byte, t session.Type, id uint64, fields ...session.Field) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0, byte(t))
	b = binary.BigEndian.AppendUint64(b, id)
	b = AppendFields(b, fields...)
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

// AppendFields appends fields as [tag u8][size u16][value], the body of a
// frame or of a list item.
func AppendFields(b []byte, fields ...session.Field) []byte {
	for _, f := range fields {
		b = append(b, byte(f.Tag))
		b = binary.BigEndian.AppendUint16(b, uint16(len(f.Value)))
		b = append(b, f.Value...)
	}
	return b
}

// Str is a field holding the bytes of v.
func Str(t session.Tag, v string) session.Field { return session.Field{Tag: t, Value: []byte(v)} }

// U8 is a field holding v in one byte.
func U8(t session.Tag, v uint8) session.Field { return session.Field{Tag: t, Value: []byte{v}} }

// U32 is a field holding v in 4 bytes, big-endian.
func U32(t session.Tag, v uint32) session.Field {
	return session.Field{Tag: t, Value: binary.BigEndian.AppendUint32(nil, v)}
}

// U64 is a field holding v in 8 bytes, big-endian.
func U64(t session.Tag, v uint64) session.Field {
	return session.Field{Tag: t, Value: binary.BigEndian.AppendUint64(nil, v)}
}

// SetID overwrites the request id of the frame at the start of b.
func SetID(b []byte, id uint64) { binary.BigEndian.PutUint64(b[5:13], id) }

// Uint returns the integer value of field t of f, 0 when it is absent.
func Uint(f *session.Frame, t session.Tag) uint64 {
	v, _ := f.Uint(t)
	return v
}

// Reader reads whole frames from a connection through a buffer.
type Reader struct {
	br  *bufio.Reader
	buf []byte        // the frame last read; f's fields alias it
	f   session.Frame // the frame last read
}

// NewReader reads r through a buffer of size bytes; a frame larger than
// the buffer is read whole all the same.
func NewReader(r io.Reader, size int) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, size), buf: make([]byte, 0, size)}
}

// Next reads the next frame; it and its fields are valid until the next
// call. Errors: the read's, or one wrapping session.ErrProtocol for bytes
// that are no frame.
func (r *Reader) Next() (*session.Frame, error) {
	r.buf = r.buf[:4]
	if _, err := io.ReadFull(r.br, r.buf); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(r.buf))
	if n > session.MaxFrame {
		return nil, fmt.Errorf("%w: frame length %d", session.ErrProtocol, n)
	}
	r.buf = slices.Grow(r.buf, n)[:4+n]
	if _, err := io.ReadFull(r.br, r.buf[4:]); err != nil {
		return nil, err
	}
	if _, err := session.ParseFrame(r.buf, &r.f); err != nil {
		return nil, err
	}
	return &r.f, nil
}

// ReadFull reads exactly len(b) bytes, as io.ReadFull does, through the
// buffer.
func (r *Reader) ReadFull(b []byte) error {
	_, err := io.ReadFull(r.br, b)
	return err
}

// Ready reports whether a whole frame is buffered, so that Next would not
// read from the connection.
func (r *Reader) Ready() bool {
	n := r.br.Buffered()
	if n < 4 {
		return false
	}
	h, _ := r.br.Peek(4)
	return n >= 4+int(binary.BigEndian.Uint32(h))
}
