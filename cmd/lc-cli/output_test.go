package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/manager"
)

// decodeJSON parses out as exactly one JSON document into v.
func decodeJSON(t *testing.T, what, out string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v in %q", what, err, out)
	}
	if dec.More() {
		t.Fatalf("%s: more than one document in %q", what, out)
	}
}

func TestKeysJSON(t *testing.T) {
	s := startServer(t, nil)
	s.hold(t, "plain", "worker-1")
	s.hold(t, "\xff", "")
	sess, err := lockingcenter.NewSession(context.Background(), s.addr, lockingcenter.WithSource("svc"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	lock, err := sess.Acquire(context.Background(), "leased", lockingcenter.WithLease(time.Minute), lockingcenter.WithNote("why"))
	if err != nil {
		t.Fatal(err)
	}

	var keys struct {
		Keys []jsonKey `json:"keys"`
	}
	for _, flag := range []string{"-o", "--output"} {
		r := runInProcess(t, s.environ(), "keys", flag, "json")
		if r.code != exitOK {
			t.Fatalf("keys %s json = %d %q", flag, r.code, r.stderr)
		}
		decodeJSON(t, "keys", r.stdout, &keys)
	}
	if len(keys.Keys) != 3 || keys.Keys[0].Key == nil || *keys.Keys[0].Key != "leased" || keys.Keys[2].Key != nil ||
		keys.Keys[2].KeyHex != "ff" || keys.Keys[1].KeyHex != hexOf("plain") {
		t.Fatalf("keys -o json = %+v", keys)
	}

	r := runInProcess(t, s.environ(), "keys", "-d", "-o", "json")
	var detail struct {
		Holders []jsonHolder `json:"holders"`
	}
	decodeJSON(t, "keys -d", r.stdout, &detail)
	byKey := map[string]jsonHolder{}
	for _, h := range detail.Holders {
		byKey[h.KeyHex] = h
	}
	want := s.holders(t)
	leased, plain, binary := byKey[hexOf("leased")], byKey[hexOf("plain")], byKey["ff"]
	switch {
	case len(detail.Holders) != 3:
		t.Fatalf("keys -d -o json = %+v", detail)
	case leased.Token == nil || *leased.Token != strconv.FormatUint(lock.Token(), 10):
		t.Errorf("leased token %v, want %d as a string", leased.Token, lock.Token())
	case leased.Session == nil || *leased.Session != strconv.FormatUint(sess.ID(), 10) || leased.LeaseMS == nil ||
		*leased.LeaseMS <= 0 || leased.Note == nil || *leased.Note != "why" || *leased.Source != "svc":
		t.Errorf("leased: %+v", leased)
	case plain.Session != nil || plain.LeaseMS != nil || plain.Note != nil || *plain.Source != "worker-1" ||
		plain.Mode != "exclusive" || plain.Limit != 1 || plain.Count != 1 || plain.Holders != 1 ||
		*plain.Token != strconv.FormatUint(want["plain"].Token, 10):
		t.Errorf("plain: %+v", plain)
	case binary.Key != nil || binary.Remote == nil:
		t.Errorf("the key 0xff: %+v", binary)
	}
	if _, err := time.Parse(time.RFC3339Nano, plain.Acquired); err != nil {
		t.Errorf("acquired %q: %v", plain.Acquired, err)
	}
}

func TestSessionsJSON(t *testing.T) {
	s := startServer(t, nil)
	r := runInProcess(t, s.environ(), "sessions", "-o", "json")
	if r.code != exitOK || r.stdout != "{\"sessions\":[]}\n" {
		t.Fatalf("sessions -o json of none = %d %q %q", r.code, r.stdout, r.stderr)
	}
	sess, err := lockingcenter.NewSession(context.Background(), s.addr, lockingcenter.WithSource("svc-1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	r = runInProcess(t, s.environ(), "sessions", "-o", "json")
	var out struct {
		Sessions []jsonSession `json:"sessions"`
	}
	decodeJSON(t, "sessions", r.stdout, &out)
	if len(out.Sessions) != 1 {
		t.Fatalf("sessions = %+v", out)
	}
	got := out.Sessions[0]
	if *got.ID != strconv.FormatUint(sess.ID(), 10) || *got.Name != "svc-1" || got.Remote == nil ||
		got.TTLMS != sess.TTL().Milliseconds() || got.Held != 0 || got.Parked != 0 {
		t.Fatalf("session %+v", got)
	}
}

func TestClusterListJSON(t *testing.T) {
	fm := &fakeMembership{members: []manager.Member{
		{ID: "n1", RaftAddress: "10.0.0.1:22123", ClientAddress: "10.0.0.1:22119", Voter: true, Leader: true,
			Reachable: true, State: "Leader", Applied: 1042},
		{ID: "n2", RaftAddress: "10.0.0.2:22123", Voter: true, Reachable: true, State: "Follower",
			LastContact: 37 * time.Millisecond, Applied: 1041},
		{ID: "n3", RaftAddress: "10.0.0.3:22123", LastContact: -1},
	}}
	r := runInProcess(t, startMembershipServer(t, fm), "cluster", "list", "-o", "json")
	var out struct {
		Members []jsonMember `json:"members"`
	}
	decodeJSON(t, "cluster list", r.stdout, &out)
	if len(out.Members) != 3 {
		t.Fatalf("cluster list = %+v", out)
	}
	n1, n2, n3 := out.Members[0], out.Members[1], out.Members[2]
	switch {
	case *n1.Client != "10.0.0.1:22119" || !n1.Leader || *n1.State != "Leader" || n1.LastContactMS != nil || *n1.Applied != 1042:
		t.Errorf("n1 %+v", n1)
	case n2.Client != nil || *n2.LastContactMS != 37 || *n2.State != "Follower" || n2.Leader:
		t.Errorf("n2 %+v", n2)
	case n3.Reachable || n3.State != nil || n3.Applied != nil || n3.Voter:
		t.Errorf("n3 %+v", n3)
	}
}

func TestVersionJSON(t *testing.T) {
	r := runInProcess(t, nil, "version", "-o", "json")
	var out struct {
		Version string `json:"version"`
		Commit  string `json:"commit"`
	}
	decodeJSON(t, "version", r.stdout, &out)
	if out.Version != version || out.Commit != commit {
		t.Fatalf("version -o json = %+v", out)
	}
	r = runBinary(t, nil, "version", "--output", "json")
	decodeJSON(t, "version of the binary", r.stdout, &out)
	if out.Version != testVersion || out.Commit != testCommit {
		t.Fatalf("version -o json of the stamped binary = %+v", out)
	}
	r = runInProcess(t, nil, "version", "-o", "xml")
	if r.code != exitFailure {
		t.Fatalf("version -o xml = %d", r.code)
	}
	oneLine(t, r.stderr, "want text or json")
}
