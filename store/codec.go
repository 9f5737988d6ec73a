package store

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/locking-center/locking-center/mutex"
)

// The record codec for other logs than this package's file: a replicated
// log (package cluster) carries one command record per entry, and its
// snapshots are a sequence of snapshot records, in exactly the layout the
// write-ahead log uses (see the package documentation).

// Errors of the exported codec.
var (
	// ErrNotCommand: a record that decoded whole but is not a command
	// (a snapshot record, or a v1 grant of the older format).
	ErrNotCommand = errors.New("store: record is not a command")
	// ErrBadRecord: bytes that are not one whole, intact record: cut
	// short, a checksum that fails, a payload that is not a record, or
	// bytes after it.
	ErrBadRecord = errors.New("store: bad record")
	// ErrBadSnapshot: a snapshot stream whose records do not make a table:
	// a bad record, a command among them, or a record that does not fit.
	ErrBadSnapshot = errors.New("store: bad snapshot")
)

// AppendCommand appends the record of c (header and JSON payload, as the
// write-ahead log writes it) to b and returns the extended slice. The
// Proposer and Proposal of c are not part of the record.
func AppendCommand(b []byte, c *mutex.Command) []byte { return appendRecord(b, c) }

// DecodeCommand decodes b, which must hold exactly one command record.
// Errors: ErrBadRecord (wrapping the reason), ErrNotCommand.
func DecodeCommand(b []byte) (mutex.Command, error) {
	it, n, err := decodeRecord(b)
	switch {
	case err != nil:
		return mutex.Command{}, fmt.Errorf("%w: %w", ErrBadRecord, err)
	case n != len(b):
		return mutex.Command{}, fmt.Errorf("%w: %d bytes after the record", ErrBadRecord, len(b)-n)
	case it.kind != itemCommand:
		return mutex.Command{}, ErrNotCommand
	}
	return it.cmd, nil
}

// WriteSnapshot writes the state of t to w as snapshot records (the state,
// the sessions, then key by key its holders and waiters) and returns the
// bytes written. Errors: w's.
func WriteSnapshot(w io.Writer, t *mutex.Table) (int64, error) {
	buf := make([]byte, 0, maxSpare+4<<10)
	var n int64
	var werr error
	put := func() {
		if werr == nil && len(buf) > 0 {
			var m int
			m, werr = w.Write(buf)
			n += int64(m)
		}
		buf = buf[:0]
	}
	t.Export(func(r *mutex.Record) {
		buf = appendStateRecord(buf, r)
		if len(buf) >= maxSpare {
			put()
		}
	})
	put()
	return n, werr
}

// ReadSnapshot reads the snapshot records of r up to its end and returns
// the table they make. Unlike replay of the write-ahead log it takes no
// torn tail: a stream cut inside a record is refused too. Errors:
// ErrBadSnapshot (wrapping the reason), or r's.
func ReadSnapshot(r io.Reader) (*mutex.Table, error) {
	br := bufio.NewReaderSize(r, readBuffer)
	t := mutex.NewTable()
	var off int64
	for {
		h, err := br.Peek(HeaderLen)
		if len(h) == 0 && errors.Is(err, io.EOF) {
			break
		}
		if len(h) < HeaderLen {
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("%w: cut short at offset %d", ErrBadSnapshot, off)
			}
			return nil, err
		}
		n, sum, err := parseHeader(h)
		if err != nil {
			return nil, fmt.Errorf("%w: offset %d: %w", ErrBadSnapshot, off, err)
		}
		b, err := br.Peek(HeaderLen + n)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("%w: cut short at offset %d", ErrBadSnapshot, off)
			}
			return nil, err
		}
		it, err := decodePayload(b[HeaderLen:], sum)
		if err != nil {
			return nil, fmt.Errorf("%w: offset %d: %w", ErrBadSnapshot, off, err)
		}
		if it.kind != itemState {
			return nil, fmt.Errorf("%w: offset %d: not a snapshot record", ErrBadSnapshot, off)
		}
		if !t.Import(&it.rec) {
			return nil, fmt.Errorf("%w: offset %d: a record that does not fit the table", ErrBadSnapshot, off)
		}
		br.Discard(HeaderLen + n)
		off += int64(HeaderLen + n)
	}
	t.FinishImport()
	return t, nil
}
