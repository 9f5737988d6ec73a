package lockingcenter_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
)

func Example() {
	ctx := context.Background()
	c := lockingcenter.New(serverAddr, lockingcenter.WithSource("billing-7f9c"))

	// Lock waits its turn behind any holder, however long that takes.
	if err := c.Lock(ctx, "orders/batch-7"); err != nil {
		log.Fatal(err)
	}
	defer c.Unlock(ctx, "orders/batch-7")

	fmt.Println("holding orders/batch-7")
	// Output: holding orders/batch-7
}

func ExampleClient_TryLock() {
	ctx := context.Background()
	c := lockingcenter.New(serverAddr)

	c.Lock(ctx, "nightly-job")
	err := c.TryLock(ctx, "nightly-job")
	switch {
	case errors.Is(err, lockingcenter.ErrBusy):
		fmt.Println("another runner has it")
	case err != nil:
		log.Fatal(err) // the server is unreachable or refused
	default:
		fmt.Println("won")
	}
	c.Unlock(ctx, "nightly-job")
	// Output: another runner has it
}

func ExampleClient_Lock_timeout() {
	c := lockingcenter.New(serverAddr)
	c.Lock(context.Background(), "report")
	defer c.Unlock(context.Background(), "report")

	// Give up after a while: the request leaves the server's queue.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := c.Lock(ctx, "report")
	fmt.Println(errors.Is(err, context.DeadlineExceeded))
	// Output: true
}
