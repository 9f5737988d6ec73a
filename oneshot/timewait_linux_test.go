package oneshot

import (
	"bufio"
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Every answer leaves with the server's end of the connection, so a
// client that reads its answer and closes is the second to close: each
// connection's TIME_WAIT is the server's, and none is left behind the
// client's ephemeral ports. Counted over lock+unlock cycles, each request
// on a new connection as the clients make them, and over the other
// answers: a grant after a wait, a busy try-lock, a '-'.
func TestTimeWaitStaysWithTheServer(t *testing.T) {
	bothTransports(t, testTimeWaitStaysWithTheServer)
}

func testTimeWaitStaysWithTheServer(t *testing.T, start starter) {
	const cycles = 200
	s := start(t, ServerConfig{})
	var ports []int // the clients' ends
	ask := func(c *clientConn, want byte) {
		t.Helper()
		ports = append(ports, c.tcp.LocalAddr().(*net.TCPAddr).Port)
		if a := readAnswer(t, c); a != want {
			t.Fatalf("answered %q, want %q", a, want)
		}
		c.Close()
	}
	do := func(r Request, want byte) {
		t.Helper()
		ask(s.send(t, AppendRequest(nil, r)), want)
	}
	for range cycles {
		do(lockReq("cycled", ""), AnswerOK)
		do(Request{Action: ActionUnlock, Key: "cycled"}, AnswerOK)
	}
	do(lockReq("held", "holder"), AnswerOK)
	w := s.park(t, "held", "waiter")
	do(Request{Action: ActionTryLock, Key: "held", Source: "other"}, AnswerBusy)
	do(Request{Action: ActionUnlock, Key: "held"}, AnswerOK)
	ask(w, AnswerOK) // a grant after a wait
	do(Request{Action: ActionUnlock, Key: "held"}, AnswerOK)
	ask(s.send(t, []byte{9, 1, 'k'}), AnswerFailed)

	serverPort := portOf(t, s.addr)
	eventually(t, "a TIME_WAIT on the server's side", func() bool {
		_, server := timeWaits(t, serverPort, ports)
		return server > 0
	})
	if client, server := timeWaits(t, serverPort, ports); client != 0 {
		t.Fatalf("%d connections: %d TIME_WAIT on the clients' side, %d on the server's", len(ports), client, server)
	}
}

// The TIME_WAIT the server keeps does not hold its port: a server that
// stops can listen on the same port again at once (Go's listeners set
// SO_REUSEADDR), and serve there, beside its old connections' TIME_WAIT.
func TestListenAgainBesideTimeWait(t *testing.T) {
	ln, err := Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	s, done := serveTableOn(t, newNode(), ServerConfig{Logger: testLogger(t)}, ln)
	var ports []int
	for range 10 {
		c := s.send(t, AppendRequest(nil, Request{Action: ActionUnlock, Key: "k"}))
		ports = append(ports, c.tcp.LocalAddr().(*net.TCPAddr).Port)
		readAnswer(t, c)
		c.Close()
	}
	eventually(t, "a TIME_WAIT on the server's side", func() bool {
		_, server := timeWaits(t, portOf(t, addr), ports)
		return server > 0
	})
	s.srv.Close()
	<-done
	ln, err = Listen(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", addr, err)
	}
	s, done = serveTableOn(t, newNode(), ServerConfig{Logger: testLogger(t)}, ln)
	t.Cleanup(func() {
		s.srv.Close()
		<-done
	})
	if a := s.do(t, Request{Action: ActionUnlock, Key: "k"}); a != AnswerOK {
		t.Fatalf("unlock on the port listened on again: %q", a)
	}
}

// timeWaits counts the TIME_WAIT sockets of the connections between the
// server's port on 127.0.0.1 and the clients' ports: the clients' ends
// (their local port is a client's) and the server's.
func timeWaits(t *testing.T, server int, clients []int) (client, serverSide int) {
	t.Helper()
	ours := make(map[int]bool, len(clients))
	for _, p := range clients {
		ours[p] = true
	}
	for _, s := range tcpSockets(t) {
		switch {
		case s.state != tcpTimeWait:
		case s.remote == server && ours[s.local]:
			client++
		case s.local == server && ours[s.remote]:
			serverSide++
		}
	}
	return client, serverSide
}

// tcpSocket is a line of /proc/net/tcp: a TCP socket over IPv4 (the tests'
// are all on 127.0.0.1).
type tcpSocket struct {
	local, remote int    // ports
	state         int    // tcpTimeWait, ...
	timer         string // "tr:when"; tr 02 is the keep-alive timer
}

// tcpSockets reads /proc/net/tcp.
func tcpSockets(t *testing.T) []tcpSocket {
	t.Helper()
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []tcpSocket
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when ...
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 {
			continue
		}
		state, _ := strconv.ParseInt(fields[3], 16, 32)
		out = append(out, tcpSocket{local: hexPort(fields[1]), remote: hexPort(fields[2]), state: int(state), timer: fields[5]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// hexPort returns the port of an address of /proc/net/tcp, "0100007F:1F90".
func hexPort(addr string) int {
	p, _ := strconv.ParseInt(addr[strings.IndexByte(addr, ':')+1:], 16, 32)
	return int(p)
}

// portOf returns the port of addr, "host:port".
func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}
