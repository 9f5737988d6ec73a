package httpapi_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/locking-center/locking-center/httpapi"
)

// benchClients is how many clients cycle at once, each on a key of its
// own.
const benchClients = 16

// cycle runs n acquire+release cycles over HTTP with keep-alive, spread
// over benchClients goroutines each with its own key, and returns how
// long they took. It reports the process's CPU time per cycle (server and
// clients together), which a busy machine changes less than the rate.
func cycle(b *testing.B, e *env, n int) time.Duration {
	b.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: benchClients, MaxConnsPerHost: benchClients}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	post := func(path, body string) error {
		resp, err := client.Post(e.url+path, "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", path, resp.Status)
		}
		return nil
	}
	var left atomic.Int64
	left.Store(int64(n))
	errs := make(chan error, benchClients)
	var wg sync.WaitGroup
	began, cpu := time.Now(), cpuTime()
	for i := range benchClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"key":"bench/%d","owner":"client-%d"}`, i, i)
			for left.Add(-1) >= 0 {
				if err := post("/api/v1/locks/acquire", body); err != nil {
					errs <- err
					return
				}
				if err := post("/api/v1/locks/release", body); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(began)
	if c := cpuTime() - cpu; c > 0 {
		b.ReportMetric(float64(c.Microseconds())/float64(n), "cpu-µs/cycle")
	}
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return took
}

// BenchmarkAcquireRelease measures acquire+release cycles over HTTP with
// keep-alive, 16 clients at once.
func BenchmarkAcquireRelease(b *testing.B) {
	e := start(b, options{quiet: true})
	took := cycle(b, e, b.N)
	b.ReportMetric(float64(b.N)/took.Seconds(), "cycles/s")
}

// BenchmarkFanOut measures the same cycles while 0 or 1,000 subscribers
// follow the event stream, and checks that every subscriber got every
// event, in order, none dropped. The subscribers may fall up to 65,536
// events behind (the ring and the lag budget), so that a run of up to
// 32,768 cycles measures how fast they catch up rather than how soon the
// default budget (1,024 events) drops them: on two cores 1,000 streams
// cannot carry events as fast as 16 HTTP clients make them.
func BenchmarkFanOut(b *testing.B) {
	for _, subs := range []int{0, 1000} {
		b.Run(fmt.Sprintf("subscribers=%d", subs), func(b *testing.B) {
			e := start(b, options{quiet: true, cfg: httpapi.Config{RingSize: 1 << 16, SubscriberLag: 1 << 16}})
			followers := make([]*follower, subs)
			for i := range followers {
				followers[i] = follow(b, e)
			}
			eventually(b, "the subscribers", func() bool {
				return e.metric("locking_center_http_subscribers") == float64(subs)
			})
			b.ResetTimer()
			took := cycle(b, e, b.N)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/took.Seconds(), "cycles/s")
			if subs == 0 {
				return
			}
			want := 2 * b.N // acquired and released
			began := time.Now()
			for _, f := range followers {
				if err := f.await(want, time.Minute); err != nil {
					b.Fatalf("%v (dropped: %v)", err, e.metric("locking_center_http_subscribers_dropped_total"))
				}
			}
			b.ReportMetric(time.Since(began).Seconds()*1000, "catch-up-ms")
			b.ReportMetric(float64(want*subs)/(took+time.Since(began)).Seconds(), "deliveries/s")
			if d := e.metric("locking_center_http_subscribers_dropped_total"); d != 0 {
				b.Fatalf("%v subscribers dropped", d)
			}
		})
	}
}

// follower reads the event stream and counts its events, checking that
// ids come one after another.
type follower struct {
	mu    sync.Mutex
	count int
	last  uint64
	err   error
	more  *sync.Cond
}

func follow(b *testing.B, e *env) *follower {
	b.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		b.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, e.url+"/api/v1/locks/subscribe", nil)
	if err := req.Write(c); err != nil {
		b.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("subscribe: %v %v", err, resp)
	}
	f := &follower{}
	f.more = sync.NewCond(&f.mu)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r := bufio.NewReaderSize(resp.Body, 64<<10)
		for {
			line, err := r.ReadSlice('\n')
			if err != nil {
				f.fail(err)
				return
			}
			if !strings.HasPrefix(string(line), "id: ") {
				continue
			}
			id, err := strconv.ParseUint(strings.TrimSpace(string(line[4:])), 10, 64)
			f.mu.Lock()
			if err == nil && f.last != 0 && id != f.last+1 {
				err = fmt.Errorf("event %d after %d", id, f.last)
			}
			if err != nil && f.err == nil {
				f.err = err
			}
			f.count++
			f.last = id
			f.more.Broadcast()
			f.mu.Unlock()
		}
	}()
	b.Cleanup(func() {
		c.Close()
		<-done
	})
	return f
}

func (f *follower) fail(err error) {
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.more.Broadcast()
	f.mu.Unlock()
}

// await waits until the follower has n events, or fails.
func (f *follower) await(n int, limit time.Duration) error {
	t := time.AfterFunc(limit, func() { f.fail(fmt.Errorf("no %d events within %v", n, limit)) })
	defer t.Stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.count < n && f.err == nil {
		f.more.Wait()
	}
	if f.err != nil {
		return fmt.Errorf("after %d events: %w", f.count, f.err)
	}
	return nil
}
