package oneshot

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// deferAccept is how long the kernel holds a connection whose first bytes
// have not arrived before handing it over anyway; the header timeout runs
// from then. The kernel rounds it up to its SYN-ACK retransmission steps.
const deferAccept = time.Second

// listenControl sets TCP_DEFER_ACCEPT on the listening socket.
func listenControl(network, address string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, int(deferAccept/time.Second))
	})
	if err != nil {
		return err
	}
	return serr
}
