package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// watching starts lc-cli watch with args and waits until its watch
// reports events: it takes and releases key until the output shows it.
func watching(t *testing.T, s *testServer, key string, args ...string) *inProcess {
	t.Helper()
	p := startInProcess(t, s.environ(), append([]string{"watch"}, args...)...)
	c := s.client("probe")
	eventually(t, "watch to report "+key, func() bool {
		c.TryLock(context.Background(), key)
		c.Unlock(context.Background(), key)
		return strings.Contains(p.output(), "released "+key) || strings.Contains(p.output(), `"type":"released"`)
	})
	return p
}

// watch prints one line per event of its prefix until the server goes
// away for the session's TTL: then it exits 2 with one line.
func TestWatchPrintsEventsUntilTheServerGoes(t *testing.T) {
	s := startServer(t, nil)
	p := watching(t, s, "deploy/probe", "--ttl", "1s", "deploy/")
	before := len(p.output())
	s.hold(t, "other/k", "elsewhere")
	s.hold(t, "deploy/prod", "ci-7")
	token := s.holders(t)["deploy/prod"].Token
	s.release(t, "deploy/prod")
	eventually(t, "the release of deploy/prod", func() bool { return strings.Contains(p.output(), "released deploy/prod") })
	var lines []string // a probe's late events aside
	for _, line := range strings.Split(strings.TrimSuffix(p.output()[before:], "\n"), "\n") {
		if !strings.Contains(line, "deploy/probe") {
			lines = append(lines, line)
		}
	}
	want := []string{"acquired deploy/prod token=" + strconv.FormatUint(token, 10) + " session=0 name=ci-7",
		"released deploy/prod token=" + strconv.FormatUint(token, 10) + " session=0 name=ci-7"}
	if len(lines) != 2 {
		t.Fatalf("watch printed %q, want the two events of deploy/prod", lines)
	}
	for i, line := range lines {
		if _, rest, ok := strings.Cut(line, " "); !ok || !strings.HasSuffix(rest, want[i]) {
			t.Errorf("line %d = %q, want a time, then %q", i, line, want[i])
		}
	}
	s.close()
	r := p.wait(t)
	if r.code != exitFailure {
		t.Fatalf("watch after the server went = %d", r.code)
	}
	oneLine(t, r.stderr, "watch", "deploy/")
}

// watch -o json prints a JSON object a line; a signal ends it quietly
// with 128+N.
func TestWatchJSONAndSignal(t *testing.T) {
	s := startServer(t, nil)
	p := watching(t, s, "probe", "-o", "json")
	p.signal(syscall.SIGINT)
	r := p.wait(t)
	if r.code != exitSignalBase+exitCode(syscall.SIGINT) || r.stderr != "" {
		t.Fatalf("watch after SIGINT = %d %q", r.code, r.stderr)
	}
	for _, line := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		var ev jsonEvent
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if *ev.Key != "probe" || ev.KeyHex != hexOf("probe") || *ev.Name != "probe" || ev.Session != nil ||
			(ev.Type == "acquired") != (ev.Token != nil) && ev.Type != "released" {
			t.Errorf("event %+v", ev)
		}
	}
}

func TestWatchUsage(t *testing.T) {
	for _, args := range [][]string{{"watch", "a", "b"}, {"watch", strings.Repeat("k", 128)}, {"watch", "-o", "yaml"}} {
		r := runInProcess(t, nil, args...)
		if r.code != exitFailure {
			t.Errorf("%q = %d, want 2", args, r.code)
		}
		oneLine(t, r.stderr)
	}
}
