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
// after Last-Event-ID out of the ring.
func (s *Server) subscribe(w http.ResponseWriter, r *http.Request) {
	after, resume, ok := lastEventID(w, r)
	if !ok {
		return
	}
	sub, backlog, missed := s.hub.join(r.URL.Query().Get("prefix"), after, resume)
	if sub == nil {
		shuttingDown(w)
		return
	}
	defer s.hub.leave(sub)
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
	var buf []byte
	var wrote time.Time
	pause := time.NewTimer(0)
	defer pause.Stop()
	for {
		select {
		case <-sub.signal:
			// Let the events of a busy stream gather for one write.
			if wait := s.cfg.FlushInterval - time.Since(wrote); wait > 0 {
				pause.Reset(wait)
				select {
				case <-pause.C:
				case <-r.Context().Done():
					return
				case <-s.stopping:
					return
				}
			}
			wrote = time.Now()
			var ok bool
			if buf, ok = s.hub.collect(sub, buf[:0]); !ok {
				write([]byte(commentDropped))
				return
			}
			if len(buf) > 0 && !write(buf) {
				return
			}
		case <-keepAlive.C:
			if !write([]byte(commentKeepAlive)) {
				return
			}
		case <-r.Context().Done():
			return
		case <-s.stopping:
			return
		}
	}
}
