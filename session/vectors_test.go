package session

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite clients/testdata/session-vectors.json")

const vectorsPath = "../clients/testdata/session-vectors.json"

// vectorFile is clients/testdata/session-vectors.json: the bytes of every
// frame type, for client libraries to test their encoders and decoders.
type vectorFile struct {
	About   string         `json:"about"`
	Preface string         `json:"preface_hex"`
	Frames  []vectorFrame  `json:"frames"`
	Types   map[string]int `json:"types"`
	Tags    map[string]int `json:"tags"`
	Codes   map[string]int `json:"codes"`
}

type vectorFrame struct {
	Name   string        `json:"name"`
	Type   int           `json:"type"`
	ID     uint64        `json:"id"`
	Fields []vectorField `json:"fields"`
	Hex    string        `json:"frame_hex"`
}

type vectorField struct {
	Tag int    `json:"tag"`
	Hex string `json:"value_hex"`
}

// vectors builds the frames of the file, one or more of each type.
func vectors() []vectorFrame {
	secret := bytes.Repeat([]byte{0xa5}, SecretLen)
	type f = func(*frameBuilder)
	str := func(t Tag, v string) f { return func(fb *frameBuilder) { fb.str(t, v) } }
	u8 := func(t Tag, v uint8) f { return func(fb *frameBuilder) { fb.u8(t, v) } }
	u32 := func(t Tag, v uint32) f { return func(fb *frameBuilder) { fb.u32(t, v) } }
	u64 := func(t Tag, v uint64) f { return func(fb *frameBuilder) { fb.u64(t, v) } }
	raw := func(t Tag, v []byte) f { return func(fb *frameBuilder) { fb.bytes(t, v) } }
	list := func(t Tag, inner ...f) f {
		return func(fb *frameBuilder) {
			at := fb.list(t)
			for _, x := range inner {
				x(fb)
			}
			fb.endList(at)
		}
	}
	cases := []struct {
		name   string
		t      Type
		id     uint64
		fields []f
	}{
		{"hello", TypeHello, 1, []f{str(TagName, "cron-1"), u32(TagTTL, 10000)}},
		{"hello without a name or ttl", TypeHello, 1, nil},
		{"resume", TypeResume, 1, []f{u64(TagSession, 42), raw(TagSecret, secret)}},
		{"acquire, try once", TypeAcquire, 2, []f{str(TagKey, "jobs/nightly"), u32(TagWait, 0)}},
		{"acquire, wait for ever, a binary key", TypeAcquire, 3, []f{str(TagKey, "\x00\xff\x80")}},
		{"acquire, every option", TypeAcquire, 4, []f{str(TagKey, "orders/batch-7"), u32(TagWait, 5000),
			u32(TagLease, 30000), u32(TagDelay, 2000), u8(TagMode, 1), u32(TagPriority, 0xfffffffe),
			u8(TagReentrant, 1), str(TagOwner, "worker-3")}},
		{"acquire, a semaphore", TypeAcquire, 5, []f{str(TagKey, "pool"), u32(TagLimit, 4)}},
		{"release", TypeRelease, 6, []f{str(TagKey, "jobs/nightly"), u64(TagToken, 0x181b2c3d4e5f6071)}},
		{"release given up at the client's end of the lease", TypeRelease, 12, []f{str(TagKey, "jobs/nightly"),
			u64(TagToken, 0x181b2c3d4e5f6071), u8(TagLapse, 1)}},
		{"renew", TypeRenew, 7, []f{str(TagKey, "orders/batch-7"), u64(TagToken, 9), u32(TagLease, 30000)}},
		{"cancel", TypeCancel, 8, []f{u64(TagTarget, 3)}},
		{"describe", TypeDescribe, 9, []f{str(TagKey, "jobs/nightly")}},
		{"ping", TypePing, 10, nil},
		{"close", TypeClose, 11, nil},
		{"watch of a prefix", TypeWatch, 12, []f{str(TagKey, "jobs/")}},
		{"welcome", TypeWelcome, 1, []f{u64(TagSession, 42), raw(TagSecret, secret), u32(TagTTL, 10000),
			u32(TagKeepalive, 3334), str(TagServer, "lcd 1.0.0")}},
		{"welcome of a resume", TypeWelcome, 1, []f{u64(TagSession, 42), raw(TagSecret, secret), u32(TagTTL, 10000),
			u32(TagKeepalive, 3334), str(TagServer, "lcd 1.0.0"), u64(TagApplied, 7),
			list(TagHeld, str(TagKey, "jobs/nightly"), u64(TagToken, 12), u64(TagRequest, 2), u8(TagMode, 0), u32(TagCount, 1)),
			list(TagHeld, str(TagKey, "orders/batch-7"), u64(TagToken, 13), u64(TagRequest, 4), u8(TagMode, 1), u32(TagCount, 2), u32(TagLeft, 29000)),
			list(TagParked, str(TagKey, "pool"), u64(TagRequest, 5))}},
		{"granted", TypeGranted, 2, []f{str(TagKey, "jobs/nightly"), u64(TagToken, 0x181b2c3d4e5f6071), u32(TagCount, 1)}},
		{"granted with a lease", TypeGranted, 4, []f{str(TagKey, "orders/batch-7"), u64(TagToken, 13), u32(TagCount, 1), u32(TagLeft, 30000)}},
		{"ok", TypeOK, 6, nil},
		{"ok of a renew", TypeOK, 7, []f{u32(TagLeft, 30000)}},
		{"refused busy", TypeRefused, 2, []f{u8(TagCode, uint8(CodeBusy)), str(TagMessage, "the key is held")}},
		{"refused stale token", TypeRefused, 6, []f{u8(TagCode, uint8(CodeStaleToken)), str(TagMessage, "stale")}},
		{"lost", TypeLost, 4, []f{str(TagKey, "orders/batch-7"), u64(TagToken, 13), u8(TagCode, uint8(CodeLeaseExpired))}},
		{"info", TypeInfo, 9, []f{str(TagKey, "jobs/nightly"), u32(TagQueue, 2), list(TagHolder, u64(TagToken, 12),
			str(TagName, "cron-1"), u64(TagSession, 42), u32(TagHeldFor, 1500), u8(TagMode, 0), u32(TagCount, 1))}},
		{"info of a free key in lock-delay", TypeInfo, 9, []f{str(TagKey, "k"), u32(TagQueue, 0), u32(TagLeft, 800)}},
		{"goodbye", TypeGoodbye, 0, []f{u8(TagCode, uint8(CodeSessionExpired)), str(TagMessage, "expired")}},
		{"goodbye not_leader", TypeGoodbye, 0, []f{u8(TagCode, uint8(CodeNotLeader)), str(TagMessage, "not the leader"),
			str(TagLeader, "10.0.0.2:22119")}},
		{"event", TypeEvent, 12, []f{u8(TagEvent, 1), str(TagKey, "jobs/nightly"), u64(TagToken, 12),
			u64(TagSession, 42), str(TagName, "cron-1"), u64(TagAt, 1796000000123)}},
		{"welcome of a resume, the first of three frames", TypeWelcome, 1, []f{u64(TagSession, 42), raw(TagSecret, secret),
			u32(TagTTL, 10000), u32(TagKeepalive, 3334), str(TagServer, "lcd 1.0.0"), u64(TagApplied, 8),
			list(TagHeld, str(TagKey, "jobs/nightly"), u64(TagToken, 12), u64(TagRequest, 2), u8(TagMode, 0), u32(TagCount, 1)),
			list(TagHeld, str(TagKey, "orders/batch-7"), u64(TagToken, 13), u64(TagRequest, 4), u8(TagMode, 1), u32(TagCount, 2), u32(TagLeft, 29000)),
			u8(TagMore, 1)}},
		{"more of a welcome, another to come", TypeMore, 1, []f{list(TagParked, str(TagKey, "pool"), u64(TagRequest, 5)),
			u8(TagMore, 1)}},
		{"more of a welcome, the last", TypeMore, 1, []f{list(TagParked, str(TagKey, "queue"), u64(TagRequest, 8))}},
		{"info, the first of two frames", TypeInfo, 9, []f{str(TagKey, "jobs/nightly"), u32(TagQueue, 0),
			list(TagHolder, u64(TagToken, 12), str(TagName, "cron-1"), u64(TagSession, 42), u32(TagHeldFor, 1500),
				u8(TagMode, 1), u32(TagCount, 1)), u8(TagMore, 1)}},
		{"more of an info, the last", TypeMore, 9, []f{list(TagHolder, u64(TagToken, 14), str(TagName, "cron-2"),
			u64(TagSession, 43), u32(TagHeldFor, 900), u8(TagMode, 1), u32(TagCount, 1))}},
		{"refused unsupported, answering a hello", TypeRefused, 1, []f{u8(TagCode, uint8(CodeUnsupported)),
			str(TagMessage, "field 0x7f is not supported here")}},
		{"goodbye answering a resume", TypeGoodbye, 1, []f{u8(TagCode, uint8(CodeUnknownSession)),
			str(TagMessage, "no such session, or a wrong secret")}},
		{"acquire with a holder's note", TypeAcquire, 13, []f{str(TagKey, "deploy/prod"),
			str(TagNote, "deploy 4.2 by ana from ci-7 · run 8812")}},
		{"info with a holder's note", TypeInfo, 14, []f{str(TagKey, "deploy/prod"), u32(TagQueue, 0),
			list(TagHolder, u64(TagToken, 15), str(TagName, "ci-7"), u64(TagSession, 44), u32(TagHeldFor, 2000),
				u8(TagMode, 0), u32(TagCount, 1), str(TagNote, "deploy 4.2 by ana from ci-7 · run 8812"))}},
		{"event with a holder's note", TypeEvent, 12, []f{u8(TagEvent, 1), str(TagKey, "deploy/prod"), u64(TagToken, 15),
			u64(TagSession, 44), str(TagName, "ci-7"), u64(TagAt, 1796000000456),
			str(TagNote, "deploy 4.2 by ana from ci-7 · run 8812")}},
	}
	var out []vectorFrame
	for _, c := range cases {
		b := frameOf(c.t, c.id, c.fields...)
		var fr Frame
		ParseFrame(b, &fr)
		vf := vectorFrame{Name: c.name, Type: int(c.t), ID: c.id, Hex: hex.EncodeToString(b), Fields: []vectorField{}}
		for _, fl := range fr.Fields {
			vf.Fields = append(vf.Fields, vectorField{Tag: int(fl.Tag), Hex: hex.EncodeToString(fl.Value)})
		}
		out = append(out, vf)
	}
	return out
}

func buildVectors() vectorFile {
	v := vectorFile{
		About: "Frames of the session protocol (docs/protocol.md): each frame's bytes in hex, its type, id and " +
			"fields (tag and value in hex, in order; list items hold fields of their own). A client's encoder " +
			"must produce frame_hex from the fields, and its decoder the fields from frame_hex.",
		Preface: hex.EncodeToString([]byte(Preface)),
		Frames:  vectors(),
		Types:   map[string]int{},
		Tags:    map[string]int{},
		Codes:   map[string]int{},
	}
	for name, t := range map[string]Type{"hello": TypeHello, "resume": TypeResume, "acquire": TypeAcquire,
		"release": TypeRelease, "renew": TypeRenew, "cancel": TypeCancel, "describe": TypeDescribe, "ping": TypePing,
		"close": TypeClose, "watch": TypeWatch, "event": TypeEvent, "welcome": TypeWelcome, "granted": TypeGranted, "ok": TypeOK, "refused": TypeRefused,
		"lost": TypeLost, "info": TypeInfo, "goodbye": TypeGoodbye, "more": TypeMore} {
		v.Types[name] = int(t)
	}
	for name, t := range map[string]Tag{"key": TagKey, "name": TagName, "ttl_ms": TagTTL, "credential": TagCredential,
		"session": TagSession, "secret": TagSecret, "token": TagToken, "wait_ms": TagWait, "lease_ms": TagLease,
		"delay_ms": TagDelay, "target": TagTarget, "server": TagServer, "code": TagCode, "message": TagMessage,
		"queue": TagQueue, "applied": TagApplied, "left_ms": TagLeft, "held_ms": TagHeldFor,
		"keepalive_ms": TagKeepalive, "request": TagRequest, "mode": TagMode, "limit": TagLimit,
		"priority": TagPriority, "reentrant": TagReentrant, "owner": TagOwner, "count": TagCount, "held": TagHeld,
		"parked": TagParked, "holder": TagHolder, "event": TagEvent, "at_ms": TagAt, "leader": TagLeader, "more": TagMore, "lapse": TagLapse,
		"note": TagNote} {
		v.Tags[name] = int(t)
	}
	for c, name := range codeNames {
		v.Codes[name] = int(c)
	}
	return v
}

// The vectors file matches what this server encodes and decodes; run go
// test -update after a change of the protocol.
func TestSessionVectors(t *testing.T) {
	want, err := json.MarshalIndent(buildVectors(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
	if *update {
		if err := os.WriteFile(vectorsPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(vectorsPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale; run go test ./session -run TestSessionVectors -update", vectorsPath)
	}
	// Every frame decodes and re-encodes to its bytes.
	for _, vf := range buildVectors().Frames {
		b, _ := hex.DecodeString(vf.Hex)
		var fr Frame
		if n, err := ParseFrame(b, &fr); err != nil || n != len(b) {
			t.Fatalf("%s: %v (%d of %d bytes)", vf.Name, err, n, len(b))
		}
	}
}

// The byte example of Long answers in docs/protocol.md, and the frames
// it shows beside it, have the bytes of the vectors.
func TestProtocolDocLongAnswerBytes(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "protocol.md"))
	if err != nil {
		t.Fatal(err)
	}
	spaced := func(b []byte) string {
		h := hex.EncodeToString(b)
		var parts []string
		for i := 0; i < len(h); i += 2 {
			parts = append(parts, strings.ToUpper(h[i:i+2]))
		}
		return strings.Join(parts, " ")
	}
	shown := map[string]bool{"hello": true, "acquire, try once": true, "more of a welcome, another to come": true}
	for _, vf := range buildVectors().Frames {
		if !shown[vf.Name] {
			continue
		}
		b, _ := hex.DecodeString(vf.Hex)
		head := spaced(b[:13])
		if !bytes.Contains(doc, []byte(head)) {
			t.Errorf("docs/protocol.md does not show the header %q of the %s frame", head, vf.Name)
		}
		for _, fl := range vf.Fields {
			v, _ := hex.DecodeString(fl.Hex)
			field := spaced(append([]byte{byte(fl.Tag), byte(len(v) >> 8), byte(len(v))}, v...))
			if !bytes.Contains(doc, []byte(field)) {
				t.Errorf("docs/protocol.md does not show the field %q of the %s frame", field, vf.Name)
			}
		}
	}
}
