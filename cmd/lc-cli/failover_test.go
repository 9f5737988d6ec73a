package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/locking-center/locking-center/manager"
)

// lcdOnce builds lcd once for the tests that start a cluster, beside the
// lc-cli of TestMain, whose directory goes with it.
var lcdOnce = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(filepath.Dir(binary), "lcd")
	if out, err := exec.Command(goTool(), "build", "-o", bin, "../lcd").CombinedOutput(); err != nil {
		return "", fmt.Errorf("build lcd: %v\n%s", err, out)
	}
	return bin, nil
})

// forwarder passes every connection on to an upstream set later: the
// raft address a node advertises before its own port is known.
type forwarder struct {
	ln       net.Listener
	upstream atomic.Pointer[string]
	wg       sync.WaitGroup
}

func newForwarder(t *testing.T) *forwarder {
	t.Helper()
	f := &forwarder{ln: listen(t)}
	f.wg.Go(func() {
		for {
			c, err := f.ln.Accept()
			if err != nil {
				return
			}
			up := f.upstream.Load()
			if up == nil {
				c.Close()
				continue
			}
			f.wg.Go(func() { carry(c, *up) })
		}
	})
	t.Cleanup(func() {
		f.ln.Close()
		f.wg.Wait()
	})
	return f
}

// carry copies c to a connection to up and back until either side ends.
func carry(c net.Conn, up string) {
	defer c.Close()
	u, err := net.DialTimeout("tcp", up, 2*time.Second)
	if err != nil {
		return
	}
	defer u.Close()
	done := make(chan struct{}, 2)
	go func() { io.Copy(u, c); done <- struct{}{} }()
	go func() { io.Copy(c, u); done <- struct{}{} }()
	<-done
}

// lcdNode is one lcd process of a test cluster.
type lcdNode struct {
	cmd             *exec.Cmd
	exited          chan struct{}
	mutex, managerA string
	log             syncBuffer
}

// testCluster is three lcd nodes on 127.0.0.1.
type testCluster struct {
	nodes []*lcdNode
}

// startCluster starts three lcd nodes that form one cluster, and waits
// until they have a leader and each has recorded every node's mutex
// port. The nodes stop when the test ends.
func startTestCluster(t *testing.T) *testCluster {
	t.Helper()
	lcd, err := lcdOnce()
	if err != nil {
		t.Fatal(err)
	}
	const size = 3
	var fwd []*forwarder
	var peers []string
	for i := range size {
		fwd = append(fwd, newForwarder(t))
		peers = append(peers, fmt.Sprintf("n%d=%s", i+1, fwd[i].ln.Addr()))
	}
	tc := &testCluster{}
	for i := range size {
		n := &lcdNode{exited: make(chan struct{})}
		n.cmd = exec.Command(lcd)
		n.cmd.Env = append(withoutLC(os.Environ()), "BIND_ADDRESS=127.0.0.1:0", "LOG_FORMAT=json", "SHUTDOWN_TIMEOUT=1s",
			"HTTP_ADDRESS=", fmt.Sprintf("NODE_ID=n%d", i+1), "RAFT_ADDRESS=127.0.0.1:0",
			"RAFT_ADVERTISE="+fwd[i].ln.Addr().String(), "RAFT_DIR="+t.TempDir(), "RAFT_PEERS="+strings.Join(peers, ","))
		pr, pw := io.Pipe()
		n.cmd.Stderr = pw
		started := make(chan map[string]string, 1)
		go func() {
			sc := bufio.NewScanner(pr)
			for sc.Scan() {
				n.log.Write(append(sc.Bytes(), '\n'))
				var rec map[string]any
				if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == "lcd started" {
					m := map[string]string{}
					for k, v := range rec {
						m[k], _ = v.(string)
					}
					started <- m
				}
			}
			io.Copy(io.Discard, pr)
		}()
		if err := n.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			n.cmd.Wait()
			pw.Close()
			close(n.exited)
		}()
		t.Cleanup(func() {
			n.cmd.Process.Kill()
			<-n.exited
		})
		select {
		case m := <-started:
			n.mutex, n.managerA = m["mutex"], m["manager"]
			fwd[i].upstream.Store(ptr(m["raft"]))
		case <-n.exited:
			t.Fatalf("lcd n%d exited:\n%s", i+1, n.log.String())
		case <-time.After(patience):
			t.Fatalf("lcd n%d did not start:\n%s", i+1, n.log.String())
		}
		tc.nodes = append(tc.nodes, n)
	}
	eventually(t, "a leader, and every node's mutex port recorded at each node", func() bool {
		for _, n := range tc.nodes {
			ms, err := (&manager.Client{Addr: n.managerA, ReadTimeout: time.Second}).Members(context.Background())
			if err != nil || len(ms) != size {
				return false
			}
			leaders := 0
			for j, x := range ms {
				if x.ClientAddress != tc.nodes[j].mutex {
					return false
				}
				if x.Leader {
					leaders++
				}
			}
			if leaders != 1 {
				return false
			}
		}
		return true
	})
	return tc
}

func ptr[T any](v T) *T { return &v }

// environ is lc-cli's environment for the nodes of alive (all when
// none is given): both address lists, in one order.
func (tc *testCluster) environ(alive ...int) []string {
	if len(alive) == 0 {
		alive = []int{0, 1, 2}
	}
	var mutexes, managers []string
	for _, i := range alive {
		mutexes, managers = append(mutexes, tc.nodes[i].mutex), append(managers, tc.nodes[i].managerA)
	}
	return []string{"LC_ADDRESS=" + strings.Join(mutexes, ","), "LC_MANAGER_ADDRESS=" + strings.Join(managers, ",")}
}

// leader returns the index of the node that leads, as the nodes of alive
// agree on it, waiting for one.
func (tc *testCluster) leader(t *testing.T, alive ...int) int {
	t.Helper()
	leader := -1
	eventually(t, "a leader", func() bool {
		leader = -1
		for _, i := range alive {
			ms, err := (&manager.Client{Addr: tc.nodes[i].managerA, ReadTimeout: time.Second}).Members(context.Background())
			if err != nil {
				return false
			}
			for j, x := range ms {
				if x.Leader && x.Reachable && x.State == "Leader" && (leader == -1 || leader == j) {
					leader = j
				}
			}
		}
		return leader >= 0 && leader < len(tc.nodes) && contains(alive, leader)
	})
	return leader
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// holders returns the holders of key at node i's management port.
func (tc *testCluster) holders(t *testing.T, i int, key string) []manager.Holder {
	t.Helper()
	hs, err := (&manager.Client{Addr: tc.nodes[i].managerA}).Holders(context.Background())
	if err != nil {
		t.Fatalf("holders at n%d: %v", i+1, err)
	}
	var out []manager.Holder
	for _, h := range hs {
		if h.Key == key {
			out = append(out, h)
		}
	}
	return out
}

// A command run by lock -- at the three nodes' addresses keeps its lock
// while the leader is killed with SIGKILL under it: it ends with exit 0,
// its fencing token is the one the new leader lists for the key, and the
// key is free afterwards.
func TestLockCommandSurvivesTheLeadersDeath(t *testing.T) {
	tc := startTestCluster(t)
	dir := t.TempDir()
	gate, tokenFile := fifo(t), filepath.Join(dir, "token")
	script := `echo "$LC_FENCING_TOKEN" > "$1.tmp" && mv "$1.tmp" "$1" && read line < "$2"`
	watch := startBinary(t, tc.environ(), "watch", "failover/")
	eventually(t, "watch to see a probe", func() bool {
		if r := runBinary(t, tc.environ(), "wait", "failover/probe"); r.code != exitOK {
			t.Logf("wait = %d %q", r.code, r.stderr)
		}
		if watch.cmd.ProcessState != nil || strings.Contains(watch.errOut.String(), "lc-cli") {
			t.Fatalf("watch ended: %q", watch.errOut.String())
		}
		return strings.Contains(watch.output(), "released failover/probe")
	})
	run := startBinary(t, tc.environ(), "lock", "failover/k", "--", "sh", "-c", script, "sh", tokenFile, gate)
	var token uint64
	eventually(t, "the command to write its token", func() bool {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return false
		}
		token, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		return err == nil
	})
	old := tc.leader(t, 0, 1, 2)
	if hs := tc.holders(t, old, "failover/k"); len(hs) != 1 || hs[0].Token != token {
		t.Fatalf("the leader lists %+v, want the token %d", hs, token)
	}
	tc.nodes[old].cmd.Process.Signal(syscall.SIGKILL)
	<-tc.nodes[old].exited
	var alive []int
	for i := range tc.nodes {
		if i != old {
			alive = append(alive, i)
		}
	}
	// Asked at once, during the election, keys waits for the new leader.
	r := runBinary(t, tc.environ(), "keys", "-d", "-o", "json")
	var listed struct {
		Holders []jsonHolder `json:"holders"`
	}
	decodeJSON(t, "keys -d during the election", r.stdout, &listed)
	if len(listed.Holders) != 1 || *listed.Holders[0].Token != strconv.FormatUint(token, 10) {
		t.Fatalf("keys -d during the election = %+v, stderr %q; want the command's token %d", listed, r.stderr, token)
	}
	next := tc.leader(t, alive...)
	eventually(t, "the sessions of lock and watch to be attached at the new leader", func() bool {
		ss, err := (&manager.Client{Addr: tc.nodes[next].managerA}).Sessions(context.Background())
		return err == nil && len(ss) == 2 && ss[0].RemoteAddr != "" && ss[1].RemoteAddr != ""
	})
	if hs := tc.holders(t, next, "failover/k"); len(hs) != 1 || hs[0].Token != token {
		t.Fatalf("the new leader lists %+v, want the token %d of the command", hs, token)
	}
	releaseFifo(t, gate)
	if r := run.wait(t); r.code != exitOK || r.stderr != "" {
		t.Fatalf("lock -- after the leader's death = %d, stderr %q", r.code, r.stderr)
	}
	if hs := tc.holders(t, next, "failover/k"); len(hs) != 0 {
		t.Fatalf("after the command the key is held: %+v", hs)
	}
	// The watch followed the leader too: a gap where it moved, then the
	// command's release.
	eventually(t, "watch to see the release after the failover", func() bool {
		return strings.Contains(watch.output(), "released failover/k token="+strconv.FormatUint(token, 10))
	})
	out := watch.output()
	if gap := strings.Index(out, " gap\n"); gap < 0 || gap > strings.Index(out, "released failover/k") {
		t.Errorf("watch printed no gap before the release:\n%s", out)
	}
	watch.signal(syscall.SIGINT)
	if r := watch.wait(t); r.code != exitSignalBase+exitCode(syscall.SIGINT) || r.stderr != "" {
		t.Errorf("watch after SIGINT = %d %q", r.code, r.stderr)
	}
	// Every node given, the dead one too: each command finds a node that
	// serves it, and the management commands reach the leader.
	env := tc.environ()
	if r := runBinary(t, env, "trylock", "failover/v1"); r.code != exitOK {
		t.Fatalf("trylock at three addresses, one dead = %d %q", r.code, r.stderr)
	}
	if r := runBinary(t, env, "keys"); r.code != exitOK || r.stdout != "failover/v1\n" {
		t.Fatalf("keys = %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := runBinary(t, env, "unlock", "failover/v1"); r.code != exitOK {
		t.Fatalf("unlock = %d %q", r.code, r.stderr)
	}
	if r := runBinary(t, env, "wait", "failover/v1"); r.code != exitOK {
		t.Fatalf("wait = %d %q", r.code, r.stderr)
	}
	if hs := tc.holders(t, next, "failover/v1"); len(hs) != 0 {
		t.Fatalf("after unlock and wait the key is held: %+v", hs)
	}
}

// The listings and resets asked of a follower go to the leader's
// management port: a follower first in the lists, with the leader after
// it or every node.
func TestManagementCommandsFollowTheLeader(t *testing.T) {
	tc := startTestCluster(t)
	leader := tc.leader(t, 0, 1, 2)
	follower := (leader + 1) % 3
	if r := runBinary(t, tc.environ(), "trylock", "follow/k"); r.code != exitOK {
		t.Fatalf("trylock = %d %q", r.code, r.stderr)
	}
	for _, env := range [][]string{
		tc.environ(follower, leader),
		tc.environ(follower, 3-follower-leader, leader),
	} {
		if r := runBinary(t, env, "keys"); r.code != exitOK || r.stdout != "follow/k\n" {
			t.Errorf("%q keys = %d %q %q", env, r.code, r.stdout, r.stderr)
		}
		if r := runBinary(t, env, "sessions"); r.code != exitOK || !strings.HasPrefix(r.stdout, "ID") {
			t.Errorf("%q sessions = %d %q %q", env, r.code, r.stdout, r.stderr)
		}
	}
	if r := runBinary(t, tc.environ(follower, leader), "reset", "follow/k"); r.code != exitOK {
		t.Fatalf("reset at a follower = %d %q", r.code, r.stderr)
	}
	if hs := tc.holders(t, leader, "follow/k"); len(hs) != 0 {
		t.Fatalf("after the reset at a follower the key is held: %+v", hs)
	}
}

// lock -- and wait, started right after the leader is killed, with the
// dead leader's address last (the other nodes answer not_leader, naming
// it or none until they elect another), wait for the new leader within
// --timeout and succeed: they do not give up on the dead node's refused
// dial.
func TestLockStartedDuringAFailover(t *testing.T) {
	tc := startTestCluster(t)
	leader := tc.leader(t, 0, 1, 2)
	env := tc.environ((leader+1)%3, (leader+2)%3, leader)
	tc.nodes[leader].cmd.Process.Kill()
	<-tc.nodes[leader].exited
	if r := runBinary(t, env, "lock", "during/k", "--", "echo", "ran"); r.code != exitOK || r.stdout != "ran\n" {
		t.Fatalf("lock -- during the failover = %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := runBinary(t, env, "wait", "during/k"); r.code != exitOK {
		t.Fatalf("wait after the failover = %d %q", r.code, r.stderr)
	}
}
