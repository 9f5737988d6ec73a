package cluster

import (
	"log/slog"
	"time"

	"github.com/hashicorp/raft"
)

// A follower of hashicorp/raft refuses its vote, and its pre-vote, to
// every candidate while it knows a leader, and it forgets the leader only
// when its own heartbeat timer fires and finds no contact for a heartbeat
// timeout H. That timer is drawn again between H and 2H each time it
// fires, so a follower notices a dead leader between H and 3H after its
// last contact. When a leader dies, the first follower to notice asks the
// others for their votes and is refused by every one that has not noticed
// yet; it asks again only after its election timeout, between H and 2H
// later. A cluster of three then waits, most of the time, for the slower of
// its two followers: about 2H, a second with lcd's default H of 500ms.
//
// The Raft dissertation's rule is narrower (D. Ongaro, "Consensus:
// Bridging Theory and Practice", Stanford 2014, section 4.2.3): a server
// disregards a vote request only within the minimum election timeout of
// hearing from a current leader. lcd brings its followers back to that
// rule: when a candidate asks for a vote (or a pre-vote) and this node's
// leader has been silent for a whole H, this node checks its heartbeat at
// once instead of at its timer's next draw. The check finds the leader
// gone, so the node stands too; the first candidate, which has no leader
// either, grants it its pre-vote and its vote, and the cluster has a
// leader about when the first follower noticed. A candidate that asks
// while this node still hears from its leader (a candidate cut off from
// the leader alone) changes nothing: the node looks again once a whole H
// has passed since its last contact and stays a follower if the leader
// has spoken since. Either way a node stands only when raft's own rule
// would let it, its leader silent for H; the check comes earlier, never
// the election. Safety does not rest on timing: raft's votes and terms
// decide, as for an election its timer started.
//
// hashicorp/raft has no call that starts an election. A follower checks
// its heartbeat at once when its heartbeat timeout is lowered (a
// raft.ReloadConfig that shrinks the timeout restarts the follower's
// timer at zero), so checkHeartbeat lowers it by a nanosecond and sets it
// back.

// votePrompts follows the vote and pre-vote requests r observes, from
// obs, until quit is closed, and makes r check its heartbeat at once when
// its leader has been silent for its heartbeat timeout (see above). A
// request that comes sooner leaves a check due when that timeout has
// passed since r's last contact.
func votePrompts(r *raft.Raft, obs <-chan raft.Observation, quit <-chan struct{}, log *slog.Logger) {
	due := time.NewTimer(time.Hour)
	due.Stop()
	defer due.Stop()
	for {
		var candidate raft.ServerID
		select {
		case o := <-obs:
			switch req := o.Data.(type) {
			case raft.RequestVoteRequest:
				candidate = raft.ServerID(req.ID)
			case raft.RequestPreVoteRequest:
				candidate = raft.ServerID(req.ID)
			default:
				continue
			}
		case <-due.C:
		case <-quit:
			return
		}
		// A check that fell due leaves none after it: only a request does.
		if wait := promptedByVote(r, candidate, log); wait > 0 && candidate != "" {
			due.Reset(wait)
		}
	}
}

// isVoteRequest is the filter of votePrompts's observer.
func isVoteRequest(o *raft.Observation) bool {
	switch o.Data.(type) {
	case raft.RequestVoteRequest, raft.RequestPreVoteRequest:
		return true
	}
	return false
}

// promptedByVote makes r, a follower with a leader other than candidate
// (empty: a check fell due), check its heartbeat at once when the leader
// has been silent for the heartbeat timeout, and otherwise returns how
// long until it will have been (0: nothing to do).
func promptedByVote(r *raft.Raft, candidate raft.ServerID, log *slog.Logger) (wait time.Duration) {
	if r.State() != raft.Follower {
		return 0
	}
	_, leader := r.LeaderWithID()
	if leader == "" || leader == candidate {
		return 0 // raft grants or refuses on its own rules
	}
	rc := r.ReloadableConfig()
	silent := time.Since(r.LastContact())
	if silent < rc.HeartbeatTimeout {
		return rc.HeartbeatTimeout - silent
	}
	log.Info("checking the heartbeat now: a candidate asked for a vote and the leader has been silent for a heartbeat timeout",
		slog.String(logLeader, string(leader)), slog.String("candidate", string(candidate)),
		slog.Duration("silent", silent))
	if err := checkHeartbeat(r, rc); err != nil {
		log.Warn("could not check the heartbeat now", slog.Any(logError, err))
	}
	return 0
}

// checkHeartbeat makes follower r check its heartbeat now: it lowers the
// heartbeat timeout of rc, r's reloadable configuration, by a nanosecond,
// which makes raft's follower loop run its check at once, and then sets rc
// back. Nothing else changes raft's reloadable configuration (a change
// between the read of rc and this would be undone). Errors:
// raft.ReloadConfig's.
func checkHeartbeat(r *raft.Raft, rc raft.ReloadableConfig) error {
	lower := rc
	lower.HeartbeatTimeout--
	if err := r.ReloadConfig(lower); err != nil {
		return err
	}
	return r.ReloadConfig(rc)
}
