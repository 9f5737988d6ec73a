// Command tlscost measures what TLS costs the session protocol: lcd with
// and without TLS, side by side in the same rounds, and prints the figures
// as Markdown for docs/benchmarks.md ("TLS").
//
//	go run ./internal/bench/tlscost [-rounds 5] [-duration 3s] [-clients 16]
//
// It builds lcd (or takes -lcd) and runs two of it as processes of their
// own on 127.0.0.1: one in plain TCP, one under mutual TLS (a server
// certificate and client certificates of a CA made at start, in a
// temporary directory). -clients sessions of the Go client, each on a key
// of its own, acquire and release as fast as they can for -duration; the
// rounds alternate between the two servers, so that drift in the
// machine's load falls on both. Each round gives cycles/s and the server's
// CPU per cycle (user+system of the lcd process, from /proc/PID/stat,
// over the round); the table gives the median of the rounds and the
// median of the per-round ratios TLS/plain. The clients run in this
// process, TLS included: on a small machine they share its cores with the
// server, so the rates say less than the server's CPU per cycle.
//
// Linux only (it reads /proc).
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/internal/bench/proc"
	"github.com/locking-center/locking-center/internal/testcerts"
)

var (
	rounds   = flag.Int("rounds", 5, "rounds on each server; the medians are reported")
	duration = flag.Duration("duration", 3*time.Second, "length of one round")
	clients  = flag.Int("clients", 16, "sessions cycling at once, each on a key of its own")
	lcdPath  = flag.String("lcd", "", "an lcd binary to measure instead of one built from ./cmd/lcd")
)

// ttl is the TTL of every session: long, so that keepalive pings stay out
// of the figures.
const ttl = 5 * time.Minute

func main() {
	flag.Parse()
	log.SetFlags(0)
	dir, err := os.MkdirTemp("", "lc-tlscost")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := *lcdPath
	if bin == "" {
		bin = filepath.Join(dir, "lcd")
		proc.Build("", bin, "./cmd/lcd")
	}
	ca := testcerts.NewCA(fatal{}, "tlscost CA")
	srv := ca.Server(fatal{}).Write(fatal{}, dir, "server")
	clientTLS := testcerts.ClientConfig(ca, ca.Client(fatal{}, "bench"))
	plain := start(bin, nil)
	defer plain.stop()
	secure := start(bin, []string{"TLS_CERT_FILE=" + srv.Cert, "TLS_KEY_FILE=" + srv.Key,
		"TLS_CLIENT_CA_FILE=" + ca.Write(fatal{}, dir, "ca")})
	defer secure.stop()

	var pr, tr, pc, tc []float64
	for range *rounds {
		p := drive(plain, nil)
		t := drive(secure, clientTLS)
		pr, pc = append(pr, p.perSec), append(pc, p.cpuPerCycle)
		tr, tc = append(tr, t.perSec), append(tc, t.cpuPerCycle)
	}
	fmt.Printf("# TLS, %s, %d clients, %d rounds of %v on each server\n\n",
		time.Now().UTC().Format(time.RFC3339), *clients, *rounds, *duration)
	fmt.Println("| | plain TCP | mutual TLS | TLS/plain | TLS/plain, rounds' range |")
	fmt.Println("|---|---:|---:|---:|---:|")
	rr, cr := ratios(tr, pr), ratios(tc, pc)
	fmt.Printf("| cycles/s | %.0f | %.0f | %.3f | %.3f to %.3f |\n", median(pr), median(tr), median(rr), slices.Min(rr), slices.Max(rr))
	fmt.Printf("| lcd CPU µs/cycle | %.1f | %.1f | %.3f | %.3f to %.3f |\n", median(pc), median(tc), median(cr), slices.Min(cr), slices.Max(cr))
}

// fatal is what testcerts needs of a test, for a program: a failure ends
// it.
type fatal struct{}

func (fatal) Helper()           {}
func (fatal) Fatal(args ...any) { log.Fatal(args...) }

// server is a running lcd.
type server struct {
	cmd  *exec.Cmd
	addr string
}

// start runs bin with env on free ports of 127.0.0.1, without the HTTP
// API, and waits until it listens.
func start(bin string, env []string) *server {
	ports := proc.FreeAddrs(3)
	cmd := exec.Command(bin)
	cmd.Env = append(append(os.Environ(), "BIND_ADDRESS="+ports[0], "MANAGER_ADDRESS="+ports[1],
		"METRICS_ADDRESS="+ports[2], "HTTP_ADDRESS=", "LOG_LEVEL=warn", "SESSION_TTL_MAX="+ttl.String()), env...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	s := &server{cmd: cmd, addr: ports[0]}
	proc.WaitListening(s.addr)
	return s
}

func (s *server) stop() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
}

// cpuTime returns the user+system CPU the process has used.
func (s *server) cpuTime() time.Duration {
	d, err := proc.CPUTime(s.cmd.Process.Pid)
	if err != nil {
		log.Fatal(err)
	}
	return d
}

// result is one round on one server.
type result struct {
	perSec      float64 // acquire+release cycles a second, all clients
	cpuPerCycle float64 // the server's CPU per cycle, µs
}

// drive opens *clients sessions to s (over TLS with cfg, unless nil),
// cycles them for *duration and closes them. The sessions are opened
// before, and closed after, the measured span: handshakes are not in the
// figures.
func drive(s *server, cfg *tls.Config) result {
	ctx := context.Background()
	opts := []lockingcenter.SessionOption{lockingcenter.WithTTL(ttl)}
	if cfg != nil {
		opts = append(opts, lockingcenter.WithTLS(cfg))
	}
	ss := make([]*lockingcenter.Session, *clients)
	for i := range ss {
		var err error
		if ss[i], err = lockingcenter.NewSession(ctx, s.addr, opts...); err != nil {
			log.Fatalf("session to %s: %v", s.addr, err)
		}
	}
	defer func() {
		for _, sess := range ss {
			sess.Close()
		}
	}()
	var stop atomic.Bool
	var n atomic.Int64
	var wg sync.WaitGroup
	cpu0, t0 := s.cpuTime(), time.Now()
	for i, sess := range ss {
		key := fmt.Sprintf("tlscost/%d", i)
		wg.Go(func() {
			for !stop.Load() {
				lock, err := sess.Acquire(ctx, key)
				if err != nil {
					log.Fatalf("acquire: %v", err)
				}
				if err := lock.Release(); err != nil {
					log.Fatalf("release: %v", err)
				}
				n.Add(1)
			}
		})
	}
	time.Sleep(*duration)
	stop.Store(true)
	wg.Wait()
	elapsed, cpu := time.Since(t0), s.cpuTime()-cpu0
	cycles := float64(n.Load())
	return result{perSec: cycles / elapsed.Seconds(), cpuPerCycle: float64(cpu) / float64(time.Microsecond) / cycles}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// ratios returns a[i]/b[i]: ratios are taken per round, then the median.
func ratios(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] / b[i]
	}
	return out
}
