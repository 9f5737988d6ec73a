package store

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/locking-center/locking-center/mutex"
)

// readBuffer is the read-ahead of replay, in bytes; it holds the largest
// record many times over.
const readBuffer = 1 << 20

// replayer applies a log's records, in order, to a table: first the
// records of a snapshot (when the log was compacted), then commands and
// grants of the older format.
type replayer struct {
	t        *mutex.Table
	commands bool // a command or grant has been applied: the snapshot is over
	records  int  // snapshot records applied
}

func newReplayer(t *mutex.Table) *replayer { return &replayer{t: t} }

// apply applies one record's item. Errors: errPayload for a snapshot
// record after a command, or one that does not fit the table.
func (p *replayer) apply(it item) error {
	switch it.kind {
	case itemState:
		if p.commands {
			return fmt.Errorf("%w: a snapshot record after commands", errPayload)
		}
		if !p.t.Import(&it.rec) {
			return fmt.Errorf("%w: a snapshot record that does not fit the table", errPayload)
		}
		p.records++
		return nil
	}
	if it.kind == itemEnd {
		return fmt.Errorf("%w: the end record of a snapshot file in a log", errPayload)
	}
	p.endSnapshot()
	if it.kind == itemGrant {
		p.t.RestoreV1(it.rec.Key, it.rec.Source, it.rec.RemoteAddr, it.rec.Acquired)
		return nil
	}
	p.t.Apply(&it.cmd)
	p.t.TakeEvents()
	return nil
}

// endSnapshot finishes the import of a snapshot once.
func (p *replayer) endSnapshot() {
	if !p.commands {
		p.commands = true
		if p.records > 0 {
			p.t.FinishImport()
		}
	}
}

// scan reads the records of the first size bytes of r, applies each whole
// record, in order, and returns the offset just after the last one. When
// end < size the bytes from end on are a torn tail (see the package
// documentation). Errors: *CorruptError without its Path, or a read error.
func scan(r io.ReaderAt, size int64, apply func(item) error) (end int64, err error) {
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
		it, err := decodePayload(b[HeaderLen:], sum)
		if err == nil {
			err = apply(it)
		}
		if err != nil {
			return off, judge(r, size, off, off+HeaderLen+int64(n), err)
		}
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
