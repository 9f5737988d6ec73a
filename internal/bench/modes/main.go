// Command modes measures the lock modes of the session protocol against
// lcd over loopback and prints the figures as Markdown for
// docs/benchmarks.md ("Lock modes").
//
//	go run ./internal/bench/modes [-rounds 3] [-duration 3s] [-only rw,semaphore,aging,waiting]
//
// It builds lcd (or takes -lcd), runs it as its own process on 127.0.0.1,
// fresh for every round, and drives it with the Go client from this
// process. Each part runs -rounds times; the tables give the median of the
// rounds.
//
//   - rw: 16 reader sessions (Shared) and 1 writer session cycle on one
//     key: reader and writer cycles/s, and the writer's wait for the key
//     (from Acquire to its return), p50 and p99.
//   - semaphore: 16 sessions cycle on a semaphore of 4: cycles/s and
//     cycles per session. Either each session asks again after its
//     release is answered (the Semaphore API), or it asks for its next
//     place in the same write as, and before, the release of the one it
//     holds (raw frames), so that it never leaves the queue: strict FIFO
//     then gives every session the same count within one.
//   - aging: a priority-0 waiter at the head of the queue, behind a
//     stream of priority -aging-priority requests (three sessions that
//     each hold the key 100 ms and ask again): how long until it is
//     served, against the bound of its priority's difference × 1 s
//     (mutex.AgingStep).
//   - waiting: one session that holds a key acquires a free key (and
//     releases it), and asks for a key whose wait would close a cycle
//     (refused deadlock), with no other session and with -waiting other
//     sessions each holding a key and waiting in one chain of waits that
//     the refused acquire closes: acquire p50 and p99, the deadlock
//     check's cost over the wire.
//
// Linux and loopback only; it needs about 2 × -waiting file descriptors.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
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

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/internal/bench/proc"
	"github.com/locking-center/locking-center/session"
)

var (
	rounds   = flag.Int("rounds", 3, "rounds of each part; the median is reported")
	duration = flag.Duration("duration", 3*time.Second, "length of one round of rw and semaphore")
	only     = flag.String("only", "rw,semaphore,aging,waiting", "comma-separated parts to run")
	lcdPath  = flag.String("lcd", "", "an lcd binary to measure instead of one built from ./cmd/lcd")
	agingP   = flag.Int("aging-priority", 3, "priority of the stream that the priority-0 waiter ages past")
	waiting  = flag.Int("waiting", 10_000, "waiting sessions of the waiting part")
	samples  = flag.Int("samples", 2000, "acquires per measure and round of the waiting part")
)

// ttl is the TTL of every session here: long, so that keepalive pings
// (a third of it) stay out of the figures.
const ttl = 5 * time.Minute

func main() {
	flag.Parse()
	log.SetFlags(0)
	bin := *lcdPath
	if bin == "" {
		dir, err := os.MkdirTemp("", "lc-modes")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		bin = filepath.Join(dir, "lcd")
		proc.Build("", bin, "./cmd/lcd")
	}
	parts := strings.Split(*only, ",")
	fmt.Printf("# Lock modes, %s, %d rounds, rw and semaphore rounds of %v\n\n",
		time.Now().UTC().Format(time.RFC3339), *rounds, *duration)
	if slices.Contains(parts, "rw") {
		readersWriter(bin)
	}
	if slices.Contains(parts, "semaphore") {
		semaphore(bin)
	}
	if slices.Contains(parts, "aging") {
		aging(bin)
	}
	if slices.Contains(parts, "waiting") {
		waitingSessions(bin)
	}
}

// --- lcd ---

// lcd is a running lcd.
type lcd struct {
	cmd  *exec.Cmd
	addr string
}

// start prepares bin to run on free ports of 127.0.0.1, without the HTTP
// API (nothing here measures it, and its port is not picked free).
func start(bin string) *lcd {
	ports := proc.FreeAddrs(3)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "BIND_ADDRESS="+ports[0], "MANAGER_ADDRESS="+ports[1],
		"METRICS_ADDRESS="+ports[2], "HTTP_ADDRESS=", "LOG_LEVEL=warn", "SESSION_TTL_MAX="+ttl.String())
	cmd.Stderr = os.Stderr
	return &lcd{cmd: cmd, addr: ports[0]}
}

// run starts lcd and waits until it serves sessions.
func (l *lcd) run() *lcd {
	if err := l.cmd.Start(); err != nil {
		log.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		s, err := lockingcenter.NewSession(context.Background(), l.addr)
		if err == nil {
			s.Close()
			return l
		}
		if time.Now().After(deadline) {
			log.Fatalf("lcd never served %s: %v", l.addr, err)
		}
	}
}

func (l *lcd) stop() {
	l.cmd.Process.Kill()
	l.cmd.Wait()
}

// open opens n sessions named prefix-i.
func (l *lcd) open(n int, prefix string) []*lockingcenter.Session {
	out := make([]*lockingcenter.Session, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s, err := lockingcenter.NewSession(context.Background(), l.addr,
				lockingcenter.WithSource(fmt.Sprintf("%s-%d", prefix, i)), lockingcenter.WithTTL(ttl))
			if err != nil {
				log.Fatal(err)
			}
			out[i] = s
		}()
	}
	wg.Wait()
	return out
}

// closeAll closes ss, 32 at a time.
func closeAll(ss []*lockingcenter.Session) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for _, s := range ss {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			s.Close()
		}()
	}
	wg.Wait()
}

// --- figures ---

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// percentile returns the q-quantile (0..1) of ds, sorted in place.
func percentile(ds []time.Duration, q float64) time.Duration {
	slices.Sort(ds)
	if len(ds) == 0 {
		return 0
	}
	return ds[min(int(q*float64(len(ds))), len(ds)-1)]
}

func us(d float64) string { return fmt.Sprintf("%.0f", d/float64(time.Microsecond)) }

// medians runs f *rounds times and returns the median of each figure.
func medians(f func() []float64) []float64 {
	var all [][]float64
	for range *rounds {
		all = append(all, f())
	}
	out := make([]float64, len(all[0]))
	for i := range out {
		col := make([]float64, len(all))
		for r := range all {
			col[r] = all[r][i]
		}
		out[i] = median(col)
	}
	return out
}

// --- rw ---

func readersWriter(bin string) {
	const readers = 16
	m := medians(func() []float64 {
		l := start(bin).run()
		defer l.stop()
		rs, w := l.open(readers, "reader"), l.open(1, "writer")[0]
		defer closeAll(rs)
		defer w.Close()
		ctx, cancel := context.WithTimeout(context.Background(), *duration)
		defer cancel()
		var readCycles atomic.Int64
		var wg sync.WaitGroup
		for _, r := range rs {
			cycles(&wg, func() (*lockingcenter.Lock, error) { return r.Acquire(ctx, "rw", lockingcenter.Shared()) },
				0, nil, &readCycles)
		}
		var waits []time.Duration
		for {
			t0 := time.Now()
			lock, err := w.Acquire(ctx, "rw")
			if err != nil {
				break
			}
			waits = append(waits, time.Since(t0))
			lock.Release()
		}
		wg.Wait()
		secs := duration.Seconds()
		return []float64{float64(readCycles.Load()) / secs, float64(len(waits)) / secs,
			float64(percentile(waits, 0.5)), float64(percentile(waits, 0.99))}
	})
	fmt.Println("## 16 readers and 1 writer on one key")
	fmt.Println()
	fmt.Println("| reader cycles/s | writer cycles/s | writer wait p50 µs | writer wait p99 µs |")
	fmt.Println("|---:|---:|---:|---:|")
	fmt.Printf("| %.0f | %.0f | %s | %s |\n\n", m[0], m[1], us(m[2]), us(m[3]))
}

// --- semaphore ---

func semaphore(bin string) {
	const sessions, places = 16, 4
	fmt.Println("## A semaphore of 4, 16 sessions")
	fmt.Println()
	fmt.Println("| next request sent | each holds | cycles/s | min cycles per session | max cycles per session |")
	fmt.Println("|---|---:|---:|---:|---:|")
	for _, row := range []struct {
		before bool
		hold   time.Duration
	}{{false, 0}, {true, 0}, {true, time.Millisecond}} {
		m := medians(func() []float64 {
			l := start(bin).run()
			defer l.stop()
			var counts []int
			if row.before {
				counts = semaphoreRaw(l.addr, sessions, places, row.hold)
			} else {
				counts = semaphoreClient(l, sessions, places)
			}
			total := 0
			for _, n := range counts {
				total += n
			}
			return []float64{float64(total) / duration.Seconds(), float64(slices.Min(counts)), float64(slices.Max(counts))}
		})
		mode := "after its release"
		if row.before {
			mode = "before its release"
		}
		fmt.Printf("| %s | %v | %.0f | %.0f | %.0f |\n", mode, row.hold, m[0], m[1], m[2])
	}
	fmt.Println()
}

// semaphoreClient cycles with the Semaphore API: Acquire, Release, again.
func semaphoreClient(l *lcd, sessions, places int) []int {
	ss := l.open(sessions, "sem")
	defer closeAll(ss)
	stop := stopAfter(*duration)
	ctx, cancel := context.WithTimeout(context.Background(), *duration+time.Second)
	defer cancel()
	n := make([]atomic.Int64, sessions)
	var wg sync.WaitGroup
	for i, s := range ss {
		m := lockingcenter.NewSemaphore(s, "sem", uint32(places))
		cycles(&wg, func() (*lockingcenter.Lock, error) { return m.Acquire(ctx) }, 0, stop, &n[i])
	}
	wg.Wait()
	counts := make([]int, sessions)
	for i := range n {
		counts[i] = int(n[i].Load())
	}
	return counts
}

// cycles acquires (with acquire), holds for hold and releases, over and
// over in a goroutine of wg, until acquire fails or stop (when not nil)
// is set; it counts the grants in n, those that come after stop aside.
func cycles(wg *sync.WaitGroup, acquire func() (*lockingcenter.Lock, error), hold time.Duration, stop *atomic.Bool,
	n *atomic.Int64) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			lock, err := acquire()
			if err != nil || stop != nil && stop.Load() {
				return
			}
			n.Add(1)
			time.Sleep(hold)
			lock.Release()
		}
	}()
}

// stopAfter returns a flag set d from now. Semaphore rounds count the
// grants that arrive before it: once one session stops, the others would
// go round without it.
func stopAfter(d time.Duration) *atomic.Bool {
	var stop atomic.Bool
	time.AfterFunc(d, func() { stop.Store(true) })
	return &stop
}

// semaphoreRaw cycles with raw frames, each session sending the ACQUIRE
// of its next place and the RELEASE of the one it holds in one write.
func semaphoreRaw(addr string, sessions, places int, hold time.Duration) []int {
	counts := make([]int, sessions)
	conns := make([]*raw, sessions)
	for i := range conns {
		c, err := dialRaw(addr, fmt.Sprintf("raw-%d", i))
		if err != nil {
			log.Fatal(err)
		}
		defer c.close()
		conns[i] = c
	}
	stop := stopAfter(*duration)
	end := time.Now().Add(*duration + time.Second)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.nc.SetReadDeadline(end)
			acquire := func(b []byte) []byte {
				return c.frame(b, session.TypeAcquire, strField(session.TagKey, "sem"), u32Field(session.TagLimit, uint32(places)))
			}
			want := c.id + 1
			if err := c.write(acquire(nil)); err != nil {
				return
			}
			token, err := c.granted(want)
			if err != nil {
				return
			}
			for !stop.Load() {
				counts[i]++
				if hold > 0 {
					time.Sleep(hold)
				}
				want = c.id + 1
				b := acquire(nil)
				b = c.frame(b, session.TypeRelease, strField(session.TagKey, "sem"), u64Field(session.TagToken, token))
				if err := c.write(b); err != nil {
					return
				}
				if token, err = c.granted(want); err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	return counts
}

// raw is a session of the session protocol spoken frame by frame.
type raw struct {
	nc net.Conn
	r  *bufio.Reader
	id uint64
}

func dialRaw(addr, name string) (*raw, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &raw{nc: nc, r: bufio.NewReader(nc)}
	b := c.frame([]byte(session.Preface), session.TypeHello, strField(session.TagName, name),
		u32Field(session.TagTTL, uint32(ttl/time.Millisecond)))
	if err := c.write(b); err != nil {
		return nil, err
	}
	if f, err := c.read(); err != nil || f.Type != session.TypeWelcome {
		return nil, fmt.Errorf("HELLO: %v %v", f.Type, err)
	}
	return c, nil
}

func (c *raw) close() { c.nc.Close() }

type rawField struct {
	tag   session.Tag
	value []byte
}

func strField(t session.Tag, v string) rawField { return rawField{t, []byte(v)} }
func u32Field(t session.Tag, v uint32) rawField {
	return rawField{t, binary.BigEndian.AppendUint32(nil, v)}
}
func u64Field(t session.Tag, v uint64) rawField {
	return rawField{t, binary.BigEndian.AppendUint64(nil, v)}
}

// frame appends a frame with the next request id to b.
func (c *raw) frame(b []byte, t session.Type, fields ...rawField) []byte {
	c.id++
	at := len(b)
	b = append(b, 0, 0, 0, 0, byte(t))
	b = binary.BigEndian.AppendUint64(b, c.id)
	for _, f := range fields {
		b = append(b, byte(f.tag))
		b = binary.BigEndian.AppendUint16(b, uint16(len(f.value)))
		b = append(b, f.value...)
	}
	binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
	return b
}

func (c *raw) write(b []byte) error {
	_, err := c.nc.Write(b)
	return err
}

func (c *raw) read() (session.Frame, error) {
	var head [4]byte
	if _, err := io.ReadFull(c.r, head[:]); err != nil {
		return session.Frame{}, err
	}
	b := make([]byte, 4+binary.BigEndian.Uint32(head[:]))
	copy(b, head[:])
	if _, err := io.ReadFull(c.r, b[4:]); err != nil {
		return session.Frame{}, err
	}
	var f session.Frame
	_, err := session.ParseFrame(b, &f)
	return f, err
}

// granted reads frames until the GRANTED of request id and returns its
// token.
func (c *raw) granted(id uint64) (uint64, error) {
	for {
		f, err := c.read()
		if err != nil {
			return 0, err
		}
		switch {
		case f.Type == session.TypeGranted && f.ID == id:
			token, _ := f.Uint(session.TagToken)
			return token, nil
		case f.Type == session.TypeRefused || f.Type == session.TypeGoodbye:
			code, _ := f.Uint(session.TagCode)
			return 0, fmt.Errorf("frame %#02x of %d: code %d", uint8(f.Type), f.ID, code)
		}
	}
}

// --- aging ---

func aging(bin string) {
	const hold, stream = 100 * time.Millisecond, 3
	p := int32(*agingP)
	m := medians(func() []float64 {
		l := start(bin).run()
		defer l.stop()
		ss := l.open(2+stream, "aging")
		defer closeAll(ss)
		holder, low, high := ss[0], ss[1], ss[2:]
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		first, err := holder.Acquire(ctx, "aging")
		if err != nil {
			log.Fatal(err)
		}
		t0 := time.Now()
		served := make(chan time.Duration, 1)
		go func() {
			lock, err := low.Acquire(ctx, "aging")
			if err != nil {
				log.Fatal(err)
			}
			served <- time.Since(t0)
			lock.Release()
		}()
		waitQueue(holder, "aging", 1)
		var grants atomic.Int64
		var wg sync.WaitGroup
		for _, s := range high {
			cycles(&wg, func() (*lockingcenter.Lock, error) { return s.Acquire(ctx, "aging", lockingcenter.WithPriority(p)) },
				hold, nil, &grants)
		}
		waitQueue(holder, "aging", 1+stream)
		first.Release()
		wait := <-served
		others := grants.Load()
		cancel()
		wg.Wait()
		return []float64{float64(wait), float64(others)}
	})
	bound := time.Duration(*agingP) * time.Second
	fmt.Printf("## Priority aging: a priority-0 waiter behind a stream of priority %d\n\n", *agingP)
	fmt.Println("| holders ahead of it | served after s | bound s | each holds |")
	fmt.Println("|---:|---:|---:|---:|")
	fmt.Printf("| %.0f | %.2f | %.0f (+ one hold) | %v |\n\n", m[1], time.Duration(m[0]).Seconds(), bound.Seconds(), hold)
}

// waitQueue waits until n requests wait for key.
func waitQueue(s *lockingcenter.Session, key string, n int) {
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		info, err := s.Describe(context.Background(), key)
		if err != nil {
			log.Fatal(err)
		}
		if info.Queue == n {
			return
		}
		if time.Now().After(deadline) {
			log.Fatalf("%s: %d waiting, want %d", key, info.Queue, n)
		}
	}
}

// --- waiting ---

func waitingSessions(bin string) {
	fmt.Printf("## Acquire latency beside %d waiting sessions\n\n", *waiting)
	fmt.Println("The acquiring session holds a key, so every acquire that would wait runs the deadlock check.")
	fmt.Println()
	fmt.Println("| other sessions waiting | acquire of a free key p50 µs | p99 µs | refused deadlock p50 µs | p99 µs | sessions in the cycle |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|")
	for _, n := range []int{1, *waiting} {
		m := medians(func() []float64 {
			l := start(bin).run()
			defer l.stop()
			me, ss := chain(l, n)
			defer closeAll(append(ss, me))
			free, refused := make([]time.Duration, *samples), make([]time.Duration, *samples)
			ctx := context.Background()
			for i := range *samples {
				t0 := time.Now()
				lock, err := me.Acquire(ctx, "free")
				free[i] = time.Since(t0)
				if err != nil {
					log.Fatal(err)
				}
				lock.Release()
				t0 = time.Now()
				_, err = me.Acquire(ctx, "chain/0", sessionOwner)
				refused[i] = time.Since(t0)
				if !errors.Is(err, lockingcenter.ErrDeadlock) {
					log.Fatalf("the acquire that closes the cycle: %v", err)
				}
			}
			return []float64{float64(percentile(free, 0.5)), float64(percentile(free, 0.99)),
				float64(percentile(refused, 0.5)), float64(percentile(refused, 0.99)), float64(n + 1)}
		})
		fmt.Printf("| %d | %s | %s | %s | %s | %.0f |\n", n, us(m[0]), us(m[1]), us(m[2]), us(m[3]), m[4])
	}
	fmt.Println()
}

// chain sets up n sessions, session i holding chain/i and waiting for
// chain/i+1, and returns the session the figures come from, which holds
// chain/n: its acquire of chain/0 would wait for session 0, which waits
// for 1, …, which waits for it. It returns the n sessions too.
// sessionOwner makes every acquire of a session one owner, so that a
// session that holds a key and waits for another is one node of the
// server's graph of waits (without it each acquire is an owner of its own).
var sessionOwner = lockingcenter.WithOwner("session")

func chain(l *lcd, n int) (*lockingcenter.Session, []*lockingcenter.Session) {
	me := l.open(1, "me")[0]
	ctx := context.Background()
	ss := l.open(n, "chain")
	for i, s := range ss {
		if _, err := s.Acquire(ctx, "chain/"+strconv.Itoa(i), sessionOwner); err != nil {
			log.Fatal(err)
		}
	}
	if _, err := me.Acquire(ctx, "chain/"+strconv.Itoa(n), sessionOwner); err != nil {
		log.Fatal(err)
	}
	for i, s := range ss {
		go s.Acquire(ctx, "chain/"+strconv.Itoa(i+1), sessionOwner) // waits until the session closes
	}
	for i := range ss {
		waitQueue(me, "chain/"+strconv.Itoa(i+1), 1)
	}
	return me, ss
}
