package cluster

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// termGuard is the transport lcd gives raft: raft's own transport with
// its heartbeat fast path narrowed to the one case where it is safe.
//
// hashicorp/raft handles a heartbeat (an AppendEntries without entries)
// on the transport's goroutine when the transport offers a fast path, as
// NetworkTransport does, so that a follower busy writing its log still
// answers its leader. But appendEntries changes the node's term and state
// when the heartbeat carries a newer term, and on that goroutine it does
// so beside raft's main loop. A leader whose main loop has just taken a
// batch of commands then reads the new term and writes the batch into its
// log at the indices the real leader of that term has written, stamped
// with its term: a follower that takes those entries agrees with the old
// leader on (index, term) of the last one and keeps them, and the
// replicas diverge for good. Upstream: hashicorp/raft issue #695, with a
// fix proposed in pull request #701, neither released in v1.8.0.
//
// The guard also wraps the pipelines of appends it hands raft, so that
// one raft no longer reads cannot block for good (drainedPipeline).
//
// termGuard passes a heartbeat to the fast path only when the node is a
// follower and the heartbeat carries the node's current term: then it can
// change nothing but the follower's last contact and commit index. Every
// other heartbeat (a newer term, or any heartbeat that reaches a leader or
// a candidate) goes to raft's main loop, like every other RPC, so that a
// term change always happens there. Terms only grow, so a heartbeat that
// passed the check and finds a newer term by the time it runs is refused
// by appendEntries without a change. After a failover each follower takes
// the new leader's first heartbeat on the main loop, and every heartbeat
// after it on the fast path as before.
//
// When a release of hashicorp/raft fixes #695 (pull request #701 or
// another), the guard can go: give raft the NetworkTransport again and
// keep TestTermChangesOnlyOnTheMainLoop, which must then pass without it.
type termGuard struct {
	raft.Transport
	prevote raft.WithPreVote // nil when the transport has no pre-vote
	closer  raft.WithClose   // nil when the transport cannot be closed

	node atomic.Value  // termState, set once raft runs; until then no fast path
	rpcs chan raft.RPC // what raft's main loop reads (Consumer)
	quit chan struct{}
	once sync.Once

	// slow, when set (tests), is called for each heartbeat sent to the
	// main loop, before it is queued.
	slow func(raft.RPC)
}

// newTermGuard wraps t. Its Consumer carries t's RPCs and the heartbeats
// kept off the fast path; its Close closes t.
func newTermGuard(t raft.Transport) *termGuard {
	g := &termGuard{Transport: t, rpcs: make(chan raft.RPC), quit: make(chan struct{})}
	g.prevote, _ = t.(raft.WithPreVote)
	g.closer, _ = t.(raft.WithClose)
	go g.pass(t.Consumer())
	return g
}

// pass hands the wrapped transport's RPCs to raft until the guard closes.
func (g *termGuard) pass(in <-chan raft.RPC) {
	for {
		select {
		case rpc := <-in:
			select {
			case g.rpcs <- rpc:
			case <-g.quit:
				return
			}
		case <-g.quit:
			return
		}
	}
}

// termState is what the guard reads of the node it serves (*raft.Raft).
type termState interface {
	State() raft.RaftState
	CurrentTerm() uint64
}

// setRaft tells the guard which node it serves; heartbeats reach the fast
// path only from then on.
func (g *termGuard) setRaft(r termState) { g.node.Store(&r) }

// Consumer implements raft.Transport.
func (g *termGuard) Consumer() <-chan raft.RPC { return g.rpcs }

// SetHeartbeatHandler implements raft.Transport: the wrapped transport
// gets a handler that runs fast only what is safe there.
func (g *termGuard) SetHeartbeatHandler(fast func(raft.RPC)) {
	if fast == nil {
		g.Transport.SetHeartbeatHandler(nil)
		return
	}
	g.Transport.SetHeartbeatHandler(func(rpc raft.RPC) {
		if g.fastPathSafe(rpc) {
			fast(rpc)
			return
		}
		if g.slow != nil {
			g.slow(rpc)
		}
		select {
		case g.rpcs <- rpc:
		case <-g.quit: // unanswered: the transport ends the request as it closes
		}
	})
}

// fastPathSafe reports whether rpc, a heartbeat, may run beside raft's
// main loop: the node is a follower and rpc carries its current term.
func (g *termGuard) fastPathSafe(rpc raft.RPC) bool {
	r, _ := g.node.Load().(*termState)
	req, ok := rpc.Command.(*raft.AppendEntriesRequest)
	if r == nil || !ok || len(req.Entries) > 0 {
		return false
	}
	return (*r).State() == raft.Follower && req.Term == (*r).CurrentTerm()
}

// AppendEntriesPipeline implements raft.Transport: the wrapped
// transport's pipeline, whose answers keep flowing once raft stops
// reading them (drainedPipeline).
func (g *termGuard) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := g.Transport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return newDrainedPipeline(p), nil
}

// errPipelineEnded: raft stopped reading the pipeline's answers; it must
// send no more on it.
var errPipelineEnded = errors.New("cluster: the append pipeline ended")

// drainedPipeline is a raft.AppendPipeline whose answers are read on, and
// dropped, after raft's reader of them has stopped.
//
// hashicorp/raft v1.8.0 reads a pipeline's answers in pipelineDecode,
// which returns at the first failed append (an error, a refusal, a newer
// term), while the loop that sends on the pipeline notices that only at
// its next turn. NetworkTransport's pipeline answers every append still in
// flight when the connection fails, each as a failure, into a buffer of
// 128 that nobody reads any more, and its sender then blocks for good
// once its own buffer of 128 requests is full: the replication to that
// follower stops, and raft's Shutdown, which waits for it, never returns
// (the last node of a soak did not exit a minute after SIGTERM). The
// wrapper keeps reading the answers, hands raft each until one that ends
// raft's reader, drops the rest, and refuses further appends, so the
// sender's loop ends and closes the pipeline as raft means it to.
type drainedPipeline struct {
	raft.AppendPipeline
	out    chan raft.AppendFuture
	ended  atomic.Bool // raft has read an answer that ends its reader
	closed chan struct{}
	once   sync.Once
}

func newDrainedPipeline(p raft.AppendPipeline) *drainedPipeline {
	d := &drainedPipeline{AppendPipeline: p, out: make(chan raft.AppendFuture), closed: make(chan struct{})}
	go d.pass(p.Consumer())
	return d
}

// pass hands raft the answers from in until one ends raft's reader, and
// drops those after it, until the pipeline closes.
func (d *drainedPipeline) pass(in <-chan raft.AppendFuture) {
	for {
		select {
		case f := <-in:
			if d.ended.Load() {
				continue
			}
			select {
			case d.out <- f:
			case <-d.closed:
				return
			}
			if endsDecoder(f) {
				d.ended.Store(true)
			}
		case <-d.closed:
			return
		}
	}
}

// endsDecoder reports whether f, an answered append, makes raft's
// pipelineDecode return: a failure (its response then stays zero), a
// refusal, or a newer term.
func endsDecoder(f raft.AppendFuture) bool {
	f.Error()
	resp := f.Response()
	return resp == nil || !resp.Success || resp.Term > f.Request().Term
}

// AppendEntries implements raft.AppendPipeline; it refuses once raft has
// stopped reading answers.
func (d *drainedPipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	if d.ended.Load() {
		return nil, errPipelineEnded
	}
	return d.AppendPipeline.AppendEntries(args, resp)
}

// Consumer implements raft.AppendPipeline.
func (d *drainedPipeline) Consumer() <-chan raft.AppendFuture { return d.out }

// Close implements raft.AppendPipeline.
func (d *drainedPipeline) Close() error {
	d.once.Do(func() { close(d.closed) })
	return d.AppendPipeline.Close()
}

// RequestPreVote implements raft.WithPreVote when the wrapped transport
// does; raft asks for it by type, so the guard must keep it.
func (g *termGuard) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest,
	resp *raft.RequestPreVoteResponse) error {
	if g.prevote == nil {
		return raft.ErrUnsupportedProtocol
	}
	return g.prevote.RequestPreVote(id, target, args, resp)
}

// Close implements raft.WithClose: it stops passing RPCs and closes the
// wrapped transport.
func (g *termGuard) Close() error {
	g.once.Do(func() { close(g.quit) })
	if g.closer == nil {
		return nil
	}
	return g.closer.Close()
}
