package session

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/internal/nodetest"
	"github.com/locking-center/locking-center/mutex"
)

// longKey returns the 127-byte key number i of prefix p.
func longKey(p string, i int) string {
	k := fmt.Sprintf("%s-%d-", p, i)
	return k + strings.Repeat("x", mutex.MaxKeyLen-len(k))
}

// items decodes the list items tagged t of f.
func items(t *testing.T, f *Frame, tag Tag) []Frame {
	t.Helper()
	var out []Frame
	for _, v := range f.All(tag) {
		var it Frame
		var err error
		if it.Fields, err = parseFields(v, nil); err != nil {
			t.Fatalf("item %#02x: %v", uint8(tag), err)
		}
		out = append(out, it)
	}
	return out
}

// listed returns the list items tagged t of f by key, each with its
// integer field v, failing when a key is listed twice.
func listed(t *testing.T, f *Frame, tag, v Tag) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, it := range items(t, f, tag) {
		k, _ := it.Get(TagKey)
		if _, twice := out[string(k)]; twice {
			t.Fatalf("%q listed twice", k)
		}
		out[string(k)], _ = it.Uint(v)
	}
	return out
}

// A session holding 10,000 keys of 127 bytes, with requests parked
// besides, resumes: its WELCOME comes in frames within the limit (the
// server's own check sees every frame it writes), every held key and
// parked request is listed once with its token and request id, and the
// grant made while the session was away comes after the last of them.
func TestResumeLongWelcome(t *testing.T) {
	const nHeld, nParked = 10_000, 300
	e := start(t, envOptions{})
	a := e.hello(t, "a", ttl(300_000))
	b := e.hello(t, "b", ttl(300_000))       // idle while a takes its keys, which can outlast the default TTL under -race
	tokens := make(map[string]uint64, nHeld) // a's keys
	leased := map[string]bool{}
	for from := 0; from < nHeld; from += 500 {
		var batch []byte
		for i := from; i < from+500; i++ {
			a.id++
			var opts []func(*frameBuilder)
			if i%10 == 0 {
				opts = append(opts, lease(600_000))
				leased[longKey("held", i)] = true
			}
			batch = append(batch, frameOf(TypeAcquire, a.id, append([]func(*frameBuilder){
				func(fb *frameBuilder) { fb.str(TagKey, longKey("held", i)) }, wait(0)}, opts...)...)...)
		}
		a.write(batch)
		for i := from; i < from+500; i++ {
			tokens[longKey("held", i)] = a.granted(a.id - uint64(from+499-i))
		}
	}
	bTokens := make([]uint64, nParked)
	parkedIDs := make(map[string]uint64, nParked) // key: a's request
	for i := range nParked {
		bTokens[i] = b.granted(b.acquire(longKey("parked", i), wait(0)))
		parkedIDs[longKey("parked", i)] = a.acquire(longKey("parked", i))
	}
	eventually(t, "the parked requests", func() bool { return parked(e.node, longKey("parked", nParked-1)) == 1 })
	a.c.Close()
	eventually(t, "a detached", func() bool {
		for _, s := range e.node.Snapshot().Sessions {
			if s.ID == a.sid {
				return s.RemoteAddr == ""
			}
		}
		return false
	})
	b.release(longKey("parked", 0), bTokens[0]) // granted while a is away
	awayID := parkedIDs[longKey("parked", 0)]
	delete(parkedIDs, longKey("parked", 0))

	r := e.dial(t)
	begun := time.Now()
	r.send(TypeResume, func(fb *frameBuilder) { fb.u64(TagSession, a.sid) }, func(fb *frameBuilder) { fb.bytes(TagSecret, a.sec) })
	w, frames := r.answer()
	t.Logf("a WELCOME of %d held and %d parked in %d frames, read in %v", nHeld+1, nParked-1, frames, time.Since(begun))
	if w.Type != TypeWelcome || frames < 2 {
		t.Fatalf("frame %#02x in %d frames, want a WELCOME in several", uint8(w.Type), frames)
	}
	if applied, _ := w.Uint(TagApplied); applied != a.id {
		t.Fatalf("applied %d, want %d", applied, a.id)
	}
	if got := listed(t, &w, TagHeld, TagToken); len(got) != len(tokens)+1 {
		t.Fatalf("%d held, want %d", len(got), len(tokens)+1)
	} else {
		tokens[longKey("parked", 0)] = got[longKey("parked", 0)] // its GRANTED is still to come
		for k, tok := range got {
			if tokens[k] != tok {
				t.Fatalf("held %q token %d, want %d", k, tok, tokens[k])
			}
		}
	}
	for _, h := range items(t, &w, TagHeld) {
		k, _ := h.Get(TagKey)
		if _, left := h.Get(TagLeft); left != leased[string(k)] {
			t.Fatalf("held %q: left_ms given %v", k, left)
		}
	}
	got := listed(t, &w, TagParked, TagRequest)
	if len(got) != len(parkedIDs) {
		t.Fatalf("%d parked, want %d", len(got), len(parkedIDs))
	}
	for k, req := range got {
		if parkedIDs[k] != req {
			t.Fatalf("parked %q request %d, want %d", k, req, parkedIDs[k])
		}
	}
	// The grant made while away comes after the whole WELCOME.
	r.id = a.id
	if r.granted(awayID) == 0 {
		t.Fatal("no token")
	}
	id := r.send(TypePing)
	if f := r.expect(TypeOK); f.ID != id {
		t.Fatalf("OK of %d, want %d", f.ID, id)
	}
}

// A key with 10,000 shared holders named in 127 bytes is described whole,
// in several frames within the limit, and the next answer comes after.
func TestDescribeManyHolders(t *testing.T) {
	e := start(t, envOptions{})
	want, err := nodetest.SharedHolders(e.node, "wide", 10_000, func(i int) string { return longKey("holder", i) })
	if err != nil {
		t.Fatal(err)
	}
	c := e.hello(t, "c")
	c.acquire("wide")
	eventually(t, "the exclusive request parked", func() bool { return parked(e.node, "wide") == 1 })
	id := c.send(TypeDescribe, func(fb *frameBuilder) { fb.str(TagKey, "wide") })
	pid := c.send(TypePing)
	f, frames := c.answer()
	t.Logf("an INFO of %d holders in %d frames", len(want), frames)
	if f.Type != TypeInfo || f.ID != id || frames < 2 {
		t.Fatalf("frame %#02x id %d in %d frames, want an INFO of %d in several", uint8(f.Type), f.ID, frames, id)
	}
	if q, _ := f.Uint(TagQueue); q != 1 {
		t.Fatalf("queue %d, want 1", q)
	}
	holders := items(t, &f, TagHolder)
	if len(holders) != len(want) {
		t.Fatalf("%d holders, want %d", len(holders), len(want))
	}
	for _, h := range holders {
		tok, _ := h.Uint(TagToken)
		name, _ := h.Get(TagName)
		if mode, _ := h.Uint(TagMode); want[tok] != string(name) || mode != 1 {
			t.Fatalf("holder %d named %q mode %d, want %q shared", tok, name, mode, want[tok])
		}
		delete(want, tok)
	}
	if ok := c.expect(TypeOK); ok.ID != pid {
		t.Fatalf("OK of %d, want %d", ok.ID, pid)
	}
}

// A small answer is one frame, as it always was; one of exactly the limit
// is still one frame; one item more makes two, each within the limit.
func TestListAnswerFrames(t *testing.T) {
	build := func(sizes ...int) [][]byte {
		a := newListAnswer(nil, TypeInfo, 7)
		a.head.str(TagKey, "k")
		for _, size := range sizes {
			at := a.item(TagHolder)
			a.items.bytes(TagName, make([]byte, size))
			a.endItem(at)
		}
		return a.frames()
	}
	if fs := build(10, 10, 10); len(fs) != 1 {
		t.Fatalf("%d frames of a small answer", len(fs))
	}
	// An item of 100 name bytes takes 106 bytes; the head 9+4.
	const head, per = frameHeader + 4, 106
	fit := (MaxFrame - head) / per
	sizes := make([]int, fit, fit+1)
	for i := range sizes {
		sizes[i] = 100
	}
	last := MaxFrame - head - fit*per - 6 // the item that fills the frame to its last byte
	if fs := build(append(sizes, last)...); len(fs) != 1 || len(fs[0]) != 4+MaxFrame {
		t.Fatalf("%d frames, the first of %d bytes, of an answer of exactly the limit", len(fs), len(fs[0]))
	}
	fs := build(append(sizes, last+1)...)
	if len(fs) != 2 {
		t.Fatalf("%d frames of an answer one byte over", len(fs))
	}
	var f Frame
	items := 0
	for i, b := range fs {
		n, err := ParseFrame(b, &f)
		if err != nil || n != len(b) {
			t.Fatalf("frame %d: %v", i, err)
		}
		more, ok := f.Uint(TagMore)
		if last := i == len(fs)-1; ok == last || !last && more != 1 {
			t.Fatalf("frame %d of %d: more %d (%v)", i, len(fs), more, ok)
		}
		if want := map[bool]Type{true: TypeInfo, false: TypeMore}[i == 0]; f.Type != want || f.ID != 7 {
			t.Fatalf("frame %d: type %#02x id %d", i, uint8(f.Type), f.ID)
		}
		items += len(f.All(TagHolder))
	}
	if items != fit+1 {
		t.Fatalf("%d items in the frames, want %d", items, fit+1)
	}
}
