// Command upgradetest is the load of run.sh, the test of a rolling
// upgrade of a three-node cluster: 32 sessions of clients/go, each
// cycling acquire and release on a key of its own, on the nodes given as
// host:port,... until its standard input ends. It then prints "cycles N
// errors M" and exits 1 when M is not 0.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
)

// sessions is how many sessions cycle at once.
const sessions = 32

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: upgradetest host:port,host:port,...")
		os.Exit(2)
	}
	addrs := strings.Split(os.Args[1], ",")
	var cycles, errs atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Go(func() {
			s, err := lockingcenter.NewSession(ctx, addrs[0], lockingcenter.WithAddresses(addrs...))
			if err != nil {
				fmt.Fprintln(os.Stderr, "session:", err)
				errs.Add(1)
				return
			}
			defer s.Close()
			key := fmt.Sprintf("upgrade-%d", i)
			for ctx.Err() == nil {
				actx, done := context.WithTimeout(ctx, 10*time.Second)
				l, err := s.Acquire(actx, key)
				if err == nil {
					err = l.Release()
				}
				done()
				switch {
				case err == nil:
					cycles.Add(1)
				case ctx.Err() == nil:
					fmt.Fprintln(os.Stderr, key+":", err)
					errs.Add(1)
				}
			}
		})
	}
	io.Copy(io.Discard, os.Stdin)
	cancel()
	wg.Wait()
	fmt.Printf("cycles %d errors %d\n", cycles.Load(), errs.Load())
	if errs.Load() != 0 {
		os.Exit(1)
	}
}
