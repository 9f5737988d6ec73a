package oneshot

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/locking-center/locking-center/mutex"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if args := os.Getenv(childManyEnv); args != "" {
		runChild(args)
		return
	}
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("runtime.runCleanups")) // the runtime runs cleanups (unique's) on a goroutine of its own
}

// testLogger routes a server's logs to t.Log.
func testLogger(t *testing.T) *slog.Logger {
	t.Helper()
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// testServer is a node and its v1 server on 127.0.0.1.
type testServer struct {
	table *mutex.Node
	srv   *Server
	addr  string
	tls   *tls.Config // the clients' config when the server speaks TLS
}

// clientConn is a test's connection to the server, with its socket: the
// same connection without TLS, the one under it with.
type clientConn struct {
	net.Conn
	tcp *net.TCPConn
}

// SetLinger sets the socket's linger: 0 makes Close send a reset.
func (c *clientConn) SetLinger(sec int) error { return c.tcp.SetLinger(sec) }

// CloseWrite ends the socket's write side, as a client that gives up on
// its request does.
func (c *clientConn) CloseWrite() error { return c.tcp.CloseWrite() }

// newNode returns a node with an empty table and no journal.
func newNode() *mutex.Node { return mutex.NewNode(mutex.NodeConfig{}) }

// startServer serves a fresh table on a 127.0.0.1 port until the test ends.
func startServer(t *testing.T, cfg ServerConfig) *testServer {
	t.Helper()
	return startServerWith(t, newNode(), cfg)
}

func startServerWith(t *testing.T, table *mutex.Node, cfg ServerConfig) *testServer {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	s, done := serveTable(t, table, cfg)
	t.Cleanup(func() {
		s.srv.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

// serveTable serves table on a 127.0.0.1 port; Serve's result arrives on
// the channel once the server is closed.
func serveTable(t *testing.T, table *mutex.Node, cfg ServerConfig) (*testServer, <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveTableOn(t, table, cfg, ln)
}

// serveTableOn is serveTable on the listener ln.
func serveTableOn(t *testing.T, table *mutex.Node, cfg ServerConfig, ln net.Listener) (*testServer, <-chan error) {
	t.Helper()
	srv, err := NewServer(table, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background(), ln) }()
	return &testServer{table: table, srv: srv, addr: ln.Addr().String()}, done
}

// park sends a lock request for key and waits until it is parked.
func (s *testServer) park(t *testing.T, key, source string) *clientConn {
	t.Helper()
	n := parkedOn(s.table, key)
	c := s.send(t, AppendRequest(nil, lockReq(key, source)))
	s.waitParked(t, key, n+1)
	return c
}

// dial opens a connection to the server, and does its TLS handshake when
// the server speaks TLS.
func (s *testServer) dial(t *testing.T) *clientConn {
	t.Helper()
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	cc := &clientConn{Conn: c, tcp: c.(*net.TCPConn)}
	if s.tls != nil {
		cfg := s.tls.Clone()
		cfg.ServerName = "127.0.0.1"
		tc := tls.Client(c, cfg)
		tc.SetDeadline(time.Now().Add(30 * time.Second))
		if err := tc.Handshake(); err != nil {
			c.Close()
			t.Fatal(err)
		}
		tc.SetDeadline(time.Time{})
		cc.Conn = tc
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// send opens a connection and writes the request bytes on it.
func (s *testServer) send(t *testing.T, b []byte) *clientConn {
	t.Helper()
	c := s.dial(t)
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	return c
}

// do sends one request and returns its answer; it closes the connection.
func (s *testServer) do(t *testing.T, r Request) byte {
	t.Helper()
	c := s.send(t, AppendRequest(nil, r))
	defer c.Close()
	return readAnswer(t, c)
}

// readAnswer reads the one-byte answer of c, failing the test on EOF.
func readAnswer(t *testing.T, c net.Conn) byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		t.Fatalf("read answer: %v", err)
	}
	return b[0]
}

// readClosed reports whether the server closed c without an answer: the
// read ends with EOF or a reset and no byte.
func readClosed(t *testing.T, c net.Conn) bool {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var b [1]byte
	n, err := c.Read(b[:])
	return n == 0 && err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

func lockReq(key, source string) Request {
	return Request{Action: ActionLock, Key: key, Source: source}
}

// eventually polls cond until it holds, failing the test after 30 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// parkedOn returns the number of requests parked behind key.
func parkedOn(n *mutex.Node, key string) int { return n.Describe(key).Queue }

// waitParked waits until key has n parked requests.
func (s *testServer) waitParked(t *testing.T, key string, n int) {
	t.Helper()
	eventually(t, "parked waiters", func() bool { return parkedOn(s.table, key) == n })
}

// holderSource returns the source of key's holder, or "" when free.
func (s *testServer) holderSource(key string) string {
	g, ok := s.table.Holder(key)
	if !ok {
		return ""
	}
	return g.Source
}

// describeTable describes every key of n, for failure messages.
func describeTable(n *mutex.Node) string {
	s := ""
	n.Export(func(r *mutex.Record) { s += fmt.Sprintf("%+v; ", *r) })
	return s
}

// childManyEnv makes the test binary a client process: given "addr key n"
// it parks n lock requests for key on addr, prints "parked", and closes
// them all when its standard input ends. Killing it works too.
const childManyEnv = "LC_MUTEX_TEST_CHILD"

func runChild(args string) {
	var addr, key string
	var n int
	if _, err := fmt.Sscan(args, &addr, &key, &n); err != nil {
		fmt.Println("bad args:", err)
		os.Exit(2)
	}
	conns := make([]net.Conn, 0, n)
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			_, err = c.Write(AppendRequest(nil, lockReq(key, "child"+strconv.Itoa(i))))
		}
		if err != nil {
			fmt.Println("dial:", err)
			os.Exit(1)
		}
		conns = append(conns, c)
	}
	fmt.Println("parked")
	io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.Close()
	}
	os.Exit(0)
}

// child is a client process started from the test binary.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func startChild(t *testing.T, env, args string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+args)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
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
	if line != "parked\n" {
		t.Fatalf("child process said %q", line)
	}
	return &child{cmd: cmd, stdin: stdin}
}

func (c *child) closeStdin() { c.stdin.Close() }

func (c *child) wait(t *testing.T) {
	t.Helper()
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("child process: %v", err)
	}
}
