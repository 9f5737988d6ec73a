package manager

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/auth"
	"github.com/locking-center/locking-center/internal/silentserver"
	"github.com/locking-center/locking-center/mutex"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("runtime.runCleanups"))
}

// start serves the management port of a fresh table on 127.0.0.1.
func start(t *testing.T) (*mutex.Node, *Client) {
	t.Helper()
	return startWith(t, Config{})
}

// startWith serves the management port of a fresh table on 127.0.0.1
// with cfg.
func startWith(t testing.TB, cfg Config) (*mutex.Node, *Client) {
	t.Helper()
	tb := mutex.NewNode(mutex.NodeConfig{})
	t.Cleanup(tb.Close)
	cfg.Logger = slog.New(slog.DiscardHandler)
	srv := NewServer(tb, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background(), ln) }()
	t.Cleanup(func() {
		srv.Close()
		srv.Close()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return tb, &Client{Addr: ln.Addr().String()}
}

func lock(t *testing.T, tb *mutex.Node, key, source string) {
	t.Helper()
	if _, err := tb.Lock(context.Background(), mutex.Claim{Key: key, Source: source, RemoteAddr: "10.0.0.4:51314"}); err != nil {
		t.Fatal(err)
	}
}

func TestListAndReset(t *testing.T) {
	tb, c := start(t)
	ctx := context.Background()
	lock(t, tb, "b", "x")
	lock(t, tb, "a\xff", "y")
	lock(t, tb, "c", "x")
	keys, err := c.Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(keys, ",") != "a\xff,b,c" {
		t.Fatalf("keys = %q", keys)
	}
	hs, err := c.Holders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 3 || hs[0].Key != "a\xff" || hs[0].Source != "y" || hs[0].RemoteAddr != "10.0.0.4:51314" {
		t.Fatalf("holders = %+v", hs)
	}
	// Tokens come with them, each above the one before (b, a\xff, c).
	if !(hs[1].Token < hs[0].Token && hs[0].Token < hs[2].Token) || hs[0].Session != 0 || hs[0].Lease >= 0 {
		t.Fatalf("tokens and sessions = %+v", hs)
	}
	if hs[0].Held < 0 || time.Since(hs[0].Acquired) > time.Minute {
		t.Fatalf("times = %v, %v", hs[0].Acquired, hs[0].Held)
	}
	if err := c.ResetKey(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := c.ResetSource(ctx, "y"); err != nil {
		t.Fatal(err)
	}
	keys, _ = c.Keys(ctx)
	if strings.Join(keys, ",") != "c" {
		t.Fatalf("keys after resets = %q", keys)
	}
}

func TestHoldersReportWaiters(t *testing.T) {
	tb, c := start(t)
	lock(t, tb, "k", "x")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tb.Lock(ctx, mutex.Claim{Key: "k", Source: "w"})
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		hs, err := c.Holders(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(hs) == 1 && hs[0].Waiters == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("holders = %+v, want one waiter", hs)
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
}

// raw sends bytes to the server and returns all it answers.
func raw(t *testing.T, addr string, b []byte) []byte {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Write(b)
	conn.(*net.TCPConn).CloseWrite()
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	out, _ := io.ReadAll(conn)
	return out
}

func TestMalformedRequests(t *testing.T) {
	tb, c := start(t)
	for _, b := range [][]byte{{0}, {13}, {255}, {3, 0}, {3, 200}, {1, 'x'}, {4, 1, 's', 'x'}, {9, 0}, {8, 1, 'n', 0}, {8, 1, 'n', 3, 'h', ':', '1', 0, 2}} {
		if got := raw(t, c.Addr, b); !bytes.Equal(got, []byte{'-'}) {
			t.Errorf("%v: answered %q, want -", b, got)
		}
	}
	for _, b := range [][]byte{{}, {3}, {3, 5, 'a'}} {
		if got := raw(t, c.Addr, b); len(got) != 0 {
			t.Errorf("truncated %v: answered %q, want a silent close", b, got)
		}
	}
	lock(t, tb, "k", "s")
	if keys, err := c.Keys(context.Background()); err != nil || len(keys) != 1 {
		t.Fatalf("server after bad input: %v %v", keys, err)
	}
}

func TestClientErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := &Client{Addr: addr}
	if _, err := c.Keys(context.Background()); err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("unreachable server: %v", err)
	}
	if err := c.ResetKey(context.Background(), ""); !errors.Is(err, ErrMalformed) {
		t.Fatalf("empty key: %v", err)
	}
	if err := c.ResetKey(context.Background(), strings.Repeat("k", 128)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("long key: %v", err)
	}
}

// silentServer accepts connections on 127.0.0.1 and never answers, until
// the test ends.
func silentServer(t *testing.T) string {
	t.Helper()
	s, err := silentserver.Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s.Addr()
}

func TestReadTimeoutEndsEveryRequest(t *testing.T) {
	c := &Client{Addr: silentServer(t), ReadTimeout: 50 * time.Millisecond}
	// The context only keeps a client without a read timeout from hanging
	// the test: its end is not the error the requests must return.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, call := range map[string]func() error{
		"Keys":        func() error { _, err := c.Keys(ctx); return err },
		"Holders":     func() error { _, err := c.Holders(ctx); return err },
		"ResetKey":    func() error { return c.ResetKey(ctx, "k") },
		"ResetSource": func() error { return c.ResetSource(ctx, "s") },
	} {
		err := call()
		if !errors.Is(err, os.ErrDeadlineExceeded) || !strings.Contains(err.Error(), "no response within 50ms") {
			t.Errorf("%s against a silent server = %v, want a read timeout", name, err)
		}
	}
	c.ReadTimeout = -1
	short, cancelShort := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	if _, err := c.Keys(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Keys without a read timeout = %v, want the context's deadline", err)
	}
}

func TestHolderListRoundTrip(t *testing.T) {
	in := []Holder{
		{Key: "k", Source: "", RemoteAddr: "[::1]:5", Acquired: time.Unix(0, 1795946168069833000), Held: 73204 * time.Millisecond, Waiters: 3},
		{Key: "\x00\xff", Source: strings.Repeat("s", 127), RemoteAddr: "1.2.3.4:5", Acquired: time.Unix(0, 0), Waiters: 0},
	}
	for i := range in {
		in[i].Lease, in[i].Count, in[i].Limit = -1, 1, 1
	}
	in = append(in, Holder{Key: "s", Source: "x", Acquired: time.Unix(0, 5), Token: 1<<64 - 1, Session: 7,
		Lease: time.Second, Delay: time.Minute, Mode: mutex.Shared, Count: 3, Limit: 4})
	in = append(in, Holder{Key: "n", Source: "ci", Acquired: time.Unix(0, 6), Token: 9, Session: 8, Lease: -1, Count: 1,
		Limit: 1, Note: strings.Repeat("é", mutex.MaxNoteLen/2)})
	for _, detail := range []holderDetail{holderTokens, holderNotes} {
		want := slices.Clone(in)
		if detail < holderNotes {
			for i := range want {
				want[i].Note = ""
			}
		}
		b := appendHolders(nil, in, detail)
		out, err := decodeHolders(b[1:], detail)
		if err != nil {
			t.Fatal(err)
		}
		equalHolders(t, out, want)
	}
}

func equalHolders(t *testing.T, out, in []Holder) {
	t.Helper()
	if len(out) != len(in) {
		t.Fatalf("%d holders, want %d", len(out), len(in))
	}
	for i := range in {
		if !in[i].Acquired.Equal(out[i].Acquired) {
			t.Fatalf("acquired %v != %v", in[i].Acquired, out[i].Acquired)
		}
		out[i].Acquired = in[i].Acquired
		if in[i] != out[i] {
			t.Fatalf("holder %d: %+v != %+v", i, out[i], in[i])
		}
	}
}

// FuzzDecodeHolders: a response from a server is never trusted; the
// decoder refuses what does not parse and never over-allocates.
func FuzzDecodeHolders(f *testing.F) {
	detail := func(ext bool) holderDetail {
		if ext {
			return holderTokens
		}
		return holderPlain
	}
	for _, ext := range []bool{false, true} {
		f.Add(appendHolders(nil, []Holder{{Key: "k", Source: "s", RemoteAddr: "r", Acquired: time.Unix(1, 0)}}, detail(ext))[1:], ext)
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, false)
	f.Add([]byte{0, 0, 0, 0}, true)
	f.Fuzz(func(t *testing.T, b []byte, ext bool) { roundTripHolders(t, b, detail(ext)) })
}

// FuzzDecodeHoldersNotes: the same for the list with notes.
func FuzzDecodeHoldersNotes(f *testing.F) {
	f.Add(appendHolders(nil, []Holder{{Key: "k", Source: "s", RemoteAddr: "r", Acquired: time.Unix(1, 0), Note: "job 7"}}, holderNotes)[1:])
	f.Add([]byte{0, 0, 0, 1, 1, 'k', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x04, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) { roundTripHolders(t, b, holderNotes) })
}

// roundTripHolders checks that b, if it decodes, is what its holders
// encode to.
func roundTripHolders(t *testing.T, b []byte, detail holderDetail) {
	hs, err := decodeHolders(b, detail)
	if err != nil {
		return
	}
	if enc := appendHolders(nil, hs, detail); !bytes.Equal(enc[1:], b) {
		t.Fatalf("re-encoded %x, want %x", enc[1:], b)
	}
}

func TestSessionListRoundTrip(t *testing.T) {
	in := []Session{
		{ID: 1, Name: "svc", RemoteAddr: "10.0.0.1:2", TTL: 10 * time.Second, Idle: time.Second, Held: 3, Parked: 1},
		{ID: 1<<64 - 1, Name: strings.Repeat("n", 127), TTL: time.Minute},
	}
	out, err := decodeSessions(appendSessions(nil, in)[1:])
	if err != nil || len(out) != len(in) || out[0] != in[0] || out[1] != in[1] {
		t.Fatalf("decoded %+v, %v; want %+v", out, err, in)
	}
	if _, err := decodeSessions([]byte{0xff, 0xff, 0xff, 0xff}); err == nil {
		t.Fatal("a count past the body decoded")
	}
}

// FuzzDecodeRequest: any bytes decode to a request that re-encodes to the
// same prefix, or to an error.
func FuzzDecodeRequest(f *testing.F) {
	for _, b := range [][]byte{{1}, {2}, {3, 1, 'k'}, {4, 0}, {4, 2, 'a', 'b'}, {3, 0}, {7},
		{8, 1, 'n', 3, 'h', ':', '1', 0, 1}, {9, 2, 'n', '4'}, {10, 0}, {0x80, 0, 1, 'x', 9, 1, 'n'},
		{0x80, 0, 3, 't', 'o', 'k', 1}, {0x80, 0, 0, 1}, {0x80, 0, 1, 'x', 0x80, 0, 1, 'y', 1}, {0x80, 4, 1}} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := decodeRequest(b)
		if err != nil {
			return
		}
		if enc := appendRequest(nil, r); !bytes.Equal(enc, b[:n]) {
			t.Fatalf("re-encoded %x, want %x", enc, b[:n])
		}
	})
}

// With authentication on, the management port serves an admin's requests
// only; everything else is answered '-' and counted.
func TestAuthenticatedForm(t *testing.T) {
	toks, err := auth.Parse(strings.NewReader("ops admin ops-token-0123456789\nsvc client svc-token-0123456789\n"))
	if err != nil {
		t.Fatal(err)
	}
	tb, c := startWith(t, Config{Tokens: toks})
	ctx := context.Background()
	lock(t, tb, "k", "x")
	for _, token := range []string{"", "svc-token-0123456789", "unknown-token-000000"} {
		c.Token = token
		if _, err := c.Keys(ctx); !errors.Is(err, ErrFailed) {
			t.Errorf("keys with token %q: %v, want ErrFailed", token, err)
		}
		if err := c.ResetKey(ctx, "k"); !errors.Is(err, ErrFailed) {
			t.Errorf("reset with token %q: %v, want ErrFailed", token, err)
		}
	}
	if _, held := tb.Holder("k"); !held {
		t.Fatal("a refused reset took the key")
	}
	c.Token = "ops-token-0123456789"
	if keys, err := c.Keys(ctx); err != nil || len(keys) != 1 {
		t.Fatalf("an admin's keys: %v, %v", keys, err)
	}
	if err := c.ResetKey(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	got := tb.Snapshot().Counters.Refusals
	if got[mutex.RefusedUnauthenticated] != 4 || got[mutex.RefusedForbidden] != 2 {
		t.Errorf("refusals %v, want 4 unauthenticated and 2 forbidden", got)
	}
	// Without authentication the form is taken and its token ignored.
	tb2, c2 := start(t)
	lock(t, tb2, "k", "x")
	c2.Token = "anything-at-all"
	if keys, err := c2.Keys(ctx); err != nil || len(keys) != 1 {
		t.Fatalf("keys in the authenticated form, without authentication: %v, %v", keys, err)
	}
}
