package frame

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/locking-center/locking-center/session"
)

// TestVectors encodes every frame of the shared vectors from its fields
// and compares the bytes.
func TestVectors(t *testing.T) {
	b, err := os.ReadFile("../../../clients/testdata/session-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Frames []struct {
			Name   string `json:"name"`
			Type   uint8  `json:"type"`
			ID     uint64 `json:"id"`
			Fields []struct {
				Tag uint8  `json:"tag"`
				Hex string `json:"value_hex"`
			} `json:"fields"`
			Hex string `json:"frame_hex"`
		} `json:"frames"`
	}
	if err := json.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Frames) == 0 {
		t.Fatal("no frames in the vectors")
	}
	for _, v := range file.Frames {
		var fields []session.Field
		for _, f := range v.Fields {
			val, err := hex.DecodeString(f.Hex)
			if err != nil {
				t.Fatalf("%s: %v", v.Name, err)
			}
			fields = append(fields, session.Field{Tag: session.Tag(f.Tag), Value: val})
		}
		got := hex.EncodeToString(Append([]byte("x"), session.Type(v.Type), v.ID, fields...)[1:])
		if got != v.Hex {
			t.Errorf("%s: encoded %s, want %s", v.Name, got, v.Hex)
		}
	}
}

func TestHelpers(t *testing.T) {
	b := Append(nil, session.TypeRelease, 7, Str(session.TagKey, "k"), U64(session.TagToken, 0x0102030405060708),
		U32(session.TagLease, 0x0A0B0C0D), U8(session.TagMode, 1))
	SetID(b, 9)
	var f session.Frame
	n, err := session.ParseFrame(b, &f)
	if err != nil || n != len(b) {
		t.Fatalf("ParseFrame: %d of %d bytes, %v", n, len(b), err)
	}
	if f.Type != session.TypeRelease || f.ID != 9 {
		t.Errorf("type %#02x id %d, want RELEASE id 9", uint8(f.Type), f.ID)
	}
	for tag, want := range map[session.Tag]uint64{session.TagToken: 0x0102030405060708, session.TagLease: 0x0A0B0C0D,
		session.TagMode: 1, session.TagWait: 0} {
		if got := Uint(&f, tag); got != want {
			t.Errorf("field %#02x = %#x, want %#x", uint8(tag), got, want)
		}
	}
	if k, _ := f.Get(session.TagKey); string(k) != "k" {
		t.Errorf("key %q, want k", k)
	}
}

// TestReader reads frames smaller and larger than its buffer, and says
// whether a whole frame is buffered.
func TestReader(t *testing.T) {
	var b []byte
	b = Append(b, session.TypePing, 1)
	b = Append(b, session.TypeOK, 2)
	b = Append(b, session.TypeAcquire, 3, session.Field{Tag: session.TagOwner, Value: make([]byte, 100)})
	b = Append(b, session.TypeOK, 4)
	b = append(b, 0, 0) // a frame cut short
	// The first read takes 32 bytes: two frames of 13 and the start of
	// the third, which is larger than the buffer.
	r := NewReader(bytes.NewReader(b), 32)
	for _, want := range []struct {
		t     session.Type
		id    uint64
		ready bool
	}{{session.TypePing, 1, true}, {session.TypeOK, 2, false}, {session.TypeAcquire, 3, false}, {session.TypeOK, 4, false}} {
		f, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if f.Type != want.t || f.ID != want.id {
			t.Fatalf("frame %#02x id %d, want %#02x id %d", uint8(f.Type), f.ID, uint8(want.t), want.id)
		}
		if got := r.Ready(); got != want.ready {
			t.Errorf("after id %d: Ready %v, want %v", f.ID, got, want.ready)
		}
	}
	if _, err := r.Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a cut frame: %v, want %v", err, io.ErrUnexpectedEOF)
	}
}
