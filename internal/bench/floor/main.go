// Command floor is the cost floor of the mutex-port protocol: a server
// that accepts a connection, reads one whole request, answers '+' and
// closes. It keeps no table. The benchmark runs it beside lcd so that
// lcd's throughput and CPU are read as ratios to what the connection
// itself costs on the same machine at the same moment.
//
// It listens as lcd's mutex port does (oneshot.Listen: no TCP keep-alive,
// deferred accept on Linux), so the comparison is of the work done per
// connection and not of socket options.
//
// Usage: floor ADDR. It prints its bound address on the first line of
// standard output and serves until killed.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/locking-center/locking-center/oneshot"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: floor ADDR")
		os.Exit(2)
	}
	ln, err := oneshot.Listen(context.Background(), "tcp", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr())
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

// serve reads one request, answers '+' and closes.
func serve(c net.Conn) {
	defer c.Close()
	var buf [300]byte
	n := 0
	for {
		m, err := c.Read(buf[n:])
		n += m
		if _, _, derr := oneshot.DecodeRequest(buf[:n]); derr == nil {
			c.Write([]byte{oneshot.AnswerOK})
			return
		} else if errors.Is(derr, oneshot.ErrMalformed) || err != nil {
			return
		}
	}
}
