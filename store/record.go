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
	// MaxPayload bounds the payload of one record, in bytes. A grant with
	// the longest key, source and remote address the server accepts takes
	// well under 1 KiB.
	MaxPayload = 64 << 10
)

// JSON op names of the payload.
const (
	opGrant   = "grant"
	opRelease = "release"
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
	errPayload     = errors.New("payload is not a change")
)

// appendRecord appends the record of c to b and returns the extended slice.
func appendRecord(b []byte, c mutex.Change) []byte {
	start := len(b)
	b = append(b, make([]byte, HeaderLen)...)
	b = appendPayload(b, c)
	payload := b[start+HeaderLen:]
	h := b[start : start+HeaderLen]
	binary.LittleEndian.PutUint32(h[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint32(h[4:8], crc32.Checksum(h[0:4], castagnoli))
	binary.LittleEndian.PutUint32(h[8:12], crc32.Checksum(payload, castagnoli))
	return b
}

// appendPayload appends the JSON of c to b, without reflection. The bytes
// decode with encoding/json into payloadJSON.
func appendPayload(b []byte, c mutex.Change) []byte {
	g := c.Grant
	if c.Op == mutex.OpRelease {
		b = append(b, `{"op":"`+opRelease+`","key":"`...)
		b = b64.AppendEncode(b, []byte(g.Key))
		return append(b, `"}`...)
	}
	b = append(b, `{"op":"`+opGrant+`","key":"`...)
	b = b64.AppendEncode(b, []byte(g.Key))
	b = append(b, `","src":"`...)
	b = b64.AppendEncode(b, []byte(g.Source))
	b = append(b, `","addr":"`...)
	b = b64.AppendEncode(b, []byte(g.RemoteAddr))
	b = append(b, `","at":`...)
	b = strconv.AppendInt(b, g.Acquired.UnixNano(), 10)
	return append(b, '}')
}

// recordLen returns the size in bytes of the record of c, as appendRecord
// writes it.
func recordLen(c mutex.Change) int {
	g := c.Grant
	if c.Op == mutex.OpRelease {
		return HeaderLen + len(`{"op":"`+opRelease+`","key":""}`) + b64.EncodedLen(len(g.Key))
	}
	return grantLen(len(g.Key), len(g.Source), len(g.RemoteAddr), g.Acquired.UnixNano())
}

// grantLen returns the size in bytes of a grant record with strings of the
// given lengths and a time of at Unix nanoseconds.
func grantLen(key, src, addr int, at int64) int {
	digits := 1
	if at < 0 {
		digits++ // the minus sign
	}
	for v := at / 10; v != 0; v /= 10 {
		digits++
	}
	return HeaderLen + len(`{"op":"`+opGrant+`","key":"","src":"","addr":"","at":}`) +
		b64.EncodedLen(key) + b64.EncodedLen(src) + b64.EncodedLen(addr) + digits
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

// payloadJSON is the payload's shape for encoding/json; []byte fields are
// base64 in JSON.
type payloadJSON struct {
	Op   string `json:"op"`
	Key  []byte `json:"key"`
	Src  []byte `json:"src"`
	Addr []byte `json:"addr"`
	At   *int64 `json:"at"`
}

// decodePayload checks p against sum and decodes the change it holds.
// Errors: errPayloadSum, errPayload.
func decodePayload(p []byte, sum uint32) (mutex.Change, error) {
	if crc32.Checksum(p, castagnoli) != sum {
		return mutex.Change{}, errPayloadSum
	}
	if c, ok := decodeCanonical(p); ok {
		return c, nil
	}
	return decodeJSON(p)
}

// decodeJSON decodes a payload of any JSON form with encoding/json.
func decodeJSON(p []byte) (mutex.Change, error) {
	var j payloadJSON
	if err := json.Unmarshal(p, &j); err != nil {
		return mutex.Change{}, fmt.Errorf("%w: %w", errPayload, err)
	}
	if len(j.Key) == 0 {
		return mutex.Change{}, fmt.Errorf("%w: empty key", errPayload)
	}
	switch j.Op {
	case opRelease:
		return mutex.Change{Op: mutex.OpRelease, Grant: mutex.Grant{Key: string(j.Key)}}, nil
	case opGrant:
		if j.At == nil {
			return mutex.Change{}, fmt.Errorf("%w: grant without a time", errPayload)
		}
		return mutex.Change{Op: mutex.OpGrant, Grant: mutex.Grant{
			Key:        string(j.Key),
			Source:     string(j.Src),
			RemoteAddr: string(j.Addr),
			Acquired:   time.Unix(0, *j.At),
		}}, nil
	}
	return mutex.Change{}, fmt.Errorf("%w: unknown op %q", errPayload, j.Op)
}

// Fixed parts of the payload as appendPayload writes it.
const (
	canonGrant   = `{"op":"` + opGrant + `","key":"`
	canonRelease = `{"op":"` + opRelease + `","key":"`
	canonSrc     = `","src":"`
	canonAddr    = `","addr":"`
	canonAt      = `","at":`
)

// decodeCanonical decodes a payload in exactly the form appendPayload
// writes, without reflection and with one allocation for the strings of a
// grant. ok is false for any other form, which decodeJSON then reads; for
// a payload it accepts it returns what decodeJSON would.
func decodeCanonical(p []byte) (c mutex.Change, ok bool) {
	var scratch [3 * 256]byte
	if rest, found := bytes.CutPrefix(p, []byte(canonRelease)); found {
		key, rest, ok := cutBase64(rest, `"}`, scratch[:0])
		if !ok || len(rest) != 0 || len(key) == 0 {
			return mutex.Change{}, false
		}
		return mutex.Change{Op: mutex.OpRelease, Grant: mutex.Grant{Key: string(key)}}, true
	}
	rest, found := bytes.CutPrefix(p, []byte(canonGrant))
	if !found {
		return mutex.Change{}, false
	}
	all, rest, ok := cutBase64(rest, canonSrc, scratch[:0])
	nKey := len(all)
	if ok {
		all, rest, ok = cutBase64(rest, canonAddr, all)
	}
	nSrc := len(all) - nKey
	if ok {
		all, rest, ok = cutBase64(rest, canonAt, all)
	}
	if !ok || nKey == 0 || len(rest) < 2 || rest[len(rest)-1] != '}' {
		return mutex.Change{}, false
	}
	at, ok := parseInt(rest[:len(rest)-1])
	if !ok {
		return mutex.Change{}, false
	}
	s := string(all)
	return mutex.Change{Op: mutex.OpGrant, Grant: mutex.Grant{
		Key:        s[:nKey],
		Source:     s[nKey : nKey+nSrc],
		RemoteAddr: s[nKey+nSrc:],
		Acquired:   time.Unix(0, at),
	}}, true
}

// cutBase64 decodes the base64 in p up to the first occurrence of end and
// appends it to dst. It returns the extended dst and the bytes after end.
func cutBase64(p []byte, end string, dst []byte) ([]byte, []byte, bool) {
	i := bytes.Index(p, []byte(end))
	if i < 0 {
		return dst, nil, false
	}
	for _, c := range p[:i] {
		// The decoder skips line breaks; JSON allows no raw control
		// character in a string, so take none.
		if c == '\r' || c == '\n' {
			return dst, nil, false
		}
	}
	out, err := b64.AppendDecode(dst, p[:i])
	if err != nil {
		return dst, nil, false
	}
	return out, p[i+len(end):], true
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

// decodeRecord decodes the record at the start of b and returns its change
// and its size in bytes. Errors: errShort when b ends before the record
// does, or a reason from parseHeader or decodePayload.
func decodeRecord(b []byte) (mutex.Change, int, error) {
	if len(b) < HeaderLen {
		return mutex.Change{}, 0, errShort
	}
	n, sum, err := parseHeader(b)
	if err != nil {
		return mutex.Change{}, 0, err
	}
	if len(b)-HeaderLen < n {
		return mutex.Change{}, 0, errShort
	}
	c, err := decodePayload(b[HeaderLen:HeaderLen+n], sum)
	if err != nil {
		return mutex.Change{}, 0, err
	}
	return c, HeaderLen + n, nil
}
