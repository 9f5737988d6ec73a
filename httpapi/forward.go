package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"strings"
)

// Forwarding is how a node of a cluster that does not lead passes the
// API's requests on to the leader's HTTP API.
type Forwarding struct {
	// Leader returns the leader's HTTP address, host:port, as the
	// cluster records it; "" when no leader is known or none is recorded.
	Leader func() string
	// Self is this node's own HTTP address as the cluster records it: a
	// node that the cluster names the leader, but that does not serve yet,
	// forwards nothing to itself.
	Self string
	// TLS: the leader's HTTP API is dialled with https.
	TLS bool
	// Transport carries the forwarded requests (under TLS, it presents
	// and verifies the nodes' certificates). Nil: http.DefaultTransport.
	Transport http.RoundTripper
}

// forwardedHeader marks a request a node forwarded: the node it reaches
// serves it or answers not_leader, and never forwards it again, so two
// nodes that each take the other for the leader do not pass a request to
// and fro.
const forwardedHeader = "Lc-Forwarded"

// forwardTo is the context key of the address a request is forwarded to.
type forwardTo struct{}

// forwarding passes the requests under /api/ but the metrics on to the
// leader when this node does not lead (see Forwarding); the rest, and
// every request on a leader or a single node, go to next.
func (s *Server) forwarding(next http.Handler) http.Handler {
	f := s.cfg.Forward
	if f == nil {
		return next
	}
	scheme := "http"
	if f.TLS {
		scheme = "https"
	}
	by := f.Self // names the node that forwarded, for the leader's logs
	if by == "" {
		by = "unknown"
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = scheme
			pr.Out.URL.Host = pr.In.Context().Value(forwardTo{}).(string)
			pr.Out.Host = ""
			pr.SetXForwarded()
			pr.Out.Header.Set(forwardedHeader, by)
		},
		Transport:     f.Transport,
		FlushInterval: -1, // waiting acquires and event streams pass at once
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client left
			}
			s.log.Info("the leader's HTTP API did not answer a forwarded request", logError, err)
			w.Header().Set("Retry-After", "1")
			fail(w, http.StatusServiceUnavailable, failure{Code: codeNotLeader,
				Message: "this node is not the cluster's leader, and the leader it knows did not answer"})
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/api/") || strings.HasSuffix(r.URL.Path, "/metrics") || s.serves() {
			next.ServeHTTP(w, r)
			return
		}
		to := f.Leader()
		if to == "" || to == f.Self || r.Header.Get(forwardedHeader) != "" {
			s.notLeader(w)
			return
		}
		proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), forwardTo{}, to)))
	})
}

// leaderHTTP returns the leader's HTTP address to name in an answer: ""
// on a single node, when none is known, or when it is this node's own.
func (s *Server) leaderHTTP() string {
	f := s.cfg.Forward
	if f == nil {
		return ""
	}
	if to := f.Leader(); to != f.Self {
		return to
	}
	return ""
}

// NodeInfo is what GET /node says of the node that answers.
type NodeInfo struct {
	Cluster  bool   `json:"cluster"`             // a node of a cluster
	ID       string `json:"id,omitempty"`        // its node id
	Leading  bool   `json:"leading"`             // it leads and serves (always on a single node)
	LeaderID string `json:"leader_id,omitempty"` // the id of the node that leads, when one is known
}

// nodeInfo serves GET /node: this node's NodeInfo. It is the node's own, never
// forwarded, and open like /healthz: it names node ids only.
func (s *Server) nodeInfo(w http.ResponseWriter, _ *http.Request) {
	info := NodeInfo{Leading: true}
	if s.cfg.Node != nil {
		info = s.cfg.Node()
		info.Cluster = true
	}
	w.Header().Set("Cache-Control", "no-cache")
	writeJSON(w, http.StatusOK, &info)
}
