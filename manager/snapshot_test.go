package manager

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/locking-center/locking-center/auth"
	"github.com/locking-center/locking-center/mutex"
	"github.com/locking-center/locking-center/store"
)

// A snapshot is a snapshot file of the table the node holds: read back,
// it exports the same records.
func TestSnapshot(t *testing.T) {
	tb, c := start(t)
	lock(t, tb, "a\xff", "x")
	lock(t, tb, "b", "y")
	var buf bytes.Buffer
	n, err := c.Snapshot(context.Background(), &buf)
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("snapshot: %d bytes, %v; %d received", n, err, buf.Len())
	}
	got, _, err := store.ReadSnapshotFile(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if want := exported(tb.Clone()); !slices.Equal(exported(got), want) {
		t.Fatalf("snapshot holds\n%v\nthe node\n%v", exported(got), want)
	}
}

// exported is every record t exports, printed.
func exported(t *mutex.Table) []string {
	var out []string
	t.Export(func(r *mutex.Record) { out = append(out, fmt.Sprintf("%+v", *r)) })
	return out
}

// With authentication on only an admin gets a snapshot; the others are
// refused with code 8.
func TestSnapshotNeedsAnAdmin(t *testing.T) {
	toks, err := auth.Parse(strings.NewReader("ops admin ops-token-0123456789\nsvc client svc-token-0123456789\n"))
	if err != nil {
		t.Fatal(err)
	}
	tb, c := startWith(t, Config{Tokens: toks})
	lock(t, tb, "k", "x")
	for _, token := range []string{"", "svc-token-0123456789", "unknown-token-000000"} {
		c.Token = token
		var buf bytes.Buffer
		var r *Refusal
		if _, err := c.Snapshot(context.Background(), &buf); !errors.Is(err, ErrNotAdmin) || !errors.As(err, &r) ||
			r.Code != CodeNotAdmin || buf.Len() != 0 {
			t.Errorf("snapshot with token %q: %v, %d bytes", token, err, buf.Len())
		}
	}
	c.Token = "ops-token-0123456789"
	var buf bytes.Buffer
	if _, err := c.Snapshot(context.Background(), &buf); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.ReadSnapshotFile(&buf); err != nil {
		t.Fatal(err)
	}
}

// A server that answers '-' alone, as an lcd older than the command does,
// is told apart from a refusal; one that ends the stream before its
// status is an error too.
func TestSnapshotOfAnOlderServer(t *testing.T) {
	for answer, want := range map[string]error{"-": ErrNoSnapshots, "": nil, "?": ErrMalformed} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan []byte, 1)
		go func() {
			conn, err := ln.Accept()
			if err != nil {
				done <- nil
				return
			}
			req := make([]byte, 16)
			n, _ := conn.Read(req)
			conn.Write([]byte(answer))
			conn.Close()
			done <- req[:n]
		}()
		_, err = (&Client{Addr: ln.Addr().String()}).Snapshot(context.Background(), &bytes.Buffer{})
		if req := <-done; !bytes.Equal(req, []byte{byte(CmdSnapshot)}) {
			t.Errorf("request %v, want [12]", req)
		}
		ln.Close()
		switch {
		case want != nil && !errors.Is(err, want):
			t.Errorf("answer %q: %v, want %v", answer, err, want)
		case want == nil && err == nil:
			t.Errorf("answer %q: no error", answer)
		}
	}
}
