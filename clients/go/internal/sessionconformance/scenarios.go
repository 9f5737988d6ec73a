package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/clients/go/internal/scenario"
)

// The thresholds of the table in SESSIONS.md.
const (
	waitBoundFor  = 500 * time.Millisecond // s-wait-bound's wait
	cancelWithin  = time.Second            // s-cancel: the queue empty this soon after the cancel
	leaseFor      = 500 * time.Millisecond // s-lease-expiry's lease
	leaseLostBy   = 2 * time.Second        // s-lease-expiry: the loss reported by then
	leaseDelay    = 2 * time.Second        // s-lease-expiry's lock-delay
	leaseFreeBy   = 5 * time.Second        // s-lease-expiry: a waiting acquire granted by then, from the loss
	heldAfterKill = time.Second            // s-kill-client: every key still held then
	freeAfterKill = 5 * time.Second        // s-kill-client: every key acquired by then
	stopFor       = 6 * time.Second        // s-leader-stop: SIGSTOP to SIGCONT
	stopTTL       = 3 * time.Second        // s-leader-stop's session TTL
	silentWithin  = 10 * time.Second       // s-silent-server: the failure by then
	silentTimeout = 2 * time.Second        // the read timeout s-silent-server gives the session
)

func acquireRelease(ctx context.Context, e env) error {
	ss := &sessions{ctx: ctx}
	defer ss.close()
	s, err := ss.open(e.addr, "go-acquire-release")
	if err != nil {
		return err
	}
	key := prefix + "acquire-release"
	first, err := s.Acquire(ctx, key)
	if err != nil {
		return err
	}
	if err := e.heldBy(ctx, e.manager, s, first); err != nil {
		return err
	}
	if err := first.Release(); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	second, err := s.Acquire(ctx, key)
	if err != nil {
		return err
	}
	if second.Token() <= first.Token() {
		return fmt.Errorf("second token %d, not above the first %d", second.Token(), first.Token())
	}
	if err := second.Release(); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if err := second.Release(); err != nil {
		return fmt.Errorf("releasing a released lock again: %w", err)
	}
	return nil
}

// heldByOther opens a session that takes key, and another that the
// scenario goes on with.
func heldByOther(ss *sessions, e env, key string) (other, s *lockingcenter.Session, err error) {
	if other, _, err = ss.hold(e.addr, "go-holder", key); err != nil {
		return nil, nil, err
	}
	s, err = ss.open(e.addr, "go-asker")
	return other, s, err
}

func tryBusy(ctx context.Context, e env) error {
	ss := &sessions{ctx: ctx}
	defer ss.close()
	key := prefix + "try-busy"
	_, s, err := heldByOther(ss, e, key)
	if err != nil {
		return err
	}
	l, err := s.Acquire(ctx, key, lockingcenter.TryOnce())
	if l != nil {
		return fmt.Errorf("a try of a held key was granted, token %d", l.Token())
	}
	return errorIs("a try of a held key", err, lockingcenter.ErrBusy)
}

func waitBound(ctx context.Context, e env) error {
	ss := &sessions{ctx: ctx}
	defer ss.close()
	key := prefix + "wait-bound"
	_, s, err := heldByOther(ss, e, key)
	if err != nil {
		return err
	}
	_, err = s.Acquire(ctx, key, lockingcenter.WithWait(waitBoundFor))
	if err := errorIs("a bounded wait for a held key", err, lockingcenter.ErrTimeout); err != nil {
		return err
	}
	return e.probe.Waiters(ctx, e.manager, key, 0)
}

func cancelWait(ctx context.Context, e env) error {
	ss := &sessions{ctx: ctx}
	defer ss.close()
	key := prefix + "cancel"
	holder, s, err := heldByOther(ss, e, key)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	parked := acquireAsync(wctx, s, key)
	if err := e.probe.Waiters(ctx, e.manager, key, 1); err != nil {
		return err
	}
	cancel()
	cancelled := time.Now()
	if _, err := await(ctx, "the cancelled acquire", parked); !errors.Is(err, context.Canceled) {
		return fmt.Errorf("the cancelled acquire: %v, want context.Canceled", err)
	}
	if err := e.probe.Waiters(ctx, e.manager, key, 0); err != nil {
		return err
	}
	if took := time.Since(cancelled); took > cancelWithin {
		return fmt.Errorf("the queue was empty %v after the cancel, want within %v", took, cancelWithin)
	}
	next, err := ss.open(e.addr, "go-next")
	if err != nil {
		return err
	}
	granted := acquireAsync(ctx, next, key)
	if err := e.probe.Waiters(ctx, e.manager, key, 1); err != nil {
		return err
	}
	if err := holder.Close(); err != nil {
		return err
	}
	l, err := await(ctx, "the next waiter", granted)
	if err != nil {
		return err
	}
	return e.heldBy(ctx, e.manager, next, l)
}

// staleRelease makes a session release a lock that a reset took from it
// and passed to another session, before it hears of the loss: its reads
// wait behind a gate while the reset goes through, so its RELEASE carries
// a token the server no longer has it hold.
func staleRelease(ctx context.Context, e env) error {
	ss := &sessions{ctx: ctx}
	defer ss.close()
	key := prefix + "stale-release"
	g := &gate{}
	defer g.open()
	_, old, err := ss.hold(e.addr, "go-stale", key, lockingcenter.WithDialer(g.dial))
	if err != nil {
		return err
	}
	other, err := ss.open(e.addr, "go-real-holder")
	if err != nil {
		return err
	}
	granted := acquireAsync(ctx, other, key)
	if err := e.probe.Waiters(ctx, e.manager, key, 1); err != nil {
		return err
	}
	g.hold()
	if err := lockingcenter.New(e.addr).ResetByKey(ctx, key); err != nil {
		return err
	}
	real, err := await(ctx, "the waiter after the reset", granted)
	if err != nil {
		return err
	}
	released := make(chan error, 1)
	go func() { released <- old.Release() }()
	select {
	case <-old.Done(): // the client has let the lock go, and sends the RELEASE
	case <-ctx.Done():
		return ctx.Err()
	}
	g.open()
	err, waitErr := scenario.Await(ctx, released)
	if waitErr != nil {
		return waitErr
	}
	// ErrReset would be the client's own knowledge of the reset; the
	// refusal of the server says the lock was lost, no more.
	if err := errorIs("the release of a token the session no longer holds", err, lockingcenter.ErrLockLost, lockingcenter.ErrReset); err != nil {
		return err
	}
	return e.heldBy(ctx, e.manager, other, real)
}

func leaseExpiry(ctx context.Context, e env) error {
	ss := &sessions{ctx: ctx}
	defer ss.close()
	s, err := ss.open(e.addr, "go-lease")
	if err != nil {
		return err
	}
	other, err := ss.open(e.addr, "go-lease-next")
	if err != nil {
		return err
	}
	key := prefix + "lease-expiry"
	asked := time.Now()
	l, err := s.Acquire(ctx, key, lockingcenter.WithLease(leaseFor), lockingcenter.WithLockDelay(leaseDelay))
	if err != nil {
		return err
	}
	select {
	case <-l.Done():
	case <-time.After(time.Until(asked.Add(leaseLostBy))):
		return fmt.Errorf("a lock with a lease of %v not reported lost %v after the acquire", leaseFor, leaseLostBy)
	}
	lost := time.Now()
	if err := errorIs("the cause of the lost lock", l.Cause(), lockingcenter.ErrLeaseExpired); err != nil {
		return err
	}
	// What the session sends after the loss comes after its release of
	// the lock (with lapse), if the server had not ended it yet.
	info, err := s.Describe(ctx, key)
	if err != nil {
		return err
	}
	if len(info.Holders) != 0 {
		return fmt.Errorf("after the lease: holders %v", info.Holders)
	}
	if hs, err := e.holders(ctx, e.manager, key); err != nil || len(hs) != 0 {
		return fmt.Errorf("probe holders after the lease: %v %v, want none", hs, err)
	}
	if l, err := other.Acquire(ctx, key, lockingcenter.TryOnce()); l != nil {
		return fmt.Errorf("a try right after the loss was granted (token %d): the lock-delay of %v was skipped", l.Token(), leaseDelay)
	} else if err := errorIs("a try in the lock-delay", err, lockingcenter.ErrBusy); err != nil {
		return err
	}
	wctx, cancel := context.WithDeadline(ctx, lost.Add(leaseFreeBy))
	defer cancel()
	next, err := other.Acquire(wctx, key)
	if err != nil {
		return fmt.Errorf("an acquire after the lock-delay, by %v after the loss: %w", leaseFreeBy, err)
	}
	return next.Release()
}

func killClient(ctx context.Context, e env) error {
	ss := &sessions{ctx: ctx}
	defer ss.close()
	keys := []string{prefix + "kill-1", prefix + "kill-2", prefix + "kill-3"}
	s, err := ss.open(e.addr, "go-after-kill")
	if err != nil {
		return err
	}
	cmd, tokens, err := startChild(ctx, e.addr, keys)
	if err != nil {
		return err
	}
	if err := cmd.Process.Kill(); err != nil {
		return err
	}
	killed := time.Now()
	cmd.Wait()
	select {
	case <-time.After(time.Until(killed.Add(heldAfterKill))):
	case <-ctx.Done():
		return ctx.Err()
	}
	for i, key := range keys {
		info, err := s.Describe(ctx, key)
		if err != nil {
			return err
		}
		if len(info.Holders) != 1 || info.Holders[0].Token != tokens[i] {
			return fmt.Errorf("%v after the kill, %q has holders %v, want the child's token %d", time.Since(killed), key, info.Holders, tokens[i])
		}
	}
	actx, cancel := context.WithDeadline(ctx, killed.Add(freeAfterKill))
	defer cancel()
	var waits []<-chan acquired
	for _, key := range keys {
		waits = append(waits, acquireAsync(actx, s, key))
	}
	for i, w := range waits {
		if _, err := await(ctx, fmt.Sprintf("%q within %v of the kill", keys[i], freeAfterKill), w); err != nil {
			return err
		}
	}
	return nil
}

func resume(ctx context.Context, e env) error {
	ss := &sessions{ctx: ctx}
	defer ss.close()
	keyA, keyB := prefix+"resume-a", prefix+"resume-b"
	s, a, err := ss.hold(e.proxy, "go-resume", keyA)
	if err != nil {
		return err
	}
	_, b, err := ss.hold(e.addr, "go-resume-other", keyB)
	if err != nil {
		return err
	}
	parked := acquireAsync(ctx, s, keyB)
	if err := e.probe.Waiters(ctx, e.manager, keyB, 1); err != nil {
		return err
	}
	if _, err := e.probe.Run(ctx, "cut", e.proxyCtl); err != nil {
		return err
	}
	if err := b.Release(); err != nil {
		return err
	}
	got, err := await(ctx, "the parked acquire after the cut", parked)
	if err != nil {
		return err
	}
	if ended(a.Done()) {
		return fmt.Errorf("the lock of %q ended across the cut: %v", keyA, a.Cause())
	}
	if err := e.heldBy(ctx, e.manager, s, a); err != nil {
		return err
	}
	return e.heldBy(ctx, e.manager, s, got)
}

func leaderStop(ctx context.Context, e env) error {
	ss := &sessions{ctx: ctx}
	defer ss.close()
	s, l, err := ss.hold(strings.Join(e.cluster, ","), "go-leader-stop", prefix+"leader-stop", lockingcenter.WithTTL(stopTTL))
	if err != nil {
		return err
	}
	if _, err := e.signalLeader(ctx, "STOP"); err != nil {
		return err
	}
	stopped := time.Now()
	var lost error
	select {
	case <-time.After(time.Until(stopped.Add(stopFor))):
	case <-l.Done():
		lost = fmt.Errorf("the lock ended %v after the leader's SIGSTOP: %v", time.Since(stopped), l.Cause())
	case <-ctx.Done():
		lost = ctx.Err()
	}
	if _, err := e.signalLeader(ctx, "CONT"); err != nil {
		return errors.Join(lost, err)
	}
	if lost != nil {
		return lost
	}
	if err := s.Err(); err != nil {
		return fmt.Errorf("the session ended: %w", err)
	}
	leader, err := e.leader(ctx)
	if err != nil {
		return err
	}
	return e.heldBy(ctx, leader, s, l)
}

func leaderKill(ctx context.Context, e env) error {
	ss := &sessions{ctx: ctx}
	defer ss.close()
	nodes := strings.Join(e.cluster, ",")
	s, held, err := ss.hold(nodes, "go-leader-kill", prefix+"leader-kill-held")
	if err != nil {
		return err
	}
	keyB := prefix + "leader-kill-parked"
	_, b, err := ss.hold(nodes, "go-leader-kill-other", keyB)
	if err != nil {
		return err
	}
	parked := acquireAsync(ctx, s, keyB)
	leader, err := e.leader(ctx)
	if err != nil {
		return err
	}
	if err := e.probe.Waiters(ctx, leader, keyB, 1); err != nil {
		return err
	}
	if _, err := e.signalLeader(ctx, "KILL"); err != nil {
		return err
	}
	if leader, err = e.leader(ctx); err != nil {
		return err
	}
	if err := e.heldBy(ctx, leader, s, held); err != nil {
		return err
	}
	if err := b.Release(); err != nil {
		return fmt.Errorf("the other session's release at the new leader: %w", err)
	}
	got, err := await(ctx, "the parked acquire after the failover", parked)
	if err != nil {
		return err
	}
	if ended(held.Done()) {
		return fmt.Errorf("the held lock ended across the failover: %v", held.Cause())
	}
	return e.heldBy(ctx, leader, s, got)
}

func tlsToken(ctx context.Context, e env) error {
	ss := &sessions{ctx: ctx}
	defer ss.close()
	ca, err := os.ReadFile(e.caFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("%s holds no certificate", e.caFile)
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	s, err := ss.open(e.tls, "go-tls", lockingcenter.WithTLS(cfg), lockingcenter.WithToken(e.token))
	if err != nil {
		return err
	}
	l, err := s.Acquire(ctx, prefix+"tls")
	if err != nil {
		return err
	}
	if err := l.Release(); err != nil {
		return err
	}
	_, err = ss.open(e.tls, "go-tls-wrong", lockingcenter.WithTLS(cfg), lockingcenter.WithToken("not-the-token-"+e.token))
	if err := errorIs("a session with a wrong token", err, lockingcenter.ErrUnauthenticated); err != nil {
		return err
	}
	_, err = s.Acquire(ctx, "outside-"+prefix+"tls")
	return errorIs("a key outside "+prefix, err, lockingcenter.ErrForbidden)
}

func modes(ctx context.Context, e env) error {
	ss := &sessions{ctx: ctx}
	defer ss.close()
	var s [3]*lockingcenter.Session
	for i := range s {
		var err error
		if s[i], err = ss.open(e.addr, "go-modes-"+strconv.Itoa(i)); err != nil {
			return err
		}
	}
	for _, check := range []func(context.Context, env, [3]*lockingcenter.Session) error{
		sharedMode, semaphore, reentrant, priority,
	} {
		if err := check(ctx, e, s); err != nil {
			return err
		}
	}
	return nil
}

// sharedMode: two sessions hold a key shared at once.
func sharedMode(ctx context.Context, e env, s [3]*lockingcenter.Session) error {
	key := prefix + "modes-shared"
	for i := range 2 {
		if _, err := s[i].Acquire(ctx, key, lockingcenter.Shared(), lockingcenter.TryOnce()); err != nil {
			return fmt.Errorf("shared holder %d: %w", i, err)
		}
	}
	if hs, err := e.holders(ctx, e.manager, key); err != nil || len(hs) != 2 {
		return fmt.Errorf("holders of the shared key: %v %v, want 2", hs, err)
	}
	return nil
}

// semaphore: a semaphore of 2 has two holders, and a third try is busy.
func semaphore(ctx context.Context, e env, s [3]*lockingcenter.Session) error {
	key := prefix + "modes-semaphore"
	for i := range 2 {
		if _, err := s[i].Acquire(ctx, key, lockingcenter.WithLimit(2), lockingcenter.TryOnce()); err != nil {
			return fmt.Errorf("semaphore holder %d: %w", i, err)
		}
	}
	if hs, err := e.holders(ctx, e.manager, key); err != nil || len(hs) != 2 {
		return fmt.Errorf("holders of the semaphore: %v %v, want 2", hs, err)
	}
	_, err := s[2].Acquire(ctx, key, lockingcenter.WithLimit(2), lockingcenter.TryOnce())
	return errorIs("a third try of a semaphore of 2", err, lockingcenter.ErrBusy)
}

// reentrant: a reentrant acquire with the same owner counts up, with the
// same token.
func reentrant(ctx context.Context, e env, s [3]*lockingcenter.Session) error {
	key := prefix + "modes-reentrant"
	opts := []lockingcenter.AcquireOption{lockingcenter.Reentrant(), lockingcenter.WithOwner("worker-1")}
	first, err := s[0].Acquire(ctx, key, opts...)
	if err != nil {
		return err
	}
	again, err := s[0].Acquire(ctx, key, opts...)
	if err != nil {
		return fmt.Errorf("reentrant acquire: %w", err)
	}
	if again.Token() != first.Token() {
		return fmt.Errorf("reentrant acquire: token %d, want the first's %d", again.Token(), first.Token())
	}
	info, err := s[1].Describe(ctx, key)
	if err != nil {
		return err
	}
	if len(info.Holders) != 1 || info.Holders[0].Count != 2 {
		return fmt.Errorf("after a reentrant acquire: holders %+v, want one of count 2", info.Holders)
	}
	return nil
}

// priority: among waiters, the higher priority is granted first.
func priority(ctx context.Context, e env, s [3]*lockingcenter.Session) error {
	key := prefix + "modes-priority"
	holder, err := s[0].Acquire(ctx, key)
	if err != nil {
		return err
	}
	low := acquireAsync(ctx, s[1], key)
	if err := e.probe.Waiters(ctx, e.manager, key, 1); err != nil {
		return err
	}
	high := acquireAsync(ctx, s[2], key, lockingcenter.WithPriority(10))
	if err := e.probe.Waiters(ctx, e.manager, key, 2); err != nil {
		return err
	}
	if err := holder.Release(); err != nil {
		return err
	}
	var first *lockingcenter.Lock
	select {
	case a := <-high:
		if a.err != nil {
			return fmt.Errorf("the waiter of priority 10: %w", a.err)
		}
		first = a.lock
	case a := <-low:
		return fmt.Errorf("the waiter of priority 0 was granted first (%v)", a.err)
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := first.Release(); err != nil {
		return err
	}
	_, err = await(ctx, "the waiter of priority 0", low)
	return err
}

func note(ctx context.Context, e env) error {
	ss := &sessions{ctx: ctx}
	defer ss.close()
	s, err := ss.open(e.addr, "go-note")
	if err != nil {
		return err
	}
	const text = "nightly build 7 on host-3, ünïcode — see ci/runs/7"
	l, err := s.Acquire(ctx, prefix+"note", lockingcenter.WithNote(text))
	if err != nil {
		return err
	}
	hs, err := e.holders(ctx, e.manager, l.Key())
	if err != nil {
		return err
	}
	if len(hs) != 1 || hs[0].token != l.Token() || hs[0].note != text {
		return fmt.Errorf("holders %+v, want token %d with the note %q", hs, l.Token(), text)
	}
	return nil
}

func bigToken(ctx context.Context, e env) error {
	ss := &sessions{ctx: ctx}
	defer ss.close()
	s, l, err := ss.hold(e.big, "go-big-token", prefix+"big-token")
	if err != nil {
		return err
	}
	if l.Token() <= 1<<63 {
		return fmt.Errorf("token %d, want one above 2^63", l.Token())
	}
	return e.heldBy(ctx, e.bigManager, s, l)
}

func silentServer(ctx context.Context, e env) error {
	start := time.Now()
	s, err := lockingcenter.NewSession(ctx, e.silent, lockingcenter.WithSource("go-silent"),
		lockingcenter.WithReadTimeout(silentTimeout))
	if err == nil {
		s.Close()
		return fmt.Errorf("a session opened at a server that never answers")
	}
	if took := time.Since(start); took > silentWithin {
		return fmt.Errorf("the session failed after %v, want within %v", took, silentWithin)
	}
	return errorIs("a session at a server that never answers", err, os.ErrDeadlineExceeded)
}

// fifoMixed parks five waiters, sessions of this client and of the
// probe's session-lock by turns, and checks that they are granted in that
// order: each grant is released as soon as it comes, so the order of the
// grants is the order of the queue.
func fifoMixed(ctx context.Context, e env) error {
	ss := &sessions{ctx: ctx}
	defer ss.close()
	key := prefix + "fifo-mixed"
	_, held, err := ss.hold(e.addr, "go-fifo-holder", key)
	if err != nil {
		return err
	}
	type grant struct {
		waiter int
		lock   *lockingcenter.Lock // of this client's waiters
		err    error
	}
	grants := make(chan grant, 5)
	var probes [5]*probeWaiter // the probe's waiters
	for i := range 5 {
		if i%2 == 0 {
			s, err := ss.open(e.addr, "go-fifo-"+strconv.Itoa(i))
			if err != nil {
				return err
			}
			go func() {
				l, err := s.Acquire(ctx, key)
				grants <- grant{i, l, err}
			}()
		} else {
			p, err := startProbeLock(e, key, func(err error) { grants <- grant{i, nil, err} })
			if err != nil {
				return err
			}
			defer p.stop()
			probes[i] = p
		}
		if err := e.probe.Waiters(ctx, e.manager, key, i+1); err != nil {
			return fmt.Errorf("waiter %d did not park: %w", i, err)
		}
	}
	if err := held.Release(); err != nil {
		return err
	}
	for want := range 5 {
		g, err := scenario.Await(ctx, grants)
		if err != nil {
			return fmt.Errorf("waiter %d: %w", want, err)
		}
		if g.err != nil {
			return fmt.Errorf("waiter %d: %w", g.waiter, g.err)
		}
		if g.waiter != want {
			return fmt.Errorf("waiter %d was granted the key when waiter %d was due", g.waiter, want)
		}
		release := probes[g.waiter].release
		if g.lock != nil {
			release = g.lock.Release
		}
		if err := release(); err != nil {
			return fmt.Errorf("waiter %d's release: %w", g.waiter, err)
		}
	}
	return nil
}

// probeWaiter is a probe session-lock process.
type probeWaiter struct {
	cmd    *exec.Cmd
	stdin  io.Closer
	exited chan struct{}
	err    error // how it exited, once exited is closed
}

// startProbeLock starts probe session-lock on key at the single lcd;
// granted hears of its grant, or of its failure.
func startProbeLock(e env, key string, granted func(error)) (*probeWaiter, error) {
	p := &probeWaiter{cmd: exec.Command(string(e.probe), "session-lock", e.addr, key), exited: make(chan struct{})}
	p.cmd.Stderr = os.Stderr
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	p.stdin = stdin
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(p.exited)
		r := bufio.NewReader(out)
		line, err := r.ReadString('\n')
		if err == nil && !strings.HasPrefix(line, "granted ") {
			err = fmt.Errorf("probe session-lock printed %q", line)
		}
		if err != nil {
			err = fmt.Errorf("probe session-lock: %w", err)
		}
		granted(err)
		io.Copy(io.Discard, r)
		p.err = p.cmd.Wait()
	}()
	return p, nil
}

// release makes the probe release the key and waits for it to exit.
func (p *probeWaiter) release() error {
	p.stdin.Close()
	<-p.exited
	return p.err
}

// stop ends the probe, whatever it was doing.
func (p *probeWaiter) stop() {
	p.cmd.Process.Kill()
	<-p.exited
}
