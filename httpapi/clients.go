package httpapi

import (
	"crypto/sha256"
	"net"
	"sync"
	"sync/atomic"

	"github.com/locking-center/locking-center/mutex"
)

// anonymousName is the session name of the anonymous session, the one of
// requests without a client_id.
const anonymousName = "http"

// Labels of the resume secrets of the front end's sessions. A session's
// secret is derived from its client_id and, with authentication on, its
// principal's name, so that after a restart with a write-ahead log the
// front end finds its sessions again (Resume), each under its principal.
// The preimage is longer than the 16-byte secret of the session protocol,
// so no client of that protocol can resume an HTTP session.
const (
	clientSecretLabel    = "locking-center/httpapi/client\x00"
	anonymousSecretLabel = "locking-center/httpapi/anonymous\x00"
)

// secretHash returns the SHA-256 of the resume secret of a client's
// session, or of the anonymous session, of scope (a principal's name; ""
// without authentication, which keeps the secrets of servers that had
// none). The scope goes first with its length, so that no pair of scope
// and client_id has the preimage of another.
func secretHash(scope, clientID string, anonymous bool) [mutex.SecretHashLen]byte {
	label := clientSecretLabel
	if anonymous {
		label, clientID = anonymousSecretLabel, ""
	}
	b := []byte(label)
	if scope != "" {
		b = append(b, "scope\x00"...)
		b = append(b, byte(len(scope)))
		b = append(b, scope...)
	}
	return sha256.Sum256(append(b, clientID...))
}

// clientKey is what the front end keeps a client_id's session under: a
// client_id is scoped by principal.
type clientKey struct {
	scope, id string
}

// client is one session of the front end: a client_id's, or the
// anonymous one. It is the session's mutex.Route: the node delivers the
// results and events of its requests to it, and it hands those of a
// waiting acquire to the goroutine of that HTTP request.
type client struct {
	srv   *Server
	id    string // client_id; "" for the anonymous session
	scope string // the principal's name; "" without authentication
	anon  bool

	// mu orders the session's request ids: it is held across each
	// command applied in the session, so ids reach the node in order.
	mu   sync.Mutex
	sid  uint64 // session id; 0 until opened
	last uint64 // highest request id used
	live atomic.Pointer[mutex.Live]

	// rmu guards what Deliver touches; Deliver runs under the node's lock,
	// so rmu is never held while calling the node.
	rmu   sync.Mutex
	waits map[uint64]chan mutex.Output // by request id
	ended bool
}

// Deliver hands o to the request that waits for it, if any. It is called
// with the node's lock held.
func (c *client) Deliver(o mutex.Output) {
	req := o.Command.Request
	if o.IsEvent {
		switch o.Event.Kind {
		case mutex.EventGranted, mutex.EventWithdrawn:
			req = o.Event.Request
		case mutex.EventSessionEnded:
			c.end(o.Event.Session)
			return
		default:
			return
		}
	}
	c.rmu.Lock()
	ch := c.waits[req]
	c.rmu.Unlock()
	if ch != nil {
		select {
		case ch <- o:
		default: // a request's channel holds its result and one event
		}
	}
}

// Flush does nothing: Deliver hands everything over at once.
func (c *client) Flush() {}

// end marks session sid ended and forgets it, so that the client's next
// request opens a new one. It runs under the node's lock.
func (c *client) end(sid uint64) {
	c.srv.forget(c, sid)
	c.rmu.Lock()
	c.ended = true
	c.rmu.Unlock()
}

func (c *client) isEnded() bool {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	return c.ended
}

// openLocked opens the session if it is not yet open; c.mu is held. It
// returns StatusOK when the session is open, StatusNoSession when it has
// ended (ask again with a new client), or why it could not be opened
// (StatusUnavailable: a node of a cluster that is not the leader).
func (c *client) openLocked(remote string) mutex.Status {
	if c.isEnded() {
		return mutex.StatusNoSession
	}
	if c.sid != 0 {
		return mutex.StatusOK
	}
	// A client's session is charged to its principal, or without
	// authentication to the client's address (the source of the limits
	// per source); the anonymous session to its principal, or without
	// authentication, shared by every address, to nobody.
	name, ttl, account := c.id, c.srv.cfg.SessionTTL, hostOf(remote)
	if c.anon {
		// Shared by every request of its scope without a client_id.
		name, ttl, remote, account = anonymousName, anonymousTTL, "", ""
	}
	if c.scope != "" {
		account = c.scope
	}
	live, res, _ := c.srv.node.OpenSessionAs(account, name, ttl, secretHash(c.scope, c.id, c.anon), remote, c)
	if live == nil || res.Status != mutex.StatusOK {
		if res.Status == mutex.StatusOK {
			res.Status = mutex.StatusNoSession
		}
		return res.Status
	}
	c.sid = live.ID()
	c.live.Store(live)
	c.srv.opened(c)
	return mutex.StatusOK
}

// hostOf returns the host of a host:port address, or the address when it
// has no port.
func hostOf(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// touch tells the node that the session's client was just heard from.
func (c *client) touch() {
	if l := c.live.Load(); l != nil {
		l.Touch()
	}
}

// ensure opens the session if needed and touches it. It returns
// StatusOK, or what openLocked returns.
func (c *client) ensure(remote string) mutex.Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.openLocked(remote); st != mutex.StatusOK {
		return st
	}
	c.touch()
	return mutex.StatusOK
}

// applied is the outcome of one command applied in a client's session.
type applied struct {
	res     mutex.Result
	pending mutex.Pending
	request uint64 // the request id the command got
}

// apply applies cmd in the session with its next request id, opening
// the session first if needed, and touching it when touch is set. With
// ch, the command's result and the events of its request (a grant after
// a wait, a withdrawal) are also sent to ch; the caller unregisters it
// with unwait. It reports false when the command was not applied: the
// session has ended (res.Status StatusNoSession: the caller asks again
// with a new client), or the node cannot apply commands
// (StatusUnavailable).
func (c *client) apply(cmd mutex.Command, ch chan mutex.Output, touch bool) (applied, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.openLocked(cmd.RemoteAddr); st != mutex.StatusOK {
		return applied{res: mutex.Result{Status: st}}, false
	}
	if touch {
		c.touch()
	}
	c.last++
	id := c.last
	cmd.Session, cmd.Request = c.sid, id
	if ch != nil {
		c.rmu.Lock()
		if c.waits == nil {
			c.waits = make(map[uint64]chan mutex.Output)
		}
		c.waits[id] = ch
		c.rmu.Unlock()
	}
	res, p, delivered := c.srv.node.ApplySession(cmd)
	if !delivered || res.Status == mutex.StatusNoSession || res.Status == mutex.StatusUnavailable {
		if ch != nil {
			c.unwait(id)
		}
		if res.Status != mutex.StatusUnavailable {
			res.Status = mutex.StatusNoSession
		}
		return applied{res: res}, false
	}
	return applied{res: res, pending: p, request: id}, true
}

// unwait stops handing the outputs of request id over.
func (c *client) unwait(id uint64) {
	c.rmu.Lock()
	delete(c.waits, id)
	c.rmu.Unlock()
}

// adopt takes over session id of an earlier run of the server, read back
// from a write-ahead log, when its secret is this front end's for name in
// scope. It reports whether it did.
func (s *Server) adopt(id uint64, scope, name string, anonymous bool) bool {
	c := &client{srv: s, id: name, scope: scope, anon: anonymous}
	if anonymous {
		c.id = ""
	}
	live := s.node.Resume(id, secretHash(scope, c.id, anonymous), "", "", func(st mutex.SessionState, _ mutex.Route, _ []mutex.Output) mutex.Route {
		c.last = st.Applied
		return c
	})
	if live == nil {
		return false
	}
	c.sid = live.ID()
	c.live.Store(live)
	s.mu.Lock()
	if anonymous {
		s.anon[scope] = c
	} else {
		s.clients[clientKey{scope, c.id}] = c
	}
	s.bySession.Store(c.sid, c)
	s.mu.Unlock()
	return true
}

// adoptAll takes over the front end's sessions among those a write-ahead
// log brought back. With authentication on, a session's principal is the
// account it is charged to.
func (s *Server) adoptAll(sessions []mutex.SessionInfo) {
	for _, si := range sessions {
		if s.sessionClient(si.ID) != nil {
			continue // adopted already
		}
		scope := ""
		if s.cfg.Tokens != nil {
			scope = si.Account
		}
		if !s.adopt(si.ID, scope, si.Name, false) && si.Name == anonymousName {
			s.adopt(si.ID, scope, si.Name, true)
		}
	}
}

// clientFor returns the client of clientID in scope ("" for the anonymous
// session), making one (not yet open) when there is none.
func (s *Server) clientFor(scope, clientID string) *client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if clientID == "" {
		a := s.anon[scope]
		if a == nil {
			a = &client{srv: s, scope: scope, anon: true}
			s.anon[scope] = a
		}
		return a
	}
	k := clientKey{scope, clientID}
	c := s.clients[k]
	if c == nil {
		c = &client{srv: s, id: clientID, scope: scope}
		s.clients[k] = c
	}
	return c
}

// lookupClient returns the client of clientID in scope, or nil when it
// has none.
func (s *Server) lookupClient(scope, clientID string) *client {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clients[clientKey{scope, clientID}]
}

// anonymous returns the anonymous sessions, one a scope.
func (s *Server) anonymous() []*client {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*client, 0, len(s.anon))
	for _, a := range s.anon {
		out = append(out, a)
	}
	return out
}

// opened records c's session id once its session is open.
func (s *Server) opened(c *client) {
	s.mu.Lock()
	s.bySession.Store(c.sid, c)
	s.mu.Unlock()
}

// forget drops c, whose session sid ended. It runs under the node's lock.
func (s *Server) forget(c *client, sid uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.anon && s.anon[c.scope] == c {
		delete(s.anon, c.scope)
	} else if k := (clientKey{c.scope, c.id}); !c.anon && s.clients[k] == c {
		delete(s.clients, k)
	}
	s.bySession.CompareAndDelete(sid, c)
}

// sessionClient returns the front end's client of session id, or nil
// when the session is not one of this front end's.
func (s *Server) sessionClient(id uint64) *client {
	if id == 0 {
		return nil
	}
	v, _ := s.bySession.Load(id)
	c, _ := v.(*client)
	return c
}

// clientSessions returns the number of client_id sessions open now.
func (s *Server) clientSessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.clients)
}
