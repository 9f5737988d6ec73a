// Package metrics exports the lock table to Prometheus. A collector takes a
// fresh snapshot of the table on every scrape, so a key's series appear
// with its grant and vanish with its release; nothing stale is kept.
package metrics

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/locking-center/locking-center/mutex"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Namespace prefixes every metric of the server.
const Namespace = "locking_center"

// Label names of the per-key series. They are the reference's and appear
// in users' alert rules.
const (
	LabelKey    = "key"
	LabelSource = "source_addr"
	LabelRemote = "remote_addr"
)

// Snapshotter is what the collector reads: *mutex.Node.
type Snapshotter interface {
	Snapshot() mutex.Snapshot
}

var (
	descLocked = prometheus.NewDesc(Namespace+"_locked_keys",
		"Number of keys currently held under a lock.", nil, nil)
	descHeld = prometheus.NewDesc(Namespace+"_lock_held_seconds",
		"Seconds the current holder has been holding the key.",
		[]string{LabelKey, LabelSource, LabelRemote}, nil)
	descAcquired = prometheus.NewDesc(Namespace+"_lock_acquired_timestamp_seconds",
		"Unix time at which the current holder was granted the key.",
		[]string{LabelKey, LabelSource, LabelRemote}, nil)
	descWaiters = prometheus.NewDesc(Namespace+"_waiters",
		"Lock requests parked behind a holder now.", nil, nil)
	descGrants = prometheus.NewDesc(Namespace+"_grants_total",
		"Keys granted, at once or to a parked request, since start-up.", nil, nil)
	descBusy = prometheus.NewDesc(Namespace+"_trylock_busy_total",
		"Try-locks answered busy because the key was held, since start-up.", nil, nil)
	descWithdrawn = prometheus.NewDesc(Namespace+"_withdrawn_waiters_total",
		"Parked lock requests withdrawn before a grant (peer gone, reset by source), since start-up.", nil, nil)
	descWait = prometheus.NewDesc(Namespace+"_lock_wait_seconds",
		"Seconds from a lock request to its grant.", nil, nil)
	descSessions = prometheus.NewDesc(Namespace+"_sessions",
		"Sessions of the session protocol open now.", nil, nil)
	descSessionExpiries = prometheus.NewDesc(Namespace+"_session_expiries_total",
		"Sessions that expired because their TTL passed without a frame, since start-up.", nil, nil)
	descLeaseExpiries = prometheus.NewDesc(Namespace+"_lease_expiries_total",
		"Locks lost because their own lease ran out, since start-up.", nil, nil)
	descResumes = prometheus.NewDesc(Namespace+"_session_resumes_total",
		"Sessions taken over by a new connection, since start-up.", nil, nil)
	descDelayed = prometheus.NewDesc(Namespace+"_lock_delay_keys",
		"Keys in lock-delay now: lost by an expiry, granted to nobody until the delay ends.", nil, nil)
	descLastToken = prometheus.NewDesc(Namespace+"_last_fencing_token",
		"The highest fencing token handed out, as a float: exact up to 2^53, rounded above (tokens near the clock's Unix nanoseconds are); the _high and _low gauges carry it exactly.", nil, nil)
	descLastTokenHigh = prometheus.NewDesc(Namespace+"_last_fencing_token_high",
		"The upper 32 bits of the highest fencing token handed out: the token is high * 2^32 + low, exactly.", nil, nil)
	descLastTokenLow = prometheus.NewDesc(Namespace+"_last_fencing_token_low",
		"The lower 32 bits of the highest fencing token handed out: the token is high * 2^32 + low, exactly.", nil, nil)
	descDeadlocks = prometheus.NewDesc(Namespace+"_deadlocks_total",
		"Acquires refused because waiting would have closed a cycle of waits, since start-up.", nil, nil)
	descRefusals = prometheus.NewDesc(Namespace+"_refusals_total",
		"Requests turned away before or by the lock table, since start-up, by reason: unauthenticated, forbidden, v1 (not allowed from that network), connections, rate, held and parked (a source's caps).",
		[]string{LabelReason}, nil)
	descHolders = prometheus.NewDesc(Namespace+"_lock_holders",
		"Holders of a held key now, with the mode they hold it in and the key's limit (1, or N for a semaphore).",
		[]string{LabelKey, LabelMode, LabelLimit}, nil)
)

// Labels of locking_center_lock_holders.
const (
	LabelMode  = "mode"
	LabelLimit = "limit"
	// LabelReason is why requests were refused.
	LabelReason = "reason"
)

// Collector turns a table snapshot into metrics at each scrape.
type Collector struct {
	table Snapshotter
}

// NewCollector returns a collector of t.
func NewCollector(t Snapshotter) *Collector { return &Collector{table: t} }

// Describe sends the descriptors of every metric the collector makes.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLocked, descHeld, descAcquired, descWaiters,
		descGrants, descBusy, descWithdrawn, descWait, descSessions, descSessionExpiries,
		descLeaseExpiries, descResumes, descDelayed, descLastToken, descLastTokenHigh, descLastTokenLow, descDeadlocks, descHolders, descRefusals} {
		ch <- d
	}
}

// Collect takes one snapshot and sends its metrics. A key with several
// holders (shared, a semaphore) has one series per holder; holders that
// share a key, source and remote address share one series, that of the
// one that has held it longest.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.table.Snapshot()
	keys := 0
	type series struct{ key, source, remote string }
	seen := make(map[series]bool)
	for i, h := range s.Holders {
		if i == 0 || s.Holders[i-1].Key != h.Key {
			keys++
			n := 1
			for n < len(s.Holders)-i && s.Holders[i+n].Key == h.Key {
				n++
			}
			ch <- prometheus.MustNewConstMetric(descHolders, prometheus.GaugeValue, float64(n),
				LabelValue(h.Key), h.Mode.String(), strconv.FormatUint(uint64(h.Limit), 10))
		}
		id := series{h.Key, h.Source, h.RemoteAddr}
		if seen[id] {
			continue // a later token of the same owner: held for less time
		}
		seen[id] = true
		key, source, remote := LabelValue(h.Key), LabelValue(h.Source), LabelValue(h.RemoteAddr)
		ch <- prometheus.MustNewConstMetric(descHeld, prometheus.GaugeValue,
			h.Held(s.Taken).Seconds(), key, source, remote)
		ch <- prometheus.MustNewConstMetric(descAcquired, prometheus.GaugeValue,
			float64(h.Acquired.UnixNano())/1e9, key, source, remote)
	}
	n := s.Counters
	ch <- prometheus.MustNewConstMetric(descLocked, prometheus.GaugeValue, float64(keys))
	ch <- prometheus.MustNewConstMetric(descWaiters, prometheus.GaugeValue, float64(s.Parked))
	ch <- prometheus.MustNewConstMetric(descGrants, prometheus.CounterValue, float64(n.Grants))
	ch <- prometheus.MustNewConstMetric(descBusy, prometheus.CounterValue, float64(n.Busy))
	ch <- prometheus.MustNewConstMetric(descWithdrawn, prometheus.CounterValue, float64(n.Withdrawn))
	ch <- prometheus.MustNewConstHistogram(descWait, n.Wait.Count, n.Wait.Sum, n.Wait.Buckets)
	ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(len(s.Sessions)))
	ch <- prometheus.MustNewConstMetric(descSessionExpiries, prometheus.CounterValue, float64(n.SessionExpiries))
	ch <- prometheus.MustNewConstMetric(descLeaseExpiries, prometheus.CounterValue, float64(n.LeaseExpiries))
	ch <- prometheus.MustNewConstMetric(descResumes, prometheus.CounterValue, float64(n.Resumes))
	ch <- prometheus.MustNewConstMetric(descDelayed, prometheus.GaugeValue, float64(s.Delayed))
	ch <- prometheus.MustNewConstMetric(descLastToken, prometheus.GaugeValue, float64(s.LastToken))
	ch <- prometheus.MustNewConstMetric(descLastTokenHigh, prometheus.GaugeValue, float64(s.LastToken>>32))
	ch <- prometheus.MustNewConstMetric(descLastTokenLow, prometheus.GaugeValue, float64(s.LastToken&0xFFFFFFFF))
	ch <- prometheus.MustNewConstMetric(descDeadlocks, prometheus.CounterValue, float64(n.Deadlocks))
	for _, r := range mutex.Refusals() {
		ch <- prometheus.MustNewConstMetric(descRefusals, prometheus.CounterValue, float64(n.Refusals[r]), r.String())
	}
}

// Register registers the table's collector and the Go runtime and process
// collectors on reg. Errors: those of reg.Register.
func Register(reg prometheus.Registerer, t Snapshotter) error {
	for _, c := range []prometheus.Collector{
		NewCollector(t),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// LabelValue turns bytes from a client into a label value that is valid
// UTF-8 and printable, such that different inputs never give the same value.
//
// A string that is valid UTF-8 with no backslash and no control character
// is kept as it is. Any other is escaped: a backslash becomes `\\`, and each
// byte that is a control character or not part of valid UTF-8 becomes
// `\xHH`. Kept strings contain no backslash and escaped ones always do, and
// the escaping decodes back uniquely, so the mapping is one-to-one.
func LabelValue(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, needsEscape) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == utf8.RuneError && size == 1 || needsEscape(r):
			for _, c := range []byte(s[i : i+size]) {
				b.WriteString(`\x`)
				if c < 0x10 {
					b.WriteByte('0')
				}
				b.WriteString(strconv.FormatUint(uint64(c), 16))
			}
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// needsEscape reports runes kept out of label values as they are: the
// backslash and control characters.
func needsEscape(r rune) bool {
	return r == '\\' || r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0
}
