// Package proc holds what the benchmark programs share to run the
// servers they measure as processes: building a binary, free loopback
// ports, waiting for a listener, and the CPU time a process has used.
// Each function ends the program (log.Fatal) on a failure, as a
// benchmark has nothing better to do then.
package proc

import (
	"fmt"
	"log"
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

// FreeAddrs returns n distinct addresses "127.0.0.1:port" whose ports
// were free a moment ago.
func FreeAddrs(n int) []string {
	var out []string
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
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
