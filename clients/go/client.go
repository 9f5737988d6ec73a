// Package lockingcenter is the Go client of Locking-Center, a lock server
// that grants named keys one holder at a time, in order of arrival.
//
// Every call of a Client opens one TCP connection to the mutex port, sends
// one request (protocol v1), reads the one-byte answer and closes. A lock
// is not tied to the connection: it is held until Unlock or a reset, even
// after the caller exits. The package uses the standard library only.
//
// Calls that never wait for a key (TryLock, Unlock, ResetByKey,
// ResetBySource, and the release of Wait) give up after a read timeout,
// DefaultReadTimeout unless WithReadTimeout says otherwise, so a server that
// accepts and never answers cannot hang them. Lock, and Wait while it waits
// for the key, have no read timeout: bound them with their context.
//
//	c := lockingcenter.New("localhost:22119")
//	if err := c.Lock(ctx, "orders/batch-7"); err != nil {
//		return err
//	}
//	defer c.Unlock(context.Background(), "orders/batch-7")
//
// # Sessions
//
// NewSession speaks the session protocol (v2) instead: one connection,
// kept open, carries every lock of the session. Each lock has a fencing
// token (Lock.Token) and ends when released, when its lease runs out
// (WithLease, Lock.Renew), or when the session ends: at Close, or when the
// server has not heard from the client for the session's TTL, so a client
// that dies frees its keys by itself. The session pings while idle; after
// a dropped connection it reconnects and resumes, keeping its locks and
// its places in queues. Two goroutines serve a session (one writes and
// pings, one reads), however many locks it holds, and one more each watch
// while it lasts.
//
// A Lock is a resource, not a context: cancelling the context of Acquire
// ends the wait, never a held lock. Lock.Done closes when the lock ends,
// no later than the server can end it (the client counts a lease, and its
// own silence, with a margin for clock drift); Lock.Cause says why
// (ErrLockReleased, ErrLockOrphaned, or ErrLockLost with its reason).
//
//	s, err := lockingcenter.NewSession(ctx, "localhost:22119", lockingcenter.WithSource("billing-7f9c"))
//	if err != nil {
//		return err
//	}
//	defer s.Close()
//	lock, err := s.Acquire(ctx, "orders/batch-7", lockingcenter.WithLease(30*time.Second))
//	if err != nil {
//		return err
//	}
//	defer lock.Release()
//	// Give lock.Token() to the resource with every write; stop when
//	// lock.Done() closes.
//
// Acquire options: TryOnce (ErrBusy when held), WithWait (a wait limit
// kept by the server, ErrTimeout), WithLease, WithLockDelay, Shared,
// WithLimit (a semaphore), WithPriority, Reentrant and WithOwner.
//
// Session.Describe reports a key's holders, queue and lock-delay;
// Session.Watch streams what happens to the keys of a prefix (Event),
// pushed by the server. On top of them:
//
//   - Election: leader election on one key. Campaign waits until the
//     candidate leads and returns its leadership as a Lock; Resign, Leader
//     and Observe (every change of leader) go with it.
//   - Semaphore: a key of N places, each holder with a Lock and a token of
//     its own.
//
// # Clusters
//
// A session given the addresses of every node of a cluster (a comma list,
// or WithAddresses) follows the leader: NewSession tries them in turn and
// goes where a follower's GOODBYE not_leader points; when the leader goes
// (it dies, steps down or hands over), the session resumes at the new
// leader, or at the next address, until its TTL runs out. The resume
// settles the requests in flight from the server's WELCOME and sends the
// others again with their request ids, so each is applied at most once:
// held locks stay held under their tokens, and a parked acquire is
// granted once. docs/ha.md says more.
//
//	s, err := lockingcenter.NewSession(ctx, "10.0.0.1:22119,10.0.0.2:22119,10.0.0.3:22119")
//
// A v1 Client needs one address only: every node forwards v1 to the leader.
// Given a comma list, it dials the next address when one does not accept
// the connection (a node that is down), so any live node takes the
// request; a request is sent once, to one node.
//
// docs/protocol.md gives the bytes.
//
// # TLS
//
// WithTLS makes a Client and a Session speak TLS, presenting a client
// certificate when the server asks for one:
//
//	cfg := &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}
//	c := lockingcenter.New("locks.internal:22119", lockingcenter.WithTLS(cfg))
//	s, err := lockingcenter.NewSession(ctx, "locks.internal:22119", lockingcenter.WithTLS(cfg))
package lockingcenter

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"
)

// DefaultConnectTimeout bounds the TCP connect of every call unless
// WithConnectTimeout says otherwise.
const DefaultConnectTimeout = 5 * time.Second

// DefaultReadTimeout bounds the answer of every call that does not wait for
// a key, unless WithReadTimeout says otherwise.
const DefaultReadTimeout = 10 * time.Second

// MaxKeyLen and MaxSourceLen bound keys and sources, in bytes; MaxNoteLen
// bounds a holder's note (WithNote).
const (
	MaxKeyLen    = 127
	MaxSourceLen = 127
	MaxNoteLen   = 1024
)

// Action bytes and answers of the mutex port.
const (
	actionLock        = 1
	actionUnlock      = 2
	actionResetKey    = 3
	actionResetSource = 4
	actionTryLock     = 5

	answerOK     = '+'
	answerFailed = '-'
	answerBusy   = '#'
)

// Errors. Every error a call returns other than ErrBusy is a failure; match
// with errors.Is.
var (
	// ErrBusy: TryLock found the key held by somebody else. Not a failure.
	ErrBusy = errors.New("lockingcenter: key is held by another")
	// ErrFailed: the server answered '-': the request was malformed, could
	// not be made durable, or was withdrawn by a reset of its source.
	ErrFailed = errors.New("lockingcenter: server refused the request")
	// ErrInvalidKey: a key that is empty or longer than MaxKeyLen bytes.
	// Nothing is sent.
	ErrInvalidKey = errors.New("lockingcenter: key must be 1 to 127 bytes")
	// ErrInvalidSource: a source longer than MaxSourceLen bytes.
	ErrInvalidSource = errors.New("lockingcenter: source must be at most 127 bytes")
	// ErrProtocol: the server answered a byte the protocol does not define.
	ErrProtocol = errors.New("lockingcenter: unexpected answer")
)

// Client talks to one Locking-Center server. It holds no connection and is
// safe for concurrent use.
type Client struct {
	addr           string
	addrs          []string      // addr's addresses, in order
	at             atomic.Uint32 // index in addrs of the address that accepted last
	source         string
	connectTimeout time.Duration
	readTimeout    time.Duration
	tls            *tls.Config
}

// Option configures a Client.
type Option func(*Client)

// WithSource names the owner of the locks this client takes; reset by
// source matches it. Empty (the default) lets the server use the client's
// IP address. At most MaxSourceLen bytes.
func WithSource(source string) Option { return func(c *Client) { c.source = source } }

// WithConnectTimeout bounds each TCP connect; 0 means no bound beyond the
// context's. The default is DefaultConnectTimeout.
func WithConnectTimeout(d time.Duration) Option {
	return func(c *Client) { c.connectTimeout = d }
}

// WithReadTimeout bounds the calls that do not wait for a key (TryLock,
// Unlock, ResetByKey, ResetBySource, and the release of Wait): from the end
// of the connect to the answer, at most d. A call that runs out closes its
// connection and returns an error that matches os.ErrDeadlineExceeded; the
// server may or may not have applied the request. 0 means no bound beyond
// the context's. The default is DefaultReadTimeout. Lock never has a read
// timeout: it waits for its key however long that takes.
func WithReadTimeout(d time.Duration) Option {
	return func(c *Client) { c.readTimeout = d }
}

// WithTLS makes every connection speak TLS with cfg: each call of a
// Client, and each connection of a session (the first and every resume).
// The handshake is part of the connect and shares its timeout
// (WithConnectTimeout). When cfg.ServerName is empty the host of the
// address dialled is verified. For a server that requires client
// certificates, give yours in cfg.Certificates; a server that refuses it
// fails the first read, with an error that says so. Nil, the default, is
// plain TCP. The client does not modify cfg.
func WithTLS(cfg *tls.Config) Option { return func(c *Client) { c.tls = cfg } }

// New returns a client of the mutex port at addr ("host:port", or a comma
// list of the nodes of a cluster: each call dials them in turn, from the
// one that accepted last, until one accepts).
func New(addr string, opts ...Option) *Client {
	c := &Client{addr: addr, addrs: sessionAddresses(addr, nil), connectTimeout: DefaultConnectTimeout, readTimeout: DefaultReadTimeout}
	if len(c.addrs) == 0 {
		c.addrs = []string{addr}
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Addr returns the address the client was given (a comma list for
// several).
func (c *Client) Addr() string { return c.addr }

// Lock blocks until key is granted to this client, however long that takes.
// Cancelling ctx closes the connection, which withdraws the request from
// the server's queue, and returns ctx's error. Errors: ErrInvalidKey,
// ErrInvalidSource, ErrFailed, or a network error.
func (c *Client) Lock(ctx context.Context, key string) error {
	_, err := c.call(ctx, "lock", key, actionLock, key, c.source)
	return err
}

// TryLock takes key only if it is free now. It returns nil when the key is
// now held by this client and ErrBusy when another holds it. It gives up
// after the read timeout (WithReadTimeout); that is a failure, never ErrBusy.
func (c *Client) TryLock(ctx context.Context, key string) error {
	a, err := c.call(ctx, "trylock", key, actionTryLock, key, c.source)
	if err == nil && a == answerBusy {
		return ErrBusy
	}
	return err
}

// Unlock releases key, whoever holds it; releasing a free key succeeds.
func (c *Client) Unlock(ctx context.Context, key string) error {
	_, err := c.call(ctx, "unlock", key, actionUnlock, key, "")
	return err
}

// Wait blocks until key is free and returns holding nothing: it takes the
// key and releases it at once. Cancelling ctx withdraws the request. The
// wait has no read timeout; the release has (WithReadTimeout).
func (c *Client) Wait(ctx context.Context, key string) error {
	if _, err := c.call(ctx, "wait", key, actionLock, key, c.source); err != nil {
		return err
	}
	return c.Unlock(context.WithoutCancel(ctx), key)
}

// ResetByKey takes key from its holder; the first parked request gets it.
func (c *Client) ResetByKey(ctx context.Context, key string) error {
	_, err := c.call(ctx, "reset", key, actionResetKey, key, "")
	return err
}

// ResetBySource releases every key held by source and withdraws every
// parked request of source (those are answered ErrFailed).
func (c *Client) ResetBySource(ctx context.Context, source string) error {
	if len(source) > MaxSourceLen {
		return fmt.Errorf("reset source %q: %w", source, ErrInvalidSource)
	}
	_, err := c.call(ctx, "reset source", source, actionResetSource, "", source)
	return err
}

// EncodeRequest returns the wire bytes of one request. key is ignored for
// action 4 and source for actions 2 and 3. It validates nothing.
func EncodeRequest(action byte, key, source string) []byte {
	b := make([]byte, 0, 3+len(key)+len(source))
	b = append(b, action)
	if action != actionResetSource {
		b = append(b, byte(len(key)))
		b = append(b, key...)
	}
	if action == actionLock || action == actionTryLock || action == actionResetSource {
		b = append(b, byte(len(source)))
		b = append(b, source...)
	}
	return b
}

// call sends one request and returns the answer byte: '+' or '#'. A '-'
// becomes ErrFailed. Every action but lock is bounded by the read timeout.
func (c *Client) call(ctx context.Context, op, name string, action byte, key, source string) (byte, error) {
	if action != actionResetSource && (key == "" || len(key) > MaxKeyLen) {
		return 0, fmt.Errorf("%s %q: %w", op, key, ErrInvalidKey)
	}
	if len(source) > MaxSourceLen {
		return 0, fmt.Errorf("%s %q: %w", op, name, ErrInvalidSource)
	}
	addr := c.addr
	fail := func(err error) (byte, error) {
		if ctxErr := ctx.Err(); ctxErr != nil {
			err = ctxErr
		}
		return 0, fmt.Errorf("%s %q at %s: %w", op, name, addr, err)
	}
	conn, at, err := c.connect(ctx)
	if err != nil {
		return fail(err)
	}
	addr = at
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if action != actionLock && c.readTimeout > 0 {
		if err := conn.SetDeadline(time.Now().Add(c.readTimeout)); err != nil {
			return fail(err)
		}
	}
	if _, err := conn.Write(EncodeRequest(action, key, source)); err != nil {
		return fail(c.timedOut(err))
	}
	var a [1]byte
	if _, err := io.ReadFull(conn, a[:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("the server closed the connection before it answered: %w", err)
		}
		return fail(c.timedOut(err))
	}
	switch a[0] {
	case answerOK:
		return answerOK, nil
	case answerBusy:
		if action == actionTryLock {
			return answerBusy, nil
		}
	case answerFailed:
		return fail(ErrFailed)
	}
	if a[0] == 'H' && looksHTTP(conn) {
		return fail(fmt.Errorf("%w: an HTTP answer (is this the HTTP API's or the metrics port, not the mutex port?)", ErrProtocol))
	}
	return fail(fmt.Errorf("%w %q", ErrProtocol, a[0]))
}

// looksHTTP reports whether what follows an answer 'H' on conn is the
// rest of an HTTP status line's "HTTP/".
func looksHTTP(conn net.Conn) bool {
	var b [4]byte
	_, err := io.ReadFull(conn, b[:])
	return err == nil && string(b[:]) == "TTP/"
}

// connect dials the server, and shakes hands with WithTLS, within the
// connect timeout: each address in turn, from the one that accepted last,
// until one accepts. It returns the connection and its address.
func (c *Client) connect(ctx context.Context) (net.Conn, string, error) {
	d := &net.Dialer{Timeout: c.connectTimeout}
	dial := d.DialContext
	if c.tls != nil {
		dial = (&tls.Dialer{NetDialer: d, Config: c.tls}).DialContext
	}
	first := int(c.at.Load())
	var err error
	for i := range c.addrs {
		at := (first + i) % len(c.addrs)
		var conn net.Conn
		if conn, err = dial(ctx, "tcp", c.addrs[at]); err == nil {
			c.at.Store(uint32(at))
			return conn, c.addrs[at], nil
		}
		if ctx.Err() != nil || !dialFailed(err) {
			break
		}
	}
	return nil, c.addr, err
}

// dialFailed reports whether err is a connect that did not reach a server
// (refused, unreachable, timed out), where another node may do better; a
// TLS handshake that failed is not.
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// timedOut says so when err is the read timeout running out.
func (c *Client) timedOut(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("no answer within %v: %w", c.readTimeout, err)
	}
	return err
}
