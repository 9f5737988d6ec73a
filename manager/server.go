package manager

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/locking-center/locking-center/auth"
	"github.com/locking-center/locking-center/internal/serve"
	"github.com/locking-center/locking-center/mutex"
	"github.com/locking-center/locking-center/store"
)

// DefaultTimeout bounds reading a request and writing a response.
const DefaultTimeout = 10 * time.Second

// ErrClosed: Serve after Close.
var ErrClosed = errors.New("manager: closed")

// Config configures a Server.
type Config struct {
	// Timeout bounds the arrival of a request and the write of its
	// response; a membership command waits for the cluster's leader for
	// half of it, so that a client that waits as long as Timeout hears
	// "no leader answered" rather than its own timeout. Zero means
	// DefaultTimeout (10 s).
	Timeout time.Duration
	// Logger receives the server's logs; nil discards them.
	Logger *slog.Logger
	// TLS, when set, makes the port speak TLS with this config; the
	// handshake is bounded by Timeout too. Nil: plain TCP.
	TLS *tls.Config
	// Tokens, when set, turns authentication on: every request must come
	// in the authenticated form with an admin's token, and one that does
	// not is answered '-' (docs/security.md). Nil: off; a token is then
	// ignored.
	Tokens interface {
		Authenticate(token []byte) (*auth.Principal, error)
	}
	// Gate caps the connections open at once with the other ports that
	// share it; this port is an operator's, and may use the reserve. One
	// over the cap is answered '-'. Nil: no cap.
	Gate *serve.Gate
	// Membership is the cluster of a node of one, for the membership
	// commands; nil on a single node, which refuses them with
	// ErrNotCluster.
	Membership Membership
}

// Membership is a cluster's membership as the management port serves it.
// Each method is bounded by ctx. Errors match ErrNoLeader,
// ErrUnknownMember, ErrMemberExists, ErrBadMember or ErrLastVoter where
// one fits; any other is refused with CodeFailed and its words.
type Membership interface {
	// Members returns the members, sorted by id.
	Members(ctx context.Context) ([]Member, error)
	// AddMember adds m (ID, RaftAddress, ClientAddress, Voter).
	AddMember(ctx context.Context, m Member) error
	// RemoveMember removes the member of id.
	RemoveMember(ctx context.Context, id string) error
	// TransferLeadership hands the leadership to the voter of id, or to
	// the most up-to-date voter when id is "".
	TransferLeadership(ctx context.Context, id string) error
}

// Server answers the management port from a lock table's node.
type Server struct {
	table      *mutex.Node
	timeout    time.Duration
	log        *slog.Logger
	srv        *serve.Server
	membership Membership
	tokens     interface {
		Authenticate(token []byte) (*auth.Principal, error)
	}
}

// NewServer returns a management server for the table of n.
func NewServer(t *mutex.Node, cfg Config) *Server {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	s := &Server{table: t, timeout: cfg.Timeout, log: serve.Discard(cfg.Logger), membership: cfg.Membership, tokens: cfg.Tokens}
	s.srv = serve.NewServer(serve.Worker(s.handle), s.log)
	if cfg.TLS != nil {
		s.srv.UseTLS(cfg.TLS, 0)
	}
	s.srv.Limit(cfg.Gate, true, func(c net.Conn) {
		t.Refused(mutex.RefusedConnections)
		c.Write([]byte{statusFailed})
	})
	return s
}

// Serve accepts connections on ln until ctx ends or Close is called. It
// closes ln on return. Errors: ErrClosed after Close.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	err := s.srv.Serve(ctx, ln)
	if errors.Is(err, serve.ErrClosed) {
		return ErrClosed
	}
	return err
}

// Close stops the listeners, cuts open connections and waits for the
// server's goroutines. It is safe to call more than once.
func (s *Server) Close() error {
	s.srv.Close()
	return nil
}

func (s *Server) handle(c net.Conn) {
	c.SetDeadline(time.Now().Add(s.timeout))
	req, err := readRequest(c)
	if err != nil {
		if errors.Is(err, ErrMalformed) {
			c.Write([]byte{statusFailed})
		}
		return
	}
	if !s.admit(c, req) {
		if givesReasons(req.Cmd) {
			c.Write(appendRefusal(nil, ErrNotAdmin))
		} else {
			c.Write([]byte{statusFailed})
		}
		return
	}
	if isMembership(req.Cmd) {
		// A change waits for the cluster, for at most the timeout; the
		// answer gets a timeout of its own.
		resp := s.member(req)
		c.SetWriteDeadline(time.Now().Add(s.timeout))
		c.Write(resp)
		return
	}
	if req.Cmd == CmdSnapshot {
		s.snapshot(c)
		return
	}
	c.Write(s.respond(req))
}

// snapshot answers CmdSnapshot on c: '+' and a snapshot file of the
// table, copied at one instant; in a cluster only at the leader, once it
// has confirmed that it leads and applied everything committed before.
// Each write of the file gets the timeout anew, so that a large table
// takes as long as its client reads.
func (s *Server) snapshot(c net.Conn) {
	if err := s.table.Linearize(); err != nil {
		refusal := ErrNotLeader
		if l := s.table.Leader(); l != "" {
			refusal = fmt.Errorf("%w; the leader is at %s", ErrNotLeader, l)
		}
		s.log.Info("snapshot refused: this node does not lead its cluster", slog.String("leader", s.table.Leader()))
		c.Write(appendRefusal(nil, refusal))
		return
	}
	t := s.table.Clone()
	w := &deadlineWriter{c: c, timeout: s.timeout}
	if _, err := w.Write([]byte{statusOK}); err != nil {
		return
	}
	n, err := store.WriteSnapshotFile(w, t)
	if err != nil {
		s.log.Info("snapshot not sent whole", slog.String("remote", c.RemoteAddr().String()), slog.Any("error", err))
		return
	}
	s.log.Info("snapshot sent", slog.String("remote", c.RemoteAddr().String()), slog.Int("keys", t.Len()),
		slog.Int64("bytes", n))
}

// deadlineWriter writes to c with a write deadline of timeout from each
// write.
type deadlineWriter struct {
	c       net.Conn
	timeout time.Duration
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	w.c.SetWriteDeadline(time.Now().Add(w.timeout))
	return w.c.Write(p)
}

// member carries out a membership command and returns the whole
// response.
func (s *Server) member(req Request) []byte {
	if s.membership == nil {
		return appendRefusal(nil, fmt.Errorf("%w: lcd runs without NODE_ID", ErrNotCluster))
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout/2) // see Config.Timeout
	defer cancel()
	var err error
	switch req.Cmd {
	case CmdListMembers:
		var ms []Member
		if ms, err = s.membership.Members(ctx); err == nil {
			return appendMembers(nil, ms)
		}
	case CmdAddMember:
		err = s.membership.AddMember(ctx, Member{ID: req.Arg, RaftAddress: req.Raft, ClientAddress: req.Client, Voter: req.Voter})
	case CmdRemoveMember:
		err = s.membership.RemoveMember(ctx, req.Arg)
	case CmdTransferLeadership:
		err = s.membership.TransferLeadership(ctx, req.Arg)
	}
	if err != nil {
		s.log.Info("membership command refused", slog.Int("command", int(req.Cmd)), slog.String("id", req.Arg), slog.Any("error", err))
		return appendRefusal(nil, err)
	}
	s.log.Info("membership changed", slog.Int("command", int(req.Cmd)), slog.String("id", req.Arg))
	return []byte{statusOK}
}

// admit reports whether req may be carried out: without authentication
// always; with it, when it carries an admin's token. A refusal is counted
// and logged with the client's address, never the token.
func (s *Server) admit(c net.Conn, req Request) bool {
	if s.tokens == nil {
		return true
	}
	p, err := s.tokens.Authenticate(req.Token)
	if err != nil {
		s.table.Refused(mutex.RefusedUnauthenticated)
		s.log.Info("management request not authenticated", slog.String("remote", c.RemoteAddr().String()))
		return false
	}
	if !p.Admin() {
		s.table.Refused(mutex.RefusedForbidden)
		s.log.Info("management request by a principal that is not an admin", slog.String("remote", c.RemoteAddr().String()),
			slog.String("principal", p.Name))
		return false
	}
	return true
}

// respond carries out req and returns the whole response. A node of a
// cluster answers a listing only once it has confirmed that it leads and
// applied everything committed before (mutex.Node.Linearize), and a reset
// only as the leader; otherwise it answers '-'.
func (s *Server) respond(req Request) []byte {
	switch req.Cmd {
	case CmdListKeys, CmdListHolders, CmdListHoldersTokens, CmdListHoldersNotes, CmdListSessions:
		if err := s.table.Linearize(); err != nil {
			s.log.Info("listing refused: this node does not lead its cluster", slog.String("leader", s.table.Leader()))
			return []byte{statusFailed}
		}
	}
	switch req.Cmd {
	case CmdListKeys:
		snap := s.table.Snapshot()
		keys := make([]string, 0, len(snap.Holders))
		for i, h := range snap.Holders {
			if i == 0 || snap.Holders[i-1].Key != h.Key {
				keys = append(keys, h.Key)
			}
		}
		return appendKeys(nil, keys)
	case CmdListHolders, CmdListHoldersTokens, CmdListHoldersNotes:
		snap := s.table.Snapshot()
		hs := make([]Holder, len(snap.Holders))
		for i, h := range snap.Holders {
			hs[i] = holderOf(h, snap.Taken)
		}
		return appendHolders(nil, hs, detailOf(req.Cmd))
	case CmdListSessions:
		snap := s.table.Snapshot()
		ss := make([]Session, len(snap.Sessions))
		for i, x := range snap.Sessions {
			ss[i] = Session{ID: x.ID, Name: x.Name, RemoteAddr: x.RemoteAddr, TTL: x.TTL, Idle: x.Idle,
				Held: x.Held, Parked: x.Parked}
		}
		return appendSessions(nil, ss)
	case CmdResetKey, CmdResetSource:
		c := mutex.Command{Op: mutex.OpResetKey, Key: req.Arg}
		what := slog.String("key", req.Arg)
		if req.Cmd == CmdResetSource {
			c = mutex.Command{Op: mutex.OpResetSource, Source: req.Arg}
			what = slog.String("source", req.Arg)
		}
		res, p := s.table.Apply(c)
		if res.Status == mutex.StatusUnavailable {
			s.log.Info("reset refused: this node does not lead its cluster", what, slog.String("leader", s.table.Leader()))
			return []byte{statusFailed}
		}
		s.wait(p)
		s.log.Info("reset "+what.Key, what)
	}
	return []byte{statusOK}
}

// holderOf is h as the management port reports it at now.
func holderOf(h mutex.Holder, now time.Time) Holder {
	out := Holder{Key: h.Key, Source: h.Source, RemoteAddr: h.RemoteAddr, Acquired: h.Acquired,
		Held: h.Held(now), Waiters: h.Waiters, Token: h.Token, Session: h.Session, Lease: -1, Delay: h.Delay,
		Mode: h.Mode, Count: h.Count, Limit: h.Limit, Note: h.Note}
	if h.Leased {
		out.Lease = h.LeaseLeft
	}
	return out
}

func (s *Server) wait(p mutex.Pending) {
	if p == nil {
		return
	}
	if err := p.Wait(); err != nil {
		s.log.Warn("reset not durable", slog.Any("error", err))
	}
}

// readRequest reads one whole request. Errors: ErrMalformed, or the read's.
func readRequest(c net.Conn) (Request, error) {
	var buf [3 + maxToken + maxRequest + 1]byte
	n := 0
	for {
		m, err := c.Read(buf[n:])
		n += m
		req, used, derr := decodeRequest(buf[:n])
		switch {
		case derr == nil && used == n:
			return req, nil
		case derr == nil:
			return Request{}, ErrMalformed
		case !errors.Is(derr, errIncomplete):
			return Request{}, derr
		case err != nil:
			return Request{}, err
		}
	}
}
