package httpapi

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/locking-center/locking-center/auth"
	"github.com/locking-center/locking-center/mutex"
)

// Codes of the answers of authentication and limits.
const (
	codeUnauthenticated = "unauthenticated"
	codeForbidden       = "forbidden"
	codeRateLimited     = "rate_limited"
)

// Log attribute keys of authentication.
const (
	logRemote    = "remote"
	logPrincipal = "principal"
)

// realm is the realm of the WWW-Authenticate header of a 401.
const realm = `Bearer realm="locking-center"`

// queryTokenNames are the query parameters that would carry a token in a
// URL. A request with one is refused unread: URLs end up in access logs,
// proxies' histories and browsers' address bars.
var queryTokenNames = []string{"token", "api_key", "apikey", "access_token"}

// caller is who sent a request under /api/: its principal (nil when
// authentication is off) and the account that its sessions and rate are
// charged to: the principal's name, or the client's IP address.
type caller struct {
	principal *auth.Principal
	account   string
}

// scope returns what the caller's client_ids and anonymous session are
// kept under: the principal's name, or "" when authentication is off
// (every caller shares one space of client_ids, as without a principal
// nothing tells them apart).
func (c *caller) scope() string {
	if c.principal == nil {
		return ""
	}
	return c.principal.Name
}

// mayUse reports whether the caller may lock or list key.
func (c *caller) mayUse(key string) bool { return c.principal == nil || c.principal.MayUse(key) }

// seesAll reports whether the caller's listings show every key and
// session: without authentication, and for an admin.
func (c *caller) seesAll() bool { return c.principal == nil || c.principal.Admin() }

type callerKey struct{}

// callerOf returns the caller of a request that went through guard.
func callerOf(r *http.Request) *caller {
	if c, ok := r.Context().Value(callerKey{}).(*caller); ok {
		return c
	}
	return &caller{account: hostOf(r.RemoteAddr)}
}

// guard wraps the API's mux: it refuses a token in the query string on
// every path, and under /api/ authenticates the request (when Tokens is
// set) and takes it from its account's rate.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name, ok := queryToken(r); ok {
			badRequest(w, "a token in the URL (query parameter %q) is never read, as URLs are logged: send it in an Authorization: Bearer or an X-API-Key header", name)
			return
		}
		if !strings.HasPrefix(r.URL.Path, "/api/") {
			next.ServeHTTP(w, r)
			return
		}
		c := &caller{account: hostOf(r.RemoteAddr)}
		if s.cfg.Tokens != nil {
			p, err := s.cfg.Tokens.Authenticate(presented(r))
			if err != nil {
				s.node.Refused(mutex.RefusedUnauthenticated)
				s.log.Info("http authentication failed", logRemote, r.RemoteAddr)
				w.Header().Set("WWW-Authenticate", realm)
				fail(w, http.StatusUnauthorized, failure{Code: codeUnauthenticated, Message: "authentication failed"})
				return
			}
			c.principal, c.account = p, p.Name
		}
		if !s.isHeartbeat(r) && !s.cfg.Rates.Allow(c.account) {
			s.node.Refused(mutex.RefusedRate)
			w.Header().Set("Retry-After", strconv.Itoa(s.retryAfter()))
			fail(w, http.StatusTooManyRequests, failure{Code: codeRateLimited,
				Message: "too many requests from " + c.account + "; try again later"})
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
	})
}

// isHeartbeat reports whether r is a heartbeat, which no rate refuses: a
// client must be able to keep its session, and so its locks, alive.
func (s *Server) isHeartbeat(r *http.Request) bool {
	return r.Method == http.MethodPost && (r.URL.Path == basePath+"/heartbeat" || r.URL.Path == legacyPath+"/heartbeat")
}

// retryAfter returns the Retry-After of a rate-limited request: the time
// of one request at the account's rate, in whole seconds rounded up.
func (s *Server) retryAfter() int {
	return max(int(math.Ceil(s.cfg.Rates.RetryAfter().Seconds())), 1)
}

// queryToken reports whether the URL's query has a parameter that would
// carry a token, and its name.
func queryToken(r *http.Request) (string, bool) {
	if r.URL.RawQuery == "" {
		return "", false
	}
	for name := range r.URL.Query() {
		for _, t := range queryTokenNames {
			if strings.EqualFold(name, t) {
				return name, true
			}
		}
	}
	return "", false
}

// presented returns the token of a request: that of an Authorization:
// Bearer header, else that of an X-API-Key header; nil when it has none.
func presented(r *http.Request) []byte {
	if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return []byte(strings.TrimSpace(h[7:]))
	}
	if k := r.Header.Get("X-API-Key"); k != "" {
		return []byte(strings.TrimSpace(k))
	}
	return nil
}

// allowed reports whether the caller may use key (or watch a prefix) by
// may, a method of its principal; when it may not, it answers 403 and
// counts the refusal.
func (s *Server) allowed(w http.ResponseWriter, c *caller, key string, may func(string) bool) bool {
	if c.principal == nil || may(key) {
		return true
	}
	s.node.Refused(mutex.RefusedForbidden)
	fail(w, http.StatusForbidden, failure{Code: codeForbidden, Key: key,
		Message: fmt.Sprintf("%s may not use %q", c.principal.Name, key)})
	return false
}
