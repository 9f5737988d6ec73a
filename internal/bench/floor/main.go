// Command floor is the cost floor of the mutex port's protocols: a server
// that keeps no table and answers at once. The benchmark runs it beside
// lcd so that lcd's throughput and CPU are read as ratios to what the
// connections themselves cost on the same machine at the same moment.
//
//   - By default, the floor of v1: it accepts a connection, reads one
//     whole request, answers '+' and closes, the '+' and the end of the
//     connection sent together as lcd sends its answers
//     (serve.WriteLast), in one segment.
//   - With -session, the floor of the session protocol (v2): it reads the
//     preface and then frames on a persistent connection and answers every
//     frame at once, WELCOME to HELLO and RESUME, GRANTED to ACQUIRE, OK
//     to the rest, with no sessions and no queues; the answers to the
//     frames of one read leave in one write, as lcd's do. It decodes
//     frames with lcd's decoder (session.ParseFrame).
//   - With -session -queue, the floor of a contended key: the same, but
//     each key has a holder and a FIFO queue; an ACQUIRE of a held key
//     waits (no answer), a RELEASE writes GRANTED to the next waiter at
//     once, and DESCRIBE answers INFO with the queue's length.
//
// It listens as lcd's mutex port does (oneshot.Listen: no TCP keep-alive,
// deferred accept on Linux), so the comparison is of the work done per
// connection and not of socket options. One goroutine serves each
// connection.
//
// Usage: floor [-session [-queue]] ADDR. It prints its bound address on the first
// line of standard output and serves until killed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"

	"github.com/locking-center/locking-center/internal/serve"
	"github.com/locking-center/locking-center/oneshot"
)

func main() {
	sessions := flag.Bool("session", false, "serve the session protocol instead of v1")
	flag.BoolVar(&queued, "queue", false, "with -session: keep each key's holder and FIFO queue of ACQUIREs, granting the next at each RELEASE")
	flag.Usage = func() { fmt.Fprintln(os.Stderr, "usage: floor [-session [-queue]] ADDR") }
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	ln, err := oneshot.Listen(context.Background(), "tcp", flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr())
	serve := serveV1
	if *sessions {
		serve = serveSession
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go serve(c)
	}
}

// answerOK is the floor's answer to every v1 request.
var answerOK = []byte{oneshot.AnswerOK}

// serveV1 reads one request, answers '+' and closes.
func serveV1(c net.Conn) {
	defer c.Close()
	var buf [300]byte
	n := 0
	for {
		m, err := c.Read(buf[n:])
		n += m
		if _, _, derr := oneshot.DecodeRequest(buf[:n]); derr == nil {
			serve.WriteLast(c, answerOK, false)
			return
		} else if errors.Is(derr, oneshot.ErrMalformed) || err != nil {
			return
		}
	}
}
