package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// docExample is one curl command of docs/http.md and the output the doc
// shows for it.
type docExample struct {
	line    int    // of the command in the doc
	command string // a shell command line
	kind    string // the output block's info string: http, json or text
	want    string
}

// docExamples reads every fenced sh block that is a curl command, with
// the fenced block that follows it.
func docExamples(t *testing.T, doc string) []docExample {
	t.Helper()
	type block struct {
		line       int
		info, body string
	}
	var blocks []block
	lines := strings.Split(doc, "\n")
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "```") {
			continue
		}
		b := block{line: i + 1, info: strings.TrimPrefix(lines[i], "```")}
		var body []string
		for i++; i < len(lines) && lines[i] != "```"; i++ {
			body = append(body, lines[i])
		}
		b.body = strings.Join(body, "\n")
		blocks = append(blocks, b)
	}
	var out []docExample
	for i, b := range blocks {
		if b.info != "sh" || !strings.HasPrefix(b.body, "curl ") {
			continue
		}
		if i+1 == len(blocks) || blocks[i+1].info == "sh" {
			t.Fatalf("docs/http.md:%d: a curl example without its output block", b.line)
		}
		out = append(out, docExample{line: b.line, command: b.body, kind: blocks[i+1].info, want: blocks[i+1].body})
	}
	return out
}

// Every curl example of docs/http.md, run in the doc's order with curl
// against a live lcd, answers what the doc shows, but for what differs
// from run to run: fencing tokens and event ids, times, durations, client
// ports and the version.
func TestHTTPDocExamples(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl on PATH: the examples of docs/http.md are not run")
	}
	doc, err := os.ReadFile("../../docs/http.md")
	if err != nil {
		t.Fatal(err)
	}
	examples := docExamples(t, string(doc))
	if len(examples) < 20 {
		t.Fatalf("found %d curl examples in docs/http.md", len(examples))
	}
	p := runInProcess(t, "")
	addrs := p.log.waitStarted(t, p.exited)
	// The doc's client stays alive however slowly the examples run (its
	// session is the first, opened here).
	heartbeat := func() {
		resp, err := http.Post("http://"+addrs.HTTP+"/api/v1/locks/heartbeat", "", strings.NewReader(`{"client_id":"instance-abc"}`))
		if err == nil {
			resp.Body.Close()
		}
	}
	heartbeat()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				heartbeat()
			case <-stop:
				return
			}
		}
	}()
	defer func() { close(stop); <-done }()

	for _, ex := range examples {
		cmd := strings.ReplaceAll(ex.command, "localhost:22122", addrs.HTTP)
		out, err := exec.Command("sh", "-c", cmd).Output()
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == 28 && strings.Contains(cmd, "--max-time") {
			err = nil // a stream, cut by its --max-time as the doc says
		}
		if err != nil {
			t.Fatalf("docs/http.md:%d: %s: %v", ex.line, ex.command, err)
		}
		if diffs := compareOutput(ex, string(out)); len(diffs) > 0 {
			t.Errorf("docs/http.md:%d: %s\n%s\ngot:\n%s", ex.line, ex.command, strings.Join(diffs, "\n"), out)
		}
	}
}

// compareOutput returns how got differs from what ex shows.
func compareOutput(ex docExample, got string) []string {
	switch ex.kind {
	case "http":
		return compareHTTP(ex.want, strings.ReplaceAll(got, "\r\n", "\n"))
	case "json":
		return compareJSON("", ex.want, got)
	case "text":
		if strings.Contains(ex.command, "/subscribe") {
			return compareStream(ex.want, got)
		}
		if strings.TrimRight(got, "\n") != ex.want {
			return []string{"the text differs"}
		}
		return nil
	}
	return []string{"unknown output block " + ex.kind}
}

// compareHTTP compares a status line, the headers the doc shows, and a
// JSON body.
func compareHTTP(want, got string) []string {
	wantHead, wantBody, _ := strings.Cut(want, "\n\n")
	gotHead, gotBody, _ := strings.Cut(got, "\n\n")
	wl, gl := strings.Split(wantHead, "\n"), strings.Split(gotHead, "\n")
	var diffs []string
	if wl[0] != gl[0] {
		diffs = append(diffs, fmt.Sprintf("status %q, the doc shows %q", gl[0], wl[0]))
	}
	headers := make(map[string]string)
	for _, h := range gl[1:] {
		k, v, _ := strings.Cut(h, ":")
		headers[strings.ToLower(k)] = strings.TrimSpace(v)
	}
	for _, h := range wl[1:] {
		k, v, _ := strings.Cut(h, ":")
		if g := headers[strings.ToLower(k)]; g != strings.TrimSpace(v) {
			diffs = append(diffs, fmt.Sprintf("header %s: %q, the doc shows %q", k, g, strings.TrimSpace(v)))
		}
	}
	return append(diffs, compareJSON("", wantBody, gotBody)...)
}

// compareStream compares an event stream message by message: comments
// exactly, ids as numbers, data as JSON.
func compareStream(want, got string) []string {
	split := func(s string) []string { return strings.Split(strings.TrimSpace(s), "\n\n") }
	wm, gm := split(want), split(got)
	if len(wm) != len(gm) {
		return []string{fmt.Sprintf("%d messages, the doc shows %d", len(gm), len(wm))}
	}
	var diffs []string
	for i := range wm {
		wl, gl := strings.Split(wm[i], "\n"), strings.Split(gm[i], "\n")
		if len(wl) != len(gl) {
			diffs = append(diffs, fmt.Sprintf("message %d has %d lines, the doc shows %d", i, len(gl), len(wl)))
			continue
		}
		for j := range wl {
			wk, wv, _ := strings.Cut(wl[j], ": ")
			gk, gv, _ := strings.Cut(gl[j], ": ")
			switch {
			case wk != gk:
				diffs = append(diffs, fmt.Sprintf("message %d line %d: %q, the doc shows %q", i, j, gl[j], wl[j]))
			case wk == "data":
				diffs = append(diffs, compareJSON(fmt.Sprintf("message %d", i), wv, gv)...)
			case wk == "id":
				if !digits.MatchString(gv) {
					diffs = append(diffs, fmt.Sprintf("message %d: id %q", i, gv))
				}
			case wv != gv:
				diffs = append(diffs, fmt.Sprintf("message %d: %q, the doc shows %q", i, gl[j], wl[j]))
			}
		}
	}
	return diffs
}

var (
	digits    = regexp.MustCompile(`^[0-9]+$`)
	longDigit = regexp.MustCompile(`[0-9]{10,}`)
	// varying are the fields whose values differ from run to run.
	varying = map[string]bool{"idle_ms": true, "held_ms": true, "waiting_ms": true, "expires_in_ms": true,
		"remote_addr": true, "version": true}
)

// compareJSON compares two JSON texts field by field.
func compareJSON(at, want, got string) []string {
	decode := func(s string) (any, error) {
		d := json.NewDecoder(strings.NewReader(s))
		d.UseNumber()
		var v any
		err := d.Decode(&v)
		return v, err
	}
	w, err := decode(want)
	if err != nil {
		return []string{fmt.Sprintf("%s: the doc's JSON: %v", at, err)}
	}
	g, err := decode(got)
	if err != nil {
		return []string{fmt.Sprintf("%s: the answer is not JSON: %v", at, err)}
	}
	var diffs []string
	sameShape(at, "", w, g, &diffs)
	return diffs
}

// sameShape compares want and got, the value of field key at path.
func sameShape(path, key string, want, got any, diffs *[]string) {
	bad := func(format string, args ...any) {
		*diffs = append(*diffs, path+": "+fmt.Sprintf(format, args...))
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			bad("%v, the doc shows an object", got)
			return
		}
		for k := range w {
			if _, ok := g[k]; !ok {
				bad("no field %q", k)
			}
		}
		for k, v := range g {
			if wv, ok := w[k]; ok {
				sameShape(path+"."+k, k, wv, v, diffs)
			} else {
				bad("field %q is not in the doc", k)
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			bad("%v, the doc shows %d items", got, len(w))
			return
		}
		for i := range w {
			sameShape(fmt.Sprintf("%s[%d]", path, i), key, w[i], g[i], diffs)
		}
	case json.Number:
		g, ok := got.(json.Number)
		switch {
		case !ok:
			bad("%v, the doc shows a number", got)
		case varying[key] || len(w) >= 12: // fencing tokens, event ids
		case g != w:
			bad("%s, the doc shows %s", g, w)
		}
	case string:
		g, ok := got.(string)
		if !ok {
			bad("%v, the doc shows a string", got)
			return
		}
		if _, err := time.Parse(time.RFC3339Nano, w); err == nil {
			if _, err := time.Parse(time.RFC3339Nano, g); err != nil {
				bad("%q, the doc shows a time", g)
			}
			return
		}
		if !varying[key] && longDigit.ReplaceAllString(g, "N") != longDigit.ReplaceAllString(w, "N") {
			bad("%q, the doc shows %q", g, w)
		}
	default:
		if !bytes.Equal(mustJSON(want), mustJSON(got)) {
			bad("%v, the doc shows %v", got, want)
		}
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
