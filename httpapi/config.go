package httpapi

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/locking-center/locking-center/auth"
	"github.com/locking-center/locking-center/internal/ratelimit"
	"github.com/locking-center/locking-center/mutex"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Config.
const (
	// DefaultSessionTTL is how long a client_id's session lives without a
	// request naming it: the heartbeat window.
	DefaultSessionTTL = 5 * time.Second
	// DefaultKeepAlive is how often an idle event stream gets a comment.
	DefaultKeepAlive = 15 * time.Second
	// DefaultRingSize is how many events the ring keeps for resumes.
	DefaultRingSize = 16384
	// DefaultSubscriberLag is how many events a subscriber may fall
	// behind before it is dropped.
	DefaultSubscriberLag = 4096
	// DefaultFlushInterval is the least time between two batches of
	// the event streams.
	DefaultFlushInterval = 10 * time.Millisecond
	// DefaultWriteTimeout bounds one write to an event stream.
	DefaultWriteTimeout = 10 * time.Second
	// DefaultHeaderTimeout bounds the arrival of a request's headers.
	DefaultHeaderTimeout = 10 * time.Second
	// DefaultIdleTimeout closes a keep-alive connection idle this long.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultMaxBody is the largest request body, in bytes.
	DefaultMaxBody = 64 << 10
)

// Limits of the request fields, beyond the table's own (mutex.MaxKeyLen
// and mutex.MaxSourceLen for keys, owners and client ids).
const (
	// MaxMillis bounds wait_ms, duration_ms and the TTL: about 24.8 days.
	MaxMillis = 1<<31 - 1
	// anonymousTTL is the TTL of the anonymous session, which the server
	// touches every anonymousTTL/4.
	anonymousTTL = time.Hour
)

// Authenticator finds the principal of a token; *auth.Keyring is one.
type Authenticator interface {
	Authenticate(token []byte) (*auth.Principal, error)
}

// Config configures a Server. The zero value of each field means its
// default.
type Config struct {
	// SessionTTL is the TTL of a client_id's session: how long after the
	// last request naming it (a heartbeat, or any other) the session
	// expires and its locks end. Default DefaultSessionTTL (5 s).
	SessionTTL time.Duration
	// LockDelay is the lock-delay of an acquire that names none
	// (lock_delay_ms): after a lock is lost by expiry, nobody gets the key
	// for this long. At most mutex.MaxLockDelay; default 0.
	LockDelay time.Duration
	// KeepAlive is how often an event stream gets a ": keep-alive"
	// comment. Default DefaultKeepAlive (15 s).
	KeepAlive time.Duration
	// RingSize is how many events the ring keeps for Last-Event-ID
	// resumes. Default DefaultRingSize (16384).
	RingSize int
	// SubscriberLag is how many events of the table a stream may fall
	// behind the newest (not yet written to its connection) before its
	// subscriber is dropped; at most RingSize. Default
	// DefaultSubscriberLag (4096).
	SubscriberLag int
	// FlushInterval is the least time between two batches of events
	// handed to the streams: the events of a busy stream wait up to this
	// long to share one write. With many subscribers the wait grows, by
	// 50 µs a subscriber up to 100 ms, so that all the streams together
	// make about 20,000 writes a second at most, whatever the number of
	// events; a backlog of a quarter of SubscriberLag goes at once.
	// Default DefaultFlushInterval (10 ms); negative: every batch at
	// once, whatever the subscribers.
	FlushInterval time.Duration
	// WriteTimeout bounds each write to an event stream: a subscriber
	// that takes no bytes for this long is cut. Default 10 s.
	WriteTimeout time.Duration
	// HeaderTimeout bounds the arrival of a request's headers (Serve's
	// http.Server.ReadHeaderTimeout). Default 10 s.
	HeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that carried no request
	// for this long. Default 2 min.
	IdleTimeout time.Duration
	// MaxBody is the largest request body, in bytes; a larger one is
	// answered 413. Default 64 KiB.
	MaxBody int64
	// Version is what /healthz and /readyz report.
	Version string
	// Registerer receives the front end's metrics
	// (locking_center_http_subscribers,
	// locking_center_http_subscribers_dropped_total,
	// locking_center_http_sessions); nil registers none.
	Registerer prometheus.Registerer
	// Metrics, when set, is served at /api/v1/locks/metrics (and the
	// legacy /api/locks/metrics): the Prometheus endpoint.
	Metrics http.Handler
	// Tokens, when set, turns authentication on (docs/security.md): every
	// request under /api/ must carry the token of a principal in an
	// "Authorization: Bearer" or an "X-API-Key" header, or is answered
	// 401; a client principal may use only the keys its prefixes allow
	// (403 otherwise), lists only those keys and its own sessions, and its
	// sessions, client_ids and limits are its own. /healthz, /readyz and
	// the status page stay open. Nil: off; a token sent is then ignored,
	// and a client's session is charged to its IP address.
	Tokens Authenticator
	// Rates limits each account's requests under /api/ (the principal's
	// name, or without authentication the client's IP address), but for
	// heartbeats: over it, 429 with Retry-After. Nil: no limit.
	Rates *ratelimit.Rates
	// Forward, on a node of a cluster, passes the requests under /api/
	// (but the metrics) on to the leader whenever this node does not lead
	// (docs/http.md, "In a cluster"). Nil: none, as on a single node; a
	// node of a cluster without it answers them 503 not_leader.
	Forward *Forwarding
	// Node, on a node of a cluster, says which node this is and which
	// leads, for GET /node and the status page. Nil: a single node.
	Node func() NodeInfo
	// Middleware wraps the API's handler, first element outermost: the
	// place for authentication, limits and logging of requests.
	Middleware []func(http.Handler) http.Handler
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.SessionTTL < time.Millisecond || c.SessionTTL > MaxMillis*time.Millisecond:
		return fmt.Errorf("httpapi: session TTL %v is outside 1ms to %v", c.SessionTTL, MaxMillis*time.Millisecond)
	case c.LockDelay < 0 || c.LockDelay > mutex.MaxLockDelay:
		return fmt.Errorf("httpapi: lock-delay %v is outside 0 to %v", c.LockDelay, mutex.MaxLockDelay)
	case c.KeepAlive < 0 || c.WriteTimeout < 0 || c.HeaderTimeout < 0 || c.IdleTimeout < 0:
		return errors.New("httpapi: durations must not be negative")
	case c.RingSize < 1 || c.SubscriberLag < 1 || c.MaxBody < 1:
		return errors.New("httpapi: ring size, subscriber lag and body limit must be above zero")
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.SessionTTL == 0 {
		c.SessionTTL = DefaultSessionTTL
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = DefaultKeepAlive
	}
	if c.RingSize == 0 {
		c.RingSize = DefaultRingSize
	}
	if c.SubscriberLag == 0 {
		c.SubscriberLag = DefaultSubscriberLag
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = DefaultFlushInterval
	}
	if c.HeaderTimeout == 0 {
		c.HeaderTimeout = DefaultHeaderTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxBody == 0 {
		c.MaxBody = DefaultMaxBody
	}
	return c
}
