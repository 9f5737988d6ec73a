package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/manager"
)

// The Go client given every node's address follows the leader: its
// sessions open at the leader though the first address is a follower's;
// when the leader is frozen and killed (SIGSTOP, then SIGKILL), or stopped
// with SIGTERM (it hands its leadership over), each session resumes at
// the new leader. The key a session held is still its own, under the same
// token; its parked acquire is granted exactly once when the key is free;
// an acquire sent while the leader was frozen is applied once (sent again
// with its request id).
func TestClusterGoClientFollowsLeader(t *testing.T) {
	for _, end := range []string{"killed", "stopped"} {
		t.Run(end, func(t *testing.T) { testGoClientFollowsLeader(t, end) })
	}
}

func testGoClientFollowsLeader(t *testing.T, end string) {
	lc := startCluster(t, 3)
	lead, ok := lc.leader(all(3), 30*time.Second)
	if !ok {
		t.Fatalf("no leader:\n%s", lc.logs())
	}
	rest := slices.DeleteFunc(all(3), func(i int) bool { return i == lead })
	// A follower first: the sessions must find the leader by themselves.
	addrs := strings.Join(lc.mutexAddrs([]int{rest[0], lead, rest[1]}), ",")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	open := func(name string) *lockingcenter.Session {
		t.Helper()
		s, err := lockingcenter.NewSession(ctx, addrs, lockingcenter.WithSource(name), lockingcenter.WithTTL(20*time.Second))
		if err != nil {
			t.Fatalf("session %s at %s: %v\n%s", name, addrs, err, lc.logs())
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open("a"), open("b")
	held, err := a.Acquire(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	other, err := b.Acquire(ctx, "parked")
	if err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		lock *lockingcenter.Lock
		err  error
	}
	acquire := func(key string) <-chan outcome {
		ch := make(chan outcome, 1)
		go func() {
			l, err := a.Acquire(ctx, key)
			ch <- outcome{l, err}
		}()
		return ch
	}
	parked := acquire("parked")
	awaitInfo(t, b, "parked", "a parked behind b", func(ki lockingcenter.KeyInfo) bool { return ki.Queue == 1 })

	var inflight <-chan outcome
	p := lc.nodes[lead].p.cmd.Process
	switch end {
	case "killed":
		if err := p.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		inflight = acquire("inflight")
		if _, ok := lc.leader(rest, 30*time.Second); !ok {
			p.Signal(syscall.SIGCONT)
			t.Fatalf("no leader while %s is frozen:\n%s", lc.nodes[lead].id, lc.logs())
		}
		lc.kill(lead)
	case "stopped":
		lc.stop(lead)
		inflight = acquire("inflight")
	}
	next, ok := lc.leader(rest, 30*time.Second)
	if !ok {
		t.Fatalf("no leader after %s was %s:\n%s", lc.nodes[lead].id, end, lc.logs())
	}
	got := <-inflight
	if got.err != nil {
		t.Fatalf("the acquire sent as the leader went: %v\n%s", got.err, lc.logs())
	}
	awaitInfo(t, a, "inflight", "inflight held once by a", func(ki lockingcenter.KeyInfo) bool {
		return len(ki.Holders) == 1 && ki.Holders[0].Token == got.lock.Token() && ki.Holders[0].Count == 1 && ki.Queue == 0
	})
	select {
	case <-held.Done():
		t.Fatalf("the held lock ended: %v", held.Cause())
	default:
	}
	awaitInfo(t, a, "held", "held still a's", func(ki lockingcenter.KeyInfo) bool {
		return len(ki.Holders) == 1 && ki.Holders[0].Token == held.Token() && ki.Holders[0].Session == a.ID()
	})
	select {
	case o := <-parked:
		t.Fatalf("the parked acquire ended while b held the key: %v", o.err)
	default:
	}
	if err := other.Release(); err != nil {
		t.Fatalf("b's release at the new leader: %v", err)
	}
	o := <-parked
	if o.err != nil {
		t.Fatalf("the parked acquire: %v\n%s", o.err, lc.logs())
	}
	if o.lock.Token() <= other.Token() {
		t.Errorf("granted token %d, not above b's %d", o.lock.Token(), other.Token())
	}
	awaitInfo(t, a, "parked", "parked granted once to a", func(ki lockingcenter.KeyInfo) bool {
		return len(ki.Holders) == 1 && ki.Holders[0].Token == o.lock.Token() && ki.Holders[0].Session == a.ID() &&
			ki.Holders[0].Count == 1 && ki.Queue == 0
	})
	if err := o.lock.Release(); err != nil {
		t.Fatal(err)
	}
	awaitInfo(t, a, "parked", "parked free after one release", func(ki lockingcenter.KeyInfo) bool {
		return len(ki.Holders) == 0 && ki.Queue == 0
	})
	// Both sessions are attached at the new leader.
	mc := &manager.Client{Addr: lc.addrs(next).Manager}
	ss, err := mc.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint64{a.ID(), b.ID()} {
		i := slices.IndexFunc(ss, func(s manager.Session) bool { return s.ID == id })
		if i < 0 || ss[i].RemoteAddr == "" {
			t.Errorf("session %d not attached at the new leader %s: %+v", id, lc.nodes[next].id, ss)
		}
	}
}

// awaitInfo waits until s's DESCRIBE of key satisfies ok, for at most 30 s.
func awaitInfo(t *testing.T, s *lockingcenter.Session, key, what string, ok func(lockingcenter.KeyInfo) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ki, err := s.Describe(ctx, key)
		cancel()
		if err == nil && ok(ki) {
			return
		}
		last = fmt.Sprintf("%+v, %v", ki, err)
		if errors.Is(err, lockingcenter.ErrSessionExpired) || errors.Is(err, lockingcenter.ErrSessionClosed) {
			break
		}
		time.Sleep(pollEvery)
	}
	t.Fatalf("%s: describe %q: %s", what, key, last)
}

// A leader frozen (SIGSTOP) for 6 s, longer than a 3 s TTL: every Go
// session counts its connection dead after the keepalive and its margin,
// leaves the frozen node for the others (not first the node that went
// silent, though it is first in their addresses and the followers name it
// until they elect another) and resumes at the new leader before its TTL
// runs out. No session expires; every lock is still held, under its token.
// The test logs how long after the new leader served each session was
// attached to it, for the 3 s TTL and for the default one.
func TestClusterGoClientFrozenLeader(t *testing.T) {
	const freeze = 6 * time.Second
	lc := startCluster(t, 3)
	lead, ok := lc.leader(all(3), 30*time.Second)
	if !ok {
		t.Fatalf("no leader:\n%s", lc.logs())
	}
	rest := slices.DeleteFunc(all(3), func(i int) bool { return i == lead })
	addrs := strings.Join(lc.mutexAddrs([]int{lead, rest[0], rest[1]}), ",")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type held struct {
		s    *lockingcenter.Session
		lock *lockingcenter.Lock
		ttl  string
	}
	var hs []held
	for i, ttl := range []time.Duration{3 * time.Second, 3 * time.Second, 3 * time.Second, 3 * time.Second,
		0, 0, 0, 0} {
		name := fmt.Sprintf("frozen-%d", i)
		s, err := lockingcenter.NewSession(ctx, addrs, lockingcenter.WithSource(name), lockingcenter.WithTTL(ttl))
		if err != nil {
			t.Fatalf("session %s: %v\n%s", name, err, lc.logs())
		}
		t.Cleanup(func() { s.Close() })
		l, err := s.Acquire(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, held{s, l, s.TTL().String()})
	}

	thaw := lc.freeze(lead)
	frozenAt := time.Now()
	next, ok := lc.leader(rest, 30*time.Second)
	if !ok {
		t.Fatalf("no leader while %s is frozen:\n%s", lc.nodes[lead].id, lc.logs())
	}
	servedAt := time.Now()
	t.Logf("%s frozen; %s served %v later", lc.nodes[lead].id, lc.nodes[next].id, servedAt.Sub(frozenAt).Round(time.Millisecond))

	// When each session is attached at the new leader, polled through its
	// management port until the freeze ends.
	mc := &manager.Client{Addr: lc.addrs(next).Manager}
	attached := map[uint64]time.Duration{}
	for len(attached) < len(hs) && time.Since(frozenAt) < freeze {
		ss, err := mc.Sessions(ctx)
		if err == nil {
			for _, s := range ss {
				if _, seen := attached[s.ID]; !seen && s.RemoteAddr != "" {
					attached[s.ID] = time.Since(servedAt)
				}
			}
		}
		time.Sleep(pollEvery)
	}
	time.Sleep(time.Until(frozenAt.Add(freeze)))
	thaw()
	for _, h := range hs {
		if d, ok := attached[h.s.ID()]; ok {
			t.Logf("session %d (TTL %s) attached at the new leader %v after it served", h.s.ID(), h.ttl, d.Round(time.Millisecond))
		} else {
			t.Errorf("session %d (TTL %s) not attached at the new leader within the freeze", h.s.ID(), h.ttl)
		}
	}
	expired := 0
	for _, h := range hs {
		if err := h.s.Err(); err != nil {
			expired++
			t.Errorf("session %d (TTL %s) ended: %v", h.s.ID(), h.ttl, err)
			continue
		}
		select {
		case <-h.lock.Done():
			t.Errorf("the lock of session %d (TTL %s) ended: %v", h.s.ID(), h.ttl, h.lock.Cause())
		default:
		}
		awaitInfo(t, h.s, h.lock.Key(), "still held", func(ki lockingcenter.KeyInfo) bool {
			return len(ki.Holders) == 1 && ki.Holders[0].Token == h.lock.Token() && ki.Holders[0].Session == h.s.ID()
		})
	}
	t.Logf("%d of %d sessions expired", expired, len(hs))
}
