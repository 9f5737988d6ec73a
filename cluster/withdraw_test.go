package cluster

import (
	"slices"
	"sync/atomic"
	"testing"

	"github.com/locking-center/locking-center/internal/nodetest"
	"github.com/locking-center/locking-center/mutex"
)

// A leader withdraws a parked v1 request whose client has left before
// the release that would grant it: the cancel goes into the raft log
// first, every node applies both, none grants the departed request, and
// the next waiter gets the key.
func TestLeaderWithdrawsDepartedWaiter(t *testing.T) {
	nodes := newTestCluster(t, 3)
	lead, _ := tryLock(t, nodes, mutex.Claim{Key: "k", Source: "holder"})
	woke := make(chan mutex.Event, 2)
	park := func(source string, gone func() bool) uint64 {
		t.Helper()
		res, _ := lead.n.ApplyWatched(mutex.Command{Op: mutex.OpAcquire, Key: "k", Source: source, ConnBound: true},
			func(ev mutex.Event, _ mutex.Pending) { woke <- ev }, gone)
		if res.Status != mutex.StatusParked {
			t.Fatalf("%s's lock: %v", source, res.Status)
		}
		return res.Ticket
	}
	var left atomic.Bool
	departs := park("departs", left.Load)
	park("next", func() bool { return false })
	var follower *testNode
	for _, tn := range nodes {
		if tn != lead {
			follower = tn
		}
	}
	converge(t, lead, nodes) // the follower's events from here on are the release's
	events := nodetest.Record(t, follower.n)

	left.Store(true)
	if _, err := lead.n.Release("k"); err != nil {
		t.Fatal(err)
	}
	if ev := <-woke; ev.Kind != mutex.EventWithdrawn || ev.Reason != mutex.ReasonCancelled || ev.Ticket != departs {
		t.Fatalf("first wake %+v, want the departed request's withdrawal", ev)
	}
	if ev := <-woke; ev.Kind != mutex.EventGranted || ev.Source != "next" {
		t.Fatalf("second wake %+v, want the next waiter's grant", ev)
	}
	converge(t, lead, nodes)
	if h, ok := follower.n.Holder("k"); !ok || h.Source != "next" {
		t.Fatalf("%s has k held by %+v", follower.id, h)
	}
	var kinds []mutex.EventKind
	for _, ev := range events() {
		kinds = append(kinds, ev.Kind)
	}
	if want := []mutex.EventKind{mutex.EventWithdrawn, mutex.EventReleased, mutex.EventGranted}; !slices.Equal(kinds, want) {
		t.Fatalf("%s's events %v, want %v", follower.id, kinds, want)
	}
}
