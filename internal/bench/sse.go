package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"log"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Lines of lcd's event stream that sse-fanout reads.
var (
	sseConnected = []byte(": connected")
	sseDropped   = []byte(": dropped")
	sseData      = []byte("data: ")
	sseTime      = []byte(`"time":"`)
	sseMarker    = []byte(`"key":"` + markerKey + `"`)
	sseReleased  = []byte(`"action":"released"`)
)

const (
	// markerKey is locked and released once after a round's cycles: its
	// released event, the last of the round, ends each subscriber's count.
	markerKey = "sse/marker"
	// sampleEvery is how often a subscriber takes an event's delivery
	// latency: every sampleEvery-th event, to keep its reading cheap.
	sampleEvery = 16
	// drainTimeout bounds the wait for the subscribers to read the marker
	// once the cycles stopped.
	drainTimeout = time.Minute
)

// sseSubscriber is one subscriber of sse-fanout: a stream of every event
// on a connection of its own.
type sseSubscriber struct {
	events  int64     // events read before the marker's
	dropped bool      // the stream ended with ": dropped"
	marked  bool      // the marker's released event was read
	err     error     // the stream failed otherwise
	lat     []float64 // delivery latencies, µs, of every sampleEvery-th event
	stop    func()    // closes the stream
}

// subscribe opens the stream of url for s, reports on connected once the
// server said ": connected" (or the stream failed before), and reads it
// until the marker's released event, a drop or an error.
func (s *sseSubscriber) subscribe(client *http.Client, url string, connected chan<- error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		connected <- err
		return
	}
	resp, err := client.Do(req)
	if err != nil {
		connected <- err
		return
	}
	defer resp.Body.Close()
	s.stop = func() { resp.Body.Close() }
	if resp.StatusCode != http.StatusOK {
		connected <- fmt.Errorf("subscribe: %s", resp.Status)
		return
	}
	r := bufio.NewReaderSize(resp.Body, 16<<10)
	said := false
	defer func() {
		if !said {
			connected <- errors.Join(errors.New("subscribe: the stream ended before it said connected"), s.err)
		}
	}()
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			s.err = err
			return
		}
		switch {
		case bytes.HasPrefix(line, sseData):
			if bytes.Contains(line, sseMarker) {
				if bytes.Contains(line, sseReleased) {
					s.marked = true
					return
				}
				continue
			}
			s.events++
			if s.events%sampleEvery == 0 {
				s.sample(line)
			}
		case bytes.HasPrefix(line, sseConnected):
			said = true
			connected <- nil
		case bytes.HasPrefix(line, sseDropped):
			s.dropped = true
			return
		}
	}
}

// sample takes the delivery latency of the event on data line line: now
// less the event's time.
func (s *sseSubscriber) sample(line []byte) {
	at := bytes.Index(line, sseTime)
	if at < 0 {
		return
	}
	v := line[at+len(sseTime):]
	end := bytes.IndexByte(v, '"')
	if end < 0 {
		return
	}
	t, err := time.Parse(time.RFC3339Nano, string(v[:end]))
	if err != nil {
		return
	}
	s.lat = append(s.lat, us(time.Since(t)))
}

// fanoutRound is one round of sse-fanout.
type fanoutRound struct {
	without, with           result
	benchWithout, benchWith float64 // this process's CPU, in cores, while the cyclers ran
	produced                int64   // events of the cycles with subscribers
	got                     []int64 // events read by each subscriber not dropped
	dropped                 int     // subscribers whose streams said dropped
	counter                 float64 // lcd's count of dropped subscribers, of the round
	failed, unfinished      int     // streams that failed, or had not read the marker in time
	lat                     []float64
}

// sseFanout measures what 1,000 subscribers of the HTTP API's event
// stream cost the session protocol's cycles, and how they are served.
func sseFanout(lcdBin string) {
	if *fanSubs < 1 || *fanCyc < 1 {
		log.Fatalf("sse-fanout: -subscribers %d and -fanout-cyclers %d: want 1 or more of each", *fanSubs, *fanCyc)
	}
	lcd := startLCDWith(lcdBin, true)
	defer lcd.stop()
	client := &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: -1,
		DisableCompression:  true,
		DisableKeepAlives:   true,
	}}
	url := "http://" + lcd.http + "/api/v1/locks/subscribe"
	var rows []string
	var ratio, p50, p99 []float64
	for round := range *rounds {
		r := fanoutOnce(lcd, client, url)
		got := slices.Clone(r.got)
		slices.Sort(got)
		gotRange := "-"
		if len(got) > 0 {
			gotRange = fmt.Sprintf("%d–%d", got[0], got[len(got)-1])
		}
		missing := 0
		for _, n := range got {
			if n != r.produced {
				missing++
			}
		}
		slices.Sort(r.lat)
		l50, l99 := "-", "-"
		if len(r.lat) > 0 {
			a, b := percentile(r.lat, 0.50)/1000, percentile(r.lat, 0.99)/1000
			p50, p99 = append(p50, a), append(p99, b)
			l50, l99 = fmt.Sprintf("%.1f", a), fmt.Sprintf("%.1f", b)
		}
		ratio = append(ratio, r.with.perSec/r.without.perSec)
		rows = append(rows, fmt.Sprintf("| %d | %.0f | %.0f | %.3f | %.1f | %.1f | %.2f | %.2f | %d | %s | %d / %.0f | %d | %d | %s | %s |",
			round+1, r.without.perSec, r.with.perSec, r.with.perSec/r.without.perSec,
			us(r.without.cpuCycle), us(r.with.cpuCycle), r.benchWithout, r.benchWith,
			r.produced, gotRange, r.dropped, r.counter, missing, r.failed+r.unfinished, l50, l99))
	}
	fmt.Printf("## Event stream fan-out: %d subscribers while %d session clients cycle\n\n", *fanSubs, *fanCyc)
	fmt.Println("| round | cycles/s without | cycles/s with | with/without | lcd CPU µs/cycle without | with | bench CPU cores without | with | events produced | events per subscriber kept | dropped (streams / counter) | kept but missing events | failed or unfinished | latency p50 ms | p99 ms |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	fmt.Println(strings.Join(rows, "\n"))
	fmt.Println()
	if len(ratio) > 0 {
		fmt.Printf("with/without %s; ", spread(ratio, "%.3f"))
	}
	if len(p50) > 0 {
		fmt.Printf("latency p50 %s ms, p99 %s ms", spread(p50, "%.1f"), spread(p99, "%.1f"))
	}
	fmt.Print("\n\n")
}

// spread formats the least and the greatest of xs, which is not empty.
func spread(xs []float64, format string) string {
	return fmt.Sprintf(format+"–"+format, slices.Min(xs), slices.Max(xs))
}

// fanoutOnce runs the cyclers without subscribers, then opens the
// subscribers, runs the cyclers again, locks and releases the marker and
// waits for every subscriber to read it, be dropped or fail.
func fanoutOnce(lcd *server, client *http.Client, url string) fanoutRound {
	var r fanoutRound
	cpu0, t0 := selfCPU(), time.Now()
	r.without = driveWith(lcd, *fanCyc, sessionClients(lcd.addr))
	r.benchWithout = cores(selfCPU()-cpu0, time.Since(t0))

	before, _ := scrape(lcd.metrics, "locking_center_http_subscribers_dropped_total")
	subs := make([]*sseSubscriber, *fanSubs)
	connected := make(chan error, len(subs))
	var wg sync.WaitGroup
	for i := range subs {
		subs[i] = &sseSubscriber{}
		wg.Add(1)
		go func(s *sseSubscriber) {
			defer wg.Done()
			s.subscribe(client, url, connected)
		}(subs[i])
	}
	for range subs {
		if err := <-connected; err != nil {
			log.Fatal(err)
		}
	}
	waitMetric(lcd.metrics, "locking_center_http_subscribers", len(subs))

	cpu0, t0 = selfCPU(), time.Now()
	r.with = driveWith(lcd, *fanCyc, sessionClients(lcd.addr))
	r.benchWith = cores(selfCPU()-cpu0, time.Since(t0))
	r.produced = 2 * r.with.cycles // an acquired and a released event a cycle
	marker, err := newSessionCycler(lcd.addr, "sse-marker", markerKey)
	if err != nil {
		log.Fatal(err)
	}
	if err := marker.cycle(); err != nil {
		log.Fatalf("marker: %v", err)
	}
	marker.s.end()

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	timedOut := false
	select {
	case <-done:
	case <-time.After(drainTimeout):
		timedOut = true
		log.Printf("sse-fanout: subscribers still reading %v after the cycles; their streams are closed", drainTimeout)
	}
	for _, s := range subs {
		if s.stop != nil {
			s.stop()
		}
	}
	<-done
	after, _ := scrape(lcd.metrics, "locking_center_http_subscribers_dropped_total")
	r.counter = after - before
	for _, s := range subs {
		switch {
		case s.dropped:
			r.dropped++
		case s.marked:
			r.got = append(r.got, s.events)
			r.lat = append(r.lat, s.lat...)
		case timedOut:
			r.unfinished++
		default:
			r.failed++
			log.Printf("sse-fanout: a stream ended before the marker: %v", s.err)
		}
	}
	waitMetric(lcd.metrics, "locking_center_http_subscribers", 0)
	return r
}

// selfCPU returns the CPU time this process has used, user and system.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cores is cpu over elapsed: how many cores it kept busy.
func cores(cpu, elapsed time.Duration) float64 { return cpu.Seconds() / elapsed.Seconds() }
