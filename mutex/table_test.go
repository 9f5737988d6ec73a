package mutex

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

func TestTableLockParksForMinutes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := NewTable(Config{})
		ctx := context.Background()
		if _, err := tb.Lock(ctx, Claim{Key: "k", Source: "a"}); err != nil {
			t.Fatal(err)
		}
		got := make(chan Grant, 1)
		go func() {
			g, err := tb.Lock(ctx, Claim{Key: "k", Source: "b"})
			if err != nil {
				t.Error(err)
			}
			got <- g
		}()
		synctest.Wait()
		time.Sleep(15 * time.Minute)
		synctest.Wait()
		if len(got) != 0 {
			t.Fatal("b granted while a holds the key")
		}
		tb.Release("k")
		g := <-got
		if g.Source != "b" {
			t.Fatalf("grant = %+v", g)
		}
		snap := tb.Snapshot()
		if snap.Wait.Count != 2 || snap.Wait.Buckets[600] != 1 || snap.Wait.Buckets[WaitBuckets[0]] != 1 {
			t.Fatalf("wait histogram = %+v; want one grant at once and one after 15 minutes", snap.Wait)
		}
	})
}

func TestTableLockContextWithdraws(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := NewTable(Config{})
		tb.Lock(context.Background(), Claim{Key: "k", Source: "a"})
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := tb.Lock(ctx, Claim{Key: "k", Source: "b"})
			errc <- err
		}()
		synctest.Wait()
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("Lock = %v", err)
		}
		tb.Release("k")
		if tb.Len() != 0 {
			t.Fatal("withdrawn request was granted")
		}
		if s := tb.Snapshot(); s.Withdrawn != 1 || s.Parked != 0 {
			t.Fatalf("withdrawn=%d parked=%d", s.Withdrawn, s.Parked)
		}
	})
}

func TestTableResetSourceWithdrawsParked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := NewTable(Config{})
		ctx := context.Background()
		tb.Lock(ctx, Claim{Key: "k", Source: "a"})
		errs := make(chan error, 2)
		for _, src := range []string{"gone", "stays"} {
			go func() {
				_, err := tb.Lock(ctx, Claim{Key: "k", Source: src})
				errs <- err
			}()
			synctest.Wait()
		}
		released, withdrawn, _ := tb.ResetSource("gone")
		if released != 0 || withdrawn != 1 {
			t.Fatalf("released=%d withdrawn=%d", released, withdrawn)
		}
		if err := <-errs; !errors.Is(err, ErrWithdrawn) {
			t.Fatalf("parked request of the reset source: %v", err)
		}
		released, _, _ = tb.ResetSource("a")
		if released != 1 {
			t.Fatalf("released=%d", released)
		}
		if err := <-errs; err != nil {
			t.Fatalf("next waiter: %v", err)
		}
		if g, _ := tb.Holder("k"); g.Source != "stays" {
			t.Fatalf("holder = %q", g.Source)
		}
	})
}

func TestJournalSeesEveryChangeInOrder(t *testing.T) {
	j := NewMemoryJournal()
	tb := NewTable(Config{Journal: j})
	ctx := context.Background()
	for i := range 10 {
		tb.Lock(ctx, Claim{Key: fmt.Sprint(i), Source: "s"})
	}
	tb.Release("3")
	tb.ResetKey("4")
	tb.ResetSource("nobody")
	tb.Release("not-held")
	if got := j.Changes(); got != 12 {
		t.Fatalf("journal saw %d changes, want 10 grants and 2 releases", got)
	}
	held := j.Held()
	snap := tb.Snapshot()
	if len(held) != len(snap.Holders) {
		t.Fatalf("journal holds %d keys, table %d", len(held), len(snap.Holders))
	}
	for i, g := range held {
		if g != snap.Holders[i].Grant {
			t.Fatalf("journal %+v != table %+v", g, snap.Holders[i].Grant)
		}
	}
}

// failingJournal fails every grant and records releases.
type failingJournal struct{ releases int }

type failed struct{}

func (failed) Wait() error { return fmt.Errorf("disk full: %w", ErrJournal) }

func (j *failingJournal) Append(c Change) Pending {
	if c.Op == OpRelease {
		j.releases++
		return nil
	}
	return failed{}
}

func TestGrantThatCannotBeJournaledIsReleased(t *testing.T) {
	j := &failingJournal{}
	tb := NewTable(Config{Journal: j})
	_, err := tb.Lock(context.Background(), Claim{Key: "k"})
	if !errors.Is(err, ErrJournal) {
		t.Fatalf("Lock = %v, want ErrJournal", err)
	}
	if _, held := tb.Holder("k"); held || j.releases != 1 {
		t.Fatalf("key held=%v releases=%d; want released once", held, j.releases)
	}
}

func TestRestoreKeepsMetadata(t *testing.T) {
	acquired := time.Date(2026, 8, 27, 11, 59, 11, 0, time.UTC)
	tb := NewTable(Config{})
	tb.Restore([]Grant{{ID: 99, Key: "k", Source: "10.0.0.4", RemoteAddr: "10.0.0.4:51314", Acquired: acquired}})
	g, ok := tb.Holder("k")
	if !ok || g.Source != "10.0.0.4" || g.RemoteAddr != "10.0.0.4:51314" || !g.Acquired.Equal(acquired) {
		t.Fatalf("restored holder = %+v", g)
	}
	if _, _, err := tb.TryLock(Claim{Key: "k"}); !errors.Is(err, ErrBusy) {
		t.Fatalf("trylock of restored key = %v", err)
	}
	if g2, _, _ := tb.TryLock(Claim{Key: "other"}); g2.ID == g.ID {
		t.Fatal("restored and fresh grants share an id")
	}
}

func TestHeldNeverNegative(t *testing.T) {
	g := Grant{Acquired: time.Now().Add(time.Hour).Round(0)} // wall clock only, in the future
	if d := g.Held(time.Now()); d != 0 {
		t.Fatalf("Held = %v after a clock step back", d)
	}
}
