package lockingcenter_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/internal/nodetest"
)

// key127 returns a key of 127 bytes, number i of prefix p.
func key127(p string, i int) string {
	k := fmt.Sprintf("%s/%d/", p, i)
	return k + strings.Repeat("k", lockingcenter.MaxKeyLen-len(k))
}

// acquireAll acquires keys in s with a few goroutines and returns their
// locks, in the order of keys.
func acquireAll(t *testing.T, s *lockingcenter.Session, keys []string) []*lockingcenter.Lock {
	t.Helper()
	locks := make([]*lockingcenter.Lock, len(keys))
	errs := make(chan error, len(keys))
	var wg sync.WaitGroup
	const workers = 32
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(keys); i += workers {
				l, err := s.Acquire(context.Background(), keys[i], lockingcenter.TryOnce())
				if err != nil {
					errs <- fmt.Errorf("acquire %q: %w", keys[i], err)
					return
				}
				locks[i] = l
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return locks
}

// A session holding 10,000 keys of 127 bytes, with 200 acquires parked,
// resumes after its connection is cut: the WELCOME comes in several frames,
// and the client learns every key (no lock ends) and every parked request
// (each is granted later, none fails as unanswered).
func TestSessionResumeManyKeys(t *testing.T) {
	const nHeld, nParked = 10_000, 200
	srv := startServer(t, serverOptions{})
	tn := newTestNet()
	a := srv.open(lockingcenter.WithSource("many"), lockingcenter.WithDialer(tn.dial), lockingcenter.WithTTL(time.Minute))
	b := srv.open(lockingcenter.WithSource("other"))
	keys := make([]string, nHeld)
	for i := range keys {
		keys[i] = key127("held", i)
	}
	locks := acquireAll(t, a, keys)
	others := make([]string, nParked)
	for i := range others {
		others[i] = key127("parked", i)
	}
	theirs := acquireAll(t, b, others)
	waits := make([]<-chan acquired, nParked)
	for i, k := range others {
		waits[i] = acquireAsync(context.Background(), a, k)
	}
	eventually(t, "the parked acquires", func() bool {
		info, _ := srv.sessionInfo(a.ID())
		return info.Parked == nParked
	})

	tn.block()
	tn.cut()
	srv.waitDetached(a.ID())
	begun := time.Now()
	tn.unblock()
	// Answered after the resume's reconciliation: the WELCOME was read whole.
	if _, err := a.Describe(context.Background(), keys[0]); err != nil {
		t.Fatal(err)
	}
	t.Logf("resumed a session of %d keys and %d parked in %v", nHeld, nParked, time.Since(begun))
	if n := srv.node.Snapshot().Counters.Resumes; n != 1 {
		t.Fatalf("%d resumes", n)
	}
	for i, l := range locks {
		if ended(l.Done()) {
			t.Fatalf("lock %d (%q) ended with the resume: %v", i, l.Key(), l.Cause())
		}
		if h, _ := srv.node.Holder(keys[i]); h.Token != l.Token() {
			t.Fatalf("%q: held by %+v, the lock has token %d", keys[i], h, l.Token())
		}
	}
	for _, l := range theirs {
		if err := l.Release(); err != nil {
			t.Fatal(err)
		}
	}
	for i, ch := range waits {
		got := receive(t, "a parked acquire", ch)
		if got.err != nil {
			t.Fatalf("parked %d: %v", i, got.err)
		}
		if h, _ := srv.node.Holder(others[i]); h.Token != got.lock.Token() {
			t.Fatalf("%q: held by %+v, the lock has token %d", others[i], h, got.lock.Token())
		}
	}
}

// Describe of a key with 10,000 shared holders with names of 127 bytes
// returns every holder (the INFO came in several frames).
func TestDescribeManySharedHolders(t *testing.T) {
	srv := startServer(t, serverOptions{})
	want, err := nodetest.SharedHolders(srv.node, "wide", 10_000, func(i int) string { return key127("reader", i) })
	if err != nil {
		t.Fatal(err)
	}
	s := srv.open()
	info, err := s.Describe(context.Background(), "wide")
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Holders) != len(want) || info.Key != "wide" {
		t.Fatalf("%q: %d holders, want %d", info.Key, len(info.Holders), len(want))
	}
	for _, h := range info.Holders {
		if name, ok := want[h.Token]; !ok || h.Name != name || !h.Shared {
			t.Fatalf("holder %+v, want %q shared (known %v)", h, name, ok)
		}
		delete(want, h.Token)
	}
	// The session goes on: the next answer was not taken for a page.
	if l := mustAcquire(t, s, "after"); l.Release() != nil {
		t.Fatal("release")
	}
}
