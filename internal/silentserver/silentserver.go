// Package silentserver is a TCP server that accepts connections and does
// not answer them: the stand-in for a server that hangs, such as an lcd
// that has run out of file descriptors, in tests and in the conformance
// probe.
package silentserver

import (
	"io"
	"net"
	"sync"
)

// Server accepts connections and holds each one open without an answer,
// discarding what arrives, until its peer closes it or the server is
// closed.
type Server struct {
	ln     net.Listener
	answer func(action byte) (byte, bool)
	wg     sync.WaitGroup
	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
}

// Listen serves on address ("host:port"; port 0 picks a free one). answer,
// when not nil, is asked about the first byte of each request: when it
// returns true, the server writes the byte it returns and ends its side of
// that connection instead of staying silent.
func Listen(address string, answer func(action byte) (byte, bool)) (*Server, error) {
	ln, err := net.Listen("tcp", address)
	if err != nil {
		return nil, err
	}
	s := &Server{ln: ln, answer: answer, conns: make(map[net.Conn]struct{})}
	s.wg.Go(s.accept)
	return s, nil
}

// Addr returns the address the server listens on, "host:port".
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops accepting, closes every held connection and waits for the
// server's goroutines to end. It is safe to call more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	err := s.ln.Close()
	s.wg.Wait()
	return err
}

func (s *Server) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Go(func() { s.hold(c) })
	}
}

// hold serves one connection until its peer closes it or the server is
// closed.
func (s *Server) hold(c net.Conn) {
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	var first [1]byte
	if _, err := io.ReadFull(c, first[:]); err != nil {
		return
	}
	if s.answer != nil {
		if a, ok := s.answer(first[0]); ok {
			c.Write([]byte{a})
			// End of stream after the answer; the rest of the request is
			// read, so that the close does not reset the connection.
			c.(*net.TCPConn).CloseWrite()
		}
	}
	io.Copy(io.Discard, c)
}
