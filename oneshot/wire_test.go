package oneshot

import (
	"bytes"
	"errors"
	"github.com/locking-center/locking-center/mutex"
	"strings"
	"testing"
)

func TestDecodeRequest(t *testing.T) {
	long := strings.Repeat("k", mutex.MaxKeyLen)
	for _, tc := range []struct {
		name string
		in   []byte
		want Request
		err  error
	}{
		{"lock", []byte{1, 2, 'o', 'k', 1, 's'}, Request{ActionLock, "ok", "s"}, nil},
		{"lock empty source", []byte{1, 1, 'k', 0}, Request{ActionLock, "k", ""}, nil},
		{"trylock", []byte{5, 1, 0xff, 0}, Request{ActionTryLock, "\xff", ""}, nil},
		{"unlock", []byte{2, 1, 0}, Request{ActionUnlock, "\x00", ""}, nil},
		{"reset", []byte{3, 1, 'a'}, Request{ActionResetKey, "a", ""}, nil},
		{"reset source", []byte{4, 0}, Request{ActionResetSource, "", ""}, nil},
		{"127-byte key", append([]byte{2, 127}, long...), Request{ActionUnlock, long, ""}, nil},
		{"empty", nil, Request{}, errIncomplete},
		{"no key yet", []byte{1}, Request{}, errIncomplete},
		{"short key", []byte{1, 3, 'a'}, Request{}, errIncomplete},
		{"no source length", []byte{1, 1, 'a'}, Request{}, errIncomplete},
		{"key length 0", []byte{1, 0}, Request{}, ErrMalformed},
		{"key length 128", []byte{2, 128}, Request{}, ErrMalformed},
		{"source length 255", []byte{5, 1, 'a', 255}, Request{}, ErrMalformed},
		{"action 0", []byte{0}, Request{}, ErrMalformed},
		{"action 6", []byte{6}, Request{}, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, n, err := DecodeRequest(tc.in)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if err == nil && (got != tc.want || n != len(tc.in)) {
				t.Fatalf("got %+v (%d bytes), want %+v (%d bytes)", got, n, tc.want, len(tc.in))
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		r   Request
		err error
	}{
		{Request{ActionLock, "k", ""}, nil},
		{Request{ActionLock, "", ""}, mutex.ErrKeyEmpty},
		{Request{ActionUnlock, strings.Repeat("x", 128), ""}, mutex.ErrKeyTooLong},
		{Request{ActionTryLock, "k", strings.Repeat("s", 128)}, mutex.ErrSourceTooLong},
		{Request{ActionResetSource, "", ""}, nil},
		{Request{Action: 9}, ErrMalformed},
	} {
		if err := tc.r.Validate(); !errors.Is(err, tc.err) {
			t.Errorf("%+v: Validate = %v, want %v", tc.r, err, tc.err)
		}
	}
}

// FuzzDecodeRequest feeds the decoder arbitrary bytes, whole and split at
// every point, as a connection would deliver them.
func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte{1, 10, 'l', 'o', 'c', 'k', 'i', 'n', 'g', '-', 'm', 'e', 0})
	f.Add([]byte{5, 1, 0xff, 3, 'a', 'b', 'c'})
	f.Add([]byte{4, 8, '1', '0', '.', '0', '.', '0', '.', '4'})
	f.Add([]byte{2, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		req, n, err := DecodeRequest(b)
		switch {
		case err == nil:
			if n < 1 || n > len(b) || n > maxRequestLen {
				t.Fatalf("used %d of %d bytes", n, len(b))
			}
			if err := req.Validate(); err != nil {
				t.Fatalf("decoded an invalid request %+v: %v", req, err)
			}
			if enc := AppendRequest(nil, req); !bytes.Equal(enc, b[:n]) {
				t.Fatalf("re-encoded %x, want %x", enc, b[:n])
			}
		case errors.Is(err, errIncomplete), errors.Is(err, ErrMalformed):
		default:
			t.Fatalf("unexpected error %v", err)
		}
		// Every proper prefix of a whole request is incomplete; a prefix of
		// malformed bytes is incomplete or malformed, never a request.
		for i := 0; i < len(b) && i < maxRequestLen; i++ {
			_, _, perr := DecodeRequest(b[:i])
			if err == nil && i < n && !errors.Is(perr, errIncomplete) {
				t.Fatalf("prefix %d of a request: %v", i, perr)
			}
			if errors.Is(err, ErrMalformed) && perr == nil {
				t.Fatalf("prefix %d of malformed bytes decoded", i)
			}
		}
	})
}
