package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"
)

// dialLimit bounds the proxy's connect to its target, and cut's to the
// proxy's control port.
const dialLimit = 5 * time.Second

// proxy forwards each connection it accepts to a target, in both
// directions, and resets them all at once when told to.
type proxy struct {
	target string
	dial   func(target string) (net.Conn, error) // opens the connection to the target
	ln     net.Listener                          // where clients connect
	ctl    net.Listener                          // where cut connects
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{} // both ends of every forwarded connection
}

// serveProxy runs a proxy to target on 127.0.0.1, prints "ADDR CTL", and
// stops when ctx ends.
func serveProxy(ctx context.Context, stdout io.Writer, target string) error {
	return serveWith(ctx, stdout, target, plainDial)
}

// serveTLSProxy runs a proxy that takes plain TCP on 127.0.0.1 and speaks
// TLS to target, verifying its certificate with the CA in caFile for the
// name localhost: a TLS terminator in front of the client, for a client
// without TLS of its own (the Rust client, standard library only).
func serveTLSProxy(ctx context.Context, stdout io.Writer, target, caFile string) error {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return fmt.Errorf("no certificate in %s", caFile)
	}
	cfg := &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	return serveWith(ctx, stdout, target, func(target string) (net.Conn, error) {
		d := tls.Dialer{NetDialer: &net.Dialer{Timeout: dialLimit}, Config: cfg}
		ctx, cancel := context.WithTimeout(context.Background(), dialLimit)
		defer cancel()
		return d.DialContext(ctx, "tcp", target)
	})
}

func plainDial(target string) (net.Conn, error) { return net.DialTimeout("tcp", target, dialLimit) }

func serveWith(ctx context.Context, stdout io.Writer, target string, dial func(string) (net.Conn, error)) error {
	p, err := listenProxy(target, dial)
	if err != nil {
		return err
	}
	defer p.close()
	if _, err := fmt.Fprintln(stdout, p.ln.Addr(), p.ctl.Addr()); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// listenProxy starts a proxy to target on two ports of 127.0.0.1.
func listenProxy(target string, dial func(string) (net.Conn, error)) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ln.Close()
		return nil, err
	}
	p := &proxy{target: target, dial: dial, ln: ln, ctl: ctl, conns: make(map[net.Conn]struct{})}
	p.wg.Go(p.accept)
	p.wg.Go(p.control)
	return p, nil
}

// close stops the proxy: its ports, then every connection through it,
// and waits for its goroutines.
func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.ctl.Close()
	p.reset()
	p.wg.Wait()
}

func (p *proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.forward(c) })
	}
}

// track adds c to the connections a cut resets; false when the proxy is
// closing.
func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

// forward copies c to a new connection to the target and back, until
// either side ends or a cut resets both.
func (p *proxy) forward(c net.Conn) {
	defer c.Close()
	if !p.track(c) {
		return
	}
	up, err := p.dial(p.target)
	if err != nil {
		p.untrack(c)
		return
	}
	defer up.Close()
	if !p.track(up) {
		p.untrack(c)
		return
	}
	defer p.untrack(c, up)
	done := make(chan struct{}, 1)
	go func() { io.Copy(up, c); done <- struct{}{} }()
	io.Copy(c, up)
	// One side ended: end both, so the other copy ends too.
	c.Close()
	up.Close()
	<-done
}

// reset ends every connection through the proxy with a TCP reset, and
// returns how many pairs it ended.
func (p *proxy) reset() int {
	p.mu.Lock()
	cs := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	clear(p.conns)
	p.mu.Unlock()
	// Every socket first, so that a forwarder that sees its other end go
	// and closes its own sends a reset too, not a FIN.
	for _, c := range cs {
		if tc, ok := c.(*tls.Conn); ok {
			c = tc.NetConn()
		}
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0) // close sends RST
		}
	}
	for _, c := range cs {
		c.Close()
	}
	return len(cs) / 2
}

// control answers each connection to the control port: it resets every
// connection through the proxy, then writes "cut N" and closes.
func (p *proxy) control() {
	for {
		c, err := p.ctl.Accept()
		if err != nil {
			return
		}
		n := p.reset()
		fmt.Fprintf(c, "cut %d\n", n)
		c.Close()
	}
}

// cut asks the proxy of control address ctl to reset its connections and
// waits until it has.
func cut(ctx context.Context, ctl string) error {
	d := net.Dialer{Timeout: dialLimit}
	c, err := d.DialContext(ctx, "tcp", ctl)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(dialLimit))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("cut at %s: %w", ctl, err)
	}
	if !strings.HasPrefix(line, "cut ") {
		return fmt.Errorf("cut at %s: answered %q, not a proxy's control port?", ctl, line)
	}
	return nil
}
