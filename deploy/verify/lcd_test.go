package verify

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// rootModule is the module path of the tree these files deploy.
const rootModule = "github.com/locking-center/locking-center"

// Guards against a hung process; none of them is a timing assertion.
const (
	startDeadline = 30 * time.Second // lcd answering on its metrics endpoint
	stopDeadline  = 60 * time.Second // lcd exiting after SIGTERM (its drain is up to 30 s)
)

var (
	repoRoot string // top of the tree, the root module's directory
	binDir   string // where TestMain built lcd
)

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err == nil {
		err = checkRoot(root)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "verify:", err)
		return 2
	}
	repoRoot = root
	dir, err := os.MkdirTemp("", "lc-verify-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "verify:", err)
		return 2
	}
	defer os.RemoveAll(dir)
	binDir = dir
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "lcd"), "./cmd/lcd")
	build.Dir = repoRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "verify: build lcd: %v\n%s", err, out)
		return 2
	}
	return m.Run()
}

// checkRoot reports whether dir holds the root module's go.mod.
func checkRoot(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return fmt.Errorf("find the tree's top: %w", err)
	}
	if !strings.HasPrefix(string(b), "module "+rootModule+"\n") {
		return fmt.Errorf("%s/go.mod is not module %s", dir, rootModule)
	}
	return nil
}

// lcdPath is the freshly built server binary.
func lcdPath() string { return filepath.Join(binDir, "lcd") }

// repoFile is path, slash-separated and relative to the top of the tree.
func repoFile(path string) string { return filepath.Join(repoRoot, filepath.FromSlash(path)) }

// readRepoFile returns the contents of a file of the tree.
func readRepoFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(repoFile(path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// requireTool fails t when name is not installed.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is needed: run deploy/test.sh, which installs it (%v)", name, err)
	}
	return p
}

// freePorts returns n distinct TCP ports that were free on 127.0.0.1 a
// moment ago. They are not consecutive: ports next to a free one are often
// taken by connections in TIME_WAIT on a busy machine.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// lockedBuffer is an io.Writer safe to read while a process writes to it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// process is a started lcd.
type process struct {
	cmd    *exec.Cmd
	output *lockedBuffer // stdout and stderr together
	done   chan struct{} // closed when the process has exited
	err    error         // of Wait, valid after done
}

// start runs argv with exactly the environment env (nothing inherited, as
// in a container) in dir. The process is killed at the end of the test if
// it still runs.
func start(t *testing.T, argv, env []string, dir string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(argv[0], argv[1:]...), output: new(lockedBuffer), done: make(chan struct{})}
	p.cmd.Env = env
	p.cmd.Dir = dir
	p.cmd.Stdout = p.output
	p.cmd.Stderr = p.output
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %q: %v", argv, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
		t.Logf("output of %s:\n%s", argv[0], p.output.String())
	})
	return p
}

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and returns the exit code.
func (p *process) stop(t *testing.T) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-p.done:
	case <-time.After(stopDeadline):
		t.Fatalf("lcd still runs %v after SIGTERM", stopDeadline)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("wait: %v", p.err)
	}
	return 0
}

// waitUntil polls ready until it returns nil, failing t when p exits first
// or the start deadline passes. It returns ready's last error on failure.
func waitUntil(t *testing.T, p *process, what string, ready func() error) {
	t.Helper()
	deadline := time.Now().Add(startDeadline)
	for {
		err := ready()
		if err == nil {
			return
		}
		if p.exited() {
			t.Fatalf("lcd exited before %s: %v\n%s", what, p.err, p.output.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v: %v", what, startDeadline, err)
		}
		time.Sleep(20 * time.Millisecond) // poll interval, not synchronisation
	}
}

// server is an lcd started on 127.0.0.1 with its ports known.
type server struct {
	*process
	mutexAddr  string
	metricsURL string
}

// startedLine matches the line lcd logs once its listeners are bound.
var startedLine = regexp.MustCompile(`msg="lcd started".* mutex=(\S+) manager=(\S+) metrics=(\S+)`)

// startServer runs the freshly built lcd on port 0 of 127.0.0.1, plus
// extra environment, and learns its ports from the start-up log line.
func startServer(t *testing.T, extraEnv ...string) *server {
	t.Helper()
	env := append([]string{"BIND_ADDRESS=127.0.0.1:0"}, extraEnv...)
	s := &server{process: start(t, []string{lcdPath()}, env, t.TempDir())}
	waitUntil(t, s.process, "the start-up log line", func() error {
		m := startedLine.FindStringSubmatch(s.output.String())
		if m == nil {
			return errors.New("not logged yet")
		}
		s.mutexAddr, s.metricsURL = m[1], "http://"+m[3]+"/metrics"
		return nil
	})
	return s
}

// get returns the body of a 200 answer to GET url.
func get(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), nil
}

// scrape returns the metrics text of s.
func (s *server) scrape(t *testing.T) string {
	t.Helper()
	body, err := get(s.metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// lockRequest is the mutex-port request for a key with the empty source.
func lockRequest(action byte, key string) []byte {
	return append(append([]byte{action, byte(len(key))}, key...), 0)
}

// lock takes key on s and returns once it is granted.
func (s *server) lock(t *testing.T, key string) {
	t.Helper()
	c, err := net.Dial("tcp", s.mutexAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(lockRequest(1, key)); err != nil {
		t.Fatal(err)
	}
	answer := make([]byte, 1)
	if _, err := io.ReadFull(c, answer); err != nil {
		t.Fatal(err)
	}
	if answer[0] != '+' {
		t.Fatalf("lock %q answered %q", key, answer)
	}
}

// park sends a lock request for a held key and leaves it waiting; the
// connection is closed, and so the request withdrawn, at the end of t.
func (s *server) park(t *testing.T, key string) {
	t.Helper()
	c, err := net.Dial("tcp", s.mutexAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(lockRequest(1, key)); err != nil {
		t.Fatal(err)
	}
}
