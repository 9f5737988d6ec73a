package main

import (
	"encoding/binary"
	"fmt"
	"log"
	"net"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/locking-center/locking-center/internal/bench/frame"
	"github.com/locking-center/locking-center/session"
)

// sessionConn is one connection of the session protocol carrying one
// session, as the benchmark's clients use it: frames are written whole and
// read one at a time.
type sessionConn struct {
	c         net.Conn
	r         *frame.Reader
	id        uint64        // request id last used
	keepalive time.Duration // from WELCOME
}

// dialSession connects to addr, opens a session named name and reads its
// WELCOME. bufSize is the read buffer: small for the memory figures,
// where thousands of sessions are open.
func dialSession(addr, name string, bufSize int) (*sessionConn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &sessionConn{c: c, r: frame.NewReader(c, bufSize), id: 1}
	if err := s.write(frame.Append([]byte(session.Preface), session.TypeHello, s.id, frame.Str(session.TagName, name))); err != nil {
		c.Close()
		return nil, err
	}
	f, err := s.expect(session.TypeWelcome, s.id)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("hello: %w", err)
	}
	s.keepalive = time.Duration(frame.Uint(f, session.TagKeepalive)) * time.Millisecond
	return s, nil
}

func (s *sessionConn) write(b []byte) error {
	_, err := s.c.Write(b)
	return err
}

// read reads the next frame; its fields are valid until the next read.
func (s *sessionConn) read() (*session.Frame, error) { return s.r.Next() }

// expect reads the next frame and fails unless it is of type t answering
// id.
func (s *sessionConn) expect(t session.Type, id uint64) (*session.Frame, error) {
	f, err := s.read()
	if err != nil {
		return nil, err
	}
	if f.Type != t || f.ID != id {
		return nil, unexpected(f, t, id)
	}
	return f, nil
}

// unexpected describes a frame other than the one wanted.
func unexpected(f *session.Frame, t session.Type, id uint64) error {
	msg, _ := f.Get(session.TagMessage)
	return fmt.Errorf("frame %#02x id %d (code %v %q), want %#02x id %d", uint8(f.Type), f.ID,
		session.Code(frame.Uint(f, session.TagCode)), msg, uint8(t), id)
}

// end sends CLOSE, waits for the server to close and closes.
func (s *sessionConn) end() {
	s.id++
	if s.write(frame.Append(nil, session.TypeClose, s.id)) == nil {
		for {
			if _, err := s.read(); err != nil {
				break
			}
		}
	}
	s.c.Close()
}

// sessionCycler runs ACQUIRE and RELEASE of one key of its own, one
// request at a time, on a session. The frames are encoded once; each
// cycle writes its ids and token into them.
type sessionCycler struct {
	s        *sessionConn
	acquire  []byte
	release  []byte
	tokenPos int
}

func newSessionCycler(addr, name, key string) (*sessionCycler, error) {
	s, err := dialSession(addr, name, 512)
	if err != nil {
		return nil, err
	}
	release := frame.Append(nil, session.TypeRelease, 0, frame.Str(session.TagKey, key), frame.U64(session.TagToken, 0))
	return &sessionCycler{s: s,
		acquire:  frame.Append(nil, session.TypeAcquire, 0, frame.Str(session.TagKey, key)),
		release:  release,
		tokenPos: len(release) - 8,
	}, nil
}

func (c *sessionCycler) cycle() error {
	s := c.s
	s.id++
	frame.SetID(c.acquire, s.id)
	if err := s.write(c.acquire); err != nil {
		return err
	}
	f, err := s.expect(session.TypeGranted, s.id)
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	s.id++
	frame.SetID(c.release, s.id)
	binary.BigEndian.PutUint64(c.release[c.tokenPos:], frame.Uint(f, session.TagToken))
	if err := s.write(c.release); err != nil {
		return err
	}
	if _, err := s.expect(session.TypeOK, s.id); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// sessionClients opens the clients of a throughput round on a server of
// the session protocol: each its own session, connection and key.
func sessionClients(addr string) func(i int) (func() error, func()) {
	return func(i int) (func() error, func()) {
		c, err := newSessionCycler(addr, "bench-"+strconv.Itoa(i), "bench/"+strconv.Itoa(i))
		if err != nil {
			log.Fatalf("%s: %v", addr, err)
		}
		return c.cycle, c.s.end
	}
}

// sessionThroughput measures uncontended ACQUIRE+RELEASE cycles on lcd's
// session protocol beside a Redis server's usual lock and beside the
// floor of the session protocol, in alternating rounds of one run; with
// beforeBin, also beside that lcd, in the same rounds.
func sessionThroughput(lcdBin, floorBin, redisBin, beforeBin string) {
	// lcd as it is run: with its defaults, the HTTP API on.
	lcd, floor := startLCDWith(lcdBin, true), startFloor(floorBin, "-session")
	defer lcd.stop()
	defer floor.stop()
	redis := startRedis(redisBin)
	if redis != nil {
		defer redis.stop()
	}
	var before *server
	if beforeBin != "" {
		before = startLCDWith(beforeBin, true)
		defer before.stop()
	}
	// Rows of the tables, printed once every client count has run.
	var main, vsBefore []string
	for _, clients := range cycleClients {
		var fr, rr, lr, br, fc, rc, lc, bc []float64
		for range *rounds {
			// Alternate the servers so that drift in the machine's load
			// falls on all of them.
			f := driveWith(floor, clients, sessionClients(floor.addr))
			fr, fc = append(fr, f.perSec), append(fc, us(f.cpuCycle))
			if redis != nil {
				r := driveWith(redis, clients, redisClients(redis))
				rr, rc = append(rr, r.perSec), append(rc, us(r.cpuCycle))
			}
			l := driveWith(lcd, clients, sessionClients(lcd.addr))
			lr, lc = append(lr, l.perSec), append(lc, us(l.cpuCycle))
			if before != nil {
				b := driveWith(before, clients, sessionClients(before.addr))
				br, bc = append(br, b.perSec), append(bc, us(b.cpuCycle))
			}
		}
		if *pprofDir != "" {
			profileCycles(lcd, "lcd", clients)
			if before != nil {
				profileCycles(before, "before", clients)
			}
		}
		main = append(main, fmt.Sprintf("| %d | %.0f | %s | %.0f | %s | %.3f | %.1f | %s | %.1f | %s | %.3f |", clients,
			median(fr), medianOr(rr, "%.0f"), median(lr), ratioOr(lr, rr, "%.3f"), median(ratios(lr, fr)),
			median(fc), medianOr(rc, "%.1f"), median(lc), ratioOr(lc, rc, "%.3f"), median(ratios(lc, fc))))
		if before != nil {
			vsBefore = append(vsBefore, beforeRow(clients, br, lr, bc, lc))
		}
	}
	fmt.Println("## Uncontended acquire+release on sessions, lcd beside Redis and the session floor")
	fmt.Println()
	fmt.Println("| clients | floor cycles/s | redis cycles/s | lcd cycles/s | lcd/redis | lcd/floor | floor CPU µs/cycle | redis CPU µs/cycle | lcd CPU µs/cycle | lcd/redis CPU | lcd/floor CPU |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	fmt.Println(strings.Join(main, "\n"))
	fmt.Println()
	if before != nil {
		beforeTable("Uncontended acquire+release on sessions, lcd beside "+beforeBin, "", vsBefore)
	}
}

// beforeRow is a row of beforeTable: the medians of the cycles/s and CPU
// per cycle of before (b) and lcd (l), and of their ratios per round.
func beforeRow(clients int, br, lr, bc, lc []float64) string {
	return fmt.Sprintf("| %d | %.0f | %.0f | %.3f | %.1f | %.1f | %.3f |", clients,
		median(br), median(lr), median(ratios(lr, br)), median(bc), median(lc), median(ratios(lc, bc)))
}

// beforeTable prints the rows of beforeRow under title; what names the
// cycles ("HTTP ", or "").
func beforeTable(title, what string, rows []string) {
	fmt.Printf("## %s (same rounds)\n\n", title)
	fmt.Printf("| clients | before %scycles/s | lcd %scycles/s | lcd/before | before CPU µs/cycle | lcd CPU µs/cycle | lcd/before CPU |\n", what, what)
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|")
	fmt.Println(strings.Join(rows, "\n"))
	fmt.Println()
}

// profileCycles drives clients cycling sessions on s for one more round,
// -pprof-duration long, under a CPU profile written to -pprof's directory.
func profileCycles(s *server, name string, clients int) {
	file := filepath.Join(*pprofDir, fmt.Sprintf("session-%s-%d.pprof", name, clients))
	wait := s.profile(*pprofFor, file)
	time.Sleep(100 * time.Millisecond) // the profile has begun
	r := driveFor(*pprofFor, s, clients, sessionClients(s.addr))
	wait()
	log.Printf("profile of %s at %d clients (%.0f cycles/s, %.1f µs CPU/cycle): %s", name, clients, r.perSec, us(r.cpuCycle), file)
}

// cycleClients are the client counts of session-throughput.
var cycleClients = []int{1, 16, 64}

// ratios returns a[i]/b[i]: ratios are taken per round, then the median.
func ratios(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] / b[i]
	}
	return out
}

// medianOr formats the median of xs, or "–" when there are none (a
// server that was not run).
func medianOr(xs []float64, format string) string {
	if len(xs) == 0 {
		return "–"
	}
	return fmt.Sprintf(format, median(xs))
}

// ratioOr formats the median of the per-round ratios of a to b, or "–".
func ratioOr(a, b []float64, format string) string {
	if len(b) == 0 {
		return "–"
	}
	return medianOr(ratios(a, b), format)
}

// sessionHotKey runs sessions on one key of lcd, and of the lcd of
// beforeBin when it is given.
func sessionHotKey(lcdBin, floorBin, beforeBin string) {
	fmt.Println("## One hot key on sessions")
	fmt.Println()
	fmt.Println("| server | sessions | cycles/s | min cycles per session | max cycles per session | handoff p50 µs | handoff p90 µs | handoff p99 µs |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|")
	// The p50s of each round, by client count, for the ratios below.
	var summary []string
	for _, clients := range hotClients {
		var fp, lp, bp []float64
		for range *rounds {
			floor := startFloor(floorBin, "-session", "-queue")
			fp = append(fp, sessionHotKeyRound(floor, "floor", clients))
			floor.stop()
			for _, bin := range []string{lcdBin, beforeBin} {
				if bin == "" {
					continue
				}
				lcd := startLCDWith(bin, true)
				p50 := sessionHotKeyRound(lcd, label(bin, beforeBin), clients)
				lcd.stop()
				if bin == beforeBin {
					bp = append(bp, p50)
				} else {
					lp = append(lp, p50)
				}
			}
		}
		summary = append(summary, fmt.Sprintf("| %d | %.0f | %.0f | %.3f | %s | %s |", clients, median(fp), median(lp),
			median(ratios(lp, fp)), medianOr(bp, "%.0f"), ratioOr(bp, fp, "%.3f")))
	}
	fmt.Println()
	fmt.Printf("Handoff p50, medians of %d rounds (ratios taken per round):\n\n", *rounds)
	fmt.Println("| sessions | floor p50 µs | lcd p50 µs | lcd/floor | before p50 µs | before/floor |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|")
	fmt.Println(strings.Join(summary, "\n"))
	fmt.Println()
}

// label names the lcd of bin in a table: "before" for -before's.
func label(bin, beforeBin string) string {
	if bin == beforeBin {
		return "before"
	}
	return "lcd"
}

// handoffs pairs each grant of the hot key with the release that caused
// it: the holder of grant g publishes the time its RELEASE was written as
// release g, and the next holder, which reads grant g+1, waits for it.
// Only one session holds the key at a time, so the grants are counted in
// order; a slot is reused only after ring more grants.
type handoffs struct {
	grants atomic.Int64
	ring   [4096]struct{ seq, at atomic.Int64 }
}

// publish records at as the time of release g.
func (h *handoffs) publish(g, at int64) {
	slot := &h.ring[g%int64(len(h.ring))]
	slot.at.Store(at)
	slot.seq.Store(g + 1)
}

// releasedAt waits until release g is published and returns its time; it
// is published right after its write returns, maybe a moment after the
// grant it caused was read.
func (h *handoffs) releasedAt(g int64) int64 {
	slot := &h.ring[g%int64(len(h.ring))]
	for slot.seq.Load() != g+1 {
		runtime.Gosched()
	}
	return slot.at.Load()
}

// sessionHotKeyRound runs clients sessions on one key for one round,
// prints its row and returns its handoff p50. Each
// holder writes its next ACQUIRE and its RELEASE in one write, in that
// order: the acquire (of the session's other owner) queues behind the
// session's own lock, so the session is never absent from the queue and
// strict FIFO gives every session the same number of cycles, within one.
func sessionHotKeyRound(lcd *server, name string, clients int) (p50 float64) {
	key := "hot/" + strconv.Itoa(clients)
	starter, err := dialSession(lcd.addr, "starter", 512)
	if err != nil {
		log.Fatalf("starter: %v", err)
	}
	starter.id++
	if err := starter.write(frame.Append(nil, session.TypeAcquire, starter.id, frame.Str(session.TagKey, key))); err != nil {
		log.Fatal(err)
	}
	f, err := starter.expect(session.TypeGranted, starter.id)
	if err != nil {
		log.Fatalf("starter: %v", err)
	}
	starterToken := frame.Uint(f, session.TagToken)

	var stop atomic.Bool
	var h handoffs
	origin := time.Now() // the times published count from it
	counts := make([]int, clients)
	var mu sync.Mutex
	var all []float64
	conns := make([]*sessionConn, clients)
	for i := range conns {
		if conns[i], err = dialSession(lcd.addr, "hot-"+strconv.Itoa(i), 512); err != nil {
			log.Fatal(err)
		}
		conns[i].id++
		first := hotAcquire(key, "a")
		frame.SetID(first, conns[i].id)
		if err := conns[i].write(first); err != nil {
			log.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i, s := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local []float64
			if err := hotSession(s, key, &h, &stop, origin, &local, &counts[i]); err != nil {
				log.Fatalf("hot session %d: %v", i, err)
			}
			mu.Lock()
			all = append(all, local...)
			mu.Unlock()
		}()
	}
	waitQueued(starter, key, clients)
	start := time.Now()
	starter.id++
	if err := starter.write(frame.Append(nil, session.TypeRelease, starter.id, frame.Str(session.TagKey, key), frame.U64(session.TagToken, starterToken))); err != nil {
		log.Fatal(err)
	}
	h.publish(0, time.Since(origin).Nanoseconds())
	if _, err := starter.expect(session.TypeOK, starter.id); err != nil {
		log.Fatalf("starter's release: %v", err)
	}
	starter.end()
	elapsed := runRound(*duration, start, &stop, &wg)
	slices.Sort(all)
	fmt.Printf("| %s | %d | %.0f | %d | %d | %.0f | %.0f | %.0f |\n", name, clients, float64(sum(counts))/elapsed.Seconds(),
		slices.Min(counts), slices.Max(counts), percentile(all, 0.5), percentile(all, 0.9), percentile(all, 0.99))
	return percentile(all, 0.5)
}

// hotSession is one session of a hot-key round, its first ACQUIRE parked
// already: it takes each grant, then asks again and releases in one write,
// until stop; then it releases and closes. Each handoff, in µs from the
// RELEASE's write that caused a grant to the grant's read, goes to
// samples; count counts the grants.
func hotSession(s *sessionConn, key string, h *handoffs, stop *atomic.Bool, origin time.Time, samples *[]float64, count *int) error {
	acquireID := s.id
	// Successive acquires name two owners in turn: the next one waits for
	// the lock of the other owner of the same session. (An owner asking
	// again for a key it holds is refused deadlock.)
	owners := [2][]byte{hotAcquire(key, "a"), hotAcquire(key, "b")}
	release := frame.Append(nil, session.TypeRelease, 0, frame.Str(session.TagKey, key), frame.U64(session.TagToken, 0))
	closeFrame := frame.Append(nil, session.TypeClose, 0)
	next := make([]byte, 0, len(owners[0])+len(release)+len(closeFrame))
	for {
		f, err := s.read()
		if err != nil {
			return err
		}
		switch {
		case f.Type == session.TypeOK:
			continue // a release's
		case f.Type != session.TypeGranted || f.ID != acquireID:
			return unexpected(f, session.TypeGranted, acquireID)
		}
		now := time.Since(origin).Nanoseconds()
		g := h.grants.Add(1)
		*samples = append(*samples, float64(now-h.releasedAt(g-1))/1e3)
		*count++
		binary.BigEndian.PutUint64(release[len(release)-8:], frame.Uint(f, session.TagToken))
		done := stop.Load()
		if done {
			s.id++
			frame.SetID(release, s.id)
			s.id++
			frame.SetID(closeFrame, s.id)
			next = append(append(next[:0], release...), closeFrame...)
		} else {
			acquire := owners[*count%2]
			s.id++
			acquireID = s.id
			frame.SetID(acquire, s.id)
			s.id++
			frame.SetID(release, s.id)
			next = append(append(next[:0], acquire...), release...)
		}
		if err := s.write(next); err != nil {
			return err
		}
		h.publish(g, time.Since(origin).Nanoseconds())
		if done {
			for {
				if _, err := s.read(); err != nil {
					s.c.Close()
					return nil
				}
			}
		}
	}
}

// hotAcquire is an ACQUIRE of key, waiting for ever, by owner.
func hotAcquire(key, owner string) []byte {
	return frame.Append(nil, session.TypeAcquire, 0, frame.Str(session.TagKey, key), frame.Str(session.TagOwner, owner))
}

// waitQueued polls DESCRIBE of key on s until n requests wait for it.
func waitQueued(s *sessionConn, key string, n int) {
	describe := frame.Append(nil, session.TypeDescribe, 0, frame.Str(session.TagKey, key))
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if err := s.write(describe); err != nil {
			log.Fatal(err)
		}
		f, err := s.expect(session.TypeInfo, 0)
		if err != nil {
			log.Fatalf("describe %s: %v", key, err)
		}
		if q := frame.Uint(f, session.TagQueue); q == uint64(n) {
			return
		} else if time.Now().After(deadline) {
			log.Fatalf("%s: %d requests queued, want %d", key, q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// idleSession is a session that only keeps itself alive: it PINGs every
// keepalive_ms, starting at phase, and reads the OK, until its connection
// is closed. pings counts the pings answered.
func idleSession(s *sessionConn, phase time.Duration, pings *atomic.Int64) {
	ping := frame.Append(nil, session.TypePing, 0)
	next := time.Now().Add(phase)
	for {
		time.Sleep(time.Until(next))
		next = next.Add(s.keepalive)
		if s.write(ping) != nil {
			return
		}
		f, err := s.read()
		if err != nil {
			return
		}
		if f.Type != session.TypeOK {
			log.Fatal(unexpected(f, session.TypeOK, 0))
		}
		pings.Add(1)
	}
}

// sessionMemory measures the RSS per idle session and the CPU that the
// keepalives of idle sessions cost, on the session floor, on lcd and on
// the lcd of beforeBin when it is given; and lcd's RSS per parked request.
func sessionMemory(lcdBin, floorBin, beforeBin string) {
	fmt.Println("## Sessions: memory (RSS) and keepalive CPU")
	fmt.Println()
	fmt.Println("| server | what | count | RSS before | RSS after | bytes each | Go heap in use, bytes each | Go stacks, bytes each |")
	fmt.Println("|---|---|---:|---:|---:|---:|---:|---:|")
	var keep []string
	floor := startFloor(floorBin, "-session")
	conns, _, k := idleSessions(floor, "floor")
	keep = append(keep, k)
	closeAll(conns)
	floor.stop()
	for _, bin := range []string{lcdBin, beforeBin} {
		if bin != "" {
			keep = append(keep, lcdMemory(bin, label(bin, beforeBin)))
		}
	}
	fmt.Println()
	fmt.Println("| server | idle sessions | keepalive | pings/s | CPU, % of one core | CPU µs per ping | sessions expired |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|")
	fmt.Println(strings.Join(keep, "\n"))
	fmt.Println()
}

// idleSessions opens -sessions sessions on s that PING every
// keepalive_ms, prints the RSS they cost at once and after
// -keepalive-window, and returns them, the memory after the window, and
// the row of the keepalives' CPU over that window.
func idleSessions(s *server, name string) ([]*sessionConn, memPoint, string) {
	n := *sessions
	base := s.memory(true) // the scrape of an empty table leaves next to nothing
	var pings atomic.Int64
	conns := openSessions(s.addr, n, "idle-", &pings)
	opened := s.memory(false)
	cpu0, p0, t0 := s.cpuTime(), pings.Load(), time.Now()
	time.Sleep(*keepaliveWindow)
	cpu, p, elapsed := s.cpuTime()-cpu0, pings.Load()-p0, time.Since(t0)
	settled := s.memory(true)
	memoryRow(name, "idle session, just opened", n, base, opened)
	memoryRow(name, fmt.Sprintf("idle session, after %v of keepalives", *keepaliveWindow), n, base, settled)
	expired := "–"
	if settled.goStats {
		expired = fmt.Sprintf("%.0f", settled.expiries)
	}
	return conns, settled, fmt.Sprintf("| %s | %d | %v | %.0f | %.2f | %.1f | %s |", name, n, conns[0].keepalive, float64(p)/elapsed.Seconds(),
		100*cpu.Seconds()/elapsed.Seconds(), us(cpu)/float64(max(p, 1)), expired)
}

// lcdMemory measures the lcd of bin: idle sessions, then one parked
// request on each of them, then 100 sessions with 100 parked requests
// each, in a fresh lcd. It returns the row of the keepalives' CPU.
func lcdMemory(bin, name string) string {
	lcd := startLCDWith(bin, true)
	conns, settled, keep := idleSessions(lcd, name)
	// Each session parks one acquire on one of 100 keys a holder keeps.
	const keys = 100
	holder := holdKeys(lcd.addr, keys)
	before := lcd.memory(false)
	for i, s := range conns {
		s.id++
		acquire := frame.Append(nil, session.TypeAcquire, s.id, frame.Str(session.TagKey, "parked/"+strconv.Itoa(i%keys)))
		if err := s.write(acquire); err != nil {
			log.Fatal(err)
		}
	}
	for k := range keys {
		waitQueued(holder, "parked/"+strconv.Itoa(k), (len(conns)+keys-1-k)/keys)
	}
	// The Go figures count from the scrape after the keepalives: a scrape
	// here, of 10,000 sessions, would leave garbage in the RSS after.
	before.heap, before.stacks, before.goStats = settled.heap, settled.stacks, settled.goStats
	memoryRow(name, "parked request, one per session", len(conns), before, lcd.memory(true))
	closeAll(conns)
	holder.c.Close()
	lcd.stop()

	// 100 sessions, each parking one acquire on each of 100 held keys;
	// each acquire names an owner of its own, as independent lockers in
	// one client process would (a session's node in the wait-for graph is
	// the session and owner: one owner waiting in two queues could close
	// a cycle with another session, and is refused deadlock).
	lcd = startLCDWith(bin, true)
	defer lcd.stop()
	holder = holdKeys(lcd.addr, keys)
	var pings atomic.Int64
	few := openSessions(lcd.addr, keys, "parker-", &pings)
	before = lcd.memory(true)
	for _, s := range few {
		var b []byte
		for k := range keys {
			s.id++
			b = frame.Append(b, session.TypeAcquire, s.id, frame.Str(session.TagKey, "parked/"+strconv.Itoa(k)),
				frame.Str(session.TagOwner, "o"+strconv.Itoa(k)))
		}
		if err := s.write(b); err != nil {
			log.Fatal(err)
		}
	}
	for k := range keys {
		waitQueued(holder, "parked/"+strconv.Itoa(k), len(few))
	}
	memoryRow(name, fmt.Sprintf("parked request, %d per session", keys), keys*len(few), before, lcd.memory(true))
	closeAll(few)
	return keep
}

// memPoint is a server's memory at one moment: RSS, and for lcd the Go
// runtime's heap in use and stacks, and the sessions expired so far, read
// from its metrics endpoint.
type memPoint struct {
	rss                    int64
	heap, stacks, expiries float64
	goStats                bool
}

// memory reads the server's RSS and, with stats, its metrics after it, so
// that the allocations of the scrape are not in that RSS (they may be in
// the next).
func (s *server) memory(stats bool) memPoint {
	m := memPoint{rss: s.rss()}
	if stats && s.metrics != "" {
		v := scrapeAll(s.metrics, "go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes", "locking_center_session_expiries_total")
		if len(v) == 3 {
			m.heap, m.stacks, m.expiries, m.goStats = v[0], v[1], v[2], true
		}
	}
	return m
}

// memoryRow prints the row of a memory table: what n things cost from a
// to b.
func memoryRow(server, what string, n int, a, b memPoint) {
	heap, stacks := "–", "–"
	if a.goStats && b.goStats {
		heap = fmt.Sprintf("%.0f", (b.heap-a.heap)/float64(n))
		stacks = fmt.Sprintf("%.0f", (b.stacks-a.stacks)/float64(n))
	}
	fmt.Printf("| %s | %s | %d | %s | %s | %.0f | %s | %s |\n", server, what, n, mib(a.rss), mib(b.rss),
		float64(b.rss-a.rss)/float64(n), heap, stacks)
}

// closeAll closes the connections of sessions, which ends their
// keepalives.
func closeAll(conns []*sessionConn) {
	for _, s := range conns {
		s.c.Close()
	}
}

// openSessions opens n sessions on addr from 32 dialling goroutines; each
// keeps itself alive from its opening on (idleSession), the pings of all
// spread evenly over keepalive_ms.
func openSessions(addr string, n int, prefix string, pings *atomic.Int64) []*sessionConn {
	conns := make([]*sessionConn, n)
	parallel(n, func(i int) {
		s, err := dialSession(addr, prefix+strconv.Itoa(i), 64)
		if err != nil {
			log.Fatalf("session %d: %v", i, err)
		}
		conns[i] = s
		go idleSession(s, s.keepalive*time.Duration(i)/time.Duration(n), pings)
	})
	return conns
}

// holdKeys opens a session that holds the keys parked/0 to parked/n-1.
func holdKeys(addr string, n int) *sessionConn {
	s, err := dialSession(addr, "holder", 512)
	if err != nil {
		log.Fatal(err)
	}
	for k := range n {
		s.id++
		if err := s.write(frame.Append(nil, session.TypeAcquire, s.id, frame.Str(session.TagKey, "parked/"+strconv.Itoa(k)))); err != nil {
			log.Fatal(err)
		}
		if _, err := s.expect(session.TypeGranted, s.id); err != nil {
			log.Fatalf("holder: %v", err)
		}
	}
	return s
}
