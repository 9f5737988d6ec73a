package session

import (
	"path/filepath"
	"strings"
	"testing"
)

func hasField(f Frame, t Tag) bool { _, ok := f.Get(t); return ok }

func note(s string) func(*frameBuilder) { return func(fb *frameBuilder) { fb.str(TagNote, s) } }

// describeNotes returns the note of each holder of key, from DESCRIBE.
func (c *client) describeNotes(key string) []string {
	c.send(TypeDescribe, func(fb *frameBuilder) { fb.str(TagKey, key) })
	f, _ := c.answer()
	var out []string
	for _, item := range f.All(TagHolder) {
		var h Frame
		h.Fields, _ = parseFields(item, nil)
		n, _ := h.Get(TagNote)
		out = append(out, string(n))
	}
	return out
}

// The holder's note: an ACQUIRE's note is shown by DESCRIBE and in the
// WATCH events of its grant, is kept in the write-ahead log across a
// restart, and must be UTF-8 of at most 1,024 bytes.
func TestHolderNote(t *testing.T) {
	path := filepath.Join(t.TempDir(), "locks.wal")
	e, stop := startDurable(t, path)
	w := e.hello(t, "watcher")
	watch := w.send(TypeWatch)
	w.expect(TypeOK)

	a := e.hello(t, "ci-7")
	text := "deploy 4.2 by ana · run 8812"
	a.granted(a.acquire("deploy/prod", note(text)))
	ev := w.expect(TypeEvent)
	if n, _ := ev.Get(TagNote); ev.ID != watch || string(n) != text {
		t.Fatalf("EVENT %+v: note %q, want %q", ev, n, text)
	}
	a.granted(a.acquire("plain"))
	if ev := w.expect(TypeEvent); hasField(ev, TagNote) {
		t.Fatal("an EVENT of a grant without a note carries one")
	}
	b := e.hello(t, "shared")
	shared := func(fb *frameBuilder) { fb.u8(TagMode, 1) }
	b.granted(b.acquire("wide", shared, note("reader one")))
	b.granted(b.acquire("wide", shared))
	if got := b.describeNotes("wide"); len(got) != 2 || got[0] != "reader one" || got[1] != "" {
		t.Fatalf("notes of wide %q", got)
	}

	a.expectRefused(a.acquire("bad", note("\xff\xfe")), CodeBadRequest)
	max := strings.Repeat("é", 512) // 1,024 bytes
	a.granted(a.acquire("max", note(max)))
	over := a.send(TypeAcquire, func(fb *frameBuilder) { fb.str(TagKey, "over") }, note(max+"x"))
	if f := a.expect(TypeGoodbye); f.ID != 0 {
		t.Fatalf("GOODBYE of id %d answering %d", f.ID, over)
	} else if code, _ := f.Uint(TagCode); Code(code) != CodeProtocolError {
		t.Fatalf("a note of 1,025 bytes: GOODBYE %v, want protocol_error", Code(code))
	}

	stop()
	e, stop = startDurable(t, path)
	defer stop()
	if got := e.node.Describe("deploy/prod").Holders; len(got) != 1 || got[0].Note != text {
		t.Fatalf("after a restart: holders %+v", got)
	}
	if got := e.node.Describe("max").Holders; len(got) != 1 || got[0].Note != max {
		t.Fatal("the note of 1,024 bytes did not survive the restart")
	}
}
