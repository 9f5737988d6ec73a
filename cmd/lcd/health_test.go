package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHealthURL(t *testing.T) {
	tests := []struct {
		name    string
		environ []string
		want    string
	}{
		{"defaults", nil, "http://127.0.0.1:22121/metrics"},
		{"bind port plus two", []string{"BIND_ADDRESS=10.1.2.3:5000"}, "http://10.1.2.3:5002/metrics"},
		{"unspecified bind host", []string{"BIND_ADDRESS=0.0.0.0:7000"}, "http://127.0.0.1:7002/metrics"},
		{"metrics address wins", []string{"BIND_ADDRESS=:7000", "METRICS_ADDRESS=:9102"}, "http://127.0.0.1:9102/metrics"},
		{"ipv6 unspecified", []string{"METRICS_ADDRESS=[::]:9102"}, "http://[::1]:9102/metrics"},
		{"ipv6 host", []string{"METRICS_ADDRESS=[fd00::1]:9102"}, "http://[fd00::1]:9102/metrics"},
		{"unrelated variables", []string{"PATH=/bin", "DATA_PATH=/data/locks.wal"}, "http://127.0.0.1:22121/metrics"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := healthURL(tt.environ)
			if err != nil {
				t.Fatalf("healthURL(%q): %v", tt.environ, err)
			}
			if got != tt.want {
				t.Errorf("healthURL(%q) = %q, want %q", tt.environ, got, tt.want)
			}
		})
	}
}

func TestHealthURLErrors(t *testing.T) {
	for _, environ := range [][]string{
		{"BIND_ADDRESS=127.0.0.1:0"},
		{"METRICS_ADDRESS=127.0.0.1:0"},
		{"BIND_ADDRESS=no-port"},
		{"METRICS_ADDRESS=no-port"},
		{"BIND_ADDRESS=:65534"},
	} {
		if got, err := healthURL(environ); err == nil {
			t.Errorf("healthURL(%q) = %q, want an error", environ, got)
		}
	}
}

// runHealth runs `lcd health` with args and environ and returns the exit
// code and what was written to stderr.
func runHealth(t *testing.T, environ []string, args ...string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append([]string{"health"}, args...), environ, &stdout, &stderr)
	if stdout.Len() != 0 {
		t.Errorf("health wrote to stdout: %q", stdout.String())
	}
	return code, stderr.String()
}

func TestHealthCommand(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte("locking_center_locked_keys 0\n"))
	}))
	defer ok.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "gathering failed", http.StatusServiceUnavailable)
	}))
	defer failing.Close()

	// An address nothing listens on: bound, then released.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := ln.Addr().String()
	ln.Close()

	okAddr := strings.TrimPrefix(ok.URL, "http://")
	tests := []struct {
		name     string
		environ  []string
		args     []string
		wantCode int
		wantErr  string // substring of the one stderr line; empty wants no output
	}{
		{"200 by url", nil, []string{"--url", ok.URL + "/metrics"}, exitOK, ""},
		{"200 by METRICS_ADDRESS", []string{"METRICS_ADDRESS=" + okAddr}, nil, exitOK, ""},
		{"404", nil, []string{"--url", ok.URL + "/other"}, exitRuntime, "404 Not Found"},
		{"503", nil, []string{"--url", failing.URL + "/metrics"}, exitRuntime, "503 Service Unavailable"},
		{"nothing listening", []string{"METRICS_ADDRESS=" + closedAddr}, nil, exitRuntime, "connection refused"},
		{"bad url", nil, []string{"--url", "::not a url"}, exitRuntime, "health:"},
		{"port zero", []string{"BIND_ADDRESS=127.0.0.1:0"}, nil, exitUsage, "port 0"},
		{"zero timeout", nil, []string{"--timeout", "0s"}, exitUsage, "timeout must be above zero"},
		{"argument", nil, []string{"extra"}, exitUsage, "unknown command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stderr := runHealth(t, tt.environ, tt.args...)
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d (stderr %q)", code, tt.wantCode, stderr)
			}
			if tt.wantErr == "" {
				if stderr != "" {
					t.Errorf("stderr %q, want nothing", stderr)
				}
				return
			}
			if !strings.Contains(stderr, tt.wantErr) {
				t.Errorf("stderr %q, want it to contain %q", stderr, tt.wantErr)
			}
			if strings.Count(stderr, "\n") != 1 || !strings.HasSuffix(stderr, "\n") {
				t.Errorf("stderr %q, want exactly one line", stderr)
			}
		})
	}
}

func TestHealthTimeout(t *testing.T) {
	release := make(chan struct{})
	stalled := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer stalled.Close()
	defer close(release)

	code, stderr := runHealth(t, nil, "--url", stalled.URL+"/metrics", "--timeout", "50ms")
	if code != exitRuntime {
		t.Errorf("exit code %d, want %d (stderr %q)", code, exitRuntime, stderr)
	}
	if !strings.Contains(stderr, "deadline exceeded") {
		t.Errorf("stderr %q, want a deadline error", stderr)
	}
}
