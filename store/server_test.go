package store

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/mutex"
	"github.com/prometheus/client_golang/prometheus"
)

// serveTable serves a lock table journaled to l (nil: none) on a port of
// 127.0.0.1 until the test ends, and returns the table and a client of it.
func serveTable(t testing.TB, l *Log, grants []mutex.Grant) (*mutex.Table, *lockingcenter.Client) {
	t.Helper()
	var journal mutex.Journal
	if l != nil {
		journal = l
	}
	table := mutex.NewTable(mutex.Config{Journal: journal})
	table.Restore(grants)
	var log *slog.Logger
	if _, ok := t.(*testing.T); ok {
		log = testLogger(t)
	}
	srv, err := mutex.NewServer(table, mutex.ServerConfig{Logger: log})
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
	return table, lockingcenter.New(ln.Addr().String(), lockingcenter.WithSource("faults"))
}

// A write or fsync error under a lock: the client gets '-', the key is not
// held, the counter goes up, and the server keeps serving. A release whose
// write fails still takes effect and is answered '+'.
func TestServerWithWriteFaults(t *testing.T) {
	ctx := context.Background()
	fl := &faults{}
	reg := prometheus.NewRegistry()
	path := tempLogPath(t)
	l, grants := openLog(t, path, Config{OpenFile: fl.openFile, Registerer: reg})
	table, c := serveTable(t, l, grants)
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
	want := []mutex.Grant{
		{Key: "lock-fsync-\xff", Source: "faults"},
		{Key: "after", Source: "faults"},
	}
	got := reopenHolders(t, l, path)
	if len(got) != len(want) {
		t.Fatalf("restored %d keys, want %d: %+v", len(got), len(want), got)
	}
	for _, w := range want {
		g, ok := got[w.Key]
		if !ok || g.Source != w.Source {
			t.Fatalf("restored %+v, want %q held by %q", got, w.Key, w.Source)
		}
	}
}

// reopenHolders closes l and returns what its file replays to, by key.
func reopenHolders(t *testing.T, l *Log, path string) map[string]mutex.Grant {
	t.Helper()
	out := make(map[string]mutex.Grant)
	for _, g := range reopen(t, l, path) {
		out[g.Key] = g
	}
	return out
}
