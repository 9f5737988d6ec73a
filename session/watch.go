package session

import (
	"strings"
	"sync"

	"github.com/locking-center/locking-center/mutex"
)

// maxWatchBacklog bounds the frames a session may owe its client before
// its watches are dropped: a watcher that does not read must not make the
// server hold an unbounded backlog, nor slow anyone else.
const maxWatchBacklog = 10_000

// eventCodes number the actions of mutex.Event.Action for the event field.
var eventCodes = map[string]uint8{
	"acquired": 1, "released": 2, "expired": 3, "reset": 4, "withdrawn": 5, "deadlock": 6,
}

// watch is one WATCH of a session: events of keys with its prefix go to
// its session, as EVENT frames answering its id.
type watch struct {
	s      *sess
	id     uint64
	prefix string
}

// watches are the server's watches. The node calls observe, under its
// lock, with every event; frames are queued there and written by one
// goroutine, so that watchers never slow the lock path.
type watches struct {
	mu    sync.Mutex
	all   []*watch
	dirty map[*sess]bool
	wake  chan struct{} // capacity 1
	stop  func()        // ends the node's calls
	done  chan struct{}
}

// startWatches registers the server's observer and starts its writer.
func (s *Server) startWatches() {
	w := &s.watch
	w.dirty = make(map[*sess]bool)
	w.wake = make(chan struct{}, 1)
	w.done = make(chan struct{})
	w.stop = s.node.Observe(w.observe)
	wake := w.wake
	if !s.group.Go(func() { w.run(wake) }) {
		close(w.done)
	}
}

// observe queues ev for every watch whose prefix it matches. It runs with
// the node's lock held.
func (w *watches) observe(ev mutex.Event) {
	action := ev.Action()
	if action == "" {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.all) == 0 {
		return
	}
	var frame []byte
	for _, x := range w.all {
		if !strings.HasPrefix(ev.Key, x.prefix) {
			continue
		}
		if frame == nil {
			fb := begin(nil, TypeEvent, 0)
			fb.u8(TagEvent, eventCodes[action])
			fb.str(TagKey, ev.Key)
			fb.u64(TagToken, ev.Token)
			fb.u64(TagSession, ev.Session)
			fb.str(TagName, clipName(ev.Source))
			fb.u64(TagAt, uint64(max(ev.At.UnixMilli(), 0)))
			if ev.Note != "" {
				fb.str(TagNote, ev.Note)
			}
			frame = fb.end()
		}
		f := append([]byte(nil), frame...)
		putID(f, x.id)
		if !x.s.queueBounded(item{raw: f}, maxWatchBacklog) {
			x.s.queue(item{raw: refused(nil, x.id, CodeSlowConsumer, "the watch fell too far behind and was dropped")})
			w.dropLocked(x)
		}
		w.dirty[x.s] = true
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// run writes what observe queued, until the server closes wake.
func (w *watches) run(wake <-chan struct{}) {
	defer close(w.done)
	for range wake {
		w.mu.Lock()
		ss := make([]*sess, 0, len(w.dirty))
		for s := range w.dirty {
			ss = append(ss, s)
		}
		clear(w.dirty)
		w.mu.Unlock()
		for _, s := range ss {
			s.Flush()
		}
	}
}

// close ends the node's calls (after which observe never runs, so wake
// is no longer sent on) and the writer.
func (w *watches) close() {
	if w.stop == nil {
		return
	}
	w.stop()
	close(w.wake)
	<-w.done
}

func (w *watches) add(x *watch) {
	w.mu.Lock()
	w.all = append(w.all, x)
	w.mu.Unlock()
}

// cancel drops the watch id of s and reports whether there was one.
func (w *watches) cancel(s *sess, id uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, x := range w.all {
		if x.s == s && x.id == id {
			w.dropLocked(x)
			return true
		}
	}
	return false
}

// dropSession drops every watch of s.
func (w *watches) dropSession(s *sess) {
	w.mu.Lock()
	defer w.mu.Unlock()
	kept := w.all[:0]
	for _, x := range w.all {
		if x.s != s {
			kept = append(kept, x)
		}
	}
	clear(w.all[len(kept):])
	w.all = kept
}

func (w *watches) dropLocked(x *watch) {
	for i, y := range w.all {
		if y == x {
			w.all = append(w.all[:i], w.all[i+1:]...)
			return
		}
	}
}

// putID writes id into the frame f's id field.
func putID(f []byte, id uint64) {
	for i := range 8 {
		f[5+i] = byte(id >> (56 - 8*i))
	}
}

// clipName cuts a source to the name field's limit.
func clipName(n string) string {
	if len(n) > maxSize[TagName] {
		return n[:maxSize[TagName]]
	}
	return n
}
