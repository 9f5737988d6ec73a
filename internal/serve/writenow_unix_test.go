//go:build unix

package serve

import (
	"bytes"
	"io"
	"net"
	"testing"
)

// TestNowWriter writes with Write and WritePush to a TCP connection and
// reads both back in order, then fills the socket: a write that would
// wait returns what the socket took, and no error.
func TestNowWriter(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	var w NowWriter
	w.Init(server)
	if w.Raw() == nil {
		t.Fatal("a TCP connection has no descriptor")
	}
	if n, err := w.Write([]byte("answer ")); n != 7 || err != nil {
		t.Fatalf("Write = %d, %v; want 7, nil", n, err)
	}
	if n, err := w.WritePush([]byte("pushed")); n != 6 || err != nil {
		t.Fatalf("WritePush = %d, %v; want 6, nil", n, err)
	}
	got := make([]byte, 13)
	if _, err := io.ReadFull(client, got); err != nil || string(got) != "answer pushed" {
		t.Fatalf("read %q, %v; want %q", got, err, "answer pushed")
	}
	big := bytes.Repeat([]byte{'x'}, 64<<20)
	n, err := w.WritePush(big)
	if err != nil || n <= 0 || n >= len(big) {
		t.Fatalf("WritePush of 64 MiB unread = %d, %v; want part of it, nil", n, err)
	}
	if m, err := w.Write(big); err != nil || m >= len(big) {
		t.Fatalf("Write into a full socket = %d, %v; want less than all, nil", m, err)
	}
}
