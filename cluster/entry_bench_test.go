package cluster

import (
	"testing"
	"time"

	"github.com/locking-center/locking-center/mutex"
)

// benchCommand is an acquire as a session's ACQUIRE proposes it.
func benchCommand() *mutex.Command {
	return &mutex.Command{Op: mutex.OpAcquire, At: time.Unix(1_764_000_000, 123_456_789), Key: "tp-0-64-17",
		Source: "10.0.0.7:51234", RemoteAddr: "10.0.0.7:51234", Session: 912, Request: 48_213, Owner: "acquire-1",
		Proposer: 0x1234_5678_9abc_def0, Proposal: 77_123}
}

// BenchmarkCommandEntry encodes and decodes the entry of an acquire, as
// the leader proposes it (each in a buffer of its own, which raft keeps)
// and every node applies it.
func BenchmarkCommandEntry(b *testing.B) {
	c := benchCommand()
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			commandEntry(c)
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		data := appendCommandEntry(nil, c)
		for b.Loop() {
			if _, err := decodeEntry(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
