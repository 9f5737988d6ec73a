package lockingcenter_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
)

func ExampleNewSession() {
	ctx := context.Background()
	s, err := lockingcenter.NewSession(ctx, serverAddr, lockingcenter.WithSource("billing-7f9c"))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close() // releases whatever the session still holds

	// Held until Release, the session's end, or 30 s unless renewed.
	lock, err := s.Acquire(ctx, "invoices/2024-06", lockingcenter.WithLease(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Release()

	select {
	case <-lock.Done():
		fmt.Println("lost:", lock.Cause())
	default:
		fmt.Println("holding", lock.Key())
	}
	// Output: holding invoices/2024-06
}

func ExampleSession_Acquire_tryOnce() {
	ctx := context.Background()
	a, _ := lockingcenter.NewSession(ctx, serverAddr)
	defer a.Close()
	b, _ := lockingcenter.NewSession(ctx, serverAddr)
	defer b.Close()

	a.Acquire(ctx, "nightly-report")
	_, err := b.Acquire(ctx, "nightly-report", lockingcenter.TryOnce())
	switch {
	case errors.Is(err, lockingcenter.ErrBusy):
		fmt.Println("another runner has it")
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println("won")
	}
	// Output: another runner has it
}

// A resource that remembers the highest fencing token it has seen refuses
// a holder whose lock has ended, however late it wakes up.
func ExampleLock_Token() {
	ctx := context.Background()
	var highest uint64
	write := func(token uint64) error {
		if token < highest {
			return fmt.Errorf("token %d is stale", token)
		}
		highest = token
		return nil
	}

	s, _ := lockingcenter.NewSession(ctx, serverAddr)
	defer s.Close()
	first, _ := s.Acquire(ctx, "ledger")
	write(first.Token())
	first.Release() // or lost while its holder stalled
	second, _ := s.Acquire(ctx, "ledger")
	defer second.Release()
	write(second.Token())

	err := write(first.Token())
	fmt.Println(err != nil)
	// Output: true
}

// Cancelling the context ends the wait, never a lock already held.
func ExampleSession_Acquire_timeout() {
	s, _ := lockingcenter.NewSession(context.Background(), serverAddr)
	defer s.Close()
	held, _ := s.Acquire(context.Background(), "quarterly-report")
	defer held.Release()

	other, _ := lockingcenter.NewSession(context.Background(), serverAddr)
	defer other.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := other.Acquire(ctx, "quarterly-report") // the request leaves the queue at the deadline
	fmt.Println(errors.Is(err, context.DeadlineExceeded))
	// Output: true
}
