package session

import (
	"encoding/binary"
	"testing"
	"time"
)

// BenchmarkAcquireRelease runs ACQUIRE and RELEASE of one key on one
// session over loopback, one request at a time. The client side
// allocates nothing, so allocs/op are the server's for one cycle of two
// frames.
func BenchmarkAcquireRelease(b *testing.B) {
	e := start(b, envOptions{cfg: Config{ParkAfter: time.Second}}) // busy: it never parks
	c := e.hello(b, "bench")
	acquire := frameOf(TypeAcquire, 0, func(fb *frameBuilder) { fb.str(TagKey, "k") })
	release := frameOf(TypeRelease, 0, func(fb *frameBuilder) { fb.str(TagKey, "k") }, func(fb *frameBuilder) { fb.u64(TagToken, 0) })
	var f Frame
	// exchange writes frame with the next id and reads its answer of type t.
	exchange := func(frame []byte, t Type) {
		c.id++
		binary.BigEndian.PutUint64(frame[5:13], c.id)
		if _, err := c.c.Write(frame); err != nil {
			b.Fatal(err)
		}
		if err := c.r.next(&f); err != nil || f.Type != t || f.ID != c.id {
			b.Fatalf("frame %#02x id %d (%v), want %#02x id %d", uint8(f.Type), f.ID, err, uint8(t), c.id)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		exchange(acquire, TypeGranted)
		token, _ := f.Get(TagToken)
		copy(release[len(release)-8:], token)
		exchange(release, TypeOK)
	}
}
