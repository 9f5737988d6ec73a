package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	benchproc "github.com/locking-center/locking-center/internal/bench/proc"
)

// floorCluster is three raftfloor nodes (./raftfloor): hashicorp/raft
// with lcd's settings and the WAL store, and a state machine that does
// nothing, so that the figures of lcd read against those of the library
// itself on this machine.
type floorCluster struct {
	clients []string // each node's client address
	ps      []*proc
}

func startFloor(bin, dir string) *floorCluster {
	fc := &floorCluster{}
	var ids, rafts []string
	for i := range 3 {
		addrs := benchproc.FreeAddrs(2)
		ids, rafts = append(ids, fmt.Sprintf("f%d", i+1)), append(rafts, addrs[0])
		fc.clients = append(fc.clients, addrs[1])
	}
	var peers []string
	for i := range ids {
		peers = append(peers, ids[i]+"="+rafts[i])
	}
	for i := range ids {
		args := []string{"-id", ids[i], "-raft", rafts[i], "-client", fc.clients[i], "-dir", filepath.Join(dir, "raft-floor-"+ids[i])}
		if i == 0 {
			args = append(args, "-bootstrap", strings.Join(peers, ","))
		}
		fc.ps = append(fc.ps, spawn(bin, args, nil, serverLog("raft-floor-"+ids[i])))
	}
	waitFor(30*time.Second, "raft floor leader", func() bool { return fc.leader() != "" })
	return fc
}

func (fc *floorCluster) stop() {
	for _, p := range fc.ps {
		p.kill()
	}
}

// leader returns the client address of the node that answers a request
// '+', or "".
func (fc *floorCluster) leader() string {
	for _, a := range fc.clients {
		c, err := dialFloor(a)
		if err != nil {
			continue
		}
		err = c.request()
		c.close()
		if err == nil {
			return a
		}
	}
	return ""
}

// floorConn is a client connection to a raftfloor node.
type floorConn struct {
	c net.Conn
	r *bufio.Reader
}

func dialFloor(addr string) (*floorConn, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	return &floorConn{c: c, r: bufio.NewReader(c)}, nil
}

var errNotLeading = errors.New("raft floor: not the leader")

// request proposes one entry and waits for it.
func (f *floorConn) request() error {
	if _, err := f.c.Write([]byte{'a'}); err != nil {
		return err
	}
	b, err := f.r.ReadByte()
	if err != nil {
		return err
	}
	if b != '+' {
		return errNotLeading
	}
	return nil
}

// commitIndex asks the node for its commit index.
func (f *floorConn) commitIndex() (uint64, error) {
	if _, err := f.c.Write([]byte{'s'}); err != nil {
		return 0, err
	}
	b := make([]byte, 20)
	if _, err := io.ReadFull(f.r, b); err != nil {
		return 0, err
	}
	return strconv.ParseUint(string(b), 10, 64)
}

func (f *floorConn) lock(context.Context) error   { return f.request() }
func (f *floorConn) unlock(context.Context) error { return f.request() }
func (f *floorConn) close()                       { f.c.Close() }

// floorSystem is fc as a system: a cycle is two entries, as lcd's and
// etcd's are.
func floorSystem(fc *floorCluster) system {
	entries := func() uint64 {
		c, err := dialFloor(fc.leader())
		if err != nil {
			return 0
		}
		defer c.close()
		n, _ := c.commitIndex()
		return n
	}
	return system{name: "raft-floor", procs: func() []*proc { return fc.ps }, entries: entries, client: func(string) locker {
		for range 10 {
			if c, err := dialFloor(fc.leader()); err == nil {
				return c
			}
		}
		log.Fatal("raft floor: no leader to connect to")
		return nil
	}}
}
