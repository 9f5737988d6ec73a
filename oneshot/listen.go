package oneshot

import (
	"context"
	"net"
)

// Listen announces the mutex port on address ("host:port") of network
// ("tcp", "tcp4" or "tcp6"), set up for a
// protocol of one short request per connection:
//
//   - no TCP keep-alive on accepted connections; the server turns it on for
//     parked ones, the only ones that stay open;
//   - on Linux, TCP_DEFER_ACCEPT: the kernel hands over a connection once
//     its first bytes have arrived (or after deferAccept), so the request
//     is usually whole at accept time and enters the table in the order
//     requests arrived, and a client that connects and says nothing holds
//     no descriptor in the meantime.
//
// Errors: those of net.ListenConfig.Listen.
func Listen(ctx context.Context, network, address string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: -1, Control: listenControl}
	return lc.Listen(ctx, network, address)
}
