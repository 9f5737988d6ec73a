package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/locking-center/locking-center/internal/bench/proc"
	"github.com/locking-center/locking-center/oneshot"
)

var (
	twCycles   = flag.Int("timewait-cycles", 100_000, "lock+unlock cycles of timewait's count")
	twRequests = flag.Int("timewait-requests", 1000, "requests of each kind of answer in timewait")
	twList     = flag.String("timewait-clients", "1", "comma-separated client counts of timewait's cycles")
)

// twClients are the client counts of timewait's cycles.
var twClients = []int{1}

// answerKind is a kind of v1 answer whose connections timewait follows:
// ask makes one request of that kind on lcd at addr (the i-th), with what
// it takes around it on connections of their own, and returns the
// client's port of the connection that got the answer.
type answerKind struct {
	name string
	ask  func(addr string, i int) int
}

var answerKinds = []answerKind{
	{"a grant at once", func(addr string, i int) int {
		key := "tw/" + strconv.Itoa(i)
		port := mustAsk(addr, oneshot.Request{Action: oneshot.ActionLock, Key: key}, oneshot.AnswerOK)
		mustAsk(addr, oneshot.Request{Action: oneshot.ActionUnlock, Key: key}, oneshot.AnswerOK)
		return port
	}},
	{"a grant after a wait", func(addr string, i int) int {
		key := "tw/" + strconv.Itoa(i)
		mustAsk(addr, oneshot.Request{Action: oneshot.ActionLock, Key: key, Source: "holder"}, oneshot.AnswerOK)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			log.Fatal(err)
		}
		port := c.LocalAddr().(*net.TCPAddr).Port
		if _, err := c.Write(oneshot.AppendRequest(nil, oneshot.Request{Action: oneshot.ActionLock, Key: key, Source: "waiter"})); err != nil {
			log.Fatal(err)
		}
		// lcd applies whole requests in the order their connections
		// reached it (oneshot.Listen defers each accept until its bytes
		// are in): the waiter's, written before the unlock's connection
		// is dialled, is parked by the time the unlock is applied.
		mustAsk(addr, oneshot.Request{Action: oneshot.ActionUnlock, Key: key}, oneshot.AnswerOK)
		var b [1]byte
		if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != oneshot.AnswerOK {
			log.Fatalf("waiter: %q %v", b[0], err)
		}
		c.Close()
		mustAsk(addr, oneshot.Request{Action: oneshot.ActionUnlock, Key: key}, oneshot.AnswerOK)
		return port
	}},
	{"an unlock", func(addr string, i int) int {
		key := "tw/" + strconv.Itoa(i)
		mustAsk(addr, oneshot.Request{Action: oneshot.ActionLock, Key: key}, oneshot.AnswerOK)
		return mustAsk(addr, oneshot.Request{Action: oneshot.ActionUnlock, Key: key}, oneshot.AnswerOK)
	}},
	{"a busy try-lock", func(addr string, i int) int {
		if i == 0 {
			mustAsk(addr, oneshot.Request{Action: oneshot.ActionLock, Key: "tw/busy", Source: "holder"}, oneshot.AnswerOK)
		}
		return mustAsk(addr, oneshot.Request{Action: oneshot.ActionTryLock, Key: "tw/busy", Source: "other"}, oneshot.AnswerBusy)
	}},
	{"a '-' (a malformed request)", func(addr string, i int) int {
		return mustAskBytes(addr, []byte{9, 1, 'k'}, oneshot.AnswerFailed)
	}},
}

// mustAsk sends r on a new connection, checks its answer and returns the
// client's port of the connection.
func mustAsk(addr string, r oneshot.Request, want byte) int {
	return mustAskBytes(addr, oneshot.AppendRequest(nil, r), want)
}

// mustAskBytes is mustAsk with the request's bytes.
func mustAskBytes(addr string, req []byte, want byte) int {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(req); err != nil {
		log.Fatal(err)
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != want {
		log.Fatalf("answer %q, want %q: %v", b[0], want, err)
	}
	return c.LocalAddr().(*net.TCPAddr).Port
}

// timeWait prints, for lcd and beforeBin's lcd, the TIME_WAIT sockets that
// each kind of answer leaves on each side of its connections, and those
// that the cycles of one client leave.
func timeWait(lcdBin, beforeBin string) {
	bins := []string{lcdBin}
	if beforeBin != "" {
		bins = append(bins, beforeBin)
	}
	heading("Who closes first: TIME_WAIT after v1 requests",
		"Each connection leaves its TIME_WAIT on the side that closed first: the client's (its ephemeral port) or the server's (its listening port).",
		"| server | answer | connections | TIME_WAIT, client side | TIME_WAIT, server side |",
		"|---|---|---:|---:|---:|")
	for _, bin := range bins {
		for _, k := range answerKinds {
			lcd := startLCD(bin)
			ports := make(map[int]bool, *twRequests)
			for i := range *twRequests {
				ports[k.ask(lcd.addr, i)] = true
			}
			client, server := settledTimeWaits(lcd.addr, func(port int) bool { return ports[port] })
			fmt.Printf("| %s | %s | %d | %d | %d |\n", label(bin, beforeBin), k.name, len(ports), client, server)
			lcd.stop()
		}
	}
	fmt.Println()
	fmt.Println("| server | cycles | clients | seconds | cycles/s | TIME_WAIT, client side | TIME_WAIT, server side |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|")
	for _, clients := range twClients {
		for _, bin := range bins {
			lcd := startLCD(bin)
			// Not the connection that found lcd listening, which closed
			// first without a word.
			before := timeWaitPorts(lcd.addr)
			elapsed := cycles(lcd.addr, *twCycles, clients)
			client, server := settledTimeWaits(lcd.addr, func(port int) bool { return !before[port] })
			fmt.Printf("| %s | %d | %d | %.1f | %.0f | %d | %d |\n", label(bin, beforeBin), *twCycles, clients,
				elapsed.Seconds(), float64(*twCycles)/elapsed.Seconds(), client, server)
			lcd.stop()
		}
	}
	fmt.Println()
}

// cycles runs n lock+unlock cycles on lcd at addr from clients goroutines,
// each its own key, and returns how long they took.
func cycles(addr string, n, clients int) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range clients {
		wg.Go(func() {
			key := "tw/" + strconv.Itoa(i)
			for next.Add(1) <= int64(n) {
				if err := cycle(addr, key); err != nil {
					log.Fatal(err)
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// settledTimeWaits counts the TIME_WAIT sockets of the connections to the
// server at addr whose client's port is one that counts, on the client's
// side and on the server's, once the last closes have been processed:
// when two counts a little apart agree.
func settledTimeWaits(addr string, counts func(port int) bool) (client, server int) {
	port, _ := strconv.Atoi(proc.Port(addr))
	client, server = -1, -1
	for {
		c, s := 0, 0
		for _, sk := range proc.Sockets() {
			switch {
			case sk.State != proc.TimeWait:
			case sk.Remote == port && counts(sk.Local):
				c++
			case sk.Local == port && counts(sk.Remote):
				s++
			}
		}
		if c == client && s == server {
			return client, server
		}
		client, server = c, s
		time.Sleep(200 * time.Millisecond)
	}
}

// timeWaitPorts returns the clients' ports of the TIME_WAIT sockets on the
// clients' side of connections to the server at addr.
func timeWaitPorts(addr string) map[int]bool {
	port, _ := strconv.Atoi(proc.Port(addr))
	out := make(map[int]bool)
	for _, sk := range proc.Sockets() {
		if sk.State == proc.TimeWait && sk.Remote == port {
			out[sk.Local] = true
		}
	}
	return out
}
