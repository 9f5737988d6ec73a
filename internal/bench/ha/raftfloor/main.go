// Command raftfloor is the cost floor of a lock service on hashicorp/raft:
// a node of a three-node raft cluster with lcd's raft settings and store
// (raft-wal behind raft's log cache, TCP transport, file snapshots) whose
// state machine does nothing. Each request is one byte on a client
// connection, answered '+' once one raft entry of 16 bytes it proposed is
// committed and applied, or '-' when this node does not lead. The HA
// benchmark runs it beside lcd and etcd, so that lcd's cycles/s are read
// against what the consensus library and the machine allow at all.
//
// Usage: raftfloor -id ID -raft ADDR -client ADDR -dir DIR [-bootstrap
// ID=ADDR,...]. It serves until killed; GET-less: a client byte 's' is
// answered with the node's commit index as 20 decimal digits.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
)

func main() {
	id := flag.String("id", "", "node id")
	raftAddr := flag.String("raft", "", "raft bind address")
	clientAddr := flag.String("client", "", "client address")
	dir := flag.String("dir", "", "data directory")
	bootstrap := flag.String("bootstrap", "", "ID=ADDR,... of a new cluster (on one node)")
	flag.Parse()
	log.SetFlags(0)

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(*id)
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = 500*time.Millisecond, 500*time.Millisecond, 250*time.Millisecond
	rc.BatchApplyCh = true
	rc.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: os.Stderr})

	walDir := filepath.Join(*dir, "wal")
	if err := os.MkdirAll(walDir, 0o700); err != nil {
		log.Fatal(err)
	}
	w, err := wal.Open(walDir)
	if err != nil {
		log.Fatal(err)
	}
	logs, err := raft.NewLogCache(512, w)
	if err != nil {
		log.Fatal(err)
	}
	snaps, err := raft.NewFileSnapshotStore(*dir, 1, os.Stderr)
	if err != nil {
		log.Fatal(err)
	}
	trans, err := raft.NewTCPTransport(*raftAddr, nil, 3, 10*time.Second, os.Stderr)
	if err != nil {
		log.Fatal(err)
	}
	r, err := raft.NewRaft(rc, nothing{}, logs, w, snaps, trans)
	if err != nil {
		log.Fatal(err)
	}
	if *bootstrap != "" {
		var servers []raft.Server
		for _, p := range strings.Split(*bootstrap, ",") {
			sid, addr, _ := strings.Cut(p, "=")
			servers = append(servers, raft.Server{ID: raft.ServerID(sid), Address: raft.ServerAddress(addr)})
		}
		if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			log.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", *clientAddr)
	if err != nil {
		log.Fatal(err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go serve(r, c)
	}
}

// serve answers the requests of one client connection, one at a time.
func serve(r *raft.Raft, c net.Conn) {
	defer c.Close()
	b := make([]byte, 1)
	entry := make([]byte, 16)
	for {
		if _, err := io.ReadFull(c, b); err != nil {
			return
		}
		var answer []byte
		switch {
		case b[0] == 's':
			answer = fmt.Appendf(nil, "%020d", r.CommitIndex())
		case r.Apply(entry, 10*time.Second).Error() == nil:
			answer = []byte{'+'}
		default:
			answer = []byte{'-'}
		}
		if _, err := c.Write(answer); err != nil {
			return
		}
	}
}

// nothing is a state machine that keeps nothing.
type nothing struct{}

func (nothing) Apply(*raft.Log) any                  { return nil }
func (nothing) Snapshot() (raft.FSMSnapshot, error)  { return nothing{}, nil }
func (nothing) Restore(rc io.ReadCloser) error       { return rc.Close() }
func (nothing) Persist(sink raft.SnapshotSink) error { return sink.Close() }
func (nothing) Release()                             {}
