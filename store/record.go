package store

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/klauspost/crc32"
	"github.com/locking-center/locking-center/mutex"
)

// Record layout; see the package documentation.
const (
	// HeaderLen is the size of a record header in bytes.
	HeaderLen = 12
	// MaxPayload bounds the payload of one record, in bytes. The largest
	// command or snapshot record the server makes takes under 2 KiB (a
	// holder's note of 1 KiB is 1,368 bytes of base64).
	MaxPayload = 64 << 10
)

// castagnoli is the CRC32C table, built once.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var b64 = base64.StdEncoding

// Reasons a record fails to decode. Replay decides from where the record
// lies whether such a record is a torn tail or corruption.
var (
	errShort       = errors.New("record runs past the end of the file")
	errLengthSum   = errors.New("length checksum mismatch")
	errLengthRange = errors.New("length out of range")
	errPayloadSum  = errors.New("payload checksum mismatch")
	errPayload     = errors.New("payload is not a record")
)

// Op names of the snapshot records and of the grant of the format before
// commands; commands use mutex.Op's names.
const (
	opState   = "state"
	opSession = "session"
	opKey     = "key"
	opHolder  = "holder"
	opWaiter  = "waiter"
	opGrant   = "grant" // a v1 grant, as logs before fencing tokens wrote it
	opEnd     = "end"   // the last record of a snapshot file
)

// itemKind says what a record holds.
type itemKind uint8

const (
	itemCommand itemKind = iota + 1 // a command to apply
	itemState                       // a record of a snapshot
	itemGrant                       // a v1 grant of the older format
	itemEnd                         // the end of a snapshot file
)

// item is the decoded payload of one record.
type item struct {
	kind itemKind
	cmd  mutex.Command
	rec  mutex.Record
	// Of an end record: the records before it and the CRC32C of their
	// bytes.
	count, sum uint64
}

// --- encoding ---

// enc appends the fields of one JSON object, without reflection. Zero
// values are left out: a reader takes an absent field as zero.
type enc struct{ b []byte }

func (e *enc) open(op string) {
	e.b = append(e.b, `{"op":"`...)
	e.b = append(e.b, op...)
	e.b = append(e.b, '"')
}

func (e *enc) name(n string) {
	e.b = append(e.b, `,"`...)
	e.b = append(e.b, n...)
	e.b = append(e.b, `":`...)
}

func (e *enc) bytes(n, v string) {
	if v == "" {
		return
	}
	e.name(n)
	e.b = append(e.b, '"')
	e.b = b64.AppendEncode(e.b, []byte(v))
	e.b = append(e.b, '"')
}

func (e *enc) int(n string, v int64) {
	if v == 0 {
		return
	}
	e.name(n)
	e.b = strconv.AppendInt(e.b, v, 10)
}

func (e *enc) uint(n string, v uint64) {
	if v == 0 {
		return
	}
	e.name(n)
	e.b = strconv.AppendUint(e.b, v, 10)
}

func (e *enc) bool(n string, v bool) {
	if v {
		e.name(n)
		e.b = append(e.b, "true"...)
	}
}

func (e *enc) time(n string, t time.Time) {
	if !t.IsZero() {
		e.int(n, t.UnixNano())
	}
}

func (e *enc) close() { e.b = append(e.b, '}') }

// appendCommand appends the JSON of c. Every command has its "at".
func appendCommand(b []byte, c *mutex.Command) []byte {
	e := enc{b}
	e.open(c.Op.String())
	e.name("at")
	e.b = strconv.AppendInt(e.b, c.At.UnixNano(), 10)
	e.bytes("key", c.Key)
	e.bytes("src", c.Source)
	e.bytes("acct", c.Account)
	e.bytes("addr", c.RemoteAddr)
	e.uint("sess", c.Session)
	e.uint("req", c.Request)
	e.uint("target", c.Target)
	e.uint("ticket", c.Ticket)
	e.uint("token", c.Token)
	e.uint("floor", c.Floor)
	e.uint("before", c.Before)
	e.bool("try", c.Try)
	e.bool("lapse", c.Lapse)
	e.int("wait", int64(c.Wait))
	e.int("lease", int64(c.Lease))
	e.int("delay", int64(c.Delay))
	e.int("ttl", int64(c.TTL))
	e.int("mode", int64(c.Mode))
	e.uint("limit", uint64(c.Limit))
	e.int("prio", int64(c.Priority))
	e.bool("reent", c.Reentrant)
	e.bytes("owner", c.Owner)
	e.bytes("note", c.Note)
	e.bool("conn", c.ConnBound)
	e.uint("maxh", uint64(c.MaxHeld))
	e.uint("maxp", uint64(c.MaxParked))
	if c.SecretHash != ([mutex.SecretHashLen]byte{}) {
		e.bytes("secret", string(c.SecretHash[:]))
	}
	e.close()
	return e.b
}

// appendState appends the JSON of r, a record of a snapshot.
func appendState(b []byte, r *mutex.Record) []byte {
	e := enc{b}
	switch r.Kind {
	case mutex.RecordState:
		e.open(opState)
		e.uint("token", r.LastToken)
		e.uint("ticket", r.LastTicket)
		e.uint("sessions", r.LastSession)
	case mutex.RecordSession:
		e.open(opSession)
		e.uint("sess", r.Session)
		e.bytes("name", r.Name)
		e.bytes("acct", r.Account)
		e.int("ttl", int64(r.TTL))
		e.bytes("secret", string(r.SecretHash[:]))
		e.time("opened", r.Opened)
		e.uint("applied", r.Applied)
	case mutex.RecordKey:
		e.open(opKey)
		e.bytes("key", r.Key)
		e.uint("limit", uint64(r.Limit))
		e.time("delay_at", r.DelayAt)
		e.int("delay", int64(r.DelayFor))
	case mutex.RecordHolder:
		e.open(opHolder)
		e.bytes("key", r.Key)
		e.uint("token", r.Token)
		e.bytes("src", r.Source)
		e.bytes("acct", r.Account)
		e.bytes("addr", r.RemoteAddr)
		e.time("at", r.Acquired)
		e.uint("sess", r.Session)
		e.uint("req", r.Request)
		e.int("mode", int64(r.Mode))
		if r.Count > 1 {
			e.uint("count", uint64(r.Count))
		}
		e.bytes("owner", r.Owner)
		e.bytes("note", r.Note)
		e.int("lease", int64(r.LeaseFor))
		e.time("lease_at", r.LeaseAt)
		e.int("delay", int64(r.DelayFor))
	case mutex.RecordWaiter:
		e.open(opWaiter)
		e.bytes("key", r.Key)
		e.uint("ticket", r.Ticket)
		e.bytes("src", r.Source)
		e.bytes("acct", r.Account)
		e.bytes("addr", r.RemoteAddr)
		e.time("at", r.QueuedAt)
		e.uint("sess", r.Session)
		e.uint("req", r.Request)
		e.int("mode", int64(r.Mode))
		e.uint("limit", uint64(r.Limit))
		e.bytes("owner", r.Owner)
		e.bytes("note", r.Note)
		e.int("lease", int64(r.LeaseFor))
		e.int("delay", int64(r.DelayFor))
		e.int("prio", int64(r.Priority))
		e.bool("reent", r.Reentrant)
		e.bool("conn", r.ConnBound)
		e.time("wait_at", r.WaitAt)
	}
	e.close()
	return e.b
}

// frame appends a record header for the payload that payload appends,
// and the payload; it returns the extended slice.
func frame(b []byte, payload func([]byte) []byte) []byte {
	start := len(b)
	b = append(b, make([]byte, HeaderLen)...)
	b = payload(b)
	p := b[start+HeaderLen:]
	h := b[start : start+HeaderLen]
	binary.LittleEndian.PutUint32(h[0:4], uint32(len(p)))
	binary.LittleEndian.PutUint32(h[4:8], crc32.Checksum(h[0:4], castagnoli))
	binary.LittleEndian.PutUint32(h[8:12], crc32.Checksum(p, castagnoli))
	return b
}

// appendRecord appends the record of c to b.
func appendRecord(b []byte, c *mutex.Command) []byte {
	return frame(b, func(b []byte) []byte { return appendCommand(b, c) })
}

// appendStateRecord appends the record of r, a piece of a snapshot, to b.
func appendStateRecord(b []byte, r *mutex.Record) []byte {
	return frame(b, func(b []byte) []byte { return appendState(b, r) })
}

// parseHeader checks the header at the start of b (at least HeaderLen
// bytes) and returns the payload length and checksum. Errors:
// errLengthSum, errLengthRange.
func parseHeader(b []byte) (n int, sum uint32, err error) {
	if crc32.Checksum(b[0:4], castagnoli) != binary.LittleEndian.Uint32(b[4:8]) {
		return 0, 0, errLengthSum
	}
	u := binary.LittleEndian.Uint32(b[0:4])
	if u == 0 || u > MaxPayload {
		return 0, 0, fmt.Errorf("%w: %d bytes", errLengthRange, u)
	}
	return int(u), binary.LittleEndian.Uint32(b[8:12]), nil
}

// --- decoding ---

// scalars is every field of a payload that is a number or a boolean, as
// both decoders read it.
type scalars struct {
	Sess     uint64 `json:"sess"`
	Req      uint64 `json:"req"`
	Target   uint64 `json:"target"`
	Ticket   uint64 `json:"ticket"`
	Token    uint64 `json:"token"`
	Floor    uint64 `json:"floor"`
	MaxH     uint64 `json:"maxh"`
	MaxP     uint64 `json:"maxp"`
	Before   uint64 `json:"before"`
	Count    uint64 `json:"count"`
	Limit    uint64 `json:"limit"`
	Applied  uint64 `json:"applied"`
	Sessions uint64 `json:"sessions"`
	Sum      uint64 `json:"sum"`
	Try      bool   `json:"try"`
	Reent    bool   `json:"reent"`
	Conn     bool   `json:"conn"`
	Lapse    bool   `json:"lapse"`
	Wait     int64  `json:"wait"`
	Lease    int64  `json:"lease"`
	Delay    int64  `json:"delay"`
	TTL      int64  `json:"ttl"`
	Mode     int64  `json:"mode"`
	Prio     int64  `json:"prio"`
	Opened   int64  `json:"opened"`
	LeaseAt  int64  `json:"lease_at"`
	DelayAt  int64  `json:"delay_at"`
	WaitAt   int64  `json:"wait_at"`
}

// fields is every field a payload may have, decoded. The strings are the
// decoded base64; HasAt says whether the payload has "at".
type fields struct {
	Op                                  string
	At                                  int64
	HasAt                               bool
	Key, Src, Addr, Owner, Name, Secret string
	Acct, Note                          string
	scalars
}

// fieldsJSON is a payload's shape for encoding/json, which decodes the
// base64 of []byte fields.
type fieldsJSON struct {
	Op     string `json:"op"`
	At     *int64 `json:"at"`
	Key    []byte `json:"key"`
	Src    []byte `json:"src"`
	Addr   []byte `json:"addr"`
	Owner  []byte `json:"owner"`
	Name   []byte `json:"name"`
	Secret []byte `json:"secret"`
	Acct   []byte `json:"acct"`
	Note   []byte `json:"note"`
	scalars
}

// fields returns what j holds.
func (j *fieldsJSON) fields() fields {
	f := fields{Op: j.Op, Key: string(j.Key), Src: string(j.Src), Addr: string(j.Addr), Owner: string(j.Owner),
		Name: string(j.Name), Secret: string(j.Secret), Acct: string(j.Acct), Note: string(j.Note), scalars: j.scalars}
	if j.At != nil {
		f.At, f.HasAt = *j.At, true
	}
	return f
}

// decodePayload checks p against sum and decodes the item it holds.
// Errors: errPayloadSum, errPayload.
func decodePayload(p []byte, sum uint32) (item, error) {
	if crc32.Checksum(p, castagnoli) != sum {
		return item{}, errPayloadSum
	}
	f, ok := scanFlat(p)
	if !ok {
		var j fieldsJSON
		if err := json.Unmarshal(p, &j); err != nil {
			return item{}, fmt.Errorf("%w: %w", errPayload, err)
		}
		f = j.fields()
	}
	return f.item()
}

// item checks f and builds the item it describes. Errors: errPayload.
func (f *fields) item() (item, error) {
	bad := func(why string) (item, error) { return item{}, fmt.Errorf("%w: %s", errPayload, why) }
	if f.Mode < 0 || f.Mode > int64(mutex.Shared) || f.Limit > math.MaxUint32 || f.Count > math.MaxUint32 ||
		f.MaxH > math.MaxUint32 || f.MaxP > math.MaxUint32 ||
		f.Prio < math.MinInt32 || f.Prio > math.MaxInt32 {
		return bad("a field is out of range")
	}
	if len(f.Secret) != 0 && len(f.Secret) != mutex.SecretHashLen {
		return bad("a secret of the wrong size")
	}
	at := func(n int64) time.Time {
		if n == 0 {
			return time.Time{}
		}
		return time.Unix(0, n)
	}
	switch f.Op {
	case opEnd:
		if f.Sum > math.MaxUint32 {
			return bad("a checksum out of range")
		}
		return item{kind: itemEnd, count: f.Count, sum: f.Sum}, nil
	case opGrant:
		if len(f.Key) == 0 {
			return bad("empty key")
		}
		if !f.HasAt {
			return bad("grant without a time")
		}
		return item{kind: itemGrant, rec: mutex.Record{Key: f.Key, Source: f.Src,
			RemoteAddr: f.Addr, Acquired: time.Unix(0, f.At)}}, nil
	case opState, opSession, opKey, opHolder, opWaiter:
		var r mutex.Record
		switch f.Op {
		case opState:
			r = mutex.Record{Kind: mutex.RecordState, LastToken: f.Token, LastTicket: f.Ticket, LastSession: f.Sessions}
		case opSession:
			if f.Sess == 0 {
				return bad("a session without an id")
			}
			r = mutex.Record{Kind: mutex.RecordSession, Session: f.Sess, Name: f.Name, Account: f.Acct,
				TTL: time.Duration(f.TTL), Opened: at(f.Opened), Applied: f.Applied}
			copy(r.SecretHash[:], f.Secret)
		case opKey:
			r = mutex.Record{Kind: mutex.RecordKey, Key: f.Key, Limit: uint32(f.Limit),
				DelayAt: at(f.DelayAt), DelayFor: time.Duration(f.Delay)}
		case opHolder:
			if f.Token == 0 {
				return bad("a holder without a token")
			}
			r = mutex.Record{Kind: mutex.RecordHolder, Key: f.Key, Token: f.Token, Source: f.Src,
				Account:    f.Acct,
				RemoteAddr: f.Addr, Acquired: at(f.At), Session: f.Sess, Request: f.Req,
				Mode: mutex.Mode(f.Mode), Count: uint32(max(f.Count, 1)), Owner: f.Owner, Note: f.Note,
				LeaseFor: time.Duration(f.Lease), LeaseAt: at(f.LeaseAt), DelayFor: time.Duration(f.Delay)}
		case opWaiter:
			if f.Ticket == 0 {
				return bad("a waiter without a ticket")
			}
			r = mutex.Record{Kind: mutex.RecordWaiter, Key: f.Key, Ticket: f.Ticket, Source: f.Src,
				Account:    f.Acct,
				RemoteAddr: f.Addr, QueuedAt: at(f.At), Session: f.Sess, Request: f.Req,
				Mode: mutex.Mode(f.Mode), Limit: uint32(f.Limit), Owner: f.Owner, Note: f.Note,
				LeaseFor: time.Duration(f.Lease), DelayFor: time.Duration(f.Delay), Priority: int32(f.Prio),
				Reentrant: f.Reent, ConnBound: f.Conn, WaitAt: at(f.WaitAt)}
		}
		if r.Kind != mutex.RecordState && r.Kind != mutex.RecordSession && len(f.Key) == 0 {
			return bad("empty key")
		}
		return item{kind: itemState, rec: r}, nil
	}
	op, ok := mutex.ParseOp(f.Op)
	if !ok {
		return bad(fmt.Sprintf("unknown op %q", f.Op))
	}
	if !f.HasAt && op != mutex.OpRelease { // a release of a log written before commands had times takes 0
		return bad("a command without a time")
	}
	c := mutex.Command{Op: op, At: time.Unix(0, f.At), Key: f.Key, Source: f.Src,
		RemoteAddr: f.Addr, Session: f.Sess, Request: f.Req, Target: f.Target, Ticket: f.Ticket,
		Token: f.Token, Floor: f.Floor, Before: f.Before, Try: f.Try, Lapse: f.Lapse, Wait: time.Duration(f.Wait), Lease: time.Duration(f.Lease),
		Delay: time.Duration(f.Delay), TTL: time.Duration(f.TTL), Mode: mutex.Mode(f.Mode),
		Limit: uint32(f.Limit), Priority: int32(f.Prio), Reentrant: f.Reent, Owner: f.Owner, Note: f.Note,
		ConnBound: f.Conn, Account: f.Acct, MaxHeld: uint32(f.MaxH), MaxParked: uint32(f.MaxP)}
	copy(c.SecretHash[:], f.Secret)
	switch op {
	case mutex.OpAcquire, mutex.OpRelease, mutex.OpRenew, mutex.OpRevoke, mutex.OpResetKey:
		if len(f.Key) == 0 {
			return bad("empty key")
		}
	}
	return item{kind: itemCommand, cmd: c}, nil
}

// scanFlat decodes a payload in exactly the form the encoders write: one
// flat object, no spaces, strings only in base64, integers in strconv's
// form, booleans only true. It needs no reflection and makes one
// allocation for all the strings of a payload (a payload whose strings
// decode to more than scratchLen bytes, two). ok is false for any other
// form, which encoding/json then reads; for a payload it accepts it
// returns what encoding/json would.
func scanFlat(p []byte) (f fields, ok bool) {
	if len(p) < 2 || p[0] != '{' || p[len(p)-1] != '}' {
		return fields{}, false
	}
	var raw [numStrings][]byte // the base64 of each string field, within p
	rest := p[1 : len(p)-1]
	seen := uint64(0)
	for len(rest) > 0 {
		if rest[0] != '"' {
			return fields{}, false
		}
		end := bytes.IndexByte(rest[1:], '"')
		if end < 0 || len(rest) < end+3 || rest[end+2] != ':' {
			return fields{}, false
		}
		name := rest[1 : end+1]
		rest = rest[end+3:]
		var val []byte
		if i := bytes.IndexByte(rest, ','); i >= 0 {
			val, rest = rest[:i], rest[i+1:]
			if len(rest) == 0 {
				return fields{}, false
			}
		} else {
			val, rest = rest, nil
		}
		bit, ok := fieldBit[string(name)]
		if !ok || seen&bit != 0 {
			return fields{}, false // a field we do not write, or twice: let encoding/json judge
		}
		seen |= bit
		if !f.set(string(name), val, &raw) {
			return fields{}, false
		}
	}
	return f, f.Op != "" && f.setStrings(&raw)
}

// The string fields of a payload, by their index in scanFlat's raw.
const (
	strKey = iota
	strSrc
	strAddr
	strOwner
	strName
	strSecret
	strAcct
	strNote
	numStrings
)

// scratchLen bounds the decoded strings of a payload that setStrings
// decodes on the stack, in bytes.
const scratchLen = 512

// setStrings decodes the base64 of raw, the string fields as scanFlat
// found them, into f's strings: the bytes of all of them go to one
// string, of which each field is a part. false when one is not base64.
func (f *fields) setStrings(raw *[numStrings][]byte) bool {
	n := 0
	for _, r := range raw {
		n += b64.DecodedLen(len(r))
	}
	if n == 0 {
		return true
	}
	var scratch [scratchLen]byte
	buf := scratch[:0]
	if n > scratchLen {
		buf = make([]byte, 0, n)
	}
	var ends [numStrings]int
	for i, r := range raw {
		var err error
		if buf, err = b64.AppendDecode(buf, r); err != nil {
			return false
		}
		ends[i] = len(buf)
	}
	all := string(buf)
	part := func(i int) string {
		start := 0
		if i > 0 {
			start = ends[i-1]
		}
		return all[start:ends[i]]
	}
	f.Key, f.Src, f.Addr, f.Owner = part(strKey), part(strSrc), part(strAddr), part(strOwner)
	f.Name, f.Secret, f.Acct, f.Note = part(strName), part(strSecret), part(strAcct), part(strNote)
	return true
}

var fieldBit = func() map[string]uint64 {
	names := []string{"op", "at", "key", "src", "addr", "owner", "name", "secret", "sess", "req", "target",
		"ticket", "token", "floor", "count", "limit", "applied", "sessions", "try", "reent", "conn", "wait", "lease",
		"delay", "ttl", "mode", "prio", "opened", "lease_at", "delay_at", "wait_at", "acct", "maxh", "maxp", "before", "note", "lapse", "sum"}
	m := make(map[string]uint64, len(names))
	for i, n := range names {
		m[n] = 1 << i
	}
	return m
}()

// opName returns b, an op's name, as a string: the constant of an op the
// encoders write, so that decoding one copies nothing.
func opName(b []byte) string {
	if op, ok := mutex.ParseOp(string(b)); ok {
		return op.String()
	}
	for _, n := range [...]string{opState, opSession, opKey, opHolder, opWaiter, opGrant, opEnd} {
		if string(b) == n {
			return n
		}
	}
	return string(b)
}

// plain reports whether b holds no quote, backslash, CR or LF: JSON
// escapes, or bytes that base64's decoder would skip.
func plain(b []byte) bool {
	for _, c := range b {
		if c == '"' || c == '\\' || c == '\r' || c == '\n' {
			return false
		}
	}
	return true
}

// set stores the raw value v of the field name, a string field's base64
// in raw; false when v is not in the encoders' form.
func (f *fields) set(name string, v []byte, raw *[numStrings][]byte) bool {
	str := func(i int) bool {
		if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
			return false
		}
		inner := v[1 : len(v)-1]
		if !plain(inner) {
			return false
		}
		raw[i] = inner
		return true
	}
	sint := func(dst *int64) bool {
		n, ok := parseInt(v)
		*dst = n
		return ok
	}
	uint := func(dst *uint64) bool {
		if len(v) > 0 && v[0] == '-' {
			return false
		}
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil || len(v) > 1 && v[0] == '0' {
			return false
		}
		*dst = n
		return true
	}
	boolean := func(dst *bool) bool {
		*dst = true
		return string(v) == "true"
	}
	switch name {
	case "op":
		if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' || !plain(v[1:len(v)-1]) {
			return false
		}
		f.Op = opName(v[1 : len(v)-1])
		return true
	case "at":
		f.HasAt = true
		return sint(&f.At)
	case "key":
		return str(strKey)
	case "src":
		return str(strSrc)
	case "acct":
		return str(strAcct)
	case "maxh":
		return uint(&f.MaxH)
	case "maxp":
		return uint(&f.MaxP)
	case "addr":
		return str(strAddr)
	case "owner":
		return str(strOwner)
	case "note":
		return str(strNote)
	case "name":
		return str(strName)
	case "secret":
		return str(strSecret)
	case "sess":
		return uint(&f.Sess)
	case "req":
		return uint(&f.Req)
	case "target":
		return uint(&f.Target)
	case "ticket":
		return uint(&f.Ticket)
	case "token":
		return uint(&f.Token)
	case "floor":
		return uint(&f.Floor)
	case "before":
		return uint(&f.Before)
	case "count":
		return uint(&f.Count)
	case "limit":
		return uint(&f.Limit)
	case "applied":
		return uint(&f.Applied)
	case "sessions":
		return uint(&f.Sessions)
	case "sum":
		return uint(&f.Sum)
	case "try":
		return boolean(&f.Try)
	case "reent":
		return boolean(&f.Reent)
	case "conn":
		return boolean(&f.Conn)
	case "lapse":
		return boolean(&f.Lapse)
	case "wait":
		return sint(&f.Wait)
	case "lease":
		return sint(&f.Lease)
	case "delay":
		return sint(&f.Delay)
	case "ttl":
		return sint(&f.TTL)
	case "mode":
		return sint(&f.Mode)
	case "prio":
		return sint(&f.Prio)
	case "opened":
		return sint(&f.Opened)
	case "lease_at":
		return sint(&f.LeaseAt)
	case "delay_at":
		return sint(&f.DelayAt)
	case "wait_at":
		return sint(&f.WaitAt)
	}
	return false
}

// parseInt parses a decimal int64 with an optional minus sign, as
// strconv.AppendInt writes it: no plus sign, no leading zeros.
func parseInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 || len(b) > 1 && b[0] == '0' {
		return 0, false
	}
	var v uint64
	for _, d := range b {
		if d < '0' || d > '9' {
			return 0, false
		}
		v = v*10 + uint64(d-'0')
	}
	if v > math.MaxInt64 && !(neg && v == math.MaxInt64+1) {
		return 0, false
	}
	if neg {
		return -int64(v), true
	}
	return int64(v), true
}

// decodeRecord decodes the record at the start of b and returns its item
// and its size in bytes. Errors: errShort when b ends before the record
// does, or a reason from parseHeader or decodePayload.
func decodeRecord(b []byte) (item, int, error) {
	if len(b) < HeaderLen {
		return item{}, 0, errShort
	}
	n, sum, err := parseHeader(b)
	if err != nil {
		return item{}, 0, err
	}
	if len(b)-HeaderLen < n {
		return item{}, 0, errShort
	}
	it, err := decodePayload(b[HeaderLen:HeaderLen+n], sum)
	if err != nil {
		return item{}, 0, err
	}
	return it, HeaderLen + n, nil
}
