package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/klauspost/crc32"
	"github.com/locking-center/locking-center/mutex"
)

func TestRecordRoundTrip(t *testing.T) {
	changes := append(history(),
		grant("k", "", "", time.Unix(0, math.MinInt64)),
		grant("k", "", "", time.Unix(0, math.MaxInt64)),
		release(string(bytes.Repeat([]byte{0xff}, mutex.MaxKeyLen))),
		release("\x00"),
	)
	for i, c := range changes {
		rec := appendRecord([]byte("prefix"), c)[len("prefix"):]
		if got := recordLen(c); got != len(rec) {
			t.Errorf("change %d: recordLen %d, record has %d bytes", i, got, len(rec))
		}
		got, n, err := decodeRecord(append(rec, "next record"...))
		if err != nil {
			t.Fatalf("change %d: decode: %v", i, err)
		}
		if n != len(rec) {
			t.Errorf("change %d: decoded %d bytes of %d", i, n, len(rec))
		}
		want := c
		if c.Op == mutex.OpRelease {
			want.Grant = mutex.Grant{Key: c.Grant.Key}
		}
		if got.Op != want.Op || got.Grant.Key != want.Grant.Key || got.Grant.Source != want.Grant.Source ||
			got.Grant.RemoteAddr != want.Grant.RemoteAddr || got.Grant.Acquired.UnixNano() != want.Grant.Acquired.UnixNano() {
			t.Errorf("change %d: got %+v, want %+v", i, got, want)
		}
		// The fast decoder and encoding/json agree on what the encoder wrote.
		payload := rec[HeaderLen:]
		fast, ok := decodeCanonical(payload)
		if !ok {
			t.Fatalf("change %d: canonical decoder refused %q", i, payload)
		}
		slow, err := decodeJSON(payload)
		if err != nil || !sameChange(fast, slow) {
			t.Errorf("change %d: canonical %+v, encoding/json %+v (%v)", i, fast, slow, err)
		}
	}
}

func TestRecordPayloadIsJSONWithBase64(t *testing.T) {
	rec := appendRecord(nil, grant("\xff\x00k", "\xfe", "1.2.3.4:5", time.Unix(0, 42)))
	want := `{"op":"grant","key":"/wBr","src":"/g==","addr":"MS4yLjMuNDo1","at":42}`
	if got := string(rec[HeaderLen:]); got != want {
		t.Fatalf("payload %s, want %s", got, want)
	}
	if n := binary.LittleEndian.Uint32(rec[0:4]); int(n) != len(want) {
		t.Fatalf("length field %d, want %d", n, len(want))
	}
	if got := string(appendRecord(nil, release("a"))[HeaderLen:]); got != `{"op":"release","key":"YQ=="}` {
		t.Fatalf("release payload %s", got)
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
	tests := []struct {
		name, payload string
		want          mutex.Change // zero: an error is wanted
	}{
		{"fields in another order", `{"at":7,"addr":"","src":"cw==","key":"aw==","op":"grant"}`,
			grant("k", "s", "", time.Unix(0, 7))},
		{"spaces", ` { "op" : "release" , "key" : "aw==" } `, release("k")},
		{"unknown field ignored", `{"op":"release","key":"aw==","why":"reset"}`, release("k")},
		{"missing source and address", `{"op":"grant","key":"aw==","at":-5}`, grant("k", "", "", time.Unix(0, -5))},
		{"unknown op", `{"op":"steal","key":"aw=="}`, mutex.Change{}},
		{"empty key", `{"op":"release","key":""}`, mutex.Change{}},
		{"key not base64", `{"op":"release","key":"k"}`, mutex.Change{}},
		{"grant without time", `{"op":"grant","key":"aw=="}`, mutex.Change{}},
		{"time not an integer", `{"op":"grant","key":"aw==","at":1.5}`, mutex.Change{}},
		{"not an object", `["op","grant"]`, mutex.Change{}},
		{"not JSON", `op=grant`, mutex.Change{}},
		{"trailing bytes", `{"op":"release","key":"aw=="}x`, mutex.Change{}},
		{"line break in base64", "{\"op\":\"release\",\"key\":\"aw\n==\"}", mutex.Change{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, n, err := decodeRecord(record(tt.payload))
			if tt.want.Op == 0 {
				if !errors.Is(err, errPayload) {
					t.Fatalf("got %+v, %v; want errPayload", got, err)
				}
				return
			}
			if err != nil || n != HeaderLen+len(tt.payload) || !sameChange(got, tt.want) {
				t.Fatalf("got %+v (%d bytes), %v; want %+v", got, n, err, tt.want)
			}
		})
	}
}

func TestDecodeRecordChecks(t *testing.T) {
	good := appendRecord(nil, grant("k", "s", "a", epoch))
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

func sameChange(a, b mutex.Change) bool {
	return a.Op == b.Op && a.Grant.Key == b.Grant.Key && a.Grant.Source == b.Grant.Source &&
		a.Grant.RemoteAddr == b.Grant.RemoteAddr && a.Grant.Acquired.UnixNano() == b.Grant.Acquired.UnixNano()
}

// FuzzDecodeRecord feeds arbitrary bytes to the record decoder, as they
// are and framed as the payload of a record with good checksums. It must
// not panic, must not claim more bytes than it was given, and a record it
// accepts must encode back to a record that decodes to the same change.
// The seed corpus is in testdata/fuzz/FuzzDecodeRecord.
func FuzzDecodeRecord(f *testing.F) {
	for _, c := range history() {
		f.Add(appendRecord(nil, c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecode(t, b)
		if len(b) > 0 && len(b) <= MaxPayload {
			checkDecode(t, record(string(b)))
		}
	})
}

func checkDecode(t *testing.T, b []byte) {
	c, n, err := decodeRecord(b)
	if err != nil {
		if n != 0 {
			t.Fatalf("error %v with %d bytes used", err, n)
		}
		return
	}
	if n < HeaderLen || n > len(b) {
		t.Fatalf("used %d of %d bytes", n, len(b))
	}
	again, m, err := decodeRecord(appendRecord(nil, c))
	if err != nil || !sameChange(again, c) || m != recordLen(c) {
		t.Fatalf("re-encoded %+v decodes to %+v (%d bytes), %v", c, again, m, err)
	}
}

// FuzzPayload checks that the fast decoder of the canonical form and
// encoding/json read every payload the same way: whatever the fast one
// accepts, encoding/json accepts too, with the same change.
func FuzzPayload(f *testing.F) {
	for _, c := range history() {
		f.Add(appendRecord(nil, c)[HeaderLen:])
	}
	f.Add([]byte(`{"op":"grant","key":"aw==","src":"","addr":"","at":-0}`))
	f.Add([]byte(`{"op":"grant","key":"aw==","src":"","addr":"","at":9223372036854775808}`))
	f.Fuzz(func(t *testing.T, p []byte) {
		fast, ok := decodeCanonical(p)
		if !ok {
			return
		}
		slow, err := decodeJSON(p)
		if err != nil {
			t.Fatalf("canonical decoder took %q as %+v, encoding/json refuses it: %v", p, fast, err)
		}
		if !sameChange(fast, slow) {
			t.Fatalf("%q: canonical %+v, encoding/json %+v", p, fast, slow)
		}
	})
}
