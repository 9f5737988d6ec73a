package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/locking-center/locking-center/manager"
)

// askLimit bounds one question to a node's management port: a node that
// SIGSTOP froze accepts the connection and never answers.
const askLimit = time.Second

// stoppedFile is the name of the file, in the probe's state directory,
// that keeps the index of the node signal-leader STOP stopped.
const stoppedFile = "stopped-leader"

// splitList splits a comma list, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// awaitLeader asks every management port of managers, at once and again
// until limit has passed, to list the keys, and returns the index of the
// one that answers. Only a cluster's leader answers a listing, after it
// has confirmed with a quorum that it still leads (docs/ha.md), so two
// nodes never both answer one round as leaders; a single lcd always
// answers.
func awaitLeader(ctx context.Context, managers []string, limit time.Duration) (int, error) {
	if len(managers) == 0 {
		return 0, fmt.Errorf("%w: no management address", errUsage)
	}
	deadline := time.Now().Add(limit)
	for {
		if i, ok := askLeader(ctx, managers); ok {
			return i, nil
		}
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%w: no node of %s led within %s", errTimeout, strings.Join(managers, ","), limit)
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// askLeader asks each node once, all at once, and returns the index of
// the first that answered as the leader; the questions still open are
// then given up.
func askLeader(ctx context.Context, managers []string) (int, bool) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answers := make(chan int, len(managers))
	for i, addr := range managers {
		go func() {
			c := &manager.Client{Addr: addr, ConnectTimeout: askLimit, ReadTimeout: askLimit}
			if _, err := c.Keys(ctx); err != nil {
				i = -1
			}
			answers <- i
		}()
	}
	leader := -1
	for range managers {
		if i := <-answers; i >= 0 && leader < 0 {
			leader = i
			cancel()
		}
	}
	return leader, leader >= 0
}

// signals are the signals signal-leader sends.
var signals = map[string]syscall.Signal{"KILL": syscall.SIGKILL, "STOP": syscall.SIGSTOP, "CONT": syscall.SIGCONT}

// signalLeader sends the signal named name to the leader of the cluster of
// LC_CLUSTER_MANAGER and LC_CLUSTER_PIDS and prints its index. STOP keeps
// the index in the state directory, and CONT signals the node of that
// index, which leads no more.
func (p *probe) signalLeader(ctx context.Context, name string) error {
	sig, ok := signals[name]
	if !ok {
		return fmt.Errorf("%w: signal %q (want KILL, STOP or CONT)", errUsage, name)
	}
	managers := splitList(p.getenv("LC_CLUSTER_MANAGER"))
	var pids []int
	for _, s := range splitList(p.getenv("LC_CLUSTER_PIDS")) {
		pid, err := strconv.Atoi(s)
		if err != nil || pid <= 0 {
			return fmt.Errorf("LC_CLUSTER_PIDS: %q is not a process id", s)
		}
		pids = append(pids, pid)
	}
	if len(managers) == 0 || len(managers) != len(pids) {
		return fmt.Errorf("LC_CLUSTER_MANAGER and LC_CLUSTER_PIDS must name the same nodes (%d and %d)", len(managers), len(pids))
	}
	file := filepath.Join(p.state, stoppedFile)
	var i int
	if sig == syscall.SIGCONT {
		b, err := os.ReadFile(file)
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("signal-leader CONT: no node was stopped by signal-leader STOP")
		}
		if err != nil {
			return err
		}
		if i, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil || i < 0 || i >= len(pids) {
			return fmt.Errorf("%s: %q is not the index of a node", file, b)
		}
	} else {
		var err error
		if i, err = awaitLeader(ctx, managers, p.limit); err != nil {
			return err
		}
		if sig == syscall.SIGSTOP {
			if err := os.WriteFile(file, []byte(strconv.Itoa(i)+"\n"), 0o644); err != nil {
				return err
			}
		}
	}
	if err := p.signal(pids[i], sig); err != nil {
		return fmt.Errorf("signal %s to node %d (pid %d): %w", name, i, pids[i], err)
	}
	if sig == syscall.SIGCONT {
		if err := os.Remove(file); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintln(p.stdout, i)
	return err
}
