package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/manager"
)

// lateCopies is how many clients send each late request.
const lateCopies = 16

// lateV1 is one v1 request that a client sends through a follower while
// the leader is frozen, and gives up on.
type lateV1 struct {
	what   string
	key    string
	source string
	send   func(ctx context.Context, c *lockingcenter.Client) error
	// relock: after a new leader serves, the client resets its source and
	// locks key again, and the new grant must stay; otherwise the key
	// must stay free.
	relock bool
}

// Three v1 requests reach the cluster late: each is sent through a
// follower just after the leader was frozen (SIGSTOP), the follower
// forwards it into the frozen leader's socket, and its client gives up
// after 1 s and closes the connection without an answer. An unlock and a
// reset by key of a key their source held: once another node leads, the
// client resets its source and locks the key again through the follower.
// A lock of a free key: its client simply went away. Then the old leader
// goes on and rejoins. The late unlock and reset end nothing: each key
// stays with its new grant, under its token, for as long as a late
// request could still be forwarded, and a session's try-acquire of it is
// refused busy; the late lock holds nothing, and a session takes the key.
// The three nodes hold one table.
func TestClusterLateV1Requests(t *testing.T) {
	lc := startCluster(t, 3)
	lead, ok := lc.agreedLeader(30 * time.Second)
	if !ok {
		t.Fatalf("no leader:\n%s", lc.logs())
	}
	rest := slices.DeleteFunc(all(3), func(i int) bool { return i == lead })
	f := rest[0]
	var mu sync.Mutex
	alive := all(3)
	l := &load{lc: lc, alive: func() []int { mu.Lock(); defer mu.Unlock(); return slices.Clone(alive) }}
	setAlive := func(nodes []int) { mu.Lock(); alive = nodes; mu.Unlock() }
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	through := func(i int, src string, timeout time.Duration) *lockingcenter.Client {
		return lockingcenter.New(lc.addrs(i).Mutex, lockingcenter.WithSource(src),
			lockingcenter.WithConnectTimeout(time.Second), lockingcenter.WithReadTimeout(timeout))
	}

	lates := []lateV1{
		{what: "unlock", key: "late/unlock", source: "late-unlock", relock: true,
			send: func(ctx context.Context, c *lockingcenter.Client) error { return c.Unlock(ctx, "late/unlock") }},
		{what: "reset by key", key: "late/reset", source: "late-reset", relock: true,
			send: func(ctx context.Context, c *lockingcenter.Client) error { return c.ResetByKey(ctx, "late/reset") }},
		{what: "lock", key: "late/lock", source: "late-lock",
			send: func(ctx context.Context, c *lockingcenter.Client) error {
				ctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				return c.Lock(ctx, "late/lock")
			}},
	}
	first := map[string]uint64{} // key -> the token of its grant before the freeze
	for _, r := range lates {
		if !r.relock {
			continue
		}
		if err := through(f, r.source, 5*time.Second).Lock(ctx, r.key); err != nil {
			t.Fatalf("lock %s through %s: %v\n%s", r.key, lc.nodes[f].id, err, lc.logs())
		}
		tok, err := l.holderOf(r.key, r.source)
		if err != nil || tok == 0 {
			t.Fatalf("%s answered '+' but the leader lists token %d (%v)", r.key, tok, err)
		}
		first[r.key] = tok
	}

	thaw := lc.freeze(lead)
	setAlive(rest)
	// At once, while the follower still takes the frozen node for the
	// leader: each request goes into its socket, and its client gives up.
	// Each is sent lateCopies times: the old leader, let go on, serves
	// those it reads before it hears of the new term as the leader it
	// was (they fail to commit), and those it reads after as a follower
	// (it forwards them to the new leader, unless their client left).
	var wg sync.WaitGroup
	errs := make([]error, len(lates)*lateCopies)
	for i := range errs {
		r := lates[i%len(lates)]
		wg.Go(func() { errs[i] = r.send(ctx, through(f, r.source, time.Second)) })
	}
	wg.Wait()
	for i, err := range errs {
		if r := lates[i%len(lates)]; err == nil {
			t.Fatalf("the %s of %s was answered '+' with the leader frozen", r.what, r.key)
		}
	}
	if _, ok := lc.leader(rest, 30*time.Second); !ok {
		t.Fatalf("no leader while %s is frozen:\n%s", lc.nodes[lead].id, lc.logs())
	}

	// The clients that gave up reset their sources and lock again, through
	// the follower, retrying until answered.
	second := map[string]uint64{}
	for _, r := range lates {
		if !r.relock {
			continue
		}
		c := through(f, r.source, 5*time.Second)
		var err error
		for range 10 {
			if err = c.ResetBySource(ctx, r.source); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatalf("reset source %s: %v\n%s", r.source, err, lc.logs())
		}
		if tok, err := l.holderOf(r.key, r.source); err != nil || tok != 0 {
			t.Fatalf("%s still held under token %d after its source's reset (%v)", r.key, tok, err)
		}
		if err := c.Lock(ctx, r.key); err != nil {
			t.Fatalf("lock %s again: %v\n%s", r.key, err, lc.logs())
		}
		tok, err := l.holderOf(r.key, r.source)
		if err != nil || tok <= first[r.key] {
			t.Fatalf("%s locked again: the leader lists token %d, want one above %d (%v)", r.key, tok, first[r.key], err)
		}
		second[r.key] = tok
	}

	thaw()
	setAlive(all(3))
	if _, ok := lc.agreedLeader(30 * time.Second); !ok {
		t.Fatalf("%s did not rejoin:\n%s", lc.nodes[lead].id, lc.logs())
	}
	// A late request may still be forwarded for as long as a node holds a
	// v1 request while it looks for a leader, and v1 tells nobody when it
	// gave up: the keys are watched that long.
	taken := map[string]bool{} // keys a late request changed, reported once
	for since := time.Now(); time.Since(since) < v1Settle && len(taken) < len(lates); time.Sleep(pollEvery) {
		mc, ok := l.leaderManager()
		if !ok {
			t.Fatalf("no leader to list the holders:\n%s", lc.logs())
		}
		hctx, hcancel := context.WithTimeout(ctx, 5*time.Second)
		hs, err := mc.Holders(hctx)
		hcancel()
		if err != nil {
			continue
		}
		for _, r := range lates {
			want := "nobody"
			if r.relock {
				want = holderName(r.source, second[r.key])
			}
			if got := heldBy(hs, r.key); got != want && !taken[r.key] {
				taken[r.key] = true
				t.Errorf("%v after the old leader rejoined: %s is held by %s, want %s (the late %s took effect)",
					time.Since(since).Round(time.Millisecond), r.key, got, want, r.what)
			}
		}
	}

	s, err := lockingcenter.NewSession(ctx, strings.Join(lc.mutexAddrs(all(3)), ","), lockingcenter.WithSource("checker"))
	if err != nil {
		t.Fatalf("session: %v\n%s", err, lc.logs())
	}
	defer s.Close()
	for _, r := range lates {
		lk, err := s.Acquire(ctx, r.key, lockingcenter.TryOnce())
		switch {
		case r.relock && !errors.Is(err, lockingcenter.ErrBusy):
			t.Errorf("a session's try-acquire of %s, held by its new grant: %v, want %v", r.key, err, lockingcenter.ErrBusy)
		case !r.relock && err != nil:
			t.Errorf("a session's try-acquire of %s, which the late lock must not hold: %v", r.key, err)
		}
		if err == nil {
			lk.Release()
		}
	}
	if _, err := lc.converged(all(3), 30*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, lc.logs())
	}
}

// heldBy names the v1 holder of key in hs by its token, or says it is
// free.
func heldBy(hs []manager.Holder, key string) string {
	i := slices.IndexFunc(hs, func(h manager.Holder) bool { return h.Key == key })
	if i < 0 {
		return "nobody"
	}
	return holderName(hs[i].Source, hs[i].Token)
}

func holderName(source string, token uint64) string {
	return fmt.Sprintf("%s under token %d", source, token)
}
