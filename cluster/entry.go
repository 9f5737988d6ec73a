package cluster

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/locking-center/locking-center/mutex"
	"github.com/locking-center/locking-center/store"
)

// The kinds of entry this package writes to the raft log; see doc.go.
const (
	entryCommand byte = 1
	entryMember  byte = 2
	entryForget  byte = 3
	entryBatch   byte = 4
)

// errEntry: an entry that is not one this package wrote.
var errEntry = errors.New("cluster: bad log entry")

// entry is one decoded entry.
type entry struct {
	kind   byte
	cmd    mutex.Command   // entryCommand
	cmds   []mutex.Command // entryBatch, in their order
	member Peer
}

// entryCap is the room a new command entry starts with, in bytes: an
// acquire of a session with a key of 16 bytes takes about 200, so most
// entries are written without the buffer growing.
const entryCap = 256

// commandEntry returns the entry of c in a buffer of its own.
func commandEntry(c *mutex.Command) []byte {
	return appendCommandEntry(make([]byte, 0, entryCap), c)
}

// appendCommandEntry appends the entry of c to b.
func appendCommandEntry(b []byte, c *mutex.Command) []byte {
	b = append(b, entryCommand)
	b = binary.AppendUvarint(b, c.Proposer)
	b = binary.AppendUvarint(b, c.Proposal)
	return store.AppendCommand(b, c)
}

// memberJSON is a member entry's payload.
// HTTP is absent from the records of lcd before the HTTP address was
// recorded: those decode with HTTPAddress "".
type memberJSON struct {
	ID     string `json:"id"`
	Raft   string `json:"raft"`
	Client string `json:"client"`
	HTTP   string `json:"http,omitempty"`
	// Batches is absent from the records of lcd before batch entries.
	Batches bool `json:"batches,omitempty"`
}

// toJSON returns p's record.
func (p Peer) toJSON() memberJSON {
	return memberJSON{ID: p.ID, Raft: p.RaftAddress, Client: p.ClientAddress, HTTP: p.HTTPAddress, Batches: p.Batches}
}

// peer returns the peer m records.
func (m memberJSON) peer() Peer {
	return Peer{ID: m.ID, RaftAddress: m.Raft, ClientAddress: m.Client, HTTPAddress: m.HTTP, Batches: m.Batches}
}

// memberEntry returns the entry that records p.
func memberEntry(p Peer) []byte {
	b, _ := json.Marshal(p.toJSON())
	return append([]byte{entryMember}, b...)
}

// forgetEntry returns the entry that forgets the member of id.
func forgetEntry(id string) []byte {
	b, _ := json.Marshal(memberJSON{ID: id})
	return append([]byte{entryForget}, b...)
}

// decodeEntry decodes an entry. Errors: errEntry, wrapping the reason.
func decodeEntry(b []byte) (entry, error) {
	if len(b) == 0 {
		return entry{}, fmt.Errorf("%w: empty", errEntry)
	}
	switch b[0] {
	case entryCommand:
		c, err := decodeCommand(b[1:])
		if err != nil {
			return entry{}, err
		}
		return entry{kind: entryCommand, cmd: c}, nil
	case entryBatch:
		cmds, err := decodeBatch(b[1:])
		if err != nil {
			return entry{}, err
		}
		return entry{kind: entryBatch, cmds: cmds}, nil
	case entryMember, entryForget:
		var m memberJSON
		if err := json.Unmarshal(b[1:], &m); err != nil || m.ID == "" {
			return entry{}, fmt.Errorf("%w: member: %v", errEntry, err)
		}
		return entry{kind: b[0], member: m.peer()}, nil
	}
	return entry{}, fmt.Errorf("%w: kind %d", errEntry, b[0])
}

// decodeCommand decodes a command entry after its kind byte. Errors:
// errEntry, wrapping the reason.
func decodeCommand(b []byte) (mutex.Command, error) {
	proposer, n := binary.Uvarint(b)
	if n <= 0 {
		return mutex.Command{}, fmt.Errorf("%w: proposer", errEntry)
	}
	b = b[n:]
	proposal, n := binary.Uvarint(b)
	if n <= 0 {
		return mutex.Command{}, fmt.Errorf("%w: proposal", errEntry)
	}
	c, err := store.DecodeCommand(b[n:])
	if err != nil {
		return mutex.Command{}, fmt.Errorf("%w: %w", errEntry, err)
	}
	c.Proposer, c.Proposal = proposer, proposal
	return c, nil
}

// minCommandEntry is the least a command entry takes, in bytes: its
// kind, proposer and proposal, and a record's header and payload.
const minCommandEntry = 3 + store.HeaderLen + 2

// decodeBatch decodes a batch entry after its kind byte: uvarint count,
// count uvarint lengths, then that many command entries of those lengths,
// back to back, with nothing after them. Errors: errEntry, wrapping the
// reason.
func decodeBatch(b []byte) ([]mutex.Command, error) {
	count, n := binary.Uvarint(b)
	if n <= 0 || count < 2 || count > uint64(len(b))/minCommandEntry {
		return nil, fmt.Errorf("%w: batch count", errEntry)
	}
	b = b[n:]
	lens := make([]uint64, count)
	total := uint64(0)
	for i := range lens {
		l, n := binary.Uvarint(b)
		if n <= 0 || l == 0 || l > uint64(len(b)) {
			return nil, fmt.Errorf("%w: batch length %d", errEntry, i)
		}
		lens[i], total = l, total+l
		b = b[n:]
	}
	if total != uint64(len(b)) {
		return nil, fmt.Errorf("%w: batch of %d bytes, %d given", errEntry, total, len(b))
	}
	cmds := make([]mutex.Command, count)
	for i, l := range lens {
		if b[0] != entryCommand {
			return nil, fmt.Errorf("%w: batch command %d of kind %d", errEntry, i, b[0])
		}
		c, err := decodeCommand(b[1:l])
		if err != nil {
			return nil, fmt.Errorf("batch command %d: %w", i, err)
		}
		cmds[i] = c
		b = b[l:]
	}
	return cmds, nil
}

// snapshotFormat is the version of the snapshot header.
const snapshotFormat = 1

// maxHeader bounds a snapshot header, in bytes.
const maxHeader = 16 << 20

// snapshotHeader leads a snapshot: the position of the last entry it
// holds, the members the log had recorded by then, and the size of the
// table's records that follow.
type snapshotHeader struct {
	Format  int          `json:"format"`
	Index   uint64       `json:"index"`
	Members []memberJSON `json:"members"`
	Bytes   int64        `json:"bytes"`
}

// writeHeader writes h as a 4-byte big-endian length and its JSON.
func writeHeader(w io.Writer, h *snapshotHeader) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	b = append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
	_, err = w.Write(b)
	return err
}

// readHeader reads what writeHeader wrote. Errors: store.ErrBadSnapshot,
// wrapping the reason, or r's.
func readHeader(r io.Reader) (snapshotHeader, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return snapshotHeader{}, fmt.Errorf("%w: header: %w", store.ErrBadSnapshot, err)
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxHeader {
		return snapshotHeader{}, fmt.Errorf("%w: header of %d bytes", store.ErrBadSnapshot, size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return snapshotHeader{}, fmt.Errorf("%w: header: %w", store.ErrBadSnapshot, err)
	}
	var h snapshotHeader
	if err := json.Unmarshal(b, &h); err != nil {
		return snapshotHeader{}, fmt.Errorf("%w: header: %w", store.ErrBadSnapshot, err)
	}
	if h.Format != snapshotFormat {
		return snapshotHeader{}, fmt.Errorf("%w: format %d, want %d", store.ErrBadSnapshot, h.Format, snapshotFormat)
	}
	return h, nil
}
