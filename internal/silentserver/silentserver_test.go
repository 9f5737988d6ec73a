package silentserver

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("runtime.runCleanups"))
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestHoldsWithoutAnswering(t *testing.T) {
	s, err := Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := dial(t, s.Addr())
	if _, err := c.Write([]byte{5, 1, 'k', 0}); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	var b [1]byte
	if n, err := c.Read(b[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read from the silent server = %d bytes, %v; want a timeout", n, err)
	}
}

func TestAnswersWhatItIsToldTo(t *testing.T) {
	s, err := Listen("127.0.0.1:0", func(action byte) (byte, bool) { return '+', action == 1 })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := dial(t, s.Addr())
	c.Write([]byte{1, 1, 'k', 0})
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "+" {
		t.Fatalf("answer to a lock = %q, %v; want + and end of stream", got, err)
	}
}

func TestCloseEndsHeldConnections(t *testing.T) {
	s, err := Listen("127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, s.Addr())
	c.Write([]byte{2, 1, 'k'})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	// End of stream or a reset: either way the server let go.
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadAll(c); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the connection outlived Close")
	}
}
