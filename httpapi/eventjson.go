package httpapi

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// eventFormat writes the stream's events. It keeps the date and time of
// day of the last second it wrote a time of, in UTC, which the events of
// a batch mostly share. The zero value is ready; one goroutine at a time
// may use it.
type eventFormat struct {
	sec  int64                            // of date
	date [len("2006-01-02T15:04:05")]byte // of sec, when ok
	ok   bool
}

// appendEventJSON appends e as JSON, byte for byte as json.Marshal writes
// it: the fields in their order, those tagged omitempty left out when
// empty, strings escaped as encoding/json escapes them (appendJSONString)
// and the time as Time.MarshalJSON writes it. (MarshalJSON refuses a year
// outside 0..9999, and json.Marshal with it; here such a time is written
// as Time.AppendFormat writes it.)
func (f *eventFormat) appendEventJSON(b []byte, e *eventJSON) []byte {
	b = strconv.AppendUint(append(b, `{"id":`...), e.ID, 10)
	b = appendJSONField(b, `,"action":`, e.Action)
	b = appendJSONField(b, `,"key":`, e.Key)
	if e.FencingToken != 0 {
		b = strconv.AppendUint(append(b, `,"fencing_token":`...), e.FencingToken, 10)
	}
	if e.Session != 0 {
		b = strconv.AppendUint(append(b, `,"session":`...), e.Session, 10)
	}
	if e.ClientID != "" {
		b = appendJSONField(b, `,"client_id":`, e.ClientID)
	}
	b = appendJSONField(b, `,"owner":`, e.Owner)
	if e.Note != "" {
		b = appendJSONField(b, `,"note":`, e.Note)
	}
	b = appendJSONField(b, `,"mode":`, e.Mode)
	if e.Reason != "" {
		b = appendJSONField(b, `,"reason":`, e.Reason)
	}
	b = f.appendTime(append(b, `,"time":"`...), e.Time)
	return append(b, `"}`...)
}

// appendTime appends t as Time.MarshalJSON writes it, without the quotes:
// RFC 3339 with the nanoseconds, their trailing zeros cut (RFC3339Nano).
// A time in UTC of the second of the last takes that second's text.
func (f *eventFormat) appendTime(b []byte, t time.Time) []byte {
	if t.Location() != time.UTC {
		return t.AppendFormat(b, time.RFC3339Nano)
	}
	if sec := t.Unix(); !f.ok || sec != f.sec {
		// Not a year of four digits: no date of this length.
		if d := t.AppendFormat(f.date[:0], "2006-01-02T15:04:05"); len(d) != len(f.date) {
			f.ok = false
			return t.AppendFormat(b, time.RFC3339Nano)
		}
		f.sec, f.ok = sec, true
	}
	b = append(b, f.date[:]...)
	if ns := t.Nanosecond(); ns != 0 {
		// The nine digits, after a 1 that the dot then takes the place of.
		dot := len(b)
		b = strconv.AppendUint(b, uint64(ns)+1e9, 10)
		b[dot] = '.'
		for b[len(b)-1] == '0' {
			b = b[:len(b)-1]
		}
	}
	return append(b, 'Z')
}

// appendJSONField appends name (with its comma and colon) and the string
// v.
func appendJSONField(b []byte, name, v string) []byte {
	return appendJSONString(append(b, name...), v)
}

// jsonPlain marks the ASCII bytes that encoding/json writes as they are
// (with its HTML escaping, as json.Marshal does): everything from space
// to DEL but the quote, the backslash, <, > and &.
var jsonPlain = func() (t [utf8.RuneSelf]bool) {
	for c := ' '; c < utf8.RuneSelf; c++ {
		t[c] = !strings.ContainsRune(`"\<>&`, c)
	}
	return t
}()

// appendJSONString appends s as a JSON string, escaped as encoding/json
// escapes it with HTML escaping: \" and \\; \b, \f, \n, \r and \t; every
// other control byte, <, > and & as \u00XX; U+2028 and U+2029 as \u2028
// and \u2029; each byte of invalid UTF-8 as \ufffd.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if jsonPlain[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(append(b, s[start:i]...), `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(append(b, s[start:i]...), '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(append(b, s[start:]...), '"')
}
