package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/locking-center/locking-center/session"
)

// sessClient is a session-protocol client for the cluster tests: one
// request at a time, and when a node sends it away (GOODBYE not_leader) or
// goes, it resumes its session at the leader, or at the next node.
type sessClient struct {
	name string
	// nodes returns the mutex ports of the nodes as they are now (a
	// restarted node comes back on a new port), as a name that resolves
	// to every node would.
	nodes  func() []string
	at     int    // index into nodes() of the node tried last
	leader string // the leader a GOODBYE named, "" when none

	conn   net.Conn
	buf    []byte
	id     uint64
	secret []byte
	next   uint64 // last request id used

	// What the last WELCOME after a RESUME said.
	applied uint64
	held    map[uint64]uint64 // request id -> token
	parked  map[uint64]bool
}

var errSessionLost = errors.New("the session was lost")

// sessTTL is the TTL a sessClient asks for. It sends nothing while it
// waits for a key, so the TTL must outlast the longest wait: behind a v1
// client that watches an unanswered grant settle (v1Settle), a failover,
// and the other clients of the key.
const sessTTL = 60 * time.Second

// frame encodes a frame of type ty answering id with fields.
func frame(ty session.Type, id uint64, fields ...[]byte) []byte {
	b := []byte{0, 0, 0, 0, byte(ty)}
	b = binary.BigEndian.AppendUint64(b, id)
	for _, f := range fields {
		b = append(b, f...)
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

func field(tag session.Tag, v []byte) []byte {
	b := []byte{byte(tag)}
	b = binary.BigEndian.AppendUint16(b, uint16(len(v)))
	return append(b, v...)
}

func u32Field(tag session.Tag, v uint32) []byte {
	return field(tag, binary.BigEndian.AppendUint32(nil, v))
}

func u64Field(tag session.Tag, v uint64) []byte {
	return field(tag, binary.BigEndian.AppendUint64(nil, v))
}

// read returns the next frame from the connection.
func (s *sessClient) read() (session.Frame, error) {
	for {
		var f session.Frame
		if n, err := session.ParseFrame(s.buf, &f); err == nil {
			// The fields alias buf: copy the frame out.
			raw := slices.Clone(s.buf[:n])
			s.buf = s.buf[n:]
			session.ParseFrame(raw, &f)
			return f, nil
		} else if errors.Is(err, session.ErrProtocol) {
			return session.Frame{}, err
		}
		tmp := make([]byte, 4096)
		n, err := s.conn.Read(tmp)
		s.buf = append(s.buf, tmp[:n]...)
		if n == 0 && err != nil {
			return session.Frame{}, err
		}
	}
}

// dial connects to addr and opens or resumes the session. It returns
// whether the node took it; false with nil means it was sent elsewhere,
// or could not be reached.
func (s *sessClient) dial(addr string) (bool, error) {
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false, nil
	}
	s.conn, s.buf = c, nil
	c.SetDeadline(time.Now().Add(10 * time.Second))
	var hello []byte
	if s.id == 0 {
		hello = frame(session.TypeHello, 0, field(session.TagName, []byte(s.name)), u32Field(session.TagTTL, uint32(sessTTL.Milliseconds())))
	} else {
		hello = frame(session.TypeResume, 0, u64Field(session.TagSession, s.id), field(session.TagSecret, s.secret))
	}
	if _, err := c.Write(append([]byte(session.Preface), hello...)); err != nil {
		return false, nil
	}
	f, err := s.read()
	if err != nil {
		return false, nil
	}
	c.SetDeadline(time.Time{})
	switch f.Type {
	case session.TypeWelcome:
		id, _ := f.Uint(session.TagSession)
		secret, _ := f.Get(session.TagSecret)
		s.id, s.secret = id, slices.Clone(secret)
		s.applied, _ = f.Uint(session.TagApplied)
		s.held, s.parked = map[uint64]uint64{}, map[uint64]bool{}
		for _, h := range f.All(session.TagHeld) {
			var item session.Frame
			if fs := listFields(h); fs != nil {
				item.Fields = fs
				req, _ := item.Uint(session.TagRequest)
				tok, _ := item.Uint(session.TagToken)
				s.held[req] = tok
			}
		}
		for _, p := range f.All(session.TagParked) {
			var item session.Frame
			item.Fields = listFields(p)
			req, _ := item.Uint(session.TagRequest)
			s.parked[req] = true
		}
		return true, nil
	case session.TypeGoodbye:
		code, _ := f.Uint(session.TagCode)
		switch session.Code(code) {
		case session.CodeNotLeader:
			l, _ := f.Get(session.TagLeader)
			s.leader = string(l)
			return false, nil
		case session.CodeUnknownSession, session.CodeSessionExpired:
			return false, errSessionLost
		}
		return false, nil
	}
	return false, fmt.Errorf("first answer %#x", f.Type)
}

// listFields decodes the fields of a list item.
func listFields(v []byte) []session.Field {
	var out []session.Field
	for len(v) >= 3 {
		n := int(binary.BigEndian.Uint16(v[1:3]))
		if 3+n > len(v) {
			return out
		}
		out = append(out, session.Field{Tag: session.Tag(v[0]), Value: v[3 : 3+n]})
		v = v[3+n:]
	}
	return out
}

// connect reaches the leader, following GOODBYE not_leader, for at most d.
// It tries the leader a node named, else the next node.
func (s *sessClient) connect(d time.Duration) error {
	deadline := time.Now().Add(d)
	var tried []string
	for time.Now().Before(deadline) {
		addr := s.leader
		if addr == "" {
			nodes := s.nodes()
			s.at = (s.at + 1) % len(nodes)
			addr = nodes[s.at]
		}
		s.leader = ""
		ok, err := s.dial(addr)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if len(tried) == 10 {
			tried = tried[1:]
		}
		tried = append(tried, addr+" (named "+strconv.Quote(s.leader)+")")
		if s.leader == "" || s.leader == addr {
			s.leader = ""
			time.Sleep(pollEvery)
		}
	}
	return fmt.Errorf("%s: no leader took the session within %v (nodes now %v; tried last %v)", s.name, d, s.nodes(), tried)
}

// outcome is what became of one request.
type outcome struct {
	f        session.Frame // the answer, when one came
	answered bool
	// After a resume without the answer: applied tells the request took
	// effect; token is its grant when the session holds it.
	applied bool
	token   uint64
}

// call sends a request and waits for its answer; when the connection
// ends first, it resumes the session and says from the WELCOME what became
// of the request, resending it when it had not been applied (an acquire
// still parked is waited for again).
func (s *sessClient) call(ty session.Type, fields ...[]byte) (outcome, error) {
	s.next++
	id := s.next
	send := true
	for {
		if send {
			if s.conn == nil {
				if err := s.connect(30 * time.Second); err != nil {
					return outcome{}, err
				}
			}
			if _, err := s.conn.Write(frame(ty, id, fields...)); err != nil {
				s.conn.Close()
				s.conn = nil
				continue
			}
			send = false
		}
		f, err := s.read()
		if err == nil && f.Type != session.TypeGoodbye {
			if f.ID == id && f.Type != session.TypeWelcome {
				return outcome{f: f, answered: true}, nil
			}
			continue // an answer to an earlier request, or a late grant
		}
		if err == nil {
			code, _ := f.Uint(session.TagCode)
			if session.Code(code) == session.CodeNotLeader {
				l, _ := f.Get(session.TagLeader)
				s.leader = string(l)
			} else if session.Code(code) == session.CodeSessionExpired {
				return outcome{}, errSessionLost
			}
		}
		s.conn.Close()
		s.conn = nil
		if err := s.connect(30 * time.Second); err != nil {
			return outcome{}, err
		}
		switch {
		case s.held[id] != 0:
			return outcome{applied: true, token: s.held[id]}, nil
		case s.parked[id]:
			// Still waiting: its GRANTED comes on this connection.
		case id <= s.applied:
			return outcome{applied: true}, nil
		default:
			send = true
		}
	}
}

func (s *sessClient) close() {
	if s.conn != nil {
		s.conn.Close()
	}
}
