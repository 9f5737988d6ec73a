package cluster

import (
	"errors"
	"testing"
)

// heldFuture is a raft.Future whose Error waits until answer.
type heldFuture struct {
	done chan struct{}
	err  error
}

func newHeldFuture(err error) *heldFuture { return &heldFuture{done: make(chan struct{}), err: err} }
func (f *heldFuture) Error() error        { <-f.done; return f.err }
func (f *heldFuture) answer()             { close(f.done) }

// The watch delivers each future's own answer, whatever order raft
// answers them in; a future that finds the queue full, or the watch
// closed, is answered all the same, on a goroutine of its own.
func TestFutureWatch(t *testing.T) {
	w := newFutureWatch()
	errSecond := errors.New("second")
	first, second := newHeldFuture(nil), newHeldFuture(errSecond)
	a1, a2 := w.watch(first), w.watch(second)
	second.answer() // before the first: the watch waits on the first still
	select {
	case err := <-a2:
		t.Fatalf("the second answered (%v) while the first, queued before it, waits", err)
	default:
	}
	// The queue behind the first is full: the one after gets its own goroutine.
	var rest []*heldFuture
	for range watchQueue - 1 {
		f := newHeldFuture(nil)
		f.answer()
		rest = append(rest, f)
		w.watch(f)
	}
	errOver := errors.New("over")
	over := newHeldFuture(errOver)
	over.answer()
	if err := <-w.watch(over); !errors.Is(err, errOver) {
		t.Fatalf("a future over the queue: %v, want %v", err, errOver)
	}
	first.answer()
	if err := <-a1; err != nil {
		t.Fatalf("first: %v, want nil", err)
	}
	if err := <-a2; !errors.Is(err, errSecond) {
		t.Fatalf("second: %v, want %v", err, errSecond)
	}
	w.close()
	w.close()
	late := newHeldFuture(errOver)
	late.answer()
	if err := <-w.watch(late); !errors.Is(err, errOver) {
		t.Fatalf("a future after close: %v, want %v", err, errOver)
	}
}
