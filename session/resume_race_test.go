package session

import (
	"sync"
	"testing"
)

// Two connections resume one session at once while a third, attached,
// keeps sending: the resumes swap the session's connection under the
// reader of the other (the race detector checks what they share). Each
// resume ends the connection it takes the session from, so writes may
// fail; they are not the point.
func TestConcurrentResumes(t *testing.T) {
	e := start(t, envOptions{})
	c := e.hello(t, "racer")
	resume := frameOf(TypeResume, 1, func(fb *frameBuilder) { fb.u64(TagSession, c.sid) },
		func(fb *frameBuilder) { fb.bytes(TagSecret, c.sec) })
	var wg sync.WaitGroup
	for range 4 {
		r := e.dial(t)
		wg.Go(func() {
			r.c.Write(resume)
			var f Frame
			if r.r.next(&f) != nil || f.Type != TypeWelcome {
				return // the session moved on before this resume: fine
			}
			for i := range 20 {
				r.c.Write(frameOf(TypePing, uint64(2+i)))
			}
		})
	}
	for i := range 50 {
		c.c.Write(frameOf(TypePing, uint64(2+i)))
	}
	wg.Wait()
	e.stop()
}
