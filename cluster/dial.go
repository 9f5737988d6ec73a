package cluster

import (
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// resolveTCP resolves the advertised raft address.
func resolveTCP(addr string) (*net.TCPAddr, error) {
	a, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cluster: raft advertise address %q: %w", addr, err)
	}
	return a, nil
}

// tcpStream is raft's stream layer over a TCP listener that Start bound.
type tcpStream struct {
	net.Listener
	advertise net.Addr
	// dial returns the address to dial for a peer's raft address.
	dial func(raft.ServerAddress) string
}

// Dial dials a peer's raft port, at its Config.Dial address when it has
// one.
func (s *tcpStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", s.dial(addr), timeout)
}

// Addr returns the address the other nodes reach this one at.
func (s *tcpStream) Addr() net.Addr { return s.advertise }
