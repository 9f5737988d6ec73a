package manager

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/locking-center/locking-center/mutex"
	"github.com/locking-center/locking-center/store"
)

// fill takes n keys at tb, each held by a v1 client.
func fill(b *testing.B, tb *mutex.Node, n int) {
	b.Helper()
	for i := range n {
		if _, err := tb.Lock(context.Background(), mutex.Claim{Key: fmt.Sprintf("orders/batch-%07d", i),
			Source: "10.0.0.4", RemoteAddr: "10.0.0.4:51314"}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSnapshotCopy is the copy of the table a snapshot takes under
// the node's lock: how long the node's changes wait for a snapshot.
func BenchmarkSnapshotCopy(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			tb := mutex.NewNode(mutex.NodeConfig{})
			defer tb.Close()
			fill(b, tb, n)
			for b.Loop() {
				tb.Clone()
			}
		})
	}
}

// BenchmarkSnapshot is a whole snapshot over the management port on
// loopback: the copy, the records written and sent, and read by the
// client; bytes/s is the size of the snapshot file.
func BenchmarkSnapshot(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			tb, c := startWith(b, Config{})
			fill(b, tb, n)
			size, err := store.WriteSnapshotFile(io.Discard, tb.Clone())
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(size)
			for b.Loop() {
				if _, err := c.Snapshot(context.Background(), io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
