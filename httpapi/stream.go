package httpapi

import (
	"net/http"
	"strconv"
	"time"
)

// Comments of the event stream.
const (
	commentConnected = ": connected\n\n"
	commentKeepAlive = ": keep-alive\n\n"
	commentMissed    = ": missed events: the ring no longer holds every event since the given id\n\n"
	commentDropped   = ": dropped: this stream fell too far behind\n\n"
	commentNotLeader = ": not leader: this node no longer leads the cluster; reconnect with Last-Event-ID to go on\n\n"
)

// lastEventID reads the id to resume after: the Last-Event-ID header, or
// the last_event_id query parameter. It answers 400 and returns false for
// one that is not an event id.
func lastEventID(w http.ResponseWriter, r *http.Request) (id uint64, resume, ok bool) {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		v = r.URL.Query().Get("last_event_id")
	}
	if v == "" {
		return 0, false, true
	}
	id, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		badRequest(w, "Last-Event-ID %q is not an event id", v)
		return 0, false, false
	}
	return id, true, true
}

// subscribe serves GET /api/v1/locks/subscribe[?prefix=...]: the events of
// the keys that begin with prefix, as Server-Sent Events, from now on, or
// after Last-Event-ID out of the ring. A client principal with prefixes
// must name a prefix within them.
func (s *Server) subscribe(w http.ResponseWriter, r *http.Request) {
	after, resume, ok := lastEventID(w, r)
	if !ok {
		return
	}
	prefix := r.URL.Query().Get("prefix")
	if who := callerOf(r); who.principal != nil && !s.allowed(w, who, prefix, who.principal.MayWatch) {
		return
	}
	lost := s.leadership()
	sub, backlog, missed := s.hub.join(prefix, after, resume)
	if sub == nil {
		shuttingDown(w)
		return
	}
	defer s.hub.leave(sub)
	if s.node.Replicated() && !s.serves() {
		// It stopped leading since the request was let in: a follower's
		// stream would follow a log that may have moved on elsewhere.
		s.notLeader(w)
		return
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	h.Set("Connection", "close") // the connection ends with the stream
	w.WriteHeader(http.StatusOK)
	write := func(b []byte) bool {
		rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	first := []byte(commentConnected)
	if missed {
		first = append(first, commentMissed...)
	}
	if !write(append(first, backlog...)) {
		return
	}
	keepAlive := time.NewTicker(s.cfg.KeepAlive)
	defer keepAlive.Stop()
	for {
		select {
		case <-sub.signal:
			// The hub paces the signals: the events of a busy stream
			// come in batches.
			b, ok := s.hub.collect(sub)
			if !ok {
				write([]byte(commentDropped))
				return
			}
			if len(b) > 0 && !write(b) {
				return
			}
		case <-keepAlive.C:
			if !write([]byte(commentKeepAlive)) {
				return
			}
		case <-lost:
			write([]byte(commentNotLeader))
			return
		case <-r.Context().Done():
			return
		case <-s.stopping:
			return
		}
	}
}
