package oneshot

import (
	"net"
	"testing"
	"time"

	"github.com/locking-center/locking-center/internal/ratelimit"
	"github.com/locking-center/locking-center/mutex"
)

func refusals(n *mutex.Node, r mutex.Refusal) uint64 { return n.Snapshot().Counters.Refusals[r] }

// With v1 closed to a network, every v1 request from it is answered '-'
// and counted; the table is untouched.
func TestV1ClosedToANetwork(t *testing.T) {
	node := newNode()
	defer node.Close()
	_, loopback, _ := net.ParseCIDR("127.0.0.0/8")
	for _, c := range []struct {
		allowed func(net.IP) bool
		want    byte
	}{
		{func(net.IP) bool { return false }, AnswerFailed},
		{loopback.Contains, AnswerOK},
	} {
		s := startServerWith(t, node, ServerConfig{V1Allowed: c.allowed})
		for _, r := range []Request{{Action: ActionLock, Key: "k"}, {Action: ActionUnlock, Key: "k"},
			{Action: ActionTryLock, Key: "k"}, {Action: ActionResetKey, Key: "k"}} {
			if got := s.do(t, r); got != c.want {
				t.Errorf("action %d: %q, want %q", r.Action, got, c.want)
			}
		}
		s.srv.Close()
	}
	if n := refusals(node, mutex.RefusedV1); n != 4 {
		t.Errorf("%d v1 refusals counted, want 4", n)
	}
}

func TestV1RatePerAddress(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := startServer(t, ServerConfig{Rates: ratelimit.New(1, 2, func() time.Time { return now })})
	want := []byte{AnswerOK, AnswerOK, AnswerFailed}
	for i, w := range want {
		if got := s.do(t, Request{Action: ActionTryLock, Key: "k" + string(rune('a'+i))}); got != w {
			t.Errorf("request %d: %q, want %q", i, got, w)
		}
	}
	if n := refusals(s.table, mutex.RefusedRate); n != 1 {
		t.Errorf("%d rate refusals, want 1", n)
	}
}

// A v1 client is charged to its address: over the node's cap it is
// answered '-'.
func TestV1CapPerAddress(t *testing.T) {
	s := startServerWith(t, mutex.NewNode(mutex.NodeConfig{Limits: mutex.Limits{MaxHeld: 2}}), ServerConfig{})
	defer s.table.Close()
	for i, w := range []byte{AnswerOK, AnswerOK, AnswerFailed} {
		if got := s.do(t, Request{Action: ActionTryLock, Key: "k" + string(rune('a'+i)), Source: "src"}); got != w {
			t.Errorf("try-lock %d: %q, want %q", i, got, w)
		}
	}
	if got := s.do(t, Request{Action: ActionLock, Key: "kz", Source: "other-name"}); got != AnswerFailed {
		t.Errorf("a lock under another name from the same address: %q, want '-'", got)
	}
	s.do(t, Request{Action: ActionUnlock, Key: "ka"})
	if got := s.do(t, Request{Action: ActionLock, Key: "kz"}); got != AnswerOK {
		t.Errorf("a lock once a key was freed: %q", got)
	}
}
