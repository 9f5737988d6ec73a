package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/locking-center/locking-center/cluster"
	"github.com/locking-center/locking-center/internal/tlsconf"
	"github.com/spf13/pflag"
)

// Defaults of the server's settings.
const (
	defaultBindAddress     = ":22119"
	defaultHeaderTimeout   = 10 * time.Second
	defaultShutdownTimeout = 30 * time.Second
	defaultSessionTTL      = 10 * time.Second
	defaultSessionTTLMin   = time.Second
	defaultSessionTTLMax   = 5 * time.Minute
	defaultHTTPSessionTTL  = 5 * time.Second
	maxLockDelay           = 60 * time.Second
)

// Config is lcd's whole configuration after flags and environment.
type Config struct {
	BindAddress     string        // mutex port, "host:port"; default ":22119"
	ManagerAddress  string        // management port; default host:port+1
	MetricsAddress  string        // metrics endpoint; default host:port+2
	HTTPAddress     string        // HTTP API; default host:port+3; empty: off
	DataPath        string        // write-ahead log file; empty keeps locks in memory only
	HeaderTimeout   time.Duration // time for a request to arrive; default 10 s
	ShutdownTimeout time.Duration // metrics drain at shutdown; default 30 s
	LogLevel        slog.Level    // debug, info, warn or error; default info
	LogFormat       string        // "text" or "json"; default text
	SessionTTL      time.Duration // session TTL when a client asks for none; default 10 s
	SessionTTLMin   time.Duration // shortest session TTL granted; default 1 s
	SessionTTLMax   time.Duration // longest session TTL granted; default 5 min
	LockDelay       time.Duration // lock-delay of a session's acquire that names none; default 0, at most 60 s
	HTTPSessionTTL  time.Duration // TTL of an HTTP client_id's session (the heartbeat window); default 5 s
	// Cluster makes this process a node of a raft cluster (NODE_ID and the
	// RAFT_ settings); nil: a single node, as without them.
	Cluster *cluster.Config
	// TLS puts every port under TLS (TLS_CERT_FILE, TLS_KEY_FILE), with
	// client certificates when it names client CAs (TLS_CLIENT_CA_FILE)
	// and sources taken from them with TLS_SOURCE_FROM_CERT; nil: plain
	// TCP everywhere.
	TLS *tlsconf.Config
	// PeerTLS puts a cluster node's connections to the other nodes under
	// mutual TLS (TLS_PEER_CA_FILE, TLS_PEER_CERT_FILE, TLS_PEER_KEY_FILE);
	// nil: plain TCP between them. Set only with Cluster and TLS.
	PeerTLS *tlsconf.PeerConfig
	// Security is authentication and the limits (docs/security.md).
	Security securityConfig
}

// setting is one flag with its environment variable.
type setting struct {
	flag, env, def, help string
	target               *string
}

// options holds the raw strings of every setting before validation.
type options struct {
	bindAddr, manager, metrics, dataPath string
	httpAddr, httpTTL                    string
	headerTimeout, shutdown, logLevel    string
	logFormat                            string
	sessionTTL, ttlMin, ttlMax, delay    string
	nodeID, raftAddr, raftAdvertise      string
	raftDir, raftPeers, raftDial         string
	advertise, electionTimeout           string
	raftLogStore                         string
	tls                                  tlsOptions
	sec                                  securityOptions
}

func (o *options) settings() []setting {
	return slices.Concat(o.baseSettings(), o.sec.settings(), o.tls.settings())
}

func (o *options) baseSettings() []setting {
	return []setting{
		{"bind-address", "BIND_ADDRESS", defaultBindAddress, "mutex port address, host:port", &o.bindAddr},
		{"manager-address", "MANAGER_ADDRESS", "", "management port address (default: mutex port + 1)", &o.manager},
		{"metrics-address", "METRICS_ADDRESS", "", "metrics endpoint address (default: mutex port + 2)", &o.metrics},
		{"http-address", "HTTP_ADDRESS", "", "HTTP API and status page address (default: mutex port + 3; set to \"\" to turn it off)", &o.httpAddr},
		{"http-session-ttl", "HTTP_SESSION_TTL", defaultHTTPSessionTTL.String(), "how long an HTTP client_id's session lives without a heartbeat or request", &o.httpTTL},
		{"data-path", "DATA_PATH", "", "write-ahead log file that keeps held keys across restarts (default: memory only)", &o.dataPath},
		{"header-timeout", "HEADER_TIMEOUT", defaultHeaderTimeout.String(), "time a request's bytes have to arrive", &o.headerTimeout},
		{"shutdown-timeout", "SHUTDOWN_TIMEOUT", defaultShutdownTimeout.String(), "how long the metrics endpoint drains at shutdown", &o.shutdown},
		{"log-level", "LOG_LEVEL", "info", "debug, info, warn or error", &o.logLevel},
		{"log-format", "LOG_FORMAT", "text", "text or json", &o.logFormat},
		{"session-ttl", "SESSION_TTL", defaultSessionTTL.String(), "session TTL when a client asks for none", &o.sessionTTL},
		{"session-ttl-min", "SESSION_TTL_MIN", defaultSessionTTLMin.String(), "shortest session TTL granted", &o.ttlMin},
		{"session-ttl-max", "SESSION_TTL_MAX", defaultSessionTTLMax.String(), "longest session TTL granted", &o.ttlMax},
		{"lock-delay", "LOCK_DELAY", "0s", "lock-delay of a session's lock lost by expiry, when its acquire names none (at most 60s)", &o.delay},
		{"node-id", "NODE_ID", "", "this node's id in a cluster; set, it makes lcd a node of a raft cluster (see docs/ha.md)", &o.nodeID},
		{"raft-address", "RAFT_ADDRESS", "", "address the raft port listens on, host:port (cluster; default: mutex port + 4)", &o.raftAddr},
		{"raft-advertise", "RAFT_ADVERTISE", "", "address the other nodes reach this node's raft port at (cluster; default: its RAFT_PEERS entry, else RAFT_ADDRESS)", &o.raftAdvertise},
		{"raft-dir", "RAFT_DIR", "", "directory of the raft log and snapshots (cluster)", &o.raftDir},
		{"raft-log-store", "RAFT_LOG_STORE", string(cluster.DefaultLogStore), "store of the raft log in RAFT_DIR, boltdb or wal; changing it needs an empty RAFT_DIR (cluster)", &o.raftLogStore},
		{"raft-peers", "RAFT_PEERS", "", "the nodes of a new cluster, id=raftaddress=clientaddress,...; bootstraps it when RAFT_DIR is empty (cluster)", &o.raftPeers},
		{"raft-dial", "RAFT_DIAL", "", "addresses to dial other nodes' raft ports at in place of theirs, id=address,... (cluster)", &o.raftDial},
		{"advertise-address", "ADVERTISE_ADDRESS", "", "address clients and other nodes reach this node's mutex port at (cluster; default: its RAFT_PEERS entry, else BIND_ADDRESS when it names a host)", &o.advertise},
		{"raft-election-timeout", "RAFT_ELECTION_TIMEOUT", cluster.DefaultElectionTimeout.String(), "time a follower goes without a leader before it stands for election (cluster)", &o.electionTimeout},
	}
}

func (o *options) register(fs *pflag.FlagSet) {
	for _, s := range o.settings() {
		fs.StringVar(s.target, s.flag, s.def, fmt.Sprintf("%s [$%s]", s.help, s.env))
	}
}

// config resolves each setting: a flag set on the command line, else its
// environment variable, else its default; then validates the whole.
func (o *options) config(fs *pflag.FlagSet, environ []string) (Config, error) {
	env := make(map[string]string)
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	for _, s := range o.settings() {
		if v, ok := env[s.env]; ok && !fs.Changed(s.flag) {
			*s.target = v
		}
	}
	// An HTTP address set to "" (flag or environment) turns the API off;
	// unset, it follows the mutex port.
	_, httpInEnv := env["HTTP_ADDRESS"]
	httpSet := fs.Changed("http-address") || httpInEnv
	cfg := Config{BindAddress: o.bindAddr, DataPath: o.dataPath, LogFormat: o.logFormat}
	var err error
	if cfg.ManagerAddress, cfg.MetricsAddress, cfg.HTTPAddress, err = sideAddresses(o.bindAddr, o.manager, o.metrics, o.httpAddr, httpSet); err != nil {
		return Config{}, err
	}
	if cfg.HTTPSessionTTL, err = positiveDuration("http-session-ttl", o.httpTTL); err != nil {
		return Config{}, err
	}
	if cfg.HeaderTimeout, err = positiveDuration("header-timeout", o.headerTimeout); err != nil {
		return Config{}, err
	}
	if cfg.ShutdownTimeout, err = positiveDuration("shutdown-timeout", o.shutdown); err != nil {
		return Config{}, err
	}
	if cfg.SessionTTL, err = positiveDuration("session-ttl", o.sessionTTL); err != nil {
		return Config{}, err
	}
	if cfg.SessionTTLMin, err = positiveDuration("session-ttl-min", o.ttlMin); err != nil {
		return Config{}, err
	}
	if cfg.SessionTTLMax, err = positiveDuration("session-ttl-max", o.ttlMax); err != nil {
		return Config{}, err
	}
	if cfg.SessionTTL < cfg.SessionTTLMin || cfg.SessionTTL > cfg.SessionTTLMax {
		return Config{}, fmt.Errorf("session-ttl %v: must lie between session-ttl-min %v and session-ttl-max %v",
			cfg.SessionTTL, cfg.SessionTTLMin, cfg.SessionTTLMax)
	}
	if cfg.LockDelay, err = time.ParseDuration(o.delay); err != nil {
		return Config{}, fmt.Errorf("lock-delay %q: %w", o.delay, err)
	}
	if cfg.LockDelay < 0 || cfg.LockDelay > maxLockDelay {
		return Config{}, fmt.Errorf("lock-delay %v: must lie between 0s and %v", cfg.LockDelay, maxLockDelay)
	}
	if err := cfg.LogLevel.UnmarshalText([]byte(o.logLevel)); err != nil {
		return Config{}, fmt.Errorf("log-level %q: want debug, info, warn or error", o.logLevel)
	}
	if cfg.LogFormat != "text" && cfg.LogFormat != "json" {
		return Config{}, fmt.Errorf("log-format %q: want text or json", cfg.LogFormat)
	}
	if cfg.Cluster, err = o.clusterConfig(cfg); err != nil {
		return Config{}, err
	}
	if cfg.TLS, err = o.tls.config(cfg.Cluster != nil); err != nil {
		return Config{}, err
	}
	if cfg.PeerTLS, err = o.tls.peer(cfg.Cluster != nil); err != nil {
		return Config{}, err
	}
	if cfg.Security, err = o.sec.config(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// clusterConfig returns the cluster settings, or nil when NODE_ID is not
// set. A raft setting without NODE_ID, DATA_PATH beside it, or a session
// TTL that a failover could outlast is an error.
func (o *options) clusterConfig(cfg Config) (*cluster.Config, error) {
	if o.nodeID == "" {
		for _, s := range o.settings() {
			if *s.target != "" && *s.target != s.def && strings.HasPrefix(s.env, "RAFT_") || s.env == "ADVERTISE_ADDRESS" && *s.target != "" {
				return nil, fmt.Errorf("%s is a cluster setting: set NODE_ID too, or unset it", s.env)
			}
		}
		return nil, nil
	}
	if cfg.DataPath != "" {
		return nil, errors.New("DATA_PATH and NODE_ID: a node of a cluster keeps its state in RAFT_DIR; unset DATA_PATH")
	}
	if o.raftDir == "" {
		return nil, errors.New("NODE_ID needs RAFT_DIR")
	}
	raftAddr, err := derivedAddress(cfg.BindAddress, o.raftAddr, raftOffset, "RAFT_ADDRESS")
	if err != nil {
		return nil, fmt.Errorf("raft address: %w", err)
	}
	peers, err := cluster.ParsePeers(o.raftPeers)
	if err != nil {
		return nil, fmt.Errorf("raft-peers: %w", err)
	}
	dial, err := cluster.ParseDial(o.raftDial)
	if err != nil {
		return nil, fmt.Errorf("raft-dial: %w", err)
	}
	et, err := positiveDuration("raft-election-timeout", o.electionTimeout)
	if err != nil {
		return nil, err
	}
	for _, a := range []struct{ name, addr string }{{"advertise-address", o.advertise}, {"raft-advertise", o.raftAdvertise}} {
		if err := reachable(a.name, a.addr); err != nil {
			return nil, err
		}
	}
	logStore, err := cluster.ParseLogStore(o.raftLogStore)
	if err != nil {
		return nil, fmt.Errorf("raft-log-store: %w", err)
	}
	if min := cluster.MinSessionTTL(et); cfg.SessionTTLMin <= min {
		return nil, fmt.Errorf("session-ttl-min %v: a cluster with raft-election-timeout %v needs it above %v, so that a session outlives a failover",
			cfg.SessionTTLMin, et, min)
	} else if cfg.HTTPAddress != "" && cfg.HTTPSessionTTL <= min {
		return nil, fmt.Errorf("http-session-ttl %v: a cluster with raft-election-timeout %v needs it above %v, so that a client outlives a failover",
			cfg.HTTPSessionTTL, et, min)
	}
	cc := &cluster.Config{NodeID: o.nodeID, RaftBind: raftAddr, RaftAdvertise: o.raftAdvertise, Dir: o.raftDir,
		LogStore: logStore, Peers: peers, Dial: dial, ClientAddress: o.advertise, ElectionTimeout: et}
	if len(peers) > 0 {
		found := false
		for _, p := range peers {
			found = found || p.ID == o.nodeID
		}
		if !found {
			return nil, fmt.Errorf("raft-peers: NODE_ID %q is not among them", o.nodeID)
		}
	}
	return cc, nil
}

// Offsets from the mutex port of the ports derived from it.
const (
	managerOffset = 1
	metricsOffset = 2
	httpOffset    = 3
	raftOffset    = 4
)

// sideAddresses derives the management, metrics and HTTP addresses from
// the mutex address (same host, port+1, port+2 and port+3) unless they
// are given. An HTTP address set (httpSet) to "" turns the HTTP API off:
// it is returned empty.
func sideAddresses(bind, manager, metrics, httpAddr string, httpSet bool) (string, string, string, error) {
	m, err := derivedAddress(bind, manager, managerOffset, "MANAGER_ADDRESS")
	if err != nil {
		return "", "", "", fmt.Errorf("manager address: %w", err)
	}
	x, err := derivedAddress(bind, metrics, metricsOffset, "METRICS_ADDRESS")
	if err != nil {
		return "", "", "", fmt.Errorf("metrics address: %w", err)
	}
	h := ""
	if httpAddr != "" || !httpSet {
		if h, err = derivedAddress(bind, httpAddr, httpOffset, `HTTP_ADDRESS (or set it to "" to turn the HTTP API off)`); err != nil {
			return "", "", "", fmt.Errorf("HTTP address: %w", err)
		}
	}
	return m, x, h, nil
}

// derivedAddress returns given when it is set, else bind's host with its
// port plus offset (port 0 stays 0: the system picks). setting names the
// variable that lifts the rule when bind's port leaves no room.
func derivedAddress(bind, given string, offset int, setting string) (string, error) {
	host, portStr, err := net.SplitHostPort(bind)
	if err != nil {
		return "", fmt.Errorf("bind-address %q: %w", bind, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return "", fmt.Errorf("bind-address %q: port must be a number from 0 to 65535", bind)
	}
	if given != "" {
		if _, _, err := net.SplitHostPort(given); err != nil {
			return "", err
		}
		return given, nil
	}
	if port == 0 {
		return net.JoinHostPort(host, "0"), nil
	}
	if port+offset > 65535 {
		return "", fmt.Errorf("bind-address %q: port %d leaves no room for port+%d; set %s", bind, port, offset, setting)
	}
	return net.JoinHostPort(host, strconv.Itoa(port+offset)), nil
}

func positiveDuration(name, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s %q: %w", name, v, err)
	}
	if d <= 0 {
		return 0, errors.New(name + " must be above zero")
	}
	return d, nil
}

// reachable checks addr, an address other machines are told to reach
// this node at (empty: not set), as cluster.Dialable does.
func reachable(name, addr string) error {
	if addr == "" {
		return nil
	}
	if err := cluster.Dialable(addr); err != nil {
		return fmt.Errorf("%s %q: %w", name, addr, err)
	}
	return nil
}
