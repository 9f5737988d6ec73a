package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/crc32"
	"github.com/locking-center/locking-center/mutex"
)

// everyField is a command of each op with every field it can have set,
// and a snapshot record of each kind.
func everyField() ([]mutex.Command, []mutex.Record) {
	at := time.Unix(0, 1_700_000_000_123_456_789)
	full := mutex.Command{At: at, Key: "k\xff\x00", Source: "src\x00", RemoteAddr: "[::1]:9", Session: math.MaxUint64,
		Request: 7, Target: 6, Ticket: 5, Token: math.MaxUint64 - 1, Floor: 77, Before: 78, Try: true, Wait: time.Hour, Lease: time.Minute,
		Delay: 59 * time.Second, TTL: 10 * time.Second, Mode: mutex.Shared, Limit: math.MaxUint32,
		Priority: math.MinInt32, Reentrant: true, Owner: "owner\xfe", Note: strings.Repeat("n\x00\xff", mutex.MaxNoteLen/3), ConnBound: true, SecretHash: secret,
		Account: "acct\x01", MaxHeld: math.MaxUint32, MaxParked: 3}
	var cmds []mutex.Command
	for op := mutex.OpAcquire; op <= mutex.OpRestart; op++ {
		c := full
		c.Op = op
		cmds = append(cmds, c)
	}
	cmds = append(cmds,
		mutex.Command{Op: mutex.OpTick, At: time.Unix(0, math.MinInt64)},
		mutex.Command{Op: mutex.OpRestart, At: time.Unix(0, math.MaxInt64)},
		release(string(bytes.Repeat([]byte{0xff}, mutex.MaxKeyLen)), time.Unix(0, -1)),
	)
	recs := []mutex.Record{
		{Kind: mutex.RecordState, LastToken: math.MaxUint64, LastTicket: 3, LastSession: 9},
		{Kind: mutex.RecordSession, Session: 9, Name: "svc\xff", Account: "team-a", TTL: time.Second, SecretHash: secret,
			Opened: at, Applied: 44},
		{Kind: mutex.RecordKey, Key: "sem", Limit: 4, DelayAt: at, DelayFor: time.Second},
		{Kind: mutex.RecordHolder, Key: "k", Token: 12, Session: 9, Request: 3, Source: "s", RemoteAddr: "a:1",
			Acquired: at, Mode: mutex.Shared, Count: 3, Owner: "o", Note: "job 7 on host-3", LeaseFor: time.Minute, LeaseAt: at,
			DelayFor: time.Second},
		{Kind: mutex.RecordHolder, Key: "v1", Token: 1, Source: "10.0.0.1", Account: "10.0.0.1", RemoteAddr: "10.0.0.1:5",
			Acquired: time.Unix(0, -7), Count: 1},
		{Kind: mutex.RecordWaiter, Key: "k", Ticket: 2, Session: 9, Request: 4, Source: "s", RemoteAddr: "a:2",
			QueuedAt: at, Mode: mutex.Shared, Limit: 1, Owner: "p", Note: "run https://ci/1", LeaseFor: time.Second, DelayFor: time.Second,
			Priority: -3, Reentrant: true, ConnBound: true, WaitAt: at},
	}
	return cmds, recs
}

// reencode returns the record of it, as the encoders write it.
func reencode(it item) []byte {
	switch it.kind {
	case itemCommand:
		return appendRecord(nil, &it.cmd)
	case itemState:
		return appendStateRecord(nil, &it.rec)
	}
	return record(legacyGrant(it.rec.Key, it.rec.Source, it.rec.RemoteAddr, it.rec.Acquired))
}

// legacyGrant is the payload of a grant as logs before commands wrote it.
func legacyGrant(key, src, addr string, at time.Time) string {
	enc := func(v string) string { return b64.EncodeToString([]byte(v)) }
	return `{"op":"grant","key":"` + enc(key) + `","src":"` + enc(src) + `","addr":"` + enc(addr) +
		`","at":` + strconv.FormatInt(at.UnixNano(), 10) + `}`
}

func TestRecordRoundTrip(t *testing.T) {
	cmds, recs := everyField()
	cmds = append(cmds, history()...)
	var items []item
	for _, c := range cmds {
		items = append(items, item{kind: itemCommand, cmd: c})
	}
	for _, r := range recs {
		items = append(items, item{kind: itemState, rec: r})
	}
	for i, want := range items {
		rec := reencode(want)
		got, n, err := decodeRecord(append(bytes.Clone(rec), "next record"...))
		if err != nil {
			t.Fatalf("item %d: decode %q: %v", i, rec[HeaderLen:], err)
		}
		if n != len(rec) {
			t.Errorf("item %d: decoded %d bytes of %d", i, n, len(rec))
		}
		if !sameItem(got, want) {
			t.Errorf("item %d:\n got %+v\nwant %+v", i, got, want)
		}
		// The flat scanner and encoding/json agree on what the encoder wrote.
		payload := rec[HeaderLen:]
		if _, ok := scanFlat(payload); !ok {
			t.Fatalf("item %d: the flat scanner refused %s", i, payload)
		}
		slow, err := decodeJSONPayload(payload)
		if err != nil || !sameItem(slow, want) {
			t.Errorf("item %d: encoding/json read %+v (%v)", i, slow, err)
		}
	}
}

// decodeJSONPayload decodes p with encoding/json only.
func decodeJSONPayload(p []byte) (item, error) {
	var j fieldsJSON
	if err := json.Unmarshal(p, &j); err != nil {
		return item{}, err
	}
	f := j.fields()
	return f.item()
}

func TestRecordPayloadIsJSONWithBase64(t *testing.T) {
	c := acquire("\xff\x00k", "\xfe", "1.2.3.4:5", time.Unix(0, 42))
	rec := appendRecord(nil, &c)
	want := `{"op":"acquire","at":42,"key":"/wBr","src":"/g==","addr":"MS4yLjMuNDo1","conn":true}`
	if got := string(rec[HeaderLen:]); got != want {
		t.Fatalf("payload %s, want %s", got, want)
	}
	if n := binary.LittleEndian.Uint32(rec[0:4]); int(n) != len(want) {
		t.Fatalf("length field %d, want %d", n, len(want))
	}
	r := release("a", time.Unix(0, 3))
	if got := string(appendRecord(nil, &r)[HeaderLen:]); got != `{"op":"release","at":3,"key":"YQ=="}` {
		t.Fatalf("release payload %s", got)
	}
	h := mutex.Record{Kind: mutex.RecordHolder, Key: "a", Token: 9, Source: "s", Acquired: time.Unix(0, 5), Count: 1}
	if got := string(appendStateRecord(nil, &h)[HeaderLen:]); got != `{"op":"holder","key":"YQ==","token":9,"src":"cw==","at":5}` {
		t.Fatalf("holder payload %s", got)
	}
}

// record frames payload as a record with correct checksums.
func record(payload string) []byte {
	b := make([]byte, HeaderLen, HeaderLen+len(payload))
	binary.LittleEndian.PutUint32(b[0:4], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[4:8], crc32.Checksum(b[0:4], castagnoli))
	binary.LittleEndian.PutUint32(b[8:12], crc32.Checksum([]byte(payload), castagnoli))
	return append(b, payload...)
}

func TestDecodePayloadForms(t *testing.T) {
	cmd := func(c mutex.Command) *item { return &item{kind: itemCommand, cmd: c} }
	rel := release("k", time.Unix(0, 7))
	tests := []struct {
		name, payload string
		want          *item // nil: an error is wanted
	}{
		{"fields in another order", `{"at":7,"addr":"","src":"cw==","key":"aw==","op":"acquire"}`,
			cmd(mutex.Command{Op: mutex.OpAcquire, At: time.Unix(0, 7), Key: "k", Source: "s"})},
		{"spaces", ` { "op" : "release" , "at" : 7, "key" : "aw==" } `, cmd(rel)},
		{"unknown field ignored", `{"op":"release","at":7,"key":"aw==","why":"reset"}`, cmd(rel)},
		{"a release without a time, as older logs wrote it", `{"op":"release","key":"aw=="}`,
			cmd(release("k", time.Unix(0, 0)))},
		{"a grant of the older format", `{"op":"grant","key":"aw==","src":"cw==","addr":"","at":-5}`,
			&item{kind: itemGrant, rec: mutex.Record{Key: "k", Source: "s", Acquired: time.Unix(0, -5)}}},
		{"unknown op", `{"op":"steal","at":1,"key":"aw=="}`, nil},
		{"empty key", `{"op":"release","at":1,"key":""}`, nil},
		{"key not base64", `{"op":"release","at":1,"key":"k"}`, nil},
		{"command without time", `{"op":"acquire","key":"aw=="}`, nil},
		{"grant without time", `{"op":"grant","key":"aw=="}`, nil},
		{"time not an integer", `{"op":"acquire","key":"aw==","at":1.5}`, nil},
		{"mode out of range", `{"op":"acquire","key":"aw==","at":1,"mode":7}`, nil},
		{"secret of the wrong size", `{"op":"open-session","at":1,"secret":"YQ=="}`, nil},
		{"a holder without a token", `{"op":"holder","key":"aw=="}`, nil},
		{"a session without an id", `{"op":"session","ttl":5}`, nil},
		{"not an object", `["op","acquire"]`, nil},
		{"not JSON", `op=acquire`, nil},
		{"trailing bytes", `{"op":"release","at":1,"key":"aw=="}x`, nil},
		{"line break in base64", "{\"op\":\"release\",\"at\":1,\"key\":\"aw\n==\"}", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, n, err := decodeRecord(record(tt.payload))
			if tt.want == nil {
				if !errors.Is(err, errPayload) {
					t.Fatalf("got %+v, %v; want errPayload", got, err)
				}
				return
			}
			if err != nil || n != HeaderLen+len(tt.payload) || !sameItem(got, *tt.want) {
				t.Fatalf("got %+v (%d bytes), %v; want %+v", got, n, err, *tt.want)
			}
		})
	}
}

func TestDecodeRecordChecks(t *testing.T) {
	c := acquire("k", "s", "a", epoch)
	good := appendRecord(nil, &c)
	corrupt := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	huge := make([]byte, HeaderLen)
	binary.LittleEndian.PutUint32(huge[0:4], math.MaxUint32)
	binary.LittleEndian.PutUint32(huge[4:8], crc32.Checksum(huge[0:4], castagnoli))
	zeroLen := make([]byte, HeaderLen)
	binary.LittleEndian.PutUint32(zeroLen[4:8], crc32.Checksum(zeroLen[0:4], castagnoli))
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, errShort},
		{"header cut", good[:HeaderLen-1], errShort},
		{"payload cut", good[:len(good)-1], errShort},
		{"length damaged", corrupt(func(b []byte) { b[0] ^= 1 }), errLengthSum},
		{"length checksum damaged", corrupt(func(b []byte) { b[5] ^= 1 }), errLengthSum},
		{"length above MaxPayload", huge, errLengthRange},
		{"length zero", zeroLen, errLengthRange},
		{"payload checksum damaged", corrupt(func(b []byte) { b[9] ^= 1 }), errPayloadSum},
		{"payload damaged", corrupt(func(b []byte) { b[len(b)-2] ^= 1 }), errPayloadSum},
		{"all zero", make([]byte, 64), errLengthSum},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, _, err := decodeRecord(tt.b); !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}

// sameItem compares two items, times by their Unix nanoseconds.
func sameItem(a, b item) bool {
	norm := func(it item) item {
		it.cmd.At = time.Unix(0, it.cmd.At.UnixNano())
		for _, tp := range []*time.Time{&it.rec.Opened, &it.rec.DelayAt, &it.rec.Acquired, &it.rec.QueuedAt,
			&it.rec.LeaseAt, &it.rec.WaitAt} {
			if !tp.IsZero() {
				*tp = time.Unix(0, tp.UnixNano())
			}
		}
		if it.kind == itemState && it.rec.Kind == mutex.RecordHolder && it.rec.Count == 0 {
			it.rec.Count = 1
		}
		return it
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

// FuzzDecodeRecord feeds arbitrary bytes to the record decoder, as they
// are and framed as the payload of a record with good checksums. It must
// not panic, must not claim more bytes than it was given, and a record it
// accepts must encode back to a record that decodes to the same item.
// The seed corpus is in testdata/fuzz/FuzzDecodeRecord.
func FuzzDecodeRecord(f *testing.F) {
	for _, c := range history() {
		f.Add(appendRecord(nil, &c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecode(t, b)
		if len(b) > 0 && len(b) <= MaxPayload {
			checkDecode(t, record(string(b)))
		}
	})
}

func checkDecode(t *testing.T, b []byte) {
	it, n, err := decodeRecord(b)
	if err != nil {
		if n != 0 {
			t.Fatalf("error %v with %d bytes used", err, n)
		}
		return
	}
	if n < HeaderLen || n > len(b) {
		t.Fatalf("used %d of %d bytes", n, len(b))
	}
	again, _, err := decodeRecord(reencode(it))
	if err != nil || !sameItem(again, it) {
		t.Fatalf("re-encoded %+v decodes to %+v, %v", it, again, err)
	}
}

// FuzzPayload checks that the flat scanner and encoding/json read every
// payload the same way: whatever the scanner accepts, encoding/json
// accepts too, with the same item.
func FuzzPayload(f *testing.F) {
	for _, c := range history() {
		f.Add(appendRecord(nil, &c)[HeaderLen:])
	}
	f.Add([]byte(`{"op":"acquire","key":"aw==","src":"","addr":"","at":-0}`))
	f.Add([]byte(`{"op":"acquire","key":"aw==","at":9223372036854775808}`))
	f.Fuzz(func(t *testing.T, p []byte) {
		fl, ok := scanFlat(p)
		if !ok {
			return
		}
		fast, ferr := fl.item()
		slow, serr := decodeJSONPayload(p)
		if serr != nil && ferr == nil {
			t.Fatalf("the flat scanner took %q as %+v, encoding/json refuses it: %v", p, fast, serr)
		}
		if ferr == nil && !sameItem(fast, slow) {
			t.Fatalf("%q: scanner %+v, encoding/json %+v", p, fast, slow)
		}
	})
}
