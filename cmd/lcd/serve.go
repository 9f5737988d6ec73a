package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/locking-center/locking-center/httpapi"
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
// finish), then the metrics endpoint. When a scraper has been polling at a steady interval, the
// endpoint keeps serving until its next scrape has completed, so it records
// the final state; in-flight scrapes are drained. It waits at most
// cfg.ShutdownTimeout in all, and not at all when nothing polls it.
func serve(ctx context.Context, cfg Config, log *slog.Logger) error {
	reg := prometheus.NewRegistry()
	st, err := openStore(cfg, log, reg)
	if err != nil {
		return &exitError{code: exitStore, err: err}
	}
	defer st.close()

	node := mutex.NewNode(mutex.NodeConfig{Journal: st.journal, Table: st.restored})
	defer node.Close()
	if err := metrics.Register(reg, node); err != nil {
		return &exitError{code: exitRuntime, err: fmt.Errorf("register metrics: %w", err)}
	}
	sessionSrv, err := session.NewServer(node, session.Config{
		TTL: cfg.SessionTTL, MinTTL: cfg.SessionTTLMin, MaxTTL: cfg.SessionTTLMax, LockDelay: cfg.LockDelay,
		HeaderTimeout: cfg.HeaderTimeout, ServerID: serverID(), Logger: log,
	})
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	mutexSrv, err := oneshot.NewServer(node, oneshot.ServerConfig{
		HeaderTimeout: cfg.HeaderTimeout, Logger: log,
		Handoff: &oneshot.Handoff{First: session.Preface[0], Serve: sessionSrv.Serve},
	})
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	managerSrv := manager.NewServer(node, manager.Config{Timeout: cfg.HeaderTimeout, Logger: log})
	scrapes := newScrapeWatch()
	promHandler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelError),
		ErrorHandling: promhttp.ContinueOnError,
	})
	mux := http.NewServeMux()
	mux.Handle("/metrics", scrapes.wrap(promHandler))
	httpSrv := &http.Server{Handler: mux, ReadHeaderTimeout: cfg.HeaderTimeout, IdleTimeout: metricsIdleTimeout}

	bindings := []binding{
		{cfg.BindAddress, oneshot.Listen},
		{cfg.ManagerAddress, listenConfig.Listen},
		{cfg.MetricsAddress, listenConfig.Listen},
	}
	var api *httpapi.Server
	if cfg.HTTPAddress != "" {
		if api, err = httpapi.New(node, httpapi.Config{
			SessionTTL: cfg.HTTPSessionTTL, LockDelay: cfg.LockDelay, HeaderTimeout: cfg.HeaderTimeout,
			Version: version, Registerer: reg, Metrics: promHandler, Logger: log,
		}); err != nil {
			return &exitError{code: exitUsage, err: err}
		}
		defer api.Close()
		// TCP keep-alive finds the peers of waiting requests and event
		// streams that vanished without a word.
		bindings = append(bindings, binding{cfg.HTTPAddress, (&net.ListenConfig{}).Listen})
	}
	lns, err := listenAll(bindings...)
	if err != nil {
		return &exitError{code: exitRuntime, err: err}
	}
	httpAddr := "off"
	if api != nil {
		httpAddr = lns[3].Addr().String()
	}
	log.Info("lcd started", slog.String("version", version),
		slog.String("mutex", lns[0].Addr().String()),
		slog.String("manager", lns[1].Addr().String()),
		slog.String("metrics", lns[2].Addr().String()),
		slog.String("http", httpAddr),
		slog.String("data_path", cfg.DataPath),
		slog.Int("restored_keys", restoredKeys(st.restored)))

	g, gctx := errgroup.WithContext(ctx)
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
	g.Go(func() error {
		<-gctx.Done()
		log.Info("shutting down: mutex and management ports closed, HTTP API and metrics draining",
			slog.Duration("timeout", cfg.ShutdownTimeout))
		sessionSrv.Close()
		mutexSrv.Close()
		managerSrv.Close()
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
	mu         sync.Mutex
	last, prev time.Time     // the two latest completed scrapes
	next       chan struct{} // closed when a scrape completes
	now        func() time.Time
}

func newScrapeWatch() *scrapeWatch {
	return &scrapeWatch{next: make(chan struct{}), now: time.Now}
}

func (w *scrapeWatch) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(rw, r)
		w.mu.Lock()
		w.prev, w.last = w.last, w.now()
		close(w.next)
		w.next = make(chan struct{})
		w.mu.Unlock()
	})
}

// awaitFinal waits for the next scrape to complete, when scrapes have been
// coming at a steady interval and the next one is due within ctx's time;
// otherwise it returns at once. A one-off request (a person with curl, a
// health check) does not hold the shutdown up.
func (w *scrapeWatch) awaitFinal(ctx context.Context) {
	w.mu.Lock()
	last, prev, next := w.last, w.prev, w.next
	w.mu.Unlock()
	if prev.IsZero() {
		return
	}
	interval := last.Sub(prev)
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
