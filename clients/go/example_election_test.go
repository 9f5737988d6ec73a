package lockingcenter_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
)

func ExampleElection() {
	ctx := context.Background()
	// A replica names its session by what the others need of the leader:
	// here the address it serves on.
	s, err := lockingcenter.NewSession(ctx, serverAddr, lockingcenter.WithSource("10.0.0.7:8080"))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	e := lockingcenter.NewElection(s, "scheduler/leader")

	lead, err := e.Campaign(ctx) // waits until this replica leads
	if err != nil {
		log.Fatal(err)
	}
	leader, _ := e.Leader(ctx)
	fmt.Println("leader:", leader.Name, leader.Token == lead.Token())

	// Lead while lead.Done() is open: pass lead.Token() with every write,
	// and stop when Done closes (the session expired, or a reset).
	select {
	case <-lead.Done():
		fmt.Println("lost:", lead.Cause())
	default:
		e.Resign() // the next candidate leads
	}
	_, err = e.Leader(ctx)
	fmt.Println(errors.Is(err, lockingcenter.ErrNoLeader))
	// Output:
	// leader: 10.0.0.7:8080 true
	// true
}

func ExampleElection_Observe() {
	ctx := context.Background()
	watcher, _ := lockingcenter.NewSession(ctx, serverAddr)
	defer watcher.Close()
	candidate, _ := lockingcenter.NewSession(ctx, serverAddr, lockingcenter.WithSource("10.0.0.8:8080"))
	defer candidate.Close()

	observing, stop := context.WithCancel(ctx)
	defer stop()
	leaders := lockingcenter.NewElection(watcher, "indexer/leader").Observe(observing)
	show := func() {
		if l := <-leaders; l.Token == 0 {
			fmt.Println("nobody leads")
		} else {
			fmt.Println("leader:", l.Name)
		}
	}
	show() // the state when the watch began

	e := lockingcenter.NewElection(candidate, "indexer/leader")
	e.Campaign(ctx)
	show()
	e.Resign()
	show()
	// Output:
	// nobody leads
	// leader: 10.0.0.8:8080
	// nobody leads
}

func ExampleSemaphore() {
	ctx := context.Background()
	s, _ := lockingcenter.NewSession(ctx, serverAddr)
	defer s.Close()

	// At most two exports at once, across every process that uses the key.
	exports := lockingcenter.NewSemaphore(s, "exports", 2)
	first, _ := exports.Acquire(ctx)
	second, _ := exports.Acquire(ctx)
	_, err := exports.TryAcquire(ctx)
	fmt.Println(errors.Is(err, lockingcenter.ErrBusy), first.Token() != second.Token())
	second.Release()

	// While anyone holds or waits for the key, another limit is refused.
	defer first.Release()
	_, err = lockingcenter.NewSemaphore(s, "exports", 3).TryAcquire(ctx)
	if mm := (*lockingcenter.LimitMismatchError)(nil); errors.As(err, &mm) {
		fmt.Println("the key has", mm.Limit, "places")
	}
	// Output:
	// true true
	// the key has 2 places
}
