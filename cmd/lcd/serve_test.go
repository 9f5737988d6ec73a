package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
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
	resp, err := http.Get("http://" + addrs.Metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`locking_center_locked_keys 1`,
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

// At shutdown the mutex port closes first; a scraper that was scraping
// gets one more scrape of the final state before the process exits.
func TestShutdownServesOneMoreScrape(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &inProcess{cancel: cancel, log: newLCDLog(), exited: make(chan struct{})}
	go func() {
		defer close(p.exited)
		env := []string{"BIND_ADDRESS=127.0.0.1:0", "LOG_FORMAT=json", "SHUTDOWN_TIMEOUT=5m"}
		p.code = run(ctx, nil, env, io.Discard, p.log)
	}()
	t.Cleanup(func() { p.stop() })
	addrs := p.log.waitStarted(t, p.exited)
	url := "http://" + addrs.Metrics + "/metrics"
	scrape := func() error {
		resp, err := http.Get(url)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return err
	}
	if err := scrape(); err != nil {
		t.Fatal(err)
	}
	p.cancel()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", addrs.Mutex)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("mutex port still open after shutdown began")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-p.exited:
		t.Fatal("exited before the final scrape")
	default:
	}
	if err := scrape(); err != nil {
		t.Fatalf("final scrape: %v", err)
	}
	<-p.exited
	if p.code != exitOK {
		t.Fatalf("exit code %d", p.code)
	}
}
