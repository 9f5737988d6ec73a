package httpapi

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/locking-center/locking-center/mutex"
)

// Front ends a holder, waiter or session came through.
const (
	frontHTTP    = "http"
	frontSession = "session"
	frontV1      = "v1"
)

// keyJSON is one key in GET /api/v1/locks/observability. Owner,
// FencingToken and ExpiresAt are those of its first holder; Holders lists
// them all, Queue every waiting request in arrival order.
type keyJSON struct {
	Key          string       `json:"key"`
	Owner        string       `json:"owner"`
	ClientID     string       `json:"client_id,omitempty"`
	FencingToken uint64       `json:"fencing_token"`
	ExpiresAt    *time.Time   `json:"expires_at,omitempty"`
	Waiters      []string     `json:"waiters"`
	Mode         string       `json:"mode"`
	Limit        uint32       `json:"limit"`
	LockDelayMS  int64        `json:"lock_delay_ms,omitempty"`
	Holders      []holderJSON `json:"holders"`
	Queue        []waiterJSON `json:"queue"`
}

// holderJSON is one holder of a key.
type holderJSON struct {
	Owner           string     `json:"owner"`
	ClientID        string     `json:"client_id,omitempty"`
	Session         uint64     `json:"session,omitempty"`
	Anonymous       bool       `json:"anonymous,omitempty"`
	FrontEnd        string     `json:"front_end"`
	FencingToken    uint64     `json:"fencing_token"`
	Mode            string     `json:"mode"`
	ReentrancyCount uint32     `json:"reentrancy_count"`
	AcquiredAt      time.Time  `json:"acquired_at"`
	HeldMS          int64      `json:"held_ms"`
	ExpiresAt       *time.Time `json:"expires_at,omitempty"`
	ExpiresInMS     *int64     `json:"expires_in_ms,omitempty"`
	RemoteAddr      string     `json:"remote_addr,omitempty"`
	Note            string     `json:"note,omitempty"`
}

// waiterJSON is one request waiting for a key.
type waiterJSON struct {
	Owner         string     `json:"owner"`
	ClientID      string     `json:"client_id,omitempty"`
	Session       uint64     `json:"session,omitempty"`
	Anonymous     bool       `json:"anonymous,omitempty"`
	FrontEnd      string     `json:"front_end"`
	QueuePosition int        `json:"queue_position"`
	Mode          string     `json:"mode"`
	Priority      int32      `json:"priority"`
	QueuedAt      time.Time  `json:"queued_at"`
	WaitingMS     int64      `json:"waiting_ms"`
	WaitUntil     *time.Time `json:"wait_until,omitempty"`
	Note          string     `json:"note,omitempty"`
}

// sessionJSON is one session in GET /api/v1/locks/sessions.
type sessionJSON struct {
	Session   uint64 `json:"session"`
	Name      string `json:"name"`
	ClientID  string `json:"client_id,omitempty"`
	FrontEnd  string `json:"front_end"`
	Anonymous bool   `json:"anonymous,omitempty"`
	// TTLMS, IdleMS and ExpiresAt are absent for the anonymous session,
	// which never expires while the server runs.
	TTLMS      *int64     `json:"ttl_ms,omitempty"`
	IdleMS     *int64     `json:"idle_ms,omitempty"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	Held       int        `json:"held"`
	Waiting    int        `json:"waiting"`
	RemoteAddr string     `json:"remote_addr,omitempty"`
	account    string     // who it is charged to; not shown
}

// sessionList reads the sessions of the table, and when each expires
// unless it is heard from, at the snapshot's time.
func (s *Server) sessionList() ([]sessionJSON, map[uint64]time.Time, time.Time) {
	snap := s.node.Snapshot()
	now := snap.Taken
	list := make([]sessionJSON, 0, len(snap.Sessions))
	ends := make(map[uint64]time.Time, len(snap.Sessions))
	for _, si := range snap.Sessions {
		end := now.Add(si.TTL - si.Idle)
		ends[si.ID] = end
		ttl, idle, endUTC := si.TTL.Milliseconds(), si.Idle.Milliseconds(), end.UTC()
		sj := sessionJSON{Session: si.ID, Name: si.Name, FrontEnd: frontSession, TTLMS: &ttl,
			IdleMS: &idle, ExpiresAt: &endUTC, Held: si.Held, Waiting: si.Parked, RemoteAddr: si.RemoteAddr,
			account: si.Account}
		if c := s.sessionClient(si.ID); c != nil {
			sj.FrontEnd, sj.ClientID, sj.Anonymous = frontHTTP, c.id, c.anon
			if c.anon {
				// The server keeps it alive (anonymousTTL is how, not a
				// bound the user can reach).
				sj.TTLMS, sj.IdleMS, sj.ExpiresAt = nil, nil, nil
			}
		}
		list = append(list, sj)
	}
	return list, ends, now
}

// keyList reads the keys of the table that begin with prefix and that
// the caller may use, sorted by their bytes, with their holders and
// waiters (from Export, under one hold of the node's lock).
func (s *Server) keyList(prefix string, caller *caller) []keyJSON {
	_, sessionEnd, now := s.sessionList()
	keys := []keyJSON{}
	// who names the front end and client of a session.
	who := func(session uint64) (string, string, bool) {
		if session == 0 {
			return frontV1, "", false
		}
		if c := s.sessionClient(session); c != nil {
			return frontHTTP, c.id, c.anon
		}
		return frontSession, "", false
	}
	var cur *keyJSON
	at := func(key string) *keyJSON {
		if cur == nil || cur.Key != key {
			keys = append(keys, keyJSON{Key: key, Limit: 1, Waiters: []string{}, Holders: []holderJSON{}, Queue: []waiterJSON{}})
			cur = &keys[len(keys)-1]
		}
		return cur
	}
	var records []mutex.Record
	s.node.Export(func(r *mutex.Record) {
		if (r.Kind == mutex.RecordKey || r.Kind == mutex.RecordHolder || r.Kind == mutex.RecordWaiter) &&
			strings.HasPrefix(r.Key, prefix) && caller.mayUse(r.Key) {
			records = append(records, *r)
		}
	})
	for i := range records {
		r := &records[i]
		owner := r.Owner
		if owner == "" {
			owner = r.Source
		}
		switch r.Kind {
		case mutex.RecordKey:
			k := at(r.Key)
			k.Limit = max(r.Limit, 1)
			if !r.DelayAt.IsZero() {
				k.LockDelayMS = max(r.DelayAt.Sub(now).Milliseconds(), 0)
			}
		case mutex.RecordHolder:
			k := at(r.Key)
			front, client, anon := who(r.Session)
			h := holderJSON{Owner: owner, ClientID: client, Session: r.Session, Anonymous: anon, FrontEnd: front, FencingToken: r.Token,
				Mode: r.Mode.String(), ReentrancyCount: max(r.Count, 1), AcquiredAt: r.Acquired.UTC(),
				HeldMS: max(now.Sub(r.Acquired).Milliseconds(), 0), RemoteAddr: r.RemoteAddr, Note: r.Note}
			var end time.Time // the lease's end; without one, a client's session's
			if r.LeaseFor > 0 {
				end = r.LeaseAt
			} else if se, ok := sessionEnd[r.Session]; ok && front == frontHTTP && !anon {
				end = se
			}
			if !end.IsZero() {
				in := max(end.Sub(now).Milliseconds(), 0)
				end = end.UTC()
				h.ExpiresAt, h.ExpiresInMS = &end, &in
			}
			if len(k.Holders) == 0 {
				k.Owner, k.ClientID, k.FencingToken, k.ExpiresAt, k.Mode = h.Owner, h.ClientID, h.FencingToken, h.ExpiresAt, h.Mode
			}
			k.Holders = append(k.Holders, h)
		case mutex.RecordWaiter:
			k := at(r.Key)
			front, client, anon := who(r.Session)
			wj := waiterJSON{Owner: owner, ClientID: client, Session: r.Session, Anonymous: anon, FrontEnd: front,
				QueuePosition: len(k.Queue) + 1, Mode: r.Mode.String(), Priority: r.Priority, QueuedAt: r.QueuedAt.UTC(),
				WaitingMS: max(now.Sub(r.QueuedAt).Milliseconds(), 0), Note: r.Note}
			if !r.WaitAt.IsZero() {
				wu := r.WaitAt.UTC()
				wj.WaitUntil = &wu
			}
			k.Queue = append(k.Queue, wj)
			k.Waiters = append(k.Waiters, owner)
			if k.Limit == 1 && r.Limit > 1 {
				k.Limit = r.Limit
			}
		}
	}
	for i := range keys {
		if k := &keys[i]; k.Mode == "" && len(k.Queue) > 0 {
			k.Mode = k.Queue[0].Mode
		} else if k.Mode == "" {
			k.Mode = mutex.Exclusive.String()
		}
	}
	return keys
}

// observability serves GET /api/v1/locks/observability[?prefix=...]:
// every key held, waited for or in lock-delay, with its holders and
// waiters; for a client principal, of the keys its prefixes allow.
func (s *Server) observability(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.keyList(r.URL.Query().Get("prefix"), callerOf(r)))
}

// sessions serves GET /api/v1/locks/sessions: every session of the
// table, of HTTP clients and of the session protocol; for a client
// principal, the sessions charged to it.
func (s *Server) sessions(w http.ResponseWriter, r *http.Request) {
	list, _, _ := s.sessionList()
	if who := callerOf(r); !who.seesAll() {
		list = slices.DeleteFunc(list, func(sj sessionJSON) bool { return sj.account != who.account })
	}
	writeJSON(w, http.StatusOK, list)
}
