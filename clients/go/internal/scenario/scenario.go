// Package scenario runs the live scenarios of the conformance suites
// (clients/conformance: run.sh's and sessions.sh's) for the Go client's
// programs, and runs the probe they observe the servers with.
package scenario

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Scenario is one scenario of a suite: its id, and what checks it with
// the environment E.
type Scenario[E any] struct {
	ID  string
	Run func(ctx context.Context, e E) error
}

// Run runs the scenarios in order, each bounded by limit, so that a grant
// that never comes fails its scenario instead of hanging the run, and
// prints one line for each, "ok <id>" or "FAIL <id>: <reason>", and how
// long it took on standard error. It returns the program's exit code: 1
// when a scenario failed, else 0.
func Run[E any](e E, list []Scenario[E], limit time.Duration) int {
	code := 0
	for _, s := range list {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		start := time.Now()
		err := s.Run(ctx, e)
		cancel()
		fmt.Fprintf(os.Stderr, "%s: %v\n", s.ID, time.Since(start).Round(time.Millisecond))
		if err != nil {
			fmt.Printf("FAIL %s: %s\n", s.ID, strings.ReplaceAll(err.Error(), "\n", " "))
			code = 1
			continue
		}
		fmt.Printf("ok %s\n", s.ID)
	}
	return code
}

// Await returns what ch delivers, or an error when ctx ends first.
func Await[T any](ctx context.Context, ch <-chan T) (T, error) {
	select {
	case v := <-ch:
		return v, nil
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("no result: %w", ctx.Err())
	}
}

// Probe is the path of the probe binary (LC_PROBE).
type Probe string

// Run runs the probe with args and returns its standard output, trimmed;
// a failure names the command and what it wrote to standard error.
func (p Probe) Run(ctx context.Context, args ...string) (string, error) {
	var stderr strings.Builder
	cmd := exec.CommandContext(ctx, string(p), args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("probe %q: %v: %s", args, err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// Waiters blocks until key has exactly n parked waiters at the lcd of the
// management port manager.
func (p Probe) Waiters(ctx context.Context, manager, key string, n int) error {
	_, err := p.Run(ctx, "waiters", manager, key, strconv.Itoa(n))
	return err
}
