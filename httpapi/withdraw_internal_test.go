package httpapi

import (
	"sync"
	"testing"
	"time"

	"github.com/locking-center/locking-center/mutex"
)

// A waiting acquire whose client went away just as the key was granted
// to it is released, not left held by nobody.
func TestWithdrawReleasesARacedGrant(t *testing.T) {
	node := mutex.NewNode(mutex.NodeConfig{})
	defer node.Close()
	s, err := New(node, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := s.clientFor("")
	acquire := func(owner string, wait time.Duration, ch chan mutex.Output) applied {
		cmd := mutex.Command{Op: mutex.OpAcquire, Key: "k", Source: owner, Owner: owner, Try: wait == 0, Wait: wait, ConnBound: true}
		a, ok := c.apply(cmd, ch, false)
		if !ok {
			t.Fatal("no session")
		}
		return a
	}
	held := acquire("a", 0, nil)
	ch := make(chan mutex.Output, 2)
	waiting := acquire("b", time.Minute, ch)
	if waiting.res.Status != mutex.StatusParked {
		t.Fatalf("status %v", waiting.res.Status)
	}
	<-ch // its result
	// The holder releases: b is granted, and its client is gone already.
	if a, _ := c.apply(mutex.Command{Op: mutex.OpRelease, Key: "k", Token: held.res.Token}, nil, false); a.res.Status != mutex.StatusOK {
		t.Fatalf("release %v", a.res.Status)
	}
	if h := node.Describe("k").Holders; len(h) != 1 || h[0].Source != "b" {
		t.Fatalf("holders %+v", h)
	}
	s.withdraw(c, "k", waiting.request, ch)
	if h := node.Describe("k").Holders; len(h) != 0 {
		t.Fatalf("the raced grant is still held: %+v", h)
	}
}

// A request that holds a client whose session expires under it is told
// so, and the client's next lookup opens a new session.
func TestEndedSessionAsksAgain(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	node := mutex.NewNode(mutex.NodeConfig{Clock: clock})
	defer node.Close()
	s, err := New(node, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	old := s.clientFor("c")
	if old.ensure("") != mutex.StatusOK {
		t.Fatal("not opened")
	}
	mu.Lock()
	now = now.Add(DefaultSessionTTL)
	mu.Unlock()
	node.Advance()
	cmd := mutex.Command{Op: mutex.OpAcquire, Key: "k", Source: "w", Owner: "w", Try: true}
	if _, ok := old.apply(cmd, make(chan mutex.Output, 2), true); ok {
		t.Fatal("applied in an expired session")
	}
	fresh := s.clientFor("c")
	a, ok := fresh.apply(cmd, nil, true)
	if fresh == old || !ok || a.res.Status != mutex.StatusGranted || fresh.sid == old.sid {
		t.Fatalf("fresh client %p (old %p), %v %v, sessions %d and %d", fresh, old, ok, a.res.Status, fresh.sid, old.sid)
	}
}
