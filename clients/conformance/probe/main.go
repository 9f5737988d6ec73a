// Command probe lets the client conformance scenarios observe and disturb
// the servers under test, in any language, by running a process. The
// commands of the v1 suite (clients/conformance/README.md):
//
//	probe waiters MANAGER_ADDR KEY N   wait until KEY has exactly N parked
//	                                   waiters; exit 0, or exit 1 after 10 s
//	probe holder MANAGER_ADDR HEXKEY   print the source holding the key given
//	                                   in hex, or "free"; exit 0
//	probe free-addr                    print a 127.0.0.1:port where nothing
//	                                   listens, below the ephemeral range
//	probe silent-server                listen on 127.0.0.1:0, print the address,
//	                                   then accept connections and never answer
//	                                   them, until SIGTERM or SIGINT; exit 0
//
// Those of the session suite (clients/conformance/SESSIONS.md):
//
//	probe holders MANAGER_ADDR KEY     print one line per holder of KEY,
//	                                   "<token> <session> <note>" (the note and
//	                                   its space left out when there is none);
//	                                   nothing when the key is free
//	probe leader CLUSTER_MANAGER       print the index (0, 1, 2) of the node
//	                                   of the comma list that leads; exit 1
//	                                   after 10 s without one
//	probe signal-leader SIG            send SIG (KILL, STOP, CONT) to the
//	                                   leader of the cluster that
//	                                   LC_CLUSTER_MANAGER and LC_CLUSTER_PIDS
//	                                   name, print its index; CONT goes to
//	                                   the node that STOP stopped
//	probe proxy TARGET                 print "ADDR CTL", then forward every
//	                                   connection to ADDR to TARGET until
//	                                   SIGTERM or SIGINT
//	probe tls-proxy TARGET CAFILE      as proxy, speaking TLS to TARGET (its
//	                                   certificate verified with CAFILE for
//	                                   localhost): a TLS terminator for a
//	                                   client without TLS of its own
//	probe cut CTL                      reset every connection through the
//	                                   proxy whose control address is CTL
//	probe session-lock ADDR KEY        acquire KEY in a session (waiting),
//	                                   print "granted <token>", hold it until
//	                                   standard input closes, release; exit 0
//
// and the two that its harness, sessions.sh, prepares servers with:
//
//	probe tls-files DIR                write a CA (ca.crt) and a server
//	                                   certificate it signed for localhost
//	                                   and 127.0.0.1 (server.crt, server.key)
//	probe big-token-wal PATH           write a write-ahead log (DATA_PATH)
//	                                   whose next fencing token is above 2^63
//
// Any other failure (bad arguments, a server unreachable) exits 2 with a
// message on stderr.
package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/locking-center/locking-center/internal/bench/proc"
	"github.com/locking-center/locking-center/internal/silentserver"
	"github.com/locking-center/locking-center/manager"
)

// Exit codes of probe.
const (
	exitOK      = 0
	exitTimeout = 1 // waiters, leader: what was waited for never came
	exitError   = 2 // usage or server errors
)

// Polling of the waiter count and of the leader.
const (
	waitLimit    = 10 * time.Second
	pollInterval = 10 * time.Millisecond
)

const usage = `usage:
  probe waiters MANAGER_ADDR KEY N
  probe holder MANAGER_ADDR HEXKEY
  probe holders MANAGER_ADDR KEY
  probe free-addr
  probe silent-server
  probe leader CLUSTER_MANAGER
  probe signal-leader KILL|STOP|CONT
  probe proxy TARGET
  probe tls-proxy TARGET CAFILE
  probe cut CTL
  probe session-lock ADDR KEY
  probe tls-files DIR
  probe big-token-wal PATH`

// errUsage marks bad arguments.
var errUsage = errors.New("bad arguments")

// errTimeout marks a condition that was not reached in time.
var errTimeout = errors.New("timed out")

// probe is one run of the command: what it reads and writes, and what
// tests replace.
type probe struct {
	stdin  io.Reader
	stdout io.Writer
	// limit bounds the commands that wait for a condition (waiters,
	// leader).
	limit time.Duration
	// getenv reads the environment (signal-leader's LC_CLUSTER_MANAGER
	// and LC_CLUSTER_PIDS).
	getenv func(string) string
	// state is the directory where signal-leader keeps the index of the
	// node it stopped: the probe binary's own, the harness's work
	// directory.
	state string
	// signal sends sig to the process pid.
	signal func(pid int, sig syscall.Signal) error
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	p := &probe{stdin: os.Stdin, stdout: os.Stdout, limit: waitLimit, getenv: os.Getenv, signal: syscall.Kill}
	if exe, err := os.Executable(); err == nil {
		p.state = filepath.Dir(exe)
	}
	code := p.run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// run is probe without the process; the end of ctx ends the commands that
// serve (silent-server, proxy) and those that wait.
func (p *probe) run(ctx context.Context, args []string, stderr io.Writer) int {
	err := p.dispatch(ctx, args)
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

func (p *probe) dispatch(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errUsage
	}
	switch cmd, rest := args[0], args[1:]; {
	case cmd == "waiters" && len(rest) == 3:
		n, err := strconv.Atoi(rest[2])
		if err != nil || n < 0 {
			return fmt.Errorf("%w: waiter count %q", errUsage, rest[2])
		}
		return awaitWaiters(ctx, &manager.Client{Addr: rest[0]}, rest[1], n, p.limit)
	case cmd == "holder" && len(rest) == 2:
		key, err := hex.DecodeString(rest[1])
		if err != nil {
			return fmt.Errorf("%w: key %q is not hex", errUsage, rest[1])
		}
		hs, err := holders(ctx, &manager.Client{Addr: rest[0]}, string(key))
		if err != nil {
			return err
		}
		if len(hs) == 0 {
			_, err = fmt.Fprintln(p.stdout, "free")
			return err
		}
		_, err = fmt.Fprintln(p.stdout, hs[0].Source)
		return err
	case cmd == "holders" && len(rest) == 2:
		return printHolders(ctx, p.stdout, &manager.Client{Addr: rest[0]}, rest[1])
	case cmd == "silent-server" && len(rest) == 0:
		return serveSilently(ctx, p.stdout)
	case cmd == "free-addr" && len(rest) == 0:
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(p.stdout, addr)
		return err
	case cmd == "leader" && len(rest) == 1:
		i, err := awaitLeader(ctx, splitList(rest[0]), p.limit)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(p.stdout, i)
		return err
	case cmd == "signal-leader" && len(rest) == 1:
		return p.signalLeader(ctx, rest[0])
	case cmd == "proxy" && len(rest) == 1:
		return serveProxy(ctx, p.stdout, rest[0])
	case cmd == "tls-proxy" && len(rest) == 2:
		return serveTLSProxy(ctx, p.stdout, rest[0], rest[1])
	case cmd == "cut" && len(rest) == 1:
		return cut(ctx, rest[0])
	case cmd == "session-lock" && len(rest) == 2:
		return sessionLock(ctx, p.stdin, p.stdout, rest[0], rest[1])
	case cmd == "tls-files" && len(rest) == 1:
		return writeTLSFiles(rest[0])
	case cmd == "big-token-wal" && len(rest) == 1:
		return writeBigTokenWAL(rest[0])
	}
	return fmt.Errorf("%w: %q", errUsage, args)
}

// holders returns the holders of key, in the order of their tokens.
func holders(ctx context.Context, c *manager.Client, key string) ([]manager.Holder, error) {
	all, err := c.Holders(ctx)
	if err != nil {
		return nil, err
	}
	var hs []manager.Holder
	for _, h := range all {
		if h.Key == key {
			hs = append(hs, h)
		}
	}
	return hs, nil
}

// printHolders prints one line per holder of key: its token, its session
// and its note, when it has one.
func printHolders(ctx context.Context, w io.Writer, c *manager.Client, key string) error {
	hs, err := holders(ctx, c, key)
	if err != nil {
		return err
	}
	for _, h := range hs {
		line := fmt.Sprintf("%d %d", h.Token, h.Session)
		if h.Note != "" {
			line += " " + h.Note
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}

// awaitWaiters polls the manager until key has exactly n parked waiters or
// limit has passed. A key that is not held counts as 0 waiters.
func awaitWaiters(ctx context.Context, c *manager.Client, key string, n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		hs, err := holders(ctx, c, key)
		if err != nil {
			return err
		}
		waiters := 0
		if len(hs) > 0 {
			waiters = hs[0].Waiters
		}
		if waiters == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: key %q has %d waiters after %s, want %d", errTimeout, key, waiters, limit, n)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// freeAddr returns an address of 127.0.0.1 whose port no socket uses,
// below the ephemeral range (proc.FreeAddrs): a port the system handed to
// a listener of ours could be handed on to a client's connection before
// lcd binds it.
func freeAddr() (string, error) {
	return proc.FreeAddrs(1)[0], nil
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
