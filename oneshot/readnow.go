package oneshot

import "sync"

// nowRead is a read of readNow, with its buffer: pooled, and with the
// function the descriptor's read calls bound to it once, so that reading
// a request allocates nothing but the descriptor's access.
type nowRead struct {
	buf [maxRequestLen + 1]byte
	b   []byte // the part of buf being read into
	n   int
	err error
	fn  func(fd uintptr) bool // r.read, bound at its first use
}

var nowReads = sync.Pool{New: func() any { return new(nowRead) }}

// got returns the bytes the read took.
func (r *nowRead) got() []byte { return r.buf[:r.n] }

// free gives r back to the pool; its bytes are not to be used after.
func (r *nowRead) free() {
	r.b, r.n, r.err = nil, 0, nil
	nowReads.Put(r)
}
