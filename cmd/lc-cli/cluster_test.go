package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/manager"
	"github.com/locking-center/locking-center/mutex"
)

// fakeMembership is a cluster's membership in memory, for the cluster
// commands.
type fakeMembership struct {
	members []manager.Member
	leader  string
}

func (f *fakeMembership) Members(context.Context) ([]manager.Member, error) {
	return slices.Clone(f.members), nil
}

func (f *fakeMembership) AddMember(_ context.Context, m manager.Member) error {
	if slices.ContainsFunc(f.members, func(x manager.Member) bool { return x.ID == m.ID }) {
		return fmt.Errorf("cluster: %s is a member already (%w)", m.ID, manager.ErrMemberExists)
	}
	f.members = append(f.members, m)
	return nil
}

func (f *fakeMembership) RemoveMember(_ context.Context, id string) error {
	i := slices.IndexFunc(f.members, func(x manager.Member) bool { return x.ID == id })
	if i < 0 {
		return fmt.Errorf("cluster: no member %q (%w)", id, manager.ErrUnknownMember)
	}
	f.members = slices.Delete(f.members, i, i+1)
	return nil
}

func (f *fakeMembership) TransferLeadership(_ context.Context, id string) error {
	if id == "" {
		id = "n2"
	}
	f.leader = id
	return nil
}

// startMembershipServer serves a management port over m on 127.0.0.1 and
// returns lc-cli's environment to reach it.
func startMembershipServer(t *testing.T, m manager.Membership) []string {
	t.Helper()
	node := mutex.NewNode(mutex.NodeConfig{})
	t.Cleanup(node.Close)
	srv := manager.NewServer(node, manager.Config{Membership: m, Logger: slog.New(slog.DiscardHandler)})
	ln := listen(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(context.Background(), ln)
	}()
	t.Cleanup(func() {
		srv.Close()
		<-done
	})
	return []string{"LC_MANAGER_ADDRESS=" + ln.Addr().String()}
}

func TestClusterCommands(t *testing.T) {
	fm := &fakeMembership{members: []manager.Member{
		{ID: "n1", RaftAddress: "10.0.0.1:22123", ClientAddress: "10.0.0.1:22119", Voter: true, Leader: true,
			Reachable: true, State: "Leader", Applied: 1042},
		{ID: "n2", RaftAddress: "10.0.0.2:22123", ClientAddress: "10.0.0.2:22119", Voter: true, Reachable: true,
			State: "Follower", LastContact: 37 * time.Millisecond, Applied: 1041},
		{ID: "n3", RaftAddress: "10.0.0.3:22123", Voter: false, LastContact: -1},
	}}
	env := startMembershipServer(t, fm)
	r := runInProcess(t, env, "cluster", "list")
	want := `ID  RAFT            CLIENT          SUFFRAGE  LEADER  STATE        LAST-CONTACT  APPLIED
n1  10.0.0.1:22123  10.0.0.1:22119  voter     *       Leader                  -     1042
n2  10.0.0.2:22123  10.0.0.2:22119  voter             Follower             37ms     1041
n3  10.0.0.3:22123  -               nonvoter          unreachable             -        -
`
	if r.code != exitOK || r.stdout != want || r.stderr != "" {
		t.Fatalf("cluster list = %d, stderr %q, stdout\n%s\nwant\n%s", r.code, r.stderr, r.stdout, want)
	}
	if r := runInProcess(t, env, "cluster", "add", "n4", "10.0.0.4:22123", "--nonvoter"); r.code != exitOK || r.stdout != "" || r.stderr != "" {
		t.Fatalf("cluster add = %d %q %q", r.code, r.stdout, r.stderr)
	}
	if got := fm.members[3]; got != (manager.Member{ID: "n4", RaftAddress: "10.0.0.4:22123"}) {
		t.Fatalf("added %+v", got)
	}
	if r := runInProcess(t, env, "cluster", "add", "n5", "10.0.0.5:22123", "10.0.0.5:22119"); r.code != exitOK {
		t.Fatalf("cluster add with a client address = %d %q", r.code, r.stderr)
	}
	if got := fm.members[4]; got != (manager.Member{ID: "n5", RaftAddress: "10.0.0.5:22123", ClientAddress: "10.0.0.5:22119", Voter: true}) {
		t.Fatalf("added %+v", got)
	}
	r = runInProcess(t, env, "cluster", "add", "n4", "10.0.0.4:22123")
	if r.code != exitFailure || !strings.Contains(r.stderr, "n4 is a member already") || strings.Contains(r.stderr, "no reason") ||
		strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("add of a member = %d %q", r.code, r.stderr)
	}
	if r := runInProcess(t, env, "cluster", "remove", "n4"); r.code != exitOK || len(fm.members) != 4 {
		t.Fatalf("cluster remove = %d %q, members %+v", r.code, r.stderr, fm.members)
	}
	if r := runInProcess(t, env, "cluster", "remove", "n9"); r.code != exitFailure || !strings.Contains(r.stderr, `no member "n9"`) {
		t.Fatalf("remove of a stranger = %d %q", r.code, r.stderr)
	}
	if r := runInProcess(t, env, "cluster", "transfer", "n3"); r.code != exitOK || fm.leader != "n3" {
		t.Fatalf("cluster transfer n3 = %d %q, leader %q", r.code, r.stderr, fm.leader)
	}
	if r := runInProcess(t, env, "cluster", "transfer"); r.code != exitOK || fm.leader != "n2" {
		t.Fatalf("cluster transfer = %d %q, leader %q", r.code, r.stderr, fm.leader)
	}
}

// Bad arguments exit 2 with one line, before any connection.
func TestClusterUsage(t *testing.T) {
	env := []string{"LC_MANAGER_ADDRESS=" + closedAddr(t)}
	for _, args := range [][]string{
		{"cluster"},
		{"cluster", "lst"},
		{"cluster", "list", "x"},
		{"cluster", "add", "n4"},
		{"cluster", "add", "n4", "nohost"},
		{"cluster", "add", "n4", ":22123"},
		{"cluster", "add", "n=4", "h:1"},
		{"cluster", "add", "n4", "h:99999"},
		{"cluster", "add", "n4", "h:0"},
		{"cluster", "add", "n4", "h:raft"},
		{"cluster", "add", "n4", "0.0.0.0:22123"},
		{"cluster", "add", "n4", "h:1", "h:65536"},
		{"cluster", "add", "n4", "h:1", "c"},
		{"cluster", "add", "n4", "h:1", "c:2", "d:3"},
		{"cluster", "remove"},
		{"cluster", "remove", ""},
		{"cluster", "remove", strings.Repeat("n", 128)},
		{"cluster", "transfer", "a", "b"},
	} {
		r := runInProcess(t, env, args...)
		if r.code != exitFailure || strings.Count(r.stderr, "\n") != 1 || strings.Contains(r.stderr, "connect") {
			t.Errorf("%q = %d %q, want a one-line usage error", args, r.code, r.stderr)
		}
	}
}

// A single lcd refuses the cluster commands: exit 2, saying so.
func TestClusterOfASingleNode(t *testing.T) {
	s := startServer(t, nil)
	r := runInProcess(t, s.environ(), "cluster", "list")
	if r.code != exitFailure || !strings.Contains(r.stderr, "NODE_ID") || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("cluster list at a single node = %d %q", r.code, r.stderr)
	}
	var refusal *manager.Refusal
	_, err := (&manager.Client{Addr: s.managerAddr}).Members(context.Background())
	if !errors.As(err, &refusal) || refusal.Code != manager.CodeNotCluster {
		t.Fatalf("members of a single node: %v", err)
	}
}
