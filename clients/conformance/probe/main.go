// Command probe lets the client conformance scenarios observe a running lcd
// through its management port, in any language, by running a process.
//
//	probe waiters MANAGER_ADDR KEY N   wait until KEY has exactly N parked
//	                                   waiters; exit 0, or exit 1 after 10 s
//	probe holder MANAGER_ADDR HEXKEY   print the source holding the key given
//	                                   in hex, or "free"; exit 0
//	probe free-addr                    print a 127.0.0.1:port where nothing
//	                                   listens (bound, then closed)
//	probe silent-server                listen on 127.0.0.1:0, print the address,
//	                                   then accept connections and never answer
//	                                   them, until SIGTERM or SIGINT; exit 0
//
// Any other failure (bad arguments, manager unreachable) exits 2 with a
// message on stderr.
package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/locking-center/locking-center/internal/silentserver"
	"github.com/locking-center/locking-center/manager"
)

// Exit codes of probe.
const (
	exitOK      = 0
	exitTimeout = 1 // waiters: the count was never reached
	exitError   = 2 // usage or manager errors
)

// Polling of the waiter count.
const (
	waitLimit    = 10 * time.Second
	pollInterval = 10 * time.Millisecond
)

const usage = `usage:
  probe waiters MANAGER_ADDR KEY N
  probe holder MANAGER_ADDR HEXKEY
  probe free-addr
  probe silent-server`

// errUsage marks bad arguments.
var errUsage = errors.New("bad arguments")

// errTimeout marks a waiter count that was not reached in time.
var errTimeout = errors.New("timed out")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, waitLimit)
	stop()
	os.Exit(code)
}

// run is probe without the process; limit bounds the waiters command, and
// the end of ctx ends silent-server.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, limit time.Duration) int {
	err := dispatch(ctx, args, stdout, limit)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errTimeout):
		fmt.Fprintf(stderr, "probe: %v\n", err)
		return exitTimeout
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "probe: %v\n%s\n", err, usage)
		return exitError
	}
	fmt.Fprintf(stderr, "probe: %v\n", err)
	return exitError
}

func dispatch(ctx context.Context, args []string, stdout io.Writer, limit time.Duration) error {
	if len(args) == 0 {
		return errUsage
	}
	switch cmd, rest := args[0], args[1:]; {
	case cmd == "waiters" && len(rest) == 3:
		n, err := strconv.Atoi(rest[2])
		if err != nil || n < 0 {
			return fmt.Errorf("%w: waiter count %q", errUsage, rest[2])
		}
		return awaitWaiters(ctx, &manager.Client{Addr: rest[0]}, rest[1], n, limit)
	case cmd == "holder" && len(rest) == 2:
		key, err := hex.DecodeString(rest[1])
		if err != nil {
			return fmt.Errorf("%w: key %q is not hex", errUsage, rest[1])
		}
		h, held, err := holder(ctx, &manager.Client{Addr: rest[0]}, string(key))
		if err != nil {
			return err
		}
		if !held {
			_, err = fmt.Fprintln(stdout, "free")
			return err
		}
		_, err = fmt.Fprintln(stdout, h.Source)
		return err
	case cmd == "silent-server" && len(rest) == 0:
		return serveSilently(ctx, stdout)
	case cmd == "free-addr" && len(rest) == 0:
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(stdout, addr)
		return err
	}
	return fmt.Errorf("%w: %q", errUsage, args)
}

// holder returns the holder of key, and whether there is one.
func holder(ctx context.Context, c *manager.Client, key string) (manager.Holder, bool, error) {
	hs, err := c.Holders(ctx)
	if err != nil {
		return manager.Holder{}, false, err
	}
	for _, h := range hs {
		if h.Key == key {
			return h, true, nil
		}
	}
	return manager.Holder{}, false, nil
}

// awaitWaiters polls the manager until key has exactly n parked waiters or
// limit has passed. A key that is not held counts as 0 waiters.
func awaitWaiters(ctx context.Context, c *manager.Client, key string, n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		h, _, err := holder(ctx, c, key)
		if err != nil {
			return err
		}
		if h.Waiters == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: key %q has %d waiters after %s, want %d", errTimeout, key, h.Waiters, limit, n)
		}
		<-tick.C
	}
}

// freeAddr binds a port on 127.0.0.1, closes it and returns its address.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// serveSilently runs a server on 127.0.0.1 that accepts connections and
// never answers, prints its address, and stops when ctx ends.
func serveSilently(ctx context.Context, stdout io.Writer) error {
	s, err := silentserver.Listen("127.0.0.1:0", nil)
	if err != nil {
		return err
	}
	defer s.Close()
	if _, err := fmt.Fprintln(stdout, s.Addr()); err != nil {
		return err
	}
	<-ctx.Done()
	return s.Close()
}
