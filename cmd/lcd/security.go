package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/locking-center/locking-center/auth"
	"github.com/locking-center/locking-center/internal/ratelimit"
	netserve "github.com/locking-center/locking-center/internal/serve"
	"github.com/locking-center/locking-center/mutex"
)

// Defaults of the limits (docs/security.md).
const (
	defaultReservedConnections = 32
	// fdHeadroom is what MAX_CONNECTIONS "auto" leaves of the open-file
	// limit for the log, the listeners and the runtime.
	fdHeadroom = 64
)

// securityConfig is authentication and the limits, resolved.
type securityConfig struct {
	TokensFile     string       // AUTH_TOKENS_FILE; empty: authentication off
	V1Networks     []*net.IPNet // AUTH_V1_NETWORKS: where v1 is served while authentication is on
	MetricsAuth    bool         // AUTH_METRICS: /metrics asks for a token
	MaxConnections int          // 0: no cap
	Reserved       int          // of MaxConnections, kept for the management and metrics ports
	Limits         mutex.Limits // per source
	Rate           float64      // requests a second per source; 0: no limit
	Burst          int          // of the rate
}

// securityOptions are the raw strings of those settings.
type securityOptions struct {
	tokens, v1Networks, metricsAuth string
	maxConns, reserved              string
	maxHeld, maxParked              string
	rate, burst                     string
}

func (o *securityOptions) settings() []setting {
	return []setting{
		{"auth-tokens-file", "AUTH_TOKENS_FILE", "", "tokens file; set, it turns authentication on (see docs/security.md)", &o.tokens},
		{"auth-v1-networks", "AUTH_V1_NETWORKS", "", "CIDRs whose v1 requests are served while authentication is on, comma-separated (default: none, v1 off)", &o.v1Networks},
		{"auth-metrics", "AUTH_METRICS", "false", "true: /metrics asks for a token too", &o.metricsAuth},
		{"max-connections", "MAX_CONNECTIONS", "auto", "connections open at once, all ports; auto: the open-file limit less 64; 0: no cap", &o.maxConns},
		{"reserved-connections", "RESERVED_CONNECTIONS", strconv.Itoa(defaultReservedConnections), "of MAX_CONNECTIONS, kept for the management and metrics ports", &o.reserved},
		{"max-held-per-source", "MAX_HELD_PER_SOURCE", "0", "locks one source may hold, its parked requests counted; 0: no cap", &o.maxHeld},
		{"max-parked-per-source", "MAX_PARKED_PER_SOURCE", "0", "requests one source may have waiting; 0: no cap", &o.maxParked},
		{"rate-per-source", "RATE_PER_SOURCE", "0", "requests a second one source may send; 0: no limit", &o.rate},
		{"rate-burst", "RATE_BURST", "0", "burst of RATE_PER_SOURCE (default: the rate, at least 1)", &o.burst},
	}
}

// config resolves the security settings.
func (o *securityOptions) config() (securityConfig, error) {
	sc := securityConfig{TokensFile: o.tokens}
	var err error
	for _, cidr := range strings.Split(o.v1Networks, ",") {
		if cidr = strings.TrimSpace(cidr); cidr == "" {
			if strings.TrimSpace(o.v1Networks) != "" {
				return securityConfig{}, fmt.Errorf("auth-v1-networks %q: an empty entry; want CIDRs such as 10.0.0.0/8, comma-separated", o.v1Networks)
			}
			continue
		}
		_, n, err := net.ParseCIDR(cidr)
		if err != nil {
			return securityConfig{}, fmt.Errorf("auth-v1-networks %q: want CIDRs such as 10.0.0.0/8", cidr)
		}
		sc.V1Networks = append(sc.V1Networks, n)
	}
	if len(sc.V1Networks) > 0 && sc.TokensFile == "" {
		return securityConfig{}, errors.New("auth-v1-networks opens v1 to networks while authentication is on; set AUTH_TOKENS_FILE too, or unset it")
	}
	if sc.MetricsAuth, err = strconv.ParseBool(o.metricsAuth); err != nil {
		return securityConfig{}, fmt.Errorf("auth-metrics %q: want true or false", o.metricsAuth)
	}
	if sc.MetricsAuth && sc.TokensFile == "" {
		return securityConfig{}, errors.New("auth-metrics needs AUTH_TOKENS_FILE")
	}
	if o.maxConns == "auto" {
		sc.MaxConnections = autoMaxConnections()
	} else if sc.MaxConnections, err = count("max-connections", o.maxConns); err != nil {
		return securityConfig{}, err
	}
	if sc.Reserved, err = count("reserved-connections", o.reserved); err != nil {
		return securityConfig{}, err
	}
	if sc.MaxConnections > 0 && sc.Reserved >= sc.MaxConnections {
		return securityConfig{}, fmt.Errorf("reserved-connections %d leaves nothing of max-connections %d for clients", sc.Reserved, sc.MaxConnections)
	}
	held, err := count("max-held-per-source", o.maxHeld)
	if err != nil {
		return securityConfig{}, err
	}
	parked, err := count("max-parked-per-source", o.maxParked)
	if err != nil {
		return securityConfig{}, err
	}
	sc.Limits = mutex.Limits{MaxHeld: uint32(held), MaxParked: uint32(parked)}
	if sc.Rate, err = strconv.ParseFloat(o.rate, 64); err != nil || sc.Rate < 0 {
		return securityConfig{}, fmt.Errorf("rate-per-source %q: want a number of requests a second, 0 or more", o.rate)
	}
	if sc.Burst, err = count("rate-burst", o.burst); err != nil {
		return securityConfig{}, err
	}
	if sc.Burst == 0 {
		sc.Burst = max(int(sc.Rate), 1)
	}
	return sc, nil
}

// count parses a setting that is a count, 0 or more, that fits a uint32.
func count(name, v string) (int, error) {
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%s %q: want a whole number, 0 or more", name, v)
	}
	return int(n), nil
}

// autoMaxConnections is the open-file limit (which the Go runtime raises
// to its hard limit at start) less fdHeadroom; 0, no cap, where there is
// no such limit.
func autoMaxConnections() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur > 1<<30 {
		return 0
	}
	return max(int(lim.Cur)-fdHeadroom, 1)
}

// security is what the settings build for the servers.
type security struct {
	keyring   *auth.Keyring // nil: authentication off
	rates     *ratelimit.Rates
	gate      *netserve.Gate
	v1Allowed func(net.IP) bool // nil: v1 served from everywhere
	metrics   bool              // /metrics asks for a token
}

// newSecurity loads the tokens file and builds the limits. Errors: the
// tokens file's.
func newSecurity(sc securityConfig) (*security, error) {
	s := &security{rates: ratelimit.New(sc.Rate, sc.Burst, nil), gate: netserve.NewGate(sc.MaxConnections, sc.Reserved),
		metrics: sc.MetricsAuth}
	if sc.TokensFile == "" {
		return s, nil
	}
	k, err := auth.Load(sc.TokensFile)
	if err != nil {
		return nil, err
	}
	s.keyring = k
	nets := sc.V1Networks
	s.v1Allowed = func(ip net.IP) bool {
		for _, n := range nets {
			if n.Contains(ip) {
				return true
			}
		}
		return false
	}
	return s, nil
}

// tokens returns the keyring for the servers' configs: nil when
// authentication is off (an interface holding a nil *Keyring would not be
// nil).
func (s *security) tokens() interface {
	Authenticate([]byte) (*auth.Principal, error)
} {
	if s.keyring == nil {
		return nil
	}
	return s.keyring
}

// reload reads the tokens file again, on SIGHUP; a file that does not
// parse leaves the tokens in force.
func (s *security) reload(log *slog.Logger) {
	if s.keyring == nil {
		return
	}
	if err := s.keyring.Reload(); err != nil {
		log.Error("tokens file not reloaded; the tokens loaded before stay in force", slog.Any("error", err))
		return
	}
	log.Info("tokens file reloaded", slog.String("path", s.keyring.Path()), slog.Int("principals", s.keyring.Len()))
}

// guardMetrics wraps the metrics handler: with AUTH_METRICS, a request
// without a token of a principal is answered 401.
func (s *security) guardMetrics(h http.Handler, node *mutex.Node) http.Handler {
	if !s.metrics || s.keyring == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.keyring.Authenticate(bearer(r)); err != nil {
			node.Refused(mutex.RefusedUnauthenticated)
			w.Header().Set("WWW-Authenticate", `Bearer realm="locking-center"`)
			http.Error(w, "authentication failed", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// bearer returns the token of an Authorization: Bearer header.
func bearer(r *http.Request) []byte {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return []byte(strings.TrimSpace(h[7:]))
	}
	return nil
}

// overLimitAnswer is what a connection to the HTTP API that finds no room
// under MAX_CONNECTIONS gets before it is closed.
var overLimitAnswer = func() []byte {
	body := `{"status":"failed","message":"the server has as many connections as it allows; try again later","code":"over_limit"}` + "\n"
	return []byte("HTTP/1.1 503 Service Unavailable\r\n" +
		"Content-Type: application/json\r\n" +
		"Retry-After: 1\r\n" +
		"Connection: close\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}()

// refuseWriteTimeout bounds the write of overLimitAnswer; it fits in an
// empty send buffer, so it never waits in practice.
const refuseWriteTimeout = 50 * time.Millisecond

// refuseHTTP answers a plain-text HTTP connection that the connection cap
// turns away with 503 and Retry-After, without waiting for it: it runs in
// the accept loop. Over TLS there is no handshake yet to answer in, so
// such a connection should only be closed: skip this there.
func refuseHTTP(c net.Conn) {
	c.SetWriteDeadline(time.Now().Add(refuseWriteTimeout))
	c.Write(overLimitAnswer)
}
