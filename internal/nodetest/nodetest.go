// Package nodetest fills a mutex.Node for tests, without clients: many
// sessions, each holding a key, built in a moment; and records a node's
// events.
package nodetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/locking-center/locking-center/mutex"
)

// SharedHolders opens count sessions of n, session i named name(i), each
// holding key shared, and returns their names by fencing token. The
// sessions have a TTL of 5 minutes and no client: what the node delivers
// to them is dropped.
func SharedHolders(n *mutex.Node, key string, count int, name func(i int) string) (map[uint64]string, error) {
	names := make(map[uint64]string, count)
	for i := range count {
		nm := name(i)
		live, res, _ := n.OpenSession(nm, 5*time.Minute, [mutex.SecretHashLen]byte{}, "", dropRoute{})
		if live == nil {
			return nil, fmt.Errorf("open session %d: %v", i, res.Status)
		}
		res, _, _ = n.ApplySession(mutex.Command{Op: mutex.OpAcquire, Session: live.ID(), Request: 1, Key: key,
			Mode: mutex.Shared, Try: true, Source: nm})
		if res.Status != mutex.StatusGranted {
			return nil, fmt.Errorf("session %d acquires %q shared: %v", i, key, res.Status)
		}
		names[res.Token] = nm
	}
	return names, nil
}

// dropRoute is the route of a session without a client.
type dropRoute struct{}

func (dropRoute) Deliver(mutex.Output) {}
func (dropRoute) Flush()               {}

// Record records every event of n from now until the test ends, and
// returns a function that returns a copy of the events so far.
func Record(t testing.TB, n *mutex.Node) (events func() []mutex.Event) {
	var mu sync.Mutex
	var seen []mutex.Event
	t.Cleanup(n.Observe(func(ev mutex.Event) {
		mu.Lock()
		seen = append(seen, ev)
		mu.Unlock()
	}))
	return func() []mutex.Event {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}
