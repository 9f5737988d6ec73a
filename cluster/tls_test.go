package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/locking-center/locking-center/internal/testcerts"
	"github.com/locking-center/locking-center/internal/tlsconf"
	"github.com/locking-center/locking-center/mutex"
)

// refusalCounter is a log handler that counts the raft port's refused
// handshakes and passes every record on.
type refusalCounter struct {
	slog.Handler
	n *atomic.Int64
}

func (h refusalCounter) Handle(ctx context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "TLS handshake failed") {
		h.n.Add(1)
	}
	return h.Handler.Handle(ctx, r)
}

func (h refusalCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return refusalCounter{h.Handler.WithAttrs(as), h.n}
}

func (h refusalCounter) WithGroup(g string) slog.Handler {
	return refusalCounter{h.Handler.WithGroup(g), h.n}
}

// tlsNode is a test node under the TLS of a node certificate of ca for
// hosts (testcerts.Node), that counts the handshakes its raft port
// refused.
func tlsNode(t *testing.T, tn *testNode, ca *testcerts.CA, hosts ...string) *atomic.Int64 {
	t.Helper()
	dir := t.TempDir()
	f := ca.Node(t, tn.id, hosts...).Write(t, dir, tn.id)
	p, err := tlsconf.LoadPeer(tlsconf.PeerConfig{CertFile: f.Cert, KeyFile: f.Key, CAFile: ca.Write(t, dir, "ca")})
	if err != nil {
		t.Fatal(err)
	}
	tn.cfg.TLS = p
	refused := new(atomic.Int64)
	tn.cfg.Logger = slog.New(refusalCounter{tn.cfg.Logger.Handler(), refused})
	return refused
}

// Three nodes under mutual TLS elect a leader that grants; a node of the
// same CA is added at a follower (a control request under TLS), catches
// up and is removed again (the others dial it by another name, and check
// its certificate for the host of its raft address); a node whose certificate another CA signed is
// added but gets nothing (the handshakes fail both ways, and are logged),
// while the cluster serves on; a plain-TCP control request gets no
// answer; the leader's stop elects another, which keeps the lock.
func TestClusterTLS(t *testing.T) {
	ca := testcerts.NewCA(t, "nodes CA")
	// n4's certificate names 127.0.0.1 only, its raft address's host; the
	// others dial it at localhost.
	ln4, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port4, _ := net.SplitHostPort(ln4.Addr().String())
	refused := map[string]*atomic.Int64{}
	nodes := newTestClusterWith(t, 3, testLogStore(t), func(tn *testNode) {
		refused[tn.id] = tlsNode(t, tn, ca)
		tn.cfg.Dial = map[string]string{"n4": net.JoinHostPort("localhost", port4)}
	})
	changed := nodes[0].changed
	lead, g := tryLock(t, nodes, mutex.Claim{Key: "k", Source: "v1", RemoteAddr: "10.0.0.1:1"})

	// In the clear, a status request: the port answers nothing, and logs it.
	plain, err := net.Dial("tcp", lead.c.RaftAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	plain.SetDeadline(time.Now().Add(30 * time.Second))
	if err := writeMessage(plain, []byte{controlByte}, controlRequest{Op: opStatus}); err != nil {
		t.Fatal(err)
	}
	var resp controlResponse
	if err := readMessage(plain, &resp); err == nil {
		t.Fatalf("a plain control request was answered %+v", resp)
	}
	plain.Close()
	eventually(t, "the leader logged the plain connection", func() bool { return refused[lead.id].Load() > 0 })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := followersOf(lead, nodes)[0]
	n4 := newTestNode(t, "n4", ln4, changed)
	tlsNode(t, n4, ca, "127.0.0.1")
	n4.start(t)
	// With its client address, the add records n4's addresses first, so
	// that the others dial it at its Config.Dial address from the start.
	if err := f.c.AddMember(ctx, Peer{ID: "n4", RaftAddress: ln4.Addr().String(), ClientAddress: n4.cfg.ClientAddress}, true); err != nil {
		t.Fatalf("add n4 at a follower: %v", err)
	}
	converge(t, lead, append(nodes, n4))

	ln5, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stranger := newTestNode(t, "n5", ln5, make(chan struct{}, 1))
	strangerRefused := tlsNode(t, stranger, testcerts.NewCA(t, "another CA"))
	stranger.start(t)
	// The leader cannot reach n5 over TLS: the add is refused, and n5
	// never becomes a member.
	if err := f.c.AddMember(ctx, Peer{ID: "n5", RaftAddress: ln5.Addr().String()}, false); !errors.Is(err, ErrBadRequest) {
		t.Fatalf("add n5 of another CA: %v, want refused", err)
	}
	eventually(t, "n5 refused the leader's connection", func() bool { return strangerRefused.Load() > 0 })
	ms, err := f.c.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.ID == "n5" || !m.Reachable {
			t.Errorf("member %+v", m)
		}
	}
	lead, _ = tryLock(t, nodes, mutex.Claim{Key: "k2", Source: "v1"})
	if stranger.c.fsm.applied.Load() != 0 || stranger.n.Len() != 0 {
		t.Fatalf("n5 of another CA took the log: applied %d, %d keys", stranger.c.fsm.applied.Load(), stranger.n.Len())
	}
	if err := f.c.RemoveMember(ctx, "n4"); err != nil {
		t.Fatalf("remove n4 at a follower: %v", err)
	}

	lead.stop()
	next := awaitLeader(t, followersOf(lead, nodes))
	held := false
	for _, h := range next.n.Snapshot().Holders {
		held = held || h.Key == "k" && h.Token == g.Token
	}
	if !held {
		t.Fatalf("after the failover %s lost k: %+v", next.id, next.n.Snapshot().Holders)
	}
}

// messages is a log handler that sends each record's message on a channel.
type messages chan string

func (m messages) Enabled(context.Context, slog.Level) bool      { return true }
func (m messages) Handle(_ context.Context, r slog.Record) error { m <- r.Message; return nil }
func (m messages) WithAttrs([]slog.Attr) slog.Handler            { return m }
func (m messages) WithGroup(string) slog.Handler                 { return m }

// A raft port in the clear that a node under TLS dials refuses the
// connection and says why, rather than hand raft a stream it cannot
// decode.
func TestPlainRaftPortRefusesTLS(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := make(messages, 16)
	s := newTCPStream(ln, ln.Addr(), nil, func(net.Conn) {}, nil, slog.New(logs))
	defer s.Close()

	ca := testcerts.NewCA(t, "nodes CA")
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := testcerts.ClientConfig(ca, ca.Node(t, "n1"))
	cfg.ServerName = "127.0.0.1"
	tc := tls.Client(c, cfg)
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Fatal("the handshake succeeded with a port in the clear")
	}
	select {
	case msg := <-logs:
		if !strings.Contains(msg, "speaks TLS and this node does not") {
			t.Fatalf("logged %q", msg)
		}
	case <-time.After(time.Minute):
		t.Fatal("nothing logged")
	}
}
