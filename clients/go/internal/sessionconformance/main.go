// Command sessionconformance runs the scenarios of the session suite
// (clients/conformance/SESSIONS.md, run by sessions.sh) with the Go
// session client against the servers the harness started.
//
// It reads the environment SESSIONS.md lists and prints one line per
// scenario, "ok <id>" or "FAIL <id>: <reason>", in the table's order. It
// exits 1 when a scenario failed and 2 when the environment is
// incomplete. With LC_SESSION_CHILD set it is instead the child of
// s-kill-client (child.go).
package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/locking-center/locking-center/clients/go/internal/scenario"
)

// scenarioLimit bounds one scenario: the slowest, s-leader-stop, takes
// 6 s and a failover or two.
const scenarioLimit = 30 * time.Second

const prefix = "go/"

// env is the servers of SESSIONS.md.
type env struct {
	addr, manager     string // the single lcd
	proxy, proxyCtl   string
	tls, caFile       string
	token             string
	big, bigManager   string
	cluster, managers []string // the nodes' mutex and management ports, in the same order
	dead, silent      string
	probe             scenario.Probe
}

func main() {
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	e, missing := readEnv(os.Getenv)
	if len(missing) > 0 {
		fmt.Fprintf(os.Stderr, "sessionconformance: %s must be set\n", strings.Join(missing, ", "))
		os.Exit(2)
	}
	os.Exit(scenario.Run(e, []scenario.Scenario[env]{
		{ID: "s-acquire-release", Run: acquireRelease},
		{ID: "s-try-busy", Run: tryBusy},
		{ID: "s-wait-bound", Run: waitBound},
		{ID: "s-cancel", Run: cancelWait},
		{ID: "s-stale-release", Run: staleRelease},
		{ID: "s-lease-expiry", Run: leaseExpiry},
		{ID: "s-kill-client", Run: killClient},
		{ID: "s-resume", Run: resume},
		{ID: "s-leader-stop", Run: leaderStop},
		{ID: "s-leader-kill", Run: leaderKill},
		{ID: "s-tls-token", Run: tlsToken},
		{ID: "s-modes", Run: modes},
		{ID: "s-note", Run: note},
		{ID: "s-big-token", Run: bigToken},
		{ID: "s-silent-server", Run: silentServer},
		{ID: "s-fifo-mixed", Run: fifoMixed},
	}, scenarioLimit))
}

// readEnv reads the environment of SESSIONS.md, and names the variables
// that are missing.
func readEnv(getenv func(string) string) (env, []string) {
	var missing []string
	get := func(name string) string {
		v := getenv(name)
		if v == "" {
			missing = append(missing, name)
		}
		return v
	}
	list := func(name string) []string {
		var out []string
		for _, a := range strings.Split(get(name), ",") {
			if a = strings.TrimSpace(a); a != "" {
				out = append(out, a)
			}
		}
		return out
	}
	e := env{
		addr: get("LC_ADDR"), manager: get("LC_MANAGER_ADDR"),
		proxy: get("LC_PROXY_ADDR"), proxyCtl: get("LC_PROXY_CTL"),
		tls: get("LC_TLS_ADDR"), caFile: get("LC_CA_FILE"), token: get("LC_TOKEN"),
		big: get("LC_BIG_ADDR"), bigManager: get("LC_BIG_MANAGER"),
		cluster: list("LC_CLUSTER"), managers: list("LC_CLUSTER_MANAGER"),
		dead: get("LC_DEAD_ADDR"), silent: get("LC_SILENT_ADDR"), probe: scenario.Probe(get("LC_PROBE")),
	}
	if len(missing) == 0 && len(e.cluster) != len(e.managers) {
		missing = append(missing, "LC_CLUSTER and LC_CLUSTER_MANAGER of the same length")
	}
	return e, missing
}
