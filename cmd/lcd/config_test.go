package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// resolve parses args and environ the way lcd does and returns the config.
func resolve(t *testing.T, args []string, environ []string) (Config, error) {
	t.Helper()
	var o options
	fs := pflag.NewFlagSet("lcd", pflag.ContinueOnError)
	o.register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return o.config(fs, environ)
}

func TestConfigDefaults(t *testing.T) {
	cfg, err := resolve(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{BindAddress: ":22119", ManagerAddress: ":22120", MetricsAddress: ":22121", HTTPAddress: ":22122",
		HeaderTimeout: 10 * time.Second, ShutdownTimeout: 30 * time.Second, LogFormat: "text",
		SessionTTL: 10 * time.Second, SessionTTLMin: time.Second, SessionTTLMax: 5 * time.Minute,
		HTTPSessionTTL: 5 * time.Second}
	if cfg != want {
		t.Fatalf("defaults = %+v\nwant %+v", cfg, want)
	}
}

func TestConfigSessions(t *testing.T) {
	cfg, err := resolve(t, []string{"--session-ttl=30s", "--lock-delay=15s"}, []string{"SESSION_TTL_MAX=1m", "SESSION_TTL_MIN=2s"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.SessionTTL != 30*time.Second || cfg.SessionTTLMin != 2*time.Second || cfg.SessionTTLMax != time.Minute ||
		cfg.LockDelay != 15*time.Second {
		t.Fatalf("session settings %+v", cfg)
	}
	for _, bad := range [][]string{
		{"--session-ttl=10m"},                      // above the default maximum
		{"--session-ttl-min=20s"},                  // the default TTL below it
		{"--lock-delay=61s"}, {"--lock-delay=-1s"}, // out of range
		{"--session-ttl=0s"}, {"--lock-delay=soon"},
	} {
		if _, err := resolve(t, bad, nil); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestConfigEnvironmentAndFlags(t *testing.T) {
	env := []string{"BIND_ADDRESS=127.0.0.1:4000", "DATA_PATH=/var/lib/lc/locks.wal", "HEADER_TIMEOUT=2s", "LOG_LEVEL=debug"}
	cfg, err := resolve(t, nil, env)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ManagerAddress != "127.0.0.1:4001" || cfg.MetricsAddress != "127.0.0.1:4002" ||
		cfg.DataPath != "/var/lib/lc/locks.wal" || cfg.HeaderTimeout != 2*time.Second || cfg.LogLevel.String() != "DEBUG" {
		t.Fatalf("from environment: %+v", cfg)
	}
	cfg, err = resolve(t, []string{"--bind-address", "127.0.0.1:5000", "--metrics-address", "0.0.0.0:9100"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BindAddress != "127.0.0.1:5000" || cfg.ManagerAddress != "127.0.0.1:5001" || cfg.MetricsAddress != "0.0.0.0:9100" {
		t.Fatalf("flags must win over the environment: %+v", cfg)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, env := range [][]string{
		{"BIND_ADDRESS=:65534"},
		{"BIND_ADDRESS=localhost"},
		{"BIND_ADDRESS=:http"},
		{"HEADER_TIMEOUT=0s"},
		{"SHUTDOWN_TIMEOUT=soon"},
		{"LOG_LEVEL=loud"},
		{"LOG_FORMAT=xml"},
		{"MANAGER_ADDRESS=nope"},
	} {
		if _, err := resolve(t, nil, env); err == nil {
			t.Errorf("%v: no error", env)
		}
	}
	if _, err := resolve(t, nil, []string{"BIND_ADDRESS=:65534", "MANAGER_ADDRESS=:1", "METRICS_ADDRESS=:2", "HTTP_ADDRESS=:3"}); err != nil {
		t.Errorf("explicit side ports must lift the port+3 rule: %v", err)
	}
}

func TestConfigHTTP(t *testing.T) {
	for _, c := range []struct {
		args, env []string
		want      string
	}{
		{nil, []string{"BIND_ADDRESS=127.0.0.1:4000"}, "127.0.0.1:4003"},
		{nil, []string{"BIND_ADDRESS=127.0.0.1:0"}, "127.0.0.1:0"},
		{nil, []string{"HTTP_ADDRESS=:8089"}, ":8089"},
		{nil, []string{"HTTP_ADDRESS="}, ""}, // off
		{[]string{"--http-address="}, nil, ""},
		{[]string{"--http-address", ":8089"}, []string{"HTTP_ADDRESS="}, ":8089"},
		// Off, the API leaves room at the top of the port range.
		{nil, []string{"BIND_ADDRESS=:65533", "HTTP_ADDRESS="}, ""},
	} {
		cfg, err := resolve(t, c.args, c.env)
		if err != nil || cfg.HTTPAddress != c.want {
			t.Errorf("%v %v: HTTP address %q, %v; want %q", c.args, c.env, cfg.HTTPAddress, err, c.want)
		}
	}
	_, err := resolve(t, nil, []string{"BIND_ADDRESS=:65533"})
	if err == nil || !strings.Contains(err.Error(), "port+3") || !strings.Contains(err.Error(), "HTTP_ADDRESS") {
		t.Errorf("port 65533 leaves no room for the HTTP API: %v", err)
	}
	for _, bad := range []string{"HTTP_ADDRESS=8089", "HTTP_SESSION_TTL=0s", "HTTP_SESSION_TTL=soon"} {
		if _, err := resolve(t, nil, []string{bad}); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	cfg, err := resolve(t, []string{"--http-session-ttl=12s"}, nil)
	if err != nil || cfg.HTTPSessionTTL != 12*time.Second {
		t.Errorf("http-session-ttl: %v %v", cfg.HTTPSessionTTL, err)
	}
}

func TestRunExitCodes(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"--version"}, nil, &out, &errOut); code != exitOK || !strings.HasPrefix(out.String(), "lcd ") {
		t.Fatalf("--version: code %d, out %q", code, out.String())
	}
	errOut.Reset()
	code := run(context.Background(), nil, []string{"BIND_ADDRESS=:65535"}, io.Discard, &errOut)
	if code != exitUsage || strings.Count(errOut.String(), "\n") != 1 || !strings.Contains(errOut.String(), "65535") {
		t.Fatalf("bad port: code %d, stderr %q", code, errOut.String())
	}
	if code := run(context.Background(), []string{"--no-such-flag"}, nil, io.Discard, io.Discard); code != exitUsage {
		t.Fatalf("unknown flag: code %d", code)
	}
}
