package lockingcenter

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// sessionVectors mirrors clients/testdata/session-vectors.json, the frames
// of the session protocol that the server's codec produces.
type sessionVectors struct {
	Preface string `json:"preface_hex"`
	Frames  []struct {
		Name   string `json:"name"`
		Type   byte   `json:"type"`
		ID     uint64 `json:"id"`
		Fields []struct {
			Tag byte   `json:"tag"`
			Hex string `json:"value_hex"`
		} `json:"fields"`
		Hex string `json:"frame_hex"`
	} `json:"frames"`
	Types map[string]byte `json:"types"`
	Tags  map[string]byte `json:"tags"`
	Codes map[string]byte `json:"codes"`
}

func loadSessionVectors(t testing.TB) sessionVectors {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "session-vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v sessionVectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("session-vectors.json: %v", err)
	}
	if len(v.Frames) == 0 || len(v.Types) == 0 || len(v.Tags) == 0 || len(v.Codes) == 0 {
		t.Fatal("session-vectors.json: a section is empty")
	}
	return v
}

// listTags are the tags whose values are list items, fields of their own.
var listTags = map[byte]bool{tagHeld: true, tagParked: true, tagHolder: true}

// Every frame of the vectors encodes from its fields to its bytes, and
// decodes from its bytes to its fields, list items included.
func TestSessionVectors(t *testing.T) {
	v := loadSessionVectors(t)
	if got := string(unhex(t, v.Preface)); got != preface {
		t.Fatalf("preface %q, want %q", got, preface)
	}
	types := map[byte]bool{}
	for _, vf := range v.Frames {
		t.Run(vf.Name, func(t *testing.T) {
			types[vf.Type] = true
			want := unhex(t, vf.Hex)
			f := frame{typ: vf.Type, id: vf.ID}
			for _, fl := range vf.Fields {
				f.fields = append(f.fields, field{fl.Tag, unhex(t, fl.Hex)})
			}
			if got := appendFrame(nil, f); !bytes.Equal(got, want) {
				t.Fatalf("encoded\n %x\nwant\n %x", got, want)
			}
			var got frame
			n, err := parseFrame(want, &got)
			if err != nil || n != len(want) {
				t.Fatalf("decoded %d of %d bytes: %v", n, len(want), err)
			}
			if got.typ != f.typ || got.id != f.id || len(got.fields) != len(f.fields) {
				t.Fatalf("decoded type %#02x id %d with %d fields, want %#02x %d %d",
					got.typ, got.id, len(got.fields), f.typ, f.id, len(f.fields))
			}
			for i, fl := range got.fields {
				if fl.tag != f.fields[i].tag || !bytes.Equal(fl.value, f.fields[i].value) {
					t.Fatalf("field %d: tag %#02x %x, want %#02x %x", i, fl.tag, fl.value, f.fields[i].tag, f.fields[i].value)
				}
				if !listTags[fl.tag] {
					continue
				}
				inner, err := parseFields(fl.value, nil)
				if err != nil || len(inner) == 0 {
					t.Fatalf("list item %d: %d fields, %v", i, len(inner), err)
				}
				if again := appendFields(nil, inner); !bytes.Equal(again, fl.value) {
					t.Fatalf("list item %d encodes to %x, want %x", i, again, fl.value)
				}
			}
			// Cut anywhere before its end, the frame is incomplete, never an error.
			for cut := range len(want) {
				if n, err := parseFrame(want[:cut], &got); n != 0 || err != nil {
					t.Fatalf("the first %d bytes: %d, %v", cut, n, err)
				}
			}
		})
	}
	for name, typ := range v.Types {
		if !types[typ] {
			t.Errorf("no vector of frame type %s", name)
		}
	}
}

// The names and numbers of the vectors file are the client's, both ways.
func TestSessionVectorNames(t *testing.T) {
	v := loadSessionVectors(t)
	types := map[string]byte{"hello": frameHello, "resume": frameResume, "acquire": frameAcquire,
		"release": frameRelease, "renew": frameRenew, "cancel": frameCancel, "describe": frameDescribe,
		"ping": framePing, "close": frameClose, "watch": frameWatch, "welcome": frameWelcome,
		"granted": frameGranted, "ok": frameOK, "refused": frameRefused, "lost": frameLost, "info": frameInfo,
		"goodbye": frameGoodbye, "event": frameEvent, "more": frameMore}
	tags := map[string]byte{"key": tagKey, "name": tagName, "ttl_ms": tagTTL, "credential": tagCredential,
		"session": tagSession, "secret": tagSecret, "token": tagToken, "wait_ms": tagWait, "lease_ms": tagLease,
		"delay_ms": tagDelay, "target": tagTarget, "server": tagServer, "code": tagCode, "message": tagMessage,
		"queue": tagQueue, "applied": tagApplied, "left_ms": tagLeft, "held_ms": tagHeldFor,
		"keepalive_ms": tagKeepalive, "request": tagRequest, "mode": tagMode, "limit": tagLimit,
		"priority": tagPriority, "reentrant": tagReentrant, "owner": tagOwner, "count": tagCount, "leader": tagLeader,
		"event": tagEvent, "at_ms": tagAt, "held": tagHeld, "parked": tagParked, "holder": tagHolder, "more": tagMore, "lapse": tagLapse,
		"note": tagNote}
	codes := map[string]byte{}
	for c, name := range codeNames {
		if name != "" {
			codes[name] = byte(c)
		}
	}
	for what, pair := range map[string][2]map[string]byte{"frame type": {v.Types, types}, "tag": {v.Tags, tags},
		"code": {v.Codes, codes}} {
		file, here := pair[0], pair[1]
		for name, n := range file {
			if m, ok := here[name]; !ok || m != n {
				t.Errorf("%s %s is %#02x in the vectors, %#02x here (known: %v)", what, name, n, m, ok)
			}
		}
		for name := range here {
			if _, ok := file[name]; !ok {
				t.Errorf("%s %s is not in the vectors", what, name)
			}
		}
	}
}

// Bad lengths and fields are errors, not panics or misreads.
func TestParseFrameRefuses(t *testing.T) {
	ok := appendFrame(nil, frame{typ: frameOK, id: 1})
	withLength := func(b []byte, n uint32) []byte {
		b = bytes.Clone(b)
		b[0], b[1], b[2], b[3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
		return b
	}
	message := appendFrame(nil, frame{typ: frameOK, id: 1, fields: []field{{tagMessage, []byte("ab")}}})
	for name, b := range map[string][]byte{
		"length under a header": withLength(ok, frameHead-1),
		"length over the limit": withLength(ok, maxFrame+1),
		"field past its frame":  withLength(message[:len(message)-1], uint32(len(message)-5)),
		"a field header cut short": withLength(append(bytes.Clone(ok), tagLeft, 0),
			uint32(len(ok)-4+2)),
		"token of 3 bytes": appendFrame(nil, frame{typ: frameGranted, id: 1, fields: []field{{tagToken, []byte{1, 2, 3}}}}),
	} {
		var f frame
		if _, err := parseFrame(b, &f); !errors.Is(err, ErrProtocol) {
			t.Errorf("%s: %v, want ErrProtocol", name, err)
		}
	}
}

func FuzzParseFrame(f *testing.F) {
	for _, vf := range loadSessionVectors(f).Frames {
		b, err := hex.DecodeString(vf.Hex)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr frame
		n, err := parseFrame(b, &fr)
		if err != nil || n == 0 {
			return
		}
		if again := appendFrame(nil, fr); !bytes.Equal(again, b[:n]) {
			t.Fatalf("%x decodes and encodes to %x", b[:n], again)
		}
	})
}

// vectorBytes returns the bytes of the named vectors, one after another.
func vectorBytes(t testing.TB, v sessionVectors, names ...string) []byte {
	t.Helper()
	var out []byte
	for _, name := range names {
		found := false
		for _, vf := range v.Frames {
			if b, err := hex.DecodeString(vf.Hex); err == nil && vf.Name == name {
				out, found = append(out, b...), true
			}
		}
		if !found {
			t.Fatalf("no vector %q", name)
		}
	}
	return out
}

// The frames of a long answer read as one: a WELCOME in three frames, then
// an INFO in two, each with every list item in order and no more.
func TestAnswerJoinsMoreFrames(t *testing.T) {
	v := loadSessionVectors(t)
	b := vectorBytes(t, v, "welcome of a resume, the first of three frames", "more of a welcome, another to come",
		"more of a welcome, the last", "info, the first of two frames", "more of an info, the last", "ok")
	fr := &frameReader{r: bytes.NewReader(b)}
	read := func(typ byte, id uint64) *frame {
		f, err := fr.answer()
		if err != nil || f.typ != typ || f.id != id || f.more() {
			t.Fatalf("answer %+v, %v; want type %#02x id %d, whole", f, err, typ, id)
		}
		return f
	}
	check := func(f *frame, tag, inner byte, want ...string) {
		items, err := f.items(tag)
		if err != nil || len(items) != len(want) {
			t.Fatalf("%d items %#02x (%v), want %v", len(items), tag, err, want)
		}
		for i, it := range items {
			if got, _ := it.get(inner); string(got) != want[i] {
				t.Fatalf("item %d of %#02x: %q, want %q", i, tag, got, want[i])
			}
		}
	}
	w := read(frameWelcome, 1)
	check(w, tagHeld, tagKey, "jobs/nightly", "orders/batch-7")
	check(w, tagParked, tagKey, "pool", "queue")
	if applied, _ := w.uint(tagApplied); applied != 8 {
		t.Fatalf("applied %d", applied)
	}
	check(read(frameInfo, 9), tagHolder, tagName, "cron-1", "cron-2")
	read(frameOK, 6)
}

// A MORE out of place is a protocol error; a GOODBYE inside an answer
// takes its place.
func TestAnswerRefusesMoreOutOfPlace(t *testing.T) {
	v := loadSessionVectors(t)
	first := "welcome of a resume, the first of three frames"
	for name, tc := range map[string]struct {
		frames []string
		want   byte // 0: ErrProtocol
	}{
		"a MORE first":              {[]string{"more of a welcome, the last"}, 0},
		"another frame inside":      {[]string{first, "ok"}, 0},
		"a MORE of another id":      {[]string{first, "more of an info, the last"}, 0},
		"a GOODBYE inside":          {[]string{first, "more of a welcome, another to come", "goodbye"}, frameGoodbye},
		"a single frame, as before": {[]string{"welcome of a resume"}, frameWelcome},
	} {
		fr := &frameReader{r: bytes.NewReader(vectorBytes(t, v, tc.frames...))}
		f, err := fr.answer()
		switch {
		case tc.want == 0 && !errors.Is(err, ErrProtocol):
			t.Errorf("%s: %+v, %v; want ErrProtocol", name, f, err)
		case tc.want != 0 && (err != nil || f.typ != tc.want):
			t.Errorf("%s: %+v, %v; want type %#02x", name, f, err, tc.want)
		}
	}
}

// FuzzReadAnswer reads answers from arbitrary bytes until an error: it
// must not panic, and every answer it returns is whole: no more, no MORE.
// The seed corpus is in testdata/fuzz/FuzzReadAnswer.
func FuzzReadAnswer(f *testing.F) {
	v := loadSessionVectors(f)
	f.Add(vectorBytes(f, v, "welcome of a resume, the first of three frames", "more of a welcome, another to come",
		"more of a welcome, the last", "info, the first of two frames", "more of an info, the last"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr := &frameReader{r: bytes.NewReader(b)}
		for {
			a, err := fr.answer()
			if err != nil {
				return
			}
			if a.typ == frameMore || a.typ != frameGoodbye && a.more() {
				t.Fatalf("answer of type %#02x, more %v", a.typ, a.more())
			}
		}
	})
}
