package store

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/klauspost/crc32"

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
	t, _, err := readSnapshot(r, false)
	return t, err
}

// ErrBadSnapshotFile: bytes that are not a whole snapshot file: those of
// ErrBadSnapshot, or an end record that is missing, not last, or does not
// match the records before it. It matches ErrBadSnapshot too.
var ErrBadSnapshotFile = fmt.Errorf("%w file", ErrBadSnapshot)

// WriteSnapshotFile writes the state of t to w as a snapshot file: the
// records WriteSnapshot writes, then the end record, which holds their
// count and the CRC32C of their bytes (docs/protocol.md, Snapshot). It
// returns the bytes written. Errors: w's.
func WriteSnapshotFile(w io.Writer, t *mutex.Table) (int64, error) {
	cw := &sumWriter{w: w}
	n, err := WriteSnapshot(cw, t)
	if err != nil {
		return n, err
	}
	end := frame(nil, func(b []byte) []byte {
		e := enc{b}
		e.open(opEnd)
		e.name("count")
		e.b = strconv.AppendUint(e.b, uint64(cw.records), 10)
		e.name("sum")
		e.b = strconv.AppendUint(e.b, uint64(cw.sum), 10)
		e.close()
		return e.b
	})
	m, err := w.Write(end)
	return n + int64(m), err
}

// ReadSnapshotFile reads a snapshot file from r, checks its end record
// against the records before it, and returns the table they make and the
// number of those records. Errors: ErrBadSnapshotFile (wrapping the
// reason), or r's.
func ReadSnapshotFile(r io.Reader) (*mutex.Table, int, error) {
	t, records, err := readSnapshot(r, true)
	if errors.Is(err, ErrBadSnapshot) && !errors.Is(err, ErrBadSnapshotFile) {
		err = fmt.Errorf("%w: %w", ErrBadSnapshotFile, err)
	}
	return t, records, err
}

// sumWriter passes writes to w and keeps the CRC32C of the bytes and the
// count of the records written through it, whole records at a time.
type sumWriter struct {
	w       io.Writer
	sum     uint32
	records int
}

func (s *sumWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	s.sum = crc32.Update(s.sum, castagnoli, p[:n])
	for b := p[:n]; len(b) >= HeaderLen; {
		size := HeaderLen + int(binary.LittleEndian.Uint32(b[0:4]))
		s.records++
		b = b[min(size, len(b)):]
	}
	return n, err
}

// readSnapshot reads the snapshot records of r up to its end, and with
// file the end record after them, and returns the table and the records
// read before the end record.
func readSnapshot(r io.Reader, file bool) (*mutex.Table, int, error) {
	br := bufio.NewReaderSize(r, readBuffer)
	t := mutex.NewTable()
	var off int64
	var sum uint32
	records := 0
	ended := false
	for {
		h, err := br.Peek(HeaderLen)
		if len(h) == 0 && errors.Is(err, io.EOF) {
			break
		}
		if len(h) < HeaderLen {
			if errors.Is(err, io.EOF) {
				return nil, 0, fmt.Errorf("%w: cut short at offset %d", ErrBadSnapshot, off)
			}
			return nil, 0, err
		}
		if ended {
			return nil, 0, fmt.Errorf("%w: a record after the end record, at offset %d", ErrBadSnapshotFile, off)
		}
		n, psum, err := parseHeader(h)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: offset %d: %w", ErrBadSnapshot, off, err)
		}
		b, err := br.Peek(HeaderLen + n)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, 0, fmt.Errorf("%w: cut short at offset %d", ErrBadSnapshot, off)
			}
			return nil, 0, err
		}
		it, err := decodePayload(b[HeaderLen:], psum)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: offset %d: %w", ErrBadSnapshot, off, err)
		}
		switch {
		case file && it.kind == itemEnd:
			if it.count != uint64(records) || it.sum != uint64(sum) {
				return nil, 0, fmt.Errorf("%w: the end record at offset %d counts %d records of CRC32C %08x; the file has %d of %08x",
					ErrBadSnapshotFile, off, it.count, it.sum, records, sum)
			}
			ended = true
		case it.kind != itemState:
			return nil, 0, fmt.Errorf("%w: offset %d: not a snapshot record", ErrBadSnapshot, off)
		case !t.Import(&it.rec):
			return nil, 0, fmt.Errorf("%w: offset %d: a record that does not fit the table", ErrBadSnapshot, off)
		default:
			sum = crc32.Update(sum, castagnoli, b)
			records++
		}
		br.Discard(HeaderLen + n)
		off += int64(HeaderLen + n)
	}
	if file && !ended {
		return nil, 0, fmt.Errorf("%w: no end record: the file is cut short after %d records", ErrBadSnapshotFile, records)
	}
	t.FinishImport()
	return t, records, nil
}
