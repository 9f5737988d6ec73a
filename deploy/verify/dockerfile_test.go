package verify

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// Facts of the image that the rest of deploy/ relies on.
const (
	imageUser    = "22119:22119"
	imageBinDir  = "/usr/local/bin"
	imageDataDir = "/data"
)

// dockerfile is the top-level Dockerfile as BuildKit reads it.
type dockerfile struct {
	metaArgs       []instructions.ArgCommand // ARGs before the first FROM
	build, runtime instructions.Stage
}

// parseDockerfile parses the Dockerfile with BuildKit's parser and linter,
// failing t on any parse warning or lint finding.
func parseDockerfile(t *testing.T) dockerfile {
	t.Helper()
	res, err := parser.Parse(bytes.NewReader(readRepoFile(t, "Dockerfile")))
	if err != nil {
		t.Fatalf("parse Dockerfile: %v", err)
	}
	for _, w := range res.Warnings {
		t.Errorf("Dockerfile: %s", w.Short)
	}
	var lint []string
	lnt := linter.New(&linter.Config{Warn: func(rule, _, _, msg string, loc []parser.Range) {
		line := 0
		if len(loc) > 0 {
			line = loc[0].Start.Line
		}
		lint = append(lint, fmt.Sprintf("line %d: %s: %s", line, rule, msg))
	}})
	stages, metaArgs, err := instructions.Parse(res.AST, lnt)
	if err != nil {
		t.Fatalf("Dockerfile instructions: %v", err)
	}
	for _, l := range lint {
		t.Errorf("Dockerfile lint: %s", l)
	}
	if len(stages) != 2 {
		t.Fatalf("Dockerfile has %d stages, want a build stage and a runtime stage", len(stages))
	}
	return dockerfile{metaArgs: metaArgs, build: stages[0], runtime: stages[1]}
}

// commands returns the commands of type T in s.
func commands[T instructions.Command](s instructions.Stage) []T {
	var out []T
	for _, c := range s.Commands {
		if v, ok := c.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// last returns the last command of type T in s, which is the one in force.
func last[T instructions.Command](t *testing.T, s instructions.Stage, what string) T {
	t.Helper()
	cs := commands[T](s)
	if len(cs) == 0 {
		t.Fatalf("stage %q has no %s", s.Name, what)
	}
	return cs[len(cs)-1]
}

// env returns the ENV variables set in s; a later ENV wins.
func env(s instructions.Stage) map[string]string {
	m := make(map[string]string)
	for _, e := range commands[*instructions.EnvCommand](s) {
		for _, kv := range e.Env {
			m[kv.Key] = kv.Value
		}
	}
	return m
}

// args returns the ARG names declared in s.
func args(s instructions.Stage) []string {
	var names []string
	for _, a := range commands[*instructions.ArgCommand](s) {
		for _, kv := range a.Args {
			names = append(names, kv.Key)
		}
	}
	return names
}

func TestDockerfileBuildStage(t *testing.T) {
	df := parseDockerfile(t)
	b := df.build
	if b.Name != "build" || !strings.HasPrefix(b.BaseName, "golang:${GO_VERSION}") {
		t.Errorf("first stage is %q FROM %q, want build FROM golang:${GO_VERSION}...", b.Name, b.BaseName)
	}
	// The golang images build with GOTOOLCHAIN=local: the image's Go must
	// be at least the go line of go.mod.
	goLine := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(readRepoFile(t, "go.mod"))
	var goVersion string
	for _, a := range df.metaArgs {
		for _, kv := range a.Args {
			if kv.Key == "GO_VERSION" && kv.Value != nil {
				goVersion = *kv.Value
			}
		}
	}
	if goLine == nil {
		t.Fatal("go.mod has no go line")
	}
	if !goAtLeast(goVersion, string(goLine[1])) {
		t.Errorf("ARG GO_VERSION=%q, want at least go.mod's %s", goVersion, goLine[1])
	}
	if b.Platform != "$BUILDPLATFORM" {
		t.Errorf("build stage platform %q, want $BUILDPLATFORM (cross-compile, no emulation)", b.Platform)
	}
	for _, a := range []string{"TARGETOS", "TARGETARCH", "VERSION", "COMMIT"} {
		if !slices.Contains(args(b), a) {
			t.Errorf("build stage does not declare ARG %s", a)
		}
	}
	if got := env(b)["CGO_ENABLED"]; got != "0" {
		t.Errorf("build stage CGO_ENABLED=%q, want 0 for static binaries", got)
	}
	var script strings.Builder
	for _, r := range commands[*instructions.RunCommand](b) {
		script.WriteString(strings.Join(r.CmdLine, " ") + "\n")
	}
	for _, cmd := range []string{"lcd", "lc-cli"} {
		build := fmt.Sprintf("-o /out%s/%s ./cmd/%s", imageBinDir, cmd, cmd)
		if !strings.Contains(script.String(), build) {
			t.Errorf("build stage does not build ./cmd/%s (want %q in a RUN)", cmd, build)
		}
	}
	for _, want := range []string{
		`GOOS="$TARGETOS" GOARCH="$TARGETARCH" go build`,
		"-X main.version=${VERSION} -X main.commit=${COMMIT}",
		"-trimpath",
	} {
		if c := strings.Count(script.String(), want); c != 2 {
			t.Errorf("%q appears in %d go builds, want both", want, c)
		}
	}
}

func TestDockerfileRuntimeStage(t *testing.T) {
	r := parseDockerfile(t).runtime
	if r.BaseName != "scratch" {
		t.Errorf("runtime stage FROM %q, want scratch: no shell, no package manager", r.BaseName)
	}
	if u := last[*instructions.UserCommand](t, r, "USER").User; u != imageUser {
		t.Errorf("USER %q, want %q", u, imageUser)
	}
	var ports []string
	for _, e := range commands[*instructions.ExposeCommand](r) {
		ports = append(ports, e.Ports...)
	}
	if want := []string{"22119", "22120", "22121", "22122"}; !slices.Equal(ports, want) {
		t.Errorf("EXPOSE %q, want %q", ports, want)
	}

	var data, bin bool
	for _, c := range commands[*instructions.CopyCommand](r) {
		switch c.DestPath {
		case imageDataDir:
			data = c.From == "build" && c.Chown == imageUser
		case imageBinDir + "/":
			bin = c.From == "build" && slices.Equal(c.SourcePaths, []string{"/out" + imageBinDir + "/"})
		}
	}
	if !data {
		t.Errorf("no COPY --from=build --chown=%s to %s", imageUser, imageDataDir)
	}
	if !bin {
		t.Errorf("no COPY --from=build of the binaries to %s/", imageBinDir)
	}
	if got := env(r)["PATH"]; got != imageBinDir {
		t.Errorf("PATH=%q, want %q so `docker exec ... lc-cli` resolves", got, imageBinDir)
	}

	hc := last[*instructions.HealthCheckCommand](t, r, "HEALTHCHECK").Health
	if want := []string{"CMD", imageBinDir + "/lcd", "health"}; !slices.Equal(hc.Test, want) {
		t.Errorf("HEALTHCHECK %q, want exec form %q (no shell in the image)", hc.Test, want)
	}
	if hc.Interval <= 0 || hc.Timeout <= 0 || hc.Retries <= 0 {
		t.Errorf("HEALTHCHECK interval %v, timeout %v, retries %d: want each set", hc.Interval, hc.Timeout, hc.Retries)
	}

	ep := last[*instructions.EntrypointCommand](t, r, "ENTRYPOINT")
	if ep.PrependShell || !slices.Equal(ep.CmdLine, []string{imageBinDir + "/lcd"}) {
		t.Errorf("ENTRYPOINT %q (shell %v), want exec form [%s/lcd] so lcd is PID 1 and gets SIGTERM",
			ep.CmdLine, ep.PrependShell, imageBinDir)
	}
	if cmds := commands[*instructions.CmdCommand](r); len(cmds) != 0 {
		t.Errorf("runtime stage has CMD %q; lcd takes no arguments by default", cmds[0].CmdLine)
	}
	for _, s := range commands[*instructions.StopSignalCommand](r) {
		if s.Signal != "SIGTERM" {
			t.Errorf("STOPSIGNAL %q, want SIGTERM (the graceful path)", s.Signal)
		}
	}
}

// goAtLeast compares Go versions "major.minor[.patch]" by major and minor.
func goAtLeast(have, want string) bool {
	parse := func(v string) (int, int) {
		parts := strings.SplitN(v, ".", 3)
		if len(parts) < 2 {
			return -1, -1
		}
		major, err1 := strconv.Atoi(parts[0])
		minor, err2 := strconv.Atoi(parts[1])
		if err1 != nil || err2 != nil {
			return -1, -1
		}
		return major, minor
	}
	hm, hn := parse(have)
	wm, wn := parse(want)
	return hm >= 0 && wm >= 0 && (hm > wm || hm == wm && hn >= wn)
}

// TestDockerignoreKeepsSources checks that no file the image build needs
// is excluded from the build context: go.mod, go.sum and every Go file of
// the root module that lcd and lc-cli are built from.
func TestDockerignoreKeepsSources(t *testing.T) {
	patterns, err := ignorefile.ReadAll(bytes.NewReader(readRepoFile(t, ".dockerignore")))
	if err != nil {
		t.Fatalf(".dockerignore: %v", err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatalf(".dockerignore: %v", err)
	}
	mains := []string{"./cmd/lcd"}
	if m, _ := filepath.Glob(repoFile("cmd/lc-cli/*.go")); len(m) > 0 {
		mains = append(mains, "./cmd/lc-cli")
	}
	list := exec.Command("go", append([]string{"list", "-e", "-deps", "-f",
		`{{if .Module}}{{if eq .Module.Path "` + rootModule + `"}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{end}}{{end}}`},
		mains...)...)
	list.Dir = repoRoot
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	files := []string{"go.mod", "go.sum"}
	for _, f := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(repoRoot, f)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	if len(files) < 5 {
		t.Fatalf("go list found only %q", files)
	}
	for _, f := range files {
		excluded, err := pm.MatchesOrParentMatches(f)
		if err != nil {
			t.Fatal(err)
		}
		if excluded {
			t.Errorf(".dockerignore excludes %s, which the image build needs", f)
		}
	}
	for _, f := range []string{".git/HEAD", "bin/lcd", "deploy/test.sh"} {
		if excluded, _ := pm.MatchesOrParentMatches(f); !excluded {
			t.Errorf(".dockerignore lets %s into the build context", f)
		}
	}
}

// imageToHost maps a path inside the image to the freshly built binaries.
func imageToHost(s string) string {
	return strings.ReplaceAll(s, imageBinDir, binDir)
}

// TestImageCommandsOnHost runs the image's ENTRYPOINT and HEALTHCHECK
// commands, exactly as the Dockerfile gives them, with the image's
// environment and nothing else; the only differences from a container are
// the binary directory and the three addresses, on free loopback ports,
// which the health command has to follow on its own.
func TestImageCommandsOnHost(t *testing.T) {
	df := parseDockerfile(t)
	t.Run("memory", func(t *testing.T) { runImageCommands(t, df, nil) })
	t.Run("DATA_PATH", func(t *testing.T) {
		dir := t.TempDir()
		runImageCommands(t, df, []string{"DATA_PATH=" + filepath.Join(dir, "locks.wal")})
		if _, err := os.Stat(filepath.Join(dir, "locks.wal")); err != nil {
			t.Errorf("DATA_PATH not created: %v", err)
		}
	})
}

func runImageCommands(t *testing.T, df dockerfile, extraEnv []string) {
	ep := last[*instructions.EntrypointCommand](t, df.runtime, "ENTRYPOINT").CmdLine
	hc := last[*instructions.HealthCheckCommand](t, df.runtime, "HEALTHCHECK").Health.Test
	if len(hc) < 2 || hc[0] != "CMD" {
		t.Fatalf("HEALTHCHECK %q is not an exec-form command", hc)
	}
	hc = hc[1:]
	var environ []string
	for k, v := range env(df.runtime) {
		environ = append(environ, k+"="+imageToHost(v))
	}
	ports := freePorts(t, 4)
	metricsAddr := "127.0.0.1:" + strconv.Itoa(ports[2])
	environ = append(environ,
		"BIND_ADDRESS=127.0.0.1:"+strconv.Itoa(ports[0]),
		"MANAGER_ADDRESS=127.0.0.1:"+strconv.Itoa(ports[1]),
		"METRICS_ADDRESS="+metricsAddr,
		"HTTP_ADDRESS=127.0.0.1:"+strconv.Itoa(ports[3]))
	environ = append(environ, extraEnv...)

	entrypoint := make([]string, len(ep))
	for i, a := range ep {
		entrypoint[i] = imageToHost(a)
	}
	health := func() (int, string) {
		cmd := exec.Command(imageToHost(hc[0]), hc[1:]...)
		cmd.Env = environ
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		if err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				return ee.ExitCode(), stderr.String()
			}
			t.Fatalf("health command: %v", err)
		}
		return 0, stderr.String()
	}

	// Before lcd runs the health check must fail.
	if code, stderr := health(); code == 0 {
		t.Fatalf("health exits 0 with no lcd running")
	} else if !strings.Contains(stderr, metricsAddr) {
		t.Errorf("health probed elsewhere than METRICS_ADDRESS %s: %q", metricsAddr, stderr)
	}

	p := start(t, entrypoint, environ, t.TempDir())
	waitUntil(t, p, "healthy", func() error {
		if code, stderr := health(); code != 0 {
			return fmt.Errorf("exit %d: %s", code, stderr)
		}
		return nil
	})
	if code, stderr := health(); code != 0 || stderr != "" {
		t.Errorf("health of a running lcd: exit %d, stderr %q", code, stderr)
	}

	if code := p.stop(t); code != 0 {
		t.Errorf("lcd exited %d after SIGTERM, want 0\n%s", code, p.output.String())
	}
	for _, step := range []string{"shutting down", "lcd stopped"} {
		if !strings.Contains(p.output.String(), step) {
			t.Errorf("lcd log lacks %q: SIGTERM did not take the graceful path", step)
		}
	}
	code, stderr := health()
	if code != 1 {
		t.Errorf("health after stop: exit %d, want 1", code)
	}
	if strings.Count(stderr, "\n") != 1 {
		t.Errorf("health after stop wrote %q, want one line", stderr)
	}
}
