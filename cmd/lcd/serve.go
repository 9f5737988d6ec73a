package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/locking-center/locking-center/cluster"
	"github.com/locking-center/locking-center/httpapi"
	netserve "github.com/locking-center/locking-center/internal/serve"
	"github.com/locking-center/locking-center/internal/tlsconf"
	"github.com/locking-center/locking-center/manager"
	"github.com/locking-center/locking-center/metrics"
	"github.com/locking-center/locking-center/mutex"
	"github.com/locking-center/locking-center/oneshot"
	"github.com/locking-center/locking-center/session"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
)

// serve runs the listeners until ctx ends, then shuts down: mutex and
// management ports first (waiting connections are cut), the HTTP API
// gracefully (waiting requests are answered 503, requests in flight
// finish), then the metrics endpoint. When a scraper has been polling at a
// steady interval, the endpoint keeps serving until its next scrape has
// completed, so it records
// the final state; in-flight scrapes are drained. It waits at most
// cfg.ShutdownTimeout in all, and not at all when nothing polls it.
func serve(ctx context.Context, cfg Config, log *slog.Logger) error {
	reg := prometheus.NewRegistry()
	sec, err := newSecurity(cfg.Security)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	tr, err := newTransport(cfg.TLS, cfg.PeerTLS)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	var (
		node       *mutex.Node
		st         store
		cl         *cluster.Cluster
		lns        []net.Listener
		sessionSrv *session.Server
		apiSrv     atomic.Pointer[httpapi.Server] // for OnLeader, which raft may call before the API is made
	)
	bindings := []binding{
		{cfg.BindAddress, oneshot.Listen},
		{cfg.ManagerAddress, listenConfig.Listen},
		{cfg.MetricsAddress, listenConfig.Listen}}
	if cfg.HTTPAddress != "" {
		// TCP keep-alive finds the peers of waiting requests and event
		// streams that vanished without a word.
		bindings = append(bindings, binding{cfg.HTTPAddress, (&net.ListenConfig{}).Listen})
	}
	if cfg.Cluster == nil {
		if st, err = openStore(cfg, log, reg); err != nil {
			return &exitError{code: exitStore, err: err}
		}
		defer st.close()
		node = mutex.NewNode(mutex.NodeConfig{Journal: st.journal, Table: st.restored, Limits: cfg.Security.Limits})
	} else {
		// A cluster node binds first: its mutex port's address may be the
		// one it advertises.
		if lns, err = listenAll(bindings...); err != nil {
			return &exitError{code: exitRuntime, err: err}
		}
		defer closeAll(lns)
		cc := *cfg.Cluster
		cc.Logger = log
		cc.TLS = tr.cluster()
		cc.OnLeader = func(leader bool) {
			a := apiSrv.Load()
			switch {
			case leader && a != nil:
				a.LeaderGained()
			case !leader:
				sessionSrv.LeaderLost()
				if a != nil {
					a.LeaderLost()
				}
			}
		}
		if cc.ClientAddress, err = advertised(cc, lns[0].Addr()); err != nil {
			return &exitError{code: exitUsage, err: err}
		}
		if cfg.HTTPAddress != "" {
			cc.HTTPAddress = advertisedHTTP(cc.ClientAddress, lns[3].Addr())
		}
		tr.checkForwarding(cc.ClientAddress, log)
		if cl, err = cluster.New(cc); err != nil {
			return &exitError{code: exitUsage, err: err}
		}
		defer cl.Close()
		if err := reg.Register(cl.Collector()); err != nil {
			return &exitError{code: exitRuntime, err: fmt.Errorf("register metrics: %w", err)}
		}
		node = mutex.NewNode(mutex.NodeConfig{Replicator: cl, Limits: cfg.Security.Limits})
	}
	defer node.Close()
	if err := metrics.Register(reg, node); err != nil {
		return &exitError{code: exitRuntime, err: fmt.Errorf("register metrics: %w", err)}
	}
	var maxKeepalive time.Duration
	if cfg.Cluster != nil {
		// Clients leave a frozen leader about as soon as another is elected.
		maxKeepalive = 2 * cfg.Cluster.ElectionTimeout
	}
	sessionSrv, err = session.NewServer(node, session.Config{
		TTL: cfg.SessionTTL, MinTTL: cfg.SessionTTLMin, MaxTTL: cfg.SessionTTLMax, LockDelay: cfg.LockDelay,
		MaxKeepalive:  maxKeepalive,
		HeaderTimeout: cfg.HeaderTimeout, ServerID: serverID(), Logger: log, EventLoop: true,
		Tokens: sec.tokens(), Rates: sec.rates, SourceFromCert: tr.fromCert,
	})
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	oneshotCfg := oneshot.ServerConfig{
		HeaderTimeout: cfg.HeaderTimeout, Logger: log,
		Handoff: &oneshot.Handoff{First: session.Preface[0], Serve: sessionSrv.Serve,
			OverLimit: session.OverLimitGoodbye()},
		V1Allowed: sec.v1Allowed, Rates: sec.rates, Gate: sec.gate,
		TLS: tr.port(tlsconf.Require), SourceFromCert: tr.fromCert,
	}
	if cl != nil {
		oneshotCfg.Forward = cl.Forward
	}
	mutexSrv, err := oneshot.NewServer(node, oneshotCfg)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	managerCfg := manager.Config{Timeout: cfg.HeaderTimeout, Logger: log, Tokens: sec.tokens(), Gate: sec.gate,
		TLS: tr.port(tlsconf.Require)}
	if cl != nil {
		managerCfg.Membership = membership{cl}
	}
	managerSrv := manager.NewServer(node, managerCfg)
	scrapes := newScrapeWatch()
	promHandler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelError),
		ErrorHandling: promhttp.ContinueOnError,
	})
	mux := http.NewServeMux()
	mux.Handle("/metrics", sec.guardMetrics(scrapes.wrap(promHandler), node))
	handleProbes(mux, cl)
	httpSrv := &http.Server{Handler: mux, ReadHeaderTimeout: cfg.HeaderTimeout, IdleTimeout: metricsIdleTimeout}

	attrs := []any{slog.String("version", version), slog.Bool("tls", tr.store != nil)}
	if cl != nil {
		mux.Handle("/cluster", clusterStatus(cl))
		if err := cl.Start(node); err != nil {
			code := exitStore
			var oe *net.OpError
			switch {
			case errors.As(err, &oe):
				code = exitRuntime
			case errors.Is(err, cluster.ErrOtherLogStore):
				code = exitUsage // a setting that does not fit the directory
				err = fmt.Errorf("raft-log-store: %w", err)
			}
			return &exitError{code: code, err: err}
		}
		attrs = append(attrs, slog.String("node_id", cfg.Cluster.NodeID),
			slog.String("raft", cl.RaftAddr().String()), slog.String("raft_dir", cfg.Cluster.Dir))
	} else {
		if lns, err = listenAll(bindings...); err != nil {
			return &exitError{code: exitRuntime, err: err}
		}
		attrs = append(attrs, slog.String("data_path", cfg.DataPath), slog.Int("restored_keys", restoredKeys(st.restored)))
	}
	var api *httpapi.Server
	httpAddr := "off"
	if cfg.HTTPAddress != "" {
		if api, err = httpapi.New(node, httpapi.Config{
			SessionTTL: cfg.HTTPSessionTTL, LockDelay: cfg.LockDelay, HeaderTimeout: cfg.HeaderTimeout,
			Version: version, Registerer: reg, Metrics: promHandler, Logger: log,
			Tokens: sec.tokens(), Rates: sec.rates, Forward: forwarding(cl, tr),
			Node: nodeInfo(cl, node),
		}); err != nil {
			return &exitError{code: exitUsage, err: err}
		}
		defer api.Close()
		apiSrv.Store(api)
		if cl != nil && node.IsLeader() {
			api.LeaderGained() // it may have led before the API was made, and OnLeader gone unheard
		}
		httpAddr = lns[3].Addr().String()
	}
	log.Info("lcd started", append(attrs,
		slog.String("mutex", lns[0].Addr().String()),
		slog.String("manager", lns[1].Addr().String()),
		slog.String("metrics", lns[2].Addr().String()),
		slog.String("http", httpAddr))...)

	lns[2] = tr.listener(netserve.LimitListener(lns[2], sec.gate, true, func(net.Conn) { node.Refused(mutex.RefusedConnections) }),
		tlsconf.VerifyIfGiven)
	if api != nil {
		lns[3] = tr.listener(netserve.LimitListener(lns[3], sec.gate, false, func(c net.Conn) {
			node.Refused(mutex.RefusedConnections)
			if tr.store == nil { // under TLS a 503 in the clear would be noise to the client
				refuseHTTP(c)
			}
		}), tlsconf.Require, "http/1.1")
	}
	reloads := make(chan os.Signal, 1)
	signal.Notify(reloads, syscall.SIGHUP)
	defer signal.Stop(reloads)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		for {
			select {
			case <-reloads:
				sec.reload(log)
				tr.reload(log)
			case <-gctx.Done():
				return nil
			}
		}
	})
	// A signal can close a server before its Serve has started; that is a
	// shutdown, not a failure.
	g.Go(func() error { return ignore(mutexSrv.Serve(gctx, lns[0]), oneshot.ErrClosed) })
	g.Go(func() error { return ignore(managerSrv.Serve(gctx, lns[1]), manager.ErrClosed) })
	g.Go(func() error {
		if err := httpSrv.Serve(lns[2]); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("metrics endpoint: %w", err)
		}
		return nil
	})
	if api != nil {
		g.Go(func() error {
			if err := ignore(api.Serve(lns[3]), httpapi.ErrClosed); err != nil {
				return fmt.Errorf("HTTP API: %w", err)
			}
			return nil
		})
	}
	if cl != nil {
		g.Go(func() error {
			select {
			case <-cl.Failed():
				return &exitError{code: exitStore, err: fmt.Errorf("RAFT_DIR %s: %w; this node stopped: restore it as docs/ha.md says "+
					"(remove it, empty the directory, add it back)", cfg.Cluster.Dir, cl.Err())}
			case <-gctx.Done():
				return nil
			}
		})
	}
	g.Go(func() error {
		<-gctx.Done()
		log.Info("shutting down: mutex and management ports closed, HTTP API and metrics draining",
			slog.Duration("timeout", cfg.ShutdownTimeout))
		sessionSrv.Close()
		mutexSrv.Close()
		managerSrv.Close()
		if cl != nil {
			if err := cl.Close(); err != nil {
				log.Warn("stopping the cluster node", slog.Any("error", err))
			}
		}
		drain, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
		defer cancel()
		if api != nil {
			api.Shutdown(drain)
		}
		scrapes.awaitFinal(drain)
		if err := httpSrv.Shutdown(drain); err != nil {
			httpSrv.Close()
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			return ee
		}
		return &exitError{code: exitRuntime, err: err}
	}
	log.Info("lcd stopped")
	return nil
}

// metricsIdleTimeout closes a keep-alive connection to the metrics endpoint
// that has carried no request for this long.
const metricsIdleTimeout = time.Minute

// serverID is the identity the session protocol's WELCOME names: the
// version, the host and the process.
func serverID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("lcd %s %s pid=%d", version, host, os.Getpid())
}

// ignore returns err unless it is target.
func ignore(err, target error) error {
	if errors.Is(err, target) {
		return nil
	}
	return err
}

// listenConfig is how the manager and metrics ports listen: without TCP
// keep-alive, as a request there is over in a moment (the metrics server
// closes idle keep-alive connections of its own).
var listenConfig = net.ListenConfig{KeepAlive: -1}

// binding is an address and how to listen on it.
type binding struct {
	addr   string
	listen func(ctx context.Context, network, address string) (net.Listener, error)
}

// listenAll binds every address, or none: a failure closes those already
// bound.
func listenAll(bs ...binding) ([]net.Listener, error) {
	lns := make([]net.Listener, 0, len(bs))
	for _, b := range bs {
		ln, err := b.listen(context.Background(), "tcp", b.addr)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, fmt.Errorf("listen on %s: %w", b.addr, err)
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// closeAll closes every listener of lns; a server's Serve closes its own
// too, so a second close is harmless.
func closeAll(lns []net.Listener) {
	for _, l := range lns {
		l.Close()
	}
}

// advertised returns the client address a cluster node advertises: the
// one configured (ADVERTISE_ADDRESS, or the node's RAFT_PEERS entry), else
// the mutex port's bound address when it names a host.
func advertised(cc cluster.Config, bound net.Addr) (string, error) {
	if cc.ClientAddress != "" {
		return cc.ClientAddress, nil
	}
	for _, p := range cc.Peers {
		if p.ID == cc.NodeID && p.ClientAddress != "" {
			return p.ClientAddress, nil
		}
	}
	if a, ok := bound.(*net.TCPAddr); ok && !a.IP.IsUnspecified() {
		return a.String(), nil
	}
	return "", fmt.Errorf("BIND_ADDRESS %s names no host: set ADVERTISE_ADDRESS to the address clients reach this node at", bound)
}

// forwarding returns how a cluster node's HTTP API forwards requests to
// the leader's: under TLS as a v1 request is forwarded (the node's peer
// certificate, the leader's verified for its host); nil for a single
// node.
func forwarding(cl *cluster.Cluster, tr *transport) *httpapi.Forwarding {
	if cl == nil {
		return nil
	}
	dialer := &net.Dialer{Timeout: forwardDialTimeout, KeepAlive: 15 * time.Second}
	t := &http.Transport{DialContext: dialer.DialContext, MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second,
		TLSHandshakeTimeout: forwardDialTimeout}
	if p := tr.cluster(); p != nil {
		t.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			tc := tls.Client(c, p.Leader(host))
			if err := tc.HandshakeContext(ctx); err != nil {
				c.Close()
				return nil, err
			}
			return tc, nil
		}
	}
	return &httpapi.Forwarding{Leader: cl.LeaderHTTP, Self: cl.HTTPAddress(), TLS: tr.store != nil, Transport: t}
}

// nodeInfo returns what the HTTP API's GET /node says of a cluster node;
// nil for a single node.
func nodeInfo(cl *cluster.Cluster, node *mutex.Node) func() httpapi.NodeInfo {
	if cl == nil {
		return nil
	}
	return func() httpapi.NodeInfo {
		return httpapi.NodeInfo{ID: cl.ID(), Leading: node.IsLeader(), LeaderID: cl.LeaderID()}
	}
}

// forwardDialTimeout bounds the connect and handshake of a forwarded
// HTTP request to the leader.
const forwardDialTimeout = 2 * time.Second

// advertisedHTTP returns the HTTP address a cluster node records for
// itself: the HTTP port's bound address when it names a host, else the
// host of the client address with the HTTP port's port.
func advertisedHTTP(client string, bound net.Addr) string {
	a, ok := bound.(*net.TCPAddr)
	if !ok {
		return bound.String()
	}
	if !a.IP.IsUnspecified() {
		return a.String()
	}
	host, _, err := net.SplitHostPort(client)
	if err != nil {
		return ""
	}
	return net.JoinHostPort(host, strconv.Itoa(a.Port))
}

// clusterStatus serves GET /cluster: the node's view of its cluster as
// JSON (cluster.Status, with each member asked: cluster.Report); ?digest
// adds the digest of its table.
func clusterStatus(cl *cluster.Cluster) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(cl.Report(r.Context(), r.URL.Query().Has("digest")))
	})
}

// store is what a DATA_PATH brings to the table: the journal to write to,
// the table read back, and what to close at exit.
type store struct {
	journal  mutex.Journal
	restored *mutex.Table // nil without a DATA_PATH
	close    func()
}

// restoredKeys returns how many keys t holds or waits for; 0 for nil.
func restoredKeys(t *mutex.Table) int {
	if t == nil {
		return 0
	}
	return t.Len()
}

// openStore opens the write-ahead log at cfg.DataPath. Without a DATA_PATH
// locks live in memory only and nothing is journaled.
func openStore(cfg Config, log *slog.Logger, reg prometheus.Registerer) (store, error) {
	if cfg.DataPath == "" {
		return store{close: func() {}}, nil
	}
	return openDataPath(cfg, log, reg)
}

// scrapeWatch remembers when scrapes complete, so that shutdown can wait
// for one scrape of the final state when a scraper polls this process.
type scrapeWatch struct {
	mu                sync.Mutex
	last, prev, first time.Time     // the three latest completed scrapes
	next              chan struct{} // closed when a scrape completes
	now               func() time.Time
}

func newScrapeWatch() *scrapeWatch {
	return &scrapeWatch{next: make(chan struct{}), now: time.Now}
}

func (w *scrapeWatch) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(rw, r)
		w.mu.Lock()
		w.first, w.prev, w.last = w.prev, w.last, w.now()
		close(w.next)
		w.next = make(chan struct{})
		w.mu.Unlock()
	})
}

// awaitFinal waits for the next scrape to complete, when scrapes have been
// coming at a steady interval (the last three at two intervals within a
// quarter of each other) and the next one is due within ctx's time;
// otherwise it returns at once. A one-off request, or a few by hand (a
// person with curl, a health check), does not hold the shutdown up.
func (w *scrapeWatch) awaitFinal(ctx context.Context) {
	w.mu.Lock()
	last, prev, first, next := w.last, w.prev, w.first, w.next
	w.mu.Unlock()
	if first.IsZero() {
		return
	}
	interval, before := last.Sub(prev), prev.Sub(first)
	if d := interval - before; d > max(interval, before)/4 || -d > max(interval, before)/4 {
		return // not a scraper's steady polling
	}
	due := last.Add(2 * interval) // allow one interval of jitter
	if w.now().After(due) {
		return // the scraper has stopped polling
	}
	if deadline, ok := ctx.Deadline(); ok && due.After(deadline) && interval > time.Until(deadline) {
		return // the next scrape would come too late anyway
	}
	wait, cancel := context.WithDeadline(ctx, due)
	defer cancel()
	select {
	case <-next:
	case <-wait.Done():
	}
}
