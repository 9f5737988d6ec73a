package session

import (
	"encoding/binary"
	"runtime"
	"strconv"
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

// BenchmarkParkedRequests parks 10,000 acquires, 100 on each of 100
// sessions (one on each of 100 keys that another session holds, each with
// an owner of its own), as the session-memory benchmark's "parked
// request, 100 per session" does, and reports per parked request the heap
// it keeps (B/parked, after a collection) and what the server allocated
// to park it (alloc-B/parked, allocs/parked: garbage included). The
// connections never park, so that their read buffers are the same before
// and after. The client side allocates nothing once its frames are built;
// the wait for the last request reads the table every millisecond, a few
// allocations in all.
func BenchmarkParkedRequests(b *testing.B) {
	const sessions, keys = 100, 100
	var kept, alloc, mallocs, rounds int64
	for b.Loop() {
		b.StopTimer()
		e := startOn(b, envOptions{cfg: Config{ParkAfter: -1}}) // never parks: its buffers stay as they were
		holder := e.hello(b, "holder")
		for k := range keys {
			holder.granted(holder.acquire("parked/" + strconv.Itoa(k)))
		}
		clients := make([]*client, sessions)
		batches := make([][]byte, sessions)
		for i := range clients {
			c := e.hello(b, "parker-"+strconv.Itoa(i))
			for k := range keys {
				c.id++
				batches[i] = append(batches[i], frameOf(TypeAcquire, c.id, func(fb *frameBuilder) {
					fb.str(TagKey, "parked/"+strconv.Itoa(k))
					fb.str(TagOwner, "o"+strconv.Itoa(k))
				})...)
			}
			clients[i] = c
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		for i, c := range clients {
			c.write(batches[i])
		}
		// Each session's frames are applied in order: its last key queued
		// means all of its acquires are.
		last := "parked/" + strconv.Itoa(keys-1)
		for parked(e.node, last) < sessions {
			time.Sleep(time.Millisecond)
		}
		b.StopTimer()
		runtime.ReadMemStats(&after)
		alloc += int64(after.TotalAlloc - before.TotalAlloc)
		mallocs += int64(after.Mallocs - before.Mallocs)
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(batches) // counted in before: not to be freed in after
		for k := range keys {
			if n := parked(e.node, "parked/"+strconv.Itoa(k)); n != sessions {
				b.Fatalf("parked/%d: %d parked, want %d", k, n, sessions)
			}
		}
		kept += int64(after.HeapAlloc) - int64(before.HeapAlloc)
		rounds++
		e.stop()
		b.StartTimer()
	}
	n := float64(rounds * sessions * keys)
	b.ReportMetric(float64(kept)/n, "B/parked")
	b.ReportMetric(float64(alloc)/n, "alloc-B/parked")
	b.ReportMetric(float64(mallocs)/n, "allocs/parked")
}
