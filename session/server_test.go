package session

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/mutex"
	"github.com/locking-center/locking-center/oneshot"
	"github.com/locking-center/locking-center/store"
)

func TestHelloWelcome(t *testing.T) {
	e := start(t, envOptions{cfg: Config{ServerID: "test-server"}})
	c := e.dial(t)
	c.send(TypeHello, func(fb *frameBuilder) { fb.str(TagName, "svc") }, ttl(999_999_999))
	w := c.expect(TypeWelcome)
	if w.ID != 1 {
		t.Fatalf("WELCOME answers id %d", w.ID)
	}
	sid, _ := w.Uint(TagSession)
	secret, _ := w.Get(TagSecret)
	got, _ := w.Uint(TagTTL)
	keep, _ := w.Uint(TagKeepalive)
	server, _ := w.Get(TagServer)
	if sid == 0 || len(secret) != SecretLen || got != uint64(DefaultMaxTTL/time.Millisecond) ||
		keep != got/3 || string(server) != "test-server" {
		t.Fatalf("WELCOME session %d secret %x ttl %d keepalive %d server %q", sid, secret, got, keep, server)
	}
	// The TTL asked for is clamped from below too, and absent gives the default.
	c2 := e.hello(t, "b", ttl(1))
	_ = c2
	snap := e.node.Snapshot()
	if len(snap.Sessions) != 2 || snap.Sessions[1].TTL != DefaultMinTTL || snap.Sessions[0].Name != "svc" {
		t.Fatalf("sessions %+v", snap.Sessions)
	}
	c3 := e.hello(t, "")
	_ = c3
	if s := e.node.Snapshot().Sessions[2]; s.Name != "127.0.0.1" || s.TTL != DefaultTTL {
		t.Fatalf("a session without a name or TTL: %+v", s)
	}
}

func TestAcquireReleaseTokens(t *testing.T) {
	bothTransports(t, envOptions{}, testAcquireReleaseTokens)
}

func testAcquireReleaseTokens(t *testing.T, o envOptions) {
	e := start(t, o)
	a := e.hello(t, "a")
	b := e.hello(t, "b")
	tok := a.granted(a.acquire("k"))
	id := b.acquire("k", wait(0))
	b.expectRefused(id, CodeBusy)
	// A stale token is refused and changes nothing.
	id = a.send(TypeRelease, func(fb *frameBuilder) { fb.str(TagKey, "k") }, func(fb *frameBuilder) { fb.u64(TagToken, tok+1) })
	a.expectRefused(id, CodeStaleToken)
	id = b.send(TypeRelease, func(fb *frameBuilder) { fb.str(TagKey, "k") }, func(fb *frameBuilder) { fb.u64(TagToken, tok) })
	b.expectRefused(id, CodeStaleToken)
	// v1 cannot release a session's key.
	if ans := v1Answer(t, e.v1(t, oneshot.ActionUnlock, "k", "")); ans != '-' {
		t.Fatalf("v1 unlock of a session's key answered %q", ans)
	}
	// A request id at or below the highest applied is a duplicate.
	a.write(frameOf(TypeAcquire, 1, func(fb *frameBuilder) { fb.str(TagKey, "dup") }))
	a.expectRefused(1, CodeDuplicate)
	a.release("k", tok)
	tok2 := b.granted(b.acquire("k", wait(0)))
	if tok2 <= tok {
		t.Fatalf("token %d after %d", tok2, tok)
	}
	// v1 grants get tokens above too.
	if ans := v1Answer(t, e.v1(t, oneshot.ActionLock, "v1key", "v1")); ans != '+' {
		t.Fatalf("v1 lock: %q", ans)
	}
	h, _ := e.node.Holder("v1key")
	if h.Token <= tok2 {
		t.Fatalf("v1 token %d after %d", h.Token, tok2)
	}
}

// Many requests in one write are all answered, a parked acquire does not
// hold the connection up, and its grant is pushed when it comes.
func TestPipeliningAndPushedGrant(t *testing.T) {
	bothTransports(t, envOptions{}, testPipeliningAndPushedGrant)
}

func testPipeliningAndPushedGrant(t *testing.T, o envOptions) {
	e := start(t, o)
	holder := e.v1(t, oneshot.ActionLock, "hot", "v1")
	if v1Answer(t, holder) != '+' {
		t.Fatal("v1 lock")
	}
	c := e.hello(t, "p")
	var burst []byte
	parkedID := c.id + 1
	burst = append(burst, frameOf(TypeAcquire, parkedID, func(fb *frameBuilder) { fb.str(TagKey, "hot") })...)
	for i := range 50 {
		burst = append(burst, frameOf(TypeAcquire, parkedID+1+uint64(i), func(fb *frameBuilder) { fb.str(TagKey, fmt.Sprint("k", i)) })...)
	}
	burst = append(burst, frameOf(TypePing, parkedID+51)...)
	c.id = parkedID + 51
	c.write(burst)
	seen := map[uint64]bool{}
	for range 51 {
		f := c.read()
		if f.Type != TypeGranted && f.Type != TypeOK {
			t.Fatalf("frame %#02x id %d", uint8(f.Type), f.ID)
		}
		seen[f.ID] = true
	}
	if seen[parkedID] || len(seen) != 51 {
		t.Fatalf("answers %v; the parked acquire must not be among them", seen)
	}
	if parked(e.node, "hot") != 1 {
		t.Fatal("the acquire of hot is not parked")
	}
	if v1Answer(t, e.v1(t, oneshot.ActionUnlock, "hot", "")) != '+' {
		t.Fatal("v1 unlock")
	}
	c.granted(parkedID)
}

func TestWaitDeadlineCancelDescribe(t *testing.T) {
	bothTransports(t, envOptions{}, testWaitDeadlineCancelDescribe)
}

func testWaitDeadlineCancelDescribe(t *testing.T, o envOptions) {
	e := start(t, o)
	a := e.hello(t, "a")
	b := e.hello(t, "b")
	tok := a.granted(a.acquire("k", lease(60_000)))
	b.expectRefused(b.acquire("k", wait(20)), CodeTimeout)
	id := b.acquire("k")
	eventually(t, "b parked", func() bool { return parked(e.node, "k") == 1 })
	cid := b.send(TypeCancel, func(fb *frameBuilder) { fb.u64(TagTarget, id) })
	b.expectRefused(id, CodeCancelled)
	if f := b.expect(TypeOK); f.ID != cid {
		t.Fatalf("OK of %d, want the cancel's %d", f.ID, cid)
	}
	// A cancel of what is no longer waiting changes nothing and is OK.
	cid = b.send(TypeCancel, func(fb *frameBuilder) { fb.u64(TagTarget, id) })
	b.expect(TypeOK)
	did := b.send(TypeDescribe, func(fb *frameBuilder) { fb.str(TagKey, "k") })
	info := b.expect(TypeInfo)
	holders := info.All(TagHolder)
	if info.ID != did || len(holders) != 1 {
		t.Fatalf("INFO %+v", info)
	}
	var h Frame
	h.Fields, _ = parseFields(holders[0], nil)
	htok, _ := h.Uint(TagToken)
	hs, _ := h.Uint(TagSession)
	left, _ := h.Uint(TagLeft)
	if htok != tok || hs != a.sid || left == 0 || left > 60_000 {
		t.Fatalf("holder token %d session %d lease left %d", htok, hs, left)
	}
	// Renew answers what is left.
	rid := a.send(TypeRenew, func(fb *frameBuilder) { fb.str(TagKey, "k") }, func(fb *frameBuilder) { fb.u64(TagToken, tok) }, lease(5000))
	ok := a.expect(TypeOK)
	if l, _ := ok.Uint(TagLeft); ok.ID != rid || l != 5000 {
		t.Fatalf("renew answered %+v", ok)
	}
}

// CLOSE releases everything at once: the next waiter is granted.
func TestCloseReleases(t *testing.T) { bothTransports(t, envOptions{}, testCloseReleases) }

func testCloseReleases(t *testing.T, o envOptions) {
	e := start(t, o)
	a := e.hello(t, "a")
	a.granted(a.acquire("k", delay(60_000)))
	w := e.v1(t, oneshot.ActionLock, "k", "w")
	eventually(t, "v1 parked", func() bool { return parked(e.node, "k") == 1 })
	id := a.send(TypeClose)
	if f := a.expect(TypeOK); f.ID != id {
		t.Fatalf("OK of %d", f.ID)
	}
	if !a.closed() {
		t.Fatal("the connection stays open after CLOSE")
	}
	if v1Answer(t, w) != '+' {
		t.Fatal("the waiter was not granted after CLOSE")
	}
	if n := len(e.node.Snapshot().Sessions); n != 0 {
		t.Fatalf("%d sessions after CLOSE", n)
	}
}

// A dropped connection keeps the session: a resume within the TTL finds
// its locks and its place in the queue, and the grant made while it was
// away; a wrong secret is refused.
func TestResume(t *testing.T) { bothTransports(t, envOptions{}, testResume) }

func testResume(t *testing.T, o envOptions) {
	e := start(t, o)
	a := e.hello(t, "a")
	tok := a.granted(a.acquire("held"))
	v1 := e.v1(t, oneshot.ActionLock, "later", "v1")
	if v1Answer(t, v1) != '+' {
		t.Fatal("v1 lock")
	}
	pid := a.acquire("later")
	eventually(t, "parked", func() bool { return parked(e.node, "later") == 1 })
	a.c.Close()
	eventually(t, "detached", func() bool { return e.node.Snapshot().Sessions[0].RemoteAddr == "" })
	if v1Answer(t, e.v1(t, oneshot.ActionUnlock, "later", "")) != '+' {
		t.Fatal("v1 unlock")
	}
	eventually(t, "granted while away", func() bool {
		h, ok := e.node.Holder("later")
		t.Logf("later: %+v %v", h, ok)
		return ok && h.Session == a.sid
	})

	bad := e.dial(t)
	bad.send(TypeResume, func(fb *frameBuilder) { fb.u64(TagSession, a.sid) }, func(fb *frameBuilder) { fb.bytes(TagSecret, make([]byte, SecretLen)) })
	g := bad.expect(TypeGoodbye)
	if code, _ := g.Uint(TagCode); Code(code) != CodeUnknownSession {
		t.Fatalf("wrong secret: code %v", Code(code))
	}

	r := e.dial(t)
	r.send(TypeResume, func(fb *frameBuilder) { fb.u64(TagSession, a.sid) }, func(fb *frameBuilder) { fb.bytes(TagSecret, a.sec) })
	w := r.expect(TypeWelcome)
	applied, _ := w.Uint(TagApplied)
	if applied != pid {
		t.Fatalf("applied %d, want %d", applied, pid)
	}
	held := w.All(TagHeld)
	if len(held) != 2 || len(w.All(TagParked)) != 0 {
		t.Fatalf("held %d, parked %d; want 2 and 0", len(held), len(w.All(TagParked)))
	}
	var first Frame
	first.Fields, _ = parseFields(held[0], nil)
	if tk, _ := first.Uint(TagToken); tk != tok {
		t.Fatalf("first held token %d, want %d", tk, tok)
	}
	// The grant made while away follows the WELCOME.
	r.id = applied
	later := r.granted(pid)
	r.release("later", later)
	r.release("held", tok)
	if e.node.Len() != 0 {
		t.Fatal("keys left after the releases")
	}
}

// A session not heard from for its TTL expires: its locks are lost (with
// their lock-delay) and its waits withdrawn; an attached connection gets
// GOODBYE session_expired. It never expires early.
func TestExpiry(t *testing.T) {
	clk := &clock{now: time.Unix(1_800_000_000, 0)}
	e := start(t, envOptions{clock: clk, cfg: Config{MinTTL: time.Second}})
	a := e.hello(t, "a", ttl(2000))
	a.granted(a.acquire("k", delay(1000)))
	w := e.v1(t, oneshot.ActionLock, "k", "w")
	eventually(t, "v1 parked", func() bool { return parked(e.node, "k") == 1 })
	clk.add(1999 * time.Millisecond)
	e.node.Advance()
	if len(e.node.Snapshot().Sessions) != 1 {
		t.Fatal("the session expired before its TTL")
	}
	clk.add(time.Millisecond)
	e.node.Advance()
	lost := a.expect(TypeLost)
	if code, _ := lost.Uint(TagCode); Code(code) != CodeSessionExpired || lost.ID != 2 {
		t.Fatalf("LOST id %d code %v", lost.ID, Code(code))
	}
	g := a.expect(TypeGoodbye)
	if code, _ := g.Uint(TagCode); Code(code) != CodeSessionExpired {
		t.Fatalf("GOODBYE code %v", Code(code))
	}
	if h, ok := e.node.Holder("k"); ok {
		t.Fatalf("k held during its lock-delay by %+v", h)
	}
	clk.add(999 * time.Millisecond)
	e.node.Advance()
	if _, ok := e.node.Holder("k"); ok {
		t.Fatal("k granted before the lock-delay ended")
	}
	clk.add(time.Millisecond)
	e.node.Advance()
	if v1Answer(t, w) != '+' {
		t.Fatal("the waiter was not granted after the lock-delay")
	}
}

// A frame the server cannot parse gets GOODBYE protocol_error and the
// connection closes; everyone else is served as before.
func TestProtocolErrors(t *testing.T) {
	e := start(t, envOptions{})
	other := e.hello(t, "other")
	for name, b := range map[string][]byte{
		"length over the limit": binary.BigEndian.AppendUint32(nil, MaxFrame+1),
		"length under a header": {0, 0, 0, 3, 1, 2, 3},
		"unknown type":          frameOf(0x40, 2),
		"field past its frame":  append(binary.BigEndian.AppendUint32(nil, 12), append([]byte{byte(TypePing)}, append(be64(2), byte(TagKey), 0, 9)...)...),
		"u64 of 3 bytes":        frameOf(TypeCancel, 2, func(fb *frameBuilder) { fb.bytes(TagTarget, []byte{1, 2, 3}) }),
		"a second HELLO":        frameOf(TypeHello, 2),
	} {
		t.Run(name, func(t *testing.T) {
			c := e.hello(t, "bad")
			c.write(b)
			g := c.expect(TypeGoodbye)
			if code, _ := g.Uint(TagCode); Code(code) != CodeProtocolError {
				t.Fatalf("code %v", Code(code))
			}
			if !c.closed() {
				t.Fatal("the connection stays open")
			}
		})
	}
	// Before a session: garbage after the first byte is answered '-'.
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("LXXX"))
	if v1Answer(t, c) != '-' {
		t.Fatal("a wrong preface was not answered '-'")
	}
	// An unknown field refuses only its request.
	id := other.send(TypeAcquire, func(fb *frameBuilder) { fb.str(TagKey, "k") }, func(fb *frameBuilder) { fb.bytes(0x7F, nil) })
	other.expectRefused(id, CodeUnsupported)
	other.granted(other.acquire("k"))
}

// A client process holding 100 keys through one session is killed with
// SIGKILL: every key is free within the TTL plus the lock-delay, and none
// before the lock-delay.
func TestKilledClientFreesKeys(t *testing.T) {
	clk := &clock{now: time.Unix(1_800_000_000, 0)}
	e := start(t, envOptions{clock: clk, cfg: Config{MinTTL: time.Second}})
	child := startChild(t, fmt.Sprintf("hold %s 100 2000 1500", e.addr))
	eventually(t, "100 keys held", func() bool { return e.node.Len() == 100 })
	child.Process.Kill()
	child.Wait()
	eventually(t, "the connection seen gone", func() bool { return e.node.Snapshot().Sessions[0].RemoteAddr == "" })
	clk.add(2 * time.Second) // the TTL passes
	e.node.Advance()
	if n := e.node.Snapshot().Delayed; n != 100 {
		t.Fatalf("%d keys in lock-delay after the expiry, want 100", n)
	}
	if n := len(e.node.Snapshot().Holders); n != 0 {
		t.Fatalf("%d keys still held after the TTL", n)
	}
	ok := e.v1(t, oneshot.ActionTryLock, "hold/0", "")
	if v1Answer(t, ok) != '#' {
		t.Fatal("a key was grantable during its lock-delay")
	}
	clk.add(1500 * time.Millisecond)
	e.node.Advance()
	if n := e.node.Len(); n != 0 {
		t.Fatalf("%d keys left after TTL plus lock-delay", n)
	}
}

// 10,000 sessions whose process dies: once they expire, the server's
// goroutines are back to what they were and the table is empty.
func TestManySessionsLeaveNothing(t *testing.T) {
	n := 10_000
	if testing.Short() {
		n = 500
	}
	clk := &clock{now: time.Unix(1_800_000_000, 0)}
	e := start(t, envOptions{clock: clk, cfg: Config{MinTTL: time.Second}})
	before := runtime.NumGoroutine()
	child := startChild(t, fmt.Sprintf("sessions %s %d", e.addr, n))
	eventually(t, "sessions open", func() bool { return len(e.node.Snapshot().Sessions) == n })
	child.Process.Kill()
	child.Wait()
	eventually(t, "connections gone", func() bool {
		for _, s := range e.node.Snapshot().Sessions {
			if s.RemoteAddr != "" {
				return false
			}
		}
		return true
	})
	clk.add(DefaultTTL)
	e.node.Advance()
	if s := e.node.Snapshot(); len(s.Sessions) != 0 || e.node.Len() != 0 || s.Parked != 0 {
		t.Fatalf("%d sessions, %d keys, %d parked left", len(s.Sessions), e.node.Len(), s.Parked)
	}
	eventually(t, "goroutines back", func() bool { return runtime.NumGoroutine() <= before+2 })
}

// childEnv makes the test binary a client process.
const childEnv = "LC_SESSION_TEST_CHILD"

// runChild runs as the child process: "hold ADDR N TTL DELAY" opens one
// session and holds N keys with that lock-delay; "sessions ADDR N" opens N
// sessions, each with one parked acquire of a key held by the first. It
// prints "ready" and waits to be killed.
func runChild(args string) {
	f := strings.Fields(args)
	addr := f[1]
	n, _ := strconv.Atoi(f[2])
	open := func(name string, ttlMS uint32) net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			fmt.Println("dial:", err)
			os.Exit(1)
		}
		c.Write([]byte(Preface))
		c.Write(frameOf(TypeHello, 1, func(fb *frameBuilder) { fb.str(TagName, name) }, ttl(ttlMS)))
		return c
	}
	switch f[0] {
	case "hold":
		ttlMS, _ := strconv.Atoi(f[3])
		delayMS, _ := strconv.Atoi(f[4])
		c := open("holder", uint32(ttlMS))
		var b []byte
		for i := range n {
			b = append(b, frameOf(TypeAcquire, uint64(2+i), func(fb *frameBuilder) { fb.str(TagKey, fmt.Sprint("hold/", i)) }, delay(uint32(delayMS)))...)
		}
		c.Write(b)
	case "sessions":
		conns := make([]net.Conn, 0, n)
		for i := range n {
			c := open(fmt.Sprint("s", i), 10_000)
			c.Write(frameOf(TypeAcquire, 2, func(fb *frameBuilder) { fb.str(TagKey, "shared-wait") }))
			conns = append(conns, c)
		}
		_ = conns
	}
	fmt.Println("ready")
	select {}
}

func startChild(t *testing.T, args string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+args)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		t.Fatalf("child process said %q", line)
	}
	return cmd
}

// v1 locks and session acquires of one key wait in one queue and are
// served in the order they came.
func TestV1AndSessionsShareOneFIFO(t *testing.T) {
	bothTransports(t, envOptions{}, testV1AndSessionsShareOneFIFO)
}

func testV1AndSessionsShareOneFIFO(t *testing.T, o envOptions) {
	e := start(t, o)
	holder := e.v1(t, oneshot.ActionLock, "k", "first")
	if v1Answer(t, holder) != '+' {
		t.Fatal("v1 lock")
	}
	type waiter struct {
		v1      net.Conn
		session *client
		id      uint64
	}
	var order []waiter
	for i := range 6 {
		if i%2 == 0 {
			order = append(order, waiter{v1: e.v1(t, oneshot.ActionLock, "k", fmt.Sprint("v1-", i))})
		} else {
			c := e.hello(t, fmt.Sprint("s-", i))
			order = append(order, waiter{session: c, id: c.acquire("k")})
		}
		eventually(t, "parked in order", func() bool { return parked(e.node, "k") == i+1 })
	}
	// Release the first holder, then each waiter in turn once it has the
	// key: each must be granted exactly when its turn comes.
	if v1Answer(t, e.v1(t, oneshot.ActionUnlock, "k", "")) != '+' {
		t.Fatal("unlock")
	}
	for i, w := range order {
		if w.v1 != nil {
			if v1Answer(t, w.v1) != '+' {
				t.Fatalf("waiter %d (v1) was not granted", i)
			}
			if v1Answer(t, e.v1(t, oneshot.ActionUnlock, "k", "")) != '+' {
				t.Fatalf("waiter %d: unlock", i)
			}
			continue
		}
		tok := w.session.granted(w.id)
		if parked(e.node, "k") != len(order)-i-1 {
			t.Fatalf("waiter %d granted out of turn", i)
		}
		w.session.release("k", tok)
	}
}

// startDurable serves a new node on the write-ahead log at path (read
// back if it exists) until stop is called.
func startDurable(t *testing.T, path string) (e *env, stop func()) {
	t.Helper()
	l, table, err := store.Open(store.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	e = startOn(t, envOptions{journal: l, table: table})
	return e, func() {
		e.stop()
		l.Close()
	}
}

// With a write-ahead log a session outlives a restart of the server: its
// client resumes on the new process within the TTL (which starts again at
// the restart) and finds its locks, with their tokens.
func TestResumeAfterRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	e, stop := startDurable(t, path)
	a := e.hello(t, "durable")
	tok := a.granted(a.acquire("k", lease(60_000)))
	sid, secret := a.sid, a.sec
	stop()

	e, stop = startDurable(t, path)
	defer stop()
	r := e.dial(t)
	r.send(TypeResume, func(fb *frameBuilder) { fb.u64(TagSession, sid) }, func(fb *frameBuilder) { fb.bytes(TagSecret, secret) })
	w := r.expect(TypeWelcome)
	held := w.All(TagHeld)
	if len(held) != 1 {
		t.Fatalf("%d locks after the restart, want 1", len(held))
	}
	var h Frame
	h.Fields, _ = parseFields(held[0], nil)
	if got, _ := h.Uint(TagToken); got != tok {
		t.Fatalf("token %d after the restart, want %d", got, tok)
	}
	applied, _ := w.Uint(TagApplied)
	r.id = applied
	r.release("k", tok)
	// A grant after the restart has a greater token.
	if tok2 := r.granted(r.acquire("k")); tok2 <= tok {
		t.Fatalf("token %d after %d", tok2, tok)
	}
}

// A WATCH streams the events of the keys with its prefix, from every
// front end, as EVENT frames answering it; CANCEL of the watch stops them.
func TestWatch(t *testing.T) {
	e := start(t, envOptions{})
	w := e.hello(t, "watcher")
	wid := w.send(TypeWatch, func(fb *frameBuilder) { fb.str(TagKey, "jobs/") })
	w.expect(TypeOK)
	a := e.hello(t, "a")
	tok := a.granted(a.acquire("jobs/1"))
	a.granted(a.acquire("other")) // not under the prefix
	if v1Answer(t, e.v1(t, oneshot.ActionLock, "jobs/2", "v1")) != '+' {
		t.Fatal("v1 lock")
	}
	a.release("jobs/1", tok)
	want := []struct {
		event uint64
		key   string
	}{{1, "jobs/1"}, {1, "jobs/2"}, {2, "jobs/1"}}
	for i, x := range want {
		f := w.expect(TypeEvent)
		ev, _ := f.Uint(TagEvent)
		key, _ := f.Get(TagKey)
		if f.ID != wid || ev != x.event || string(key) != x.key {
			t.Fatalf("event %d: id %d event %d key %q, want %d %d %q", i, f.ID, ev, key, wid, x.event, x.key)
		}
	}
	cid := w.send(TypeCancel, func(fb *frameBuilder) { fb.u64(TagTarget, wid) })
	if f := w.expect(TypeOK); f.ID != cid {
		t.Fatalf("OK of %d", f.ID)
	}
	a.granted(a.acquire("jobs/3"))
	pid := w.send(TypePing)
	if f := w.expect(TypeOK); f.ID != pid {
		t.Fatalf("after the cancel got a frame for id %d", f.ID)
	}
}

// TestSlowReaderGetsEverythingInOrder has the server answer far more than
// the sockets hold while the client reads nothing: the answers the socket
// does not take at once go to the connection's drainer, and every one
// arrives, whole and in order, once the client reads.
func TestSlowReaderGetsEverythingInOrder(t *testing.T) {
	e := start(t, envOptions{})
	c := e.hello(t, "slow")
	// Small buffers on both ends, so that the answers overflow them.
	c.c.(*net.TCPConn).SetReadBuffer(4096)
	e.session.mu.Lock()
	for sc := range e.session.conns {
		sc.nc.(*net.TCPConn).SetWriteBuffer(4096)
	}
	e.session.mu.Unlock()
	const pings = 20_000 // 260 KB of OKs
	var b []byte
	for i := range pings {
		b = append(b, frameOf(TypePing, uint64(2+i))...)
	}
	// The server reads the pings while the client does not read: its
	// answers pile up behind the client's small window.
	if _, err := c.c.Write(b); err != nil {
		t.Fatal(err)
	}
	for i := range pings {
		f := c.expect(TypeOK)
		if f.ID != uint64(2+i) {
			t.Fatalf("OK %d answers id %d, want %d", i, f.ID, 2+i)
		}
	}
}

// A watcher whose client stops reading loses its watch once it owes
// maxWatchBacklog frames, counting those its connection has not yet
// written, rather than making the server buffer all of them: it gets
// REFUSED slow_consumer after at most that many events beyond what the
// sockets hold, and no event of the watch after it.
func TestWatchSlowConsumerDropped(t *testing.T) {
	e := start(t, envOptions{})
	w := e.hello(t, "watcher")
	// A small send buffer keeps the kernel from holding most of them.
	e.session.mu.Lock()
	for sc := range e.session.conns {
		sc.nc.(*net.TCPConn).SetWriteBuffer(4096)
	}
	e.session.mu.Unlock()
	wid := w.send(TypeWatch)
	w.expect(TypeOK)
	const events = 2 * maxWatchBacklog
	for range events / 2 {
		if _, _, err := e.node.TryLock(mutex.Claim{Key: "slow", Source: "v1"}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.node.Release("slow"); err != nil {
			t.Fatal(err)
		}
	}
	got := 0
	for {
		f := w.read()
		if f.ID != wid {
			t.Fatalf("frame %#02x of id %d", uint8(f.Type), f.ID)
		}
		if f.Type == TypeRefused {
			if code, _ := f.Uint(TagCode); Code(code) != CodeSlowConsumer {
				t.Fatalf("REFUSED %v", Code(code))
			}
			break
		}
		if got++; got == events {
			t.Fatalf("all %d events arrived: the watch was never dropped", got)
		}
	}
	t.Logf("the watch was dropped after %d events", got)
	e.node.TryLock(mutex.Claim{Key: "after", Source: "v1"})
	pid := w.send(TypePing)
	if f := w.expect(TypeOK); f.ID != pid {
		t.Fatalf("a frame of id %d after the drop", f.ID)
	}
}

// MaxKeepalive caps the keepalive WELCOME gives, and only caps it: a
// short TTL keeps a third of itself.
func TestMaxKeepalive(t *testing.T) {
	e := start(t, envOptions{cfg: Config{MaxKeepalive: time.Second}})
	for _, c := range []struct{ ttl, keepalive uint64 }{{10_000, 1000}, {3000, 1000}, {1500, 500}} {
		cl := e.dial(t)
		cl.send(TypeHello, func(fb *frameBuilder) { fb.str(TagName, "svc") }, ttl(uint32(c.ttl)))
		w := cl.expect(TypeWelcome)
		if got, _ := w.Uint(TagKeepalive); got != c.keepalive {
			t.Errorf("TTL %d ms: keepalive_ms %d, want %d", c.ttl, got, c.keepalive)
		}
	}
}
