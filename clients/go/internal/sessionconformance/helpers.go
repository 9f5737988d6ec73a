package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/clients/go/internal/scenario"
)

// sessions opens the sessions of one scenario and closes them all at its
// end.
type sessions struct {
	ctx  context.Context
	list []*lockingcenter.Session
}

// open opens a session at addr named name.
func (ss *sessions) open(addr, name string, opts ...lockingcenter.SessionOption) (*lockingcenter.Session, error) {
	s, err := lockingcenter.NewSession(ss.ctx, addr, append([]lockingcenter.SessionOption{lockingcenter.WithSource(name)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("session %s at %s: %w", name, addr, err)
	}
	ss.list = append(ss.list, s)
	return s, nil
}

// hold opens a session at addr named name and acquires key in it.
func (ss *sessions) hold(addr, name, key string, opts ...lockingcenter.SessionOption) (*lockingcenter.Session, *lockingcenter.Lock, error) {
	s, err := ss.open(addr, name, opts...)
	if err != nil {
		return nil, nil, err
	}
	l, err := s.Acquire(ss.ctx, key)
	if err != nil {
		return nil, nil, fmt.Errorf("session %s: %w", name, err)
	}
	return s, l, nil
}

func (ss *sessions) close() {
	for _, s := range ss.list {
		s.Close()
	}
}

// acquired is the outcome of an Acquire run in the background.
type acquired struct {
	lock *lockingcenter.Lock
	err  error
}

// acquireAsync runs s.Acquire in a goroutine; the channel delivers its
// outcome.
func acquireAsync(ctx context.Context, s *lockingcenter.Session, key string, opts ...lockingcenter.AcquireOption) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		l, err := s.Acquire(ctx, key, opts...)
		ch <- acquired{l, err}
	}()
	return ch
}

// await waits for the outcome of an acquireAsync, or for ctx to end.
func await(ctx context.Context, what string, ch <-chan acquired) (*lockingcenter.Lock, error) {
	a, err := scenario.Await(ctx, ch)
	if err == nil {
		err = a.err
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return a.lock, nil
}

// ended reports whether ch is closed now.
func ended(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// holder is one line of probe holders.
type holder struct {
	token, session uint64
	note           string
}

// holders lists the holders of key at the lcd of the management port
// manager, by the probe.
func (e env) holders(ctx context.Context, manager, key string) ([]holder, error) {
	out, err := e.probe.Run(ctx, "holders", manager, key)
	if err != nil || out == "" {
		return nil, err
	}
	var hs []holder
	for _, line := range strings.Split(out, "\n") {
		f := strings.SplitN(line, " ", 3)
		var h holder
		var err1, err2 error
		if len(f) >= 2 {
			h.token, err1 = strconv.ParseUint(f[0], 10, 64)
			h.session, err2 = strconv.ParseUint(f[1], 10, 64)
		}
		if len(f) < 2 || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("probe holders printed %q", line)
		}
		if len(f) == 3 {
			h.note = f[2]
		}
		hs = append(hs, h)
	}
	return hs, nil
}

// heldBy checks that l is the one holder of its key at manager, with its
// token, in session s.
func (e env) heldBy(ctx context.Context, manager string, s *lockingcenter.Session, l *lockingcenter.Lock) error {
	hs, err := e.holders(ctx, manager, l.Key())
	if err != nil {
		return err
	}
	if len(hs) != 1 || hs[0].token != l.Token() || hs[0].session != s.ID() {
		return fmt.Errorf("holders of %q: %v, want token %d of session %d", l.Key(), hs, l.Token(), s.ID())
	}
	return nil
}

// leader returns the management port of the cluster's leader, by the
// probe.
func (e env) leader(ctx context.Context) (string, error) {
	out, err := e.probe.Run(ctx, "leader", strings.Join(e.managers, ","))
	if err != nil {
		return "", err
	}
	return e.node(out)
}

// signalLeader sends the leader sig (KILL, STOP, CONT) by the probe and
// returns the management port of the node it signalled.
func (e env) signalLeader(ctx context.Context, sig string) (string, error) {
	out, err := e.probe.Run(ctx, "signal-leader", sig)
	if err != nil {
		return "", err
	}
	return e.node(out)
}

// node returns the management port of the node of the index the probe
// printed.
func (e env) node(index string) (string, error) {
	i, err := strconv.Atoi(index)
	if err != nil || i < 0 || i >= len(e.managers) {
		return "", fmt.Errorf("the probe printed %q, not the index of a node", index)
	}
	return e.managers[i], nil
}

// gate is a dialer (WithDialer) whose connections deliver what the server
// sends only while the gate is open: closed, a read that got bytes waits
// with them until it opens. Writes always go through.
type gate struct {
	mu   sync.Mutex
	shut chan struct{} // nil while open; closed when the gate opens
}

func (g *gate) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &gatedConn{Conn: c, g: g}, nil
}

// hold closes the gate.
func (g *gate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut == nil {
		g.shut = make(chan struct{})
	}
}

// open opens the gate and lets the reads that wait go on.
func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut != nil {
		close(g.shut)
		g.shut = nil
	}
}

func (g *gate) wait() {
	g.mu.Lock()
	shut := g.shut
	g.mu.Unlock()
	if shut != nil {
		<-shut
	}
}

type gatedConn struct {
	net.Conn
	g *gate
}

func (c *gatedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.g.wait()
	return n, err
}

// errorIs checks that err matches want, and matches none of not.
func errorIs(what string, err, want error, not ...error) error {
	if !errors.Is(err, want) {
		return fmt.Errorf("%s: %v, want an error matching %q", what, err, want)
	}
	for _, n := range not {
		if errors.Is(err, n) {
			return fmt.Errorf("%s: %v, which matches %q", what, err, n)
		}
	}
	return nil
}
