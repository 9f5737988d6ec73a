package store

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/locking-center/locking-center/mutex"
)

// Every command comes back from its record as it went in, less the
// proposer's fields; anything but exactly one command record is refused.
func TestCommandCodec(t *testing.T) {
	cmds, recs := everyField()
	for i := range cmds {
		c := cmds[i]
		c.Proposer, c.Proposal = 3, 4
		b := AppendCommand([]byte("prefix"), &c)
		if !bytes.HasPrefix(b, []byte("prefix")) {
			t.Fatal("AppendCommand did not append")
		}
		got, err := DecodeCommand(b[len("prefix"):])
		if err != nil {
			t.Fatalf("%v: %v", c.Op, err)
		}
		c.Proposer, c.Proposal = 0, 0
		if !sameItem(item{kind: itemCommand, cmd: got}, item{kind: itemCommand, cmd: c}) {
			t.Fatalf("%v: got %+v, want %+v", c.Op, got, c)
		}
		for cut := range len(b) - len("prefix") {
			if _, err := DecodeCommand(b[len("prefix") : len("prefix")+cut]); !errors.Is(err, ErrBadRecord) {
				t.Fatalf("%v cut at %d: %v", c.Op, cut, err)
			}
		}
		if _, err := DecodeCommand(append(b[len("prefix"):], 0)); !errors.Is(err, ErrBadRecord) {
			t.Fatalf("%v with a byte after it: %v", c.Op, err)
		}
		flipped := bytes.Clone(b[len("prefix"):])
		flipped[len(flipped)-2] ^= 1
		if _, err := DecodeCommand(flipped); !errors.Is(err, ErrBadRecord) {
			t.Fatalf("%v with a flipped byte: %v", c.Op, err)
		}
	}
	if _, err := DecodeCommand(appendStateRecord(nil, &recs[0])); !errors.Is(err, ErrNotCommand) {
		t.Fatalf("a snapshot record: %v", err)
	}
}

// A snapshot written by WriteSnapshot reads back to an equal table; a cut,
// a flipped byte or a command in the stream is refused.
func TestSnapshotCodec(t *testing.T) {
	want := model(history())
	var buf bytes.Buffer
	n, err := WriteSnapshot(&buf, want)
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("WriteSnapshot: %d bytes, %v; buffer has %d", n, err, buf.Len())
	}
	got, err := ReadSnapshot(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	sameTable(t, got, want)
	if records := exportOf(got); records[0] != exportOf(want)[0] {
		t.Fatalf("counters %+v, want %+v", records[0], exportOf(want)[0])
	}

	empty, err := ReadSnapshot(bytes.NewReader(nil))
	if err != nil || empty.Len() != 0 {
		t.Fatalf("an empty stream: %v, %d keys", err, empty.Len())
	}
	b := buf.Bytes()
	for _, cut := range []int{1, HeaderLen, HeaderLen + 3, len(b) - 1} {
		if _, err := ReadSnapshot(bytes.NewReader(b[:cut])); !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("cut at %d: %v", cut, err)
		}
	}
	flipped := bytes.Clone(b)
	flipped[HeaderLen+2] ^= 0x20
	if _, err := ReadSnapshot(bytes.NewReader(flipped)); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("a flipped byte: %v", err)
	}
	c := release("k", epoch)
	if _, err := ReadSnapshot(bytes.NewReader(AppendCommand(bytes.Clone(b), &c))); !errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("a command after the records: %v", err)
	}
	var w failWriter
	if _, err := WriteSnapshot(&w, want); !errors.Is(err, errWrite) {
		t.Fatalf("a failing writer: %v", err)
	}
}

var errWrite = errors.New("write failed")

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errWrite }

// TestDecodeCommandAllocations: a command record in the encoders' form
// decodes with one allocation for all its strings, as each node of a
// cluster decodes every entry it applies.
func TestDecodeCommandAllocations(t *testing.T) {
	c := mutex.Command{Op: mutex.OpAcquire, At: time.Unix(1_764_000_000, 5), Key: "orders/17", Source: "10.0.0.7:51234",
		RemoteAddr: "10.0.0.7:51234", Owner: "acquire-1", Session: 912, Request: 48_213, Lease: time.Second}
	rec := AppendCommand(nil, &c)
	got, err := DecodeCommand(rec)
	if err != nil || got.Key != c.Key || got.Source != c.Source || got.RemoteAddr != c.RemoteAddr || got.Owner != c.Owner {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	if n := testing.AllocsPerRun(100, func() { DecodeCommand(rec) }); n > 1 {
		t.Fatalf("%v allocations per decode, want 1", n)
	}
}
