package cluster

import (
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// fastPathTransport is raft's in-memory transport with a heartbeat fast
// path, as NetworkTransport has: the test calls hb where NetworkTransport
// would call it, on a goroutine of its own beside raft's main loop.
type fastPathTransport struct {
	*raft.InmemTransport
	hb func(raft.RPC)
}

func (f *fastPathTransport) SetHeartbeatHandler(cb func(raft.RPC)) { f.hb = cb }

// gatedStore holds StoreLogs of a command entry, once armed, until
// released: raft's leader loop is then inside a log write.
type gatedStore struct {
	*raft.InmemStore
	armed   chan struct{} // closed to arm
	entered chan struct{} // closed when a command entry's write waits
	release chan struct{} // closed to let it go on
}

func (s *gatedStore) StoreLogs(logs []*raft.Log) error {
	select {
	case <-s.armed:
		for _, l := range logs {
			if l.Type == raft.LogCommand {
				close(s.entered)
				<-s.release
				break
			}
		}
	default:
	}
	return s.InmemStore.StoreLogs(logs)
}

type nopFSM struct{}

func (nopFSM) Apply(*raft.Log) any                 { return nil }
func (nopFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, io.EOF }
func (nopFSM) Restore(io.ReadCloser) error         { return nil }

// soloLeader starts a one-voter raft node over trans and store, waits
// until it leads, and then makes its timeouts an hour long, so that
// nothing but the test's RPCs changes its state.
func soloLeader(t *testing.T, store *gatedStore, trans raft.Transport) *raft.Raft {
	t.Helper()
	rc := raft.DefaultConfig()
	rc.LocalID = "n1"
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = 50*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	rc.Logger = newHCLogger(slog.New(slog.DiscardHandler), nil)
	r, err := raft.NewRaft(rc, nopFSM{}, store, store, raft.NewInmemSnapshotStore(), trans)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Shutdown().Error() })
	if err := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{
		{Suffrage: raft.Voter, ID: "n1", Address: trans.LocalAddr()}}}).Error(); err != nil {
		t.Fatal(err)
	}
	for !<-r.LeaderCh() {
	}
	if err := r.Barrier(0).Error(); err != nil {
		t.Fatal(err)
	}
	if err := r.ReloadConfig(raft.ReloadableConfig{TrailingLogs: rc.TrailingLogs, SnapshotInterval: rc.SnapshotInterval,
		SnapshotThreshold: rc.SnapshotThreshold, HeartbeatTimeout: time.Hour, ElectionTimeout: time.Hour}); err != nil {
		t.Fatal(err)
	}
	return r
}

// heartbeat is an AppendEntries without entries from a leader n2 of term,
// as NetworkTransport decodes one, and the channel of its answer.
func heartbeat(term uint64) (raft.RPC, chan raft.RPCResponse) {
	resp := make(chan raft.RPCResponse, 1)
	return raft.RPC{RespChan: resp, Command: &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n2"), Addr: []byte("n2")},
		Term:      term}}, resp
}

// TestTermChangesOnlyOnTheMainLoop drives the race of hashicorp/raft
// issue #695 step by step: the leader's main loop is inside the write of a
// batch when a heartbeat of a newer term arrives on the transport's
// goroutine. Through the guard, the term must not change until the main
// loop takes the heartbeat itself; straight on the fast path (the
// unguarded case, which shows what the guard is for) it changes at once,
// beside the write.
func TestTermChangesOnlyOnTheMainLoop(t *testing.T) {
	for _, guarded := range []bool{true, false} {
		name := map[bool]string{true: "guarded", false: "unguarded"}[guarded]
		t.Run(name, func(t *testing.T) {
			store := &gatedStore{InmemStore: raft.NewInmemStore(), armed: make(chan struct{}),
				entered: make(chan struct{}), release: make(chan struct{})}
			_, inm := raft.NewInmemTransport("")
			fp := &fastPathTransport{InmemTransport: inm}
			var trans raft.Transport = fp
			var g *termGuard
			slow := make(chan struct{}, 4)
			if guarded {
				g = newTermGuard(fp)
				g.slow = func(raft.RPC) { slow <- struct{}{} }
				trans = g
			}
			r := soloLeader(t, store, trans)
			var let sync.Once
			letGo := func() { let.Do(func() { close(store.release) }) }
			t.Cleanup(letGo) // before the shutdown, which waits for the leader loop
			if g != nil {
				g.setRaft(r)
			}
			term := r.CurrentTerm()

			close(store.armed)
			apply := r.Apply([]byte("batch"), 0)
			<-store.entered // the leader loop has stamped the entry and writes it

			rpc, resp := heartbeat(term + 1)
			answered := make(chan struct{})
			go func() { fp.hb(rpc); close(answered) }()
			if guarded {
				select {
				case <-slow: // routed to the main loop, which is busy writing
				case <-answered:
					t.Fatal("a heartbeat of a newer term was answered on the fast path while the leader loop wrote its batch")
				}
				if got := r.CurrentTerm(); got != term {
					t.Fatalf("term %d while the leader loop writes its batch, want %d", got, term)
				}
				if st := r.State(); st != raft.Leader {
					t.Fatalf("state %v while the leader loop writes its batch, want Leader", st)
				}
			} else {
				<-answered // the fast path ran appendEntries on this goroutine
				if got := r.CurrentTerm(); got != term+1 {
					t.Fatalf("unguarded: term %d, want %d: the fast path no longer changes the term "+
						"beside the main loop (hashicorp/raft fixed #695?): the guard may go", got, term+1)
				}
			}
			letGo()
			if res := <-resp; res.Error != nil {
				t.Fatalf("heartbeat answered with %v", res.Error)
			}
			<-answered
			apply.Error() // committed or not: a lone voter's own write may commit it in term
			if got := r.CurrentTerm(); got != term+1 {
				t.Fatalf("term %d after the heartbeat, want %d", got, term+1)
			}
			var entry raft.Log
			if err := store.GetLog(apply.Index(), &entry); err == nil && entry.Term != term {
				t.Fatalf("the batch's entry has term %d, want %d", entry.Term, term)
			}
			if !guarded {
				return
			}
			// A follower of the same term: its heartbeats take the fast
			// path again.
			for <-r.LeaderCh() {
			}
			rpc, resp = heartbeat(term + 1)
			fp.hb(rpc)
			if res := <-resp; res.Error != nil {
				t.Fatalf("second heartbeat: %v", res.Error)
			}
			select {
			case <-slow:
				t.Fatal("a heartbeat of the follower's own term was kept off the fast path")
			default:
			}
		})
	}
}

// TestTermGuardRouting: which heartbeats the guard lets through its fast
// path, for each state of the node and term of the heartbeat.
func TestTermGuardRouting(t *testing.T) {
	_, inm := raft.NewInmemTransport("")
	g := newTermGuard(inm)
	defer g.Close()
	rpc, _ := heartbeat(7)
	if g.fastPathSafe(rpc) {
		t.Fatal("fast path before raft runs")
	}
	for _, c := range []struct {
		state raft.RaftState
		term  uint64
		fast  bool
	}{
		{raft.Follower, 7, true},
		{raft.Follower, 6, false},
		{raft.Follower, 8, false},
		{raft.Leader, 7, false},
		{raft.Leader, 6, false},
		{raft.Candidate, 7, false},
		{raft.Shutdown, 7, false},
	} {
		g.setRaft(fixedState{c.state, c.term})
		if got := g.fastPathSafe(rpc); got != c.fast {
			t.Errorf("node %v at term %d, heartbeat of term 7: fast path %v, want %v", c.state, c.term, got, c.fast)
		}
	}
	g.setRaft(fixedState{raft.Follower, 7})
	withEntry := raft.RPC{Command: &raft.AppendEntriesRequest{Term: 7, Entries: []*raft.Log{{}}}}
	if g.fastPathSafe(withEntry) {
		t.Fatal("an AppendEntries with entries on the fast path")
	}
}

type fixedState struct {
	state raft.RaftState
	term  uint64
}

func (f fixedState) State() raft.RaftState { return f.state }
func (f fixedState) CurrentTerm() uint64   { return f.term }

// stuckPipeline is NetworkTransport's pipeline in miniature: answers go
// into a buffer of two, and AppendEntries blocks while it is full.
type stuckPipeline struct {
	done   chan raft.AppendFuture
	closed chan struct{}
}

// failedAppend is an append whose connection failed: answered with an
// error, its response left zero.
type failedAppend struct{ req *raft.AppendEntriesRequest }

func (f failedAppend) Error() error                          { return io.ErrUnexpectedEOF }
func (f failedAppend) Start() time.Time                      { return time.Time{} }
func (f failedAppend) Request() *raft.AppendEntriesRequest   { return f.req }
func (f failedAppend) Response() *raft.AppendEntriesResponse { return &raft.AppendEntriesResponse{} }

func (p *stuckPipeline) AppendEntries(args *raft.AppendEntriesRequest, _ *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	f := failedAppend{args}
	select {
	case p.done <- f:
		return f, nil
	case <-p.closed:
		return nil, raft.ErrPipelineShutdown
	}
}
func (p *stuckPipeline) Consumer() <-chan raft.AppendFuture { return p.done }
func (p *stuckPipeline) Close() error                       { close(p.closed); return nil }

// Raft reads a pipeline's answers until the first failure and then stops;
// its sender goes on sending until its next turn. Through the wrapper the
// answers are read on, so no send blocks, and once raft has read the
// failure every further send is refused, which ends the sender's loop.
// (Straight on the miniature pipeline the third send blocks for good.)
func TestDrainedPipeline(t *testing.T) {
	inner := &stuckPipeline{done: make(chan raft.AppendFuture, 2), closed: make(chan struct{})}
	p := newDrainedPipeline(inner)
	defer p.Close()
	if _, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: 3}, nil); err != nil {
		t.Fatal(err)
	}
	// raft's reader: one answer, a failure, and it returns.
	if f := <-p.Consumer(); !endsDecoder(f) {
		t.Fatal("a failed append does not end raft's reader")
	}
	// The sender's next turns: none blocks, and the pipeline refuses soon.
	refused := false
	for range 10 {
		if _, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: 3}, nil); errors.Is(err, errPipelineEnded) {
			refused = true
			break
		}
	}
	if !refused {
		t.Fatal("the pipeline still takes appends after raft stopped reading its answers")
	}
	ok := &raft.AppendEntriesResponse{Term: 3, Success: true}
	if endsDecoder(answered{failedAppend{&raft.AppendEntriesRequest{Term: 3}}, ok}) {
		t.Fatal("a successful append ends raft's reader")
	}
	newer := &raft.AppendEntriesResponse{Term: 4, Success: true}
	if !endsDecoder(answered{failedAppend{&raft.AppendEntriesRequest{Term: 3}}, newer}) {
		t.Fatal("an answer of a newer term does not end raft's reader")
	}
}

// answered is an append answered with resp.
type answered struct {
	failedAppend
	resp *raft.AppendEntriesResponse
}

func (a answered) Error() error                          { return nil }
func (a answered) Response() *raft.AppendEntriesResponse { return a.resp }
