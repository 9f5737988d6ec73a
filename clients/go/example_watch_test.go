package lockingcenter_test

import (
	"context"
	"fmt"
	"log"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
)

func ExampleSession_Watch() {
	ctx := context.Background()
	s, _ := lockingcenter.NewSession(ctx, serverAddr)
	defer s.Close()
	w, err := s.Watch(ctx, "deploy/") // every key that begins with deploy/
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()

	deployer, _ := lockingcenter.NewSession(ctx, serverAddr, lockingcenter.WithSource("deployer-1"))
	defer deployer.Close()
	lock, _ := deployer.Acquire(ctx, "deploy/prod")
	lock.Release()

	for range 2 {
		ev := <-w.Events()
		fmt.Println(ev.Type, ev.Key, ev.Name)
	}
	// Output:
	// acquired deploy/prod deployer-1
	// released deploy/prod deployer-1
}

func ExampleSession_Describe() {
	ctx := context.Background()
	s, _ := lockingcenter.NewSession(ctx, serverAddr, lockingcenter.WithSource("reporter"))
	defer s.Close()
	lock, _ := s.Acquire(ctx, "reports/daily")
	defer lock.Release()

	info, err := s.Describe(ctx, "reports/daily")
	if err != nil {
		log.Fatal(err)
	}
	for _, h := range info.Holders {
		fmt.Println(h.Name, h.Token == lock.Token(), h.Leased)
	}
	fmt.Println("waiting:", info.Queue)
	// Output:
	// reporter true false
	// waiting: 0
}
