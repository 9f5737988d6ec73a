// Package cluster makes lcd a node of a three- (or five-) node cluster:
// the lock table is replicated by raft (github.com/hashicorp/raft), its
// log and stable store in BoltDB (raft-boltdb), its snapshots in files,
// as Consul and Nomad keep theirs. A Cluster is the mutex.Replicator of a
// mutex.Node: the node proposes every command to it, and its state
// machine applies each committed command to the node on every member, in
// log order (mutex.Node.ApplyCommitted), with the entry's position.
//
//	c, err := cluster.New(cluster.Config{NodeID: "n1", RaftBind: ":7000", Dir: "/var/lib/lc/raft", Peers: peers})
//	node := mutex.NewNode(mutex.NodeConfig{Replicator: c})
//	err = c.Start(node)
//	...
//	c.Close()
//
// # Log entries
//
// Every entry this package writes is a LogCommand whose data starts with
// a kind byte:
//
//	1  command: uvarint proposer, uvarint proposal, then one record of the
//	   write-ahead log's format (store.AppendCommand: 12-byte header with
//	   length and CRC32C, then the command's JSON). The proposer and
//	   proposal tell the node that proposed it its own command; the
//	   command carries its time, so applying it reads no clock.
//	2  member: JSON {"id", "raft", "client"}: a node's raft address and the
//	   client address of its mutex port. A leader writes its own when it
//	   takes over and the log records another or none, and one for each
//	   bootstrap peer the log has none of. Followers name the leader's
//	   client address from these.
//
// An entry that does not decode is skipped, by every node alike, and
// logged.
//
// # Snapshots
//
// A snapshot is a 4-byte big-endian length, a JSON header of that length
// ({"format":1, "index", "members", "bytes"}: the position of the last
// entry it holds, the members recorded by then, and the size of what
// follows), then the table's snapshot records in the write-ahead log's
// format (store.WriteSnapshot), exactly "bytes" of them. The state
// machine copies the table when raft asks for a snapshot and writes the
// copy while entries go on applying. Raft's file snapshot store adds its
// own metadata and a CRC64 of the whole file.
//
// # Reads
//
// Linearize is the read-index recipe: note raft's commit index, confirm
// with a quorum that this node still leads (VerifyLeader), and wait until
// the entries up to the noted index have applied here. No entry is
// written for a read. A new leader serves reads only once it has applied
// a barrier and its own restart: raft's commit index is known to be
// current only once an entry of the leader's term has committed.
//
// # Leadership
//
// A goroutine follows raft's leadership channel. On winning an election
// the node waits for a barrier (every entry of earlier terms applied), then
// calls mutex.Node.SetLeader(true), which proposes the table's restart
// before any other command; on losing it, SetLeader(false) at once. A term
// that changed while this node led counts as a loss and a win.
//
// # Forwarding
//
// Forward is the mutex port's hook for a v1 request that reaches a
// follower: it dials the leader's client address and copies bytes both
// ways unchanged, passing on a clean close as a half-close and a reset as
// a reset, so that the v1 rules on how a client ends its connection hold
// through it.
package cluster
