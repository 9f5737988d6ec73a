package main

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/cluster"
)

// getProbe returns the status code and trimmed body of GET url.
func getProbe(t *testing.T, url string) (int, string) {
	t.Helper()
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func TestClusterReady(t *testing.T) {
	for _, tc := range []struct {
		st    cluster.Status
		ready bool
		why   string
	}{
		{cluster.Status{State: "Leader", Ready: true}, true, "leader"},
		{cluster.Status{State: "Leader"}, false, "leader, applying the log of earlier terms"},
		{cluster.Status{State: "Follower", Leader: "10.0.0.1:22119"}, true, "follower of 10.0.0.1:22119"},
		{cluster.Status{State: "Follower"}, false, "no leader known (Follower)"},
		{cluster.Status{State: "Candidate"}, false, "no leader known (Candidate)"},
	} {
		if ready, why := clusterReady(tc.st); ready != tc.ready || why != tc.why {
			t.Errorf("%+v: %v %q, want %v %q", tc.st, ready, why, tc.ready, tc.why)
		}
	}
}

// A single lcd is alive and ready once it listens.
func TestProbesSingle(t *testing.T) {
	p := runInProcess(t, "")
	addrs := p.log.waitStarted(t, p.exited)
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready"} {
		if code, body := getProbe(t, "http://"+addrs.Metrics+path); code != http.StatusOK || body != want {
			t.Errorf("GET %s: %d %q, want 200 %q", path, code, body, want)
		}
	}
}

// Every node of a cluster with a leader is ready, one as the leader; the
// last node of three, its quorum gone, is alive but not ready.
func TestProbesCluster(t *testing.T) {
	lc := startCluster(t, 3)
	lead, ok := lc.leader(all(3), 30*time.Second)
	if !ok {
		t.Fatalf("no leader:\n%s", lc.logs())
	}
	url := func(i int, path string) string { return "http://" + lc.nodes[i].addrs.Metrics + path }
	deadline := time.Now().Add(30 * time.Second)
	for i := range 3 {
		want := "follower of " + lc.nodes[lead].addrs.Mutex
		if i == lead {
			want = "leader"
		}
		for {
			code, body := getProbe(t, url(i, "/readyz"))
			if code == http.StatusOK && body == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("n%d /readyz: %d %q, want 200 %q", i+1, code, body, want)
			}
			time.Sleep(pollEvery)
		}
	}
	rest := slices.DeleteFunc(all(3), func(i int) bool { return i == lead })
	lc.kill(lead)
	lc.kill(rest[0])
	last := rest[1]
	for {
		code, body := getProbe(t, url(last, "/readyz"))
		if code == http.StatusServiceUnavailable && strings.HasPrefix(body, "no leader known") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("n%d alone /readyz: %d %q, want 503 no leader known", last+1, code, body)
		}
		time.Sleep(pollEvery)
	}
	if code, body := getProbe(t, url(last, "/healthz")); code != http.StatusOK || body != "ok" {
		t.Errorf("n%d alone /healthz: %d %q, want 200 ok", last+1, code, body)
	}
}
