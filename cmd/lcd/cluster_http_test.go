package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/manager"
)

// httpAnswer is what the tests read of an HTTP API answer.
type httpAnswer struct {
	code int
	body map[string]any
	raw  string
}

// postAt posts body to path at node i's HTTP API (under TLS with lc.tls).
func (lc *lcdCluster) postAt(i int, path, body string) (httpAnswer, error) {
	scheme, cl := "http", &http.Client{Timeout: time.Minute}
	if lc.tls != nil {
		scheme, cl.Transport = "https", &http.Transport{TLSClientConfig: lc.tls}
	}
	resp, err := cl.Post(scheme+"://"+lc.addrs(i).HTTP+path, "application/json", bytes.NewBufferString(body))
	if err != nil {
		return httpAnswer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return httpAnswer{}, err
	}
	a := httpAnswer{code: resp.StatusCode, raw: string(b)}
	if err := json.Unmarshal(b, &a.body); err != nil {
		return a, fmt.Errorf("answer %d %q: %w", a.code, b, err)
	}
	return a, nil
}

// postUntilServed posts body to node i until an answer other than 503
// not_leader comes, for at most d, and returns it. Each not_leader answer
// is handed to check first.
func (lc *lcdCluster) postUntilServed(t *testing.T, i int, path, body string, d time.Duration, check func(httpAnswer)) httpAnswer {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		a, err := lc.postAt(i, path, body)
		switch {
		case err != nil && a.code == 0:
			// The node itself answers; a connection error is a failure.
			t.Fatalf("POST %s at n%d: %v\n%s", path, i+1, err, lc.logs())
		case a.code != http.StatusServiceUnavailable || a.body["code"] != "not_leader":
			return a
		}
		check(a)
		if time.Now().After(deadline) {
			t.Fatalf("POST %s at n%d: still %d %s after %v\n%s", path, i+1, a.code, a.raw, d, lc.logs())
		}
		time.Sleep(pollEvery)
	}
}

// awaitParked posts the acquire body to node i and returns its answer's
// channel once owner waits for key at node lead.
func (lc *lcdCluster) awaitParked(t *testing.T, i, lead int, key, body, owner string) <-chan httpAnswer {
	t.Helper()
	waited := make(chan httpAnswer, 1)
	go func() {
		a, err := lc.postAt(i, "/api/v1/locks/acquire", body)
		if err != nil {
			a.raw = err.Error()
		}
		waited <- a
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + lc.addrs(lead).HTTP + "/api/v1/locks/observability?prefix=" + key)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if bytes.Contains(b, []byte(`"`+owner+`"`)) { // only its queue entry names it
			return waited
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not wait at n%d: %s", owner, lead+1, b)
		}
		time.Sleep(pollEvery)
	}
}

// Three nodes: HTTP acquires, a waiting acquire and releases sent to a
// follower are forwarded to the leader and answered by it. After the
// leader is killed, the follower's answers name no dead leader, once
// another leads they reach it, and a client's lock taken before is still
// the client's.
func TestClusterHTTPForward(t *testing.T) {
	lc := startCluster(t, 3)
	lead, ok := lc.leader(all(3), 30*time.Second)
	if !ok {
		t.Fatalf("no leader:\n%s", lc.logs())
	}
	f := (lead + 1) % 3
	none := func(a httpAnswer) {}
	acq := lc.postUntilServed(t, f, "/api/v1/locks/acquire",
		`{"key":"k","owner":"w1","client_id":"c1","duration_ms":60000}`, 30*time.Second, none)
	if acq.code != http.StatusOK {
		t.Fatalf("acquire through the follower: %d %s", acq.code, acq.raw)
	}

	// Each node's GET /node, which the status page shows, is its own.
	for _, i := range []int{lead, f} {
		resp, err := http.Get("http://" + lc.addrs(i).HTTP + "/node")
		if err != nil {
			t.Fatal(err)
		}
		var info struct {
			Cluster  bool   `json:"cluster"`
			ID       string `json:"id"`
			Leading  bool   `json:"leading"`
			LeaderID string `json:"leader_id"`
		}
		err = json.NewDecoder(resp.Body).Decode(&info)
		resp.Body.Close()
		if err != nil || !info.Cluster || info.ID != lc.node(i).id || info.Leading != (i == lead) || info.LeaderID != lc.node(lead).id {
			t.Errorf("GET /node at n%d (leader n%d): %+v, %v", i+1, lead+1, info, err)
		}
	}

	// A waiting acquire through the follower, granted by a release
	// through the follower.
	waited := lc.awaitParked(t, f, lead, "k", `{"key":"k","owner":"w2","client_id":"c2","wait_ms":30000}`, "w2")
	rel, err := lc.postAt(f, "/api/v1/locks/release", `{"key":"k","owner":"w1","client_id":"c1"}`)
	if err != nil || rel.code != http.StatusOK {
		t.Fatalf("release through the follower: %+v, %v", rel, err)
	}
	if a := <-waited; a.code != http.StatusOK || a.body["lock"] == nil {
		t.Fatalf("waiting acquire through the follower: %d %s", a.code, a.raw)
	}
	if rel, err := lc.postAt(f, "/api/v1/locks/release", `{"key":"k","owner":"w2","client_id":"c2"}`); err != nil || rel.code != http.StatusOK {
		t.Fatalf("second release through the follower: %+v, %v", rel, err)
	}

	// A client's lock that outlives the leader: its session is in the
	// table, and the next leader takes it over.
	if a, err := lc.postAt(f, "/api/v1/locks/acquire", `{"key":"kept","owner":"w4","client_id":"c4"}`); err != nil || a.code != http.StatusOK {
		t.Fatalf("acquire of kept: %+v, %v", a, err)
	}

	// The leader dies.
	dead, deadMutex := lc.addrs(lead).HTTP, lc.addrs(lead).Mutex
	lc.kill(lead)
	rest := []int{}
	for i := range 3 {
		if i != lead {
			rest = append(rest, i)
		}
	}
	noDead := func(a httpAnswer) {
		if a.body["leader_http"] == dead || a.body["leader"] == deadMutex {
			t.Errorf("n%d names the dead leader: %s", f+1, a.raw)
		}
	}
	got := lc.postUntilServed(t, f, "/api/v1/locks/acquire", `{"key":"after","owner":"w3","duration_ms":60000}`,
		30*time.Second, noDead)
	if got.code != http.StatusOK {
		t.Fatalf("acquire through n%d after the kill: %d %s", f+1, got.code, got.raw)
	}
	next, ok := lc.leader(rest, 30*time.Second)
	if !ok {
		t.Fatalf("no leader after the kill:\n%s", lc.logs())
	}
	// The client's session and lock are the new leader's.
	for _, p := range []struct{ path, body string }{
		{"/api/v1/locks/heartbeat", `{"client_id":"c4"}`},
		{"/api/v1/locks/release", `{"key":"kept","owner":"w4","client_id":"c4"}`},
	} {
		if a, err := lc.postAt(f, p.path, p.body); err != nil || a.code != http.StatusOK {
			t.Errorf("%s after the failover: %+v, %v", p.path, a, err)
		}
	}
	// A new leader leads: every answer of either node is served.
	for _, i := range rest {
		a, err := lc.postAt(i, "/api/v1/locks/release", `{"key":"after","owner":"w3"}`)
		if err != nil {
			t.Fatal(err)
		}
		if i == rest[0] && a.code != http.StatusOK || i == rest[1] && a.code != http.StatusConflict {
			t.Errorf("release at n%d (leader n%d): %d %s", i+1, next+1, a.code, a.raw)
		}
		noDead(a)
	}
}

// sseEvent is one event of a stream, or the comment that ended it.
type sseEvent struct {
	id, data, comment string
}

// subscribeAt opens node i's event stream, resuming after lastID when
// it is not "", and returns its events and comments as they come; the
// channel closes when the stream ends.
func (lc *lcdCluster) subscribeAt(t *testing.T, i int, lastID string) <-chan sseEvent {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+lc.addrs(i).HTTP+"/api/v1/locks/subscribe", nil)
	if err != nil {
		t.Fatal(err)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("subscribe at n%d: %d %s", i+1, resp.StatusCode, b)
	}
	out := make(chan sseEvent, 64)
	t.Cleanup(func() { resp.Body.Close() })
	go func() {
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[6:]
			case strings.HasPrefix(line, ": ") && line != ": connected" && line != ": keep-alive":
				out <- sseEvent{comment: line}
			case line == "" && ev.id != "":
				out <- ev
				ev = sseEvent{}
			}
		}
	}()
	return out
}

// next returns the next event or comment of a stream, failing t when
// none comes within a minute or the stream ended.
func next(t *testing.T, ch <-chan sseEvent) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("the stream ended")
		}
		return ev
	case <-time.After(time.Minute):
		t.Fatal("no event within a minute")
	}
	return sseEvent{}
}

// An event stream at the leader ends with ": not leader" when the leader
// hands its leadership on; resumed at another node with the id of an
// event before the last it had, it goes on with the same events under the
// same ids, then those made since, with nothing missed. An acquire that
// waited at the old leader is answered 503 not_leader.
func TestClusterHTTPStreamFailover(t *testing.T) {
	lc := startCluster(t, 3)
	lead, ok := lc.leader(all(3), 30*time.Second)
	if !ok {
		t.Fatalf("no leader:\n%s", lc.logs())
	}
	stream := lc.subscribeAt(t, lead, "")
	for _, p := range []struct{ path, body string }{
		{"/api/v1/locks/acquire", `{"key":"k1","owner":"w1"}`},
		{"/api/v1/locks/release", `{"key":"k1","owner":"w1"}`},
	} {
		if a, err := lc.postAt(lead, p.path, p.body); err != nil || a.code != http.StatusOK {
			t.Fatalf("%s: %+v, %v", p.path, a, err)
		}
	}
	first, second := next(t, stream), next(t, stream)
	if !strings.Contains(first.data, `"acquired"`) || !strings.Contains(second.data, `"released"`) {
		t.Fatalf("events at the leader: %+v, %+v", first, second)
	}

	// A waiting acquire at the leader.
	if a, err := lc.postAt(lead, "/api/v1/locks/acquire", `{"key":"k3","owner":"w1"}`); err != nil || a.code != http.StatusOK {
		t.Fatalf("acquire of k3: %+v, %v", a, err)
	}
	waited := lc.awaitParked(t, lead, lead, "k3", `{"key":"k3","owner":"w5","client_id":"c5","wait_ms":600000}`, "w5")
	third := next(t, stream)
	if !strings.Contains(third.data, `"acquired"`) || !strings.Contains(third.data, `"key":"k3"`) {
		t.Fatalf("event %+v, want the acquire of k3", third)
	}

	other := (lead + 1) % 3
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := (&manager.Client{Addr: lc.addrs(lead).Manager}).TransferLeadership(ctx, lc.node(other).id); err != nil {
		t.Fatalf("transfer to %s: %v\n%s", lc.node(other).id, err, lc.logs())
	}
	if end := next(t, stream); !strings.HasPrefix(end.comment, ": not leader") {
		t.Fatalf("the old leader's stream went on with %+v", end)
	}
	if ev, ok := <-stream; ok {
		t.Fatalf("after its end, the stream carried %+v", ev)
	}
	if a := <-waited; a.code != http.StatusServiceUnavailable || a.body["code"] != "not_leader" {
		t.Errorf("the acquire that waited at the old leader: %d %s", a.code, a.raw)
	}
	if _, ok := lc.leader(all(3), 30*time.Second); !ok {
		t.Fatalf("no leader after the transfer:\n%s", lc.logs())
	}
	// An event made while no stream was open.
	lc.postUntilServed(t, other, "/api/v1/locks/acquire", `{"key":"k2","owner":"w2"}`, 30*time.Second, func(httpAnswer) {})

	// Resumed at the old leader, a follower now, which forwards it.
	resumed := lc.subscribeAt(t, lead, first.id)
	for _, want := range []sseEvent{second, third} {
		if got := next(t, resumed); got != want {
			t.Fatalf("resumed with %+v, want %+v", got, want)
		}
	}
	// Then what was made since, in order: the new leader's restart
	// withdrew w5's acquire, and k2 was acquired.
	last, _ := strconv.ParseUint(third.id, 10, 64)
	for _, want := range []string{`"action":"withdrawn","key":"k3"`, `"action":"acquired","key":"k2"`} {
		got := next(t, resumed)
		id, _ := strconv.ParseUint(got.id, 10, 64)
		if !strings.Contains(got.data, want) || id <= last {
			t.Fatalf("then %+v, want %s after id %d", got, want, last)
		}
		last = id
	}
}
