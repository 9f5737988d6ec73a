package manager

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/locking-center/locking-center/mutex"
)

// Command is the first byte of a management request.
type Command byte

// The commands of the management port.
const (
	CmdListKeys          Command = 1
	CmdListHolders       Command = 2
	CmdResetKey          Command = 3
	CmdResetSource       Command = 4
	CmdListHoldersTokens Command = 5 // holders with token, session, lease, lock-delay, mode
	CmdListSessions      Command = 6
	// Cluster membership; a failure is answered '-' with a code and a
	// message (see Refusal).
	CmdListMembers        Command = 7
	CmdAddMember          Command = 8
	CmdRemoveMember       Command = 9
	CmdTransferLeadership Command = 10
	// CmdListHoldersNotes lists what CmdListHoldersTokens does and each
	// holder's note.
	CmdListHoldersNotes Command = 11
	// CmdSnapshot asks for a snapshot file of the whole table; a failure
	// is answered '-' with a code and a message, as the membership
	// commands' (docs/protocol.md, Snapshot).
	CmdSnapshot Command = 12
)

const (
	statusOK     byte = '+'
	statusFailed byte = '-'
	maxString         = 127
	maxAddress        = 255 // a member's address, host:port
	// maxRequest is the longest request: an add member.
	maxRequest = 1 + 1 + maxString + 2*(1+maxAddress) + 1
)

// Errors of the management protocol.
var (
	// ErrMalformed: bytes the management protocol does not allow.
	ErrMalformed = errors.New("manager: malformed message")
	// ErrFailed: the server answered '-'.
	ErrFailed = errors.New("manager: server refused the request")
	// errIncomplete: a valid prefix that needs more bytes.
	errIncomplete = errors.New("manager: incomplete message")
)

// Holder is one holder of a key as the management port reports it. A
// shared key or a semaphore has one Holder per holder.
type Holder struct {
	Key        string
	Source     string
	RemoteAddr string
	Acquired   time.Time     // wall clock of the grant
	Held       time.Duration // how long it has been held, by the server's clock
	Waiters    int           // requests parked for the key

	// Filled by CmdListHoldersTokens only.
	Token   uint64        // fencing token
	Session uint64        // the holding session; 0 for a v1 holder
	Lease   time.Duration // left of the lock's lease; negative when it has none
	Delay   time.Duration // lock-delay the key gets if this lock is lost by expiry
	Mode    mutex.Mode    // exclusive or shared
	Count   uint32        // reentrancy count, at least 1
	Limit   uint32        // the key's limit: 1, or N for a semaphore

	// Filled by CmdListHoldersNotes only.
	Note string // the holder's note, at most mutex.MaxNoteLen bytes; empty: none
}

// Session is one session of the session protocol, as the management port
// reports it.
type Session struct {
	ID         uint64
	Name       string
	RemoteAddr string // of its current connection; empty while none is attached
	TTL        time.Duration
	Idle       time.Duration // since the server last heard from it
	Held       int           // locks it holds
	Parked     int           // requests it has waiting
}

// Request is one decoded management request. Arg is the key of
// CmdResetKey, the source of CmdResetSource, or the node id of the
// membership commands; Raft, Client and Voter are those of CmdAddMember.
// Token, when not empty, came in the authenticated form.
type Request struct {
	Cmd    Command
	Arg    string
	Raft   string
	Client string
	Voter  bool
	Token  []byte
}

// Member is one node of a cluster as the management port reports it.
type Member struct {
	ID            string
	RaftAddress   string
	ClientAddress string // "" when unknown
	Voter         bool   // false: a nonvoter
	Leader        bool   // the leader, as the node asked knows it
	Reachable     bool   // it answered the node asked; State, LastContact and Applied are its own
	State         string // "Leader", "Follower", "Candidate"; "" when unknown
	// LastContact is how long ago it last heard from a leader: 0 for the
	// leader, -1 when unknown.
	LastContact time.Duration
	Applied     uint64 // the last log position it applied; 0 when unknown
}

// Member flags and states on the wire.
const (
	memberVoter     = 1 << 0
	memberLeader    = 1 << 1
	memberReachable = 1 << 2
)

var memberStates = []string{"", "Follower", "Candidate", "Leader"}

// Refusal codes of the membership commands, after '-'.
const (
	CodeNotCluster    byte = 1
	CodeNoLeader      byte = 2
	CodeUnknownMember byte = 3
	CodeMemberExists  byte = 4
	CodeBadMember     byte = 5
	CodeLastVoter     byte = 6
	CodeFailed        byte = 7
	CodeNotAdmin      byte = 8
	CodeNotLeader     byte = 9 // snapshot only
)

// Errors of the membership commands, one per refusal code but CodeFailed.
var (
	ErrNotCluster    = errors.New("manager: not a node of a cluster")
	ErrNoLeader      = errors.New("manager: no leader answered")
	ErrUnknownMember = errors.New("manager: no member of that id")
	ErrMemberExists  = errors.New("manager: the member exists with other settings")
	ErrBadMember     = errors.New("manager: bad node id or address")
	ErrLastVoter     = errors.New("manager: the last voter cannot be removed")
	// ErrNotAdmin: authentication is on, and the request came without an
	// admin's token.
	ErrNotAdmin = errors.New("manager: authentication is on: an admin's token is required")
	// ErrNotLeader: a node of a cluster that does not lead it was asked
	// for a snapshot.
	ErrNotLeader = errors.New("manager: this node does not lead its cluster")
	// ErrNoSnapshots: the server answered a snapshot with '-' alone, as an
	// lcd older than the command does (or one at its cap of connections).
	ErrNoSnapshots = errors.New("manager: the server takes no snapshots (an lcd older than the snapshot command answers '-' alone)")
)

// refusalErrors maps each refusal code to its error.
var refusalErrors = map[byte]error{
	CodeNotCluster: ErrNotCluster, CodeNoLeader: ErrNoLeader, CodeUnknownMember: ErrUnknownMember,
	CodeMemberExists: ErrMemberExists, CodeBadMember: ErrBadMember, CodeLastVoter: ErrLastVoter,
	CodeNotAdmin: ErrNotAdmin, CodeNotLeader: ErrNotLeader,
}

// Refusal is a membership command's '-' with its code and message. It
// matches ErrFailed, and the error of its code.
type Refusal struct {
	Code    byte
	Message string
}

func (r *Refusal) Error() string {
	if r.Message == "" {
		return ErrFailed.Error()
	}
	return r.Message
}

func (r *Refusal) Unwrap() []error {
	if e, ok := refusalErrors[r.Code]; ok {
		return []error{ErrFailed, e}
	}
	return []error{ErrFailed}
}

// codeOf returns the refusal code of err: the code of the error it
// matches, else CodeFailed.
func codeOf(err error) byte {
	for code, e := range refusalErrors {
		if errors.Is(err, e) {
			return code
		}
	}
	return CodeFailed
}

// maxMessage bounds a refusal's message, in bytes.
const maxMessage = 1024

// appendRefusal appends '-', the code of err and its message.
func appendRefusal(b []byte, err error) []byte {
	msg := err.Error()
	if len(msg) > maxMessage {
		msg = msg[:maxMessage]
	}
	b = append(b, statusFailed, codeOf(err))
	b = binary.BigEndian.AppendUint16(b, uint16(len(msg)))
	return append(b, msg...)
}

// decodeRefusal decodes what follows the '-' of a membership command;
// nothing at all is a refusal without a reason.
func decodeRefusal(b []byte) *Refusal {
	if len(b) < 3 {
		return &Refusal{Code: CodeFailed}
	}
	n := int(binary.BigEndian.Uint16(b[1:3]))
	msg := b[3:]
	if n < len(msg) {
		msg = msg[:n]
	}
	return &Refusal{Code: b[0], Message: string(msg)}
}

// isMembership reports whether cmd is one of the membership commands.
func isMembership(cmd Command) bool {
	return cmd >= CmdListMembers && cmd <= CmdTransferLeadership
}

// givesReasons reports whether cmd answers a failure with a code and a
// message after its '-': the membership commands and the snapshot.
func givesReasons(cmd Command) bool {
	return isMembership(cmd) || cmd == CmdSnapshot
}

// authForm is the first byte of a request in the authenticated form:
// [0x80] [n: u16] [token: n bytes] [the request].
const authForm = 0x80

// maxToken bounds the token of the authenticated form.
const maxToken = 1024

// decodeRequest decodes a whole request, in the authenticated form or
// not. Errors: ErrMalformed, errIncomplete.
func decodeRequest(b []byte) (Request, int, error) {
	if len(b) > 0 && b[0] == authForm {
		if len(b) < 3 {
			return Request{}, 0, errIncomplete
		}
		n := int(binary.BigEndian.Uint16(b[1:3]))
		if n == 0 || n > maxToken {
			return Request{}, 0, ErrMalformed
		}
		if len(b) < 3+n {
			return Request{}, 0, errIncomplete
		}
		r, used, err := decodePlain(b[3+n:])
		if err != nil {
			return Request{}, 0, err
		}
		r.Token = b[3 : 3+n]
		return r, 3 + n + used, nil
	}
	return decodePlain(b)
}

// decodePlain decodes a request that is not in the authenticated form.
func decodePlain(b []byte) (Request, int, error) {
	if len(b) == 0 {
		return Request{}, 0, errIncomplete
	}
	r := Request{Cmd: Command(b[0])}
	switch r.Cmd {
	case CmdListKeys, CmdListHolders, CmdListHoldersTokens, CmdListHoldersNotes, CmdListSessions, CmdListMembers,
		CmdSnapshot:
		return r, 1, nil
	case CmdAddMember, CmdRemoveMember, CmdTransferLeadership:
		return decodeMemberRequest(r, b)
	case CmdResetKey, CmdResetSource:
		if len(b) < 2 {
			return Request{}, 0, errIncomplete
		}
		n := int(b[1])
		if n > maxString || n == 0 && r.Cmd == CmdResetKey {
			return Request{}, 0, ErrMalformed
		}
		if len(b) < 2+n {
			return Request{}, 0, errIncomplete
		}
		r.Arg = string(b[2 : 2+n])
		return r, 2 + n, nil
	}
	return Request{}, 0, ErrMalformed
}

// decodeMemberRequest decodes the rest of a request of CmdAddMember,
// CmdRemoveMember or CmdTransferLeadership, whose first byte is b[0].
func decodeMemberRequest(r Request, b []byte) (Request, int, error) {
	off := 1
	// next reads one string of at most limit bytes, at least one unless
	// empty may be.
	next := func(limit int, empty bool) (string, error) {
		if len(b) <= off {
			return "", errIncomplete
		}
		n := int(b[off])
		if n > limit || n == 0 && !empty {
			return "", ErrMalformed
		}
		if len(b) < off+1+n {
			return "", errIncomplete
		}
		v := string(b[off+1 : off+1+n])
		off += 1 + n
		return v, nil
	}
	var err error
	if r.Arg, err = next(maxString, r.Cmd == CmdTransferLeadership); err != nil {
		return Request{}, 0, err
	}
	if r.Cmd != CmdAddMember {
		return r, off, nil
	}
	if r.Raft, err = next(maxAddress, false); err != nil {
		return Request{}, 0, err
	}
	if r.Client, err = next(maxAddress, true); err != nil {
		return Request{}, 0, err
	}
	if len(b) <= off {
		return Request{}, 0, errIncomplete
	}
	switch b[off] {
	case 0, 1:
		r.Voter = b[off] == 1
	default:
		return Request{}, 0, ErrMalformed
	}
	return r, off + 1, nil
}

// appendRequest appends the wire form of r.
func appendRequest(b []byte, r Request) []byte {
	if len(r.Token) > 0 {
		b = append(b, authForm)
		b = binary.BigEndian.AppendUint16(b, uint16(len(r.Token)))
		b = append(b, r.Token...)
	}
	b = append(b, byte(r.Cmd))
	switch r.Cmd {
	case CmdResetKey, CmdResetSource, CmdRemoveMember, CmdTransferLeadership:
		b = appendString(b, r.Arg)
	case CmdAddMember:
		b = appendString(appendString(appendString(b, r.Arg), r.Raft), r.Client)
		voter := byte(0)
		if r.Voter {
			voter = 1
		}
		b = append(b, voter)
	}
	return b
}

// appendMembers appends a '+' and the body of a member list.
func appendMembers(b []byte, ms []Member) []byte {
	b = append(b, statusOK)
	b = binary.BigEndian.AppendUint32(b, uint32(len(ms)))
	for _, m := range ms {
		b = appendString(b, m.ID)
		b = appendString(b, m.RaftAddress)
		b = appendString(b, m.ClientAddress)
		var flags, state byte
		if m.Voter {
			flags |= memberVoter
		}
		if m.Leader {
			flags |= memberLeader
		}
		if m.Reachable {
			flags |= memberReachable
		}
		for i, st := range memberStates {
			if st == m.State {
				state = byte(i)
			}
		}
		b = append(b, flags, state)
		b = binary.BigEndian.AppendUint64(b, uint64(m.LastContact))
		b = binary.BigEndian.AppendUint64(b, m.Applied)
	}
	return b
}

// decodeMembers decodes the body of a member list (after '+').
func decodeMembers(b []byte) ([]Member, error) {
	r := &reader{b: b}
	ms := make([]Member, r.count(3+2+8+8))
	for i := range ms {
		m := &ms[i]
		m.ID, m.RaftAddress, m.ClientAddress = r.string(), r.string(), r.string()
		if fs := r.take(2); fs != nil {
			m.Voter, m.Leader, m.Reachable = fs[0]&memberVoter != 0, fs[0]&memberLeader != 0, fs[0]&memberReachable != 0
			if int(fs[1]) < len(memberStates) {
				m.State = memberStates[fs[1]]
			}
		}
		m.LastContact, m.Applied = time.Duration(r.u64()), r.u64()
	}
	return ms, r.finish()
}

func appendString(b []byte, s string) []byte {
	return append(append(b, byte(len(s))), s...)
}

// appendKeys appends a '+' and the body of a key list.
func appendKeys(b []byte, keys []string) []byte {
	b = append(b, statusOK)
	b = binary.BigEndian.AppendUint32(b, uint32(len(keys)))
	for _, k := range keys {
		b = appendString(b, k)
	}
	return b
}

// holderDetail is how much of a holder a list carries: what
// CmdListHolders, CmdListHoldersTokens or CmdListHoldersNotes reports.
type holderDetail int

const (
	holderPlain holderDetail = iota
	holderTokens
	holderNotes
)

// detailOf returns the detail of a holder list command.
func detailOf(cmd Command) holderDetail {
	switch cmd {
	case CmdListHoldersTokens:
		return holderTokens
	case CmdListHoldersNotes:
		return holderNotes
	}
	return holderPlain
}

// appendHolders appends a '+' and the body of a holder list, with the
// fields of detail.
func appendHolders(b []byte, hs []Holder, detail holderDetail) []byte {
	b = append(b, statusOK)
	b = binary.BigEndian.AppendUint32(b, uint32(len(hs)))
	for _, h := range hs {
		b = appendString(b, h.Key)
		b = appendString(b, h.Source)
		b = appendString(b, h.RemoteAddr)
		b = binary.BigEndian.AppendUint64(b, uint64(h.Acquired.UnixNano()))
		b = binary.BigEndian.AppendUint64(b, uint64(h.Held))
		b = binary.BigEndian.AppendUint32(b, uint32(h.Waiters))
		if detail >= holderTokens {
			b = binary.BigEndian.AppendUint64(b, h.Token)
			b = binary.BigEndian.AppendUint64(b, h.Session)
			b = binary.BigEndian.AppendUint64(b, uint64(h.Lease))
			b = binary.BigEndian.AppendUint64(b, uint64(h.Delay))
			b = append(b, byte(h.Mode))
			b = binary.BigEndian.AppendUint32(b, h.Count)
			b = binary.BigEndian.AppendUint32(b, h.Limit)
		}
		if detail >= holderNotes {
			note := h.Note[:min(len(h.Note), mutex.MaxNoteLen)]
			b = binary.BigEndian.AppendUint16(b, uint16(len(note)))
			b = append(b, note...)
		}
	}
	return b
}

// appendSessions appends a '+' and the body of a session list.
func appendSessions(b []byte, ss []Session) []byte {
	b = append(b, statusOK)
	b = binary.BigEndian.AppendUint32(b, uint32(len(ss)))
	for _, x := range ss {
		b = binary.BigEndian.AppendUint64(b, x.ID)
		b = appendString(b, x.Name)
		b = appendString(b, x.RemoteAddr)
		b = binary.BigEndian.AppendUint64(b, uint64(x.TTL))
		b = binary.BigEndian.AppendUint64(b, uint64(x.Idle))
		b = binary.BigEndian.AppendUint32(b, uint32(x.Held))
		b = binary.BigEndian.AppendUint32(b, uint32(x.Parked))
	}
	return b
}

// reader walks a response body, refusing to read past its end.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil || n > len(r.b) {
		r.err = ErrMalformed
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) string() string {
	n := r.take(1)
	if n == nil {
		return ""
	}
	return string(r.take(int(n[0])))
}

// note reads a u16 length and that many bytes, at most mutex.MaxNoteLen.
func (r *reader) note() string {
	n := r.take(2)
	if n == nil {
		return ""
	}
	l := int(binary.BigEndian.Uint16(n))
	if l > mutex.MaxNoteLen {
		r.err = ErrMalformed
		return ""
	}
	return string(r.take(l))
}

func (r *reader) u32() uint32 {
	if b := r.take(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if b := r.take(8); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

// count reads a list length and checks it against the bytes left, each
// item taking at least minItem bytes, before anything is allocated.
func (r *reader) count(minItem int) int {
	n := int(r.u32())
	if r.err == nil && n > len(r.b)/minItem {
		r.err = ErrMalformed
		return 0
	}
	return n
}

// decodeKeys decodes the body of a key list (after '+').
func decodeKeys(b []byte) ([]string, error) {
	r := &reader{b: b}
	keys := make([]string, r.count(2))
	for i := range keys {
		keys[i] = r.string()
	}
	return keys, r.finish()
}

// decodeHolders decodes the body of a holder list (after '+') with the
// fields of detail.
func decodeHolders(b []byte, detail holderDetail) ([]Holder, error) {
	r := &reader{b: b}
	size := 3 + 8 + 8 + 4
	if detail >= holderTokens {
		size += 8 + 8 + 8 + 8 + 1 + 4 + 4
	}
	if detail >= holderNotes {
		size += 2
	}
	hs := make([]Holder, r.count(size))
	for i := range hs {
		hs[i] = Holder{
			Key:        r.string(),
			Source:     r.string(),
			RemoteAddr: r.string(),
			Acquired:   time.Unix(0, int64(r.u64())),
			Held:       time.Duration(r.u64()),
			Waiters:    int(r.u32()),
			Lease:      -1,
			Count:      1,
			Limit:      1,
		}
		if detail >= holderTokens {
			h := &hs[i]
			h.Token, h.Session = r.u64(), r.u64()
			h.Lease, h.Delay = time.Duration(r.u64()), time.Duration(r.u64())
			if m := r.take(1); m != nil {
				h.Mode = mutex.Mode(m[0])
			}
			h.Count, h.Limit = r.u32(), r.u32()
		}
		if detail >= holderNotes {
			hs[i].Note = r.note()
		}
	}
	return hs, r.finish()
}

// decodeSessions decodes the body of a session list (after '+').
func decodeSessions(b []byte) ([]Session, error) {
	r := &reader{b: b}
	ss := make([]Session, r.count(8+2+8+8+4+4))
	for i := range ss {
		ss[i] = Session{
			ID:         r.u64(),
			Name:       r.string(),
			RemoteAddr: r.string(),
			TTL:        time.Duration(r.u64()),
			Idle:       time.Duration(r.u64()),
			Held:       int(r.u32()),
			Parked:     int(r.u32()),
		}
	}
	return ss, r.finish()
}

func (r *reader) finish() error {
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d bytes after the body", ErrMalformed, len(r.b))
	}
	return r.err
}
