package httpapi_test

import (
	"context"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/locking-center/locking-center/httpapi"
	"github.com/locking-center/locking-center/mutex"
)

// chromiumPath returns the path of a Chromium or Chrome binary, or "".
func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browser starts a headless Chromium with a fresh profile and returns a
// tab's context; the test's end stops it.
func browser(t *testing.T) context.Context {
	t.Helper()
	bin := chromiumPath()
	if bin == "" {
		t.Skip("no chromium binary on PATH (Debian: apt-get install chromium): the status page is not tested")
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(bin),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	ctx, cancelTab := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	return ctx
}

// The status page shows a key soon after its grant, with its exact
// fencing token, its waiters and its client's session, and drops it
// after its release. The page's poll is turned off (?poll), so only the
// event stream can bring the changes.
func TestStatusPage(t *testing.T) {
	tab := browser(t)
	e := start(t, options{})
	if err := chromedp.Do(tab, chromedp.Navigate(e.url+"/?poll=3600000")); err != nil {
		t.Fatal(err)
	}
	poll := func(what, expr string) string {
		t.Helper()
		v, err := chromedp.Run(tab, chromedp.Poll[string](expr, chromedp.WithPollingTimeout(30*time.Second)))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
	poll("the stream to open", `document.body.dataset.stream === "live" && document.body.dataset.transport === "eventsource" && document.body.dataset.updated ? "yes" : false`)

	a := e.acquire(`{"key":"orders/batch-7","owner":"billing-7f9c","client_id":"web-1","note":"<b>ledger</b> close, run 88"}`)
	granted := time.Now()
	token := poll("the held key", `(() => { const r = document.querySelector('#held tr[data-key="orders/batch-7"]'); return r ? r.dataset.token : false })()`)
	t.Logf("the page showed the key %v after its grant", time.Since(granted).Round(time.Millisecond))
	if token != strconv.FormatUint(a.token(), 10) {
		t.Fatalf("page shows token %s, the grant was %d", token, a.token())
	}
	row := poll("the holder row", `document.querySelector('#held tr[data-key="orders/batch-7"]').innerText`)
	for _, want := range []string{"billing-7f9c", "web-1", "http", "exclusive", "<b>ledger</b> close, run 88"} {
		if !strings.Contains(row, want) {
			t.Errorf("holder row %q lacks %q", row, want)
		}
	}
	poll("the client's session", `[...document.querySelectorAll('#sessions tbody tr')].some(r => r.innerText.includes("web-1")) ? "yes" : false`)

	expect(t, e.post("/api/v1/locks/release", `{"key":"orders/batch-7","owner":"billing-7f9c"}`), 200, "")
	poll("the key to go", `document.querySelector('#held tr[data-key="orders/batch-7"]') === null ? "gone" : false`)

	// Parking makes no event: the page's own poll shows waiters.
	e.acquire(`{"key":"orders/batch-7","owner":"billing-7f9c"}`)
	waiter := make(chan answer, 1)
	go func() {
		a, _ := e.do(context.Background(), http.MethodPost, "/api/v1/locks/acquire", `{"key":"orders/batch-7","owner":"reports","wait_ms":60000,"note":"monthly report"}`)
		waiter <- a
	}()
	eventually(t, "the waiter", func() bool { return e.node.Describe("orders/batch-7").Queue == 1 })
	if err := chromedp.Do(tab, chromedp.Navigate(e.url+"/?poll=100")); err != nil {
		t.Fatal(err)
	}
	poll("the waiting row", `(() => { const r = document.querySelector('#waiting tr[data-key="orders/batch-7"]'); return r && r.innerText.includes("reports") && r.innerText.includes("monthly report") ? "yes" : false })()`)
	expect(t, e.post("/api/v1/locks/release", `{"key":"orders/batch-7","owner":"billing-7f9c"}`), 200, "")
	expect(t, <-waiter, 200, "")
	poll("the new holder", `(() => { const r = document.querySelector('#held tr[data-key="orders/batch-7"]'); return r && r.innerText.includes("reports") ? "yes" : false })()`)
	expect(t, e.post("/api/v1/locks/release", `{"key":"orders/batch-7","owner":"reports"}`), 200, "")
	poll("the key to go", `document.querySelector('#held tr[data-key="orders/batch-7"]') === null && document.querySelector('#waiting tr[data-key="orders/batch-7"]') === null ? "gone" : false`)
	events := poll("the event list", `document.getElementById("events").innerText`)
	for _, want := range []string{"acquired orders/batch-7 by reports token", ": monthly report", "released orders/batch-7 by reports"} {
		if !strings.Contains(events, want) {
			t.Errorf("events %q lack %q", events, want)
		}
	}
}

// With tokens, the status page asks for one when the API answers 401,
// refuses a wrong one, keeps a good one for the tab, sends it on every
// request and reads the event stream with fetch (EventSource cannot send
// it): the page's poll is off, so only that stream can bring the changes.
func TestStatusPageWithToken(t *testing.T) {
	tab := browser(t)
	e := start(t, options{cfg: httpapi.Config{Tokens: testTokens(t)}})
	poll := func(what, expr string) string {
		t.Helper()
		v, err := chromedp.Run(tab, chromedp.Poll[string](expr, chromedp.WithPollingTimeout(30*time.Second)))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
	if err := chromedp.Do(tab, chromedp.Navigate(e.url+"/?poll=3600000")); err != nil {
		t.Fatal(err)
	}
	poll("the token field", `document.body.dataset.auth === "needed" && !document.getElementById("login").hidden ? "yes" : false`)
	signIn := func(token string) {
		t.Helper()
		if err := chromedp.Do(tab, chromedp.SendKeys("#token", token), chromedp.Click(`#login button[type="submit"]`)); err != nil {
			t.Fatal(err)
		}
	}
	signIn("wrong-token-0123456789")
	poll("the refusal", `document.getElementById("login-error").textContent.includes("refused") && !document.getElementById("login").hidden ? "yes" : false`)
	signIn(reportingToken)
	poll("the stream to open", `document.body.dataset.stream === "live" && document.body.dataset.transport === "fetch" && document.getElementById("login").hidden ? "yes" : false`)

	a := e.as(reportingToken, http.MethodPost, "/api/v1/locks/acquire", `{"key":"orders/batch-7","owner":"billing-7f9c","client_id":"web-1"}`)
	expect(t, a, 200, "")
	token := poll("the held key", `(() => { const r = document.querySelector('#held tr[data-key="orders/batch-7"]'); return r ? r.dataset.token : false })()`)
	if token != strconv.FormatUint(a.token(), 10) {
		t.Fatalf("page shows token %s, the grant was %d", token, a.token())
	}
	poll("the client's session", `[...document.querySelectorAll('#sessions tbody tr')].some(r => r.innerText.includes("web-1")) ? "yes" : false`)
	expect(t, e.as(reportingToken, http.MethodPost, "/api/v1/locks/release", `{"key":"orders/batch-7","owner":"billing-7f9c"}`), 200, "")
	poll("the key to go", `document.querySelector('#held tr[data-key="orders/batch-7"]') === null ? "gone" : false`)
	events := poll("the event list", `document.getElementById("events").innerText`)
	for _, want := range []string{"acquired orders/batch-7 by billing-7f9c", "released orders/batch-7 by billing-7f9c"} {
		if !strings.Contains(events, want) {
			t.Errorf("events %q lack %q", events, want)
		}
	}

	// The tab keeps the token across a reload; nothing was refused since
	// the wrong token.
	before := refusals(e, mutex.RefusedUnauthenticated)
	if err := chromedp.Do(tab, chromedp.Navigate(e.url+"/?poll=3600000")); err != nil {
		t.Fatal(err)
	}
	poll("the stream after a reload", `document.body.dataset.stream === "live" && document.body.dataset.transport === "fetch" && document.getElementById("login").hidden ? "yes" : false`)
	if got := refusals(e, mutex.RefusedUnauthenticated); got != before {
		t.Fatalf("refusals{unauthenticated} went from %d to %d after the reload", before, got)
	}
	// Forgetting it asks again.
	if err := chromedp.Do(tab, chromedp.Click("#logout")); err != nil {
		t.Fatal(err)
	}
	poll("the token field again", `document.body.dataset.auth === "needed" && !document.getElementById("login").hidden && sessionStorage.length === 0 ? "yes" : false`)
}

// The status page says which node of a cluster serves it and whether it
// leads, and shows nothing of the kind on a single node.
func TestStatusPageNode(t *testing.T) {
	tab := browser(t)
	for _, c := range []struct {
		name string
		node func() httpapi.NodeInfo
		want string
	}{
		{"single", nil, "hidden"},
		{"follower", func() httpapi.NodeInfo { return httpapi.NodeInfo{ID: "n2", LeaderID: "n1"} }, "node n2: follower, leader n1"},
		{"leader", func() httpapi.NodeInfo { return httpapi.NodeInfo{ID: "n1", Leading: true, LeaderID: "n1"} }, "node n1: leader"},
	} {
		e := start(t, options{cfg: httpapi.Config{Node: c.node}})
		if err := chromedp.Do(tab, chromedp.Navigate(e.url+"/?poll=3600000")); err != nil {
			t.Fatal(err)
		}
		got, err := chromedp.Run(tab, chromedp.Poll[string](`document.body.dataset.updated ? (document.getElementById("node").hidden ? "hidden" : document.getElementById("node").textContent) : false`,
			chromedp.WithPollingTimeout(30*time.Second)))
		if err != nil || got != c.want {
			t.Errorf("%s: the page shows %q (%v), want %q", c.name, got, err, c.want)
		}
	}
}
