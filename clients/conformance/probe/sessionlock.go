package main

import (
	"context"
	"fmt"
	"io"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
)

// sessionLockSource is the name of session-lock's sessions.
const sessionLockSource = "probe-session-lock"

// sessionLock opens a session at addr, acquires key (waiting as long as it
// takes), prints "granted <token>", holds the key until stdin ends, then
// releases it and closes the session. A lock lost meanwhile, and the end
// of ctx, are failures.
func sessionLock(ctx context.Context, stdin io.Reader, stdout io.Writer, addr, key string) error {
	s, err := lockingcenter.NewSession(ctx, addr, lockingcenter.WithSource(sessionLockSource))
	if err != nil {
		return err
	}
	defer s.Close()
	lock, err := s.Acquire(ctx, key)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(stdout, "granted %d\n", lock.Token()); err != nil {
		lock.Release()
		return err
	}
	eof := make(chan struct{})
	go func() {
		io.Copy(io.Discard, stdin)
		close(eof)
	}()
	select {
	case <-eof:
	case <-lock.Done():
		return fmt.Errorf("session-lock %q: %w", key, lock.Cause())
	case <-ctx.Done():
		lock.Release()
		return ctx.Err()
	}
	if err := lock.Release(); err != nil {
		return err
	}
	return s.Close()
}
