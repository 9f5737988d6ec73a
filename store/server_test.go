package store

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"testing"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/mutex"
	"github.com/locking-center/locking-center/oneshot"
	"github.com/prometheus/client_golang/prometheus"
)

// serveTable serves table (nil: a new one), journaled to l (nil: not at
// all), with a v1 server on a port of 127.0.0.1 until the test ends, and
// returns the node and a client of it.
func serveTable(t testing.TB, l *Log, table *mutex.Table) (*mutex.Node, *lockingcenter.Client) {
	t.Helper()
	var journal mutex.Journal
	if l != nil {
		journal = l
	}
	node := mutex.NewNode(mutex.NodeConfig{Journal: journal, Table: table})
	t.Cleanup(node.Close)
	var log *slog.Logger
	if _, ok := t.(*testing.T); ok {
		log = testLogger(t)
	}
	srv, err := oneshot.NewServer(node, oneshot.ServerConfig{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background(), ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return node, lockingcenter.New(ln.Addr().String(), lockingcenter.WithSource("faults"))
}

// A write or fsync error under a lock: the client gets '-', the key is not
// held, the counter goes up, and the server keeps serving. A release whose
// write fails still takes effect and is answered '+'.
func TestServerWithWriteFaults(t *testing.T) {
	ctx := context.Background()
	fl := &faults{}
	reg := prometheus.NewRegistry()
	path := tempLogPath(t)
	l, restored := openLog(t, path, Config{FS: fl, Registerer: reg})
	table, c := serveTable(t, l, restored)
	// The node's first command, its restart, is written before any fault.
	if err := c.Lock(ctx, "warm-up"); err != nil {
		t.Fatal(err)
	}
	if err := c.Unlock(ctx, "warm-up"); err != nil {
		t.Fatal(err)
	}
	errorsSoFar := 0.0
	countedOne := func() {
		t.Helper()
		v, _ := counterValue(t, reg, metricWriteErrors)
		if v != errorsSoFar+1 {
			t.Fatalf("%s = %v, want %v", metricWriteErrors, v, errorsSoFar+1)
		}
		errorsSoFar = v
	}
	for _, tt := range []struct {
		name   string
		inject func(*faults)
	}{
		{"write", func(fl *faults) { fl.writes = 1 }},
		{"fsync", func(fl *faults) { fl.syncs = 1 }},
	} {
		key := "lock-" + tt.name + "-\xff"
		fl.set(tt.inject)
		if err := c.Lock(ctx, key); !errors.Is(err, lockingcenter.ErrFailed) {
			t.Fatalf("%s fault: lock got %v, want '-'", tt.name, err)
		}
		if g, held := table.Holder(key); held {
			t.Fatalf("%s fault: key held by %+v after '-'", tt.name, g)
		}
		countedOne()
		if err := c.TryLock(ctx, key); err != nil {
			t.Fatalf("%s fault: the server stopped serving: %v", tt.name, err)
		}
	}

	fl.set(func(fl *faults) { fl.writes = 1 })
	if err := c.Unlock(ctx, "lock-write-\xff"); err != nil {
		t.Fatalf("unlock with a failed write: %v, want '+'", err)
	}
	if _, held := table.Holder("lock-write-\xff"); held {
		t.Fatal("a release whose write failed did not take effect")
	}
	countedOne()
	// The failed release is written with the next batch.
	if err := c.Lock(ctx, "after"); err != nil {
		t.Fatal(err)
	}
	want := []string{`"after"="faults"`, `"lock-fsync-\xff"="faults"`}
	if got := heldKeys(reopen(t, l, path)); !slices.Equal(got, want) {
		t.Fatalf("restored %q, want %q", got, want)
	}
}
