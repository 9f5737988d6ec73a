package main

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
)

// Focuses (go tool pprof -focus) of the event stream's CPU in lcd's
// profiles: the hub (the node's observer and the fan-out goroutine), and
// the hub with the streams' own handlers (collecting and writing).
const (
	focusHub     = `httpapi\.\(\*hub\)|httpapi\.\(\*Server\)\.observe`
	focusStreams = focusHub + `|httpapi\.\(\*Server\)\.subscribe`
)

// Kinds of lcd in sse-unread.
const (
	unreadNone = "none" // the HTTP API on (the defaults), no subscriber
	unreadOne  = "one"  // the HTTP API on, one subscriber of every event
	unreadOff  = "off"  // HTTP_ADDRESS=""
)

// unreadServer is one lcd of sse-unread.
type unreadServer struct {
	label, kind string
	s           *server
	sub         *countingSubscriber // unreadOne only
	perSec, cpu []float64           // of each measured round
	bench       []float64           // this process's CPU per cycle, µs, of each measured round
	cycles      int64               // of every round, profiled ones included
}

// sseUnread measures what the HTTP API's event stream costs the session
// protocol's uncontended cycles when nobody reads it, and when one
// subscriber reads every event: three lcds of one binary in the same
// rounds, with the defaults (HTTP API on) and no subscriber, with one
// subscriber of /api/v1/locks/subscribe that reads everything, and with
// HTTP_ADDRESS="". With beforeBin, that binary's three too. With -pprof,
// one more round of each binary's lcd without and with the subscriber,
// -pprof-duration long, is profiled, and the table gives the hub's share
// of lcd's CPU in it.
func sseUnread(lcdBin, beforeBin string) {
	if *fanCyc < 1 {
		log.Fatalf("sse-unread: -fanout-cyclers %d: want 1 or more", *fanCyc)
	}
	client := &http.Client{Transport: &http.Transport{DisableCompression: true, DisableKeepAlives: true}}
	var servers []*unreadServer
	for _, bin := range []string{lcdBin, beforeBin} {
		if bin == "" {
			continue
		}
		for _, kind := range []string{unreadNone, unreadOne, unreadOff} {
			u := &unreadServer{label: label(bin, beforeBin), kind: kind}
			u.s = startLCDWith(bin, kind != unreadOff)
			defer u.s.stop()
			if kind == unreadOne {
				u.subscribe(client)
			}
			servers = append(servers, u)
		}
	}
	for round := range *rounds {
		// The servers one after another in each round, each round
		// beginning with the next, so that drift in the machine's load
		// falls on all of them.
		for i := range servers {
			u := servers[(round+i)%len(servers)]
			cpu0 := selfCPU()
			r := driveWith(u.s, *fanCyc, sessionClients(u.s.addr))
			u.perSec, u.cpu = append(u.perSec, r.perSec), append(u.cpu, us(r.cpuCycle))
			u.bench = append(u.bench, us(selfCPU()-cpu0)/float64(r.cycles))
			u.cycles += r.cycles
		}
	}
	var profiles []string
	if *pprofDir != "" {
		for _, u := range servers {
			if u.kind == unreadOff {
				continue
			}
			file := filepath.Join(*pprofDir, u.label+"-"+u.kind+".pprof")
			wait := u.s.profile(*pprofFor, file)
			time.Sleep(100 * time.Millisecond) // the profile has begun
			r := driveFor(*pprofFor, u.s, *fanCyc, sessionClients(u.s.addr))
			u.cycles += r.cycles
			wait()
			hub := share(file, focusHub)
			streams := optional(u.kind == unreadOne, "%.2f", func() float64 { return share(file, focusStreams) })
			profiles = append(profiles, fmt.Sprintf("| %s | %s | %.0f | %.1f | %.2f | %.2f | %s | %s |",
				u.label, u.kind, r.perSec, us(r.cpuCycle), hub, hub/100*us(r.cpuCycle), streams, file))
		}
	}

	fmt.Printf("## The event stream unread: %d session clients cycling, lcd with no subscriber, one subscriber, no HTTP API\n\n", *fanCyc)
	fmt.Println("| lcd | cycles/s none | one subscriber | no HTTP | one/none | none/no HTTP | CPU µs/cycle none | one subscriber | no HTTP | one/none CPU | none/no HTTP CPU | bench CPU µs/cycle none | one subscriber |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for i := 0; i < len(servers); i += 3 {
		none, one, off := servers[i], servers[i+1], servers[i+2]
		fmt.Printf("| %s | %.0f | %.0f | %.0f | %.3f | %.3f | %.1f | %.1f | %.1f | %.3f | %.3f | %.1f | %.1f |\n", none.label,
			median(none.perSec), median(one.perSec), median(off.perSec), median(ratios(one.perSec, none.perSec)), median(ratios(none.perSec, off.perSec)),
			median(none.cpu), median(one.cpu), median(off.cpu), median(ratios(one.cpu, none.cpu)), median(ratios(none.cpu, off.cpu)),
			median(none.bench), median(one.bench))
	}
	fmt.Println()
	if len(servers) == 6 {
		fmt.Println("| lcd/before | cycles/s | CPU per cycle |")
		fmt.Println("|---|---:|---:|")
		for i := range 3 {
			a, b := servers[i], servers[i+3]
			fmt.Printf("| %s | %.3f | %.3f |\n", a.kind, median(ratios(a.perSec, b.perSec)), median(ratios(a.cpu, b.cpu)))
		}
		fmt.Println()
	}
	for _, u := range servers {
		if u.kind == unreadOne {
			u.check()
		}
	}
	fmt.Println()
	if len(profiles) > 0 {
		fmt.Printf("CPU profiles, %v rounds (focus %s; with one subscriber, also %s):\n\n", *pprofFor, focusHub, `httpapi\.\(\*Server\)\.subscribe`)
		fmt.Println("| lcd | subscribers | cycles/s | CPU µs/cycle | hub % of lcd's CPU | hub µs/cycle | hub and streams % | profile |")
		fmt.Println("|---|---|---:|---:|---:|---:|---:|---|")
		fmt.Println(strings.Join(profiles, "\n"))
		fmt.Println()
	}
}

// optional formats f() when ok, or "–".
func optional(ok bool, format string, f func() float64) string {
	if !ok {
		return "–"
	}
	return fmt.Sprintf(format, f())
}

// subscribe opens u's subscriber of every event.
func (u *unreadServer) subscribe(client *http.Client) {
	u.sub = &countingSubscriber{done: make(chan struct{})}
	connected := make(chan error, 1)
	go u.sub.read(client, "http://"+u.s.http+"/api/v1/locks/subscribe", connected)
	if err := <-connected; err != nil {
		log.Fatal(err)
	}
	waitMetric(u.s.metrics, "locking_center_http_subscribers", 1)
}

// check waits for u's subscriber to have read every event of the rounds,
// two a cycle, and says whether it did.
func (u *unreadServer) check() {
	want := 2 * u.cycles
	deadline := time.Now().Add(drainTimeout)
	for u.sub.events.Load() < want && time.Now().Before(deadline) {
		select {
		case <-u.sub.done:
			deadline = time.Now()
		case <-time.After(10 * time.Millisecond):
		}
	}
	dropped, _ := scrape(u.s.metrics, "locking_center_http_subscribers_dropped_total")
	u.sub.stop()
	<-u.sub.done
	fmt.Printf("%s's subscriber: %d events read of the %d the cycles made; subscribers dropped %.0f; the stream's end: %v\n",
		u.label, u.sub.events.Load(), want, dropped, u.sub.err)
}

// countingSubscriber reads an event stream as cheaply as it can, since it
// shares the machine with the server: it reads every byte and counts the
// events' data lines, and parses nothing.
type countingSubscriber struct {
	events atomic.Int64
	err    error // why the stream ended, once done is closed
	body   atomic.Pointer[io.ReadCloser]
	done   chan struct{}
}

var sseDataLine = []byte("\ndata: ")

// read opens the stream of url, reports on connected once the server
// answered, and counts until the stream ends.
func (c *countingSubscriber) read(client *http.Client, url string, connected chan<- error) {
	defer close(c.done)
	resp, err := client.Get(url)
	if err == nil && resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		err = fmt.Errorf("subscribe: %s", resp.Status)
	}
	connected <- err
	if err != nil {
		c.err = err
		return
	}
	c.body.Store(&resp.Body)
	defer resp.Body.Close()
	buf := make([]byte, 64<<10)
	kept := 0
	for {
		n, err := resp.Body.Read(buf[kept:])
		b := buf[:kept+n]
		c.events.Add(int64(bytes.Count(b, sseDataLine)))
		if err != nil {
			c.err = err
			return
		}
		// The last bytes, too few to hold a whole data line, go before
		// the next read: a line split between two reads is counted there.
		kept = copy(buf, b[len(b)-min(len(b), len(sseDataLine)-1):])
	}
}

// stop closes the stream.
func (c *countingSubscriber) stop() {
	if b := c.body.Load(); b != nil {
		(*b).Close()
	}
}
