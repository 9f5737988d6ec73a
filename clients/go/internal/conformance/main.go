// Command conformance runs the live client scenarios of
// clients/conformance/run.sh with the Go client against a running lcd.
//
// It reads LC_ADDR, LC_MANAGER_ADDR, LC_DEAD_ADDR, LC_SILENT_ADDR and
// LC_PROBE and prints
// one line per scenario, "ok <id>" or "FAIL <id>: <reason>". It exits 1
// when a scenario failed and 2 when the environment is incomplete.
package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/clients/go/internal/scenario"
)

// scenarioLimit bounds one scenario.
const scenarioLimit = 60 * time.Second

const prefix = "go/"

type env struct {
	addr, manager, dead, silent string
	probe                       scenario.Probe
}

func main() {
	e := env{os.Getenv("LC_ADDR"), os.Getenv("LC_MANAGER_ADDR"), os.Getenv("LC_DEAD_ADDR"), os.Getenv("LC_SILENT_ADDR"), scenario.Probe(os.Getenv("LC_PROBE"))}
	if e.addr == "" || e.manager == "" || e.dead == "" || e.silent == "" || e.probe == "" {
		fmt.Fprintln(os.Stderr, "conformance: LC_ADDR, LC_MANAGER_ADDR, LC_DEAD_ADDR, LC_SILENT_ADDR and LC_PROBE must be set")
		os.Exit(2)
	}
	os.Exit(scenario.Run(e, []scenario.Scenario[env]{
		{ID: "lock-unlock", Run: lockUnlock},
		{ID: "trylock-busy", Run: tryLockBusy},
		{ID: "fifo-three", Run: fifoThree},
		{ID: "wait-holds-nothing", Run: waitHoldsNothing},
		{ID: "reset-key", Run: resetKey},
		{ID: "reset-source-withdraws", Run: resetSourceWithdraws},
		{ID: "key-127-ok-128-refused", Run: keyLengths},
		{ID: "binary-key", Run: binaryKey},
		{ID: "refused-connection", Run: refusedConnection},
		{ID: "cancel-withdraws", Run: cancelWithdraws},
		{ID: "silent-server-times-out", Run: silentServerTimesOut},
	}, scenarioLimit))
}

func (e env) client(source string) *lockingcenter.Client {
	return lockingcenter.New(e.addr, lockingcenter.WithSource(source))
}

// waiters blocks until key has exactly n parked waiters, by the probe.
func (e env) waiters(ctx context.Context, key string, n int) error {
	return e.probe.Waiters(ctx, e.manager, key, n)
}

// holder returns the source holding key, or "free", by the probe.
func (e env) holder(ctx context.Context, key string) (string, error) {
	return e.probe.Run(ctx, "holder", e.manager, hex.EncodeToString([]byte(key)))
}

func (e env) expectHolder(ctx context.Context, key, want string) error {
	got, err := e.holder(ctx, key)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("holder of %q is %q, want %q", key, got, want)
	}
	return nil
}

// lockAsync starts c.Lock(ctx, key) and returns where its result arrives.
func lockAsync(ctx context.Context, c *lockingcenter.Client, key string) <-chan error {
	done := make(chan error, 1)
	go func() { done <- c.Lock(ctx, key) }()
	return done
}

// result waits for a background call's result, or for ctx to end.
func result(ctx context.Context, done <-chan error) error {
	err, waitErr := scenario.Await(ctx, done)
	if waitErr != nil {
		return waitErr
	}
	return err
}

func lockUnlock(ctx context.Context, e env) error {
	key, c := prefix+"lock-unlock", e.client("go-lock-unlock")
	if err := c.Lock(ctx, key); err != nil {
		return err
	}
	if err := e.expectHolder(ctx, key, "go-lock-unlock"); err != nil {
		return err
	}
	if err := c.Unlock(ctx, key); err != nil {
		return err
	}
	if err := c.TryLock(ctx, key); err != nil {
		return fmt.Errorf("trylock after unlock: %w", err)
	}
	return c.Unlock(ctx, key)
}

func tryLockBusy(ctx context.Context, e env) error {
	key, a, b := prefix+"trylock-busy", e.client("go-a"), e.client("go-b")
	if err := a.Lock(ctx, key); err != nil {
		return err
	}
	defer a.Unlock(context.WithoutCancel(ctx), key)
	if err := b.TryLock(ctx, key); !errors.Is(err, lockingcenter.ErrBusy) {
		return fmt.Errorf("trylock of a held key: %v, want ErrBusy", err)
	}
	return e.expectHolder(ctx, key, "go-a")
}

func fifoThree(ctx context.Context, e env) error {
	key, holder := prefix+"fifo-three", e.client("go-holder")
	if err := holder.Lock(ctx, key); err != nil {
		return err
	}
	defer holder.Unlock(context.WithoutCancel(ctx), key)
	turns := make(chan int, 3)
	errs := make(chan error, 3)
	for i := 1; i <= 3; i++ {
		w := e.client("go-w" + strconv.Itoa(i))
		go func() {
			if err := w.Lock(ctx, key); err != nil {
				errs <- fmt.Errorf("waiter %d: %w", i, err)
				return
			}
			turns <- i
			errs <- w.Unlock(ctx, key)
		}()
		if err := e.waiters(ctx, key, i); err != nil {
			return err
		}
	}
	if err := holder.Unlock(ctx, key); err != nil {
		return err
	}
	for i := 1; i <= 3; i++ {
		if err := result(ctx, errs); err != nil {
			return err
		}
	}
	got := []int{<-turns, <-turns, <-turns}
	if got[0] != 1 || got[1] != 2 || got[2] != 3 {
		return fmt.Errorf("grant order %v, want [1 2 3]", got)
	}
	return nil
}

func waitHoldsNothing(ctx context.Context, e env) error {
	key, c := prefix+"wait-holds-nothing", e.client("go-wait")
	if err := c.Wait(ctx, key); err != nil {
		return err
	}
	if err := e.expectHolder(ctx, key, "free"); err != nil {
		return err
	}
	if err := e.client("go-other").TryLock(ctx, key); err != nil {
		return fmt.Errorf("trylock after wait: %w", err)
	}
	return c.Unlock(ctx, key)
}

func resetKey(ctx context.Context, e env) error {
	key, holder, waiter := prefix+"reset-key", e.client("go-holder"), e.client("go-waiter")
	if err := holder.Lock(ctx, key); err != nil {
		return err
	}
	done := lockAsync(ctx, waiter, key)
	if err := e.waiters(ctx, key, 1); err != nil {
		return err
	}
	if err := e.client("").ResetByKey(ctx, key); err != nil {
		return err
	}
	if err := result(ctx, done); err != nil {
		return fmt.Errorf("waiter after reset: %w", err)
	}
	if err := e.expectHolder(ctx, key, "go-waiter"); err != nil {
		return err
	}
	return waiter.Unlock(ctx, key)
}

func resetSourceWithdraws(ctx context.Context, e env) error {
	key, holder, waiter := prefix+"reset-source", e.client("go-s1"), e.client("go-s2")
	if err := holder.Lock(ctx, key); err != nil {
		return err
	}
	defer holder.Unlock(context.WithoutCancel(ctx), key)
	done := lockAsync(ctx, waiter, key)
	if err := e.waiters(ctx, key, 1); err != nil {
		return err
	}
	if err := e.client("").ResetBySource(ctx, "go-s2"); err != nil {
		return err
	}
	if err := result(ctx, done); !errors.Is(err, lockingcenter.ErrFailed) {
		return fmt.Errorf("withdrawn waiter: %v, want ErrFailed", err)
	}
	return e.expectHolder(ctx, key, "go-s1")
}

func keyLengths(ctx context.Context, e env) error {
	long := prefix + "key-127-"
	long += strings.Repeat("k", 127-len(long))
	c := e.client("go-long")
	if err := c.Lock(ctx, long); err != nil {
		return fmt.Errorf("127-byte key: %w", err)
	}
	if err := e.expectHolder(ctx, long, "go-long"); err != nil {
		return err
	}
	if err := c.Unlock(ctx, long); err != nil {
		return err
	}
	dead := lockingcenter.New(e.dead)
	for _, key := range []string{long + "k", ""} {
		if err := dead.Lock(ctx, key); !errors.Is(err, lockingcenter.ErrInvalidKey) {
			return fmt.Errorf("lock of a %d-byte key: %v, want ErrInvalidKey", len(key), err)
		}
		if err := dead.TryLock(ctx, key); !errors.Is(err, lockingcenter.ErrInvalidKey) {
			return fmt.Errorf("trylock of a %d-byte key: %v, want ErrInvalidKey", len(key), err)
		}
	}
	return nil
}

func binaryKey(ctx context.Context, e env) error {
	key, c := prefix+"\x00\xff\x80a", e.client("go-binary")
	if err := c.Lock(ctx, key); err != nil {
		return err
	}
	if err := e.expectHolder(ctx, key, "go-binary"); err != nil {
		return err
	}
	if err := c.Unlock(ctx, key); err != nil {
		return err
	}
	return e.expectHolder(ctx, key, "free")
}

func refusedConnection(ctx context.Context, e env) error {
	c := lockingcenter.New(e.dead)
	key := prefix + "refused"
	if err := c.Lock(ctx, key); err == nil || errors.Is(err, lockingcenter.ErrBusy) || errors.Is(err, lockingcenter.ErrInvalidKey) {
		return fmt.Errorf("lock at a dead address: %v, want a connection failure", err)
	}
	if err := c.TryLock(ctx, key); err == nil || errors.Is(err, lockingcenter.ErrBusy) {
		return fmt.Errorf("trylock at a dead address: %v, want a connection failure", err)
	}
	return nil
}

func cancelWithdraws(ctx context.Context, e env) error {
	key, holder := prefix+"cancel", e.client("go-holder")
	if err := holder.Lock(ctx, key); err != nil {
		return err
	}
	defer holder.Unlock(context.WithoutCancel(ctx), key)
	ctxA, cancelA := context.WithCancel(ctx)
	defer cancelA()
	doneA := lockAsync(ctxA, e.client("go-a"), key)
	if err := e.waiters(ctx, key, 1); err != nil {
		return err
	}
	cancelA()
	if err := result(ctx, doneA); !errors.Is(err, context.Canceled) {
		return fmt.Errorf("cancelled waiter: %v, want context.Canceled", err)
	}
	if err := e.waiters(ctx, key, 0); err != nil {
		return err
	}
	b := e.client("go-b")
	doneB := lockAsync(ctx, b, key)
	if err := e.waiters(ctx, key, 1); err != nil {
		return err
	}
	if err := holder.Unlock(ctx, key); err != nil {
		return err
	}
	if err := result(ctx, doneB); err != nil {
		return fmt.Errorf("waiter B: %w", err)
	}
	if err := e.expectHolder(ctx, key, "go-b"); err != nil {
		return err
	}
	return b.Unlock(ctx, key)
}

// Read timeout of silent-server-times-out, and the bound each call must
// return well within.
const (
	silentTimeout = time.Second
	silentBound   = 10 * silentTimeout
)

func silentServerTimesOut(ctx context.Context, e env) error {
	c := lockingcenter.New(e.silent, lockingcenter.WithSource("go-silent"), lockingcenter.WithReadTimeout(silentTimeout))
	key := prefix + "silent"
	for _, call := range []struct {
		name string
		do   func(context.Context) error
	}{
		{"trylock", func(ctx context.Context) error { return c.TryLock(ctx, key) }},
		{"unlock", func(ctx context.Context) error { return c.Unlock(ctx, key) }},
		{"reset by key", func(ctx context.Context) error { return c.ResetByKey(ctx, key) }},
		{"reset by source", func(ctx context.Context) error { return c.ResetBySource(ctx, "go-silent") }},
	} {
		bounded, cancel := context.WithTimeout(ctx, silentBound)
		start := time.Now()
		err := call.do(bounded)
		took := time.Since(start)
		cancel()
		switch {
		case err == nil:
			return fmt.Errorf("%s at a silent server succeeded", call.name)
		case errors.Is(err, lockingcenter.ErrBusy):
			return fmt.Errorf("%s at a silent server reported busy", call.name)
		case !errors.Is(err, os.ErrDeadlineExceeded):
			return fmt.Errorf("%s at a silent server: %v after %v, want the read timeout", call.name, err, took)
		case took >= silentBound:
			return fmt.Errorf("%s at a silent server took %v, want well under %v", call.name, took, silentBound)
		}
	}
	return nil
}
