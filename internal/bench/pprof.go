package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/locking-center/locking-center/internal/bench/proc"
)

// The CPU profiles of -pprof. lcd has no profiling endpoint of its own, so
// the benchmark builds it with one: one more file of its package main,
// handed to the compiler with go build -overlay (the source tree is left
// as it is), that serves net/http/pprof on the address in pprofEnv when
// that is set. The file builds into the lcd of any commit (-before-rev).
const pprofEnv = "LC_BENCH_PPROF"

const pprofSource = `package main

import (
	"net/http"
	_ "net/http/pprof"
	"os"
)

// Built into lcd by internal/bench -pprof only (go build -overlay).
func init() {
	if addr := os.Getenv("` + pprofEnv + `"); addr != "" {
		go http.ListenAndServe(addr, nil)
	}
}
`

// buildLCD builds ./cmd/lcd of the module in src ("": the current
// directory) into out, with the pprof endpoint when profiled.
func buildLCD(src, out string, profiled bool) {
	if !profiled {
		proc.Build(src, out, "./cmd/lcd")
		return
	}
	abs, err := filepath.Abs(src)
	if err != nil {
		log.Fatal(err)
	}
	file, overlay := out+"-pprof.go", out+"-overlay.json"
	b, _ := json.Marshal(map[string]map[string]string{"Replace": {filepath.Join(abs, "cmd", "lcd", "zz_bench_pprof.go"): file}})
	if err := os.WriteFile(file, []byte(pprofSource), 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(overlay, b, 0o644); err != nil {
		log.Fatal(err)
	}
	proc.Build(src, out, "./cmd/lcd", "-overlay", overlay)
}

// extract writes the tree of the git revision rev (of the repository of
// the current directory) into dir.
func extract(rev, dir string) {
	archive := exec.Command("git", "archive", "--format=tar", rev)
	untar := exec.Command("tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		log.Fatal(err)
	}
	untar.Stdin = pipe
	archive.Stderr, untar.Stderr = os.Stderr, os.Stderr
	if err := untar.Start(); err != nil {
		log.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		log.Fatalf("git archive %s: %v", rev, err)
	}
	if err := untar.Wait(); err != nil {
		log.Fatalf("untar %s: %v", rev, err)
	}
}

// profile starts a CPU profile of s, d long, written into file; the
// returned function waits for it to be written.
func (s *server) profile(d time.Duration, file string) (wait func()) {
	if s.pprof == "" {
		log.Fatal("profile: lcd was not started with a pprof endpoint")
	}
	secs := int((d + time.Second - 1) / time.Second)
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", s.pprof, secs)
	done := make(chan error, 1)
	go func() {
		resp, err := http.Get(url)
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			done <- fmt.Errorf("%s: %s", url, resp.Status)
			return
		}
		f, err := os.Create(file)
		if err != nil {
			done <- err
			return
		}
		_, err = io.Copy(f, resp.Body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		done <- err
	}()
	return func() {
		if err := <-done; err != nil {
			log.Fatalf("profile: %v", err)
		}
	}
}

// showing is the line of go tool pprof -top that gives the samples shown
// and the profile's total.
var showing = regexp.MustCompile(`Showing nodes accounting for .*, ([0-9.]+)% of .* total`)

// share returns the part, in %, of the CPU samples of the profile in file
// whose stack has a function that matches focus (a regular expression of
// go tool pprof's -focus).
func share(file, focus string) float64 {
	out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=1000000", "-nodefraction=0", "-edgefraction=0",
		"-focus="+focus, file).CombinedOutput()
	if err != nil {
		log.Fatalf("go tool pprof %s: %v\n%s", file, err, out)
	}
	m := showing.FindSubmatch(out) // "0, 0% of" when nothing matched
	if m == nil {
		log.Fatalf("go tool pprof %s: no total in\n%s", file, out)
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}
