package lockingcenter

import "time"

// WithClock makes a session read the time and set the timers of its own
// deadlines through c, so that tests move time by hand.
func WithClock(c interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}) SessionOption {
	return sessionOption(func(cfg *sessionConfig) { cfg.clock = c })
}

// DeadAddr returns a 127.0.0.1 address where nothing listens.
var DeadAddr = deadAddr

// Heard returns when s last heard a frame on its connection, by its clock.
func Heard(s *Session) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heard
}
