package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/locking-center/locking-center/cluster"
)

// faultProxy is a TCP proxy on 127.0.0.1 that the test controls: it
// passes connections to its upstream, and while cut it closes every
// connection it carries and every new one at once.
type faultProxy struct {
	ln net.Listener
	wg sync.WaitGroup

	mu       sync.Mutex
	upstream string
	cut      bool
	conns    map[net.Conn]struct{}
}

func newFaultProxy(t *testing.T) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		ln.Close()
		p.setCut(true)
		p.wg.Wait()
	})
	return p
}

func (p *faultProxy) addr() string { return p.ln.Addr().String() }

func (p *faultProxy) setUpstream(a string) {
	p.mu.Lock()
	p.upstream = a
	p.mu.Unlock()
}

// setCut cuts the link (closing what it carries) or heals it.
func (p *faultProxy) setCut(cut bool) {
	p.mu.Lock()
	p.cut = cut
	var conns []net.Conn
	if cut {
		for c := range p.conns {
			conns = append(conns, c)
		}
		clear(p.conns)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// track adds c unless the link is cut.
func (p *faultProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *faultProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		up := p.upstream
		p.mu.Unlock()
		if up == "" || !p.track(c) {
			c.Close()
			continue
		}
		p.wg.Go(func() { p.carry(c, up) })
	}
}

func (p *faultProxy) carry(c net.Conn, up string) {
	defer c.Close()
	u, err := net.DialTimeout("tcp", up, time.Second)
	if err != nil {
		return
	}
	defer u.Close()
	if !p.track(u) {
		return
	}
	done := make(chan struct{}, 2)
	go func() { io.Copy(u, c); done <- struct{}{} }()
	go func() { io.Copy(c, u); done <- struct{}{} }()
	<-done
	c.Close()
	u.Close()
	<-done
}

// clusterNode is one lcd process of a test cluster.
type clusterNode struct {
	id    string
	dir   string
	env   []string
	p     *subprocess
	addrs lcdAddrs
}

// lcdCluster is three lcd processes on 127.0.0.1 whose raft ports reach
// each other only through fault proxies: home[i] is node i's advertised
// raft address, link[i][j] what node i dials to reach node j.
type lcdCluster struct {
	t     *testing.T
	mu    sync.Mutex     // guards nodes and each node's addrs, which clients read
	nodes []*clusterNode // appended to only by addNode
	home  []*faultProxy
	link  [][]*faultProxy
	// tls, when set, is the client TLS of the nodes' ports (their metrics
	// port included).
	tls *tls.Config
}

// node returns node i.
func (lc *lcdCluster) node(i int) *clusterNode {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.nodes[i]
}

// addrs returns node i's addresses as its latest start logged them.
func (lc *lcdCluster) addrs(i int) lcdAddrs {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.nodes[i].addrs
}

func startCluster(t *testing.T, size int) *lcdCluster {
	t.Helper()
	return startClusterWith(t, size, nil)
}

// startClusterWith is startCluster with env added to each node's
// environment.
func startClusterWith(t *testing.T, size int, env []string) *lcdCluster {
	t.Helper()
	lc := &lcdCluster{t: t}
	for range size {
		lc.home = append(lc.home, newFaultProxy(t))
	}
	var peers []string
	for i := range size {
		peers = append(peers, fmt.Sprintf("n%d=%s", i+1, lc.home[i].addr()))
	}
	for i := range size {
		row := make([]*faultProxy, size)
		var dial []string
		for j := range size {
			if i != j {
				row[j] = newFaultProxy(t)
				dial = append(dial, fmt.Sprintf("n%d=%s", j+1, row[j].addr()))
			}
		}
		lc.link = append(lc.link, row)
		n := &clusterNode{id: fmt.Sprintf("n%d", i+1), dir: t.TempDir()}
		n.env = []string{"BIND_ADDRESS=127.0.0.1:0", "LOG_FORMAT=json", "SHUTDOWN_TIMEOUT=1s",
			"NODE_ID=" + n.id, "RAFT_ADDRESS=127.0.0.1:0", "RAFT_ADVERTISE=" + lc.home[i].addr(),
			"RAFT_DIR=" + n.dir, "RAFT_PEERS=" + strings.Join(peers, ","), "RAFT_DIAL=" + strings.Join(dial, ",")}
		n.env = append(n.env, env...)
		lc.nodes = append(lc.nodes, n)
	}
	for i := range size {
		lc.start(i)
	}
	return lc
}

// start starts node i and points the proxies into it at its raft port.
func (lc *lcdCluster) start(i int) {
	t := lc.t
	t.Helper()
	n := lc.nodes[i]
	p := &subprocess{log: newLCDLog(), exited: make(chan struct{})}
	p.cmd = exec.Command(lcdBinary)
	p.cmd.Env = append(os.Environ(), n.env...)
	p.cmd.Stderr = p.log
	if dir := os.Getenv("LC_CLUSTER_LOGS"); dir != "" {
		// Every run of every node, appended to dir/<id>.log, for a soak's
		// post-mortem.
		f, err := os.OpenFile(filepath.Join(dir, n.id+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		p.cmd.Stderr = io.MultiWriter(p.log, f)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.exited)
		p.err = p.cmd.Wait()
	}()
	t.Cleanup(p.kill)
	select {
	case <-p.log.started:
	case <-p.exited:
		t.Fatalf("%s exited before it started:\n%s", n.id, p.log)
	case <-time.After(startTimeout):
		t.Fatalf("%s did not start:\n%s", n.id, p.log)
	}
	p.log.mu.Lock()
	addrs := p.log.addrs
	p.log.mu.Unlock()
	lc.mu.Lock()
	n.addrs = addrs
	lc.mu.Unlock()
	n.p = p
	lc.home[i].setUpstream(n.addrs.Raft)
	for j := range lc.nodes {
		if j != i {
			lc.link[j][i].setUpstream(n.addrs.Raft)
		}
	}
}

// addNode adds a node to lc that starts with no peers and an empty
// RAFT_DIR, so that it waits to be added, starts it, and returns its
// index. The others dial its advertised raft address, a proxy like every
// node's.
func (lc *lcdCluster) addNode() int {
	t := lc.t
	i := len(lc.nodes)
	lc.home = append(lc.home, newFaultProxy(t))
	var dial []string
	row := make([]*faultProxy, i+1)
	for j := range lc.nodes {
		row[j] = newFaultProxy(t)
		row[j].setUpstream(lc.addrs(j).Raft)
		dial = append(dial, fmt.Sprintf("%s=%s", lc.nodes[j].id, row[j].addr()))
		lc.link[j] = append(lc.link[j], newFaultProxy(t)) // not in node j's RAFT_DIAL: it dials home[i]
	}
	lc.link = append(lc.link, row)
	n := &clusterNode{id: fmt.Sprintf("n%d", i+1), dir: t.TempDir()}
	n.env = []string{"BIND_ADDRESS=127.0.0.1:0", "LOG_FORMAT=json", "SHUTDOWN_TIMEOUT=1s",
		"NODE_ID=" + n.id, "RAFT_ADDRESS=127.0.0.1:0", "RAFT_ADVERTISE=" + lc.home[i].addr(),
		"RAFT_DIR=" + n.dir, "RAFT_DIAL=" + strings.Join(dial, ",")}
	lc.mu.Lock()
	lc.nodes = append(lc.nodes, n)
	lc.mu.Unlock()
	lc.start(i)
	return i
}

// stopWithin bounds how long a node may take to exit after SIGTERM.
const stopWithin = time.Minute

// stop ends node i with SIGTERM, as a rolling restart does. A node that
// has not exited within stopWithin gets SIGQUIT, which logs its
// goroutines, and fails the test.
func (lc *lcdCluster) stop(i int) {
	p := lc.nodes[i].p
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(stopWithin):
		p.cmd.Process.Signal(syscall.SIGQUIT)
		<-p.exited
		// The whole log, goroutines and all, is kept: the last lines
		// alone may not reach the goroutine that held the stop up.
		full := filepath.Join(os.TempDir(), fmt.Sprintf("lcd-%s-stuck-%d.log", lc.nodes[i].id, time.Now().UnixNano()))
		os.WriteFile(full, []byte(p.log.String()), 0o644)
		lc.t.Errorf("%s had not exited %v after SIGTERM (its whole log: %s):\n%s", lc.nodes[i].id, stopWithin, full,
			lastLines(p.log.String(), 600))
		return
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		lc.t.Errorf("%s exited %d after SIGTERM:\n%s", lc.nodes[i].id, code, lastLines(p.log.String(), 40))
	}
}

// kill ends node i with SIGKILL.
func (lc *lcdCluster) kill(i int) {
	lc.nodes[i].p.cmd.Process.Signal(syscall.SIGKILL)
	<-lc.nodes[i].p.exited
}

// isolate cuts node i's raft links to and from every other node, or heals
// them.
func (lc *lcdCluster) isolate(i int, cut bool) {
	for j := range lc.nodes {
		if j != i {
			lc.link[i][j].setCut(cut)
			lc.link[j][i].setCut(cut)
		}
	}
}

// status reads node i's /cluster; ok is false when it does not answer.
func (lc *lcdCluster) status(i int, digest bool) (cluster.Status, bool) {
	scheme, cl := "http", http.Client{Timeout: 2 * time.Second}
	if lc.tls != nil {
		scheme, cl.Transport = "https", &http.Transport{TLSClientConfig: lc.tls}
	}
	url := scheme + "://" + lc.addrs(i).Metrics + "/cluster"
	if digest {
		url += "?digest"
	}
	resp, err := cl.Get(url)
	if err != nil {
		return cluster.Status{}, false
	}
	defer resp.Body.Close()
	var st cluster.Status
	if json.NewDecoder(resp.Body).Decode(&st) != nil {
		return cluster.Status{}, false
	}
	return st, true
}

// pollEvery is how often the test asks the processes for their state:
// they are other processes, so there is no channel to wait on.
const pollEvery = 20 * time.Millisecond

// leader returns the index of the node that leads and serves among those
// of alive, waiting for one for at most d.
func (lc *lcdCluster) leader(alive []int, d time.Duration) (int, bool) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		for _, i := range alive {
			if st, ok := lc.status(i, false); ok && st.State == "Leader" && st.Ready {
				return i, true
			}
		}
		time.Sleep(pollEvery)
	}
	return 0, false
}

// converged waits until the nodes of alive report one applied index and
// one table digest, and returns the digest.
func (lc *lcdCluster) converged(alive []int, d time.Duration) (string, error) {
	deadline := time.Now().Add(d)
	var last []cluster.Status
	for time.Now().Before(deadline) {
		last = last[:0]
		for _, i := range alive {
			st, ok := lc.status(i, true)
			if !ok {
				break
			}
			last = append(last, st)
		}
		if len(last) == len(alive) {
			same := true
			for _, st := range last[1:] {
				same = same && st.AppliedIndex == last[0].AppliedIndex && st.Digest == last[0].Digest &&
					st.CommitIndex == last[0].CommitIndex
			}
			if same {
				return last[0].Digest, nil
			}
		}
		time.Sleep(pollEvery)
	}
	return "", fmt.Errorf("nodes did not converge: %+v", last)
}

// awaitRecorded waits until every node of alive lists node i at its
// current mutex port, for at most d.
func (lc *lcdCluster) awaitRecorded(i int, alive []int, d time.Duration) error {
	want := lc.addrs(i).Mutex
	deadline := time.Now().Add(d)
	var views []string
	for time.Now().Before(deadline) {
		views = views[:0]
		for _, j := range alive {
			st, _ := lc.status(j, false)
			for _, m := range st.Members {
				if m.ID == lc.node(i).id {
					views = append(views, fmt.Sprintf("%s: %s", lc.node(j).id, m.ClientAddress))
					if m.ClientAddress != want {
						views[len(views)-1] += " (stale)"
					}
				}
			}
		}
		if len(views) == len(alive) && !strings.Contains(strings.Join(views, ""), "stale") {
			return nil
		}
		time.Sleep(pollEvery)
	}
	return fmt.Errorf("%s came back at %s; the nodes list it at %v", lc.nodes[i].id, want, views)
}

// mutexAddrs returns the mutex addresses of the nodes of alive.
func (lc *lcdCluster) mutexAddrs(alive []int) []string {
	var out []string
	for _, i := range alive {
		out = append(out, lc.addrs(i).Mutex)
	}
	return out
}

// logs returns every node's log, for a failure message.
func (lc *lcdCluster) logs() string {
	var b strings.Builder
	for _, n := range lc.nodes {
		if n.p != nil {
			fmt.Fprintf(&b, "--- %s\n%s\n", n.id, lastLines(n.p.log.String(), 60))
		}
	}
	return b.String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
