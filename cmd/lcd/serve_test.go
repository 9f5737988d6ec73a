package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/manager"
)

// A new user's path: start lcd, lock from the client, list on the
// management port, scrape, stop with a signal's context.
func TestServeEndToEnd(t *testing.T) {
	p := runInProcess(t, "")
	addrs := p.log.waitStarted(t, p.exited)
	ctx := context.Background()
	c := lockingcenter.New(addrs.Mutex, lockingcenter.WithSource("e2e"))
	if err := c.Lock(ctx, "orders/batch-7"); err != nil {
		t.Fatal(err)
	}
	hs, err := (&manager.Client{Addr: addrs.Manager}).Holders(ctx)
	if err != nil || len(hs) != 1 || hs[0].Key != "orders/batch-7" || hs[0].Source != "e2e" {
		t.Fatalf("holders = %+v, %v", hs, err)
	}
	// The HTTP API shares the table.
	resp, err := http.Post("http://"+addrs.HTTP+"/api/v1/locks/acquire", "application/json",
		strings.NewReader(`{"key":"orders/batch-7","owner":"web"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("HTTP acquire of a held key: %s %s", resp.Status, body)
	}
	resp, err = http.Get("http://" + addrs.Metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`locking_center_locked_keys 1`,
		`locking_center_http_subscribers 0`,
		`locking_center_lock_held_seconds{key="orders/batch-7",remote_addr="127.0.0.1:`,
		`locking_center_lock_acquired_timestamp_seconds{key="orders/batch-7"`,
		`go_goroutines `,
		`process_cpu_seconds_total `,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if code := p.stop(); code != exitOK {
		t.Fatalf("exit code %d after shutdown:\n%s", code, p.log)
	}
	if _, err := net.Dial("tcp", addrs.Mutex); err == nil {
		t.Fatal("mutex port still open after shutdown")
	}
	if _, err := net.Dial("tcp", addrs.HTTP); err == nil {
		t.Fatal("HTTP port still open after shutdown")
	}
}

func TestPortInUseExits1(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var errOut strings.Builder
	code := run(context.Background(), nil, []string{"BIND_ADDRESS=127.0.0.1:0", "MANAGER_ADDRESS=" + ln.Addr().String()}, io.Discard, &errOut)
	if code != exitRuntime || !strings.Contains(errOut.String(), ln.Addr().String()) {
		t.Fatalf("code %d, stderr %q", code, errOut.String())
	}
}

// At shutdown the mutex port closes first, and a one-off scrape (a person
// with curl, a health check) does not hold the exit up.
func TestShutdownAfterOneOffScrape(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &inProcess{cancel: cancel, log: newLCDLog(), exited: make(chan struct{})}
	go func() {
		defer close(p.exited)
		env := []string{"BIND_ADDRESS=127.0.0.1:0", "LOG_FORMAT=json", "SHUTDOWN_TIMEOUT=5m"}
		p.code = run(ctx, nil, env, io.Discard, p.log)
	}()
	t.Cleanup(func() { p.stop() })
	addrs := p.log.waitStarted(t, p.exited)
	resp, err := http.Get("http://" + addrs.Metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	p.cancel()
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		t.Fatal("shutdown waited for a scraper that does not poll")
	}
	if p.code != exitOK {
		t.Fatalf("exit code %d", p.code)
	}
	if _, err := net.Dial("tcp", addrs.Mutex); err == nil {
		t.Fatal("mutex port open after exit")
	}
}

// A scraper that polls at a steady interval gets one scrape of the final
// state; one that stopped polling, or a single request, does not delay.
func TestAwaitFinalScrape(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newScrapeWatch()
		h := w.wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		scrape := func() { h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/metrics", nil)) }
		budget := func() context.Context {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			t.Cleanup(cancel)
			return ctx
		}
		immediate := func(what string) {
			t.Helper()
			start := time.Now()
			w.awaitFinal(budget())
			if d := time.Since(start); d != 0 {
				t.Fatalf("%s: waited %v", what, d)
			}
		}
		immediate("never scraped")
		scrape()
		immediate("one scrape")
		time.Sleep(10 * time.Second)
		scrape()
		immediate("two scrapes, as by hand")
		time.Sleep(3 * time.Second)
		scrape()
		immediate("three scrapes at unequal intervals")

		time.Sleep(10 * time.Second)
		scrape()
		time.Sleep(10 * time.Second)
		scrape()
		time.Sleep(10 * time.Second)
		scrape() // a scraper with a 10 s interval
		time.Sleep(3 * time.Second)
		done := make(chan struct{})
		go func() {
			w.awaitFinal(budget())
			close(done)
		}()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("returned before the final scrape")
		default:
		}
		scrape()
		<-done

		time.Sleep(25 * time.Second)
		immediate("scraper gone")
	})
}

func TestAdvertisedHTTP(t *testing.T) {
	for _, c := range []struct {
		client string
		bound  net.Addr
		want   string
	}{
		{"10.0.0.1:22119", &net.TCPAddr{IP: net.IPv4zero, Port: 22122}, "10.0.0.1:22122"},
		{"db.example:22119", &net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}, "db.example:8080"},
		{"10.0.0.1:22119", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9000}, "127.0.0.1:9000"},
	} {
		if got := advertisedHTTP(c.client, c.bound); got != c.want {
			t.Errorf("advertisedHTTP(%q, %v) = %q, want %q", c.client, c.bound, got, c.want)
		}
	}
}
