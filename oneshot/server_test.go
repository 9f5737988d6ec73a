package oneshot

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"
)

func TestLockUnlockTryLock(t *testing.T) { bothTransports(t, testLockUnlockTryLock) }

func testLockUnlockTryLock(t *testing.T, start starter) {
	s := start(t, ServerConfig{})
	if a := s.do(t, lockReq("k", "")); a != AnswerOK {
		t.Fatalf("lock = %q", a)
	}
	g, ok := s.table.Holder("k")
	if !ok || g.Source != "127.0.0.1" || g.RemoteAddr == "" {
		t.Fatalf("holder = %+v, %v; want source from the peer IP", g, ok)
	}
	if a := s.do(t, Request{Action: ActionTryLock, Key: "k", Source: "other"}); a != AnswerBusy {
		t.Fatalf("trylock of held key = %q, want #", a)
	}
	if a := s.do(t, Request{Action: ActionUnlock, Key: "k"}); a != AnswerOK {
		t.Fatalf("unlock = %q", a)
	}
	if a := s.do(t, Request{Action: ActionTryLock, Key: "k", Source: "other"}); a != AnswerOK {
		t.Fatalf("trylock of free key = %q, want +", a)
	}
	if got := s.holderSource("k"); got != "other" {
		t.Fatalf("holder source = %q, want other", got)
	}
}

func TestFIFOManyWaiters(t *testing.T) { bothTransports(t, testFIFOManyWaiters) }

func testFIFOManyWaiters(t *testing.T, start starter) {
	s := start(t, ServerConfig{})
	const n = 50
	if s.do(t, lockReq("fifo", "holder")) != AnswerOK {
		t.Fatal("holder not granted")
	}
	conns := make([]*clientConn, n)
	for i := range conns {
		conns[i] = s.send(t, AppendRequest(nil, lockReq("fifo", "w"+strconv.Itoa(i))))
		s.waitParked(t, "fifo", i+1)
	}
	for i, c := range conns {
		if s.do(t, Request{Action: ActionUnlock, Key: "fifo"}) != AnswerOK {
			t.Fatal("unlock failed")
		}
		if a := readAnswer(t, c); a != AnswerOK {
			t.Fatalf("waiter %d answered %q", i, a)
		}
		if got, want := s.holderSource("fifo"), "w"+strconv.Itoa(i); got != want {
			t.Fatalf("holder after unlock %d = %q, want %q", i, got, want)
		}
		c.Close()
	}
}

func TestWithdrawOnClose(t *testing.T) { bothTransports(t, testWithdrawOnClose) }

func testWithdrawOnClose(t *testing.T, start starter) {
	for _, tc := range []struct {
		name  string
		leave func(t *testing.T, c *clientConn)
	}{
		{"close", func(t *testing.T, c *clientConn) { c.Close() }},
		{"reset", func(t *testing.T, c *clientConn) {
			c.SetLinger(0) // close sends RST
			c.Close()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := start(t, ServerConfig{})
			s.do(t, lockReq("k", "holder"))
			c := s.park(t, "k", "gone")
			tc.leave(t, c)
			s.waitParked(t, "k", 0)
			s.do(t, Request{Action: ActionUnlock, Key: "k"})
			if src := s.holderSource("k"); src != "" {
				t.Fatalf("key held by %q after its only waiter left", src)
			}
			if s.table.Len() != 0 {
				t.Fatalf("table has %d keys, want 0", s.table.Len())
			}
		})
	}
}

func TestWithdrawWhenClientProcessKilled(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.do(t, lockReq("k", "holder"))
	child := startChild(t, childManyEnv, s.addr+" k 1")
	s.waitParked(t, "k", 1)
	child.cmd.Process.Kill()
	child.cmd.Wait()
	s.waitParked(t, "k", 0)
	s.do(t, Request{Action: ActionUnlock, Key: "k"})
	if src := s.holderSource("k"); src != "" {
		t.Fatalf("killed waiter's key held by %q", src)
	}
}

// A waiter that leaves in the same instant as the unlock either is
// withdrawn or gets a grant that is passed on: the key never stays with it.
func TestWaiterLeavesAtUnlockRace(t *testing.T) { bothTransports(t, testWaiterLeavesAtUnlockRace) }

func testWaiterLeavesAtUnlockRace(t *testing.T, start starter) {
	s := start(t, ServerConfig{})
	const rounds = 1000
	var lastState string
	defer func() {
		if t.Failed() {
			t.Log("table:", lastState)
		}
	}()
	for i := range rounds {
		key := "race" + strconv.Itoa(i%7)
		s.do(t, lockReq(key, "holder"))
		w := s.park(t, key, "leaver")
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				w.SetLinger(0)
			}
			w.Close()
		}()
		go func() {
			defer wg.Done()
			s.do(t, Request{Action: ActionUnlock, Key: key})
		}()
		wg.Wait()
		eventually(t, fmt.Sprintf("key free after the waiter left (round %d, linger0=%v)", i, i%2 == 0), func() bool {
			defer func() { lastState = describeTable(s.table) }()
			_, held := s.table.Holder(key)
			return !held && parkedOn(s.table, key) == 0
		})
	}
	if n := s.table.Len(); n != 0 {
		t.Fatalf("table has %d keys after the rounds", n)
	}
}

func TestUnlockOfFreeKeyStoresNoCredit(t *testing.T) {
	bothTransports(t, testUnlockOfFreeKeyStoresNoCredit)
}

func testUnlockOfFreeKeyStoresNoCredit(t *testing.T, start starter) {
	s := start(t, ServerConfig{})
	if s.do(t, Request{Action: ActionUnlock, Key: "k"}) != AnswerOK {
		t.Fatal("unlock of a free key must answer +")
	}
	s.do(t, lockReq("k", "a"))
	c := s.park(t, "k", "b")
	if got := s.holderSource("k"); got != "a" {
		t.Fatalf("holder = %q; the early unlock must not let b in", got)
	}
	s.do(t, Request{Action: ActionUnlock, Key: "k"})
	if readAnswer(t, c) != AnswerOK {
		t.Fatal("b not granted after the real unlock")
	}
}

func TestKeysSharingAPrefixAreDistinct(t *testing.T) {
	s := startServer(t, ServerConfig{})
	keys := []string{"a", "a/", "ab", "a\x00", "A", "\xff", "a\xff"}
	for _, k := range keys {
		if a := s.do(t, Request{Action: ActionTryLock, Key: k, Source: k}); a != AnswerOK {
			t.Fatalf("trylock %q = %q; another key blocked it", k, a)
		}
	}
	for _, k := range keys {
		if got := s.holderSource(k); got != k {
			t.Fatalf("holder of %q = %q", k, got)
		}
	}
	s.do(t, Request{Action: ActionUnlock, Key: "a"})
	for _, k := range keys[1:] {
		if _, held := s.table.Holder(k); !held {
			t.Fatalf("unlock of %q released %q", "a", k)
		}
	}
}

func TestResetKeyPassesToFirstWaiter(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.do(t, lockReq("k", "crashed"))
	w1 := s.park(t, "k", "w1")
	w2 := s.park(t, "k", "w2")
	if s.do(t, Request{Action: ActionResetKey, Key: "k"}) != AnswerOK {
		t.Fatal("reset failed")
	}
	if readAnswer(t, w1) != AnswerOK || s.holderSource("k") != "w1" {
		t.Fatal("first waiter not granted after reset")
	}
	w1.Close()
	s.do(t, Request{Action: ActionResetKey, Key: "k"})
	if readAnswer(t, w2) != AnswerOK || s.holderSource("k") != "w2" {
		t.Fatal("second waiter not granted after the second reset")
	}
}

func TestResetBySource(t *testing.T) { bothTransports(t, testResetBySource) }

func testResetBySource(t *testing.T, start starter) {
	s := start(t, ServerConfig{})
	s.do(t, lockReq("held-by-x", "x"))
	s.do(t, lockReq("held-by-y", "y"))
	s.do(t, lockReq("other", "y"))
	// x parks behind y; y parks behind x.
	xParked := s.park(t, "other", "x")
	yWaiter := s.park(t, "held-by-x", "y")

	if s.do(t, Request{Action: ActionResetSource, Source: "x"}) != AnswerOK {
		t.Fatal("reset by source failed")
	}
	if a := readAnswer(t, xParked); a != AnswerFailed {
		t.Fatalf("parked request of the reset source answered %q, want -", a)
	}
	if a := readAnswer(t, yWaiter); a != AnswerOK {
		t.Fatalf("waiter behind a reset holder answered %q, want +", a)
	}
	if got := s.holderSource("held-by-x"); got != "y" {
		t.Fatalf("held-by-x now held by %q, want y", got)
	}
	if got := s.holderSource("other"); got != "y" {
		t.Fatalf("other holder = %q, want y untouched", got)
	}
	snap := s.table.Snapshot()
	if snap.Parked != 0 || snap.Counters.Withdrawn != 1 {
		t.Fatalf("parked=%d withdrawn=%d, want 0 and 1", snap.Parked, snap.Counters.Withdrawn)
	}
}

// A parked request has no timeout: it outlives many header timeouts.
func TestParkedRequestHasNoTimeout(t *testing.T) {
	const header = 20 * time.Millisecond
	s := startServer(t, ServerConfig{HeaderTimeout: header})
	s.do(t, lockReq("k", "holder"))
	c := s.park(t, "k", "patient")
	time.Sleep(25 * header) // elapsed time under test, not synchronisation
	if parkedOn(s.table, "k") != 1 {
		t.Fatal("parked request was dropped")
	}
	s.do(t, Request{Action: ActionUnlock, Key: "k"})
	if readAnswer(t, c) != AnswerOK {
		t.Fatal("patient waiter not granted")
	}
}

func TestHeaderTimeoutClosesIncompleteRequest(t *testing.T) {
	bothTransports(t, testHeaderTimeoutClosesIncompleteRequest)
}

func testHeaderTimeoutClosesIncompleteRequest(t *testing.T, start starter) {
	s := start(t, ServerConfig{HeaderTimeout: 50 * time.Millisecond})
	c := s.dial(t)
	// Under TLS on a loaded machine the handshake alone can outlast the
	// timeout: the server has closed the connection before the write, and
	// the write fails, which is the close this test looks for.
	if _, err := c.Write([]byte{byte(ActionLock), 5, 'a', 'b'}); err == nil && !readClosed(t, c) {
		t.Fatal("server kept a stalled request open")
	}
	if s.table.Len() != 0 {
		t.Fatal("a partial request changed the table")
	}
}

func TestMalformedRequests(t *testing.T) { bothTransports(t, testMalformedRequests) }

func testMalformedRequests(t *testing.T, start starter) {
	s := start(t, ServerConfig{})
	cases := map[string][]byte{
		"key length 0":       {1, 0, 0},
		"unknown action 0":   {0, 1, 'a'},
		"unknown action 6":   {6, 1, 'a', 0},
		"unknown action 255": {255},
		"source length 200":  {1, 1, 'a', 200},
		"trailing bytes":     {2, 1, 'a', 'x'},
		"reset source 128":   {4, 128},
	}
	for n := 128; n <= 255; n++ {
		cases["key length "+strconv.Itoa(n)] = []byte{1, byte(n)}
	}
	for name, b := range cases {
		c := s.send(t, b)
		if a := readAnswer(t, c); a != AnswerFailed {
			t.Errorf("%s: answered %q, want -", name, a)
		}
		c.Close()
	}
	// Truncated requests: the client gives up; the server drops them.
	for _, b := range [][]byte{{1}, {1, 3, 'a'}, {5, 1, 'a'}, {4, 9, 'x'}} {
		c := s.send(t, b)
		c.CloseWrite()
		if !readClosed(t, c) {
			t.Errorf("truncated %v: not closed", b)
		}
		c.Close()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		b := make([]byte, rng.IntN(300))
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		c := s.send(t, b)
		c.CloseWrite()
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		var ans [1]byte
		if n, _ := c.Read(ans[:]); n == 1 && ans[0] != AnswerFailed && ans[0] != AnswerOK && ans[0] != AnswerBusy {
			t.Errorf("random bytes %x: answered %q", b, ans[0])
		}
		c.Close()
	}
	if a := s.do(t, lockReq("alive", "")); a != AnswerOK {
		t.Fatalf("server not serving after bad input: %q", a)
	}
}

// A client that sends bytes while it is parked breaks the protocol: its
// request is withdrawn and answered '-'.
func TestBytesWhileParkedWithdraw(t *testing.T) {
	s := startServer(t, ServerConfig{})
	s.do(t, lockReq("k", "holder"))
	c := s.park(t, "k", "chatty")
	c.Write([]byte{1})
	if a := readAnswer(t, c); a != AnswerFailed {
		t.Fatalf("answered %q, want -", a)
	}
	s.waitParked(t, "k", 0)
}

// A granted client that resets the connection instead of reading its '+'
// never received the grant: the key passes on.
func TestGrantNotReadIsPassedOn(t *testing.T) { bothTransports(t, testGrantNotReadIsPassedOn) }

func testGrantNotReadIsPassedOn(t *testing.T, start starter) {
	s := start(t, ServerConfig{})
	s.do(t, lockReq("k", "holder"))
	w := s.park(t, "k", "w")
	next := s.park(t, "k", "next")
	s.do(t, Request{Action: ActionUnlock, Key: "k"})
	eventually(t, "grant to w", func() bool { return s.holderSource("k") == "w" })
	w.SetLinger(0)
	w.Close()
	if readAnswer(t, next) != AnswerOK {
		t.Fatal("next waiter not granted after w dropped its grant")
	}
}

func TestCloseCutsParkedConnections(t *testing.T) {
	s, done := serveTable(t, newNode(), ServerConfig{Logger: testLogger(t)})
	srv := s.srv
	s.do(t, lockReq("k", "holder"))
	c := s.park(t, "k", "w")
	srv.Close()
	srv.Close() // twice is fine
	if err := <-done; err != nil {
		t.Fatalf("Serve after Close: %v", err)
	}
	if !readClosed(t, c) {
		t.Fatal("parked connection survived Close")
	}
	if _, err := net.Dial("tcp", s.addr); err == nil {
		t.Fatal("listener still accepting after Close")
	}
}

// A client that gives up on a lock as it is granted at once (its deadline
// fired, it was cancelled) never read the '+': the key must not stay with
// it.
func TestAbandonedImmediateGrantIsUndone(t *testing.T) {
	bothTransports(t, testAbandonedImmediateGrantIsUndone)
}

func testAbandonedImmediateGrantIsUndone(t *testing.T, start starter) {
	s := start(t, ServerConfig{})
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 300 {
		key := "abandoned" + strconv.Itoa(i)
		c := s.send(t, AppendRequest(nil, lockReq(key, "quitter")))
		if i%2 == 0 {
			c.SetLinger(0)
		}
		// Give up at a random instant around the grant, as a client
		// deadline would.
		time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
		c.Close()
		eventually(t, "abandoned key released", func() bool {
			_, held := s.table.Holder(key)
			return !held
		})
	}
	// A client that reads its '+' and closes keeps the key.
	if s.do(t, lockReq("kept", "reader")) != AnswerOK {
		t.Fatal("lock failed")
	}
	if s.holderSource("kept") != "reader" {
		t.Fatal("a delivered grant was undone")
	}
}
