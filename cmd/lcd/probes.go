package main

import (
	"fmt"
	"net/http"

	"github.com/locking-center/locking-center/cluster"
)

// handleProbes adds the probes of an orchestrator to the metrics port's
// mux:
//
//   - GET /healthz answers 200 "ok" while the process serves: a liveness
//     probe, failing only when the process is stuck or gone.
//   - GET /readyz answers 200 when this lcd can serve a client now, 503
//     with the reason otherwise. A single lcd is ready once it listens. A
//     cluster node is ready when it leads and its restart has applied
//     ("leader"), or when it follows a leader it knows ("follower of
//     ADDRESS"): it then forwards v1 requests there and names it to
//     sessions. During an election, or cut off from a quorum, no node is
//     ready.
//
// cl is nil for a single lcd.
func handleProbes(mux *http.ServeMux, cl *cluster.Cluster) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if cl == nil {
			fmt.Fprintln(w, "ready")
			return
		}
		st := cl.Status(false)
		st.Ready = st.Ready && cl.Ready() // a leader that knows it leads
		ready, why := clusterReady(st)
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, why)
	})
}

// clusterReady reports whether a cluster node in state st serves clients,
// with the reason in a few words.
func clusterReady(st cluster.Status) (bool, string) {
	switch {
	case st.State == "Leader" && st.Ready:
		return true, "leader"
	case st.State == "Leader":
		return false, "leader, applying the log of earlier terms"
	case st.State == "Follower" && st.Leader != "":
		return true, "follower of " + st.Leader
	default:
		return false, "no leader known (" + st.State + ")"
	}
}
