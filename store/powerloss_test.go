package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/locking-center/locking-center/mutex"
)

// Power-loss rounds. A mutex.Node journaled to a Log on a memFS runs under
// concurrent load (v1 lock, try-lock and release; a session that opens,
// takes and releases keys, and expires) until the power fails at a file
// operation that the round's seed picks; the Log is then opened on what
// the disk kept, and the table it replays is checked against what the
// clients were told: holders, fencing tokens, sessions. A round has
// several such lives, each starting from what the last one left, so a cut
// can also fall into the replay, the truncation of a torn tail, the
// compaction of a start or the journaling of the node's restart.
//
// LC_POWERLOSS_ROUNDS sets the number of rounds (default 50), each with a
// seed of its own. LC_POWERLOSS_SEED runs the round of that seed instead,
// LC_POWERLOSS_ROUNDS times (default once). A failing round names its
// seed; a round of the same seed has the same volume, compaction
// threshold, workers, keys and clock, cuts the power at the same numbered
// file operations, and keeps the same share of each file's unsynced
// bytes, torn the same way, and of each directory's unsynced entry
// changes. Goroutine scheduling is not fixed by any seed, so which
// operations those numbers fall on, and which bytes, can differ: a failure
// that depends on it shows again within some runs of its seed.

const (
	powerLossLives  = 3   // lives of a round, each ended by a power loss
	powerLossMaxOps = 250 // a life's cut comes within this many file operations
	sessionName     = "sess"
	sessionTTL      = 10 * time.Second
	// clockStep is how far the clock moves at a restart, back or forth.
	clockStep = 24 * time.Hour
)

func TestPowerLoss(t *testing.T) {
	rounds := envInt(t, "LC_POWERLOSS_ROUNDS", 50)
	base, step := rand.Uint64(), uint64(1)
	if s := os.Getenv("LC_POWERLOSS_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("LC_POWERLOSS_SEED=%q: %v", s, err)
		}
		base, step = seed, 0
		rounds = envInt(t, "LC_POWERLOSS_ROUNDS", 1)
	}
	dir := t.TempDir()
	cuts := map[string]int{}
	var total roundReport
	began := time.Now()
	for i := range rounds {
		seed := base + step*uint64(i)
		r, err := powerLossRound(dir, seed)
		if err != nil {
			t.Fatalf("round %d: %v\nreplay it (as many times as it takes): LC_POWERLOSS_SEED=%d LC_POWERLOSS_ROUNDS=100 go test -race -run 'TestPowerLoss$' ./store",
				i, err, seed)
		}
		for _, c := range r.cuts {
			cuts[c]++
		}
		total.add(r)
	}
	var tally []string
	for _, c := range sortedKeys(cuts) {
		tally = append(tally, fmt.Sprintf("%s %d", c, cuts[c]))
	}
	t.Logf("%d rounds from seed %d in %v; %s; power cut in: %s", rounds, base,
		time.Since(began).Round(time.Millisecond), total, strings.Join(tally, ", "))
}

// envInt returns the positive integer in the environment variable name, or
// def when it is unset.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}

// roundReport is what a round did.
type roundReport struct {
	cuts                   []string // the file operation each power loss came in
	replays                int      // Opens that replayed a log
	grants, sessions, ends int      // grants and session opens told, session expiries asked
}

func (r *roundReport) add(o roundReport) {
	r.replays += o.replays
	r.grants += o.grants
	r.sessions += o.sessions
	r.ends += o.ends
}

func (r roundReport) String() string {
	return fmt.Sprintf("%d replays checked, %d grants, %d session opens and %d expiries told", r.replays,
		r.grants, r.sessions, r.ends)
}

// powerLossRound runs the round of seed with its Log at dir/locks.wal on a
// memFS; dir is a real directory, for the Log's lock file.
func powerLossRound(dir string, seed uint64) (roundReport, error) {
	var rep roundReport
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	minSize := []int64{1, 512, 4 << 10}[rng.IntN(3)]
	// One round in four runs on a volume smaller than the threshold: writes
	// may fail with ENOSPC, the log compacts to keep room and rewrites
	// itself when a write finds the volume full, and clients may be told
	// '-'.
	capacity := int64(0)
	if rng.IntN(4) == 0 {
		capacity, minSize = []int64{16 << 10, 32 << 10}[rng.IntN(2)], DefaultCompactMinSize
	}
	workers := 2 + rng.IntN(5)
	keys := make([]string, 1+rng.IntN(5))
	for i := range keys {
		keys[i] = fmt.Sprintf("key/%d\xff", i)
	}
	// The clock moves at each restart, forward (a day of downtime) or back
	// (a clock set right): the fencing tokens must go on rising either way,
	// from the log's counter and not from the clock.
	back := rng.IntN(2) == 0
	var clock atomic.Int64
	clock.Store(epoch.UnixNano())
	md := newLockModel(capacity > 0)
	m := newMemFS(capacity, dir)
	path := filepath.Join(dir, "locks.wal")
	var story []string // what happened, for the failure message
	fail := func(err error) (roundReport, error) {
		return rep, fmt.Errorf("%w\n(compaction from %d bytes, volume of %d bytes (0: unlimited), %d workers, %d keys, clock set back %v)\n%s",
			err, minSize, capacity, workers, len(keys), back, strings.Join(story, "\n"))
	}
	for life := 0; ; life++ {
		final := life == powerLossLives
		if !final {
			m.cutAfter(1 + rng.IntN(powerLossMaxOps))
		}
		if life > 0 {
			if back {
				clock.Add(-int64(clockStep))
			} else {
				clock.Add(int64(clockStep))
			}
		}
		l, table, err := Open(Config{Path: path, FS: m, CompactMinSize: minSize, Logger: slog.New(slog.DiscardHandler)})
		if err != nil && !m.isLost() {
			return fail(fmt.Errorf("life %d: open refused what a power loss left: %w", life, err))
		}
		if err == nil {
			rep.replays++
			if err := md.check(table); err != nil {
				l.Close()
				return fail(fmt.Errorf("life %d: replay after the power loss: %w", life, err))
			}
			md.replayed(table)
			if final {
				if err := l.Close(); err != nil {
					return fail(fmt.Errorf("close: %w", err))
				}
				rep.add(md.report())
				return rep, nil
			}
			runLoad(l, table, &clock, md, m, keys, workers, seed+uint64(life))
			l.Close() // fails: the power is off
			if err := md.failures(); err != nil {
				return fail(fmt.Errorf("life %d: before the power loss: %w", life, err))
			}
		}
		img, kept := m.afterPowerLoss(rng.Uint64())
		rep.cuts = append(rep.cuts, m.cutOp)
		story = append(story, fmt.Sprintf("life %d: power cut in %q, file operation %d; kept %s", life, m.cutOp, m.cutAt, kept))
		m = img
	}
}

// runLoad runs the workers on a node over restored, journaled to l, until
// the power of m fails, and waits for them. md learns every request and
// every answer given before the power failed.
func runLoad(l *Log, restored *mutex.Table, clock *atomic.Int64, md *lockModel, m *memFS, keys []string, workers int, seed uint64) {
	sess, applied := restoredSession(restored)
	md.restarting(clock.Load())
	lt := newLockTable(l, restored, func() time.Time { return time.Unix(0, clock.Load()) })
	defer lt.close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-m.powerLost():
			cancel()
		case <-ctx.Done():
		}
	}()
	var wg sync.WaitGroup
	for w := range workers {
		name := strconv.Itoa(w)
		wg.Go(func() {
			worker(ctx, lt, md, m, keys, name, md.heldBy(name), rand.New(rand.NewPCG(seed, uint64(w))))
		})
	}
	wg.Go(func() {
		s := &sessionWorker{lt: lt, md: md, m: m, keys: keys, clock: clock, held: md.heldBy(sessionName),
			r: rand.New(rand.NewPCG(seed, uint64(workers)))}
		if sess != 0 {
			if s.live = lt.resume(sess); s.live == nil {
				md.fail("the session %d read back from the log cannot be resumed", sess)
				return
			}
			s.req = applied
		}
		s.run(ctx)
	})
	wg.Wait()
}

// restoredSession returns the id and the highest applied request of the
// session of sessionName in t, or 0.
func restoredSession(t *mutex.Table) (id, applied uint64) {
	t.Export(func(r *mutex.Record) {
		if r.Kind == mutex.RecordSession && r.Name == sessionName {
			id, applied = r.Session, r.Applied
		}
	})
	return id, applied
}

// worker is one v1 client of the load: it takes keys with lock (only when
// it holds none, so that no two workers wait for each other) or try-lock,
// holds a key or two for a while and releases them, until ctx ends. It
// starts holding held, and keeps it up to date.
func worker(ctx context.Context, lt lockTable, md *lockModel, m *memFS, keys []string, name string, held map[string]*attempt, r *rand.Rand) {
	for ctx.Err() == nil {
		if len(held) > 0 && (len(held) >= 2 || r.IntN(2) == 0) {
			key := sortedKeys(held)[r.IntN(len(held))]
			a := held[key]
			delete(held, key)
			md.releasing(a)
			err := lt.release(key)
			md.released(a, err, !m.isLost())
			continue
		}
		key := keys[r.IntN(len(keys))]
		if held[key] != nil {
			continue
		}
		a := md.asking(name, key, false)
		var token uint64
		var granted bool
		var err error
		if len(held) == 0 && r.IntN(2) == 0 {
			token, err = lt.lock(ctx, key, name, a.id)
			granted = err == nil
		} else {
			token, granted, err = lt.tryLock(key, name, a.id)
		}
		if md.answered(a, token, granted, err, !m.isLost()) {
			held[key] = a
		}
	}
}

// sessionWorker is one session-protocol client of the load: it opens a
// session (or resumes the one read back from the log), takes free keys
// through it without waiting, releases them, and now and then stops
// talking and lets the session expire, moving the node's clock past its
// TTL.
type sessionWorker struct {
	lt    lockTable
	md    *lockModel
	m     *memFS
	keys  []string
	clock *atomic.Int64
	r     *rand.Rand

	live *mutex.Live // nil: no session
	req  uint64      // the last request id used
	held map[string]*attempt
}

func (s *sessionWorker) run(ctx context.Context) {
	told := func() bool { return !s.m.isLost() }
	for ctx.Err() == nil {
		switch {
		case s.live == nil:
			live, err := s.lt.openSession(sessionName, sessionTTL)
			if live == nil {
				s.md.fail("open session: %v", err)
				return
			}
			s.live, s.req = live, 0
			s.md.sessionOpened(live.ID(), err, told())
		case s.r.IntN(8) == 0:
			s.md.expiring(s.live.ID(), s.held)
			s.held = make(map[string]*attempt)
			s.clock.Add(int64(sessionTTL) + 1)
			s.lt.advance()
			s.live = nil
		case len(s.held) > 0 && (len(s.held) >= 2 || s.r.IntN(2) == 0):
			key := sortedKeys(s.held)[s.r.IntN(len(s.held))]
			a := s.held[key]
			delete(s.held, key)
			s.md.releasing(a)
			s.req++
			err := s.lt.sessionRelease(s.live, s.req, key, a.token)
			s.md.released(a, err, told())
		default:
			key := s.keys[s.r.IntN(len(s.keys))]
			if s.held[key] != nil {
				continue
			}
			a := s.md.asking(sessionName, key, true)
			s.req++
			token, granted, err := s.lt.sessionTryLock(s.live, s.req, key, sessionName, a.id)
			if s.md.answered(a, token, granted, err, told()) {
				s.held[key] = a
			}
		}
	}
}

// Release states of an attempt, as its client knows them.
const (
	releaseNone = iota // not asked for
	releaseSent        // asked for (or its session's expiry); no answer, or one after the power failed
	releaseDone        // answered with the release durable
)

// attempt is one lock or try-lock request of the load. Its grant, if
// any, is known after a replay by its remote address, which is unique to
// the attempt, and placed among the key's grants by its fencing token.
type attempt struct {
	id, key, worker string
	session         bool   // through the session
	granted         bool   // told '+', or held after a replay (and so since)
	token           uint64 // the grant's fencing token, when granted
	refused         bool   // told '#' or '-' before the power failed: never granted
	notDurable      bool   // told '-' as its grant could not be written (see check)
	release         int
	byExpiry        bool // the release asked for is its session's expiry
	gone            bool // a replay showed it not held: no later one may show it
}

// sessionRun is what the model knows of one session the table opened.
type sessionRun struct {
	told        bool // its open was answered, durable (or it was read back)
	expireAsked bool // its client stopped and the clock passed its TTL
	expireDone  bool // and a later command was durable: the expiry is on disk
	gone        bool // a replay did not bring it back
}

// lockModel is what the clients of one round were told, attempt by
// attempt, and which fencing tokens and session ids the table handed out.
// It is safe for concurrent use.
type lockModel struct {
	mu       sync.Mutex
	attempts map[string]*attempt
	next     int
	full     bool     // writes may fail: the volume fills up
	errs     []string // answers that no power loss explains

	told uint64 // the highest fencing token told '+' (or read back)
	// floor is every token told as of the last replay, and the clock at
	// the restart after it: every token handed out since is above both.
	floor    uint64
	keyToken map[string]uint64 // per key, the highest token told for it
	sessions map[uint64]*sessionRun
	maxSess  uint64 // the highest session id told (or read back)

	grants, opens, ends int // told, for the report
}

// newLockModel returns an empty model; full says that writes may fail
// because the volume fills up.
func newLockModel(full bool) *lockModel {
	return &lockModel{attempts: make(map[string]*attempt), full: full, keyToken: make(map[string]uint64),
		sessions: make(map[uint64]*sessionRun)}
}

// fail records an answer that no power loss explains.
func (md *lockModel) fail(format string, args ...any) {
	md.mu.Lock()
	defer md.mu.Unlock()
	md.errs = append(md.errs, fmt.Sprintf(format, args...))
}

// report returns the counts of what was told.
func (md *lockModel) report() roundReport {
	md.mu.Lock()
	defer md.mu.Unlock()
	return roundReport{grants: md.grants, sessions: md.opens, ends: md.ends}
}

// asking records a new request of worker for key.
func (md *lockModel) asking(worker, key string, session bool) *attempt {
	md.mu.Lock()
	defer md.mu.Unlock()
	md.next++
	a := &attempt{id: fmt.Sprintf("w%s#%d", worker, md.next), key: key, worker: worker, session: session}
	md.attempts[a.id] = a
	return a
}

// refusal reports whether err, the answer '-' to a request, is one that
// only a full volume explains; any other is recorded as a failure.
func (md *lockModel) refusal(what string, err error) {
	if !md.full || !errors.Is(err, mutex.ErrJournal) {
		md.errs = append(md.errs, fmt.Sprintf("%s: %v", what, err))
	}
}

// answered records the answer to a: granted with token, or not, and err.
// An answer given after the power failed (told false) reached no client.
// token, when not 0, was handed out by the table, whatever the answer. It
// reports whether the client now holds the key.
func (md *lockModel) answered(a *attempt, token uint64, granted bool, err error, told bool) bool {
	md.mu.Lock()
	defer md.mu.Unlock()
	if token != 0 && token <= md.floor {
		md.errs = append(md.errs, fmt.Sprintf("%s for %q: token %d handed out, not above %d, told before the restart or the clock at it",
			a.id, a.key, token, md.floor))
	}
	switch {
	case !told:
		return false
	case err != nil:
		md.refusal(fmt.Sprintf("%s for %q answered '-'", a.id, a.key), err)
		a.refused, a.notDurable = true, errors.Is(err, mutex.ErrJournal)
		return false
	case !granted:
		a.refused = true
		return false
	}
	if token <= md.keyToken[a.key] {
		md.errs = append(md.errs, fmt.Sprintf("%s told '+' for %q with token %d, not above %d told for it before",
			a.id, a.key, token, md.keyToken[a.key]))
	}
	md.keyToken[a.key] = token
	md.told = max(md.told, token)
	md.grants++
	a.granted, a.token = true, token
	return true
}

// releasing records that a's client asks to release its key.
func (md *lockModel) releasing(a *attempt) {
	md.mu.Lock()
	defer md.mu.Unlock()
	a.release = releaseSent
}

// released records the answer to a's release: err says whether it was
// made durable.
func (md *lockModel) released(a *attempt, err error, told bool) {
	md.mu.Lock()
	defer md.mu.Unlock()
	if !told {
		return
	}
	if err != nil {
		// A v1 unlock is answered '+' all the same, and in effect; until a
		// later write carries it to the disk, a replay may bring the key
		// back.
		md.refusal(fmt.Sprintf("release of %q by %s not durable", a.key, a.id), err)
		return
	}
	a.release = releaseDone
}

// sessionOpened records the open of session id, answered with err.
func (md *lockModel) sessionOpened(id uint64, err error, told bool) {
	md.mu.Lock()
	defer md.mu.Unlock()
	if old := md.sessions[id]; old != nil && (old.told || !old.gone) {
		md.errs = append(md.errs, fmt.Sprintf("session id %d handed out again", id))
	}
	s := &sessionRun{}
	md.sessions[id] = s
	if !told {
		return
	}
	if err != nil {
		md.refusal(fmt.Sprintf("open of session %d", id), err)
		return
	}
	if id <= md.maxSess {
		md.errs = append(md.errs, fmt.Sprintf("session %d opened, not above %d, told before", id, md.maxSess))
	}
	s.told, md.maxSess = true, max(md.maxSess, id)
	md.opens++
	// The expiries asked before this open are on disk now.
	for _, o := range md.sessions {
		if o.expireAsked && !o.expireDone {
			o.expireDone = true
			md.ends++
		}
	}
	for _, a := range md.attempts {
		if a.release == releaseSent && a.byExpiry {
			a.release = releaseDone
		}
	}
}

// expiring records that the client of session id stops talking to it and
// that the clock passes its TTL: it expires, with the locks held.
func (md *lockModel) expiring(id uint64, held map[string]*attempt) {
	md.mu.Lock()
	defer md.mu.Unlock()
	if s := md.sessions[id]; s != nil {
		s.expireAsked = true
	}
	for _, a := range held {
		a.release, a.byExpiry = releaseSent, true
	}
}

// failures returns the answers that no power loss explains, and forgets
// them.
func (md *lockModel) failures() error {
	md.mu.Lock()
	defer md.mu.Unlock()
	defer func() { md.errs = nil }()
	if len(md.errs) == 0 {
		return nil
	}
	return errors.New(strings.Join(md.errs, "; "))
}

// check compares the table that a replay after a power loss restored
// with what the clients were told:
//
//   - a key whose last grant told '+' has not been asked to be released is
//     held by that grant;
//   - nothing is held by a grant that no client asked for, that was told
//     '#' or '-', that a client was told is released (or whose session's
//     expiry is on disk), or that an earlier replay showed not held; but a
//     grant told '-' because it could not be written may come back, until
//     its revoke is on disk (the one case on the safe side only of the
//     package documentation, Write failures);
//   - a grant told '+' comes back with the fencing token it was told;
//   - grants never go back: a key is held by its last grant told '+' or by
//     one made after it (a higher token), never by one made before;
//   - the table's token counter is at or above every token told, so that
//     every grant after the restart gets a higher one;
//   - a session told open whose client has not stopped comes back; one
//     whose expiry is on disk does not, nor one no client asked for; the
//     session counter is at or above every session id told.
//
// A grant whose answer was pending at the cut may be held or not, and so
// may one whose release was pending, and a session whose open or expiry
// was.
func (md *lockModel) check(t *mutex.Table) error {
	md.mu.Lock()
	defer md.mu.Unlock()
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	var state mutex.Record
	held := make(map[string]mutex.Record)
	restored := make(map[uint64]bool)
	t.Export(func(r *mutex.Record) {
		switch r.Kind {
		case mutex.RecordState:
			state = *r
		case mutex.RecordSession:
			restored[r.Session] = true
			s := md.sessions[r.Session]
			switch {
			case s == nil || r.Name != sessionName:
				bad("session %d %q, which no client opened", r.Session, r.Name)
			case s.expireDone:
				bad("session %d, whose expiry is on disk", r.Session)
			case s.gone:
				bad("session %d, which an earlier replay did not bring back", r.Session)
			}
		case mutex.RecordHolder:
			held[r.Key] = *r
			a := md.attempts[r.RemoteAddr]
			switch {
			case a == nil:
				bad("%q held by %q, which no client asked for", r.Key, r.RemoteAddr)
			case a.key != r.Key || a.worker != r.Source || a.session != (r.Session != 0):
				bad("%s asked for %q as %s (session %v); it came back as %q by %q of session %d", a.id, a.key,
					a.worker, a.session, r.Key, r.Source, r.Session)
			case a.refused && !a.notDurable:
				bad("%q held by %s, which was told it did not get it", r.Key, a.id)
			case a.release == releaseDone:
				bad("%q held by %s, which was told its release was done", r.Key, a.id)
			case a.gone:
				bad("%q held by %s, which an earlier replay showed not held", r.Key, a.id)
			case a.granted && r.Token != a.token:
				bad("%q held by %s with token %d; it was told %d", r.Key, a.id, r.Token, a.token)
			}
		}
	})
	if len(restored) > 1 {
		bad("%d sessions came back; the client has one at a time", len(restored))
	}
	for id, s := range md.sessions {
		if s.told && !s.expireAsked && !s.gone && !restored[id] {
			bad("session %d was told open and has not expired, but did not come back", id)
		}
	}
	if state.LastToken < md.told {
		bad("the token counter is %d, below %d, told before the power loss", state.LastToken, md.told)
	}
	if state.LastSession < md.maxSess {
		bad("the session counter is %d, below %d, told before the power loss", state.LastSession, md.maxSess)
	}
	for key, last := range md.lastGrants() {
		h, ok := held[key]
		switch {
		case last.release == releaseNone && (!ok || h.RemoteAddr != last.id):
			bad("%q was granted to %s, which has not released it, but is held by %s", key, last.id, holderName(h, ok))
		case ok && h.RemoteAddr != last.id && h.Token < last.token:
			bad("%q held by %s with token %d, below %d, told to %s", key, h.RemoteAddr, h.Token, last.token, last.id)
		}
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// holderName names the attempt of h, or nobody.
func holderName(h mutex.Record, ok bool) string {
	if !ok {
		return "nobody"
	}
	return h.RemoteAddr
}

// lastGrants returns, per key, the attempt with the highest token told
// '+' (or restored); md.mu is held.
func (md *lockModel) lastGrants() map[string]*attempt {
	last := make(map[string]*attempt)
	for _, a := range md.attempts {
		if a.granted && (last[a.key] == nil || a.token > last[a.key].token) {
			last[a.key] = a
		}
	}
	return last
}

// replayed makes t, which a replay restored and check passed, the state
// the next life starts from: each holder is held by its attempt as if told
// '+', with no release asked for yet, and every other attempt is gone
// (and keeps its place, its token, among its key's grants); each session
// is open as if told, every other one gone. Every token handed out from
// now on must be above those told so far.
func (md *lockModel) replayed(t *mutex.Table) {
	md.mu.Lock()
	defer md.mu.Unlock()
	restored := make(map[string]bool)
	sessions := make(map[uint64]bool)
	t.Export(func(r *mutex.Record) {
		switch r.Kind {
		case mutex.RecordSession:
			sessions[r.Session] = true
		case mutex.RecordHolder:
			a := md.attempts[r.RemoteAddr]
			a.granted, a.token, a.release, a.byExpiry = true, r.Token, releaseNone, false
			restored[a.id] = true
			md.keyToken[a.key] = max(md.keyToken[a.key], r.Token)
			md.told = max(md.told, r.Token)
		}
	})
	for _, a := range md.attempts {
		if !restored[a.id] {
			a.gone = true
		}
	}
	for id, s := range md.sessions {
		if sessions[id] {
			s.told, s.expireAsked = true, false
			md.maxSess = max(md.maxSess, id)
		} else {
			s.gone = true
		}
	}
	md.floor = md.told
}

// restarting records that a node restarts at the clock reading now, in
// Unix nanoseconds: its tokens go on above it too.
func (md *lockModel) restarting(now int64) {
	md.mu.Lock()
	defer md.mu.Unlock()
	md.floor = max(md.floor, uint64(now))
}

// heldBy returns the keys that worker holds, by the model, with their
// attempts.
func (md *lockModel) heldBy(worker string) map[string]*attempt {
	md.mu.Lock()
	defer md.mu.Unlock()
	out := make(map[string]*attempt)
	for _, a := range md.attempts {
		if a.worker == worker && a.granted && !a.gone {
			out[a.key] = a
		}
	}
	return out
}
