package manager

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// DefaultConnectTimeout bounds a Client's connect unless set otherwise.
const DefaultConnectTimeout = 5 * time.Second

// DefaultReadTimeout bounds a Client's wait for a response unless set
// otherwise.
const DefaultReadTimeout = 10 * time.Second

// maxResponse bounds a response a Client reads, in bytes (a holder list of
// about a million keys).
const maxResponse = 512 << 20

// Client talks to the management port at Addr.
type Client struct {
	Addr string
	// ConnectTimeout bounds the TCP connect, and the TLS handshake with
	// it; zero means DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// TLS, when set, makes the client speak TLS with this config (its
	// ServerName defaults to Addr's host); the handshake is part of the
	// connect. Nil: plain TCP.
	TLS *tls.Config
	// ReadTimeout bounds each request from the end of the connect to the
	// end of the response; zero means DefaultReadTimeout, a negative value
	// no bound beyond the context's. A request that runs out fails with an
	// error that matches os.ErrDeadlineExceeded; a reset may or may not
	// have happened.
	ReadTimeout time.Duration
	// Token, when set, is sent with every request in the authenticated
	// form: an admin's token, for a server with authentication on. At most
	// 1,024 bytes.
	Token string
}

// Keys returns the held keys, sorted by their bytes.
func (c *Client) Keys(ctx context.Context) ([]string, error) {
	body, err := c.call(ctx, "list keys", Request{Cmd: CmdListKeys})
	if err != nil {
		return nil, err
	}
	keys, err := decodeKeys(body)
	if err != nil {
		return nil, fmt.Errorf("list keys at %s: %w", c.Addr, err)
	}
	return keys, nil
}

// Holders returns every holder of every key with its fencing token,
// session, lease, mode and note, sorted by key and token. From a server
// that does not know the command (an older lcd) it returns what the
// newest command that server knows reports: without notes
// (CmdListHoldersTokens), or with zero tokens too (CmdListHolders).
func (c *Client) Holders(ctx context.Context) ([]Holder, error) {
	var body []byte
	var err error
	var detail holderDetail
	for _, cmd := range []Command{CmdListHoldersNotes, CmdListHoldersTokens, CmdListHolders} {
		detail = detailOf(cmd)
		if body, err = c.call(ctx, "list holders", Request{Cmd: cmd}); !errors.Is(err, ErrFailed) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	hs, err := decodeHolders(body, detail)
	if err != nil {
		return nil, fmt.Errorf("list holders at %s: %w", c.Addr, err)
	}
	return hs, nil
}

// Sessions returns the sessions of the session protocol, sorted by id.
func (c *Client) Sessions(ctx context.Context) ([]Session, error) {
	body, err := c.call(ctx, "list sessions", Request{Cmd: CmdListSessions})
	if err != nil {
		return nil, err
	}
	ss, err := decodeSessions(body)
	if err != nil {
		return nil, fmt.Errorf("list sessions at %s: %w", c.Addr, err)
	}
	return ss, nil
}

// ResetKey takes key from its holder; the first waiter gets it.
func (c *Client) ResetKey(ctx context.Context, key string) error {
	if key == "" || len(key) > maxString {
		return fmt.Errorf("reset %q: %w: key must be 1 to 127 bytes", key, ErrMalformed)
	}
	_, err := c.call(ctx, "reset", Request{Cmd: CmdResetKey, Arg: key})
	return err
}

// ResetSource releases every key source holds and withdraws its waiters.
func (c *Client) ResetSource(ctx context.Context, source string) error {
	if len(source) > maxString {
		return fmt.Errorf("reset source %q: %w: source must be at most 127 bytes", source, ErrMalformed)
	}
	_, err := c.call(ctx, "reset source", Request{Cmd: CmdResetSource, Arg: source})
	return err
}

// Members returns the nodes of the cluster, sorted by id, as the node at
// Addr knows them. Errors: a *Refusal (ErrNotCluster on a single node), or
// the connection's.
func (c *Client) Members(ctx context.Context) ([]Member, error) {
	body, err := c.call(ctx, "list members", Request{Cmd: CmdListMembers})
	if err != nil {
		return nil, err
	}
	ms, err := decodeMembers(body)
	if err != nil {
		return nil, fmt.Errorf("list members at %s: %w", c.Addr, err)
	}
	return ms, nil
}

// AddMember adds the node m.ID, whose raft port is at m.RaftAddress, as a
// voter (m.Voter) or a nonvoter; m.ClientAddress may be empty. Errors: a
// *Refusal matching ErrBadMember, ErrMemberExists, ErrNoLeader..., or
// ErrMalformed for an id or address too long to send.
func (c *Client) AddMember(ctx context.Context, m Member) error {
	if err := checkMemberID(m.ID, false); err != nil {
		return err
	}
	if m.RaftAddress == "" || len(m.RaftAddress) > maxAddress || len(m.ClientAddress) > maxAddress {
		return fmt.Errorf("add member %q: %w: a raft address of 1 to %d bytes and a client address of at most %d",
			m.ID, ErrMalformed, maxAddress, maxAddress)
	}
	_, err := c.call(ctx, "add member", Request{Cmd: CmdAddMember, Arg: m.ID, Raft: m.RaftAddress, Client: m.ClientAddress, Voter: m.Voter})
	return err
}

// RemoveMember removes the node of id from the cluster.
func (c *Client) RemoveMember(ctx context.Context, id string) error {
	if err := checkMemberID(id, false); err != nil {
		return err
	}
	_, err := c.call(ctx, "remove member", Request{Cmd: CmdRemoveMember, Arg: id})
	return err
}

// TransferLeadership hands the leadership to the node of id, or to the
// most up-to-date voter when id is "", and returns once it has moved.
func (c *Client) TransferLeadership(ctx context.Context, id string) error {
	if err := checkMemberID(id, true); err != nil {
		return err
	}
	_, err := c.call(ctx, "transfer leadership", Request{Cmd: CmdTransferLeadership, Arg: id})
	return err
}

// checkMemberID refuses an id the wire cannot carry.
func checkMemberID(id string, empty bool) error {
	if len(id) > maxString || id == "" && !empty {
		return fmt.Errorf("node id %q: %w: 1 to %d bytes", id, ErrMalformed, maxString)
	}
	return nil
}

// call sends req and returns the body after '+'.
func (c *Client) call(ctx context.Context, op string, req Request) ([]byte, error) {
	conn, fail, timedOut, stop, err := c.send(ctx, op, req)
	if err != nil {
		return nil, err
	}
	defer stop()
	resp, err := io.ReadAll(io.LimitReader(conn, maxResponse+1))
	if err != nil {
		return fail(timedOut(err))
	}
	switch {
	case len(resp) == 0:
		return fail(fmt.Errorf("the server closed the connection before it answered: %w", io.ErrUnexpectedEOF))
	case len(resp) > maxResponse:
		return fail(errors.New("response too large"))
	case resp[0] == statusFailed && givesReasons(req.Cmd):
		return fail(decodeRefusal(resp[1:]))
	case resp[0] == statusFailed:
		return fail(ErrFailed)
	case resp[0] != statusOK:
		return fail(fmt.Errorf("%w: status %q", ErrMalformed, resp[0]))
	}
	return resp[1:], nil
}

// Snapshot asks for a snapshot of the table (CmdSnapshot) and copies the
// snapshot file the server sends to w, as it arrives; it returns the bytes
// copied. ReadTimeout bounds each read of it rather than the whole, so a
// large table takes as long as it streams. The bytes are not checked
// here: read them back with store.ReadSnapshotFile, which tells a file
// cut short from a whole one. Errors: ErrNoSnapshots from a server that
// answers '-' alone (an older lcd), a *Refusal (ErrNotAdmin,
// ErrNotLeader), w's, or the connection's.
func (c *Client) Snapshot(ctx context.Context, w io.Writer) (int64, error) {
	conn, fail, timedOut, stop, err := c.send(ctx, "snapshot", Request{Cmd: CmdSnapshot})
	if err != nil {
		return 0, err
	}
	defer stop()
	failed := func(err error) (int64, error) {
		_, err = fail(err)
		return 0, err
	}
	r := &deadlineReader{c: conn, timeout: c.readTimeout()}
	var status [1]byte
	if _, err := io.ReadFull(r, status[:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return failed(timedOut(err))
	}
	switch status[0] {
	case statusOK:
	case statusFailed:
		rest, err := io.ReadAll(io.LimitReader(r, 3+maxMessage))
		switch {
		case err != nil:
			return failed(timedOut(err))
		case len(rest) == 0:
			return failed(ErrNoSnapshots)
		}
		return failed(decodeRefusal(rest))
	default:
		return failed(fmt.Errorf("%w: status %q", ErrMalformed, status[0]))
	}
	n, err := io.Copy(w, r)
	if err != nil {
		_, err = fail(timedOut(err))
		return n, err
	}
	return n, nil
}

// deadlineReader reads from c with a read deadline of timeout from each
// read; a timeout of zero or less sets none.
type deadlineReader struct {
	c       net.Conn
	timeout time.Duration
}

func (r *deadlineReader) Read(p []byte) (int, error) {
	if r.timeout > 0 {
		r.c.SetReadDeadline(time.Now().Add(r.timeout))
	}
	return r.c.Read(p)
}

func (c *Client) readTimeout() time.Duration {
	if c.ReadTimeout == 0 {
		return DefaultReadTimeout
	}
	return c.ReadTimeout
}

// send connects, sets the read timeout and writes req. It returns the
// connection, fail (which wraps an error with op, the address and the
// context's end), timedOut (which names the read timeout in a deadline's
// error) and stop, which closes the connection.
func (c *Client) send(ctx context.Context, op string, req Request) (conn net.Conn, fail func(error) ([]byte, error),
	timedOut func(error) error, stop func(), err error) {
	timeout := c.ConnectTimeout
	if timeout == 0 {
		timeout = DefaultConnectTimeout
	}
	fail = func(err error) ([]byte, error) {
		if ctxErr := ctx.Err(); ctxErr != nil {
			err = ctxErr
		}
		return nil, fmt.Errorf("%s at %s: %w", op, c.Addr, err)
	}
	d := &net.Dialer{Timeout: timeout}
	dial := d.DialContext
	if c.TLS != nil {
		dial = (&tls.Dialer{NetDialer: d, Config: c.TLS}).DialContext
	}
	conn, err = dial(ctx, "tcp", c.Addr)
	if err != nil {
		_, err = fail(err)
		return nil, nil, nil, nil, err
	}
	after := context.AfterFunc(ctx, func() { conn.Close() })
	stop = func() {
		after()
		conn.Close()
	}
	readTimeout := c.readTimeout()
	timedOut = func(err error) error {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("no response within %v: %w", readTimeout, err)
		}
		return err
	}
	abort := func(err error) (net.Conn, func(error) ([]byte, error), func(error) error, func(), error) {
		stop()
		_, err = fail(err)
		return nil, nil, nil, nil, err
	}
	if readTimeout > 0 {
		if err := conn.SetDeadline(time.Now().Add(readTimeout)); err != nil {
			return abort(err)
		}
	}
	if len(c.Token) > maxToken {
		return abort(fmt.Errorf("a token over %d bytes", maxToken))
	}
	req.Token = []byte(c.Token)
	if _, err := conn.Write(appendRequest(nil, req)); err != nil {
		return abort(timedOut(err))
	}
	return conn, fail, timedOut, stop, nil
}
