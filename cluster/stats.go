package cluster

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// Label of locking_center_raft_state.
const LabelState = "state"

// RaftStates are the values of locking_center_raft_state's state label:
// raft's states in lower case.
var RaftStates = []string{"leader", "follower", "candidate", "shutdown"}

// ApplyBuckets are the upper bounds, in seconds, of the histogram of
// locking_center_raft_apply_seconds: 0.5 ms to about 8 s, doubling.
var ApplyBuckets = prometheus.ExponentialBuckets(0.0005, 2, 15)

var (
	descState = prometheus.NewDesc("locking_center_raft_state",
		"1 for this node's raft state (leader, follower, candidate, shutdown), 0 for the others.",
		[]string{LabelState}, nil)
	descTerm = prometheus.NewDesc("locking_center_raft_term",
		"This node's current raft term.", nil, nil)
	descLastIndex = prometheus.NewDesc("locking_center_raft_last_index",
		"Position of the last entry in this node's raft log.", nil, nil)
	descCommitIndex = prometheus.NewDesc("locking_center_raft_commit_index",
		"Position of the last raft entry this node knows committed.", nil, nil)
	descAppliedIndex = prometheus.NewDesc("locking_center_raft_applied_index",
		"Position of the last raft entry this node has applied.", nil, nil)
	descLeaderChanges = prometheus.NewDesc("locking_center_raft_leader_changes_total",
		"Times this node learned of a new leader (another node, or itself again in a later term), since start-up.",
		nil, nil)
	descProposedCommands = prometheus.NewDesc("locking_center_raft_proposed_commands_total",
		"Commands this node handed to raft as a leader, since start-up.", nil, nil)
	descProposedEntries = prometheus.NewDesc("locking_center_raft_proposed_entries_total",
		"Raft entries those commands took (a batch of commands counts once), since start-up.", nil, nil)
)

// stats are the figures of a Cluster that its collector reports beside
// what raft knows at the time of the scrape.
type stats struct {
	leaderChanges atomic.Uint64
	// proposedCommands and proposedEntries count what the batcher handed
	// to raft: their ratio is the commands per entry.
	proposedCommands, proposedEntries atomic.Uint64
	apply                             prometheus.Histogram
	observer                          *raft.Observer
}

func newStats() *stats {
	s := &stats{apply: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "locking_center_raft_apply_seconds",
		Help:    "Seconds from a change being proposed on the leader to its entry committed and applied there.",
		Buckets: ApplyBuckets,
	})}
	// The filter counts every leadership change as raft makes it, in
	// raft's own goroutine, and lets nothing through to the channel, so
	// no change is lost to a full channel and no goroutine drains it.
	s.observer = raft.NewObserver(nil, false, func(o *raft.Observation) bool {
		if l, ok := o.Data.(raft.LeaderObservation); ok && l.LeaderID != "" {
			s.leaderChanges.Add(1)
		}
		return false
	})
	return s
}

// observeApply records one proposal's time from Apply to its answer.
func (s *stats) observeApply(start time.Time) { s.apply.Observe(time.Since(start).Seconds()) }

// Collector returns the collector of c's raft figures: its state, term,
// last, commit and applied positions, the leader changes it saw, the
// commands it proposed and the entries they took, and the histogram of
// its proposals' apply times. Register it once; before Start
// and after Close it reports the leader changes and the histogram only.
func (c *Cluster) Collector() prometheus.Collector { return (*collector)(c) }

type collector Cluster

func (k *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descState, descTerm, descLastIndex, descCommitIndex,
		descAppliedIndex, descLeaderChanges, descProposedCommands, descProposedEntries} {
		ch <- d
	}
	k.stats.apply.Describe(ch)
}

func (k *collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descLeaderChanges, prometheus.CounterValue, float64(k.stats.leaderChanges.Load()))
	ch <- prometheus.MustNewConstMetric(descProposedCommands, prometheus.CounterValue, float64(k.stats.proposedCommands.Load()))
	ch <- prometheus.MustNewConstMetric(descProposedEntries, prometheus.CounterValue, float64(k.stats.proposedEntries.Load()))
	k.stats.apply.Collect(ch)
	r := k.raft
	if r == nil {
		return
	}
	now := strings.ToLower(r.State().String())
	for _, s := range RaftStates {
		v := 0.0
		if s == now {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, v, s)
	}
	ch <- prometheus.MustNewConstMetric(descTerm, prometheus.GaugeValue, float64(r.CurrentTerm()))
	ch <- prometheus.MustNewConstMetric(descLastIndex, prometheus.GaugeValue, float64(r.LastIndex()))
	ch <- prometheus.MustNewConstMetric(descCommitIndex, prometheus.GaugeValue, float64(r.CommitIndex()))
	ch <- prometheus.MustNewConstMetric(descAppliedIndex, prometheus.GaugeValue, float64(r.AppliedIndex()))
}
