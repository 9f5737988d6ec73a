package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/cluster"
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
		HTTPSessionTTL: 5 * time.Second,
		Security:       securityConfig{MaxConnections: autoMaxConnections(), Reserved: 32, Burst: 1}}
	if !reflect.DeepEqual(cfg, want) {
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
	// In a cluster an HTTP client's session must outlast a failover, as a
	// session of the session protocol must (election timeout 500ms: above
	// 750ms).
	node := []string{"NODE_ID=n1", "RAFT_ADDRESS=10.0.0.1:7000", "RAFT_DIR=/x", "HTTP_SESSION_TTL=700ms"}
	if _, err := resolve(t, nil, node); err == nil || !strings.Contains(err.Error(), "http-session-ttl") {
		t.Errorf("a cluster with HTTP_SESSION_TTL=700ms: %v", err)
	}
	if _, err := resolve(t, nil, append(node, "HTTP_ADDRESS=")); err != nil {
		t.Errorf("a cluster without the HTTP API does not look at HTTP_SESSION_TTL: %v", err)
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

func TestConfigCluster(t *testing.T) {
	env := []string{"NODE_ID=n1", "RAFT_ADDRESS=10.0.0.1:7000", "RAFT_DIR=/var/lib/lc/raft",
		"RAFT_PEERS=n1=10.0.0.1:7000=10.0.0.1:22119,n2=10.0.0.2:7000=10.0.0.2:22119,n3=10.0.0.3:7000",
		"RAFT_DIAL=n2=127.0.0.1:7002"}
	cfg, err := resolve(t, nil, env)
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Cluster
	if c == nil || c.NodeID != "n1" || c.RaftBind != "10.0.0.1:7000" || len(c.Peers) != 3 ||
		c.Peers[2].ClientAddress != "" || c.Dial["n2"] != "127.0.0.1:7002" || c.ElectionTimeout != 500*time.Millisecond {
		t.Fatalf("cluster settings %+v", c)
	}
	// The raft port defaults to the mutex port + 4 (+3 is the HTTP API's).
	def, err := resolve(t, nil, []string{"NODE_ID=n1", "RAFT_DIR=/x", "BIND_ADDRESS=10.0.0.1:22119", "ADVERTISE_ADDRESS=10.0.0.1:22119"})
	if err != nil || def.Cluster.RaftBind != "10.0.0.1:22123" {
		t.Fatalf("default raft address: %+v, %v", def.Cluster, err)
	}
	if def, err := resolve(t, nil, []string{"NODE_ID=n1", "RAFT_DIR=/x"}); err != nil || def.Cluster.RaftBind != ":22123" {
		t.Fatalf("default raft address beside the default mutex port: %+v, %v", def.Cluster, err)
	}
	if cfg, err := resolve(t, nil, nil); err != nil || cfg.Cluster != nil {
		t.Fatalf("without NODE_ID: %+v, %v", cfg.Cluster, err)
	}
	for name, bad := range map[string][]string{
		"DATA_PATH beside NODE_ID":     append(slices.Clone(env), "DATA_PATH=/var/lib/lc/locks.wal"),
		"a raft setting alone":         {"RAFT_DIR=/tmp/x"},
		"no RAFT_DIR":                  {"NODE_ID=n1", "RAFT_ADDRESS=10.0.0.1:7000"},
		"a TTL a failover outlasts":    append(slices.Clone(env), "RAFT_ELECTION_TIMEOUT=1s"),
		"the node not among its peers": {"NODE_ID=n9", "RAFT_ADDRESS=10.0.0.1:7000", "RAFT_DIR=/x", "RAFT_PEERS=n1=10.0.0.1:7000"},
		"a bad peer":                   {"NODE_ID=n1", "RAFT_ADDRESS=10.0.0.1:7000", "RAFT_DIR=/x", "RAFT_PEERS=n1"},
		"two peers at one raft address": {"NODE_ID=n1", "RAFT_ADDRESS=10.0.0.1:7000", "RAFT_DIR=/x",
			"RAFT_PEERS=n1=10.0.0.1:7000,n2=10.0.0.1:7000"},
		"a peer's raft port above 65535": {"NODE_ID=n1", "RAFT_ADDRESS=10.0.0.1:7000", "RAFT_DIR=/x",
			"RAFT_PEERS=n1=10.0.0.1:7000,n2=10.0.0.2:99999"},
		"a peer's raft address of every interface": {"NODE_ID=n1", "RAFT_ADDRESS=10.0.0.1:7000", "RAFT_DIR=/x",
			"RAFT_PEERS=n1=10.0.0.1:7000,n2=0.0.0.0:7000"},
		"a peer's raft address without a host": {"NODE_ID=n1", "RAFT_ADDRESS=10.0.0.1:7000", "RAFT_DIR=/x",
			"RAFT_PEERS=n1=10.0.0.1:7000,n2=:7000"},
		"a peer's client port of 0": {"NODE_ID=n1", "RAFT_ADDRESS=10.0.0.1:7000", "RAFT_DIR=/x",
			"RAFT_PEERS=n1=10.0.0.1:7000,n2=10.0.0.2:7000=10.0.0.2:0"},
		"no room for port+4":                       {"NODE_ID=n1", "RAFT_DIR=/x", "BIND_ADDRESS=:65532"},
		"an advertised address without a host":     append(slices.Clone(env), "ADVERTISE_ADDRESS=:22119"),
		"an advertised address of every interface": append(slices.Clone(env), "ADVERTISE_ADDRESS=0.0.0.0:22119"),
		"an advertised address without a port":     append(slices.Clone(env), "ADVERTISE_ADDRESS=locks.internal"),
		"an advertised raft address of port 0":     append(slices.Clone(env), "RAFT_ADVERTISE=10.0.0.1:0"),
	} {
		if _, err := resolve(t, nil, bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := resolve(t, nil, append(slices.Clone(env), "RAFT_ELECTION_TIMEOUT=1s", "SESSION_TTL_MIN=2s")); err != nil {
		t.Errorf("a TTL above one and a half elections: %v", err)
	}
}

// DATA_PATH beside NODE_ID makes lcd exit 2 with one line.
func TestClusterWithDataPathExits2(t *testing.T) {
	var stderr bytes.Buffer
	code := run(context.Background(), nil, []string{"NODE_ID=n1", "RAFT_ADDRESS=127.0.0.1:0", "RAFT_DIR=" + t.TempDir(),
		"DATA_PATH=" + t.TempDir() + "/locks.wal"}, io.Discard, &stderr)
	if code != exitUsage || strings.Count(stderr.String(), "\n") != 1 || !strings.Contains(stderr.String(), "DATA_PATH") {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}

// RAFT_LOG_STORE chooses the raft log store; a name that is none of them
// is an error.
func TestConfigLogStore(t *testing.T) {
	node := []string{"NODE_ID=n1", "RAFT_ADDRESS=10.0.0.1:7000", "RAFT_DIR=/x"}
	for env, want := range map[string]cluster.LogStore{"": cluster.LogStoreBoltDB, "RAFT_LOG_STORE=wal": cluster.LogStoreWAL,
		"RAFT_LOG_STORE=boltdb": cluster.LogStoreBoltDB} {
		cfg, err := resolve(t, nil, append(slices.Clone(node), env))
		if err != nil || cfg.Cluster.LogStore != want {
			t.Errorf("%q: %+v, %v", env, cfg.Cluster, err)
		}
	}
	if cfg, err := resolve(t, []string{"--raft-log-store=wal"}, node); err != nil || cfg.Cluster.LogStore != cluster.LogStoreWAL {
		t.Errorf("--raft-log-store=wal: %v", err)
	}
	if _, err := resolve(t, nil, append(slices.Clone(node), "RAFT_LOG_STORE=bolt")); err == nil {
		t.Error("RAFT_LOG_STORE=bolt accepted")
	}
	if _, err := resolve(t, nil, []string{"RAFT_LOG_STORE=wal"}); err == nil {
		t.Error("RAFT_LOG_STORE without NODE_ID accepted")
	}
}

// A RAFT_DIR that holds the other log store's files makes lcd exit 2 with
// one line, and gains no file of the store configured.
func TestClusterOtherLogStoreExits2(t *testing.T) {
	for store, other := range map[string]string{"wal": "raft.db", "boltdb": "wal/wal-meta.db"} {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, other)), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, other), nil, 0o640); err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // a node that started would stop at once, exiting 0
		code := run(ctx, nil, []string{"NODE_ID=n1", "BIND_ADDRESS=127.0.0.1:0", "RAFT_ADDRESS=127.0.0.1:0",
			"HTTP_ADDRESS=", "RAFT_DIR=" + dir, "RAFT_LOG_STORE=" + store}, io.Discard, &stderr)
		if code != exitUsage || strings.Count(stderr.String(), "\n") != 1 || !strings.Contains(stderr.String(), other) {
			t.Errorf("RAFT_LOG_STORE=%s beside %s: exit %d, stderr %q", store, other, code, stderr.String())
		}
		entries, _ := os.ReadDir(dir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		if want := strings.Split(other, "/")[0]; !slices.Equal(names, []string{want}) {
			t.Errorf("RAFT_LOG_STORE=%s: the directory holds %v", store, names)
		}
	}
}

func TestConfigSecurity(t *testing.T) {
	cfg, err := resolve(t, []string{"--auth-tokens-file=/etc/lc/tokens", "--max-connections=500"},
		[]string{"AUTH_V1_NETWORKS=10.0.0.0/8, 127.0.0.1/32", "AUTH_METRICS=true", "RESERVED_CONNECTIONS=50",
			"MAX_HELD_PER_SOURCE=100", "MAX_PARKED_PER_SOURCE=10", "RATE_PER_SOURCE=20.5", "RATE_BURST=40"})
	if err != nil {
		t.Fatal(err)
	}
	sc := cfg.Security
	if sc.TokensFile != "/etc/lc/tokens" || len(sc.V1Networks) != 2 || sc.V1Networks[1].String() != "127.0.0.1/32" ||
		!sc.MetricsAuth || sc.MaxConnections != 500 || sc.Reserved != 50 || sc.Limits.MaxHeld != 100 ||
		sc.Limits.MaxParked != 10 || sc.Rate != 20.5 || sc.Burst != 40 {
		t.Fatalf("security settings %+v", sc)
	}
	if cfg, _ := resolve(t, []string{"--rate-per-source=7.5", "--max-connections=0"}, nil); cfg.Security.Burst != 7 ||
		cfg.Security.MaxConnections != 0 {
		t.Errorf("the burst of 7.5/s defaults to %d (want 7), max-connections 0 to %d", cfg.Security.Burst,
			cfg.Security.MaxConnections)
	}
	for _, bad := range [][]string{
		{"--auth-v1-networks=10.0.0.0/8"}, // without authentication
		{"--auth-metrics=true"},           // likewise
		{"--auth-tokens-file=t", "--auth-v1-networks=10.0.0.0"},
		{"--auth-tokens-file=t", "--auth-v1-networks=,"},
		{"--auth-tokens-file=t", "--auth-v1-networks=10.0.0.0/8,,127.0.0.1/32"},
		{"--auth-metrics=maybe"},
		{"--max-connections=10", "--reserved-connections=10"},
		{"--max-connections=-1"}, {"--max-held-per-source=many"}, {"--rate-per-source=-1"},
		{"--rate-burst=1.5"},
	} {
		if _, err := resolve(t, bad, nil); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// A NODE_ID or a RAFT_PEERS id that no member could have makes lcd exit 2
// with one line, before it binds or writes anything.
func TestClusterBadNodeIDExits2(t *testing.T) {
	for _, env := range [][]string{
		{"NODE_ID=n 1"},
		{"NODE_ID=n1", "RAFT_PEERS=n1=127.0.0.1:7000,n\x012=127.0.0.1:7001"},
	} {
		var stderr bytes.Buffer
		dir := t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // a node that started would stop at once, exiting 0
		code := run(ctx, nil, append(env, "BIND_ADDRESS=127.0.0.1:0", "RAFT_ADDRESS=127.0.0.1:0",
			"RAFT_DIR="+dir), io.Discard, &stderr)
		if code != exitUsage || strings.Count(stderr.String(), "\n") != 1 || !strings.Contains(stderr.String(), "node id") {
			t.Errorf("%q: exit %d, stderr %q", env, code, stderr.String())
		}
	}
}
