package manager

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/auth"
)

// fakeCluster is a Membership that keeps its members in memory and
// refuses what a cluster would.
type fakeCluster struct {
	members []Member
	leader  string
}

func (f *fakeCluster) Members(context.Context) ([]Member, error) { return slices.Clone(f.members), nil }

func (f *fakeCluster) AddMember(_ context.Context, m Member) error {
	if strings.Contains(m.ID, "=") {
		return fmt.Errorf("%w: %q", ErrBadMember, m.ID)
	}
	for _, x := range f.members {
		if x.ID == m.ID {
			return fmt.Errorf("%w: %s", ErrMemberExists, m.ID)
		}
	}
	f.members = append(f.members, m)
	return nil
}

func (f *fakeCluster) RemoveMember(_ context.Context, id string) error {
	i := slices.IndexFunc(f.members, func(m Member) bool { return m.ID == id })
	if i < 0 {
		return fmt.Errorf("%w: %q", ErrUnknownMember, id)
	}
	if len(f.members) == 1 {
		return ErrLastVoter
	}
	f.members = slices.Delete(f.members, i, i+1)
	return nil
}

func (f *fakeCluster) TransferLeadership(_ context.Context, id string) error {
	if id == "down" {
		return errors.New("the disk is on fire")
	}
	if id == "" {
		id = "n2"
	}
	f.leader = id
	return nil
}

// The membership commands carry members, changes and refusals, with their
// codes and words, both ways.
func TestMembershipCommands(t *testing.T) {
	fc := &fakeCluster{members: []Member{{ID: "n1", RaftAddress: "10.0.0.1:22123", ClientAddress: "10.0.0.1:22119",
		Voter: true, Leader: true, Reachable: true, State: "Leader", LastContact: 0, Applied: 1 << 40}}}
	_, c := startWith(t, Config{Membership: fc})
	ctx := context.Background()
	add := Member{ID: "n2", RaftAddress: strings.Repeat("h", 250) + ":1", Voter: false}
	if err := c.AddMember(ctx, add); err != nil {
		t.Fatal(err)
	}
	ms, err := c.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := append(slices.Clone(fc.members[:1]), Member{ID: "n2", RaftAddress: add.RaftAddress})
	if !slices.Equal(ms, want) {
		t.Fatalf("members\n got %+v\nwant %+v", ms, want)
	}
	for _, tc := range []struct {
		name string
		err  error
		code byte
		call func() error
	}{ // in order: the last removes n2
		{"exists", ErrMemberExists, CodeMemberExists, func() error { return c.AddMember(ctx, add) }},
		{"bad", ErrBadMember, CodeBadMember, func() error { return c.AddMember(ctx, Member{ID: "a=b", RaftAddress: "h:1"}) }},
		{"unknown", ErrUnknownMember, CodeUnknownMember, func() error { return c.RemoveMember(ctx, "n9") }},
		{"other", ErrFailed, CodeFailed, func() error { return c.TransferLeadership(ctx, "down") }},
		{"last voter", ErrLastVoter, CodeLastVoter, func() error { c.RemoveMember(ctx, "n2"); return c.RemoveMember(ctx, "n1") }},
	} {
		err := tc.call()
		var r *Refusal
		if !errors.Is(err, tc.err) || !errors.Is(err, ErrFailed) || !errors.As(err, &r) || r.Code != tc.code || r.Message == "" {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if err := c.TransferLeadership(ctx, ""); err != nil || fc.leader != "n2" {
		t.Fatalf("transfer to any: %v, leader %q", err, fc.leader)
	}
	for _, err := range []error{
		c.AddMember(ctx, Member{ID: strings.Repeat("n", 128), RaftAddress: "h:1"}),
		c.AddMember(ctx, Member{ID: "n3", RaftAddress: strings.Repeat("h", 256)}),
		c.RemoveMember(ctx, ""),
	} {
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("sent what the wire cannot carry: %v", err)
		}
	}
}

// A single node refuses the membership commands with not_cluster.
func TestMembershipOfASingleNode(t *testing.T) {
	_, c := start(t)
	if _, err := c.Members(context.Background()); !errors.Is(err, ErrNotCluster) {
		t.Fatalf("members of a single node: %v", err)
	}
	if got := raw(t, c.Addr, []byte{byte(CmdRemoveMember), 2, 'n', '1'}); !bytes.HasPrefix(got, []byte{'-', CodeNotCluster}) {
		t.Fatalf("remove at a single node: %q", got)
	}
}

func TestMemberListRoundTrip(t *testing.T) {
	in := []Member{
		{ID: "n1", RaftAddress: "a:1", ClientAddress: "b:2", Voter: true, Leader: true, Reachable: true, State: "Leader", Applied: 9},
		{ID: strings.Repeat("x", 127), RaftAddress: strings.Repeat("r", 255), LastContact: -1},
		{ID: "n3", RaftAddress: "c:3", Reachable: true, State: "Candidate", LastContact: 1500 * time.Millisecond},
	}
	out, err := decodeMembers(appendMembers(nil, in)[1:])
	if err != nil || !slices.Equal(out, in) {
		t.Fatalf("decoded %+v, %v; want %+v", out, err, in)
	}
	if _, err := decodeMembers([]byte{0, 0, 0, 9}); err == nil {
		t.Fatal("a count past the body decoded")
	}
}

// With authentication on, the membership commands are an admin's only:
// any other token, or none, is refused with CodeNotAdmin and changes
// nothing.
func TestMembershipNeedsAnAdmin(t *testing.T) {
	toks, err := auth.Parse(strings.NewReader("ops admin ops-token-0123456789\nsvc client svc-token-0123456789\n"))
	if err != nil {
		t.Fatal(err)
	}
	fc := &fakeCluster{members: []Member{{ID: "n1", RaftAddress: "10.0.0.1:22123", Voter: true}}}
	_, c := startWith(t, Config{Tokens: toks, Membership: fc})
	ctx := context.Background()
	for _, token := range []string{"", "svc-token-0123456789", "unknown-token-000000"} {
		c.Token = token
		var r *Refusal
		if _, err := c.Members(ctx); !errors.Is(err, ErrNotAdmin) || !errors.As(err, &r) || r.Code != CodeNotAdmin {
			t.Errorf("members with token %q: %v", token, err)
		}
		if err := c.AddMember(ctx, Member{ID: "n2", RaftAddress: "h:1", Voter: true}); !errors.Is(err, ErrNotAdmin) {
			t.Errorf("add with token %q: %v", token, err)
		}
		if err := c.TransferLeadership(ctx, ""); !errors.Is(err, ErrNotAdmin) {
			t.Errorf("transfer with token %q: %v", token, err)
		}
	}
	if len(fc.members) != 1 || fc.leader != "" {
		t.Fatalf("refused requests changed the cluster: %+v, leader %q", fc.members, fc.leader)
	}
	c.Token = "ops-token-0123456789"
	if err := c.AddMember(ctx, Member{ID: "n2", RaftAddress: "h:1", Voter: true}); err != nil {
		t.Fatal(err)
	}
	if ms, err := c.Members(ctx); err != nil || len(ms) != 2 {
		t.Fatalf("an admin's members: %+v, %v", ms, err)
	}
}

// leaderless is a Membership whose cluster has no leader: every change
// waits for one until its context ends.
type leaderless struct{ fakeCluster }

func (leaderless) AddMember(ctx context.Context, _ Member) error {
	<-ctx.Done()
	return ErrNoLeader
}

// Without a leader, a client that waits as long as the server's timeout
// hears that no leader answered, not its own timeout.
func TestNoLeaderAnswersBeforeTheClientGivesUp(t *testing.T) {
	const timeout = 2 * time.Second
	_, c := startWith(t, Config{Timeout: timeout, Membership: &leaderless{}})
	c.ReadTimeout = timeout
	err := c.AddMember(context.Background(), Member{ID: "n4", RaftAddress: "10.0.0.4:22123", Voter: true})
	if !errors.Is(err, ErrNoLeader) {
		t.Fatalf("add without a leader: %v, want ErrNoLeader", err)
	}
}
