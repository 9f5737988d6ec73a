package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
)

// releaseTimeout bounds, connect included, the unlock lc-cli sends after a
// command ends or after a grant that raced a signal; the read timeout
// (--timeout) bounds its answer too.
const releaseTimeout = 15 * time.Second

// keyRequest is what the commands that send one key to the mutex port
// share: lock, trylock, unlock and wait.
type keyRequest struct {
	Signals <-chan os.Signal
	Client  *lockingcenter.Client
	Key     string
}

// keyRequest returns the request for key, with the factory's client and
// signals.
func (f *factory) keyRequest(key string) keyRequest {
	return keyRequest{Signals: f.sys.Signals, Client: f.mutexClient(), Key: key}
}

// do sends the request through call, one of the client's methods, named
// op in messages; a signal interrupts it, and undo reverts a success that
// raced the signal (see interruptibly).
// A bare v1 refusal ('-') carries no reason, so its message says what
// most often causes it.
func (r keyRequest) do(ctx context.Context, op string, call func(context.Context, string) error, undo func() error) error {
	err := interruptibly(ctx, r.Signals, describe(op, r.Key, r.Client.Addr()), func(ctx context.Context) error {
		return call(ctx, r.Key)
	}, undo)
	var ee *exitError
	if errors.Is(err, lockingcenter.ErrFailed) && !errors.As(err, &ee) {
		err = fmt.Errorf("%w (the server gives no reason: with authentication on, v1 is served only to the networks "+
			"of AUTH_V1_NETWORKS, so use lock KEY -- CMD with --token; a source over its caps or rate is refused too, "+
			"and so is every v1 request to a node removed from its cluster)", err)
	}
	return err
}

// release unlocks the key, bounded by releaseTimeout.
func (r keyRequest) release() error {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	return r.unlock(ctx, r.Key)
}

// unlock releases key. Given several addresses (a cluster), it asks
// again, within releaseTimeout and twice per address at most, while the
// answer does not come: the connection cut before it (a leader that died
// under a follower forwarding the request), no answer in time, no node
// that takes the connection (between leaders). An unlock is safe to
// repeat; a lost one would leave the key held until a reset.
func (r keyRequest) unlock(ctx context.Context, key string) error {
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	tries := 2 * len(splitAddresses(r.Client.Addr()))
	pause := 100 * time.Millisecond
	for n := 1; ; n++ {
		err := r.Client.Unlock(ctx, key)
		if ctx.Err() != nil && n > 1 {
			return fmt.Errorf("%w (asked %d times within %v, across the nodes: none answered)", err, n, releaseTimeout)
		}
		if err == nil || tries == 2 || n == tries || !(cutShort(err) || unreached(err)) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (asked %d times within %v, across the nodes: none answered)", err, n, releaseTimeout)
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}

// cutShort reports whether err is a request whose answer did not come:
// the connection closed or reset before it, or no answer in time.
func cutShort(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, os.ErrDeadlineExceeded)
}

// describe names a request as the clients do in their errors.
func describe(op, key, addr string) string {
	return fmt.Sprintf("%s %q at %s", op, key, addr)
}

// asFailure returns err unchanged when it already carries an exit code,
// and as an exit with code 2 otherwise.
func asFailure(err error) error {
	var ee *exitError
	if err == nil || errors.As(err, &ee) {
		return err
	}
	return failure(err)
}
