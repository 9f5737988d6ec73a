package store

import (
	"bufio"
	"errors"
	"io"
	"time"

	"github.com/locking-center/locking-center/mutex"
)

// readBuffer is the read-ahead of replay, in bytes; it holds the largest
// record many times over.
const readBuffer = 1 << 20

// state is the set of held keys a log replays to.
type state struct {
	held map[string]holder
	size int64 // bytes the grant records of held take
}

// holder is a held key's grant without the key: what a grant record keeps.
type holder struct {
	source, remote string
	acquired       int64 // Unix nanoseconds
}

func holderOf(g mutex.Grant) holder {
	return holder{source: g.Source, remote: g.RemoteAddr, acquired: g.Acquired.UnixNano()}
}

func (h holder) recordLen(key string) int64 {
	return int64(grantLen(len(key), len(h.source), len(h.remote), h.acquired))
}

func (h holder) grant(key string) mutex.Grant {
	return mutex.Grant{Key: key, Source: h.source, RemoteAddr: h.remote, Acquired: time.Unix(0, h.acquired)}
}

func newState() *state { return &state{held: make(map[string]holder)} }

// replay applies c as apply does but leaves size to recount, which saves a
// map lookup per record while a log is read.
func (s *state) replay(c mutex.Change) {
	if c.Op == mutex.OpGrant {
		s.held[c.Grant.Key] = holderOf(c.Grant)
	} else {
		delete(s.held, c.Grant.Key)
	}
}

// recount sets size from held, after replay.
func (s *state) recount() {
	s.size = 0
	for k, h := range s.held {
		s.size += h.recordLen(k)
	}
}

// apply makes c to s: a grant sets the key's holder, a release removes it.
func (s *state) apply(c mutex.Change) {
	key := c.Grant.Key
	if old, ok := s.held[key]; ok {
		s.size -= old.recordLen(key)
	}
	switch c.Op {
	case mutex.OpGrant:
		h := holderOf(c.Grant)
		s.held[key] = h
		s.size += h.recordLen(key)
	case mutex.OpRelease:
		delete(s.held, key)
	}
}

// grants returns the held grants, in no particular order.
func (s *state) grants() []mutex.Grant {
	out := make([]mutex.Grant, 0, len(s.held))
	for k, h := range s.held {
		out = append(out, h.grant(k))
	}
	return out
}

// scan reads the records of the first size bytes of r, applies each whole
// record, in order, and returns the offset just after the last one. When
// end < size the bytes from end on are a torn tail (see the package
// documentation). Errors: *CorruptError without its Path, or a read error.
func scan(r io.ReaderAt, size int64, apply func(mutex.Change)) (end int64, err error) {
	br := bufio.NewReaderSize(io.NewSectionReader(r, 0, size), readBuffer)
	var off int64
	for off < size {
		b, err := br.Peek(HeaderLen)
		if len(b) < HeaderLen {
			if errors.Is(err, io.EOF) {
				return off, nil // the header is cut short
			}
			return off, err
		}
		n, sum, err := parseHeader(b)
		if err != nil {
			return off, judge(r, size, off, off+HeaderLen, err)
		}
		if int64(n) > size-off-HeaderLen {
			return off, nil // the payload is cut short
		}
		if b, err = br.Peek(HeaderLen + n); err != nil {
			return off, err
		}
		c, err := decodePayload(b[HeaderLen:], sum)
		if err != nil {
			return off, judge(r, size, off, off+HeaderLen+int64(n), err)
		}
		apply(c)
		br.Discard(HeaderLen + n)
		off += HeaderLen + int64(n)
	}
	return off, nil
}

// judge decides about the record at [off, end) that failed for reason: a
// torn tail (nil) when the run of zero bytes that ends the file begins
// before end, corruption otherwise.
func judge(r io.ReaderAt, size, off, end int64, reason error) error {
	z, err := zeroTail(r, size)
	if err != nil {
		return err
	}
	if z < end {
		return nil
	}
	return &CorruptError{Offset: off, Err: reason}
}

// zeroTail returns the offset at which the run of zero bytes that ends the
// first size bytes of r begins: size when the last byte is not zero.
func zeroTail(r io.ReaderAt, size int64) (int64, error) {
	buf := make([]byte, 64<<10)
	for end := size; end > 0; {
		start := max(end-int64(len(buf)), 0)
		b := buf[:end-start]
		if _, err := r.ReadAt(b, start); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] != 0 {
				return start + int64(i) + 1, nil
			}
		}
		end = start
	}
	return 0, nil
}
