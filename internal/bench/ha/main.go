// Command ha measures a three-node lcd cluster beside a three-node etcd
// cluster, and lcd's failover, and prints the figures as Markdown for
// docs/benchmarks.md.
//
//	cd internal/bench/ha && go run . [-duration 3s] [-rounds 3] [-only throughput,hotkey,failover] [-stores boltdb,wal]
//
// It builds lcd from the repository (or takes -lcd), starts three lcd
// nodes for each raft log store of -stores (RAFT_LOG_STORE; default both,
// boltdb and wal) and three etcd members (-etcd, Debian's etcd-server) as
// processes on ports of 127.0.0.1 it picks, each with its data in a
// directory of its own under one temporary directory, and drives them from
// this process:
//
//   - throughput: uncontended acquire+release cycles, each client its own
//     key, at 16 and 64 clients, in rounds alternating between the
//     clusters (etcd, then each lcd cluster). An lcd client is a session of
//     the session protocol through clients/go, connected to the leader:
//     Acquire, then Release. An etcd
//     client is a clientv3 client with a concurrency.Session (a lease) and
//     a concurrency.Mutex, connected to the leader: Lock, then Unlock.
//     Cycles/s (median of the rounds), servers' CPU per cycle (the three
//     processes' utime+stime, from /proc/PID/stat), raft entries per
//     cycle, and each lcd cluster's ratios to etcd (taken per round, then
//     the median).
//   - hotkey: 16 and 64 clients on one key, each acquiring again as soon
//     as it has released; the handoff time from a holder's release call to
//     the next holder's grant, p50 and p99.
//   - failover: rounds of SIGKILL to the lcd leader; the time from the
//     kill to the first grant by a new leader, as a client sees it that
//     tries every live node in turn (a session and a try-once acquire of a
//     fresh key) until one grants; p50 and max. The killed node is started
//     again and caught up before the next round. Default cluster settings
//     but the log store; each lcd cluster in turn.
//
// Linux only (it reads /proc).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	benchproc "github.com/locking-center/locking-center/internal/bench/proc"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

var (
	duration   = flag.Duration("duration", 3*time.Second, "length of one measured round")
	rounds     = flag.Int("rounds", 3, "rounds per cluster and client count; the median is reported")
	only       = flag.String("only", "throughput,hotkey,failover", "comma-separated parts to run")
	clientList = flag.String("clients", "16,64", "comma-separated client counts of throughput and hotkey")
	failovers  = flag.Int("failovers", 20, "rounds of the failover part")
	lcdPath    = flag.String("lcd", "", "an lcd binary to measure instead of one built from the repository")
	etcdPath   = flag.String("etcd", "etcd", "the etcd server binary")
	root       = flag.String("root", "../../..", "the repository's top directory, where lcd is built from")
	logDir     = flag.String("logs", "", "a directory to append each server's log to (lcd-boltdb-n1.log, etcd-e1.log, ...); none by default")
	raftFloor  = flag.Bool("raft-floor", true, "throughput: measure the raft floor too (./raftfloor: hashicorp/raft with lcd's settings and the WAL, a state machine that does nothing)")
	clientKind = flag.String("lcd-clients", "go,frames", "throughput: comma-separated clients of each lcd cluster, one row each: go (clients/go's Session) and frames (the session protocol's frames written directly, as the raft floor's client writes its byte)")
	storeList  = flag.String("stores", "boltdb,wal", "comma-separated raft log stores (RAFT_LOG_STORE) of the lcd clusters to measure, one cluster each")
)

// serverLog returns where the server name writes its log.
func serverLog(name string) io.Writer {
	if *logDir == "" {
		return io.Discard
	}
	f, err := os.OpenFile(filepath.Join(*logDir, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		log.Fatal(err)
	}
	return f
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	dir, err := os.MkdirTemp("", "lc-bench-ha")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	lcd := *lcdPath
	if lcd == "" {
		lcd = filepath.Join(dir, "lcd")
		benchproc.Build(*root, lcd, "./cmd/lcd")
	}
	var clients []int
	for _, f := range strings.Split(*clientList, ",") {
		n, err := strconv.Atoi(f)
		if err != nil || n < 2 {
			log.Fatalf("-clients: %q is not a count of 2 or more", f)
		}
		clients = append(clients, n)
	}
	parts := strings.Split(*only, ",")
	fmt.Printf("# High-availability benchmark run %s, %d CPUs, round %v x %d, load average %s\n\n",
		time.Now().UTC().Format(time.RFC3339), numCPU(), *duration, *rounds, loadAvg())

	one, three := diskSyncs(dir, 1), diskSyncs(dir, 3)
	fmt.Printf("The disk under the nodes' directories takes %.0f appends with fsync a second from one writer, %.0f in all from three at once\n"+
		"(the three nodes of a cluster share it here: each syncs its raft log once per batch of entries).\n\n", one, three)

	var lcs []*lcdCluster
	for _, st := range strings.Split(*storeList, ",") {
		lc := startLCD(lcd, dir, st)
		defer lc.stop()
		lcs = append(lcs, lc)
	}
	if slices.Contains(parts, "throughput") || slices.Contains(parts, "hotkey") {
		et := startEtcd(*etcdPath, dir)
		defer et.stop()
		fmt.Printf("lcd %s (raft log stores: %s); %s\n\n", lcd, *storeList, et.version)
		if slices.Contains(parts, "throughput") {
			var floor []system
			if *raftFloor {
				bin := filepath.Join(dir, "raftfloor")
				benchproc.Build(filepath.Join(*root, "internal", "bench", "ha"), bin, "./raftfloor")
				fc := startFloor(bin, dir)
				defer fc.stop()
				floor = append(floor, floorSystem(fc))
			}
			throughput(lcs, et, clients, floor...)
		}
		if slices.Contains(parts, "hotkey") {
			hotKey(lcs, et, clients)
		}
		et.stop()
	}
	if slices.Contains(parts, "failover") {
		for _, lc := range lcs {
			failover(lc, *failovers)
		}
	}
	fmt.Printf("Load average at the end: %s\n", loadAvg())
}

// diskSyncs returns how many appends of 200 bytes, each followed by
// fsync, writers files in dir take per second in all, over about a second.
func diskSyncs(dir string, writers int) float64 {
	var total atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("sync-probe-%d", i)))
			if err != nil {
				log.Fatal(err)
			}
			defer os.Remove(f.Name())
			defer f.Close()
			b := make([]byte, 200)
			for time.Since(start) < time.Second {
				if _, err := f.Write(b); err != nil {
					log.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					log.Fatal(err)
				}
				total.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(total.Load()) / time.Since(start).Seconds()
}

// loadAvg returns the first three fields of /proc/loadavg: the machine's
// load over 1, 5 and 15 minutes.
func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// --- processes ---

func numCPU() int {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(b), "processor\t:")
}

// proc is a server process of a cluster.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func spawn(bin string, args, env []string, logTo io.Writer) *proc {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logTo, logTo
	if err := cmd.Start(); err != nil {
		log.Fatalf("start %s: %v", bin, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	return p
}

func (p *proc) kill() {
	if p == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// cpu returns the process's user and system time so far.
func (p *proc) cpu() time.Duration {
	d, _ := benchproc.CPUTime(p.cmd.Process.Pid) // 0 once it has exited
	return d
}

func cpuOf(ps []*proc) time.Duration {
	var d time.Duration
	for _, p := range ps {
		d += p.cpu()
	}
	return d
}

// waitFor polls ok every 20 ms until it holds or d passes.
func waitFor(d time.Duration, what string, ok func() bool) {
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			log.Fatalf("no %s within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// --- lcd ---

// lcdNode is one lcd node: its addresses, environment and process.
type lcdNode struct {
	id, mutex, metrics string
	env                []string
	p                  *proc
}

type lcdCluster struct {
	bin   string
	store string // RAFT_LOG_STORE
	nodes []*lcdNode
}

func startLCD(bin, dir, store string) *lcdCluster {
	lc := &lcdCluster{bin: bin, store: store}
	var peers []string
	for i := range 3 {
		addrs := benchproc.FreeAddrs(4)
		n := &lcdNode{id: fmt.Sprintf("n%d", i+1), mutex: addrs[0], metrics: addrs[2]}
		raft := addrs[3]
		peers = append(peers, n.id+"="+raft+"="+n.mutex)
		n.env = []string{"NODE_ID=" + n.id, "BIND_ADDRESS=" + n.mutex,
			"MANAGER_ADDRESS=" + addrs[1], "METRICS_ADDRESS=" + n.metrics,
			"RAFT_ADDRESS=" + raft, "RAFT_DIR=" + filepath.Join(dir, lc.name()+"-"+n.id), "RAFT_LOG_STORE=" + store, "LOG_LEVEL=warn",
			"HTTP_ADDRESS="} // no HTTP API, whose port + 3 was not picked free (ignored by an lcd without one)
		lc.nodes = append(lc.nodes, n)
	}
	for _, n := range lc.nodes {
		n.env = append(n.env, "RAFT_PEERS="+strings.Join(peers, ","))
		lc.start(n)
	}
	lc.leader(30 * time.Second)
	return lc
}

// name names the cluster in tables, logs and directories: lcd-<store>.
func (lc *lcdCluster) name() string { return "lcd-" + lc.store }

func (lc *lcdCluster) start(n *lcdNode) {
	n.p = spawn(lc.bin, nil, n.env, serverLog(lc.name()+"-"+n.id))
}

func (lc *lcdCluster) stop() {
	for _, n := range lc.nodes {
		n.p.kill()
	}
}

// status is the part of GET /cluster the benchmark reads.
type status struct {
	State        string `json:"state"`
	Ready        bool   `json:"ready"`
	Leader       string `json:"leader"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
}

var httpClient = &http.Client{Timeout: time.Second}

func (n *lcdNode) status() (status, bool) {
	resp, err := httpClient.Get("http://" + n.metrics + "/cluster")
	if err != nil {
		return status{}, false
	}
	defer resp.Body.Close()
	var st status
	return st, json.NewDecoder(resp.Body).Decode(&st) == nil
}

// leader waits for a node that leads and serves, and returns it.
func (lc *lcdCluster) leader(d time.Duration) *lcdNode {
	var lead *lcdNode
	waitFor(d, "lcd leader", func() bool {
		for _, n := range lc.nodes {
			if st, ok := n.status(); ok && st.State == "Leader" && st.Ready {
				lead = n
				return true
			}
		}
		return false
	})
	return lead
}

func (lc *lcdCluster) procs() []*proc {
	var ps []*proc
	for _, n := range lc.nodes {
		ps = append(ps, n.p)
	}
	return ps
}

// --- etcd ---

type etcdCluster struct {
	clients []string // client URLs
	ps      []*proc
	version string
}

func startEtcd(bin, dir string) *etcdCluster {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		log.Fatalf("%s --version: %v (install Debian's etcd-server)", bin, err)
	}
	et := &etcdCluster{version: strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", ", ")}
	var peers, initial []string
	for i := range 3 {
		addrs := benchproc.FreeAddrs(2)
		et.clients = append(et.clients, "http://"+addrs[0])
		peers = append(peers, "http://"+addrs[1])
		initial = append(initial, fmt.Sprintf("e%d=%s", i+1, peers[i]))
	}
	for i := range 3 {
		args := []string{"--name", fmt.Sprintf("e%d", i+1), "--data-dir", filepath.Join(dir, fmt.Sprintf("etcd-%d", i+1)),
			"--listen-client-urls", et.clients[i], "--advertise-client-urls", et.clients[i],
			"--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i],
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "lc-bench", "--logger", "zap", "--log-level", "warn"}
		et.ps = append(et.ps, spawn(bin, args, nil, serverLog(fmt.Sprintf("etcd-e%d", i+1))))
	}
	waitFor(60*time.Second, "etcd leader", func() bool { return et.leader() != "" })
	return et
}

func (et *etcdCluster) stop() {
	for _, p := range et.ps {
		p.kill()
	}
	et.ps = nil
}

// leader returns the client URL of the etcd leader, "" when none is known.
func (et *etcdCluster) leader() string {
	cli, err := et.client(et.clients)
	if err != nil {
		return ""
	}
	defer cli.Close()
	for _, u := range et.clients {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cli.Status(ctx, u)
		cancel()
		if err == nil && st.Leader == st.Header.MemberId {
			return u
		}
	}
	return ""
}

func (et *etcdCluster) client(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

// --- what a client does ---

// locker is one client of either cluster: it takes and gives back a key.
type locker interface {
	lock(ctx context.Context) error
	unlock(ctx context.Context) error
	close()
}

type lcdLocker struct {
	s   *lockingcenter.Session
	key string
	l   *lockingcenter.Lock
}

func (c *lcdLocker) lock(ctx context.Context) (err error) {
	c.l, err = c.s.Acquire(ctx, c.key)
	return err
}
func (c *lcdLocker) unlock(context.Context) error { return c.l.Release() }
func (c *lcdLocker) close()                       { c.s.Close() }

type etcdLocker struct {
	cli  *clientv3.Client
	sess *concurrency.Session
	m    *concurrency.Mutex
}

func (c *etcdLocker) lock(ctx context.Context) error   { return c.m.Lock(ctx) }
func (c *etcdLocker) unlock(ctx context.Context) error { return c.m.Unlock(ctx) }
func (c *etcdLocker) close()                           { c.sess.Close(); c.cli.Close() }

// system is a cluster under measurement: how to make its clients, and its
// processes.
type system struct {
	name   string
	client func(key string) locker
	procs  func() []*proc
	// entries returns the position of the cluster's log, or 0 when not
	// known.
	entries func() uint64
}

func lcdSystem(lc *lcdCluster) system {
	entries := func() uint64 {
		st, _ := lc.leader(30 * time.Second).status()
		return st.CommitIndex
	}
	return system{name: lc.name(), procs: lc.procs, entries: entries, client: func(key string) locker {
		return dialLeader(lc, func(addr string) (locker, error) {
			s, err := lockingcenter.NewSession(context.Background(), addr)
			if err != nil {
				return nil, err
			}
			return &lcdLocker{s: s, key: key}, nil
		})
	}}
}

// dialLeader returns the locker dial makes on the session address of lc's
// leader, trying ten times. The leader may change (a loaded machine
// misses heartbeats): each client connects to the one that leads when it
// starts.
func dialLeader(lc *lcdCluster, dial func(addr string) (locker, error)) locker {
	var err error
	for range 10 {
		var l locker
		if l, err = dial(lc.leader(30 * time.Second).mutex); err == nil {
			return l
		}
	}
	log.Fatalf("lcd session: %v", err)
	return nil
}

func etcdSystem(et *etcdCluster) system {
	var lead string
	waitFor(30*time.Second, "etcd leader", func() bool { lead = et.leader(); return lead != "" })
	entries := func() uint64 {
		cli, err := et.client([]string{lead})
		if err != nil {
			return 0
		}
		defer cli.Close()
		st, err := cli.Status(context.Background(), lead)
		if err != nil {
			return 0
		}
		return st.RaftIndex
	}
	return system{name: "etcd", procs: func() []*proc { return et.ps }, entries: entries, client: func(key string) locker {
		cli, err := et.client([]string{lead})
		if err != nil {
			log.Fatalf("etcd client: %v", err)
		}
		sess, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
		if err != nil {
			log.Fatalf("etcd session: %v", err)
		}
		return &etcdLocker{cli: cli, sess: sess, m: concurrency.NewMutex(sess, "/lc-bench/"+key)}
	}}
}

// reconnects counts the clients that lost their server in a round (a
// leader change, on a loaded machine) and started again.
var reconnects atomic.Int64

// noteReconnects prints how many clients reconnected, when any did.
func noteReconnects() {
	if n := reconnects.Load(); n > 0 {
		fmt.Printf("%d clients lost their server during these rounds and reconnected.\n\n", n)
	}
}

// reconnect replaces the client l, which failed, by a new one of key.
func reconnect(sys system, l locker, key string) locker {
	reconnects.Add(1)
	l.close()
	return sys.client(key)
}

// --- throughput ---

// drive runs a goroutine per client of ls, each on keys[i]: lock, then
// granted(), then unlock, again and again, for *duration. A client whose
// server fails it is replaced by a new one. It closes every client.
func drive(sys system, ls []locker, keys []string, granted func()) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	ctx := context.Background()
	for i := range ls {
		wg.Go(func() {
			l := ls[i]
			defer func() { l.close() }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := l.lock(ctx); err != nil {
					l = reconnect(sys, l, keys[i])
					continue
				}
				granted()
				if err := l.unlock(ctx); err != nil {
					l = reconnect(sys, l, keys[i])
				}
			}
		})
	}
	time.Sleep(*duration)
	close(stop)
	// A client that stops still unlocks, so on a hot key the others get
	// the key and see the stop in turn.
	wg.Wait()
}

// cycles runs n clients of sys, each on its own key, for *duration, and
// returns the cycles per second, the servers' CPU per cycle and the raft
// entries per cycle.
func cycles(sys system, n, round int) roundFigures {
	keys := make([]string, n)
	ls := make([]locker, n)
	for i := range ls {
		keys[i] = fmt.Sprintf("tp-%d-%d-%d", round, n, i)
		ls[i] = sys.client(keys[i])
	}
	var total atomic.Int64
	e0, cpu0, own0, t0 := sys.entries(), cpuOf(sys.procs()), ownCPU(), time.Now()
	drive(sys, ls, keys, func() { total.Add(1) })
	el, cpu, own := time.Since(t0), cpuOf(sys.procs())-cpu0, ownCPU()-own0
	c := time.Duration(max(total.Load(), 1))
	return roundFigures{rate: float64(total.Load()) / el.Seconds(), cpu: cpu / c, clientCPU: own / c,
		entries: float64(sys.entries()-e0) / float64(c)}
}

// ownCPU is this process's user and system time so far: its clients'.
func ownCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		log.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func median[T int64 | float64 | time.Duration](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// lcdSystems returns a system of each lcd cluster.
func lcdSystems(lcs []*lcdCluster) []system {
	var out []system
	for _, lc := range lcs {
		out = append(out, lcdSystem(lc))
	}
	return out
}

// roundFigures are one system's results of one round: cycles/s, the
// servers' CPU per cycle, the clients' (this process's) CPU per cycle,
// raft entries per cycle.
type roundFigures struct {
	rate           float64
	cpu, clientCPU time.Duration
	entries        float64
}

// figures are one system's results of the rounds at one client count.
type figures struct {
	rate, entries  []float64
	cpu, clientCPU []time.Duration
}

func (f *figures) add(r roundFigures) {
	f.rate, f.cpu, f.clientCPU, f.entries = append(f.rate, r.rate), append(f.cpu, r.cpu), append(f.clientCPU, r.clientCPU), append(f.entries, r.entries)
}

func throughput(lcs []*lcdCluster, et *etcdCluster, clients []int, floor ...system) {
	var lcdSys []system
	for _, lc := range lcs {
		for _, kind := range strings.Split(*clientKind, ",") {
			switch kind {
			case "go":
				lcdSys = append(lcdSys, lcdSystem(lc))
			case "frames":
				lcdSys = append(lcdSys, lcdFrameSystem(lc))
			default:
				log.Fatalf("-lcd-clients: %q is neither go nor frames", kind)
			}
		}
	}
	lcdSys, etcdSys := append(lcdSys, floor...), etcdSystem(et)
	reconnects.Store(0)
	defer noteReconnects()
	fmt.Println("## Uncontended acquire+release, three lcd nodes beside three etcd members")
	fmt.Println()
	fmt.Println("One row per lcd cluster (its raft log store), and one for the raft floor (hashicorp/raft with lcd's settings and the WAL, its state machine doing nothing), whose lcd columns are the floor's; the etcd columns repeat the etcd figures of the same rounds.")
	fmt.Println()
	fmt.Println("| clients | lcd | etcd cycles/s | lcd cycles/s | lcd/etcd | etcd CPU µs/cycle | lcd CPU µs/cycle | lcd/etcd CPU | etcd entries/cycle | lcd entries/cycle | etcd clients' CPU µs/cycle | lcd clients' CPU µs/cycle |")
	fmt.Println("|---:|:---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var floorRows []string
	for _, n := range clients {
		var e figures
		l := make([]figures, len(lcdSys))
		for r := range *rounds {
			e.add(cycles(etcdSys, n, r))
			for i, sys := range lcdSys {
				l[i].add(cycles(sys, n, r))
			}
		}
		for i, sys := range lcdSys {
			fmt.Printf("| %d | %s | %.0f | %.0f | %.2f | %.1f | %.1f | %.2f | %.2f | %.2f | %.1f | %.1f |\n", n, sys.name, median(e.rate), median(l[i].rate),
				median(ratios(l[i].rate, e.rate, func(x float64) float64 { return x })), us(median(e.cpu)), us(median(l[i].cpu)),
				median(ratios(l[i].cpu, e.cpu, us)), median(e.entries), median(l[i].entries), us(median(e.clientCPU)), us(median(l[i].clientCPU)))
		}
		if len(floor) > 0 {
			f := l[len(l)-1]
			for i, sys := range lcdSys[:len(lcdSys)-len(floor)] {
				floorRows = append(floorRows, fmt.Sprintf("| %d | %s | %.3f | %.3f |", n, sys.name,
					median(ratios(l[i].rate, f.rate, func(x float64) float64 { return x })), median(ratios(l[i].cpu, f.cpu, us))))
			}
		}
	}
	if len(floorRows) > 0 {
		fmt.Println()
		fmt.Println("Each lcd cluster beside the raft floor, ratios taken per round:")
		fmt.Println()
		fmt.Println("| clients | lcd | lcd/floor cycles/s | lcd/floor CPU per cycle |")
		fmt.Println("|---:|:---|---:|---:|")
		fmt.Println(strings.Join(floorRows, "\n"))
	}
	fmt.Println()
}

// ratios returns a[i]/b[i] of the values f gives: ratios are taken per
// round, then the median.
func ratios[T any](a, b []T, f func(T) float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = f(a[i]) / f(b[i])
	}
	return out
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// --- hot key ---

// handoffs runs n clients of sys on one key for *duration and returns
// every handoff time: from a holder's unlock call to the next holder's
// lock returning.
func handoffs(sys system, n, round int) []time.Duration {
	keys := make([]string, n)
	ls := make([]locker, n)
	for i := range ls {
		keys[i] = fmt.Sprintf("hot-%d-%d", round, n)
		ls[i] = sys.client(keys[i])
	}
	var (
		mu       sync.Mutex
		released time.Time // when the holder began its unlock; zero before the first
		out      []time.Duration
	)
	drive(sys, ls, keys, func() {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if !released.IsZero() {
			out = append(out, now.Sub(released))
		}
		released = time.Now() // the holder's unlock follows at once
	})
	return out
}

func quantile(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func hotKey(lcs []*lcdCluster, et *etcdCluster, clients []int) {
	lcdSys, etcdSys := lcdSystems(lcs), etcdSystem(et)
	reconnects.Store(0)
	defer noteReconnects()
	fmt.Println("## One hot key: handoff from a release to the next holder's grant")
	fmt.Println()
	fmt.Println("| clients | lcd | etcd handoffs/s | lcd handoffs/s | etcd p50 ms | lcd p50 ms | lcd/etcd p50 | etcd p99 ms | lcd p99 ms |")
	fmt.Println("|---:|:---|---:|---:|---:|---:|---:|---:|---:|")
	for _, n := range clients {
		var ee []time.Duration
		le := make([][]time.Duration, len(lcdSys))
		for r := range *rounds {
			ee = append(ee, handoffs(etcdSys, n, r)...)
			for i, sys := range lcdSys {
				le[i] = append(le[i], handoffs(sys, n, r)...)
			}
		}
		secs := duration.Seconds() * float64(*rounds)
		ep := quantile(ee, 0.5)
		for i, sys := range lcdSys {
			lp := quantile(le[i], 0.5)
			fmt.Printf("| %d | %s | %.0f | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", n, sys.name, float64(len(ee))/secs,
				float64(len(le[i]))/secs, ms(ep), ms(lp), ms(lp)/ms(ep), ms(quantile(ee, 0.99)), ms(quantile(le[i], 0.99)))
		}
	}
	fmt.Println()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// --- failover ---

// grantAnywhere tries every node of nodes in turn, a session and a
// try-once acquire of key on each, until one grants; it returns when.
func grantAnywhere(nodes []*lcdNode, key string) time.Time {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		for _, n := range nodes {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			s, err := lockingcenter.NewSession(ctx, n.mutex, lockingcenter.WithConnectTimeout(200*time.Millisecond))
			if err == nil {
				l, aerr := s.Acquire(ctx, key, lockingcenter.TryOnce())
				at := time.Now()
				if aerr == nil {
					l.Release()
				}
				s.Close()
				if aerr == nil {
					cancel()
					return at
				}
			}
			cancel()
		}
		time.Sleep(10 * time.Millisecond) // between passes over the nodes
	}
	log.Fatal("no node granted within a minute of the kill")
	return time.Time{}
}

func failover(lc *lcdCluster, n int) {
	var times []time.Duration
	for r := range n {
		lead := lc.leader(30 * time.Second)
		others := slices.DeleteFunc(slices.Clone(lc.nodes), func(x *lcdNode) bool { return x == lead })
		t0 := time.Now()
		lead.p.kill()
		at := grantAnywhere(others, fmt.Sprintf("failover-%d", r))
		times = append(times, at.Sub(t0))
		lc.start(lead)
		// Caught up: it follows the new leader at the leader's commit.
		waitFor(time.Minute, "the killed node caught up", func() bool {
			st, ok := lead.status()
			if !ok || st.State != "Follower" || st.Leader == "" {
				return false
			}
			for _, o := range others {
				if ost, ok := o.status(); ok && ost.State == "Leader" {
					return st.AppliedIndex >= ost.CommitIndex-1
				}
			}
			return false
		})
	}
	s := slices.Clone(times)
	slices.Sort(s)
	fmt.Printf("## Failover: SIGKILL of the %s leader to the first grant by a new leader\n", lc.name())
	fmt.Println()
	fmt.Printf("%d rounds, default settings (election timeout 500ms): p50 %.0f ms, max %.0f ms (min %.0f ms)\n\n",
		n, ms(median(times)), ms(s[len(s)-1]), ms(s[0]))
	var all []string
	for _, t := range times {
		all = append(all, fmt.Sprintf("%.0f", ms(t)))
	}
	fmt.Printf("Each round, ms: %s\n\n", strings.Join(all, " "))
}
