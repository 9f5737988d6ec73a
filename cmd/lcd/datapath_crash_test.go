package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/manager"
	"github.com/locking-center/locking-center/mutex"
	wal "github.com/locking-center/locking-center/store"
)

// lcdBinary is the lcd built by TestMain for the tests that kill it.
var lcdBinary string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "lcd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	lcdBinary = filepath.Join(dir, "lcd")
	build := exec.Command("go", "build", "-o", lcdBinary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build lcd:", err)
		return 1
	}
	return m.Run()
}

// subprocess is lcd running as a process of its own.
type subprocess struct {
	cmd    *exec.Cmd
	log    *lcdLog
	exited chan struct{}
	err    error // of Wait, once exited is closed
}

// startSubprocess starts the built lcd on dataPath and waits until it
// serves. t.Cleanup kills it if the test has not.
func startSubprocess(t *testing.T, dataPath string) (*subprocess, lcdAddrs) {
	t.Helper()
	p := &subprocess{log: newLCDLog(), exited: make(chan struct{})}
	p.cmd = exec.Command(lcdBinary)
	p.cmd.Env = append(os.Environ(), lcdEnv(dataPath)...)
	p.cmd.Stderr = p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.exited)
		p.err = p.cmd.Wait()
	}()
	t.Cleanup(p.kill)
	return p, p.log.waitStarted(t, p.exited)
}

// kill sends SIGKILL and waits for the process to end.
func (p *subprocess) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// terminate sends SIGTERM and returns the exit code.
func (p *subprocess) terminate() int {
	p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.exited
	return p.cmd.ProcessState.ExitCode()
}

// crashKeys are the keys the load takes: some plain, some not UTF-8, with
// NUL and 0xFF bytes.
func crashKeys() []string {
	var keys []string
	for i := range 8 {
		keys = append(keys, fmt.Sprintf("crash/%d", i), fmt.Sprintf("\xff\xfe%d", i), fmt.Sprintf("nul\x00%d\x80", i))
	}
	return keys
}

// crashModel is what the clients of one round were told, per key.
type crashModel struct {
	mu     sync.Mutex
	holder map[string]string          // key -> source told '+' that has not sent its unlock
	open   map[string]map[string]bool // key -> sources whose last request for it got no answer
	errs   []string                   // invariants broken while running
}

func newCrashModel() *crashModel {
	return &crashModel{holder: map[string]string{}, open: map[string]map[string]bool{}}
}

func (m *crashModel) granted(key, src string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if other, ok := m.holder[key]; ok {
		m.errs = append(m.errs, fmt.Sprintf("%q granted to %s while %s holds it", key, src, other))
	}
	m.holder[key] = src
}

// unlocking is called before the unlock is sent: from then on the key may
// be free or held.
func (m *crashModel) unlocking(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.holder, key)
}

// unanswered records a lock or unlock of key by src that got no answer:
// lcd may or may not have made it durable.
func (m *crashModel) unanswered(key, src string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.open[key] == nil {
		m.open[key] = map[string]bool{}
	}
	m.open[key][src] = true
}

// check compares the holders lcd restored with what the clients were told:
// every key told '+' and not yet unlocked is held by its source; any other
// held key is held by a source whose last request for it got no answer.
func (m *crashModel) check(t *testing.T, round int, hs []manager.Holder, since time.Time) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.errs {
		t.Errorf("round %d: %s", round, e)
	}
	restored := map[string]manager.Holder{}
	for _, h := range hs {
		restored[h.Key] = h
	}
	for key, src := range m.holder {
		h, ok := restored[key]
		if !ok || h.Source != src {
			t.Errorf("round %d: %q was granted to %s and not unlocked, restored holder %+v (held %v)", round, key, src, h, ok)
		}
	}
	for _, h := range hs {
		if src, ok := m.holder[h.Key]; !(ok && src == h.Source) && !m.open[h.Key][h.Source] {
			t.Errorf("round %d: %q restored as held by %s, which was never granted it or was told it is released", round, h.Key, h.Source)
		}
		if h.Acquired.Before(since) || h.Acquired.After(time.Now()) || h.RemoteAddr == "" {
			t.Errorf("round %d: %q restored with acquired %v (round began %v), remote %q", round, h.Key, h.Acquired, since, h.RemoteAddr)
		}
	}
}

// crashLoad runs workers that lock and unlock keys until lcd dies; after
// killAt acknowledged answers it is killed with SIGKILL. Each worker holds
// up to three keys at a time, so that a kill finds many keys held; it takes
// them in the order of crashKeys, so that workers never deadlock.
func crashLoad(t *testing.T, p *subprocess, addr string, m *crashModel, killAt int64, rng *rand.Rand) {
	const workers, maxHeld = 12, 3
	keys := crashKeys()
	var acks atomic.Int64
	var killed atomic.Bool
	kill := func() {
		if !killed.Swap(true) {
			p.kill()
		}
	}
	ack := func() {
		if acks.Add(1) == killAt {
			kill()
		}
	}
	var wg sync.WaitGroup
	for w := range workers {
		src := fmt.Sprintf("worker-%d", w)
		seed := rng.Uint64()
		c := lockingcenter.New(addr, lockingcenter.WithSource(src))
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(w)))
			ctx := context.Background()
			var held []int // indexes into keys, ascending
			for {
				n := len(held)
				if n == maxHeld || n > 0 && (held[n-1] == len(keys)-1 || r.IntN(2) == 0) {
					i := r.IntN(n)
					key := keys[held[i]]
					m.unlocking(key)
					if err := c.Unlock(ctx, key); err != nil {
						m.unanswered(key, src)
						break
					}
					held = slices.Delete(held, i, i+1)
					ack()
					continue
				}
				lo := 0
				if n > 0 {
					lo = held[n-1] + 1
				}
				k := lo + r.IntN(len(keys)-lo)
				if err := c.Lock(ctx, keys[k]); err != nil {
					m.unanswered(keys[k], src)
					break
				}
				m.granted(keys[k], src)
				held = append(held, k)
				ack()
			}
			if !killed.Load() {
				t.Errorf("%s failed before the kill", src)
				kill()
			}
		})
	}
	wg.Wait()
}

// soakRounds is the number of kill-and-restart rounds: LC_SOAK_ROUNDS, or
// a few for an ordinary test run.
func soakRounds(t *testing.T) int {
	s := os.Getenv("LC_SOAK_ROUNDS")
	if s == "" {
		return 20
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("LC_SOAK_ROUNDS=%q: want a positive number", s)
	}
	return n
}

// Under concurrent lock and unlock load, lcd is killed with SIGKILL at a
// random moment and restarted on the same DATA_PATH: every lock that was
// answered '+' and not released is held by its client, and no key is held
// that was never granted.
func TestCrashRecovery(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	path := filepath.Join(t.TempDir(), "locks.wal")
	p, addrs := startSubprocess(t, path)
	ctx := context.Background()
	for round := range soakRounds(t) {
		m := newCrashModel()
		began := time.Now()
		crashLoad(t, p, addrs.Mutex, m, 20+rng.Int64N(1500), rng)
		p, addrs = startSubprocess(t, path)
		mc := &manager.Client{Addr: addrs.Manager}
		hs := listHolders(t, addrs.Manager)
		m.check(t, round, hs, began)
		if t.Failed() {
			t.Fatalf("round %d: lcd log of the restart:\n%s", round, p.log)
		}
		for _, h := range hs {
			if err := mc.ResetKey(ctx, h.Key); err != nil {
				t.Fatal(err)
			}
		}
		if hs := listHolders(t, addrs.Manager); len(hs) != 0 {
			t.Fatalf("round %d: %d keys held after reset", round, len(hs))
		}
	}
	if code := p.terminate(); code != exitOK {
		t.Fatalf("SIGTERM: exit %d:\n%s", code, p.log)
	}
}

// scrapeCounter reads one counter from lcd's metrics endpoint.
func scrapeCounter(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("%s not exported at %s", name, addr)
	return 0
}

// Keys and sources that are not UTF-8 come back byte for byte after lcd
// has compacted the log and been killed with SIGKILL.
func TestNonUTF8SurvivesCompactionAndKill(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	kept := []mutex.Command{}
	for i := range 4 {
		kept = append(kept, acquireCmd(fmt.Sprintf("\xff%d\x00\xfe", i), fmt.Sprintf("\x80src\x00%d", i),
			"10.0.0.1:1", grantEpoch.Add(time.Duration(i))))
	}
	// A log of more than wal.DefaultCompactMinSize that has grown far
	// past its held keys.
	l, _, err := wal.Open(wal.Config{Path: path, CompactMinSize: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	var ps []mutex.Pending
	for i := range 8000 {
		key := fmt.Sprint("churn/", i)
		a, r := acquireCmd(key, "s", "10.0.0.2:2", grantEpoch), releaseCmd(key, grantEpoch)
		ps = append(ps, l.Append(&a), l.Append(&r))
	}
	for i := range kept {
		ps = append(ps, l.Append(&kept[i]))
	}
	for _, p := range ps {
		if err := p.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	grown, _ := os.Stat(path)
	if grown.Size() < wal.DefaultCompactMinSize {
		t.Fatalf("log of %d bytes is too small to be compacted", grown.Size())
	}

	p, addrs := startSubprocess(t, path)
	if n := scrapeCounter(t, addrs.Metrics, "locking_center_store_compactions_total"); n != 1 {
		t.Fatalf("compactions at start: %v, want 1", n)
	}
	if compacted, _ := os.Stat(path); compacted.Size() >= grown.Size()/10 {
		t.Fatalf("log is %d bytes after compaction, was %d", compacted.Size(), grown.Size())
	}
	want := wantHolders(kept)
	ctx := context.Background()
	for i := range 4 {
		key, src := fmt.Sprintf("\x00new\xff%d", i), fmt.Sprintf("\xfe\xff%d", i)
		if err := lockingcenter.New(addrs.Mutex, lockingcenter.WithSource(src)).Lock(ctx, key); err != nil {
			t.Fatal(err)
		}
		want = append(want, fmt.Sprintf("%q src=%q", key, src))
	}
	p.kill()

	p, addrs = startSubprocess(t, path)
	var got []string
	for _, h := range listHolders(t, addrs.Manager) {
		if strings.HasPrefix(h.Key, "\x00new") {
			got = append(got, fmt.Sprintf("%q src=%q", h.Key, h.Source))
		} else {
			got = append(got, holderLine(h.Key, h.Source, h.RemoteAddr, h.Acquired))
		}
	}
	sameLines(t, "restored after compaction and SIGKILL", sortedCopy(got), sortedCopy(want))
	if code := p.terminate(); code != exitOK {
		t.Fatalf("SIGTERM: exit %d:\n%s", code, p.log)
	}
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// Fencing tokens strictly increase across ten lcd processes killed with
// SIGKILL on one DATA_PATH: a key still held after a restart keeps the
// token it was granted, and every grant after a restart gets a token above
// every token handed out before it.
func TestTokensIncreaseAcrossKills(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	ctx := context.Background()
	var highest uint64
	kept := map[string]uint64{} // held across the kill, with their tokens
	for round := range 10 {
		p, addrs := startSubprocess(t, path)
		hs := listHolders(t, addrs.Manager)
		if len(hs) != len(kept) {
			t.Fatalf("round %d: %d keys restored, want %d", round, len(hs), len(kept))
		}
		for _, h := range hs {
			if kept[h.Key] != h.Token {
				t.Fatalf("round %d: %q restored with token %d, was granted %d", round, h.Key, h.Token, kept[h.Key])
			}
		}
		c := lockingcenter.New(addrs.Mutex, lockingcenter.WithSource("tokens"))
		for i := range 5 {
			key := fmt.Sprintf("tok/%d/%d", round, i)
			if err := c.Lock(ctx, key); err != nil {
				t.Fatal(err)
			}
		}
		for _, h := range listHolders(t, addrs.Manager) {
			if _, old := kept[h.Key]; old {
				continue
			}
			if h.Token <= highest {
				t.Fatalf("round %d: %q granted token %d, not above %d from before", round, h.Key, h.Token, highest)
			}
			kept[h.Key] = h.Token
		}
		for _, tok := range kept {
			highest = max(highest, tok)
		}
		// Release all but one key of this round, and one of an earlier round.
		for key := range kept {
			if !strings.HasPrefix(key, fmt.Sprintf("tok/%d/0", round)) {
				if err := c.Unlock(ctx, key); err != nil {
					t.Fatal(err)
				}
				delete(kept, key)
			}
		}
		p.kill()
	}
}
