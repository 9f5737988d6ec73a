// Command bench measures lcd beside the protocol's cost floor, in one run,
// and prints the figures as Markdown for docs/benchmarks.md.
//
//	go run ./internal/bench [-duration 3s] [-rounds 3] [-only throughput,hotkey,memory]
//
// It builds lcd and the floor server (internal/bench/floor), runs each as
// its own process on 127.0.0.1, and drives them from this process:
//
//   - throughput: uncontended lock+unlock cycles (each client its own key)
//     at 1, 16 and 64 clients, against lcd and against the floor in
//     alternating rounds; cycles/s and server CPU per cycle, read from
//     /proc/PID/stat, and their ratios to the floor.
//   - hotkey: 16 and 64 clients on one key, all queued before the first
//     grant, sending their next request after or before their unlock;
//     cycles per client (strict FIFO gives every client the same count,
//     within one, when clients queue before they unlock) and the handoff
//     time from an unlock's request being written (and from the dial of its
//     connection) to the next waiter's '+'.
//   - memory: RSS of lcd per held key with 1,000,000 held keys, and per
//     parked waiter with 10,000 waiters, from /proc/PID/status.
//
// Linux only (it reads /proc).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/locking-center/locking-center/oneshot"
)

var (
	duration = flag.Duration("duration", 3*time.Second, "length of one measured round")
	rounds   = flag.Int("rounds", 3, "rounds per server and client count; the median is reported")
	only     = flag.String("only", "throughput,hotkey,memory", "comma-separated parts to run")
	heldKeys = flag.Int("held-keys", 1_000_000, "held keys for the memory figure")
	waiters  = flag.Int("waiters", 10_000, "parked waiters for the memory figure")
	lcdPath  = flag.String("lcd", "", "an lcd binary to measure instead of one built from ./cmd/lcd")
	hotList  = flag.String("hot-clients", "16,64", "comma-separated client counts of the hot-key rounds")
)

// lcdLogLevel is the LOG_LEVEL of the lcd under measurement.
var lcdLogLevel = "warn"

func main() {
	flag.StringVar(&lcdLogLevel, "lcd-log-level", lcdLogLevel, "LOG_LEVEL of the lcd under measurement (its log goes to standard error)")
	flag.Parse()
	log.SetFlags(0)
	dir, err := os.MkdirTemp("", "lc-bench")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	lcd, floor := filepath.Join(dir, "lcd"), filepath.Join(dir, "floor")
	if *lcdPath != "" {
		lcd = *lcdPath
	} else {
		build(lcd, "./cmd/lcd")
	}
	build(floor, "./internal/bench/floor")

	hotClients = nil
	for _, f := range strings.Split(*hotList, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 2 {
			log.Fatalf("-hot-clients: %q is not a client count of 2 or more", f)
		}
		hotClients = append(hotClients, n)
	}
	parts := strings.Split(*only, ",")
	fmt.Printf("# Benchmark run %s, %d CPUs, round %v x %d\n\n", time.Now().UTC().Format(time.RFC3339), numCPU(), *duration, *rounds)
	if slices.Contains(parts, "throughput") {
		throughput(lcd, floor)
	}
	if slices.Contains(parts, "hotkey") {
		hotKey(lcd)
	}
	if slices.Contains(parts, "memory") {
		memory(lcd)
	}
}

func build(out, pkg string) {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		log.Fatalf("build %s: %v", pkg, err)
	}
}

func numCPU() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(b), "processor\t:")
}

// server is a process under measurement.
type server struct {
	cmd     *exec.Cmd
	addr    string // mutex port
	metrics string // metrics endpoint, lcd only
}

// startLCD runs lcd on free ports of 127.0.0.1 and waits for it to listen.
func startLCD(bin string) *server {
	ports := freePorts(3)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"BIND_ADDRESS=127.0.0.1:"+ports[0],
		"MANAGER_ADDRESS=127.0.0.1:"+ports[1],
		"METRICS_ADDRESS=127.0.0.1:"+ports[2],
		"LOG_LEVEL="+lcdLogLevel)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	s := &server{cmd: cmd, addr: "127.0.0.1:" + ports[0], metrics: "127.0.0.1:" + ports[2]}
	waitListening(s.addr)
	return s
}

// startFloor runs the floor server and reads its address.
func startFloor(bin string) *server {
	cmd := exec.Command(bin, "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		log.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		log.Fatalf("floor: %v", err)
	}
	return &server{cmd: cmd, addr: strings.TrimSpace(line)}
}

func (s *server) stop() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
}

func freePorts(n int) []string {
	var out []string
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		lns = append(lns, ln)
		_, p, _ := net.SplitHostPort(ln.Addr().String())
		out = append(out, p)
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

func waitListening(addr string) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			log.Fatalf("%s never listened: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cpuTime returns the user+system CPU the process has used.
func (s *server) cpuTime() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		log.Fatal(err)
	}
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticks
}

// rss returns the resident set size of the process in bytes.
func (s *server) rss() int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		log.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	log.Fatal("no VmRSS")
	return 0
}

// request sends one request on a new connection and returns the answer.
func request(addr string, r oneshot.Request) (byte, error) {
	return requestThen(addr, r, func() {})
}

// requestThen is request, calling sent once the request is written.
func requestThen(addr string, r oneshot.Request, sent func()) (byte, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if _, err := c.Write(oneshot.AppendRequest(nil, r)); err != nil {
		return 0, err
	}
	sent()
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return 0, err
	}
	return b[0], nil
}

// cycle locks and unlocks key once.
func cycle(addr, key string) error {
	if a, err := request(addr, oneshot.Request{Action: oneshot.ActionLock, Key: key, Source: "bench"}); err != nil || a != oneshot.AnswerOK {
		return fmt.Errorf("lock: %q %v", a, err)
	}
	if a, err := request(addr, oneshot.Request{Action: oneshot.ActionUnlock, Key: key}); err != nil || a != oneshot.AnswerOK {
		return fmt.Errorf("unlock: %q %v", a, err)
	}
	return nil
}

// result of one throughput round.
type result struct {
	perSec   float64       // cycles per second
	cpuCycle time.Duration // server CPU per cycle
}

// drive runs clients concurrent lock+unlock loops, each on its own key, for
// the round's duration, and measures cycles and the server's CPU.
func drive(s *server, clients int) result {
	var stop atomic.Bool
	var total atomic.Int64
	var wg sync.WaitGroup
	cpu0, t0 := s.cpuTime(), time.Now()
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "bench/" + strconv.Itoa(i)
			n := int64(0)
			for !stop.Load() {
				if err := cycle(s.addr, key); err != nil {
					log.Fatal(err)
				}
				n++
			}
			total.Add(n)
		}()
	}
	time.Sleep(*duration)
	stop.Store(true)
	wg.Wait()
	elapsed, cpu := time.Since(t0), s.cpuTime()-cpu0
	n := total.Load()
	return result{perSec: float64(n) / elapsed.Seconds(), cpuCycle: cpu / time.Duration(n)}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func throughput(lcdBin, floorBin string) {
	lcd, floor := startLCD(lcdBin), startFloor(floorBin)
	defer lcd.stop()
	defer floor.stop()
	fmt.Println("## Uncontended lock+unlock, lcd beside the floor")
	fmt.Println()
	fmt.Println("| clients | floor cycles/s | lcd cycles/s | lcd/floor | floor CPU µs/cycle | lcd CPU µs/cycle | lcd/floor CPU |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|")
	for _, clients := range []int{1, 16, 64} {
		var fr, lr, fc, lc []float64
		for range *rounds {
			// Alternate the two servers so that drift in the machine's load
			// falls on both.
			f := drive(floor, clients)
			l := drive(lcd, clients)
			fr, lr = append(fr, f.perSec), append(lr, l.perSec)
			fc, lc = append(fc, us(f.cpuCycle)), append(lc, us(l.cpuCycle))
		}
		// Ratios are taken per round, then the median.
		var rr, cr []float64
		for i := range fr {
			rr = append(rr, lr[i]/fr[i])
			cr = append(cr, lc[i]/fc[i])
		}
		fmt.Printf("| %d | %.0f | %.0f | %.3f | %.1f | %.1f | %.3f |\n",
			clients, median(fr), median(lr), median(rr), median(fc), median(lc), median(cr))
	}
	fmt.Println()
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func hotKey(lcdBin string) {
	lcd := startLCD(lcdBin)
	defer lcd.stop()
	fmt.Println("## One hot key")
	fmt.Println()
	fmt.Println("| clients | next request sent | cycles/s | min cycles per client | max cycles per client | most grants to others during one wait | handoff p50 µs | handoff p90 µs | handoff p99 µs | p50 from the unlock's dial µs |")
	fmt.Println("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, clients := range hotClients {
		for _, queued := range []bool{false, true} {
			hotKeyRound(lcd, clients, queued)
		}
	}
	fmt.Println()
}

// hotClients are the client counts of the hot-key rounds.
var hotClients = []int{16, 64}

// hotKeyRound runs clients on one key for one round. A client sends its
// next lock request after its unlock was answered, or, when queued, while
// it still holds the key, just before its unlock: then it is never absent
// from the queue, and strict FIFO gives every client the same number of
// cycles (within one) however the clients are scheduled.
func hotKeyRound(lcd *server, clients int, queued bool) {
	var stop atomic.Bool
	// When the last unlock was begun (before its connection is dialled)
	// and sent (its request written), in ns since origin.
	var lastBegun, lastSent atomic.Int64
	// grants counts '+' answers; a waiter that sees more than clients-1
	// grants to others (one more for a grant counted late) between its
	// lock request being written and its own '+' was overtaken by a
	// request that came after it.
	var grants, overtaken atomic.Int64
	var mu sync.Mutex
	var handoffs, fromDial []float64
	counts := make([]int, clients)
	// A starter holds the key until every client's first request is
	// parked, so that all start in the queue.
	unlock := oneshot.Request{Action: oneshot.ActionUnlock, Key: "hot"}
	if a, err := request(lcd.addr, oneshot.Request{Action: oneshot.ActionLock, Key: "hot", Source: "starter"}); err != nil || a != oneshot.AnswerOK {
		log.Fatalf("starter: %q %v", a, err)
	}
	origin := time.Now() // lastBegun, lastSent and the clients' clocks count from it
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lock := oneshot.AppendRequest(nil, oneshot.Request{Action: oneshot.ActionLock, Key: "hot", Source: "c" + strconv.Itoa(i)})
			var local, localDial []float64
			send := func() (net.Conn, int64) {
				c, err := net.Dial("tcp", lcd.addr)
				if err != nil {
					log.Fatal(err)
				}
				if _, err := c.Write(lock); err != nil {
					log.Fatal(err)
				}
				return c, grants.Load()
			}
			c, before := send()
			for {
				var b [1]byte
				if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != oneshot.AnswerOK {
					log.Fatalf("lock: %q %v", b[0], err)
				}
				c.Close()
				if others := grants.Add(1) - before - 1; others > overtaken.Load() {
					overtaken.Store(others) // a benign race: only this figure's maximum
				}
				if sent := lastSent.Load(); sent != 0 {
					now := time.Since(origin).Nanoseconds()
					local = append(local, float64(now-sent)/1e3)
					localDial = append(localDial, float64(now-lastBegun.Load())/1e3)
				}
				counts[i]++
				done := stop.Load()
				if queued && !done {
					c, before = send()
				}
				lastBegun.Store(time.Since(origin).Nanoseconds())
				if a, err := requestThen(lcd.addr, unlock, func() { lastSent.Store(time.Since(origin).Nanoseconds()) }); err != nil || a != oneshot.AnswerOK {
					log.Fatalf("unlock: %q %v", a, err)
				}
				if done {
					break
				}
				if !queued {
					c, before = send()
				}
			}
			mu.Lock()
			handoffs = append(handoffs, local...)
			fromDial = append(fromDial, localDial...)
			mu.Unlock()
		}()
	}
	waitMetric(lcd.metrics, "locking_center_waiters", clients)
	start := time.Now()
	lastBegun.Store(time.Since(origin).Nanoseconds())
	if a, err := requestThen(lcd.addr, unlock, func() { lastSent.Store(time.Since(origin).Nanoseconds()) }); err != nil || a != oneshot.AnswerOK {
		log.Fatalf("starter's unlock: %q %v", a, err)
	}
	time.Sleep(*duration)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	total := 0
	for _, c := range counts {
		total += c
	}
	slices.Sort(handoffs)
	slices.Sort(fromDial)
	pct := func(p float64) float64 { return handoffs[int(p*float64(len(handoffs)-1))] }
	when := "after its unlock"
	if queued {
		when = "before its unlock"
	}
	fmt.Printf("| %d | %s | %.0f | %d | %d | %d | %.0f | %.0f | %.0f | %.0f |\n", clients, when, float64(total)/elapsed.Seconds(),
		slices.Min(counts), slices.Max(counts), overtaken.Load(), pct(0.5), pct(0.9), pct(0.99), fromDial[len(fromDial)/2])
}

func memory(lcdBin string) {
	fmt.Println("## Memory (RSS of lcd)")
	fmt.Println()
	fmt.Println("| what | count | RSS before | RSS after | bytes each |")
	fmt.Println("|---|---:|---:|---:|---:|")

	lcd := startLCD(lcdBin)
	base := lcd.rss()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(*heldKeys) {
					return
				}
				key := "held/" + strconv.FormatInt(i, 10)
				if a, err := request(lcd.addr, oneshot.Request{Action: oneshot.ActionTryLock, Key: key}); err != nil || a != oneshot.AnswerOK {
					log.Fatalf("trylock %s: %q %v", key, a, err)
				}
			}
		}()
	}
	wg.Wait()
	after := lcd.rss()
	fmt.Printf("| held key | %d | %s | %s | %.0f |\n", *heldKeys, mib(base), mib(after), float64(after-base)/float64(*heldKeys))
	lcd.stop()

	lcd = startLCD(lcdBin)
	defer lcd.stop()
	if a, err := request(lcd.addr, oneshot.Request{Action: oneshot.ActionLock, Key: "hot"}); err != nil || a != oneshot.AnswerOK {
		log.Fatalf("holder: %q %v", a, err)
	}
	base = lcd.rss()
	conns := make([]net.Conn, 0, *waiters)
	for range *waiters {
		c, err := net.Dial("tcp", lcd.addr)
		if err != nil {
			log.Fatal(err)
		}
		c.Write(oneshot.AppendRequest(nil, oneshot.Request{Action: oneshot.ActionLock, Key: "hot"}))
		conns = append(conns, c)
	}
	waitMetric(lcd.metrics, "locking_center_waiters", *waiters)
	after = lcd.rss()
	fmt.Printf("| parked waiter | %d | %s | %s | %.0f |\n", *waiters, mib(base), mib(after), float64(after-base)/float64(*waiters))
	for _, c := range conns {
		c.Close()
	}
	fmt.Println()
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// waitMetric polls lcd's metrics endpoint until the named gauge reads want.
func waitMetric(addr, name string, want int) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if v, ok := scrape(addr, name); ok && v == float64(want) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	log.Fatalf("%s never reached %d", name, want)
}

func scrape(addr, name string) (float64, bool) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, false
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n", addr)
	body, _ := io.ReadAll(c)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}
