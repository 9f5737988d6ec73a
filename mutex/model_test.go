package mutex

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// modelKeys are the keys of the model test; a key's limit is fixed per key
// so that most acquires agree on it (some are made to disagree).
var modelKeys = []struct {
	name  string
	limit uint32
}{{"a", 0}, {"b", 0}, {"sem", 3}}

// run is one random history against a table, checked after every
// command.
type run struct {
	t        *rapid.T
	tab      *Table
	now      time.Time
	journal  []Command // every command that changed the table
	sessions []uint64  // open sessions
	req      map[uint64]uint64
	maxToken uint64
	counts   map[uint64]uint32 // the model's reentrancy count of each session lock, by token
}

// apply applies c at the run's clock, records it when it changed the
// table, and checks the table.
func (r *run) apply(c Command) Result {
	c.At = r.now
	if c.Session != 0 && c.Op != OpExpireSession {
		r.req[c.Session]++
		c.Request = r.req[c.Session]
	}
	before := r.waitersByKey()
	res := r.tab.Apply(&c)
	evs := slices.Clone(r.tab.TakeEvents())
	if res.Changed {
		r.journal = append(r.journal, c)
	}
	r.checkTokens(res, evs)
	r.checkFIFO(before, evs)
	r.checkCounts(c, res, evs)
	touched := map[string]bool{c.Key: c.Key != ""}
	for _, ev := range evs {
		touched[ev.Key] = true
	}
	r.checkState(touched)
	r.checkAccounts(c, res)
	return res
}

// checkAccounts: each account's usage is what its locks and parked
// requests add up to, and an acquire that took a lock or a place in a
// queue left its account within the caps it carried.
func (r *run) checkAccounts(c Command, res Result) {
	want := map[string]AccountUsage{}
	add := func(a string, held, parked int) {
		if a == "" {
			return
		}
		u := want[a]
		u.Account, u.Held, u.Parked = a, u.Held+held, u.Parked+parked
		want[a] = u
	}
	for _, e := range r.tab.keys {
		e.eachHolder(func(h *holder) { add(h.account.Value(), 1, 0) })
	}
	for _, q := range r.tab.parked {
		add(q.account().Value(), 0, 1)
	}
	if len(want) != len(r.tab.accounts) {
		r.t.Fatalf("%d accounts charged, %d have locks or requests", len(r.tab.accounts), len(want))
	}
	for a, u := range want {
		if got := r.tab.Usage(a); got != u {
			r.t.Fatalf("account %q: usage %+v, locks and requests add up to %+v", a, got, u)
		}
	}
	if c.Op != OpAcquire || res.Status != StatusGranted && res.Status != StatusParked || res.Count > 1 {
		return
	}
	a := c.Account
	if c.Session != 0 {
		a = r.tab.sessions[c.Session].account.Value()
	}
	u := r.tab.Usage(a)
	if c.MaxHeld > 0 && u.Held+u.Parked > int(c.MaxHeld) {
		r.t.Fatalf("account %q: %d held and %d parked after an acquire capped at %d", a, u.Held, u.Parked, c.MaxHeld)
	}
	if res.Status == StatusParked && c.MaxParked > 0 && u.Parked > int(c.MaxParked) {
		r.t.Fatalf("account %q: %d parked after an acquire capped at %d", a, u.Parked, c.MaxParked)
	}
}

// checkTokens: every new grant's token is above every token before it,
// and a grant never goes to a session that does not exist.
func (r *run) checkTokens(res Result, evs []Event) {
	for _, ev := range evs {
		if ev.Kind != EventGranted {
			continue
		}
		if ev.Token <= r.maxToken {
			r.t.Fatalf("token %d granted after %d", ev.Token, r.maxToken)
		}
		r.maxToken = ev.Token
		if ev.Session != 0 && r.tab.sessions[ev.Session] == nil {
			r.t.Fatalf("granted %q to session %d, which does not exist", ev.Key, ev.Session)
		}
	}
	if res.Status == StatusGranted && res.Token > r.maxToken {
		r.t.Fatalf("result token %d above the events' %d", res.Token, r.maxToken)
	}
}

type waiter struct {
	q        *request
	ticket   uint64
	priority int32
}

func (r *run) waitersByKey() map[string][]waiter {
	out := map[string][]waiter{}
	for _, q := range r.tab.parked {
		out[q.e.key] = append(out[q.e.key], waiter{q, q.ticket, q.priority()})
	}
	return out
}

// checkFIFO: among requests of one key with the same priority, grants
// come in the order the requests arrived.
func (r *run) checkFIFO(before map[string][]waiter, evs []Event) {
	for _, ev := range evs {
		if ev.Kind != EventGranted || !ev.Parked {
			continue
		}
		var prio int32
		for _, w := range before[ev.Key] {
			if w.ticket == ev.Ticket {
				prio = w.priority
			}
		}
		for _, w := range before[ev.Key] {
			if w.priority == prio && w.ticket < ev.Ticket && r.tab.parked[w.q.key()] == w.q {
				r.t.Fatalf("ticket %d of %q granted before ticket %d of the same priority", ev.Ticket, ev.Key, w.ticket)
			}
		}
	}
}

// checkCounts keeps the model of reentrancy counts (a grant starts at
// one, a reentrant acquire counts up, a release counts down, a loss ends
// it) and compares it with the table's.
func (r *run) checkCounts(c Command, res Result, evs []Event) {
	for _, ev := range evs {
		switch ev.Kind {
		case EventGranted:
			if ev.Session != 0 {
				r.counts[ev.Token] = 1
			}
		case EventReleased, EventLost:
			delete(r.counts, ev.Token)
		}
	}
	switch {
	case c.Op == OpAcquire && res.Status == StatusGranted && res.Count > 1:
		r.counts[res.Token]++
		if res.Count != r.counts[res.Token] {
			r.t.Fatalf("reentrant acquire of %q: count %d, model %d", c.Key, res.Count, r.counts[res.Token])
		}
	case c.Op == OpRelease && res.Status == StatusOK && res.Count > 0:
		r.counts[res.Token]--
		if res.Count != r.counts[res.Token] {
			r.t.Fatalf("release of %q: count %d, model %d", c.Key, res.Count, r.counts[res.Token])
		}
	}
	for tok, n := range r.counts {
		found := false
		for _, e := range r.tab.keys {
			if h := e.holderByToken(tok); h != nil && h.s != nil {
				found = true
				if h.s.count != n {
					r.t.Fatalf("lock %d: count %d, model %d", tok, h.s.count, n)
				}
			}
		}
		if !found {
			r.t.Fatalf("lock %d of the model is not held", tok)
		}
	}
}

// checkState: per key, at most its limit of holders, never shared beside
// exclusive, and, for the keys the command touched (where the table
// decided who is served), a queue that waits for a reason: a lock-delay,
// or a best request that does not fit beside the holders. (Aging alone
// reorders a queue between decisions; the next one serves the new order.)
func (r *run) checkState(touched map[string]bool) {
	for key, e := range r.tab.keys {
		n, shared, excl := 0, 0, 0
		e.eachHolder(func(h *holder) {
			n++
			if h.s != nil && h.s.mode == Shared {
				shared++
			} else {
				excl++
			}
		})
		if shared > 0 && excl > 0 {
			r.t.Fatalf("%q held shared and exclusive at once", key)
		}
		if excl > int(e.limit()) {
			r.t.Fatalf("%q has %d exclusive holders, limit %d", key, excl, e.limit())
		}
		if touched[key] && e.x != nil && e.x.head != nil && !e.delayed() {
			b := e.best(r.now.UnixNano())
			if e.compatible(b.mode, b.limit()) {
				r.t.Fatalf("%q: the head of its queue fits beside the holders but waits", key)
			}
		}
		if n == 0 && (e.x == nil || e.x.head == nil && e.x.delay.at == 0) {
			r.t.Fatalf("%q is idle but still in the table", key)
		}
	}
	for id, s := range r.tab.sessions {
		held := 0
		for h := s.heldHead; h != nil; h = h.snext {
			held++
		}
		if held != s.heldN {
			r.t.Fatalf("session %d: %d locks listed, %d counted", id, held, s.heldN)
		}
	}
}

// step is one random command.
func (r *run) step(t *rapid.T) {
	pickSession := func() uint64 {
		if len(r.sessions) == 0 || rapid.IntRange(0, 5).Draw(t, "v1") == 0 {
			return 0
		}
		return rapid.SampledFrom(r.sessions).Draw(t, "session")
	}
	switch rapid.IntRange(0, 9).Draw(t, "op") {
	case 0:
		if len(r.sessions) < 6 {
			res := r.apply(Command{Op: OpOpenSession, Source: fmt.Sprint("s", len(r.sessions)), TTL: time.Minute,
				Account: rapid.SampledFrom([]string{"", "acct0", "acct1"}).Draw(t, "session account")})
			r.sessions = append(r.sessions, res.Session)
		}
	case 1, 2, 3:
		k := rapid.SampledFrom(modelKeys).Draw(t, "key")
		s := pickSession()
		c := Command{Op: OpAcquire, Key: k.name, Session: s, Source: fmt.Sprint("src", s), ConnBound: s == 0}
		c.Limit = k.limit
		if s == 0 {
			c.Account = rapid.SampledFrom([]string{"", "acct0", "acct1"}).Draw(t, "account")
		}
		if rapid.IntRange(0, 3).Draw(t, "capped") == 0 {
			c.MaxHeld = uint32(rapid.IntRange(1, 4).Draw(t, "max held"))
			c.MaxParked = uint32(rapid.IntRange(0, 2).Draw(t, "max parked"))
		}
		if rapid.IntRange(0, 9).Draw(t, "wrong limit") == 0 {
			c.Limit = 2
		}
		if s != 0 {
			c.Owner = rapid.SampledFrom([]string{"", "x", "y"}).Draw(t, "owner")
			if c.Limit <= 1 && rapid.Bool().Draw(t, "shared") {
				c.Mode = Shared
			}
			c.Reentrant = rapid.IntRange(0, 3).Draw(t, "reentrant") == 0
			c.Priority = int32(rapid.IntRange(-1, 2).Draw(t, "priority"))
			if rapid.IntRange(0, 3).Draw(t, "lease?") == 0 {
				c.Lease = time.Duration(rapid.IntRange(1, 5).Draw(t, "lease")) * time.Second
			}
			if rapid.IntRange(0, 3).Draw(t, "delay?") == 0 {
				c.Delay = time.Duration(rapid.IntRange(1, 3).Draw(t, "delay")) * time.Second
			}
		}
		switch rapid.IntRange(0, 3).Draw(t, "wait") {
		case 0:
			c.Try = true
		case 1:
			c.Wait = time.Duration(rapid.IntRange(1, 4).Draw(t, "wait s")) * time.Second
		}
		r.apply(c)
	case 4, 5:
		var holds []Record
		r.tab.Export(func(rec *Record) {
			if rec.Kind == RecordHolder {
				holds = append(holds, *rec)
			}
		})
		if len(holds) == 0 {
			return
		}
		h := rapid.SampledFrom(holds).Draw(t, "hold")
		c := Command{Op: OpRelease, Key: h.Key, Session: h.Session, Token: h.Token}
		if h.Session == 0 {
			c.Token = 0
		}
		r.apply(c)
	case 6:
		// A v1 request is cancelled by its ticket, a session's by the
		// session and its request id.
		if len(r.tab.parked) == 0 {
			return
		}
		var parked []*request
		for _, q := range r.tab.parked {
			parked = append(parked, q)
		}
		slices.SortFunc(parked, func(a, b *request) int { return cmpU64(a.ticket, b.ticket) })
		q := rapid.SampledFrom(parked).Draw(t, "parked")
		c := Command{Op: OpCancel, Ticket: q.ticket}
		if q.sess != nil {
			c = Command{Op: OpCancel, Session: q.sess.id, Target: q.request}
		}
		if res := r.apply(c); res.Status != StatusOK {
			r.t.Fatalf("cancel of parked ticket %d: %v", q.ticket, res.Status)
		}
	case 7:
		if len(r.sessions) == 0 {
			return
		}
		i := rapid.IntRange(0, len(r.sessions)-1).Draw(t, "end")
		op := OpExpireSession
		if rapid.Bool().Draw(t, "close") {
			op = OpCloseSession
		}
		sid := r.sessions[i]
		r.apply(Command{Op: op, Session: sid})
		r.sessions = slices.Delete(r.sessions, i, i+1)
	case 8:
		r.now = r.now.Add(time.Duration(rapid.IntRange(1, 3000).Draw(t, "ms")) * time.Millisecond)
		r.apply(Command{Op: OpTick})
	case 9:
		if rapid.Bool().Draw(t, "by key") {
			r.apply(Command{Op: OpResetKey, Key: rapid.SampledFrom(modelKeys).Draw(t, "reset key").name})
		} else {
			r.apply(Command{Op: OpResetSource, Source: fmt.Sprint("src", pickSession())})
		}
	}
}

// TestModel runs random histories of every command in every mode against
// the table, checks its invariants after each command, and checks that the
// journal of the history, applied again to a new table (and to a table
// imported from a snapshot taken halfway), rebuilds the same table.
func TestModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := &run{t: t, tab: NewTable(), now: time.Unix(1_800_000_000, 0), req: map[uint64]uint64{},
			counts: map[uint64]uint32{}}
		steps := rapid.IntRange(1, 200).Draw(t, "steps")
		half := steps / 2
		var snap []Record
		var snapAt int
		for i := range steps {
			if i == half {
				snap = exportOf(r.tab)
				snapAt = len(r.journal)
			}
			r.step(t)
		}
		replay := NewTable()
		for i := range r.journal {
			c := r.journal[i]
			replay.Apply(&c)
			replay.TakeEvents()
		}
		want := exportOf(r.tab)
		if got := exportOf(replay); !slices.Equal(got, want) {
			t.Fatalf("the journal replays to another table:\n got %+v\nwant %+v", got, want)
		}
		if snap == nil {
			return
		}
		from := NewTable()
		for i := range snap {
			if !from.Import(&snap[i]) {
				t.Fatalf("import refused %+v", snap[i])
			}
		}
		from.FinishImport()
		for i := range r.journal[snapAt:] {
			c := r.journal[snapAt+i]
			from.Apply(&c)
			from.TakeEvents()
		}
		if got := exportOf(from); !slices.Equal(got, want) {
			t.Fatalf("snapshot plus the rest of the journal gives another table:\n got %+v\nwant %+v", got, want)
		}
	})
}

// Tokens strictly increase over a million grants.
func TestTokensIncreaseOverAMillionGrants(t *testing.T) {
	n := 1_000_000
	if testing.Short() {
		n = 50_000
	}
	tab := NewTable()
	now := time.Unix(1_800_000_000, 0)
	var last uint64
	for i := range n {
		key := []string{"a", "b", "c"}[i%3]
		c := Command{Op: OpAcquire, At: now, Key: key, Source: "s", Try: true}
		res := tab.Apply(&c)
		if res.Status != StatusGranted || res.Token <= last {
			t.Fatalf("grant %d: %+v after token %d", i, res, last)
		}
		last = res.Token
		rel := Command{Op: OpRelease, At: now, Key: key}
		tab.Apply(&rel)
		tab.TakeEvents()
	}
}
