package session

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzParseFrame feeds arbitrary bytes to the frame decoder, whole and
// split at every point. It must not panic, must use no more bytes than it
// was given, must say "incomplete" for every prefix of a frame it accepts,
// and a frame it accepts must encode back to the same bytes. The seed
// corpus is in testdata/fuzz/FuzzParseFrame.
func FuzzParseFrame(f *testing.F) {
	for _, vf := range vectors() {
		b, _ := hex.DecodeString(vf.Hex)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr Frame
		n, err := ParseFrame(b, &fr)
		if err != nil {
			if n != 0 || !errors.Is(err, ErrProtocol) && !errors.Is(err, errIncomplete) {
				t.Fatalf("error %v with %d bytes used", err, n)
			}
			return
		}
		if n < 4+frameHeader || n > len(b) {
			t.Fatalf("used %d of %d bytes", n, len(b))
		}
		for cut := 0; cut < n; cut++ {
			var g Frame
			if _, err := ParseFrame(b[:cut], &g); !errors.Is(err, errIncomplete) {
				t.Fatalf("a prefix of %d bytes of a whole frame: %v", cut, err)
			}
		}
		fb := begin(nil, fr.Type, fr.ID)
		for _, fl := range fr.Fields {
			fb.bytes(fl.Tag, fl.Value)
		}
		if again := fb.end(); !bytes.Equal(again, b[:n]) {
			t.Fatalf("re-encoded %x, want %x", again, b[:n])
		}
	})
}

// The seed corpus of FuzzParseFrame is committed; -update rewrites it.
func TestFuzzSeedCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzParseFrame")
	seeds := map[string][]byte{"empty": {}, "too-long": {0, 1, 0, 1, 1}, "unknown-type": frameOf(0x33, 1)}
	for i, vf := range vectors() {
		b, _ := hex.DecodeString(vf.Hex)
		seeds[fmt.Sprintf("vector-%02d", i)] = b
		seeds[fmt.Sprintf("vector-%02d-cut", i)] = b[:len(b)/2]
	}
	for name, b := range seeds {
		file := filepath.Join(dir, name)
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if *update {
			os.MkdirAll(dir, 0o755)
			os.WriteFile(file, []byte(want), 0o644)
		}
		if got, err := os.ReadFile(file); err != nil || string(got) != want {
			t.Fatalf("%s is missing or stale (%v); run go test ./session -update", file, err)
		}
	}
}

// Random and truncated bytes after a HELLO never take the server down:
// each connection gets a GOODBYE or is left waiting for more bytes, and
// another session is served throughout.
func TestRandomBytesKeepServing(t *testing.T) {
	e := start(t, envOptions{})
	good := e.hello(t, "good")
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		b := []byte(Preface)
		b = append(b, frameOf(TypeHello, 1)...)
		junk := make([]byte, rng.IntN(300))
		for j := range junk {
			junk[j] = byte(rng.Uint32())
		}
		if i%3 == 0 && len(junk) > 4 { // a length that passes, then garbage
			junk[0], junk[1], junk[2], junk[3] = 0, 0, 0, byte(len(junk)-4)
		}
		c.Write(append(b, junk...))
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		var buf [4096]byte
		c.Read(buf[:])
		c.Close()
		if i%20 == 0 {
			good.granted(good.acquire(fmt.Sprint("still-", i), wait(0)))
		}
	}
	good.granted(good.acquire("after", wait(0)))
}
