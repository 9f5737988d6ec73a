package cluster

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"
)

// voteGroup is three raft voters over raft's in-memory transport, in a
// synctest bubble, each following its vote requests as a Cluster does
// (votePrompts).
// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

type voteGroup struct {
	h     time.Duration // heartbeat and election timeouts
	rafts []*raft.Raft
	trans []*raft.InmemTransport
	logs  []*lockedBuffer // what each node's votePrompts logged
	quit  chan struct{}
	wg    sync.WaitGroup

	mu        sync.Mutex
	firstAsk  time.Time     // the first vote request any node observed since clearAsks
	asked     chan struct{} // closed at firstAsk
	candidacy []string      // "n2 Candidate": every node that stood, in order
}

func newVoteGroup(t *testing.T, h time.Duration) *voteGroup {
	t.Helper()
	g := &voteGroup{h: h, quit: make(chan struct{}), asked: make(chan struct{})}
	var servers []raft.Server
	for i := range 3 {
		addr, tr := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("n%d", i+1)))
		g.trans = append(g.trans, tr)
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(addr), Address: addr})
	}
	for i, a := range g.trans {
		for j, b := range g.trans {
			if i != j {
				a.Connect(b.LocalAddr(), b)
			}
		}
	}
	for i, tr := range g.trans {
		rc := raft.DefaultConfig()
		rc.LocalID = servers[i].ID
		rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = h, h, h/2
		rc.Logger = newHCLogger(slog.New(slog.DiscardHandler), nil)
		store := raft.NewInmemStore()
		r, err := raft.NewRaft(rc, nopFSM{}, store, store, raft.NewInmemSnapshotStore(), tr)
		if err != nil {
			t.Fatal(err)
		}
		id := string(rc.LocalID)
		r.RegisterObserver(raft.NewObserver(nil, false, func(o *raft.Observation) bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			if isVoteRequest(o) && g.firstAsk.IsZero() {
				g.firstAsk = time.Now()
				close(g.asked)
			}
			if st, ok := o.Data.(raft.RaftState); ok && st == raft.Candidate {
				g.candidacy = append(g.candidacy, id+" "+st.String())
			}
			return false
		}))
		votes := make(chan raft.Observation, 16)
		r.RegisterObserver(raft.NewObserver(votes, false, isVoteRequest))
		logs := &lockedBuffer{}
		g.logs = append(g.logs, logs)
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			votePrompts(r, votes, g.quit, slog.New(slog.NewTextHandler(logs, nil)))
		}()
		if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			t.Fatal(err)
		}
		g.rafts = append(g.rafts, r)
	}
	return g
}

// leader waits until one node leads and both others follow it, and
// returns its index.
func (g *voteGroup) leader() int {
	for {
		time.Sleep(g.h / 10)
		for i, r := range g.rafts {
			if r.State() != raft.Leader {
				continue
			}
			following := 0
			for j, o := range g.rafts {
				if _, id := o.LeaderWithID(); j != i && id == raft.ServerID(fmt.Sprintf("n%d", i+1)) {
					following++
				}
			}
			if following == 2 {
				return i
			}
		}
	}
}

// nextLeader waits until a node other than old wins an election and
// returns its index and when.
func (g *voteGroup) nextLeader(old int) (int, time.Time) {
	a, b := (old+1)%3, (old+2)%3
	for {
		select {
		case lead := <-g.rafts[a].LeaderCh():
			if lead {
				return a, time.Now()
			}
		case lead := <-g.rafts[b].LeaderCh():
			if lead {
				return b, time.Now()
			}
		}
	}
}

// clearAsks forgets what the nodes observed so far.
func (g *voteGroup) clearAsks() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.firstAsk, g.candidacy, g.asked = time.Time{}, nil, make(chan struct{})
}

// cut removes the links between nodes i and j, both ways.
func (g *voteGroup) cut(i, j int) {
	g.trans[i].Disconnect(g.trans[j].LocalAddr())
	g.trans[j].Disconnect(g.trans[i].LocalAddr())
}

// prompted reports whether node i's votePrompts made it check its
// heartbeat at once.
func (g *voteGroup) prompted(i int) bool {
	return strings.Contains(g.logs[i].String(), "checking the heartbeat now")
}

// inVoteGroups runs f five times, each in a bubble of its own with a new
// group of heartbeat timeout 1s and the index of its leader, l, what the
// group observed before cleared.
func inVoteGroups(t *testing.T, f func(t *testing.T, g *voteGroup, l int)) {
	for round := range 5 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newVoteGroup(t, time.Second)
				defer g.stop()
				l := g.leader()
				g.clearAsks()
				f(t, g, l)
			})
		})
	}
}

func (g *voteGroup) stop() {
	close(g.quit)
	g.wg.Wait()
	for _, r := range g.rafts {
		r.Shutdown().Error()
	}
}

// TestFollowersElectWhenTheFirstNotices stops the leader of three and
// measures, on the bubble's clock, from the first vote request to the new
// leader. With the prompt, the follower that has not noticed yet checks
// its heartbeat when it is asked, finds the leader silent for a heartbeat
// timeout, stands and is elected at once (the in-memory transport takes no
// time). Without it, that follower refuses and the cluster waits for its
// own timer or for the candidate's election timeout: between 0 and two
// heartbeat timeouts more, almost never under a hundredth of one.
func TestFollowersElectWhenTheFirstNotices(t *testing.T) {
	inVoteGroups(t, func(t *testing.T, g *voteGroup, l int) {
		stopped := time.Now()
		g.rafts[l].Shutdown().Error()
		for i := range g.rafts {
			if i != l {
				g.cut(i, l)
			}
		}
		winner, elected := g.nextLeader(l)
		g.mu.Lock()
		asked := g.firstAsk
		g.mu.Unlock()
		t.Logf("the first vote request came %v after the leader stopped, the new leader %v after it",
			asked.Sub(stopped), elected.Sub(asked))
		if asked.IsZero() || elected.Sub(asked) > g.h/100 {
			t.Fatalf("a leader was elected %v after the first vote request (%v after the old one stopped); want at most %v",
				elected.Sub(asked), elected.Sub(stopped), g.h/100)
		}
		if !g.prompted(winner) {
			t.Errorf("n%d was elected without checking its heartbeat when asked", winner+1)
		}
	})
}

// TestCandidateCutOffFromTheLeaderChangesNothing cuts one follower off
// from the leader alone: it stands again and again and asks the other
// follower, which still hears from the leader. That follower must not
// check its heartbeat out of turn, nor stand, and the leader keeps its
// term.
func TestCandidateCutOffFromTheLeaderChangesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newVoteGroup(t, time.Second)
		defer g.stop()
		l := g.leader()
		term := g.rafts[l].CurrentTerm()
		cutOff, other := (l+1)%3, (l+2)%3
		g.clearAsks()
		g.cut(cutOff, l)
		time.Sleep(20 * g.h)
		g.mu.Lock()
		asked, candidacy := g.firstAsk, g.candidacy
		g.mu.Unlock()
		if asked.IsZero() {
			t.Fatal("the node cut off from the leader never asked for a vote")
		}
		for _, c := range candidacy {
			if c != fmt.Sprintf("n%d Candidate", cutOff+1) {
				t.Errorf("%s stood while its leader was heard", c)
			}
		}
		if g.prompted(other) {
			t.Errorf("n%d checked its heartbeat out of turn while it heard from its leader:\n%s", other+1, g.logs[other].String())
		}
		if g.rafts[l].State() != raft.Leader || g.rafts[l].CurrentTerm() != term {
			t.Errorf("the leader is %v in term %d, was Leader in term %d", g.rafts[l].State(), g.rafts[l].CurrentTerm(), term)
		}
		if _, id := g.rafts[other].LeaderWithID(); id != raft.ServerID(fmt.Sprintf("n%d", l+1)) {
			t.Errorf("the other follower follows %q", id)
		}
	})
}

// TestFollowerAskedEarlyChecksOnceTheLeaderIsSilent has a follower asked
// for its vote while it still hears from its leader, which then stops: the
// candidate, cut off from the leader alone, asked first. The follower
// must check its heartbeat when a whole heartbeat timeout has passed since
// its last contact, and be elected then, before its own timer's next draw
// or the candidate's next request would have come.
func TestFollowerAskedEarlyChecksOnceTheLeaderIsSilent(t *testing.T) {
	inVoteGroups(t, func(t *testing.T, g *voteGroup, l int) {
		cutOff, other := (l+1)%3, (l+2)%3
		g.cut(cutOff, l)
		<-g.asked
		g.rafts[l].Shutdown().Error()
		g.cut(other, l)
		want := g.rafts[other].LastContact().Add(g.h)
		winner, elected := g.nextLeader(l)
		if winner != other {
			t.Fatalf("n%d, cut off from the leader, was elected before n%d", winner+1, other+1)
		}
		t.Logf("elected %v after a heartbeat timeout had passed since the last contact", elected.Sub(want))
		if elected.Before(want) || elected.Sub(want) > g.h/100 {
			t.Fatalf("n%d was elected %v after a heartbeat timeout had passed since its last contact; want at most %v",
				other+1, elected.Sub(want), g.h/100)
		}
		if !g.prompted(other) {
			t.Errorf("n%d was elected without checking its heartbeat", other+1)
		}
	})
}
