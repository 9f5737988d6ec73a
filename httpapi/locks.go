package httpapi

import (
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/locking-center/locking-center/mutex"
)

// acquireRequest is the body of POST /api/v1/locks/acquire.
type acquireRequest struct {
	Key         string `json:"key"`
	Owner       string `json:"owner"`
	ClientID    string `json:"client_id"`
	DurationMS  int64  `json:"duration_ms"` // the lock's lease; 0: none
	WaitMS      int64  `json:"wait_ms"`     // 0: answer at once
	Mode        string `json:"mode"`        // exclusive (default) or shared
	Priority    int64  `json:"priority"`
	Limit       int64  `json:"limit"`
	Reentrant   *bool  `json:"reentrant"`     // default true
	LockDelayMS *int64 `json:"lock_delay_ms"` // default Config.LockDelay
	Note        string `json:"note"`          // the holder's note, at most mutex.MaxNoteLen bytes
}

// lockRequest is the body of release and renew.
type lockRequest struct {
	Key          string        `json:"key"`
	Owner        string        `json:"owner"`
	ClientID     string        `json:"client_id"`
	FencingToken *fencingToken `json:"fencing_token"`
	DurationMS   int64         `json:"duration_ms"` // renew: the new lease; 0: the lock's own
}

// heartbeatRequest is the body of POST /api/v1/locks/heartbeat.
type heartbeatRequest struct {
	ClientID string `json:"client_id"`
}

// lockJSON is a lock in the answer of an acquire.
type lockJSON struct {
	Key             string     `json:"key"`
	Owner           string     `json:"owner"`
	ClientID        string     `json:"client_id"`
	ReentrancyCount uint32     `json:"reentrancy_count"`
	FencingToken    uint64     `json:"fencing_token"`
	ExpiresAt       *time.Time `json:"expires_at,omitempty"`
	Mode            string     `json:"mode"`
	AcquiredAt      time.Time  `json:"acquired_at"`
	Session         uint64     `json:"session"`
	Limit           uint32     `json:"limit"`
	Note            string     `json:"note,omitempty"`
}

type acquired struct {
	Status string   `json:"status"`
	Lock   lockJSON `json:"lock"`
}

// done is the answer of release, renew and heartbeat.
type done struct {
	Status          string     `json:"status"`
	Message         string     `json:"message,omitempty"`
	Key             string     `json:"key,omitempty"`
	FencingToken    uint64     `json:"fencing_token,omitempty"`
	ReentrancyCount *uint32    `json:"reentrancy_count,omitempty"`
	ExpiresAt       *time.Time `json:"expires_at,omitempty"`
	ClientID        string     `json:"client_id,omitempty"`
	Session         uint64     `json:"session,omitempty"`
	TTLMS           int64      `json:"ttl_ms,omitempty"`
}

// checkKeyOwner validates the key, the owner and the client_id; it
// answers 400 and returns false when one is out of range.
func checkKeyOwner(w http.ResponseWriter, key, owner, clientID string) bool {
	switch {
	case key == "":
		badRequest(w, "key is required")
	case len(key) > mutex.MaxKeyLen:
		badRequest(w, "key is %d bytes; at most %d are allowed", len(key), mutex.MaxKeyLen)
	case owner == "":
		badRequest(w, "owner is required")
	case len(owner) > mutex.MaxSourceLen:
		badRequest(w, "owner is %d bytes; at most %d are allowed", len(owner), mutex.MaxSourceLen)
	case len(clientID) > mutex.MaxSourceLen:
		badRequest(w, "client_id is %d bytes; at most %d are allowed", len(clientID), mutex.MaxSourceLen)
	default:
		return true
	}
	return false
}

// millis checks a field of milliseconds and returns it as a duration.
func millis(w http.ResponseWriter, name string, v, maxMS int64) (time.Duration, bool) {
	if v < 0 || v > maxMS {
		badRequest(w, "%s must lie between 0 and %d", name, maxMS)
		return 0, false
	}
	return time.Duration(v) * time.Millisecond, true
}

// command turns an acquire request into its command, or answers 400.
func (s *Server) command(w http.ResponseWriter, r *http.Request, q *acquireRequest) (mutex.Command, bool) {
	cmd := mutex.Command{Op: mutex.OpAcquire, Key: q.Key, Source: q.Owner, Owner: q.Owner,
		RemoteAddr: r.RemoteAddr, Reentrant: true, ConnBound: true, Delay: s.cfg.LockDelay}
	if !checkKeyOwner(w, q.Key, q.Owner, q.ClientID) {
		return cmd, false
	}
	var ok bool
	if cmd.Lease, ok = millis(w, "duration_ms", q.DurationMS, MaxMillis); !ok {
		return cmd, false
	}
	if cmd.Wait, ok = millis(w, "wait_ms", q.WaitMS, MaxMillis); !ok {
		return cmd, false
	}
	cmd.Try = cmd.Wait == 0
	if q.LockDelayMS != nil {
		if cmd.Delay, ok = millis(w, "lock_delay_ms", *q.LockDelayMS, mutex.MaxLockDelay.Milliseconds()); !ok {
			return cmd, false
		}
	}
	switch q.Mode {
	case "", "exclusive":
	case "shared":
		cmd.Mode = mutex.Shared
	default:
		badRequest(w, `mode must be "exclusive" or "shared", not %q`, q.Mode)
		return cmd, false
	}
	if q.Priority < math.MinInt32 || q.Priority > math.MaxInt32 {
		badRequest(w, "priority must lie between %d and %d", math.MinInt32, math.MaxInt32)
		return cmd, false
	}
	cmd.Priority = int32(q.Priority)
	if q.Limit < 0 || q.Limit > MaxMillis {
		badRequest(w, "limit must lie between 0 and %d", MaxMillis)
		return cmd, false
	}
	if cmd.Mode == mutex.Shared && q.Limit > 1 {
		badRequest(w, "a shared lock takes no limit")
		return cmd, false
	}
	cmd.Limit = uint32(q.Limit)
	if q.Reentrant != nil {
		cmd.Reentrant = *q.Reentrant
	}
	if len(q.Note) > mutex.MaxNoteLen {
		badRequest(w, "note is %d bytes; at most %d are allowed", len(q.Note), mutex.MaxNoteLen)
		return cmd, false
	}
	cmd.Note = q.Note
	return cmd, true
}

// sessionTries bounds how often a request opens a new session after the
// one it found ended under it.
const sessionTries = 3

// acquire serves POST /api/v1/locks/acquire.
func (s *Server) acquire(w http.ResponseWriter, r *http.Request) {
	var q acquireRequest
	if !s.decode(w, r, &q) {
		return
	}
	cmd, ok := s.command(w, r, &q)
	if !ok {
		return
	}
	who := callerOf(r)
	if !s.allowed(w, who, q.Key, who.mayUse) {
		return
	}
	if s.stopped() {
		shuttingDown(w)
		return
	}
	lost := s.leadership()
	var ch chan mutex.Output
	var c *client
	var a applied
	for try := 0; ; try++ {
		ch = make(chan mutex.Output, 2) // a try's own: nothing of another reaches it
		c = s.clientFor(who.scope(), q.ClientID)
		if a, ok = c.apply(cmd, ch, q.ClientID != ""); ok {
			break
		}
		if a.res.Status == mutex.StatusUnavailable {
			s.notLeader(w)
			return
		}
		if try == sessionTries-1 {
			fail(w, http.StatusServiceUnavailable, failure{Code: codeSessionExpired, Key: q.Key,
				Message: "the client's session could not be opened"})
			return
		}
	}
	defer c.unwait(a.request)
	result := <-ch // delivered before apply returned
	at := result.Command.At
	switch a.res.Status {
	case mutex.StatusGranted:
		s.answerGrant(w, c, &cmd, a.res.Token, a.res.Count, a.res.Left, at, a.pending)
	case mutex.StatusParked:
		s.await(w, r, c, &cmd, a.request, ch, lost)
	default:
		s.refuse(w, &cmd, a.res, who)
	}
}

// await waits for the outcome of a parked acquire and answers it. The
// request keeps its client's session alive while it waits. When the
// client goes away, or the server stops, the acquire is withdrawn (and a
// grant that raced that, released). When the node stops leading its
// cluster, it answers 503 not_leader: the acquire stays in the cluster's
// queue, and what becomes of it is the new leader's to say.
func (s *Server) await(w http.ResponseWriter, r *http.Request, c *client, cmd *mutex.Command, req uint64, ch chan mutex.Output, lost <-chan struct{}) {
	var tick <-chan time.Time
	if !c.anon {
		t := time.NewTicker(s.cfg.SessionTTL / 3)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case o := <-ch:
			s.answerOutcome(w, c, cmd, o)
			return
		case <-tick:
			c.touch()
		case <-r.Context().Done():
			s.withdraw(c, cmd.Key, req, ch)
			return
		case <-s.stopping:
			s.withdraw(c, cmd.Key, req, ch)
			shuttingDown(w)
			return
		case <-lost:
			// This node can neither withdraw the request nor hear of its
			// grant any more: its outcome is the new leader's.
			s.notLeader(w)
			return
		}
	}
}

// answerOutcome answers the end of a wait: a grant, or a withdrawal.
func (s *Server) answerOutcome(w http.ResponseWriter, c *client, cmd *mutex.Command, o mutex.Output) {
	ev := &o.Event
	if ev.Kind == mutex.EventGranted {
		if !c.anon {
			c.touch()
		}
		s.answerGrant(w, c, cmd, ev.Token, 1, ev.Lease, ev.At, o.Pending)
		return
	}
	switch ev.Reason {
	case mutex.ReasonTimeout:
		f := s.conflict(cmd.Key)
		f.Message = fmt.Sprintf("%s; wait_ms %d ran out", f.Message, cmd.Wait.Milliseconds())
		f.Code = codeTimeout
		fail(w, http.StatusConflict, f)
	case mutex.ReasonSessionExpired, mutex.ReasonSessionClosed:
		fail(w, http.StatusConflict, failure{Code: codeSessionExpired, Key: cmd.Key,
			Message: "the client's session ended while the request waited"})
	case mutex.ReasonRestart:
		shuttingDown(w)
	default:
		fail(w, http.StatusConflict, failure{Code: codeWithdrawn, Key: cmd.Key,
			Message: "the request was withdrawn while it waited: " + ev.Reason.String()})
	}
}

// withdraw takes a parked acquire out of its queue; if it was granted
// meanwhile, the grant is released.
func (s *Server) withdraw(c *client, key string, req uint64, ch chan mutex.Output) {
	a, ok := c.apply(mutex.Command{Op: mutex.OpCancel, Target: req}, nil, false)
	if !ok || a.res.Status == mutex.StatusOK {
		return // withdrawn, or the session's end withdrew it
	}
	// Not waiting any more: its outcome was delivered before the cancel.
	select {
	case o := <-ch:
		if o.IsEvent && o.Event.Kind == mutex.EventGranted {
			c.apply(mutex.Command{Op: mutex.OpRelease, Key: key, Token: o.Event.Token}, nil, false)
		}
	default:
	}
}

// answerGrant answers a grant once it is durable; a grant that cannot be
// made durable is revoked and answered 503.
func (s *Server) answerGrant(w http.ResponseWriter, c *client, cmd *mutex.Command, token uint64, count uint32,
	lease time.Duration, at time.Time, p mutex.Pending) {
	if err := mutex.WaitPending(p); err != nil {
		s.node.Revoke(cmd.Key, token)
		s.log.Warn("grant not durable", "key", cmd.Key, logError, err)
		fail(w, http.StatusServiceUnavailable, failure{Code: codeNotDurable, Key: cmd.Key,
			Message: "the grant could not be written to the log; the key is not held"})
		return
	}
	l := lockJSON{Key: cmd.Key, Owner: cmd.Owner, ClientID: c.id, ReentrancyCount: max(count, 1),
		FencingToken: token, Mode: cmd.Mode.String(), AcquiredAt: at.UTC(), Session: c.sid, Limit: max(cmd.Limit, 1),
		Note: cmd.Note}
	if count > 1 {
		// A reentrant grant: the lock (and its note) is older than this request.
		for _, h := range s.node.Describe(cmd.Key).Holders {
			if h.Token == token {
				l.AcquiredAt, l.Note = h.Acquired.UTC(), h.Note
			}
		}
	}
	l.ExpiresAt = s.expiry(c, at, lease)
	writeJSON(w, http.StatusOK, &acquired{Status: "success", Lock: l})
}

// expiry returns when a lock of c ends unless it is renewed: at the end
// of its lease (left after at); without a lease, a client's lock ends
// with its session, at its TTL after at unless the client is heard from;
// nil for a lock of the anonymous session without a lease.
func (s *Server) expiry(c *client, at time.Time, left time.Duration) *time.Time {
	var end time.Time
	switch {
	case left > 0:
		end = at.Add(left)
	case !c.anon:
		end = at.Add(s.cfg.SessionTTL)
	default:
		return nil
	}
	end = end.UTC()
	return &end
}

// refuse answers an acquire the table refused.
func (s *Server) refuse(w http.ResponseWriter, cmd *mutex.Command, res mutex.Result, who *caller) {
	switch res.Status {
	case mutex.StatusBusy:
		fail(w, http.StatusConflict, s.conflict(cmd.Key))
	case mutex.StatusDeadlock:
		fail(w, http.StatusConflict, failure{Code: codeDeadlock, Key: cmd.Key,
			Message: "deadlock detected: cycle in lock wait queue"})
	case mutex.StatusLimitMismatch:
		fail(w, http.StatusConflict, failure{Code: codeLimitMismatch, Key: cmd.Key, Limit: res.Limit,
			Message: fmt.Sprintf("limit mismatch: key %q is a semaphore of limit %d", cmd.Key, res.Limit)})
	case mutex.StatusOverLimit:
		fail(w, http.StatusTooManyRequests, failure{Code: codeOverLimit, Key: cmd.Key,
			Message: fmt.Sprintf("over limit: %s holds, or has waiting, as many locks as it may", who.account)})
	case mutex.StatusUpgrade:
		fail(w, http.StatusConflict, failure{Code: codeUpgrade, Key: cmd.Key,
			Message: fmt.Sprintf("owner %q holds key %q shared and cannot take it exclusively; release it first", cmd.Owner, cmd.Key)})
	default:
		badRequest(w, "the lock table refused the request: %s", res.Status)
	}
}

// conflict describes why key cannot be had now.
func (s *Server) conflict(key string) failure {
	info := s.node.Describe(key)
	f := failure{Code: codeConflict, Key: key, Holders: len(info.Holders), QueueLength: info.Queue,
		LockDelayMS: info.DelayLeft.Milliseconds()}
	switch {
	case len(info.Holders) > 0:
		f.Mode = info.Holders[0].Mode.String()
		f.Message = fmt.Sprintf("lock conflict: key %q is held in mode %q", key, f.Mode)
	case info.DelayLeft > 0:
		f.Message = fmt.Sprintf("lock conflict: key %q is in lock-delay for %v more", key, info.DelayLeft.Round(time.Millisecond))
	default:
		f.Message = fmt.Sprintf("lock conflict: key %q has requests waiting ahead", key)
	}
	return f
}

// notLeader answers 503 on a node of a cluster that cannot change the
// table: it is not the leader, or the cluster has no quorum. The answer
// names the leader's mutex port and HTTP API when they are known.
func (s *Server) notLeader(w http.ResponseWriter) {
	f := failure{Code: codeNotLeader, Message: "this node is not the cluster's leader, or the cluster has no quorum"}
	if f.Leader = s.node.Leader(); f.Leader != "" {
		f.Message = "this node is not the cluster's leader; the leader's mutex port is " + f.Leader
	}
	if f.LeaderHTTP = s.leaderHTTP(); f.LeaderHTTP != "" {
		f.Message += ", its HTTP API " + f.LeaderHTTP
	}
	w.Header().Set("Retry-After", "1")
	fail(w, http.StatusServiceUnavailable, f)
}

func shuttingDown(w http.ResponseWriter) {
	fail(w, http.StatusServiceUnavailable, failure{Code: codeShuttingDown, Message: "the server is shutting down"})
}

// holderOf finds the lock of owner on key held by one of the front end's
// sessions of scope: the session of clientID, or, without one, any of
// them. With
// token, the lock must have that fencing token. It answers 409 and
// returns nil when there is no such lock, or several without a token to
// choose.
func (s *Server) holderOf(w http.ResponseWriter, scope, key, owner, clientID string, token *fencingToken) (*client, *mutex.Holder) {
	info := s.node.Describe(key)
	var found []mutex.Holder
	var clients []*client
	for _, h := range info.Holders {
		c := s.sessionClient(h.Session)
		if c == nil || c.scope != scope || h.Source != owner || clientID != "" && c.id != clientID {
			continue
		}
		found, clients = append(found, h), append(clients, c)
	}
	who := fmt.Sprintf("owner %q", owner)
	if clientID != "" {
		who += fmt.Sprintf(" of client_id %q", clientID)
	}
	if len(found) == 0 {
		fail(w, http.StatusConflict, failure{Code: codeNotHeld, Key: key,
			Message: fmt.Sprintf("lock not held: key %q has no lock of %s", key, who)})
		return nil, nil
	}
	if token != nil {
		for i := range found {
			if found[i].Token == uint64(*token) {
				return clients[i], &found[i]
			}
		}
		f := failure{Code: codeTokenMismatch, Key: key,
			Message: fmt.Sprintf("fencing token mismatch: the lock of %s on key %q has token %d, not %d", who, key, found[0].Token, *token)}
		if len(found) == 1 {
			f.FencingToken = found[0].Token
		} else {
			f.Message = fmt.Sprintf("fencing token mismatch: no lock of %s on key %q has token %d", who, key, *token)
		}
		fail(w, http.StatusConflict, f)
		return nil, nil
	}
	if len(found) > 1 {
		fail(w, http.StatusConflict, failure{Code: codeAmbiguous, Key: key,
			Message: fmt.Sprintf("key %q has %d locks of %s; name the client_id or the fencing_token", key, len(found), who)})
		return nil, nil
	}
	return clients[0], &found[0]
}

// changeLock serves a release (op mutex.OpRelease) or a renew
// (mutex.OpRenew): it finds the owner's lock that the request names and
// applies op to it in the lock's session, durably. A release touches the
// session of the client_id it names; a renew keeps the lock's session
// alive, as it keeps the lock. On failure it answers the request and
// returns ok false.
func (s *Server) changeLock(w http.ResponseWriter, r *http.Request, op mutex.Op) (q lockRequest, c *client,
	h *mutex.Holder, res mutex.Result, ok bool) {
	if !s.decode(w, r, &q) || !checkKeyOwner(w, q.Key, q.Owner, q.ClientID) {
		return q, nil, nil, res, false
	}
	who := callerOf(r)
	if !s.allowed(w, who, q.Key, who.mayUse) {
		return q, nil, nil, res, false
	}
	var lease time.Duration
	if op == mutex.OpRenew {
		if lease, ok = millis(w, "duration_ms", q.DurationMS, MaxMillis); !ok {
			return q, nil, nil, res, false
		}
	} else if q.DurationMS != 0 {
		badRequest(w, "a release takes no duration_ms")
		return q, nil, nil, res, false
	} else if named := s.lookupClient(who.scope(), q.ClientID); named != nil {
		named.touch()
	}
	if c, h = s.holderOf(w, who.scope(), q.Key, q.Owner, q.ClientID, q.FencingToken); c == nil {
		return q, nil, nil, res, false
	}
	a, applied := c.apply(mutex.Command{Op: op, Key: q.Key, Token: h.Token, Lease: lease}, nil, op == mutex.OpRenew)
	if a.res.Status == mutex.StatusUnavailable {
		s.notLeader(w)
		return q, nil, nil, res, false
	}
	if !applied || a.res.Status != mutex.StatusOK {
		fail(w, http.StatusConflict, failure{Code: codeNotHeld, Key: q.Key,
			Message: fmt.Sprintf("lock not held: the lock of owner %q on key %q ended meanwhile", q.Owner, q.Key)})
		return q, nil, nil, res, false
	}
	if err := mutex.WaitPending(a.pending); err != nil {
		fail(w, http.StatusServiceUnavailable, failure{Code: codeNotDurable, Key: q.Key,
			Message: "the change could not be written to the log"})
		return q, nil, nil, res, false
	}
	return q, c, h, a.res, true
}

// release serves POST /api/v1/locks/release. A lock taken more than once
// by its owner (reentrancy) counts down and passes on at zero.
func (s *Server) release(w http.ResponseWriter, r *http.Request) {
	q, _, h, res, ok := s.changeLock(w, r, mutex.OpRelease)
	if !ok {
		return
	}
	count := res.Count
	msg := "Lock released successfully"
	if count > 0 {
		msg = fmt.Sprintf("Lock reentrancy count decremented to %d; the lock is still held", count)
	}
	writeJSON(w, http.StatusOK, &done{Status: "success", Message: msg, Key: q.Key, FencingToken: h.Token, ReentrancyCount: &count})
}

// renew serves POST /api/v1/locks/renew: the lease starts again, for
// duration_ms or, without it, for the lock's own lease.
func (s *Server) renew(w http.ResponseWriter, r *http.Request) {
	q, c, h, res, ok := s.changeLock(w, r, mutex.OpRenew)
	if !ok {
		return
	}
	left := res.Left
	if left == 0 && h.Leased {
		left = h.LeaseLeft // the lease is unchanged
	}
	writeJSON(w, http.StatusOK, &done{Status: "success", Message: "Lock lease renewed successfully", Key: q.Key,
		FencingToken: h.Token, ExpiresAt: s.expiry(c, s.node.Now(), left)})
}

// heartbeat serves POST /api/v1/locks/heartbeat: the client's session is
// opened if needed and kept alive.
func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request) {
	var q heartbeatRequest
	if !s.decode(w, r, &q) {
		return
	}
	switch {
	case q.ClientID == "":
		badRequest(w, "client_id is required")
		return
	case len(q.ClientID) > mutex.MaxSourceLen:
		badRequest(w, "client_id is %d bytes; at most %d are allowed", len(q.ClientID), mutex.MaxSourceLen)
		return
	}
	for try := 0; ; try++ {
		c := s.clientFor(callerOf(r).scope(), q.ClientID)
		switch c.ensure(r.RemoteAddr) {
		case mutex.StatusOK:
			writeJSON(w, http.StatusOK, &done{Status: "success", ClientID: q.ClientID, Session: c.sid,
				TTLMS: s.cfg.SessionTTL.Milliseconds(), ExpiresAt: s.expiry(c, s.node.Now(), 0)})
			return
		case mutex.StatusUnavailable:
			s.notLeader(w)
			return
		}
		if try == sessionTries-1 {
			fail(w, http.StatusServiceUnavailable, failure{Code: codeSessionExpired,
				Message: "the client's session could not be opened"})
			return
		}
	}
}
