// Package cluster makes lcd a node of a three- (or five-) node cluster:
// the lock table is replicated by raft (github.com/hashicorp/raft), its
// log and stable store in BoltDB (raft-boltdb) or in raft-wal's segment
// files (Config.LogStore), behind raft's cache of the latest entries, its
// snapshots in files, as Consul and Nomad keep theirs. A Cluster is the mutex.Replicator of a
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
//	2  member: JSON {"id", "raft", "client", "http", "batches"}: a node's
//	   raft address, the client address of its mutex port, the address of
//	   its HTTP API ("http" left out when it has none; records written
//	   before lcd recorded it have none, and read so), and "batches": true
//	   when its lcd reads kind 4 (left out by lcd before it). A leader writes its own when it
//	   takes over and the log records another or none, and one for each
//	   bootstrap peer the log has none of; a follower whose record differs
//	   from its settings (it came back on another address, or joined
//	   without one) asks the leader to write its own, over the control
//	   protocol below. Nodes name the leader's client address from these,
//	   and forward v1 requests there, and HTTP requests to its "http".
//	3  forget: JSON {"id"}: the member of id was removed; its record goes.
//	4  batch: uvarint count (at least 2), count uvarint lengths, then
//	   count entries of kind 1 of those lengths, back to back: commands
//	   proposed together, applied in their order, each with the batch's
//	   position (so a grant's fencing token is the position times 65,536
//	   plus its rank among the grants of the whole batch), in one step of
//	   the node (mutex.Node.ApplyCommittedBatch). A leader
//	   gathers the commands that arrive while two earlier entries of its
//	   own wait for their commit (propose.go), at most 64 commands or
//	   about 16 KiB, and writes a batch only while the log records "batches" of
//	   every member of the configuration; a lone command is an entry of
//	   kind 1.
//
// A leader proposes only entries it encoded, so an entry that does not
// decode means the node's copy of the log is damaged (or was written by a
// newer lcd). The node then applies nothing more, takes no snapshot, and
// Cluster.Failed is closed: lcd stops with exit code 4. Skipping the
// entry would leave its table unlike the other nodes', and as a leader it
// could grant a key another session holds.
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
// A follower asked for its vote (or pre-vote) while it still knows a
// leader looks for that leader at once when it has been silent for the
// heartbeat timeout, and otherwise once that timeout has passed since its
// last contact, instead of at the next random draw of its own timer: the
// cluster then elects about when its first follower notices a dead
// leader (election.go).
//
// # The control protocol
//
// The raft port carries a second protocol beside raft's RPCs, told apart
// by a connection's first byte: raft's RPC types are 0 to 4, a control
// connection starts with 0xC1. Then one request and one response, each a
// 4-byte big-endian length (at most 65,536) and that many bytes of JSON:
//
//	request  {"op", "id", "raft", "client", "http", "batches", "voter"}
//	response {"code", "error", "leader", "node", "index", "recorded"}
//
// An empty code is success; otherwise code is one of not_leader (leader
// names the leader's id when known), unknown_member, member_exists,
// bad_request, last_voter or failed, and error says why in words. The
// operations:
//
//	status    any node: "node" is {"id", "state", "term", "last_contact"
//	          (nanoseconds since it heard from a leader; 0 on the leader,
//	          -1 never), "applied", "client"}
//	member    leader: record the member id's raft, client and HTTP
//	          addresses (a request without "http" records none), and
//	          "batches": true when its lcd reads batch entries (lcd
//	          before them sends none, and is recorded as reading none);
//	          "recorded" is true when it wrote an entry for them, and
//	          "index" the position by which its log records them (that
//	          entry, or the last it applied when it held them already).
//	          The asking node asks again only once it has applied that
//	          far and its log still holds other addresses.
//	add       leader: add id at raft (a voter, or with voter false a
//	          nonvoter), recording client first when given
//	remove    leader: forget id's addresses and remove it
//	transfer  leader: hand the leadership to id, or with no id to the
//	          most up-to-date voter; answered once it is handed over
//
// A node asked to do a leader's operation while it does not lead answers
// not_leader; the asking node asks the leader it knows, until its
// deadline. Without Config.TLS the port has no authentication, like the
// raft RPCs beside it: keep it on a network only the nodes reach.
//
// # TLS
//
// With Config.TLS every connection of the raft port, raft's and control
// ones alike, starts with a TLS handshake in which both sides present a
// certificate and verify the other's (PeerTLS); the first byte that tells
// the protocols apart is then the first byte inside TLS. The dialling
// node checks that the certificate names the host of the raft address it
// dials (its advertised one, even when Config.Dial sends the connection
// elsewhere). A connection whose handshake fails is logged and closed.
//
// # Forwarding
//
// Forward is the mutex port's hook for a v1 request that reaches a
// follower: it dials the leader's client address and copies bytes both
// ways unchanged, passing on a clean close as a half-close and a reset as
// a reset, so that the v1 rules on how a client ends its connection hold
// through it. With Config.TLS it dials the leader's mutex port under TLS
// (PeerTLS.Leader); a half-close is then the socket's, under TLS. A node
// removed from its cluster forwards nothing: it answers '-' from the
// moment it knows of its removal.
package cluster
