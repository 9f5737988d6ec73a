package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
)

// childEnv, set, makes the program the child of s-kill-client: it holds
// the keys its arguments name at LC_ADDR, in a session of childTTL with a
// lock-delay of childDelay on each, prints "held <token>..." and waits
// until it is killed (or its standard input closes).
const childEnv = "LC_SESSION_CHILD"

const (
	childTTL   = 2 * time.Second
	childDelay = time.Second
)

// child is the program as s-kill-client's child; it returns its exit code.
func child() int {
	ctx, cancel := context.WithTimeout(context.Background(), scenarioLimit)
	defer cancel()
	s, err := lockingcenter.NewSession(ctx, os.Getenv("LC_ADDR"), lockingcenter.WithSource("go-kill-child"),
		lockingcenter.WithTTL(childTTL))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	line := "held"
	for _, key := range os.Args[1:] {
		l, err := s.Acquire(ctx, key, lockingcenter.WithLockDelay(childDelay))
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			return 1
		}
		line += " " + strconv.FormatUint(l.Token(), 10)
	}
	fmt.Println(line)
	io.Copy(io.Discard, os.Stdin)
	s.Close()
	return 0
}

// startChild starts the child holding keys and returns it, with the
// tokens it holds them by, once it holds them all.
func startChild(ctx context.Context, addr string, keys []string) (*exec.Cmd, []uint64, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(exe, keys...)
	cmd.Env = append(os.Environ(), childEnv+"=1", "LC_ADDR="+addr)
	cmd.Stderr = os.Stderr
	if _, err := cmd.StdinPipe(); err != nil { // open until the child is killed
		return nil, nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	lines := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		lines <- line
	}()
	var line string
	select {
	case line = <-lines:
	case <-ctx.Done():
	}
	f := strings.Fields(line)
	if len(f) != len(keys)+1 || f[0] != "held" {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, nil, fmt.Errorf("the child printed %q, want held and %d tokens", line, len(keys))
	}
	var tokens []uint64
	for _, s := range f[1:] {
		t, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, nil, fmt.Errorf("the child printed %q", line)
		}
		tokens = append(tokens, t)
	}
	return cmd, tokens, nil
}
