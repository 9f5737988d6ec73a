package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/spf13/cobra"
)

// killGrace is how long a command whose lock was lost has between SIGTERM
// and SIGKILL.
const killGrace = 10 * time.Second

// sessionLockFlags are the options of `lock KEY -- CMD`, which holds the
// key through a session of the session protocol.
type sessionLockFlags struct {
	TTL       time.Duration // session TTL asked for; 0: the server's default
	LockDelay time.Duration // lock-delay of the key if the session expires
	Shared    bool
	Limit     uint32
	Priority  int32
	Note      string // the holder's note
}

func (f *sessionLockFlags) addFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.DurationVar(&f.TTL, "ttl", 0, "with a command: the session's TTL; the key is freed this long after lc-cli dies without a word (0: the server's default, 10s)")
	fs.DurationVar(&f.LockDelay, "lock-delay", 0, "with a command: keep the key from anyone for this long after a loss by expiry (at most 60s)")
	fs.BoolVar(&f.Shared, "shared", false, "with a command: hold the key shared, beside other shared holders")
	fs.Uint32Var(&f.Limit, "limit", 0, "with a command: the key is a semaphore of this many holders (every holder must name the same limit)")
	fs.Int32Var(&f.Priority, "priority", 0, "with a command: higher is served first among waiters; waiting raises it over time")
	fs.StringVar(&f.Note, "note", "", "with a command: the holder's note, shown by keys -d, the HTTP API and the status page (UTF-8, at most 1024 bytes)")
}

// set reports whether any session option was given, for the usage error
// of a lock without a command.
func (f *sessionLockFlags) set(cmd *cobra.Command) bool {
	for _, name := range []string{"ttl", "lock-delay", "shared", "limit", "priority", "note"} {
		if cmd.Flags().Changed(name) {
			return true
		}
	}
	return false
}

// acquireOptions returns the client options of the flags.
func (f *sessionLockFlags) acquireOptions() []lockingcenter.AcquireOption {
	var opts []lockingcenter.AcquireOption
	if f.LockDelay > 0 {
		opts = append(opts, lockingcenter.WithLockDelay(f.LockDelay))
	}
	if f.Shared {
		opts = append(opts, lockingcenter.Shared())
	}
	if f.Limit > 1 {
		opts = append(opts, lockingcenter.WithLimit(f.Limit))
	}
	if f.Priority != 0 {
		opts = append(opts, lockingcenter.WithPriority(f.Priority))
	}
	if f.Note != "" {
		opts = append(opts, lockingcenter.WithNote(f.Note))
	}
	return opts
}

// runSessionLock opens a session, waits for the key in it, runs the
// command with LC_FENCING_TOKEN and LC_LOCK_KEY in its environment, and
// releases the key when the command ends. A lock lost while the command
// runs (the session expired, a reset, a lease) stops the command: SIGTERM
// to its process group, SIGKILL after killGrace; lc-cli then exits 2.
func runSessionLock(ctx context.Context, opts *lockOptions) error {
	addr := opts.Client.Addr()
	what := describe("lock", opts.Key, addr)
	sess, err := opts.sessionRequest().open(ctx, what)
	if err != nil {
		return asFailure(err)
	}
	defer sess.Close()

	lock, err := acquire(ctx, opts.Signals, what, sess, opts.Key, append(opts.session.acquireOptions(), opts.waitOptions()...)...)
	if err != nil {
		return asFailure(err)
	}

	opts.Environ = append(append([]string(nil), opts.Environ...),
		"LC_FENCING_TOKEN="+strconv.FormatUint(lock.Token(), 10),
		"LC_LOCK_KEY="+opts.Key)
	code, runErr := runCommand(opts, lock.Done())
	select {
	case <-lock.Done():
		if cause := lock.Cause(); !isReleased(cause) {
			return failure(fmt.Errorf("%s: %w; the command was stopped", what, cause))
		}
	default:
	}
	if relErr := lock.Release(); relErr != nil && !isReleased(relErr) {
		if errors.Is(relErr, os.ErrDeadlineExceeded) {
			relErr = fmt.Errorf("%s: no answer within %v; the server frees the key once the session's TTL (%v) passes",
				describe("release", opts.Key, addr), opts.timeout, sess.TTL())
		}
		if runErr != nil {
			relErr = fmt.Errorf("%v; then %w", runErr, relErr)
		}
		return failure(relErr)
	}
	if err := sess.Close(); err != nil {
		return failure(fmt.Errorf("close the session of %q: %w (the server frees the key within the session's TTL)", opts.Key, err))
	}
	if code == exitOK && runErr == nil {
		return nil
	}
	return &exitError{code: code, err: runErr}
}

// sessionRequest is what a command that holds a key through a session
// needs: the key request, and the session's options.
type sessionRequest struct {
	keyRequest
	clientOptions []lockingcenter.Option // source, timeouts and TLS
	token         string
	ttl           time.Duration // 0: the server's
	timeout       time.Duration // the read timeout (--timeout): how long a cluster between leaders is waited for
}

// sessionRequest returns the session request for key, with the global
// flags and a session TTL of ttl (0: the server's).
func (f *factory) sessionRequest(key string, ttl time.Duration) sessionRequest {
	return sessionRequest{keyRequest: f.keyRequest(key), clientOptions: f.clientOptions(), token: f.global.Token, ttl: ttl,
		timeout: f.global.Timeout}
}

// open opens a session at the request's addresses, which follows their
// leader; a signal gives up (interruptibly). A cluster between leaders,
// whose nodes name none, is asked again for up to the read timeout
// (--timeout). what names the request.
func (r sessionRequest) open(ctx context.Context, what string) (*lockingcenter.Session, error) {
	sessOpts := []lockingcenter.SessionOption{lockingcenter.WithTTL(r.ttl), lockingcenter.WithToken(r.token)}
	for _, o := range r.clientOptions {
		sessOpts = append(sessOpts, o)
	}
	var sess *lockingcenter.Session
	err := interruptibly(ctx, r.Signals, what, func(ctx context.Context) error {
		deadline := time.Now().Add(r.timeout)
		pause := 50 * time.Millisecond
		for {
			var err error
			sess, err = lockingcenter.NewSession(ctx, r.Client.Addr(), sessOpts...)
			if !errors.Is(err, lockingcenter.ErrClusterNoLeader) || !time.Now().Add(pause).Before(deadline) {
				return err
			}
			select {
			case <-ctx.Done():
				return err
			case <-time.After(pause):
			}
			pause = min(2*pause, 200*time.Millisecond)
		}
	}, func() error { return sess.Close() })
	return sess, err
}

// acquire waits for key in sess; a signal gives up, releasing a grant
// that raced it. A key that -n or -w did not get is an exit with code 1.
func acquire(ctx context.Context, sigs <-chan os.Signal, what string, sess *lockingcenter.Session, key string,
	opts ...lockingcenter.AcquireOption) (*lockingcenter.Lock, error) {
	var lock *lockingcenter.Lock
	err := interruptibly(ctx, sigs, what, func(ctx context.Context) error {
		var err error
		lock, err = sess.Acquire(ctx, key, opts...)
		return err
	}, func() error { return lock.Release() })
	if errors.Is(err, lockingcenter.ErrBusy) || errors.Is(err, lockingcenter.ErrTimeout) {
		return nil, &exitError{code: exitBusy}
	}
	return lock, err
}

// isReleased reports whether a lock's cause is its own release.
func isReleased(err error) bool {
	return err == nil || errors.Is(err, lockingcenter.ErrLockReleased)
}
