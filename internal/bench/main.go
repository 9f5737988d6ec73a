// Command bench measures lcd beside the cost floor of its protocols, and
// its session protocol beside Redis, in one run, and prints the figures as
// Markdown for docs/benchmarks.md.
//
//	go run ./internal/bench [-duration 3s] [-rounds 3] [-only throughput,hotkey,memory,...]
//
// It builds lcd and the floor server (internal/bench/floor, which serves
// v1, or with -session the session protocol), runs each as its own
// process on 127.0.0.1, and drives them from this process. The parts of
// v1, one request per connection:
//
//   - throughput: uncontended lock+unlock cycles (each client its own key)
//     at 1, 16 and 64 clients (-v1-clients), against the floor and lcd
//     with its defaults (the HTTP API on) and with HTTP_ADDRESS="" (and
//     the same two of -before's lcd), in interleaved rounds; cycles/s and
//     server CPU per cycle, read from /proc/PID/stat, and their ratios to
//     the floor and to -before's.
//   - hotkey: 16 and 64 clients on one key, all queued before the first
//     grant, sending their next request after or before their unlock;
//     cycles per client (strict FIFO gives every client the same count,
//     within one, when clients queue before they unlock) and the handoff
//     time from an unlock's request being written (and from the dial of its
//     connection) to the next waiter's '+'.
//   - memory: RSS of lcd per held key with 1,000,000 held keys, and per
//     parked waiter with 10,000 waiters, from /proc/PID/status.
//   - timewait: who closes first, by the TIME_WAIT sockets left on the
//     client's side and on the server's, for each kind of answer (a grant
//     at once, a grant after a wait, an unlock, a busy try-lock, a '-'),
//     and after 100,000 lock+unlock cycles (-timewait-cycles) from one
//     client (-timewait-clients), for lcd and -before's lcd; read from
//     /proc/net/tcp, the client's side being the sockets whose local port
//     is not the server's.
//
// The parts of the session protocol, one session per connection, lcd
// with its defaults (the HTTP API on):
//
//   - session-throughput: uncontended ACQUIRE+RELEASE cycles at 1, 16 and
//     64 clients against lcd, against the session floor, and against a
//     redis-server the benchmark starts (SET NX PX, then a compare-and-
//     delete script by EVALSHA), in alternating rounds; cycles/s, server
//     CPU per cycle and lcd's ratios to both. With -pprof DIR, one more
//     round of lcd (and of -before's) at each client count, -pprof-duration
//     long, under a CPU profile written to DIR.
//   - session-hotkey: 16 and 64 sessions on one key, all queued before the
//     first grant, each writing its next ACQUIRE and its RELEASE in one
//     write; cycles per session and the handoff time from a RELEASE's
//     write to the next holder's GRANTED, for lcd and for the session
//     floor with a FIFO queue per key (floor -session -queue), each
//     server started afresh for each of -rounds rounds, in turn; the
//     medians of the handoff p50 and of its ratio to the floor's.
//   - session-memory: RSS (and, for lcd, Go heap and stacks from its
//     metrics) per idle session with 10,000 sessions and per parked
//     request, and the server's CPU while those sessions PING every
//     keepalive_ms, for lcd and for the session floor.
//
// The part of the HTTP API:
//
//   - http-throughput: uncontended acquire+release cycles over lcd's HTTP
//     API at 16 clients (-http-clients), each its own key and client_id,
//     on keep-alive connections of one net/http client, beside the same
//     lcd's session protocol and a redis-server, in alternating rounds;
//     cycles/s, server CPU per cycle and the HTTP API's ratios to both.
//   - sse-fanout: 16 session-protocol clients (-fanout-cyclers) cycling
//     acquire+release, each its own key, without and then with 1,000
//     subscribers (-subscribers) on the HTTP API's event stream, each its
//     own connection taking every event, in each round; the cyclers'
//     cycles/s both ways and their ratio, the events each subscriber got
//     against the events the cycles made (none may be missing from a
//     subscriber that was not dropped), the subscribers dropped (as the
//     streams said and as lcd's counter says), and the delivery latency
//     from an event's time to its line read by the subscriber.
//   - sse-unread: what the event stream costs the locks when nobody reads
//     it, and when one subscriber reads it all: 16 session-protocol
//     clients (-fanout-cyclers) cycling acquire+release, each its own
//     key, on three lcds in the same rounds: with the defaults (HTTP API
//     on) and no subscriber, with one subscriber of every event (which
//     counts the events' data lines and parses nothing), and with
//     HTTP_ADDRESS=""; cycles/s, server CPU per cycle and their ratios,
//     this process's CPU per cycle, and whether the subscriber read every
//     event. With -pprof DIR, one more round of the first two, each
//     -pprof-duration long, under a CPU profile written to DIR, and the
//     hub's share of lcd's CPU in it (go tool pprof -focus).
//
// With -before BIN, throughput, timewait, the session parts,
// http-throughput and sse-unread also measure the lcd binary BIN (of an
// earlier commit, say) in the same rounds, for before/after figures;
// -before-rev REV builds it from the git revision REV (git archive into a
// temporary directory). With -pprof DIR, lcd and -before-rev's lcd are
// built with a pprof endpoint: one more file of package main given to go
// build -overlay, which the source tree never holds (pprof.go). With
// -perf DIR, each lcd and floor server the benchmark starts is recorded
// by perf (perf record -g) into DIR, for perf report.
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
	"syscall"
	"time"

	"github.com/locking-center/locking-center/oneshot"

	"github.com/locking-center/locking-center/internal/bench/proc"
)

var (
	duration = flag.Duration("duration", 3*time.Second, "length of one measured round")
	rounds   = flag.Int("rounds", 3, "rounds per server and client count; the median is reported")
	only     = flag.String("only", strings.Join(allParts, ","), "comma-separated parts to run")
	heldKeys = flag.Int("held-keys", 1_000_000, "held keys for the memory figure")
	waiters  = flag.Int("waiters", 10_000, "parked waiters for the memory figure")
	lcdPath  = flag.String("lcd", "", "an lcd binary to measure instead of one built from ./cmd/lcd")
	hotList  = flag.String("hot-clients", "16,64", "comma-separated client counts of the hot-key rounds")
	redisBin = flag.String("redis", "redis-server", "the redis-server binary of session-throughput; the Redis columns are left empty when it is not found")
	sessions = flag.Int("sessions", 10_000, "idle sessions for session-memory")
	cycList  = flag.String("session-clients", "1,16,64", "comma-separated client counts of session-throughput")
	httpList = flag.String("http-clients", "16", "comma-separated client counts of http-throughput")
	before   = flag.String("before", "", "another lcd binary (say, of an earlier commit) to measure beside lcd in throughput, timewait, the session parts, http-throughput and sse-unread")
	beforeAt = flag.String("before-rev", "", "a git revision whose lcd is built (from git archive, in a temporary directory) and measured as -before's")
	v1List   = flag.String("v1-clients", "1,16,64", "comma-separated client counts of throughput")
	fanSubs  = flag.Int("subscribers", 1000, "event stream subscribers of sse-fanout")
	fanCyc   = flag.Int("fanout-cyclers", 16, "session-protocol clients cycling in sse-fanout and sse-unread")
	perfDir  = flag.String("perf", "", "a directory to record each lcd and floor into with perf record -g (lcd-N.data, floor-N.data)")
	pprofDir = flag.String("pprof", "", "a directory for the CPU profiles of session-throughput and sse-unread; lcd (and -before-rev's) is built with a pprof endpoint for them")
	pprofFor = flag.Duration("pprof-duration", 10*time.Second, "length of each profiled round of session-throughput and sse-unread")

	keepaliveWindow = flag.Duration("keepalive-window", 20*time.Second, "how long session-memory measures the CPU of keepalives")
)

// allParts are the parts of the benchmark, in the order they run.
var allParts = []string{"throughput", "hotkey", "memory", "timewait", "session-throughput", "session-hotkey", "session-memory", "http-throughput", "sse-fanout", "sse-unread"}

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
	profiled := *pprofDir != ""
	switch {
	case *lcdPath != "" && profiled:
		log.Fatal("-pprof builds lcd with its pprof endpoint: it cannot profile -lcd's binary")
	case *before != "" && *beforeAt != "":
		log.Fatal("-before and -before-rev: give one")
	case *lcdPath != "":
		lcd = *lcdPath
	default:
		buildLCD("", lcd, profiled)
	}
	if *beforeAt != "" {
		src := filepath.Join(dir, "before-src")
		if err := os.Mkdir(src, 0o755); err != nil {
			log.Fatal(err)
		}
		extract(*beforeAt, src)
		*before = filepath.Join(dir, "lcd-before")
		buildLCD(src, *before, profiled)
	}
	if profiled {
		if err := os.MkdirAll(*pprofDir, 0o755); err != nil {
			log.Fatal(err)
		}
	}
	proc.Build("", floor, "./internal/bench/floor")

	v1Clients = counts("v1-clients", *v1List, 1)
	twClients = counts("timewait-clients", *twList, 1)
	hotClients = counts("hot-clients", *hotList, 2)
	cycleClients = counts("session-clients", *cycList, 1)
	httpClientCounts = counts("http-clients", *httpList, 1)
	parts := strings.Split(*only, ",")
	for _, p := range parts {
		if !slices.Contains(allParts, p) {
			log.Fatalf("-only: no part %q; the parts are %s", p, strings.Join(allParts, ","))
		}
	}
	fmt.Printf("# Benchmark run %s, %d CPUs, round %v x %d, load average %s\n\n", time.Now().UTC().Format(time.RFC3339), numCPU(), *duration, *rounds, loadAverage())
	defer func() {
		fmt.Printf("Run ended %s, load average %s\n", time.Now().UTC().Format(time.RFC3339), loadAverage())
	}()
	if slices.Contains(parts, "throughput") {
		throughput(lcd, floor, *before)
	}
	if slices.Contains(parts, "hotkey") {
		hotKey(lcd)
	}
	if slices.Contains(parts, "memory") {
		memory(lcd)
	}
	if slices.Contains(parts, "timewait") {
		timeWait(lcd, *before)
	}
	if slices.Contains(parts, "session-throughput") {
		sessionThroughput(lcd, floor, *redisBin, *before)
	}
	if slices.Contains(parts, "session-hotkey") {
		sessionHotKey(lcd, floor, *before)
	}
	if slices.Contains(parts, "session-memory") {
		sessionMemory(lcd, floor, *before)
	}
	if slices.Contains(parts, "http-throughput") {
		httpThroughput(lcd, *redisBin, *before)
	}
	if slices.Contains(parts, "sse-fanout") {
		sseFanout(lcd)
	}
	if slices.Contains(parts, "sse-unread") {
		sseUnread(lcd, *before)
	}
}

// counts parses a flag's comma-separated client counts, each at least
// least.
func counts(name, list string, least int) []int {
	var out []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n < least {
			log.Fatalf("-%s: %q is not a client count of %d or more", name, f, least)
		}
		out = append(out, n)
	}
	return out
}

func numCPU() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(b), "processor\t:")
}

// loadAverage returns the system's load averages over 1, 5 and 15
// minutes, from /proc/loadavg.
func loadAverage() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// server is a process under measurement.
type server struct {
	cmd     *exec.Cmd
	addr    string    // mutex port, or Redis's port
	metrics string    // metrics endpoint, lcd only
	http    string    // HTTP API, lcd started with it only
	pprof   string    // pprof endpoint, lcd with -pprof only
	perf    *exec.Cmd // perf recording the server, with -perf
	dir     string    // removed once the server stopped
	sha     string    // Redis only: the SHA1 of releaseScript
}

// startLCD runs lcd on free ports of 127.0.0.1 and waits for it to listen,
// with its HTTP API off.
func startLCD(bin string) *server { return startLCDWith(bin, false) }

// startLCDWith is startLCD, with the HTTP API on a free port when
// withHTTP is set.
func startLCDWith(bin string, withHTTP bool) *server {
	addrs := proc.FreeAddrs(5)
	cmd := exec.Command(bin)
	httpAddr, pprofAddr := "", ""
	if withHTTP {
		httpAddr = addrs[3]
	}
	if *pprofDir != "" {
		pprofAddr = addrs[4]
	}
	cmd.Env = append(os.Environ(),
		"BIND_ADDRESS="+addrs[0],
		"MANAGER_ADDRESS="+addrs[1],
		"METRICS_ADDRESS="+addrs[2],
		"HTTP_ADDRESS="+httpAddr,
		pprofEnv+"="+pprofAddr,
		"LOG_LEVEL="+lcdLogLevel)
	cmd.Stderr = os.Stderr
	spawn(cmd)
	s := &server{cmd: cmd, addr: addrs[0], metrics: addrs[2], http: httpAddr, pprof: pprofAddr}
	proc.WaitListening(s.addr)
	if withHTTP {
		proc.WaitListening(s.http)
	}
	if *perfDir != "" {
		s.record(*perfDir)
	}
	return s
}

// perfRuns numbers the recordings of -perf.
var perfRuns atomic.Int64

// record starts perf recording the server into dir.
func (s *server) record(dir string) {
	out := filepath.Join(dir, fmt.Sprintf("%s-%d.data", filepath.Base(s.cmd.Path), perfRuns.Add(1)))
	s.perf = exec.Command("perf", "record", "-g", "-F", "999", "-o", out, "-p", strconv.Itoa(s.cmd.Process.Pid))
	s.perf.Stderr = os.Stderr
	if err := s.perf.Start(); err != nil {
		log.Fatalf("perf: %v", err)
	}
	log.Printf("perf records %s (pid %d) into %s", s.cmd.Path, s.cmd.Process.Pid, out)
}

// startFloor runs the floor server, with args before its address, and
// reads its address.
func startFloor(bin string, args ...string) *server {
	cmd := exec.Command(bin, append(args, proc.FreeAddrs(1)[0])...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		log.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	spawn(cmd)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		log.Fatalf("floor: %v", err)
	}
	s := &server{cmd: cmd, addr: strings.TrimSpace(line)}
	if *perfDir != "" {
		s.record(*perfDir)
	}
	return s
}

// spawn starts cmd, to be killed when this process ends, even by
// log.Fatal.
func spawn(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Fatalf("%s: %v", cmd.Path, err)
	}
}

func (s *server) stop() {
	if s.perf != nil {
		s.perf.Process.Signal(os.Interrupt)
		s.perf.Wait()
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}

// cpuTime returns the user+system CPU the process has used.
func (s *server) cpuTime() time.Duration {
	d, err := proc.CPUTime(s.cmd.Process.Pid)
	if err != nil {
		log.Fatal(err)
	}
	return d
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
	cycles   int64         // in all
}

// drive runs clients concurrent lock+unlock loops, each on its own key, for
// the round's duration, and measures cycles and the server's CPU.
func drive(s *server, clients int) result {
	return driveWith(s, clients, func(i int) (func() error, func()) {
		key := "bench/" + strconv.Itoa(i)
		return func() error { return cycle(s.addr, key) }, func() {}
	})
}

// driveWith opens clients clients with open (client i's cycle and what
// ends it), runs their cycles concurrently for the round's duration, and
// measures cycles and the server's CPU; the opening and the ending are not
// measured.
func driveWith(s *server, clients int, open func(i int) (cycle func() error, end func())) result {
	return driveFor(*duration, s, clients, open)
}

// driveFor is driveWith for a round of d.
func driveFor(d time.Duration, s *server, clients int, open func(i int) (cycle func() error, end func())) result {
	var stop atomic.Bool
	var total atomic.Int64
	var wg sync.WaitGroup
	cycles, ends := make([]func() error, clients), make([]func(), clients)
	for i := range clients {
		cycles[i], ends[i] = open(i)
	}
	cpu0, t0 := s.cpuTime(), time.Now()
	for _, cycle := range cycles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := int64(0)
			for !stop.Load() {
				if err := cycle(); err != nil {
					log.Fatal(err)
				}
				n++
			}
			total.Add(n)
		}()
	}
	elapsed := runRound(d, t0, &stop, &wg)
	cpu := s.cpuTime() - cpu0
	for _, end := range ends {
		end()
	}
	n := total.Load()
	return result{perSec: float64(n) / elapsed.Seconds(), cpuCycle: cpu / time.Duration(n), cycles: n}
}

// runRound lets a round's clients run for d, then stops them, waits for
// them and returns the time since start.
func runRound(d time.Duration, start time.Time, stop *atomic.Bool, wg *sync.WaitGroup) time.Duration {
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	return time.Since(start)
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// percentile returns the p-quantile (0 to 1) of sorted, which is not
// empty.
func percentile(sorted []float64, p float64) float64 {
	return sorted[int(p*float64(len(sorted)-1))]
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// v1Clients are the client counts of the throughput rounds.
var v1Clients = []int{1, 16, 64}

// measured is a server of the throughput rounds, and its figures.
type measured struct {
	name   string
	s      *server
	before *measured // -before's lcd with the same HTTP setting, for the lcd rows
	r      []result  // one per round
}

// throughput drives the floor, lcd with its defaults and with
// HTTP_ADDRESS="", and the same two of beforeBin when it is given, in
// interleaved rounds: each round measures every server once, in an
// order that turns from round to round.
func throughput(lcdBin, floorBin, beforeBin string) {
	floor := &measured{name: "floor", s: startFloor(floorBin)}
	defer floor.s.stop()
	servers := []*measured{floor}
	var befores []*measured
	if beforeBin != "" {
		for _, http := range []bool{true, false} {
			b := &measured{name: "before" + httpLabel(http), s: startLCDWith(beforeBin, http)}
			defer b.s.stop()
			befores = append(befores, b)
		}
	}
	for i, http := range []bool{true, false} {
		l := &measured{name: "lcd" + httpLabel(http), s: startLCDWith(lcdBin, http)}
		defer l.s.stop()
		if befores != nil {
			l.before = befores[i]
		}
		servers = append(servers, l)
	}
	servers = append(servers, befores...)
	heading("Uncontended lock+unlock, lcd beside the floor",
		"Ratios are the medians of the ratios of each round; *before* is -before's lcd with the same HTTP setting.",
		"| clients | server | cycles/s | /floor | /before | CPU µs/cycle | CPU /floor | CPU /before |",
		"|---:|---|---:|---:|---:|---:|---:|---:|")
	for _, clients := range v1Clients {
		for _, m := range servers {
			m.r = nil
		}
		for round := range *rounds {
			// Interleave the servers, and turn their order, so that drift
			// in the machine's load falls on all of them.
			for i := range servers {
				m := servers[(i+round)%len(servers)]
				m.r = append(m.r, drive(m.s, clients))
			}
		}
		for _, m := range servers {
			fmt.Printf("| %d | %s | %.0f | %s | %s | %.1f | %s | %s |\n", clients, m.name,
				median(perSec(m.r)), ratio(m, floor, perSec), ratio(m, m.before, perSec),
				median(cpuCycle(m.r)), ratio(m, floor, cpuCycle), ratio(m, m.before, cpuCycle))
		}
	}
	fmt.Println()
}

// heading prints the heading of a part's section, text under it unless
// it is empty, and the first table's head lines.
func heading(title, text string, head ...string) {
	fmt.Printf("## %s\n\n", title)
	if text != "" {
		fmt.Printf("%s\n\n", text)
	}
	for _, line := range head {
		fmt.Println(line)
	}
}

// httpLabel names lcd's HTTP setting in a row of the throughput table.
func httpLabel(http bool) string {
	if http {
		return ""
	}
	return `, HTTP_ADDRESS=""`
}

func perSec(r []result) []float64 {
	out := make([]float64, len(r))
	for i := range r {
		out[i] = r[i].perSec
	}
	return out
}

func cpuCycle(r []result) []float64 {
	out := make([]float64, len(r))
	for i := range r {
		out[i] = us(r[i].cpuCycle)
	}
	return out
}

// ratio returns the median of the per-round ratios of of's figures to
// to's, formatted; "–" with no to, or for a server beside itself.
func ratio(of, to *measured, figure func([]result) []float64) string {
	if to == nil || to == of {
		return "–"
	}
	a, b := figure(of.r), figure(to.r)
	rs := make([]float64, len(a))
	for i := range a {
		rs[i] = a[i] / b[i]
	}
	return fmt.Sprintf("%.3f", median(rs))
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
	elapsed := runRound(*duration, start, &stop, &wg)
	total := sum(counts)
	slices.Sort(handoffs)
	slices.Sort(fromDial)
	pct := func(p float64) float64 { return percentile(handoffs, p) }
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
	parallel(*heldKeys, func(i int) {
		key := "held/" + strconv.Itoa(i+1)
		if a, err := request(lcd.addr, oneshot.Request{Action: oneshot.ActionTryLock, Key: key}); err != nil || a != oneshot.AnswerOK {
			log.Fatalf("trylock %s: %q %v", key, a, err)
		}
	})
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

// parallel calls f(i) for every i from 0 to n-1, from 32 goroutines.
func parallel(n int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				f(i)
			}
		}()
	}
	wg.Wait()
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
	v := scrapeAll(addr, name)
	if len(v) == 0 {
		return 0, false
	}
	return v[0], true
}

// scrapeAll reads lcd's metrics once and returns the values of the named
// series, in order, or nil unless it found them all.
func scrapeAll(addr string, names ...string) []float64 {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n", addr)
	body, _ := io.ReadAll(c)
	out := make([]float64, len(names))
	found := 0
	for _, line := range strings.Split(string(body), "\n") {
		for i, name := range names {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					return nil
				}
				out[i] = f
				found++
			}
		}
	}
	if found != len(names) {
		return nil
	}
	return out
}
