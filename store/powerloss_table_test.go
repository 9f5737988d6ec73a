package store

import (
	"context"
	"errors"
	"time"

	"github.com/locking-center/locking-center/mutex"
)

// lockTable is the lock server that the power-loss rounds drive: a
// mutex.Node over the table a Log replayed, journaled to that Log. It is
// their only contact with the mutex package: a node with another API needs
// this file changed and nothing else. Each method does what a front end
// does for one request and returns what it would answer; a token is the
// grant's fencing token.
type lockTable struct{ n *mutex.Node }

// newLockTable returns a node over restored, journaled to j, with the
// clock now. It applies the restart.
func newLockTable(j mutex.Journal, restored *mutex.Table, now func() time.Time) lockTable {
	return lockTable{mutex.NewNode(mutex.NodeConfig{Journal: j, Table: restored, Clock: now})}
}

// close stops the node's timer.
func (lt lockTable) close() { lt.n.Close() }

// lock waits for key as a v1 lock request does: it returns the grant's
// token once the grant is durable ('+'), or an error ('-', or ctx's error
// when ctx ended first, which withdraws the request).
func (lt lockTable) lock(ctx context.Context, key, source, remote string) (uint64, error) {
	g, err := lt.n.Lock(ctx, mutex.Claim{Key: key, Source: source, RemoteAddr: remote})
	return g.Token, err
}

// tryLock takes key if it is free, as a v1 try-lock request does: granted
// once the grant is durable ('+'), not granted when another holds the key
// ('#'), or the error of a grant that could not be made durable ('-'),
// which is revoked. The token is the grant's, made durable or not.
func (lt lockTable) tryLock(key, source, remote string) (token uint64, granted bool, err error) {
	g, p, err := lt.n.TryLock(mutex.Claim{Key: key, Source: source, RemoteAddr: remote})
	if errors.Is(err, mutex.ErrBusy) {
		return 0, false, nil
	}
	if err == nil {
		if err = mutex.WaitPending(p); err != nil {
			lt.n.Revoke(key, g.Token)
		}
	}
	return g.Token, err == nil, err
}

// release frees key as a v1 unlock request does. The server answers '+'
// either way; the error tells whether the release was made durable.
func (lt lockTable) release(key string) error {
	p, err := lt.n.Release(key)
	if err != nil {
		return err
	}
	return mutex.WaitPending(p)
}

// openSession opens a session named name, as a HELLO does: its Live, and
// whether the open is durable (the WELCOME).
func (lt lockTable) openSession(name string, ttl time.Duration) (*mutex.Live, error) {
	live, res, p := lt.n.OpenSession(name, ttl, secret, "", dropRoute{})
	if live == nil {
		return nil, &mutex.StatusError{Status: res.Status}
	}
	return live, mutex.WaitPending(p)
}

// resume attaches to session id, read back from the log, as a RESUME does;
// nil when there is no such session.
func (lt lockTable) resume(id uint64) *mutex.Live {
	return lt.n.Resume(id, secret, "", func(mutex.SessionState, mutex.Route, []mutex.Output) mutex.Route { return dropRoute{} })
}

// dropRoute is the route of the load's session: its client learns what
// it needs from the results of its own commands, and drops the events.
type dropRoute struct{}

func (dropRoute) Deliver(mutex.Output) {}
func (dropRoute) Flush()               {}

// sessionTryLock is an ACQUIRE of key that does not wait, request req of
// the session of live, as tryLock answers it.
func (lt lockTable) sessionTryLock(live *mutex.Live, req uint64, key, source, remote string) (token uint64, granted bool, err error) {
	live.Touch()
	res, p := lt.n.Apply(mutex.Command{Op: mutex.OpAcquire, Session: live.ID(), Request: req, Key: key,
		Source: source, RemoteAddr: remote, Try: true})
	switch res.Status {
	case mutex.StatusBusy:
		return 0, false, nil
	case mutex.StatusGranted:
	default:
		return 0, false, &mutex.StatusError{Status: res.Status}
	}
	if err := mutex.WaitPending(p); err != nil {
		lt.n.Revoke(key, res.Token)
		return res.Token, false, err
	}
	return res.Token, true, nil
}

// sessionRelease is a RELEASE of the lock token of key, request req of the
// session of live: nil once it is durable.
func (lt lockTable) sessionRelease(live *mutex.Live, req uint64, key string, token uint64) error {
	live.Touch()
	res, p := lt.n.Apply(mutex.Command{Op: mutex.OpRelease, Session: live.ID(), Request: req, Key: key, Token: token})
	if res.Status != mutex.StatusOK {
		return &mutex.StatusError{Status: res.Status}
	}
	return mutex.WaitPending(p)
}

// advance does what the node's timer does, once its clock has moved:
// sessions not heard from for their TTL expire.
func (lt lockTable) advance() { lt.n.Advance() }
