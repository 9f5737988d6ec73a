package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/locking-center/locking-center/auth"
	"github.com/locking-center/locking-center/httpapi"
	"github.com/locking-center/locking-center/internal/ratelimit"
	"github.com/locking-center/locking-center/mutex"
)

// The principals of these tests: deployer may use deploy/ and jobs/,
// reporting every key, ops is an admin.
const (
	deployerToken  = "deployer-token-0123456789"
	reportingToken = "reporting-token-0123456789"
	opsToken       = "ops-token-0123456789abcdef"
)

// countingTokens is the tokens of the three principals, counting how
// often a token was checked.
type countingTokens struct {
	toks  *auth.Tokens
	calls atomic.Int64
}

func (c *countingTokens) Authenticate(token []byte) (*auth.Principal, error) {
	c.calls.Add(1)
	return c.toks.Authenticate(token)
}

func testTokens(t testing.TB) *countingTokens {
	t.Helper()
	toks, err := auth.Parse(strings.NewReader("deployer client " + auth.HashToken(deployerToken) + " deploy/ jobs/\n" +
		"reporting client " + reportingToken + "\n" +
		"ops admin " + opsToken + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return &countingTokens{toks: toks}
}

// bearer returns the header arguments of doWith for token.
func bearer(token string) []string { return []string{"Authorization", "Bearer " + token} }

// as sends a request with token as a bearer token.
func (e *env) as(token, method, path, body string) answer {
	e.t.Helper()
	a, err := e.doWith(context.Background(), method, path, body, bearer(token)...)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return a
}

// status sends a request and returns its status code, without reading
// the body (an event stream's does not end).
func (e *env) status(method, path string, header ...string) int {
	e.t.Helper()
	req, err := http.NewRequest(method, e.url+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func refusals(e *env, r mutex.Refusal) uint64 { return e.node.Snapshot().Counters.Refusals[r] }

// apiRequests are a request of every endpoint under /api/, and of a path
// there that is no endpoint.
var apiRequests = []struct{ method, path, body string }{
	{http.MethodPost, "/api/v1/locks/acquire", `{"key":"deploy/a","owner":"w"}`},
	{http.MethodPost, "/api/v1/locks/release", `{"key":"deploy/a","owner":"w"}`},
	{http.MethodPost, "/api/v1/locks/renew", `{"key":"deploy/a","owner":"w"}`},
	{http.MethodPost, "/api/v1/locks/heartbeat", `{"client_id":"c"}`},
	{http.MethodGet, "/api/v1/locks/observability", ""},
	{http.MethodGet, "/api/v1/locks/sessions", ""},
	{http.MethodGet, "/api/v1/locks/subscribe", ""},
	{http.MethodGet, "/api/v1/locks/metrics", ""},
	{http.MethodPost, "/api/locks/acquire", `{"key":"deploy/a","owner":"w"}`},
	{http.MethodGet, "/api/v1/locks/nothing-here", ""},
}

// logBuffer collects a server's logs.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// With tokens, every path under /api/ needs one: without, or with one of
// nobody, the answer is the same 401, counted and logged with the
// client's address but never the token.
func TestAuthenticationRequired(t *testing.T) {
	logs := &logBuffer{}
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("metrics\n")) })
	e := start(t, options{cfg: httpapi.Config{Tokens: testTokens(t), Metrics: metrics,
		Logger: slog.New(slog.NewTextHandler(logs, nil))}})
	wrong := "wrong-token-0123456789"
	var want []byte
	attempts := uint64(0)
	for _, q := range apiRequests {
		for _, header := range [][]string{nil, bearer(wrong), {"X-API-Key", wrong}, {"Authorization", "Basic " + opsToken},
			{"Authorization", "Bearer"}, bearer(auth.HashToken(deployerToken))} {
			a, err := e.doWith(context.Background(), q.method, q.path, q.body, header...)
			if err != nil {
				t.Fatal(err)
			}
			attempts++
			expect(t, a, http.StatusUnauthorized, "unauthenticated")
			if got := a.header.Get("WWW-Authenticate"); got != `Bearer realm="locking-center"` {
				t.Errorf("%s %s: WWW-Authenticate %q", q.method, q.path, got)
			}
			if want == nil {
				want = a.body
			} else if !bytes.Equal(a.body, want) {
				t.Errorf("%s %s with %v: %s, another answer was %s", q.method, q.path, header, a.body, want)
			}
		}
	}
	if got := refusals(e, mutex.RefusedUnauthenticated); got != attempts {
		t.Fatalf("refusals{unauthenticated} %d, want %d", got, attempts)
	}
	out := logs.String()
	if !strings.Contains(out, "authentication failed") || !strings.Contains(out, "127.0.0.1:") {
		t.Errorf("the log does not name the failure and its client's address:\n%s", out)
	}
	for _, tok := range []string{wrong, opsToken, auth.HashToken(deployerToken)} {
		if strings.Contains(out, tok) {
			t.Fatalf("the log holds a token:\n%s", out)
		}
	}
	if e.node.Describe("deploy/a").Holders != nil {
		t.Fatal("an unauthenticated acquire took the key")
	}

	// Either header takes the token.
	for _, header := range [][]string{bearer(deployerToken), {"authorization", "bearer " + deployerToken}, {"X-API-Key", deployerToken}} {
		a, err := e.doWith(context.Background(), http.MethodGet, "/api/v1/locks/observability", "", header...)
		if err != nil {
			t.Fatal(err)
		}
		expect(t, a, http.StatusOK, "")
	}
	a := e.as(reportingToken, http.MethodGet, "/api/v1/locks/metrics", "")
	if a.code != http.StatusOK || string(a.body) != "metrics\n" {
		t.Fatalf("metrics for a client principal: %d %s", a.code, a.body)
	}
	if got := refusals(e, mutex.RefusedUnauthenticated); got != attempts {
		t.Fatalf("refusals{unauthenticated} %d after good requests, want %d", got, attempts)
	}
}

// The probes and the status page need no token.
func TestOpenPathsWithAuthentication(t *testing.T) {
	e := start(t, options{cfg: httpapi.Config{Tokens: testTokens(t)}})
	for _, path := range []string{"/healthz", "/readyz", "/", "/ui/app.js", "/ui/style.css"} {
		a, err := e.do(context.Background(), http.MethodGet, path, "")
		if err != nil {
			t.Fatal(err)
		}
		if a.code != http.StatusOK {
			t.Errorf("GET %s without a token: %d %s", path, a.code, a.body)
		}
	}
	if got := refusals(e, mutex.RefusedUnauthenticated); got != 0 {
		t.Fatalf("refusals{unauthenticated} %d", got)
	}
}

// A token in the query string is refused on every path, authentication
// on or off, and never read.
func TestTokenInQueryRefused(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprintf("auth=%v", on), func(t *testing.T) {
			toks := testTokens(t)
			cfg := httpapi.Config{}
			if on {
				cfg.Tokens = toks
			}
			e := start(t, options{cfg: cfg})
			for _, path := range []string{
				"/api/v1/locks/observability?token=" + opsToken,
				"/api/v1/locks/subscribe?prefix=deploy/&api_key=" + opsToken,
				"/api/locks/sessions?apikey=" + opsToken,
				"/api/v1/locks/acquire?access_token=" + opsToken,
				"/api/v1/locks/observability?Access_Token=" + opsToken,
				"/healthz?token=" + opsToken,
				"/readyz?token=",
				"/?token=" + opsToken,
				"/ui/app.js?api_key=" + opsToken,
				"/no-such-page?token=" + opsToken,
			} {
				method := http.MethodGet
				if strings.Contains(path, "acquire") {
					method = http.MethodPost
				}
				// A good token in the header does not make it right.
				a := e.as(opsToken, method, path, `{"key":"k","owner":"w"}`)
				expect(t, a, http.StatusBadRequest, "bad_request")
				if strings.Contains(string(a.body), opsToken) {
					t.Fatalf("the answer repeats the token: %s", a.body)
				}
			}
			if n := toks.calls.Load(); n != 0 {
				t.Fatalf("%d tokens were checked", n)
			}
			if e.node.Describe("k").Holders != nil {
				t.Fatal("the acquire was served")
			}
		})
	}
}

// A client principal may use only the keys of its prefixes: others are
// answered 403 and counted; watching needs a prefix within its own.
func TestForbiddenKeys(t *testing.T) {
	e := start(t, options{cfg: httpapi.Config{Tokens: testTokens(t)}})
	e.as(opsToken, http.MethodPost, "/api/v1/locks/acquire", `{"key":"billing/x","owner":"w"}`)
	refused := uint64(0)
	for _, q := range []struct{ path, body string }{
		{"/api/v1/locks/acquire", `{"key":"billing/x","owner":"w"}`},
		{"/api/v1/locks/acquire", `{"key":"billing/y","owner":"w","client_id":"c","wait_ms":100}`},
		{"/api/v1/locks/release", `{"key":"billing/x","owner":"w"}`},
		{"/api/v1/locks/renew", `{"key":"billing/x","owner":"w"}`},
		{"/api/locks/acquire", `{"key":"deploy","owner":"w"}`},
	} {
		a := e.as(deployerToken, http.MethodPost, q.path, q.body)
		expect(t, a, http.StatusForbidden, "forbidden")
		refused++
	}
	for _, query := range []string{"", "?prefix=", "?prefix=billing/", "?prefix=dep"} {
		if code := e.status(http.MethodGet, "/api/v1/locks/subscribe"+query, bearer(deployerToken)...); code != http.StatusForbidden {
			t.Fatalf("subscribe%s: %d, want 403", query, code)
		}
		refused++
	}
	if got := refusals(e, mutex.RefusedForbidden); got != refused {
		t.Fatalf("refusals{forbidden} %d, want %d", got, refused)
	}
	if got := e.held("billing/x"); !slices.Equal(got, []string{"w"}) {
		t.Fatalf("billing/x held by %v", got)
	}
	if e.node.Describe("billing/y").Queue != 0 {
		t.Fatal("the forbidden acquire waits")
	}

	// Within its prefixes, it may.
	a := e.as(deployerToken, http.MethodPost, "/api/v1/locks/acquire", `{"key":"deploy/prod","owner":"w"}`)
	expect(t, a, http.StatusOK, "")
	expect(t, e.as(deployerToken, http.MethodPost, "/api/v1/locks/renew", `{"key":"deploy/prod","owner":"w","duration_ms":1000}`), http.StatusOK, "")
	expect(t, e.as(deployerToken, http.MethodPost, "/api/v1/locks/release", `{"key":"deploy/prod","owner":"w"}`), http.StatusOK, "")
	e.subscribe("?prefix=deploy/", bearer(deployerToken)...)
	e.subscribe("?prefix=jobs/nightly", bearer(deployerToken)...)
	// A client without prefixes, and an admin, watch everything.
	e.subscribe("", bearer(reportingToken)...)
	e.subscribe("", bearer(opsToken)...)
	if got := refusals(e, mutex.RefusedForbidden); got != refused {
		t.Fatalf("refusals{forbidden} %d after allowed requests, want %d", got, refused)
	}
}

// keysOf returns the keys of an observability listing.
func keysOf(t *testing.T, a answer) []string {
	t.Helper()
	expect(t, a, http.StatusOK, "")
	var ks []map[string]any
	decodeJSON(t, a.body, &ks)
	var out []string
	for _, k := range ks {
		out = append(out, k["key"].(string))
	}
	return out
}

// sessionNames returns "client_id" (or "(anonymous)") of each session of
// a sessions listing.
func sessionNames(t *testing.T, a answer) []string {
	t.Helper()
	expect(t, a, http.StatusOK, "")
	var ss []map[string]any
	decodeJSON(t, a.body, &ss)
	var out []string
	for _, s := range ss {
		name, _ := s["client_id"].(string)
		if s["anonymous"] == true {
			name = "(anonymous)"
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// The listings show a client principal the keys of its prefixes and its
// own sessions; an admin sees everything.
func TestListingsByPrincipal(t *testing.T) {
	e := start(t, options{cfg: httpapi.Config{Tokens: testTokens(t)}})
	expect(t, e.as(deployerToken, http.MethodPost, "/api/v1/locks/acquire", `{"key":"deploy/a","owner":"w","client_id":"d1"}`), 200, "")
	expect(t, e.as(reportingToken, http.MethodPost, "/api/v1/locks/acquire", `{"key":"reports/b","owner":"w","client_id":"r1"}`), 200, "")
	expect(t, e.as(reportingToken, http.MethodPost, "/api/v1/locks/acquire", `{"key":"jobs/c","owner":"w"}`), 200, "")
	expect(t, e.as(opsToken, http.MethodPost, "/api/v1/locks/acquire", `{"key":"ops/d","owner":"w","client_id":"o1"}`), 200, "")

	observe := func(token, query string) []string {
		return keysOf(t, e.as(token, http.MethodGet, "/api/v1/locks/observability"+query, ""))
	}
	for _, c := range []struct {
		token, query string
		want         []string
	}{
		{deployerToken, "", []string{"deploy/a", "jobs/c"}},
		{deployerToken, "?prefix=reports/", nil},
		{deployerToken, "?prefix=j", []string{"jobs/c"}},
		{reportingToken, "", []string{"deploy/a", "jobs/c", "ops/d", "reports/b"}},
		{opsToken, "", []string{"deploy/a", "jobs/c", "ops/d", "reports/b"}},
	} {
		if got := observe(c.token, c.query); !slices.Equal(got, c.want) {
			t.Errorf("observability%s for %s: %v, want %v", c.query, c.token, got, c.want)
		}
	}
	sessions := func(token string) []string {
		return sessionNames(t, e.as(token, http.MethodGet, "/api/v1/locks/sessions", ""))
	}
	for _, c := range []struct {
		token string
		want  []string
	}{
		{deployerToken, []string{"d1"}},
		{reportingToken, []string{"(anonymous)", "r1"}},
		{opsToken, []string{"(anonymous)", "d1", "o1", "r1"}},
	} {
		if got := sessions(c.token); !slices.Equal(got, c.want) {
			t.Errorf("sessions for %s: %v, want %v", c.token, got, c.want)
		}
	}
}

// sessionOf returns the session id of an acquire's answer.
func sessionOf(a answer) uint64 { return u64(a.lock()["session"]) }

// A client_id is scoped by principal: the same id of two principals is two
// sessions, each charged to its principal, and neither can release the
// other's lock, with the client_id or without it. So is the anonymous
// session.
func TestClientIDScopedByPrincipal(t *testing.T) {
	e := start(t, options{cfg: httpapi.Config{Tokens: testTokens(t)}})
	d := e.as(deployerToken, http.MethodPost, "/api/v1/locks/acquire", `{"key":"deploy/a","owner":"w","client_id":"c1"}`)
	expect(t, d, 200, "")
	r := e.as(reportingToken, http.MethodPost, "/api/v1/locks/acquire", `{"key":"reports/a","owner":"w","client_id":"c1"}`)
	expect(t, r, 200, "")
	if sessionOf(d) == sessionOf(r) {
		t.Fatalf("two principals' client_id c1 share session %d", sessionOf(d))
	}
	da := e.as(deployerToken, http.MethodPost, "/api/v1/locks/acquire", `{"key":"deploy/b","owner":"w"}`)
	ra := e.as(reportingToken, http.MethodPost, "/api/v1/locks/acquire", `{"key":"reports/b","owner":"w"}`)
	expect(t, da, 200, "")
	expect(t, ra, 200, "")
	if sessionOf(da) == sessionOf(ra) {
		t.Fatalf("two principals share the anonymous session %d", sessionOf(da))
	}
	hb := e.as(reportingToken, http.MethodPost, "/api/v1/locks/heartbeat", `{"client_id":"c1"}`)
	if u64(hb.m["session"]) != sessionOf(r) {
		t.Fatalf("reporting's heartbeat of c1 names session %v, want %d", hb.m["session"], sessionOf(r))
	}
	accounts := map[uint64]string{}
	for _, si := range e.node.Snapshot().Sessions {
		accounts[si.ID] = si.Account
	}
	for id, want := range map[uint64]string{sessionOf(d): "deployer", sessionOf(da): "deployer", sessionOf(r): "reporting", sessionOf(ra): "reporting"} {
		if accounts[id] != want {
			t.Errorf("session %d charged to %q, want %q", id, accounts[id], want)
		}
	}

	// reporting may use deploy/ keys, but not release deployer's locks.
	for _, body := range []string{
		`{"key":"deploy/a","owner":"w","client_id":"c1"}`,
		`{"key":"deploy/a","owner":"w"}`,
		`{"key":"deploy/b","owner":"w"}`,
	} {
		expect(t, e.as(reportingToken, http.MethodPost, "/api/v1/locks/release", body), http.StatusConflict, "not_held")
		expect(t, e.as(reportingToken, http.MethodPost, "/api/v1/locks/renew", body), http.StatusConflict, "not_held")
	}
	// Not even an admin, through the HTTP API (it resets on the
	// management port).
	expect(t, e.as(opsToken, http.MethodPost, "/api/v1/locks/release", `{"key":"deploy/a","owner":"w"}`), http.StatusConflict, "not_held")
	if got := e.held("deploy/a"); !slices.Equal(got, []string{"w"}) {
		t.Fatalf("deploy/a held by %v", got)
	}
	// Its own principal releases it, without naming the client_id too.
	expect(t, e.as(deployerToken, http.MethodPost, "/api/v1/locks/release", `{"key":"deploy/a","owner":"w"}`), 200, "")
	expect(t, e.as(deployerToken, http.MethodPost, "/api/v1/locks/release", `{"key":"deploy/b","owner":"w"}`), 200, "")
	expect(t, e.as(reportingToken, http.MethodPost, "/api/v1/locks/release", `{"key":"reports/a","owner":"w","client_id":"c1"}`), 200, "")
}

// With authentication, the limits per source count a principal's
// sessions, its anonymous one included, whatever address they come from.
func TestOverLimitByPrincipal(t *testing.T) {
	node := mutex.NewNode(mutex.NodeConfig{Limits: mutex.Limits{MaxHeld: 1}})
	defer node.Close()
	e := start(t, options{node: node, cfg: httpapi.Config{Tokens: testTokens(t)}})
	expect(t, e.as(deployerToken, http.MethodPost, "/api/v1/locks/acquire", `{"key":"deploy/a","owner":"w"}`), 200, "")
	a := e.as(deployerToken, http.MethodPost, "/api/v1/locks/acquire", `{"key":"deploy/b","owner":"w","client_id":"c"}`)
	expect(t, a, http.StatusTooManyRequests, "over_limit")
	if !strings.Contains(a.str("message"), "deployer") {
		t.Errorf("over_limit message %q does not name the principal", a.str("message"))
	}
	// Another principal from the same address has its own account.
	expect(t, e.as(reportingToken, http.MethodPost, "/api/v1/locks/acquire", `{"key":"deploy/b","owner":"w"}`), 200, "")
	if got := e.node.Snapshot().Counters.Refusals[mutex.RefusedHeld]; got != 1 {
		t.Fatalf("refusals{held} %d", got)
	}
}

// After a restart on a write-ahead log, each principal's sessions come
// back under it: the same client_id of two principals stays two sessions.
func TestPrincipalSessionsAfterRestart(t *testing.T) {
	toks := testTokens(t)
	e1, restart := journaled(t, httpapi.Config{Tokens: toks})
	d := e1.as(deployerToken, http.MethodPost, "/api/v1/locks/acquire", `{"key":"deploy/a","owner":"w","client_id":"c1"}`)
	r := e1.as(reportingToken, http.MethodPost, "/api/v1/locks/acquire", `{"key":"reports/a","owner":"w","client_id":"c1"}`)
	da := e1.as(deployerToken, http.MethodPost, "/api/v1/locks/acquire", `{"key":"deploy/b","owner":"w"}`)
	for _, a := range []answer{d, r, da} {
		expect(t, a, 200, "")
	}
	e2 := restart(httpapi.Config{Tokens: toks})
	for _, c := range []struct {
		token string
		want  uint64
	}{{deployerToken, sessionOf(d)}, {reportingToken, sessionOf(r)}} {
		hb := e2.as(c.token, http.MethodPost, "/api/v1/locks/heartbeat", `{"client_id":"c1"}`)
		expect(t, hb, 200, "")
		if u64(hb.m["session"]) != c.want {
			t.Fatalf("heartbeat after restart: session %v, want %d", hb.m["session"], c.want)
		}
	}
	expect(t, e2.as(reportingToken, http.MethodPost, "/api/v1/locks/release", `{"key":"deploy/a","owner":"w","client_id":"c1"}`), http.StatusConflict, "not_held")
	expect(t, e2.as(deployerToken, http.MethodPost, "/api/v1/locks/release", `{"key":"deploy/a","owner":"w","client_id":"c1"}`), 200, "")
	expect(t, e2.as(reportingToken, http.MethodPost, "/api/v1/locks/release", `{"key":"deploy/b","owner":"w"}`), http.StatusConflict, "not_held")
	b := e2.as(deployerToken, http.MethodPost, "/api/v1/locks/acquire", `{"key":"deploy/c","owner":"w"}`)
	if sessionOf(b) != sessionOf(da) {
		t.Fatalf("deployer's anonymous session after restart is %d, want %d", sessionOf(b), sessionOf(da))
	}
	expect(t, e2.as(deployerToken, http.MethodPost, "/api/v1/locks/release", `{"key":"deploy/b","owner":"w"}`), 200, "")
}

// Each account has its rate: over it, 429 with Retry-After, counted;
// heartbeats are never refused; another account has its own bucket.
func TestRateLimit(t *testing.T) {
	for _, c := range []struct {
		name       string
		auth       bool
		perSecond  float64
		retryAfter string
	}{
		{"by principal", true, 1, "1"},
		{"by address", false, 1, "1"},
		{"slow", true, 0.4, "3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := newClock()
			cfg := httpapi.Config{Rates: ratelimit.New(c.perSecond, 2, clk.Now)}
			if c.auth {
				cfg.Tokens = testTokens(t)
			}
			e := start(t, options{cfg: cfg})
			get := func(token string) answer {
				if !c.auth {
					a, err := e.do(context.Background(), http.MethodGet, "/api/v1/locks/observability", "")
					if err != nil {
						t.Fatal(err)
					}
					return a
				}
				return e.as(token, http.MethodGet, "/api/v1/locks/observability", "")
			}
			expect(t, get(deployerToken), 200, "")
			expect(t, get(deployerToken), 200, "")
			a := get(deployerToken)
			expect(t, a, http.StatusTooManyRequests, "rate_limited")
			if got := a.header.Get("Retry-After"); got != c.retryAfter {
				t.Fatalf("Retry-After %q, want %q", got, c.retryAfter)
			}
			if got := refusals(e, mutex.RefusedRate); got != 1 {
				t.Fatalf("refusals{rate} %d", got)
			}
			// Heartbeats go through.
			for range 5 {
				hb, err := e.doWith(context.Background(), http.MethodPost, "/api/v1/locks/heartbeat", `{"client_id":"c"}`, bearer(deployerToken)...)
				if err != nil {
					t.Fatal(err)
				}
				expect(t, hb, 200, "")
			}
			if c.auth {
				expect(t, get(opsToken), 200, "") // another account
			}
			clk.add(time.Duration(float64(time.Second) / c.perSecond))
			expect(t, get(deployerToken), 200, "")
			expect(t, get(deployerToken), http.StatusTooManyRequests, "rate_limited")
			if got := refusals(e, mutex.RefusedRate); got != 2 {
				t.Fatalf("refusals{rate} %d", got)
			}
			// The probes are never limited.
			for range 3 {
				h, err := e.do(context.Background(), http.MethodGet, "/healthz", "")
				if err != nil {
					t.Fatal(err)
				}
				expect(t, h, 200, "")
			}
		})
	}
}

// decodeJSON decodes b into v, numbers as json.Number.
func decodeJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
}

// A principal's sessions are not taken over by a server without
// authentication, where the same client_id of two principals would be one
// session: they are left to expire.
func TestPrincipalSessionsNotAdoptedWithoutAuthentication(t *testing.T) {
	e1, restart := journaled(t, httpapi.Config{Tokens: testTokens(t)})
	d := e1.as(deployerToken, http.MethodPost, "/api/v1/locks/acquire", `{"key":"deploy/a","owner":"w","client_id":"c1"}`)
	expect(t, d, 200, "")
	e2 := restart(httpapi.Config{})
	hb := e2.post("/api/v1/locks/heartbeat", `{"client_id":"c1"}`)
	expect(t, hb, 200, "")
	if u64(hb.m["session"]) == sessionOf(d) {
		t.Fatal("a server without authentication took deployer's session")
	}
	expect(t, e2.post("/api/v1/locks/release", `{"key":"deploy/a","owner":"w"}`), http.StatusConflict, "not_held")
}
