package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/cluster"
	"github.com/locking-center/locking-center/manager"
	"github.com/locking-center/locking-center/session"
)

// --- the model the histories are checked against ---

// lockOp is an operation on one key: an acquire (blocking), a release of
// a token, or a describe.
type lockOp struct {
	Kind  string // "acquire", "release", "describe"
	Key   string
	Token uint64 // release: the token released
}

// lockOut is its answer: the token granted (acquire), whether the token
// held the key (release), the holder's token, 0 for none (describe).
type lockOut struct {
	Token uint64
	OK    bool
}

// lockState is one key: its holder's token (0: free) and the highest
// token it was ever granted.
type lockState struct{ holder, last uint64 }

// lockModel is an exclusive lock per key with fencing tokens: an acquire
// is granted only on a free key, with a token above every earlier one of
// the key; a release succeeds exactly when its token holds the key; a
// describe sees the holder.
var lockModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Input.(lockOp).Key
			if byKey[k] == nil {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return lockState{} },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(lockState), input.(lockOp), output.(lockOut)
		switch in.Kind {
		case "acquire":
			if st.holder != 0 || out.Token <= st.last {
				return false, st
			}
			return true, lockState{holder: out.Token, last: out.Token}
		case "release":
			if out.OK != (st.holder == in.Token) {
				return false, st
			}
			if out.OK {
				return true, lockState{last: st.last}
			}
			return true, st
		}
		return out.Token == st.holder, st
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(lockOp), output.(lockOut)
		return fmt.Sprintf("%s(%s, %d) -> %d %v", in.Kind, in.Key, in.Token, out.Token, out.OK)
	},
}

// --- what the clients record ---

// record collects the history and checks the resource's rules as the
// clients use it: a resource that takes a token only above the highest it
// has seen for the key, and critical sections of one key that never
// overlap.
type record struct {
	mu       sync.Mutex
	start    time.Time
	ops      []porcupine.Operation
	highest  map[string]uint64
	inside   map[string]string // key -> client in its critical section
	sections map[string][][2]time.Duration
	errs     []string
	grants   atomic.Int64
	releases int // releases answered as done
}

func newRecord() *record {
	return &record{start: time.Now(), highest: map[string]uint64{}, inside: map[string]string{},
		sections: map[string][][2]time.Duration{}}
}

func (r *record) now() int64 { return int64(time.Since(r.start)) }

func (r *record) add(client int, in lockOp, out lockOut, call, ret int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret})
	if in.Kind == "release" && out.OK {
		r.releases++
	}
}

func (r *record) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// enter is the resource taking token for key from who.
func (r *record) enter(key, who string, token uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if token <= r.highest[key] {
		r.errs = append(r.errs, fmt.Sprintf("%s: %s came with token %d, not above %d", key, who, token, r.highest[key]))
	}
	r.highest[key] = max(r.highest[key], token)
	if other, ok := r.inside[key]; ok {
		r.errs = append(r.errs, fmt.Sprintf("%s: %s entered while %s was inside", key, who, other))
	}
	r.inside[key] = who
	r.grants.Add(1)
}

func (r *record) leave(key string, from time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.inside, key)
	r.sections[key] = append(r.sections[key], [2]time.Duration{from, time.Since(r.start)})
}

// check fails t on a broken rule, overlapping sections, or a history that
// is not linearizable, and returns how many it found.
func (r *record) check(t *testing.T) (violations int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.errs {
		t.Error(e)
		violations++
	}
	for key, ss := range r.sections {
		slices.SortFunc(ss, func(a, b [2]time.Duration) int { return int(a[0] - b[0]) })
		for i := 1; i < len(ss); i++ {
			if ss[i][0] < ss[i-1][1] {
				t.Errorf("%s: critical sections %v and %v overlap", key, ss[i-1], ss[i])
				violations++
			}
		}
	}
	res, info := porcupine.CheckOperationsVerbose(lockModel, r.ops, time.Minute)
	if res != porcupine.Ok {
		path := t.TempDir() + "/history.html"
		porcupine.VisualizePath(lockModel, info, path)
		t.Errorf("history of %d operations: %v (visualization at %s)", len(r.ops), res, path)
		violations++
	}
	t.Logf("%d operations checked, %d critical sections", len(r.ops), r.grants.Load())
	return violations
}

// --- the clients ---

// load runs session and v1 clients on keys until stop closes.
type load struct {
	lc    *lcdCluster
	rec   *record
	keys  []string
	alive func() []int // the nodes that may answer
	stop  chan struct{}
	wg    sync.WaitGroup
}

func (l *load) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

// leaderManager returns a management client of the leader.
func (l *load) leaderManager() (*manager.Client, bool) {
	i, ok := l.lc.leader(l.alive(), 30*time.Second)
	if !ok {
		return nil, false
	}
	return &manager.Client{Addr: l.lc.addrs(i).Manager}, true
}

// holderOf returns the token with which src holds key at the leader, 0
// when it does not; it retries until a leader answers.
func (l *load) holderOf(key, src string) (uint64, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		mc, ok := l.leaderManager()
		if !ok {
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		hs, err := mc.Holders(ctx)
		cancel()
		if err != nil {
			continue
		}
		for _, h := range hs {
			if h.Key == key && h.Source == src {
				return h.Token, nil
			}
		}
		return 0, nil
	}
	return 0, fmt.Errorf("no leader answered a listing within 30s")
}

// v1Settle is how long the grant of an unanswered v1 request must stay
// as it is before a client counts on it: longer than a follower holds a
// request while it waits for a leader to forward it to.
const v1Settle = cluster.DefaultForwardTimeout + 2*time.Second

// settled returns the token with which src holds key once an unanswered
// v1 request about the grant of token has settled: 0 when the grant went
// (the leader passed on a grant whose connection it found cut, or an
// unlock applied late), token when it stayed for v1Settle. The leader may
// decide after the client has seen its request fail and the grant in the
// listing, and v1 tells nobody when it has, so the client watches the
// grant for a while.
func (l *load) settled(key, src string, token uint64) (uint64, error) {
	for since := time.Now(); time.Since(since) < v1Settle; time.Sleep(pollEvery) {
		t, err := l.holderOf(key, src)
		if err != nil || t != token {
			return 0, err
		}
	}
	return token, nil
}

// sessionWorker takes and releases keys through a session, and now and
// then describes the key it holds.
func (l *load) sessionWorker(n int, seed uint64) {
	r := rand.New(rand.NewPCG(seed, uint64(n)))
	name := fmt.Sprintf("session-%d", n)
	sc := &sessClient{name: name, nodes: func() []string { return l.lc.mutexAddrs(l.alive()) }, at: n % 3}
	defer sc.close()
	for !l.stopped() {
		key := l.keys[r.IntN(len(l.keys))]
		call := l.rec.now()
		o, err := sc.call(session.TypeAcquire, field(session.TagKey, []byte(key)))
		if err != nil {
			l.rec.fail("%s: acquire %s: %v", name, key, err)
			return
		}
		token := o.token
		if o.answered {
			if o.f.Type != session.TypeGranted {
				code, _ := o.f.Uint(session.TagCode)
				l.rec.fail("%s: acquire %s answered %#x code %d", name, key, o.f.Type, code)
				return
			}
			token, _ = o.f.Uint(session.TagToken)
		} else if token == 0 {
			continue // applied, but it holds nothing: withdrawn
		}
		l.rec.add(n, lockOp{Kind: "acquire", Key: key}, lockOut{Token: token}, call, l.rec.now())
		from := time.Since(l.rec.start)
		l.rec.enter(key, name, token)
		if r.IntN(4) == 0 {
			call := l.rec.now()
			o, err := sc.call(session.TypeDescribe, field(session.TagKey, []byte(key)))
			if err != nil {
				l.rec.fail("%s: describe %s: %v", name, key, err)
				return
			}
			if o.answered && o.f.Type == session.TypeInfo {
				var holder uint64
				for _, h := range o.f.All(session.TagHolder) {
					item := session.Frame{Fields: listFields(h)}
					holder, _ = item.Uint(session.TagToken)
				}
				l.rec.add(n, lockOp{Kind: "describe", Key: key}, lockOut{Token: holder}, call, l.rec.now())
			}
		}
		time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond) // the work under the lock
		l.rec.leave(key, from)
		call = l.rec.now()
		o, err = sc.call(session.TypeRelease, field(session.TagKey, []byte(key)), u64Field(session.TagToken, token))
		if err != nil {
			l.rec.fail("%s: release %s: %v", name, key, err)
			return
		}
		ok := !o.answered || o.f.Type == session.TypeOK
		if !ok {
			l.rec.fail("%s: the grant of %s (token %d), answered, was lost: release refused", name, key, token)
		}
		l.rec.add(n, lockOp{Kind: "release", Key: key, Token: token}, lockOut{OK: ok}, call, l.rec.now())
	}
}

// v1Worker takes and releases keys with the v1 client, through any node
// (a follower forwards to the leader). It learns its grant's token from
// the leader's management port.
func (l *load) v1Worker(n int, seed uint64) {
	r := rand.New(rand.NewPCG(seed, uint64(n)))
	src := fmt.Sprintf("v1-%d", n)
	ctx := context.Background()
	client := func() *lockingcenter.Client {
		alive := l.alive()
		addr := l.lc.addrs(alive[r.IntN(len(alive))]).Mutex
		return lockingcenter.New(addr, lockingcenter.WithSource(src), lockingcenter.WithConnectTimeout(time.Second),
			lockingcenter.WithReadTimeout(10*time.Second))
	}
	for !l.stopped() {
		key := l.keys[r.IntN(len(l.keys))]
		call := l.rec.now()
		var token uint64
		for token == 0 && !l.stopped() {
			err := client().Lock(ctx, key)
			t, herr := l.holderOf(key, src)
			if herr != nil {
				l.rec.fail("%s: %v", src, herr)
				return
			}
			if err == nil && t == 0 {
				l.rec.fail("%s: %s answered '+' but not held at the leader", src, key)
				return
			}
			if err != nil && t != 0 {
				if t, herr = l.settled(key, src, t); herr != nil {
					l.rec.fail("%s: %v", src, herr)
					return
				}
			}
			token = t // an unanswered lock that took effect holds the key too
		}
		if token == 0 {
			return
		}
		l.rec.add(n, lockOp{Kind: "acquire", Key: key}, lockOut{Token: token}, call, l.rec.now())
		from := time.Since(l.rec.start)
		l.rec.enter(key, src, token)
		time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
		l.rec.leave(key, from)
		if t, err := l.holderOf(key, src); err != nil || t != token {
			l.rec.fail("%s: the grant of %s (token %d) was lost: the leader has %d (%v)", src, key, token, t, err)
			return
		}
		call = l.rec.now()
		for {
			if err := client().Unlock(ctx, key); err == nil {
				break
			}
			// Unanswered: it may still apply (a follower forwards it late).
			// Unlock again only once the key has stayed ours, or a v1 unlock
			// would take it from the next holder.
			t, err := l.settled(key, src, token)
			if err != nil {
				l.rec.fail("%s: %v", src, err)
				return
			}
			if t != token {
				break
			}
		}
		l.rec.add(n, lockOp{Kind: "release", Key: key, Token: token}, lockOut{OK: true}, call, l.rec.now())
	}
}

// run starts 8 session clients and 8 v1 clients.
func (l *load) run(seed uint64) {
	for n := range 16 {
		s := seed + uint64(n)
		if n%2 == 0 {
			l.wg.Go(func() { l.sessionWorker(n, s) })
		} else {
			l.wg.Go(func() { l.v1Worker(n, s) })
		}
	}
}

// awaitGrants waits until the clients have entered n more critical
// sections, for at most d.
func (l *load) awaitGrants(n int64, d time.Duration) bool {
	want := l.rec.grants.Load() + n
	deadline := time.Now().Add(d)
	for l.rec.grants.Load() < want {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pollEvery)
	}
	return true
}

func (l *load) finish() {
	close(l.stop)
	l.wg.Wait()
}

// clusterRounds is how many faults a test injects: LC_CLUSTER_ROUNDS, or
// one for an ordinary test run.
func clusterRounds(t *testing.T) int {
	s := os.Getenv("LC_CLUSTER_ROUNDS")
	if s == "" {
		return 1
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("LC_CLUSTER_ROUNDS=%q: want a positive number", s)
	}
	return n
}

func all(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// startSoak starts three nodes and, once one leads, the load on them: 16
// clients (8 through sessions, 8 through v1) on four keys. The clients
// use the nodes setAlive last named, all three to begin with.
func startSoak(t *testing.T, seed uint64) (lc *lcdCluster, l *load, setAlive func([]int)) {
	t.Helper()
	lc = startCluster(t, 3)
	if _, ok := lc.leader(all(3), 30*time.Second); !ok {
		t.Fatalf("no leader:\n%s", lc.logs())
	}
	var mu sync.Mutex
	alive := all(3)
	l = &load{lc: lc, rec: newRecord(), keys: []string{"a", "b", "c", "d"}, stop: make(chan struct{}),
		alive: func() []int { mu.Lock(); defer mu.Unlock(); return slices.Clone(alive) }}
	l.run(seed)
	return lc, l, func(nodes []int) { mu.Lock(); defer mu.Unlock(); alive = slices.Clone(nodes) }
}

// A leader killed with SIGKILL while 16 clients (8 through sessions, 8
// through v1 at any node) lock and release four keys: a new leader serves,
// no answered grant is lost, tokens only grow, no two clients are ever in
// one key's critical section, and the history is linearizable. The killed
// node comes back as a follower with the same table.
func TestClusterLeaderKilled(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	lc, l, setAlive := startSoak(t, seed)
	rounds := clusterRounds(t)
	for round := range rounds {
		if !l.awaitGrants(50, time.Minute) {
			l.finish()
			t.Fatalf("round %d: no progress before the kill:\n%s", round, lc.logs())
		}
		lead, _ := lc.leader(all(3), 30*time.Second)
		lc.kill(lead)
		setAlive(slices.DeleteFunc(all(3), func(i int) bool { return i == lead }))
		if _, ok := lc.leader(l.alive(), 30*time.Second); !ok {
			l.finish()
			t.Fatalf("round %d: no new leader after killing n%d:\n%s", round, lead+1, lc.logs())
		}
		if !l.awaitGrants(50, time.Minute) {
			l.finish()
			t.Fatalf("round %d: no progress after killing n%d:\n%s", round, lead+1, lc.logs())
		}
		lc.start(lead)
		setAlive(all(3))
		// It came back on a new mutex port: every node must know it there,
		// before it may lead and be named.
		if err := lc.awaitRecorded(lead, all(3), time.Minute); err != nil {
			l.finish()
			t.Fatalf("round %d: %v\n%s", round, err, lc.logs())
		}
	}
	l.finish()
	summarize(t, lc, l.rec, faults{kills: rounds})
}

// The leader cut off from both followers stops serving; the two elect a
// leader that serves; healed, the old leader follows with the same table.
// Clients run all along, and their history is linearizable.
func TestClusterPartition(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	lc, l, setAlive := startSoak(t, seed)
	rounds := clusterRounds(t)
	for round := range rounds {
		if !l.awaitGrants(50, time.Minute) {
			l.finish()
			t.Fatalf("round %d: no progress before the partition:\n%s", round, lc.logs())
		}
		old, _ := lc.leader(all(3), 30*time.Second)
		lc.isolate(old, true)
		setAlive(slices.DeleteFunc(all(3), func(i int) bool { return i == old }))
		majority, ok := lc.leader(l.alive(), 30*time.Second)
		if !ok {
			l.finish()
			t.Fatalf("round %d: the majority elected no leader:\n%s", round, lc.logs())
		}
		// The isolated node has stepped down: it serves nothing.
		if st, _ := lc.status(old, false); st.State == "Leader" && st.Ready {
			t.Errorf("round %d: the isolated n%d still leads while n%d does", round, old+1, majority+1)
		}
		sc := &sessClient{name: "isolated-probe"}
		if ok, err := sc.dial(lc.nodes[old].addrs.Mutex); ok || err != nil {
			t.Errorf("round %d: the isolated node took a session (%v)", round, err)
		}
		sc.close()
		if !l.awaitGrants(50, time.Minute) {
			l.finish()
			t.Fatalf("round %d: no progress in the majority:\n%s", round, lc.logs())
		}
		lc.isolate(old, false)
		setAlive(all(3))
		if st, ok := lc.status(old, false); ok && st.State == "Leader" && old != majority {
			t.Logf("round %d: n%d leads again after healing", round, old+1)
		}
	}
	l.finish()
	summarize(t, lc, l.rec, faults{partitions: rounds})
}

// The lock model takes a history of one holder at a time and refuses two
// holders at once, a token that does not grow, a release that succeeded
// for a token that did not hold the key, and a describe of a stale holder.
func TestLockModel(t *testing.T) {
	op := func(c int, kind string, tok uint64, out lockOut, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: c, Input: lockOp{Kind: kind, Key: "k", Token: tok}, Output: out, Call: call, Return: ret}
	}
	good := []porcupine.Operation{
		op(0, "acquire", 0, lockOut{Token: 5}, 0, 10),
		op(1, "acquire", 0, lockOut{Token: 9}, 1, 40), // waited for the release
		op(0, "describe", 0, lockOut{Token: 5}, 11, 12),
		op(0, "release", 5, lockOut{OK: true}, 20, 30),
		op(1, "release", 5, lockOut{OK: false}, 41, 42),
	}
	if !porcupine.CheckOperations(lockModel, good) {
		t.Fatal("a linearizable history was refused")
	}
	bad := map[string][]porcupine.Operation{
		"two holders": {op(0, "acquire", 0, lockOut{Token: 5}, 0, 10), op(1, "acquire", 0, lockOut{Token: 9}, 11, 12)},
		"token not growing": {op(0, "acquire", 0, lockOut{Token: 5}, 0, 1), op(0, "release", 5, lockOut{OK: true}, 2, 3),
			op(1, "acquire", 0, lockOut{Token: 5}, 4, 5)},
		"release of a stale token": {op(0, "acquire", 0, lockOut{Token: 5}, 0, 1), op(1, "release", 4, lockOut{OK: true}, 2, 3)},
		"stale describe": {op(0, "acquire", 0, lockOut{Token: 5}, 0, 1), op(0, "release", 5, lockOut{OK: true}, 2, 3),
			op(1, "describe", 0, lockOut{Token: 5}, 4, 5)},
	}
	for name, h := range bad {
		if porcupine.CheckOperations(lockModel, h) {
			t.Errorf("%s: taken as linearizable", name)
		}
	}
}
