package lockingcenter_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/session"
)

// fakeFollower is a node of a cluster that does not lead: it answers
// every connection with GOODBYE not_leader, naming the leader it knows
// ("" for none).
type fakeFollower struct {
	addr   string
	leader atomic.Pointer[string]
	conns  atomic.Int64
}

func startFollower(t *testing.T, leader string) *fakeFollower {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeFollower{addr: ln.Addr().String()}
	f.leader.Store(&leader)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.conns.Add(1)
			wg.Go(func() {
				defer c.Close()
				c.Write(notLeaderFrame(*f.leader.Load()))
				io.Copy(io.Discard, c) // until the client closes: no reset of the GOODBYE
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return f
}

// notLeaderFrame is a GOODBYE not_leader naming leader.
func notLeaderFrame(leader string) []byte {
	field := func(b []byte, tag session.Tag, v []byte) []byte {
		b = append(b, byte(tag))
		b = binary.BigEndian.AppendUint16(b, uint16(len(v)))
		return append(b, v...)
	}
	b := []byte{0, 0, 0, 0, byte(session.TypeGoodbye)}
	b = binary.BigEndian.AppendUint64(b, 0)
	b = field(b, session.TagCode, []byte{byte(session.CodeNotLeader)})
	b = field(b, session.TagMessage, []byte("this node does not lead its cluster"))
	if leader != "" {
		b = field(b, session.TagLeader, []byte(leader))
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// A session given a dead address and a follower's opens at the leader the
// follower names. When the leader moves (its front ends come back at
// another address, which the follower then names), the session resumes
// there: its lock is still its own, and its parked acquire is granted
// once, when the other session, which follows too, releases the key.
func TestSessionFollowsLeader(t *testing.T) {
	srv := startServer(t, serverOptions{})
	f := startFollower(t, srv.addr)
	ctx := context.Background()
	s, err := lockingcenter.NewSession(ctx, lockingcenter.DeadAddr(t), lockingcenter.WithAddresses(f.addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, ok := srv.sessionInfo(s.ID()); !ok || f.conns.Load() != 1 {
		t.Fatalf("session %d not at the leader (%v), the follower asked %d times", s.ID(), ok, f.conns.Load())
	}
	o, err := lockingcenter.NewSession(ctx, srv.addr+","+f.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.Close() })
	held := mustAcquire(t, s, "held")
	other := mustAcquire(t, o, "parked")
	parked := acquireAsync(ctx, s, "parked")
	srv.waitQueue("parked", 1)

	srv.stop()
	srv.serve("127.0.0.1:0")
	f.leader.Store(&srv.addr)
	eventually(t, "both sessions attached at the new address", func() bool {
		a, _ := srv.sessionInfo(s.ID())
		b, _ := srv.sessionInfo(o.ID())
		return a.RemoteAddr != "" && b.RemoteAddr != ""
	})
	if err := other.Release(); err != nil {
		t.Fatal(err)
	}
	got := receive(t, "the parked acquire", parked)
	if got.err != nil {
		t.Fatal(got.err)
	}
	if ended(held.Done()) {
		t.Fatalf("the held lock ended: %v", held.Cause())
	}
	if d := srv.node.Describe("held"); len(d.Holders) != 1 || d.Holders[0].Token != held.Token() {
		t.Fatalf("held: %+v, want token %d", d, held.Token())
	}
	d := srv.node.Describe("parked")
	if len(d.Holders) != 1 || d.Holders[0].Token != got.lock.Token() || d.Holders[0].Count != 1 || d.Queue != 0 {
		t.Fatalf("parked: %+v, want one grant of token %d", d, got.lock.Token())
	}
}

// NewSession tries each address once: followers that know no leader, and
// a dead address, make it fail with the last refusal, not wait.
func TestSessionNoLeader(t *testing.T) {
	checkLeaks(t)
	f1, f2 := startFollower(t, ""), startFollower(t, "")
	_, err := lockingcenter.NewSession(context.Background(), f1.addr+", "+lockingcenter.DeadAddr(t)+","+f2.addr)
	if !errors.Is(err, lockingcenter.ErrFailed) {
		t.Fatalf("NewSession with no leader: %v", err)
	}
	if f1.conns.Load() != 1 || f2.conns.Load() != 1 {
		t.Fatalf("asked the followers %d and %d times, want once each", f1.conns.Load(), f2.conns.Load())
	}
}

// A follower that names a leader that is gone does not end the round:
// the session goes on to the next address.
func TestSessionNamedLeaderGone(t *testing.T) {
	srv := startServer(t, serverOptions{})
	f := startFollower(t, lockingcenter.DeadAddr(t))
	s, err := lockingcenter.NewSession(context.Background(), f.addr, lockingcenter.WithAddresses(srv.addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, ok := srv.sessionInfo(s.ID()); !ok {
		t.Fatalf("session %d not at %s", s.ID(), srv.addr)
	}
}

// Followers that still name a leader that has died or frozen (until they
// elect another) make NewSession fail with ErrClusterNoLeader, as
// followers that name none do, so that its caller asks again: not with
// the dead leader's refused dial, or the frozen one's silence, alone.
func TestSessionNamedLeaderUnreachable(t *testing.T) {
	checkLeaks(t)
	for _, tc := range []struct {
		name   string
		leader string
		cause  func(error) bool
	}{
		{"dead", lockingcenter.DeadAddr(t), func(err error) bool { var op *net.OpError; return errors.As(err, &op) }},
		{"frozen", fakeServer(t, nil), func(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f1, f2 := startFollower(t, tc.leader), startFollower(t, tc.leader)
			_, err := lockingcenter.NewSession(context.Background(), f1.addr+","+f2.addr+","+tc.leader,
				lockingcenter.WithReadTimeout(100*time.Millisecond))
			if !errors.Is(err, lockingcenter.ErrClusterNoLeader) {
				t.Fatalf("NewSession with the named leader %s: %v, want ErrClusterNoLeader", tc.name, err)
			}
			if !tc.cause(err) {
				t.Errorf("NewSession's error %q does not carry the last attempt's", err)
			}
			if f1.conns.Load() == 0 || f2.conns.Load() == 0 {
				t.Fatalf("asked the followers %d and %d times", f1.conns.Load(), f2.conns.Load())
			}
		})
	}
}
