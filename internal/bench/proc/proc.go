// Package proc holds what the benchmark programs (and the conformance
// suites' probe, for its free ports) share to run the servers they
// measure as processes: building a binary, free loopback
// ports below the ephemeral range, waiting for a listener, the CPU time a
// process has used, and the system's TCP sockets.
// Each function ends the program (log.Fatal) on a failure, as a
// benchmark has nothing better to do then.
package proc

import (
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Build runs `go build -o out [flags] pkg` in dir ("": the current
// directory).
func Build(dir, out, pkg string, flags ...string) {
	cmd := exec.Command("go", append(append([]string{"build", "-o", out}, flags...), pkg)...)
	cmd.Dir, cmd.Stderr = dir, os.Stderr
	if err := cmd.Run(); err != nil {
		log.Fatalf("build %s: %v", pkg, err)
	}
}

// FreeAddrs returns n distinct addresses "127.0.0.1:port" whose ports no
// TCP socket used a moment ago, TIME_WAIT included, and that lie below
// the system's ephemeral range (ip_local_port_range): a server of v1
// leaves tens of thousands of TIME_WAIT sockets on the port of each
// client's end, which a listener later given that port by the system
// would share, and a server of the benchmark must not take a port that
// the system hands out to clients.
func FreeAddrs(n int) []string {
	low := ephemeralLow()
	if low-firstPort < 10*n {
		log.Fatalf("free ports: the ephemeral range starts at %d, too close to %d", low, firstPort)
	}
	used := usedPorts()
	var out []string
	var lns []net.Listener
	for tries := 0; len(out) < n; tries++ {
		if tries == 1000 {
			log.Fatalf("free ports: none left between %d and %d", firstPort, low)
		}
		port := firstPort + rand.IntN(low-firstPort)
		if used[port] {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		used[port] = true
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

// firstPort is the lowest port FreeAddrs picks.
const firstPort = 10000

// ephemeralLow returns the first port of the system's ephemeral range.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768 // Linux's default
	}
	f := strings.Fields(string(b))
	low, err := strconv.Atoi(f[0])
	if err != nil {
		log.Fatalf("ip_local_port_range: %q", b)
	}
	return low
}

// usedPorts returns the local ports of every TCP socket of the system,
// from /proc/net/tcp and /proc/net/tcp6.
func usedPorts() map[int]bool {
	used := make(map[int]bool)
	for _, s := range Sockets() {
		used[s.Local] = true
	}
	return used
}

// Socket is a TCP socket of the system, a line of /proc/net/tcp or
// /proc/net/tcp6.
type Socket struct {
	Local, Remote int // ports
	State         int // TCP state: TimeWait, ...
}

// TimeWait is the TCP state TIME_WAIT (include/net/tcp_states.h).
const TimeWait = 6

// Sockets returns the TCP sockets of the system, over IPv4 and IPv6.
func Sockets() []Socket {
	var out []Socket
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(file)
		if err != nil {
			continue // no IPv6
		}
		lines := strings.Split(string(b), "\n")
		for _, line := range lines[1:] {
			// sl local_address rem_address st ...
			f := strings.Fields(line)
			if len(f) < 4 {
				continue
			}
			st, _ := strconv.ParseInt(f[3], 16, 32)
			out = append(out, Socket{Local: hexPort(f[1]), Remote: hexPort(f[2]), State: int(st)})
		}
	}
	return out
}

// hexPort returns the port of an address of /proc/net/tcp, "0100007F:1F90".
func hexPort(addr string) int {
	p, _ := strconv.ParseInt(addr[strings.LastIndexByte(addr, ':')+1:], 16, 32)
	return int(p)
}

// Port returns the port of addr, "host:port".
func Port(addr string) string {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		log.Fatal(err)
	}
	return p
}

// WaitListening returns once addr accepts a TCP connection, for at most
// 30 s.
func WaitListening(addr string) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			log.Fatalf("%s never listened: %v", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// CPUTime returns the user+system CPU time process pid has used, from
// /proc/PID/stat (Linux, in ticks of USER_HZ = 100).
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const ticks = 100
	return time.Duration(utime+stime) * time.Second / ticks, nil
}
