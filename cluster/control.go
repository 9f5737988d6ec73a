package cluster

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// controlByte is the first byte of a control connection on the raft port;
// raft's own RPC types are 0 to 4. See doc.go.
const controlByte byte = 0xC1

// maxControl bounds a control message, in bytes.
const maxControl = 64 << 10

// controlTimeout bounds one control exchange that changes nothing (a
// status), from the dial to the answer.
const controlTimeout = 2 * time.Second

// The operations of a control request.
const (
	opStatus   = "status"   // any node: its own state
	opMember   = "member"   // leader: record a member's addresses
	opAdd      = "add"      // leader: add a server to the configuration
	opRemove   = "remove"   // leader: remove a server from it
	opTransfer = "transfer" // leader: hand the leadership over
)

// The codes of a control response that failed; each maps to an error of
// the package.
const (
	codeNotLeader = "not_leader"
	codeUnknown   = "unknown_member"
	codeExists    = "member_exists"
	codeBad       = "bad_request"
	codeLastVoter = "last_voter"
	codeFailed    = "failed"
)

// controlRequest is a control request's JSON.
type controlRequest struct {
	Op     string `json:"op"`
	ID     string `json:"id,omitempty"`
	Raft   string `json:"raft,omitempty"`
	Client string `json:"client,omitempty"`
	HTTP   string `json:"http,omitempty"` // opMember: the HTTP address; lcd before it sends none
	// Batches, of opMember: the node reads batch entries; lcd before
	// them sends none.
	Batches bool `json:"batches,omitempty"`
	Voter   bool `json:"voter,omitempty"`
}

// controlResponse is a control response's JSON: Code and Error when it
// failed (Leader names the leader's id with not_leader, when known);
// Node answers a status; Index and Recorded answer a member request.
type controlResponse struct {
	Code   string      `json:"code,omitempty"`
	Error  string      `json:"error,omitempty"`
	Leader string      `json:"leader,omitempty"`
	Node   *nodeStatus `json:"node,omitempty"`
	// Index is the log position by which the leader's log records the
	// member's addresses: the entry it wrote, or the last it had applied
	// when it held them already.
	Index uint64 `json:"index,omitempty"`
	// Recorded: the leader wrote an entry for the request (it held other
	// addresses or none).
	Recorded bool `json:"recorded,omitempty"`
}

// nodeStatus is what a node answers a status request with.
type nodeStatus struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Term  uint64 `json:"term"`
	// LastContact is how long ago the node last heard from a leader, in
	// nanoseconds: 0 for the leader itself, -1 when it never has.
	LastContact int64  `json:"last_contact"`
	Applied     uint64 `json:"applied"`
	Client      string `json:"client"`
}

// writeMessage writes v as a 4-byte big-endian length and its JSON.
func writeMessage(w io.Writer, prefix []byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	out := binary.BigEndian.AppendUint32(prefix, uint32(len(b)))
	_, err = w.Write(append(out, b...))
	return err
}

// readMessage reads what writeMessage wrote into v.
func readMessage(r io.Reader, v any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxControl {
		return fmt.Errorf("%w: a control message of %d bytes", ErrBadRequest, size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// serveControl answers one control request (its first byte already read).
func (c *Cluster) serveControl(conn net.Conn) {
	conn.SetDeadline(time.Now().Add(firstByteTimeout))
	var req controlRequest
	if err := readMessage(conn, &req); err != nil {
		c.log.Debug("bad control request", slog.String("remote", conn.RemoteAddr().String()), slog.Any(logError, err))
		return
	}
	if c.controlRead != nil {
		c.controlRead()
	}
	// A request that came while Start was starting raft waits for it
	// (restoring a snapshot may take a while); none is answered after a
	// Start that failed.
	select {
	case <-c.started:
	case <-c.quit:
		return
	}
	if c.raft == nil {
		return
	}
	// A change waits for raft; the deadline allows for it.
	conn.SetDeadline(time.Now().Add(c.cfg.ApplyTimeout + firstByteTimeout))
	writeMessage(conn, nil, c.execute(&req))
}

// execute carries out req here and returns its answer.
func (c *Cluster) execute(req *controlRequest) controlResponse {
	if req.Op == opStatus {
		st := c.nodeStatus()
		return controlResponse{Node: &st}
	}
	var err error
	switch req.Op {
	case opMember:
		var r controlResponse
		r.Index, r.Recorded, err = c.recordMember(Peer{ID: req.ID, RaftAddress: req.Raft, ClientAddress: req.Client, HTTPAddress: req.HTTP,
			Batches: req.Batches})
		if err == nil {
			return r
		}
	case opAdd:
		err = c.addMember(Peer{ID: req.ID, RaftAddress: req.Raft, ClientAddress: req.Client}, req.Voter)
	case opRemove:
		err = c.removeMember(req.ID)
	case opTransfer:
		err = c.transfer(req.ID)
	default:
		err = fmt.Errorf("%w: operation %q", ErrBadRequest, req.Op)
	}
	return responseOf(err, c.leaderID())
}

// responseOf is the control response of err.
func responseOf(err error, leader string) controlResponse {
	if err == nil {
		return controlResponse{}
	}
	code := codeFailed
	switch {
	case errors.Is(err, ErrNotLeader):
		code = codeNotLeader
	case errors.Is(err, ErrUnknownMember):
		code = codeUnknown
	case errors.Is(err, ErrMemberExists):
		code = codeExists
	case errors.Is(err, ErrBadRequest):
		code = codeBad
	case errors.Is(err, ErrLastVoter):
		code = codeLastVoter
	}
	r := controlResponse{Code: code, Error: err.Error()}
	if code == codeNotLeader {
		r.Leader = leader
	}
	return r
}

// errorOf is the error of a control response: nil when it succeeded.
func errorOf(r controlResponse) error {
	var sentinel error
	switch r.Code {
	case "":
		return nil
	case codeNotLeader:
		sentinel = ErrNotLeader
	case codeUnknown:
		sentinel = ErrUnknownMember
	case codeExists:
		sentinel = ErrMemberExists
	case codeBad:
		sentinel = ErrBadRequest
	case codeLastVoter:
		sentinel = ErrLastVoter
	default:
		return errors.New(r.Error)
	}
	return &remoteError{sentinel: sentinel, msg: r.Error}
}

// remoteError is an error that another node answered.
type remoteError struct {
	sentinel error
	msg      string
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }

// call sends req to the raft port at addr and returns the answer.
func (c *Cluster) call(ctx context.Context, addr raft.ServerAddress, req controlRequest) (controlResponse, error) {
	dctx, cancel := context.WithTimeout(ctx, controlTimeout)
	conn, err := c.dialRaft(dctx, addr)
	cancel()
	if err != nil {
		return controlResponse{}, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	if err := writeMessage(conn, []byte{controlByte}, req); err != nil {
		return controlResponse{}, err
	}
	var resp controlResponse
	if err := readMessage(conn, &resp); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return controlResponse{}, err
	}
	return resp, nil
}

// leaderRetry is how often atLeader asks again while no leader is known,
// or the one asked no longer leads.
const leaderRetry = 50 * time.Millisecond

// atLeader carries out req at the leader: here when this node leads,
// otherwise at the leader's raft port, following a node that answers that
// it no longer leads, until ctx ends, and returns the leader's answer.
// Errors: ErrNoLeader when no leader answered before ctx ended, or the
// operation's. retrying, unless nil, is called with each error that
// atLeader asks again after.
func (c *Cluster) atLeader(ctx context.Context, req controlRequest, retrying func(error)) (controlResponse, error) {
	var last error
	for {
		addr, id := c.raft.LeaderWithID()
		var resp controlResponse
		var err error
		switch {
		case id == "":
			err = ErrNoLeader
		case string(id) == c.cfg.NodeID:
			resp = c.execute(&req)
			err = errorOf(resp)
		default:
			resp, err = c.call(ctx, addr, req)
			if err == nil {
				err = errorOf(resp)
			} else {
				err = fmt.Errorf("%w: %s: %w", ErrNoLeader, id, err)
			}
		}
		if !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrNoLeader) {
			return resp, err
		}
		last = err
		if retrying != nil {
			retrying(err)
		}
		select {
		case <-ctx.Done():
			return controlResponse{}, last
		case <-c.quit:
			return controlResponse{}, fmt.Errorf("%w: %w", ErrNoLeader, ErrClosed)
		case <-time.After(leaderRetry):
		}
	}
}
