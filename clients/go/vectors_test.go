package lockingcenter

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/locking-center/locking-center/oneshot"
)

// vectors mirrors clients/testdata/vectors.json, the protocol vectors every
// client's tests share.
type vectors struct {
	Actions  map[string]byte `json:"actions"`
	Requests []struct {
		Name       string `json:"name"`
		Action     string `json:"action"`
		ActionByte byte   `json:"action_byte"`
		KeyHex     string `json:"key_hex"`
		SourceHex  string `json:"source_hex"`
		RequestHex string `json:"request_hex"`
	} `json:"requests"`
	Answers []struct {
		Action    string `json:"action"`
		AnswerHex string `json:"answer_hex"`
		Result    string `json:"result"`
	} `json:"answers"`
	InvalidKeys []struct {
		Name   string `json:"name"`
		KeyHex string `json:"key_hex"`
	} `json:"invalid_keys"`
	InvalidSources []struct {
		Name      string `json:"name"`
		SourceHex string `json:"source_hex"`
	} `json:"invalid_sources"`
}

func loadVectors(t *testing.T) vectors {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v vectors
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("vectors.json: %v", err)
	}
	if len(v.Requests) == 0 || len(v.Answers) == 0 || len(v.InvalidKeys) == 0 {
		t.Fatal("vectors.json: a section is empty")
	}
	return v
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("hex %q: %v", s, err)
	}
	return b
}

func TestEncodeRequestVectors(t *testing.T) {
	v := loadVectors(t)
	for _, r := range v.Requests {
		t.Run(r.Name, func(t *testing.T) {
			if v.Actions[r.Action] != r.ActionByte {
				t.Fatalf("action %q is %d in the table, %d in the vector", r.Action, v.Actions[r.Action], r.ActionByte)
			}
			key, source := unhex(t, r.KeyHex), unhex(t, r.SourceHex)
			want := unhex(t, r.RequestHex)
			if got := EncodeRequest(r.ActionByte, string(key), string(source)); string(got) != string(want) {
				t.Errorf("EncodeRequest = %x, want %x", got, want)
			}
		})
	}
}

// TestVectorsMatchServer checks the shared vectors against the server's own
// decoder, so that no client can agree with a wrong file.
func TestVectorsMatchServer(t *testing.T) {
	v := loadVectors(t)
	for _, r := range v.Requests {
		wire := unhex(t, r.RequestHex)
		req, n, err := oneshot.DecodeRequest(wire)
		if err != nil || n != len(wire) {
			t.Errorf("%s: server decodes %d of %d bytes, err %v", r.Name, n, len(wire), err)
			continue
		}
		if byte(req.Action) != r.ActionByte || req.Key != string(unhex(t, r.KeyHex)) || req.Source != string(unhex(t, r.SourceHex)) {
			t.Errorf("%s: server decodes %+v", r.Name, req)
		}
	}
	for _, k := range v.InvalidKeys {
		if (oneshot.Request{Action: oneshot.ActionUnlock, Key: string(unhex(t, k.KeyHex))}).Validate() == nil {
			t.Errorf("invalid key %s: the server accepts it", k.Name)
		}
	}
	for _, s := range v.InvalidSources {
		r := oneshot.Request{Action: oneshot.ActionResetSource, Source: string(unhex(t, s.SourceHex))}
		if r.Validate() == nil {
			t.Errorf("invalid source %s: the server accepts it", s.Name)
		}
	}
}

// deadAddr returns a 127.0.0.1 address where nothing listens.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestInvalidKeysRefusedBeforeConnecting(t *testing.T) {
	v := loadVectors(t)
	ctx := context.Background()
	c := New(deadAddr(t))
	for _, k := range v.InvalidKeys {
		key := string(unhex(t, k.KeyHex))
		calls := map[string]func() error{
			"lock":      func() error { return c.Lock(ctx, key) },
			"trylock":   func() error { return c.TryLock(ctx, key) },
			"unlock":    func() error { return c.Unlock(ctx, key) },
			"wait":      func() error { return c.Wait(ctx, key) },
			"reset-key": func() error { return c.ResetByKey(ctx, key) },
		}
		for name, call := range calls {
			if err := call(); !errors.Is(err, ErrInvalidKey) {
				t.Errorf("%s with key %s: %v, want ErrInvalidKey", name, k.Name, err)
			}
		}
	}
	for _, s := range v.InvalidSources {
		source := string(unhex(t, s.SourceHex))
		if err := c.ResetBySource(ctx, source); !errors.Is(err, ErrInvalidSource) {
			t.Errorf("reset-source %s: %v, want ErrInvalidSource", s.Name, err)
		}
		if err := New(c.Addr(), WithSource(source)).Lock(ctx, "k"); !errors.Is(err, ErrInvalidSource) {
			t.Errorf("lock with source %s: %v, want ErrInvalidSource", s.Name, err)
		}
	}
}

// answerServer answers every request on a fresh 127.0.0.1 port with the
// byte a, after reading the whole request.
func answerServer(t *testing.T, a byte) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			var req []byte
			chunk := make([]byte, 512)
			for {
				n, err := conn.Read(chunk)
				if err != nil {
					break
				}
				req = append(req, chunk[:n]...)
				if _, _, err := oneshot.DecodeRequest(req); err == nil {
					conn.Write([]byte{a})
					break
				}
			}
			conn.Close()
		}
	}()
	return ln.Addr().String()
}

func TestAnswerVectors(t *testing.T) {
	v := loadVectors(t)
	ctx := context.Background()
	for _, a := range v.Answers {
		t.Run(a.Action+"/"+a.AnswerHex, func(t *testing.T) {
			c := New(answerServer(t, unhex(t, a.AnswerHex)[0]), WithSource("vectors"))
			var err error
			switch a.Action {
			case "lock":
				err = c.Lock(ctx, "k")
			case "unlock":
				err = c.Unlock(ctx, "k")
			case "reset-key":
				err = c.ResetByKey(ctx, "k")
			case "reset-source":
				err = c.ResetBySource(ctx, "vectors")
			case "trylock":
				err = c.TryLock(ctx, "k")
			default:
				t.Fatalf("unknown action %q", a.Action)
			}
			var got string
			switch {
			case err == nil:
				got = "ok"
			case errors.Is(err, ErrBusy):
				got = "busy"
			default:
				got = "failed"
			}
			if got != a.Result {
				t.Errorf("result %s (err %v), want %s", got, err, a.Result)
			}
		})
	}
}
