package httpapi

import (
	"context"
	"embed"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/locking-center/locking-center/internal/serve"
	"github.com/locking-center/locking-center/mutex"
	"github.com/prometheus/client_golang/prometheus"
)

// ErrClosed is what Serve returns once Shutdown or Close has run.
var ErrClosed = errors.New("httpapi: server closed")

// Log attribute keys.
const (
	logError = "error"
)

// Paths of the API. Every lock endpoint is served under both bases: the
// versioned one and the legacy one.
const (
	basePath   = "/api/v1/locks"
	legacyPath = "/api/locks"
)

//go:embed ui
var uiFiles embed.FS

// Server is the HTTP front end over one mutex.Node.
type Server struct {
	node    *mutex.Node
	cfg     Config
	log     *slog.Logger
	hub     *hub
	handler http.Handler
	http    *http.Server
	group   serve.Group

	mu      sync.Mutex
	clients map[clientKey]*client // by principal and client_id
	anon    map[string]*client    // by principal: the anonymous sessions
	// bySession holds the clients by session id (uint64 to *client),
	// written under mu and read without it: the node's observer looks up
	// every event's session in it.
	bySession sync.Map

	conns connCount // connections accepted and not yet closed

	lmu     sync.Mutex
	lost    chan struct{} // closed, and replaced, when the node stops leading its cluster
	leading atomic.Bool   // a cluster node's: between LeaderGained and LeaderLost

	stopping    chan struct{} // closed when Shutdown or Close begins
	stopOnce    sync.Once
	finishOnce  sync.Once
	stopObserve func()
}

// New returns a server over n. It takes over the sessions of an earlier
// run that a write-ahead log brought back, and registers its metrics on
// cfg.Registerer. Errors: those of cfg.Validate, and a metric that cannot
// be registered.
func New(n *mutex.Node, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Server{
		node: n, cfg: cfg, log: serve.Discard(cfg.Logger),
		clients: make(map[clientKey]*client), anon: make(map[string]*client),
		stopping: make(chan struct{}), lost: make(chan struct{}),
	}
	s.conns.zero.L = &s.conns.mu
	dropped := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "locking_center_http_subscribers_dropped_total",
		Help: "Event stream subscribers dropped because they fell too far behind, since start-up.",
	})
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{
			dropped,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "locking_center_http_subscribers",
				Help: "Event stream subscribers of the HTTP API connected now.",
			}, func() float64 { return float64(s.hub.subscribers()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "locking_center_http_sessions",
				Help: "Sessions of HTTP clients (by client_id) open now.",
			}, func() float64 { return float64(s.clientSessions()) }),
		} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, err
			}
		}
	}
	s.hub = newHub(cfg.RingSize, cfg.SubscriberLag, cfg.FlushInterval, uint64(max(n.Now().UnixMicro(), 0)), dropped.Inc)
	s.hub.lock = n.Locked // the observer's lock
	if n.Replicated() {
		s.hub.replaced, s.hub.floor = n.Replaced, 0 // ids from the log: the floor comes with the first event
	}
	s.adoptAll(n.Snapshot().Sessions)
	s.stopObserve = n.Observe(s.observe)
	s.handler = s.forwarding(s.guard(s.routes()))
	for i := len(cfg.Middleware) - 1; i >= 0; i-- {
		s.handler = cfg.Middleware[i](s.handler)
	}
	s.http = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: cfg.HeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ConnState:         s.conns.track,
	}
	s.group.Go(s.hub.run)
	s.group.Go(s.keepAnonymous)
	return s, nil
}

// observe is the node's observer: it hands ev to the ring. It runs under
// the node's lock.
func (s *Server) observe(ev mutex.Event) {
	if ev.Action() == "" {
		return
	}
	var id string
	if c := s.sessionClient(ev.Session); c != nil {
		id = c.id
	}
	s.hub.observe(ev, id)
}

// LeaderGained tells the server that its node now leads its cluster (call
// it after the node's SetLeader(true)): it takes over the sessions of the
// HTTP clients that the table holds, wherever they were opened, as after
// a restart with a write-ahead log, and then serves the API. Until then a
// node of a cluster (Config.Forward set) answers 503 not_leader. Calling
// it again adopts only sessions it does not know.
func (s *Server) LeaderGained() {
	s.adoptAll(s.node.Snapshot().Sessions)
	s.leading.Store(true)
}

// LeaderLost tells the server that its node of a cluster no longer leads
// it: it forgets its clients (the next leader takes their sessions over),
// and every event stream ends, with a ": not leader" comment, so that its
// subscriber resumes with Last-Event-ID where the cluster now leads.
func (s *Server) LeaderLost() {
	s.leading.Store(false)
	s.mu.Lock()
	clear(s.clients)
	s.bySession.Clear()
	clear(s.anon)
	s.mu.Unlock()
	s.lmu.Lock()
	defer s.lmu.Unlock()
	close(s.lost)
	s.lost = make(chan struct{})
}

// serves reports whether this node serves the API itself: a single node,
// or a node of a cluster that leads and has taken over its clients'
// sessions (LeaderGained).
func (s *Server) serves() bool {
	return s.node.IsLeader() && (s.cfg.Forward == nil || s.leading.Load())
}

// leadership returns the channel that the next LeaderLost closes.
func (s *Server) leadership() <-chan struct{} {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	return s.lost
}

// keepAnonymous touches the anonymous sessions until the server stops.
func (s *Server) keepAnonymous() {
	t := time.NewTicker(anonymousTTL / 4)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			for _, a := range s.anonymous() {
				a.touch()
			}
		case <-s.stopping:
			return
		}
	}
}

// Handler returns the API's handler, wrapped by Config.Middleware.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve serves the API on ln until Shutdown or Close, and then returns
// ErrClosed.
func (s *Server) Serve(ln net.Listener) error {
	err := s.http.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return ErrClosed
	}
	return err
}

// Shutdown stops gracefully: /readyz answers 503, listeners close, waiting
// acquires are withdrawn and answered 503, event streams end, and requests
// in flight finish, until ctx ends; then it closes what is left. Locks
// stay held. It is safe to call more than once, and after Close.
func (s *Server) Shutdown(ctx context.Context) error {
	s.beginStop()
	err := s.http.Shutdown(ctx)
	if err != nil {
		s.http.Close()
	}
	s.finish()
	return err
}

// Close stops at once: listeners and connections close. It is safe to
// call more than once.
func (s *Server) Close() error {
	s.beginStop()
	err := s.http.Close()
	s.finish()
	return err
}

func (s *Server) beginStop() {
	s.stopOnce.Do(func() { close(s.stopping) })
}

// finish stops observing the node and waits for the server's goroutines,
// those of its connections included.
func (s *Server) finish() {
	s.finishOnce.Do(func() {
		s.stopObserve()
		s.hub.close()
		s.group.Close()
		s.group.Wait()
	})
	s.conns.wait()
}

// connCount counts the connections of the server that are not closed
// yet: http.Server does not wait for the goroutine of a connection that
// lingers before its close.
type connCount struct {
	mu   sync.Mutex
	n    int
	zero sync.Cond
}

// track is the http.Server's ConnState hook.
func (c *connCount) track(_ net.Conn, st http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch st {
	case http.StateNew:
		c.n++
	case http.StateClosed, http.StateHijacked:
		c.n--
		if c.n == 0 {
			c.zero.Broadcast()
		}
	}
}

// wait returns once every connection has closed.
func (c *connCount) wait() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.n > 0 {
		c.zero.Wait()
	}
}

// stopped reports whether Shutdown or Close has begun.
func (s *Server) stopped() bool {
	select {
	case <-s.stopping:
		return true
	default:
		return false
	}
}

// routes returns the API's mux.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(method, path string, h http.HandlerFunc) {
		mux.HandleFunc(method+" "+path, h)
		mux.HandleFunc(path, methodNotAllowed(method))
	}
	for _, base := range []string{basePath, legacyPath} {
		handle(http.MethodPost, base+"/acquire", s.acquire)
		handle(http.MethodPost, base+"/release", s.release)
		handle(http.MethodPost, base+"/renew", s.renew)
		handle(http.MethodPost, base+"/heartbeat", s.heartbeat)
		handle(http.MethodGet, base+"/observability", s.observability)
		handle(http.MethodGet, base+"/sessions", s.sessions)
		handle(http.MethodGet, base+"/subscribe", s.subscribe)
		if s.cfg.Metrics != nil {
			handle(http.MethodGet, base+"/metrics", s.cfg.Metrics.ServeHTTP)
		}
	}
	handle(http.MethodGet, "/healthz", s.health(false))
	handle(http.MethodGet, "/readyz", s.health(true))
	handle(http.MethodGet, "/node", s.nodeInfo)
	ui, _ := fs.Sub(uiFiles, "ui")
	files := http.FileServerFS(ui)
	handle(http.MethodGet, "/{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		http.ServeFileFS(w, r, ui, "index.html")
	})
	handle(http.MethodGet, "/ui/", http.StripPrefix("/ui/", files).ServeHTTP)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fail(w, http.StatusNotFound, failure{Code: codeNotFound, Message: "no such endpoint: " + r.URL.Path})
	})
	return mux
}

// methodNotAllowed answers 405 for a path served with method only.
func methodNotAllowed(method string) http.HandlerFunc {
	allow := method
	if method == http.MethodGet {
		allow = "GET, HEAD"
	}
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		fail(w, http.StatusMethodNotAllowed, failure{Code: codeMethodNotAllowed,
			Message: r.Method + " is not allowed here; use " + method})
	}
}

// healthJSON is the body of /healthz and /readyz.
type healthJSON struct {
	Status  string `json:"status"` // UP or DOWN
	Service string `json:"service"`
	Version string `json:"version"`
}

// health answers the liveness probe, or with ready the readiness probe,
// which says DOWN (503) once the server is stopping.
func (s *Server) health(ready bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h := healthJSON{Status: "UP", Service: "locking-center", Version: s.cfg.Version}
		code := http.StatusOK
		if ready && s.stopped() {
			h.Status, code = "DOWN", http.StatusServiceUnavailable
		}
		writeJSON(w, code, &h)
	}
}
