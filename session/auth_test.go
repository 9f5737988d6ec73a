package session

import (
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/auth"
	"github.com/locking-center/locking-center/internal/ratelimit"
	"github.com/locking-center/locking-center/mutex"
)

const (
	deployerToken = "deployer-token-0123456789"
	opsToken      = "ops-token-0123456789abcdef"
)

func tokens(t *testing.T) *auth.Tokens {
	t.Helper()
	toks, err := auth.Parse(strings.NewReader("deployer client " + auth.HashToken(deployerToken) + " deploy/ jobs/\n" +
		"ops admin " + opsToken + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

func credential(token string) func(*frameBuilder) {
	return func(fb *frameBuilder) { fb.str(TagCredential, token) }
}

// expectGoodbye reads a GOODBYE with code, then the end of the connection.
func (c *client) expectGoodbye(code Code) {
	c.t.Helper()
	f := c.expect(TypeGoodbye)
	if got, _ := f.Uint(TagCode); Code(got) != code {
		msg, _ := f.Get(TagMessage)
		c.t.Fatalf("GOODBYE %v (%q), want %v", Code(got), msg, code)
	}
	if !c.closed() {
		c.t.Fatal("the connection stays open after GOODBYE")
	}
}

func refusals(e *env, r mutex.Refusal) uint64 { return e.node.Snapshot().Counters.Refusals[r] }

func TestHelloNeedsAToken(t *testing.T) {
	e := start(t, envOptions{cfg: Config{Tokens: tokens(t)}})
	for _, fields := range [][]func(*frameBuilder){
		nil,
		{credential("")},
		{credential("not-a-token-of-anyone")},
		{credential(auth.HashToken(deployerToken))},
	} {
		c := e.dial(t)
		c.send(TypeHello, fields...)
		f := c.expect(TypeGoodbye)
		code, _ := f.Uint(TagCode)
		msg, _ := f.Get(TagMessage)
		if Code(code) != CodeUnauthenticated || string(msg) != "authentication failed" {
			t.Errorf("GOODBYE %v %q, want unauthenticated and the same words for every failure", Code(code), msg)
		}
	}
	if n := refusals(e, mutex.RefusedUnauthenticated); n != 4 {
		t.Errorf("%d refusals counted, want 4", n)
	}
	c := e.hello(t, "deploy-job", credential(deployerToken))
	id := c.acquire("deploy/prod")
	c.granted(id)
	if hs := e.node.Snapshot().Holders; len(hs) != 1 || hs[0].Source != "deploy-job" {
		t.Errorf("holders %+v: the session keeps the name it gave", hs)
	}
}

func TestPrefixesBoundAClient(t *testing.T) {
	e := start(t, envOptions{cfg: Config{Tokens: tokens(t)}})
	c := e.hello(t, "d", credential(deployerToken))
	c.granted(c.acquire("jobs/nightly"))
	c.expectRefused(c.acquire("billing/ledger"), CodeForbidden)
	c.expectRefused(c.send(TypeDescribe, func(fb *frameBuilder) { fb.str(TagKey, "billing/ledger") }), CodeForbidden)
	c.expectRefused(c.send(TypeWatch), CodeForbidden)
	c.expectRefused(c.send(TypeWatch, func(fb *frameBuilder) { fb.str(TagKey, "de") }), CodeForbidden)
	if id := c.send(TypeWatch, func(fb *frameBuilder) { fb.str(TagKey, "deploy/") }); c.expect(TypeOK).ID != id {
		t.Fatal("WATCH deploy/ not answered OK")
	}
	if id := c.send(TypeDescribe, func(fb *frameBuilder) { fb.str(TagKey, "jobs/nightly") }); c.expect(TypeInfo).ID != id {
		t.Fatal("DESCRIBE of its own key not answered")
	}
	if n := refusals(e, mutex.RefusedForbidden); n != 4 {
		t.Errorf("%d forbidden counted, want 4", n)
	}
	admin := e.hello(t, "ops", credential(opsToken))
	admin.granted(admin.acquire("billing/ledger"))
}

func TestResumeByItsPrincipalOnly(t *testing.T) {
	e := start(t, envOptions{cfg: Config{Tokens: tokens(t)}})
	c := e.hello(t, "d", credential(deployerToken))
	tok := c.granted(c.acquire("deploy/prod"))
	c.c.Close()
	resume := func(fields ...func(*frameBuilder)) *client {
		r := e.dial(t)
		r.send(TypeResume, append([]func(*frameBuilder){
			func(fb *frameBuilder) { fb.u64(TagSession, c.sid) },
			func(fb *frameBuilder) { fb.bytes(TagSecret, c.sec) }}, fields...)...)
		return r
	}
	resume().expectGoodbye(CodeUnauthenticated)
	resume(credential(opsToken)).expectGoodbye(CodeUnauthenticated) // an admin's token is another principal's
	r := resume(credential(deployerToken))
	w := r.expect(TypeWelcome)
	if got, _ := w.Uint(TagSession); got != c.sid {
		t.Fatalf("resumed session %d, want %d", got, c.sid)
	}
	r.id = 100
	r.release("deploy/prod", tok)
}

func TestCredentialIgnoredWithoutAuthentication(t *testing.T) {
	e := start(t, envOptions{})
	c := e.hello(t, "d", credential("whatever-the-client-was-given"))
	c.granted(c.acquire("billing/ledger"))
}

// A principal's sessions share its caps; without authentication the
// client's IP address is the account.
func TestCapsCountThePrincipal(t *testing.T) {
	e := start(t, envOptions{cfg: Config{Tokens: tokens(t)}, limits: mutex.Limits{MaxHeld: 2}})
	a := e.hello(t, "a", credential(deployerToken))
	b := e.hello(t, "b", credential(deployerToken))
	a.granted(a.acquire("deploy/1"))
	b.granted(b.acquire("deploy/2"))
	b.expectRefused(b.acquire("deploy/3"), CodeOverLimit)
	ops := e.hello(t, "ops", credential(opsToken))
	ops.granted(ops.acquire("deploy/3"))
	if n := refusals(e, mutex.RefusedHeld); n != 1 {
		t.Errorf("%d over the held cap counted, want 1", n)
	}

	open := start(t, envOptions{limits: mutex.Limits{MaxHeld: 1}})
	x := open.hello(t, "x")
	y := open.hello(t, "y") // another name, the same address
	x.granted(x.acquire("k1"))
	y.expectRefused(y.acquire("k2"), CodeOverLimit)
}

func TestRatePerAccount(t *testing.T) {
	clk := &clock{now: time.Unix(1_800_000_000, 0)}
	rates := ratelimit.New(1, 3, clk.Now)
	e := start(t, envOptions{cfg: Config{Tokens: tokens(t), Rates: rates}})
	c := e.hello(t, "d", credential(deployerToken)) // one request of three
	c.granted(c.acquire("deploy/1"))
	c.granted(c.acquire("deploy/2"))
	c.expectRefused(c.acquire("deploy/3"), CodeRateLimited)
	id := c.send(TypePing) // never limited: it keeps the session alive
	if c.expect(TypeOK).ID != id {
		t.Fatal("PING not answered")
	}
	other := e.dial(t)
	other.send(TypeHello, credential(deployerToken))
	other.expectGoodbye(CodeRateLimited)
	clk.add(time.Second)
	c.granted(c.acquire("deploy/3"))
	if n := refusals(e, mutex.RefusedRate); n != 2 {
		t.Errorf("%d rate refusals counted, want 2", n)
	}
}
