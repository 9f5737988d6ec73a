package httpapi_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/httpapi"
	"github.com/locking-center/locking-center/mutex"
)

// The acquire, renew and release of Pranor Lock's own examples, as they
// are written there (an API key header, no Content-Type on two of them).
func TestPranorExamples(t *testing.T) {
	e := start(t, options{})
	send := func(path, body string, header ...string) answer {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, e.url+path, strings.NewReader(body))
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return answer{code: resp.StatusCode}
	}
	key := []string{"X-API-Key", "your-secret"}
	if a := send("/api/v1/locks/acquire", `{"key":"my-resource","owner":"worker-1","duration_ms":30000}`,
		append(key, "Content-Type", "application/json")...); a.code != 200 {
		t.Fatalf("acquire: %d", a.code)
	}
	if a := send("/api/v1/locks/renew", `{"key":"my-resource","owner":"worker-1","duration_ms":30000}`, key...); a.code != 200 {
		t.Fatalf("renew: %d", a.code)
	}
	if a := send("/api/v1/locks/release", `{"key":"my-resource","owner":"worker-1"}`, key...); a.code != 200 {
		t.Fatalf("release: %d", a.code)
	}
	if len(e.held("my-resource")) != 0 {
		t.Fatal("still held after the release")
	}
}

func TestAcquireAnswer(t *testing.T) {
	clk := newClock()
	e := start(t, options{clock: clk})
	a := e.acquire(`{"key":"orders/processing","owner":"worker-1","client_id":"instance-abc","duration_ms":30000,"mode":"exclusive","priority":10}`)
	l := a.lock()
	if a.str("status") != "success" || l["key"] != "orders/processing" || l["owner"] != "worker-1" ||
		l["client_id"] != "instance-abc" || num(l["reentrancy_count"]) != 1 || l["mode"] != "exclusive" ||
		num(l["limit"]) != 1 || num(l["session"]) == 0 {
		t.Fatalf("lock %s", a.body)
	}
	h := e.node.Describe("orders/processing").Holders
	if len(h) != 1 || h[0].Token != a.token() || h[0].Source != "worker-1" || u64(l["session"]) != h[0].Session {
		t.Fatalf("holders %+v for %s", h, a.body)
	}
	// expires_at is the lease's end.
	if l["acquired_at"] != clk.Now().Format(time.RFC3339Nano) || l["expires_at"] != clk.Now().Add(30*time.Second).Format(time.RFC3339Nano) {
		t.Fatalf("times %v %v at %v", l["acquired_at"], l["expires_at"], clk.Now())
	}
	// Without a lease, a client's lock ends with its session (TTL 5 s).
	a = e.acquire(`{"key":"d","owner":"w","client_id":"instance-abc"}`)
	if a.lock()["expires_at"] != clk.Now().Add(5*time.Second).Format(time.RFC3339Nano) {
		t.Fatalf("a client's lock without a lease: %s", a.body)
	}
	// Without a client_id, the lease alone ends the lock.
	a = e.acquire(`{"key":"b","owner":"w","duration_ms":30000}`)
	if a.lock()["expires_at"] != clk.Now().Add(30*time.Second).Format(time.RFC3339Nano) || a.lock()["client_id"] != "" {
		t.Fatalf("anonymous lease: %s", a.body)
	}
	a = e.acquire(`{"key":"c","owner":"w"}`)
	if _, ok := a.lock()["expires_at"]; ok {
		t.Fatalf("a lock without lease or client has no end: %s", a.body)
	}
}

// Without wait_ms a held key answers 409 at once, in Pranor's words.
func TestTryConflict(t *testing.T) {
	e := start(t, options{})
	e.acquire(`{"key":"orders/processing","owner":"worker-1"}`)
	a := e.post("/api/v1/locks/acquire", `{"key":"orders/processing","owner":"worker-2"}`)
	expect(t, a, http.StatusConflict, "conflict")
	if a.str("status") != "failed" || a.str("message") != `lock conflict: key "orders/processing" is held in mode "exclusive"` {
		t.Fatalf("conflict %s", a.body)
	}
	a = e.post("/api/v1/locks/acquire", `{"key":"orders/processing","owner":"worker-2","wait_ms":0}`)
	expect(t, a, http.StatusConflict, "conflict")
}

// wait_ms parks the request in the key's one FIFO queue, behind and ahead
// of v1 and session-protocol requests, in order of arrival.
func TestWaitFIFOAcrossFrontEnds(t *testing.T) {
	m := startMutexPort(t)
	e := start(t, options{node: m.node})
	const key = "orders/fifo"
	first := e.acquire(jsonBody(map[string]any{"key": key, "owner": "http-a"}))

	v1 := m.v1Lock(t, key, "v1-b") // 1st in the queue
	eventually(t, "v1 parked", func() bool { return e.node.Describe(key).Queue == 1 })
	sc := m.session(t, "session-c")
	acq := sc.acquire(key) // 2nd
	eventually(t, "session parked", func() bool { return e.node.Describe(key).Queue == 2 })
	httpD := make(chan answer, 1)
	go func() {
		a, _ := e.do(context.Background(), http.MethodPost, "/api/v1/locks/acquire",
			jsonBody(map[string]any{"key": key, "owner": "http-d", "wait_ms": 60000}))
		httpD <- a
	}()
	eventually(t, "HTTP parked", func() bool { return e.node.Describe(key).Queue == 3 })
	if ks := e.keys(); len(ks) != 1 || strings.Join(strs(ks[0]["waiters"]), ",") != "v1-b,session-c,http-d" {
		t.Fatalf("observability %v", ks)
	}

	expect(t, e.post("/api/v1/locks/release", jsonBody(map[string]any{"key": key, "owner": "http-a", "fencing_token": first.token()})), 200, "")
	<-v1.granted
	if got := e.held(key); len(got) != 1 || got[0] != "v1-b" {
		t.Fatalf("after the HTTP release: %v", got)
	}
	v1.unlock(t)
	token := sc.granted(t, acq)
	if got := e.held(key); len(got) != 1 || got[0] != "session-c" {
		t.Fatalf("after the v1 unlock: %v", got)
	}
	select {
	case a := <-httpD:
		t.Fatalf("HTTP answered before its turn: %d %s", a.code, a.body)
	default:
	}
	sc.release(t, key, token)
	a := <-httpD
	expect(t, a, http.StatusOK, "")
	if got := e.held(key); len(got) != 1 || got[0] != "http-d" || a.token() <= token {
		t.Fatalf("after the session's release: %v, token %d after %d", got, a.token(), token)
	}
}

func strs(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// A wait that runs out answers 409, and the request leaves the queue.
func TestWaitTimeout(t *testing.T) {
	e := start(t, options{clock: newClock()})
	e.acquire(`{"key":"k","owner":"a"}`)
	got := make(chan answer, 1)
	go func() {
		a, _ := e.do(context.Background(), http.MethodPost, "/api/v1/locks/acquire", `{"key":"k","owner":"b","wait_ms":1500}`)
		got <- a
	}()
	eventually(t, "parked", func() bool { return e.node.Describe("k").Queue == 1 })
	e.advance(1499 * time.Millisecond)
	select {
	case a := <-got:
		t.Fatalf("answered before its wait ran out: %s", a.body)
	default:
	}
	e.advance(time.Millisecond)
	a := <-got
	expect(t, a, http.StatusConflict, "timeout")
	if !strings.HasPrefix(a.str("message"), `lock conflict: key "k" is held in mode "exclusive"`) {
		t.Fatalf("timeout message %s", a.body)
	}
	if q := e.node.Describe("k").Queue; q != 0 {
		t.Fatalf("queue %d after the timeout", q)
	}
}

// A client that disconnects while it waits is withdrawn: the key never
// goes to it.
func TestDisconnectWhileWaitingWithdraws(t *testing.T) {
	e := start(t, options{})
	first := e.acquire(`{"key":"k","owner":"a"}`)
	s := e.subscribe("?prefix=k")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := e.do(ctx, http.MethodPost, "/api/v1/locks/acquire", `{"key":"k","owner":"b","client_id":"gone","wait_ms":60000}`)
		errc <- err
	}()
	eventually(t, "parked", func() bool { return e.node.Describe("k").Queue == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v", err)
	}
	ev := s.expectEvent("withdrawn", "k")
	if ev.data["owner"] != "b" || ev.data["client_id"] != "gone" || ev.data["reason"] != "cancelled" {
		t.Fatalf("withdrawn event %v", ev.data)
	}
	expect(t, e.post("/api/v1/locks/release", jsonBody(map[string]any{"key": "k", "owner": "a", "fencing_token": first.token()})), 200, "")
	s.expectEvent("released", "k")
	if h := e.held("k"); len(h) != 0 {
		t.Fatalf("held by %v after the waiter left", h)
	}
}

func TestReentrancy(t *testing.T) {
	e := start(t, options{})
	body := `{"key":"k","owner":"worker-1","client_id":"c1"}`
	a1 := e.acquire(body)
	a2 := e.acquire(body)
	if num(a1.lock()["reentrancy_count"]) != 1 || num(a2.lock()["reentrancy_count"]) != 2 || a1.token() != a2.token() ||
		a1.lock()["acquired_at"] != a2.lock()["acquired_at"] {
		t.Fatalf("reentrant acquires %s %s", a1.body, a2.body)
	}
	// Another owner, or the same owner of another client, waits its turn.
	expect(t, e.post("/api/v1/locks/acquire", `{"key":"k","owner":"worker-2","client_id":"c1"}`), 409, "conflict")
	expect(t, e.post("/api/v1/locks/acquire", `{"key":"k","owner":"worker-1","client_id":"c2"}`), 409, "conflict")
	// reentrant false: the holder would wait for itself.
	expect(t, e.post("/api/v1/locks/acquire", `{"key":"k","owner":"worker-1","client_id":"c1","reentrant":false,"wait_ms":1000}`), 409, "deadlock")

	rel := `{"key":"k","owner":"worker-1","client_id":"c1"}`
	r := e.post("/api/v1/locks/release", rel)
	if r.code != 200 || num(r.m["reentrancy_count"]) != 1 || len(e.held("k")) != 1 {
		t.Fatalf("first release %s, held %v", r.body, e.held("k"))
	}
	r = e.post("/api/v1/locks/release", rel)
	if r.code != 200 || num(r.m["reentrancy_count"]) != 0 || r.str("message") != "Lock released successfully" || len(e.held("k")) != 0 {
		t.Fatalf("second release %s, held %v", r.body, e.held("k"))
	}
	expect(t, e.post("/api/v1/locks/release", rel), 409, "not_held")
}

func TestSharedMode(t *testing.T) {
	e := start(t, options{})
	r1 := e.acquire(`{"key":"k","owner":"reader-1","mode":"shared"}`)
	r2 := e.acquire(`{"key":"k","owner":"reader-2","mode":"shared"}`)
	if r1.token() == r2.token() || r2.lock()["mode"] != "shared" {
		t.Fatalf("shared grants %s %s", r1.body, r2.body)
	}
	a := e.post("/api/v1/locks/acquire", `{"key":"k","owner":"writer-1"}`)
	expect(t, a, 409, "conflict")
	if a.str("message") != `lock conflict: key "k" is held in mode "shared"` || num(a.m["holders"]) != 2 {
		t.Fatalf("writer refused with %s", a.body)
	}
	writer := make(chan answer, 1)
	go func() {
		a, _ := e.do(context.Background(), http.MethodPost, "/api/v1/locks/acquire", `{"key":"k","owner":"writer-1","wait_ms":60000}`)
		writer <- a
	}()
	eventually(t, "writer parked", func() bool { return e.node.Describe("k").Queue == 1 })
	// A reader that comes after the waiting writer does not overtake it.
	expect(t, e.post("/api/v1/locks/acquire", `{"key":"k","owner":"reader-3","mode":"shared"}`), 409, "conflict")
	// An upgrade is refused.
	expect(t, e.post("/api/v1/locks/acquire", `{"key":"k","owner":"reader-1","wait_ms":1000}`), 409, "upgrade")
	expect(t, e.post("/api/v1/locks/release", `{"key":"k","owner":"reader-1"}`), 200, "")
	expect(t, e.post("/api/v1/locks/release", `{"key":"k","owner":"reader-2"}`), 200, "")
	w := <-writer
	expect(t, w, 200, "")
	if w.lock()["mode"] != "exclusive" || e.held("k")[0] != "writer-1" {
		t.Fatalf("writer %s", w.body)
	}
}

func TestSemaphoreLimit(t *testing.T) {
	e := start(t, options{})
	e.acquire(`{"key":"pool","owner":"a","limit":2}`)
	b := e.acquire(`{"key":"pool","owner":"b","limit":2}`)
	if num(b.lock()["limit"]) != 2 {
		t.Fatalf("limit %s", b.body)
	}
	expect(t, e.post("/api/v1/locks/acquire", `{"key":"pool","owner":"c","limit":2}`), 409, "conflict")
	a := e.post("/api/v1/locks/acquire", `{"key":"pool","owner":"d","limit":3}`)
	expect(t, a, 409, "limit_mismatch")
	if num(a.m["limit"]) != 2 {
		t.Fatalf("mismatch %s", a.body)
	}
}

func TestReleaseFencingToken(t *testing.T) {
	e := start(t, options{})
	a := e.acquire(`{"key":"k","owner":"worker-1","client_id":"c1"}`)
	tok := a.token()
	r := e.post("/api/v1/locks/release", jsonBody(map[string]any{"key": "k", "owner": "worker-1", "fencing_token": tok + 1}))
	expect(t, r, 409, "token_mismatch")
	if u64(r.m["fencing_token"]) != tok || !strings.Contains(r.str("message"), "fencing token mismatch") {
		t.Fatalf("mismatch %s", r.body)
	}
	if len(e.held("k")) != 1 {
		t.Fatal("a wrong token released the lock")
	}
	// Another owner cannot release it, with or without the token.
	expect(t, e.post("/api/v1/locks/release", jsonBody(map[string]any{"key": "k", "owner": "worker-2", "fencing_token": tok})), 409, "not_held")
	// The right token, without the client_id (as Pranor's example does).
	r = e.post("/api/v1/locks/release", jsonBody(map[string]any{"key": "k", "owner": "worker-1", "fencing_token": tok}))
	expect(t, r, 200, "")
	if u64(r.m["fencing_token"]) != tok || len(e.held("k")) != 0 {
		t.Fatalf("release %s", r.body)
	}
	// A v1 lock is not the HTTP API's to release.
	if _, _, err := e.node.TryLock(mutex.Claim{Key: "v1", Source: "worker-1"}); err != nil {
		t.Fatal(err)
	}
	expect(t, e.post("/api/v1/locks/release", `{"key":"v1","owner":"worker-1"}`), 409, "not_held")
}

func TestRenew(t *testing.T) {
	clk := newClock()
	e := start(t, options{clock: clk})
	a := e.acquire(`{"key":"k","owner":"w","duration_ms":1000}`)
	e.advance(800 * time.Millisecond)
	r := e.post("/api/v1/locks/renew", jsonBody(map[string]any{"key": "k", "owner": "w", "fencing_token": a.token(), "duration_ms": 2000}))
	expect(t, r, 200, "")
	if r.str("message") != "Lock lease renewed successfully" || r.str("expires_at") != clk.Now().Add(2*time.Second).Format(time.RFC3339Nano) {
		t.Fatalf("renew %s", r.body)
	}
	e.advance(1900 * time.Millisecond) // past the first lease, within the second
	if len(e.held("k")) != 1 {
		t.Fatal("the renewed lease ended at the old time")
	}
	// Without duration_ms the lock's own lease starts again.
	expect(t, e.post("/api/v1/locks/renew", `{"key":"k","owner":"w"}`), 200, "")
	e.advance(1999 * time.Millisecond)
	if len(e.held("k")) != 1 {
		t.Fatal("lease ended early")
	}
	e.advance(time.Millisecond)
	if len(e.held("k")) != 0 {
		t.Fatal("lease did not end")
	}
	expect(t, e.post("/api/v1/locks/renew", `{"key":"k","owner":"w"}`), 409, "not_held")
}

// A heartbeat keeps a client alive; without one for its TTL the client's
// session expires, its locks end and an expired event says so.
func TestHeartbeatAndExpiry(t *testing.T) {
	e := start(t, options{clock: newClock()})
	s := e.subscribe("")
	a := e.acquire(`{"key":"jobs/nightly","owner":"cron","client_id":"instance-abc"}`)
	s.expectEvent("acquired", "jobs/nightly")
	for range 4 {
		e.advance(4 * time.Second)
		hb := e.post("/api/v1/locks/heartbeat", `{"client_id":"instance-abc"}`)
		expect(t, hb, 200, "")
		if hb.str("status") != "success" || num(hb.m["ttl_ms"]) != 5000 {
			t.Fatalf("heartbeat %s", hb.body)
		}
	}
	if len(e.held("jobs/nightly")) != 1 {
		t.Fatal("lost while heartbeats came")
	}
	e.advance(4999 * time.Millisecond)
	if len(e.held("jobs/nightly")) != 1 {
		t.Fatal("expired before its TTL")
	}
	e.advance(time.Millisecond)
	if len(e.held("jobs/nightly")) != 0 {
		t.Fatal("held after the TTL without a heartbeat")
	}
	ev := s.expectEvent("expired", "jobs/nightly")
	if ev.data["client_id"] != "instance-abc" || ev.data["owner"] != "cron" || u64(ev.data["fencing_token"]) != a.token() ||
		ev.data["reason"] != "session_expired" {
		t.Fatalf("expired event %v", ev.data)
	}
	// The client comes back: a new session.
	b := e.acquire(`{"key":"jobs/nightly","owner":"cron","client_id":"instance-abc"}`)
	if b.lock()["session"] == a.lock()["session"] {
		t.Fatal("the expired session came back")
	}
	expect(t, e.post("/api/v1/locks/heartbeat", `{}`), 400, "bad_request")
}

// Any request naming the client_id keeps it alive; a waiting one too.
func TestRequestsKeepClientAlive(t *testing.T) {
	e := start(t, options{clock: newClock()})
	e.acquire(`{"key":"a","owner":"w","client_id":"c"}`)
	e.advance(4 * time.Second)
	e.acquire(`{"key":"b","owner":"w","client_id":"c"}`)
	e.advance(4 * time.Second)
	if len(e.held("a")) != 1 {
		t.Fatal("an acquire naming the client did not keep it alive")
	}
	expect(t, e.post("/api/v1/locks/release", `{"key":"b","owner":"w","client_id":"c"}`), 200, "")
	e.advance(4 * time.Second)
	if len(e.held("a")) != 1 {
		t.Fatal("a release naming the client did not keep it alive")
	}
	e.advance(time.Second)
	if len(e.held("a")) != 0 {
		t.Fatal("not expired")
	}
}

func TestDeadlock(t *testing.T) {
	e := start(t, options{})
	s := e.subscribe("")
	e.acquire(`{"key":"x","owner":"A","client_id":"a"}`)
	e.acquire(`{"key":"y","owner":"B","client_id":"b"}`)
	s.expectEvent("acquired", "x")
	s.expectEvent("acquired", "y")
	waiting := make(chan answer, 1)
	go func() {
		a, _ := e.do(context.Background(), http.MethodPost, "/api/v1/locks/acquire", `{"key":"y","owner":"A","client_id":"a","wait_ms":60000}`)
		waiting <- a
	}()
	eventually(t, "A waits for y", func() bool { return e.node.Describe("y").Queue == 1 })
	a := e.post("/api/v1/locks/acquire", `{"key":"x","owner":"B","client_id":"b","wait_ms":60000}`)
	expect(t, a, 409, "deadlock")
	if a.str("message") != "deadlock detected: cycle in lock wait queue" {
		t.Fatalf("deadlock %s", a.body)
	}
	if ev := s.expectEvent("deadlock", "x"); ev.data["client_id"] != "b" || ev.data["owner"] != "B" {
		t.Fatalf("deadlock event %v", ev.data)
	}
	expect(t, e.post("/api/v1/locks/release", `{"key":"y","owner":"B"}`), 200, "")
	expect(t, <-waiting, 200, "")
}

func TestObservability(t *testing.T) {
	clk := newClock()
	e := start(t, options{clock: clk})
	a := e.acquire(`{"key":"orders/processing","owner":"worker-1","client_id":"c1","duration_ms":30000}`)
	for _, o := range []string{"worker-2", "worker-3"} {
		go e.do(context.Background(), http.MethodPost, "/api/v1/locks/acquire", jsonBody(map[string]any{
			"key": "orders/processing", "owner": o, "wait_ms": 60000}))
		want := map[string]int{"worker-2": 1, "worker-3": 2}[o]
		eventually(t, o+" parked", func() bool { return e.node.Describe("orders/processing").Queue == want })
	}
	e.acquire(`{"key":"a-first","owner":"z"}`)
	ks := e.keys()
	if len(ks) != 2 || ks[0]["key"] != "a-first" || ks[1]["key"] != "orders/processing" {
		t.Fatalf("keys %v", ks)
	}
	k := ks[1]
	if k["owner"] != "worker-1" || u64(k["fencing_token"]) != a.token() || k["client_id"] != "c1" ||
		strings.Join(strs(k["waiters"]), ",") != "worker-2,worker-3" || k["mode"] != "exclusive" ||
		k["expires_at"] != clk.Now().Add(30*time.Second).Format(time.RFC3339Nano) {
		t.Fatalf("key %v", k)
	}
	q := k["queue"].([]any)
	if len(q) != 2 || num(q[1].(map[string]any)["queue_position"]) != 2 || q[1].(map[string]any)["front_end"] != "http" {
		t.Fatalf("queue %v", q)
	}
	// A prefix narrows the listing; the legacy path serves the same.
	resp, err := http.Get(e.url + "/api/locks/observability?prefix=orders/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("legacy path: %s", resp.Status)
	}
	cancelAll := e.post("/api/v1/locks/release", `{"key":"orders/processing","owner":"worker-1"}`)
	expect(t, cancelAll, 200, "")
}

func TestSessionsListing(t *testing.T) {
	e := start(t, options{})
	e.acquire(`{"key":"k","owner":"w","client_id":"c1"}`)
	e.acquire(`{"key":"j","owner":"w"}`)
	resp, err := http.Get(e.url + "/api/v1/locks/sessions")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	a := answer{code: resp.StatusCode}
	var list []map[string]any
	decodeInto(t, resp, &list)
	if a.code != 200 || len(list) != 2 || list[0]["client_id"] != "c1" || num(list[0]["held"]) != 1 ||
		list[0]["front_end"] != "http" || list[1]["anonymous"] != true {
		t.Fatalf("sessions %v", list)
	}
	// The anonymous session never expires: it shows no TTL, idle time or
	// end; a client's does.
	for _, f := range []string{"ttl_ms", "idle_ms", "expires_at"} {
		if _, ok := list[1][f]; ok {
			t.Errorf("the anonymous session shows %s: %v", f, list[1])
		}
		if _, ok := list[0][f]; !ok {
			t.Errorf("a client's session shows no %s: %v", f, list[0])
		}
	}
	if e.metric("locking_center_http_sessions") != 1 {
		t.Fatal("sessions gauge")
	}
}

// Bad input gets 400 with a message, and changes nothing.
func TestBadRequests(t *testing.T) {
	e := start(t, options{})
	for _, c := range []struct{ body, msg string }{
		{``, "must be a JSON object"},
		{`{"key":`, "not valid JSON"},
		{`[1]`, "must be"},
		{`{"owner":"w"}`, "key is required"},
		{`{"key":"k"}`, "owner is required"},
		{`{"key":"` + strings.Repeat("k", 128) + `","owner":"w"}`, "at most 127"},
		{`{"key":"k","owner":"w","wait_ms":-1}`, "wait_ms must lie between"},
		{`{"key":"k","owner":"w","duration_ms":"soon"}`, `"duration_ms" must be an integer`},
		{`{"key":"k","owner":"w","mode":"read"}`, `mode must be "exclusive" or "shared"`},
		{`{"key":"k","owner":"w","mode":"shared","limit":3}`, "a shared lock takes no limit"},
		{`{"key":"k","owner":"w","priority":3000000000}`, "priority must lie between"},
		{`{"key":"k","owner":"w","lock_delay_ms":60001}`, "lock_delay_ms must lie between"},
		{`{"key":"k","owner":"w","ttl":5}`, `unknown field "ttl"`},
		{`{"key":"k","owner":"w"} {}`, "more than one JSON object"},
		{`{"key":"k","owner":"w","reentrant":"yes"}`, `"reentrant" must be true or false`},
	} {
		a := e.post("/api/v1/locks/acquire", c.body)
		if a.code != 400 || a.str("code") != "bad_request" || !strings.Contains(a.str("message"), c.msg) {
			t.Errorf("%s: %d %s, want 400 with %q", c.body, a.code, a.body, c.msg)
		}
	}
	a := e.post("/api/v1/locks/acquire", `{"key":"k","owner":"`+strings.Repeat("w", 70000)+`"}`)
	expect(t, a, http.StatusRequestEntityTooLarge, "too_large")
	if e.node.Len() != 0 {
		t.Fatal("a bad request changed the table")
	}
	a, _ = e.do(context.Background(), http.MethodGet, "/api/v1/locks/acquire", "")
	expect(t, a, http.StatusMethodNotAllowed, "method_not_allowed")
	a, _ = e.do(context.Background(), http.MethodPost, "/api/v1/locks/observability", "")
	expect(t, a, http.StatusMethodNotAllowed, "method_not_allowed")
	a, _ = e.do(context.Background(), http.MethodGet, "/api/v1/locks/nothing", "")
	expect(t, a, http.StatusNotFound, "not_found")
}

func decodeInto(t *testing.T, resp *http.Response, v any) {
	t.Helper()
	if err := jsonDecode(resp, v); err != nil {
		t.Fatal(err)
	}
}

func TestHealth(t *testing.T) {
	e := start(t, options{cfg: httpapi.Config{Version: "1.2.3"}})
	for _, p := range []string{"/healthz", "/readyz"} {
		a, err := e.do(context.Background(), http.MethodGet, p, "")
		if err != nil || a.code != 200 || a.str("status") != "UP" || a.str("version") != "1.2.3" || a.str("service") != "locking-center" {
			t.Fatalf("%s: %v %s", p, err, a.body)
		}
	}
}

// Shutdown answers a waiting acquire 503 (and withdraws it), ends event
// streams, and says DOWN on /readyz; the locks stay held.
func TestShutdown(t *testing.T) {
	e := start(t, options{})
	e.acquire(`{"key":"k","owner":"a"}`)
	s := e.subscribe("")
	got := make(chan answer, 1)
	go func() {
		a, _ := e.do(context.Background(), http.MethodPost, "/api/v1/locks/acquire", `{"key":"k","owner":"b","wait_ms":60000}`)
		got <- a
	}()
	eventually(t, "parked", func() bool { return e.node.Describe("k").Queue == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	expect(t, <-got, http.StatusServiceUnavailable, "shutting_down")
	if q := e.node.Describe("k").Queue; q != 0 {
		t.Fatalf("queue %d after shutdown", q)
	}
	// The stream may carry the events of the shutdown's own withdrawals
	// first; then it ends.
	for ev, err := s.read(); err == nil; ev, err = s.read() {
		if ev.data["action"] != "withdrawn" {
			t.Fatalf("event stream still open: %+v", ev)
		}
	}
	if len(e.held("k")) != 1 {
		t.Fatal("shutdown released a lock")
	}
	rec := httptestRecorder()
	e.srv.Handler().ServeHTTP(rec, mustRequest(t, "GET", "/readyz"))
	if rec.Code != 503 || !strings.Contains(rec.Body.String(), `"DOWN"`) {
		t.Fatalf("readyz after shutdown: %d %s", rec.Code, rec.Body)
	}
	if err := e.srv.Shutdown(ctx); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}
}

// After a restart on a write-ahead log, the front end takes its sessions
// back: a client's heartbeat keeps its lock, and releases work.
func TestSessionsAfterRestart(t *testing.T) {
	e1, restart := journaled(t, httpapi.Config{})
	a := e1.acquire(`{"key":"k","owner":"w","client_id":"c1"}`)
	e1.acquire(`{"key":"anon","owner":"w"}`)
	e2 := restart(httpapi.Config{})
	hb := e2.post("/api/v1/locks/heartbeat", `{"client_id":"c1"}`)
	expect(t, hb, 200, "")
	if u64(hb.m["session"]) != u64(a.lock()["session"]) {
		t.Fatalf("heartbeat after restart opened session %v, want %v", hb.m["session"], a.lock()["session"])
	}
	// The client's requests go on with the ids after those applied.
	expect(t, e2.post("/api/v1/locks/release", `{"key":"k","owner":"w","client_id":"c1"}`), 200, "")
	expect(t, e2.post("/api/v1/locks/release", `{"key":"anon","owner":"w"}`), 200, "")
	b := e2.acquire(`{"key":"k2","owner":"w"}`)
	if b.token() <= a.token() {
		t.Fatal("tokens went back")
	}
}

// notLeaderReplicator is the Replicator of a node of a cluster that is not the
// leader: every proposal fails.
type notLeaderReplicator struct{ leader string }

func (f notLeaderReplicator) Propose(*mutex.Command) func() error {
	return func() error { return mutex.ErrNotLeader }
}
func (f notLeaderReplicator) VerifyLeader() error { return mutex.ErrNotLeader }
func (f notLeaderReplicator) Linearize() error    { return mutex.ErrNotLeader }
func (f notLeaderReplicator) Leader() string      { return f.leader }

// A node of a cluster that is not the leader answers 503 and names the
// leader; it still lists what it knows and streams events.
func TestNotLeader(t *testing.T) {
	node := mutex.NewNode(mutex.NodeConfig{Replicator: notLeaderReplicator{leader: "10.0.0.7:22119"}})
	defer node.Close()
	e := start(t, options{node: node})
	for _, c := range []struct{ path, body string }{
		{"/api/v1/locks/acquire", `{"key":"k","owner":"w"}`},
		{"/api/v1/locks/acquire", `{"key":"k","owner":"w","client_id":"c"}`},
		{"/api/v1/locks/heartbeat", `{"client_id":"c"}`},
	} {
		a := e.post(c.path, c.body)
		expect(t, a, http.StatusServiceUnavailable, "not_leader")
		if a.str("leader") != "10.0.0.7:22119" || !strings.Contains(a.str("message"), "10.0.0.7:22119") {
			t.Errorf("%s %s: %s", c.path, c.body, a.body)
		}
	}
	if ks := e.keys(); len(ks) != 0 {
		t.Fatalf("keys %v", ks)
	}
}

// A client's session is charged to the client's address, so the limits
// per source cap it: over them, 429.
func TestOverLimit(t *testing.T) {
	node := mutex.NewNode(mutex.NodeConfig{Limits: mutex.Limits{MaxHeld: 1}})
	defer node.Close()
	e := start(t, options{node: node})
	e.acquire(`{"key":"a","owner":"w","client_id":"c1"}`)
	a := e.post("/api/v1/locks/acquire", `{"key":"b","owner":"w","client_id":"c1"}`)
	expect(t, a, http.StatusTooManyRequests, "over_limit")
	// The same address through another client is the same source.
	expect(t, e.post("/api/v1/locks/acquire", `{"key":"b","owner":"w","client_id":"c2"}`), http.StatusTooManyRequests, "over_limit")
}

// The holder's note: kept with the lock, in the acquire's answer (a
// reentrant acquire answers the lock's first note) and the listing, for
// holders and waiters; over 1,024 bytes is refused.
func TestHolderNote(t *testing.T) {
	e := start(t, options{})
	stream := e.subscribe("?prefix=deploy/")
	a := e.acquire(`{"key":"deploy/prod","owner":"ci","client_id":"ci-7","note":"deploy 4.2 by ana"}`)
	if a.lock()["note"] != "deploy 4.2 by ana" {
		t.Fatalf("acquire answer %s", a.body)
	}
	if ev := stream.next(); ev.data["action"] != "acquired" || ev.data["note"] != "deploy 4.2 by ana" {
		t.Fatalf("event %+v", ev)
	}
	a = e.acquire(`{"key":"deploy/prod","owner":"ci","client_id":"ci-7","note":"again"}`)
	if a.lock()["note"] != "deploy 4.2 by ana" || num(a.lock()["reentrancy_count"]) != 2 {
		t.Fatalf("reentrant acquire answer %s", a.body)
	}
	if a := e.acquire(`{"key":"plain","owner":"ci"}`); a.lock()["note"] != nil {
		t.Fatalf("a lock without a note: %s", a.body)
	}
	waiter := make(chan answer, 1)
	go func() {
		a, _ := e.do(context.Background(), http.MethodPost, "/api/v1/locks/acquire",
			`{"key":"deploy/prod","owner":"next","wait_ms":60000,"note":"deploy 4.3"}`)
		waiter <- a
	}()
	eventually(t, "the waiter", func() bool { return e.node.Describe("deploy/prod").Queue == 1 })
	var k map[string]any
	for _, x := range e.keys() {
		if x["key"] == "deploy/prod" {
			k = x
		}
	}
	holders, _ := k["holders"].([]any)
	queue, _ := k["queue"].([]any)
	if len(holders) != 1 || holders[0].(map[string]any)["note"] != "deploy 4.2 by ana" ||
		len(queue) != 1 || queue[0].(map[string]any)["note"] != "deploy 4.3" {
		t.Fatalf("listing %v", k)
	}
	for range 2 {
		expect(t, e.post("/api/v1/locks/release", `{"key":"deploy/prod","owner":"ci","client_id":"ci-7"}`), 200, "")
	}
	if w := <-waiter; w.lock()["note"] != "deploy 4.3" {
		t.Fatalf("the waiter's grant %s", w.body)
	}
	if ev := stream.next(); ev.data["action"] != "released" || ev.data["note"] != nil {
		t.Fatalf("event %+v, want the release, without a note", ev)
	}
	if ev := stream.next(); ev.data["action"] != "acquired" || ev.data["note"] != "deploy 4.3" || ev.data["owner"] != "next" {
		t.Fatalf("event %+v, want the waiter's grant with its note", ev)
	}
	expect(t, e.post("/api/v1/locks/acquire", jsonBody(map[string]any{"key": "x", "owner": "o",
		"note": strings.Repeat("n", 1025)})), http.StatusBadRequest, "bad_request")
}

// A body that is not UTF-8, raw or escaped (half of a surrogate pair), is
// refused: decoded, its bad bytes would become U+FFFD, and two keys that
// differ only there one key.
func TestBodyNotUTF8(t *testing.T) {
	e := start(t, options{})
	for _, body := range []string{`{"key":"h/` + "\xff" + `","owner":"w"}`, `{"key":"h/\ud800","owner":"w"}`,
		`{"key":"h/\udc00\ud800","owner":"w"}`, `{"key":"h","owner":"w","note":"\ud83d"}`} {
		expect(t, e.post("/api/v1/locks/acquire", body), http.StatusBadRequest, "bad_request")
	}
	if n := len(e.keys()); n != 0 {
		t.Fatalf("%d keys held after the refusals", n)
	}
	// A whole pair, an escaped backslash before a u, and U+FFFD itself are text.
	for i, body := range []string{`{"key":"h/\ud83d\ude00","owner":"w"}`, `{"key":"h/\\ud800","owner":"w"}`,
		`{"key":"h/\ufffd","owner":"w"}`} {
		if a := e.acquire(body); a.lock()["key"] == nil {
			t.Fatalf("body %d: %s", i, a.body)
		}
	}
}
