package store

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/locking-center/locking-center/mutex"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultCompactMinSize is the default of Config.CompactMinSize: 1 MiB.
const DefaultCompactMinSize = 1 << 20

// compactFloor is the size in bytes from which a log that is at least
// twice the size of its snapshot is compacted below Config.CompactMinSize:
// at Open, and when it takes more room than is left on its volume.
const compactFloor = 64 << 10

// spareBlock is the room, in bytes, that the Log wants left on its volume
// beside two snapshots of its table: a block of a common file system. See
// lowOnSpace.
const spareBlock = 4 << 10

// Files beside the log, and the mode of the files the Log creates.
const (
	lockSuffix = ".lock"
	tmpSuffix  = ".tmp"
	filePerm   = 0o600
)

// maxGather bounds the wait of the writer for more changes; see gather.
const maxGather = 2 * time.Millisecond

// maxSpare bounds, in bytes, a batch buffer that the writer keeps for the
// next batch; a larger one (a reset of a big source) is dropped.
const maxSpare = 1 << 20

// defaultRecordSize is the guess of a snapshot record's size, in bytes,
// until a compaction has measured it: about a v1 holder's. stateRecordSize
// bounds the one state record.
const (
	defaultRecordSize = 100
	stateRecordSize   = 80
)

// Log attribute keys.
const (
	logPath      = "path"
	logDataPath  = "data_path"
	logError     = "error"
	logBytes     = "bytes"
	logFromBytes = "from_bytes"
	logKeys      = "held_keys"
	logChanges   = "changes"
	logOffset    = "offset"
	logTemp      = "temp"
	logTook      = "took"
	logFree      = "free_bytes"
	logMinSize   = "compact_min_size"
)

// Config configures a Log.
type Config struct {
	// Path is the log file (DATA_PATH). Its directory must exist; the file
	// is created when missing. If it exists it must be a regular file.
	// Symbolic links in it are resolved first: the ".lock" and ".tmp"
	// files are made beside the file it resolves to, and compaction renames
	// within that file's directory.
	Path string
	// CompactMinSize is the size in bytes from which the log is compacted
	// once it is twice the size of a snapshot of its table. Zero means
	// DefaultCompactMinSize (1 MiB). Below it the log is still compacted
	// at Open from 64 KiB on, when its volume runs low on space, and when
	// a write finds the volume full (see the package documentation,
	// Compaction and Write failures).
	CompactMinSize int64
	// Logger receives the log's messages; nil discards them.
	Logger *slog.Logger
	// Registerer receives locking_center_store_write_errors_total and
	// locking_center_store_compactions_total; nil registers neither.
	// Close unregisters them.
	Registerer prometheus.Registerer
	// FS holds the log's files; nil means the operating system's. Tests
	// supply one that fails on demand or that simulates a power loss.
	FS FS
}

// Validate reports a configuration that cannot work.
func (c Config) Validate() error {
	if c.Path == "" {
		return errors.New("store: path is empty")
	}
	if c.CompactMinSize < 0 {
		return errors.New("store: compact min size must not be negative")
	}
	return nil
}

// Stats counts what a Log has done since Open.
type Stats struct {
	Batches     uint64 // batches written and synced
	Changes     uint64 // commands in those batches
	Syncs       uint64 // fsyncs of the log and of its rewrites
	WriteErrors uint64 // commands that could not be written
	Compactions uint64 // rewrites of the log
}

// Log is the write-ahead log. It implements mutex.Journal: Append is safe
// for concurrent use and never blocks on I/O.
type Log struct {
	path, dir string
	minSize   int64
	fs        FS
	log       *slog.Logger
	reg       prometheus.Registerer // where the counters are registered, or nil
	lock      *os.File

	writeErrors prometheus.Counter
	compactions prometheus.Counter
	stats       struct{ batches, changes, syncs, writeErrors, compactions atomic.Uint64 }

	// The batch being filled, guarded by mu.
	mu      sync.Mutex
	cur     *batch
	buf     []byte
	changes []mutex.Command
	closed  bool

	wake chan struct{} // capacity 1: changes were appended
	quit chan struct{} // closed by Close
	done chan struct{} // closed when the writer has returned

	// Owned by the writer goroutine (and by Open before it starts).
	f            File
	size         int64           // bytes of the log, all synced
	mirror       *mutex.Table    // the table the synced log replays to
	recordSize   int64           // bytes a snapshot record takes, on average
	carry        []mutex.Command // commands of failed batches, to write first
	broken       error           // set: the file must be recovered before a write
	dirPending   bool            // a rename is not yet known to be on disk
	nextCompact  int64           // no compaction before the log reaches this size
	spaceCheck   int64           // no free-space check before the log reaches this size
	roomWait     bool            // a compaction found no room: none until the volume has it
	spareBuf     []byte
	spareChanges []mutex.Command
	lastBatch    int           // commands in the last batch
	lastCommit   time.Duration // how long its write and fsync took

	closeOnce sync.Once
	closeErr  error
}

// batch is the Pending of every change of one write.
type batch struct {
	done chan struct{}
	err  error
}

// Wait blocks until the batch is synced or failed. Errors wrap
// mutex.ErrJournal.
func (b *batch) Wait() error {
	<-b.done
	return b.err
}

// Done is closed once the batch is synced or failed.
func (b *batch) Done() <-chan struct{} { return b.done }

// failed is the Pending of a command that was refused before any write.
type failed struct{ err error }

func (p failed) Wait() error { return p.err }

func (p failed) Done() <-chan struct{} { return closedChan }

// closedChan is a closed channel, the Done of what is already over.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// journalError wraps err so that errors.Is(err, mutex.ErrJournal) holds.
func journalError(err error) error { return fmt.Errorf("%w: %w", mutex.ErrJournal, err) }

// Open opens the log at cfg.Path, creating it when missing, replays it and
// starts the writer. It returns the table the log replays to, for a
// mutex.Node to go on from (the Log keeps a copy of its own, for
// compaction). A torn tail is truncated; a log past the compaction
// threshold is compacted. Errors: ErrNotRegular or the error of resolving
// Path (both returned before anything is created), ErrLocked, a
// *CorruptError (errors.Is ErrCorrupt), or the error of a file operation
// or of the Registerer.
func Open(cfg Config) (*Log, *mutex.Table, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	path, err := resolvePath(cfg.Path)
	if err != nil {
		return nil, nil, err
	}
	l := &Log{
		path:       path,
		dir:        filepath.Dir(path),
		minSize:    cfg.CompactMinSize,
		fs:         cfg.FS,
		log:        cfg.Logger,
		mirror:     mutex.NewTable(),
		recordSize: defaultRecordSize,
		wake:       make(chan struct{}, 1),
		quit:       make(chan struct{}),
		done:       make(chan struct{}),
		writeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "locking_center_store_write_errors_total",
			Help: "Changes that could not be written to DATA_PATH since start-up.",
		}),
		compactions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "locking_center_store_compactions_total",
			Help: "Rewrites of the DATA_PATH log that dropped released keys, since start-up.",
		}),
	}
	if l.minSize == 0 {
		l.minSize = DefaultCompactMinSize
	}
	if l.fs == nil {
		l.fs = osFS{}
	}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	l.log = l.log.With(slog.String(logPath, l.path))
	if path != cfg.Path {
		l.log.Info("data path resolved", slog.String(logDataPath, cfg.Path))
	}
	if err := l.start(cfg.Registerer); err != nil {
		l.release()
		return nil, nil, err
	}
	table := l.mirror.Clone()
	go l.run()
	return l, table, nil
}

// start takes the lock, replays the log and registers the counters on reg
// (nil: nowhere).
func (l *Log) start(reg prometheus.Registerer) error {
	var err error
	if l.lock, err = lockFile(l.path + lockSuffix); err != nil {
		return err
	}
	tmp := l.path + tmpSuffix
	if err := l.fs.Remove(tmp); err == nil {
		l.log.Warn("removed a temp file left by an interrupted compaction", slog.String(logTemp, tmp))
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("store: remove stale temp file: %w", err)
	}
	if err := l.openLog(); err != nil {
		return err
	}
	began := time.Now()
	fi, err := l.f.Stat()
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if err := checkRegular(l.path, fi); err != nil {
		return err // replaced since resolvePath looked at it
	}
	end, err := scan(l.f, fi.Size(), newReplayer(l.mirror).apply)
	if err != nil {
		var ce *CorruptError
		if errors.As(err, &ce) {
			ce.Path = l.path
			return ce
		}
		return fmt.Errorf("store: read %s: %w", l.path, err)
	}
	if end < fi.Size() {
		if err := l.f.Truncate(end); err != nil {
			return fmt.Errorf("store: drop torn tail: %w", err)
		}
		if err := l.f.Sync(); err != nil {
			return fmt.Errorf("store: drop torn tail: fsync %s: %w", l.path, err)
		}
		l.log.Warn("dropped a torn tail left by a crash: those changes were never acknowledged",
			slog.Int64(logOffset, end), slog.Int64(logBytes, fi.Size()-end))
	}
	l.size = end
	l.mirror.ResetCounters()
	l.log.Info("write-ahead log replayed", slog.Int(logKeys, l.mirror.Len()),
		slog.Int64(logBytes, end), slog.Duration(logTook, time.Since(began)))
	if reg != nil {
		if err := reg.Register(l.writeErrors); err != nil {
			return fmt.Errorf("store: register metrics: %w", err)
		}
		if err := reg.Register(l.compactions); err != nil {
			reg.Unregister(l.writeErrors)
			return fmt.Errorf("store: register metrics: %w", err)
		}
		l.reg = reg
	}
	l.maybeCompact(min(l.minSize, compactFloor))
	if free, err := l.fs.Free(l.dir); err == nil && free < l.minSize {
		l.log.Warn("the volume of the write-ahead log has less free space than the log's compaction threshold: "+
			"the log is compacted whenever the volume runs low, and changes fail while it is full",
			slog.Int64(logFree, free), slog.Int64(logMinSize, l.minSize))
	}
	return nil
}

// openLog opens the log file, creating it when missing; a new file's
// directory entry is synced before anything is written to it.
func (l *Log) openLog() error {
	f, err := l.fs.OpenFile(l.path, os.O_RDWR|os.O_CREATE|os.O_EXCL, filePerm)
	if err == nil {
		l.f = f
		if err := l.syncDir(); err != nil {
			return fmt.Errorf("store: create %s: fsync directory: %w", l.path, err)
		}
		return nil
	}
	if !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("store: create log: %w", err)
	}
	if l.f, err = l.fs.OpenFile(l.path, os.O_RDWR, filePerm); err != nil {
		return fmt.Errorf("store: open log: %w", err)
	}
	return nil
}

// release closes what start opened, after a failed start or at Close.
func (l *Log) release() error {
	var err error
	if l.f != nil {
		err = l.f.Close()
	}
	if l.reg != nil {
		l.reg.Unregister(l.writeErrors)
		l.reg.Unregister(l.compactions)
	}
	if l.lock != nil {
		unlockFile(l.lock)
	}
	return err
}

// Append queues c for the next write and returns its Pending. It does no
// I/O; it only encodes c into the batch being filled. The Pending returns
// nil once c and every command appended before it are synced, or an error
// wrapping mutex.ErrJournal (and ErrClosed, ErrTooLarge or the write's
// error) when c could not be written.
func (l *Log) Append(c *mutex.Command) mutex.Pending {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		l.countWriteErrors(1)
		return failed{journalError(ErrClosed)}
	}
	start := len(l.buf)
	l.buf = appendRecord(l.buf, c)
	if len(l.buf)-start-HeaderLen > MaxPayload {
		l.buf = l.buf[:start]
		l.countWriteErrors(1)
		return failed{journalError(fmt.Errorf("%w: key %q", ErrTooLarge, c.Key))}
	}
	l.changes = append(l.changes, *c)
	if l.cur == nil {
		l.cur = &batch{done: make(chan struct{})}
	}
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return l.cur
}

func (l *Log) countWriteErrors(n int) {
	l.writeErrors.Add(float64(n))
	l.stats.writeErrors.Add(uint64(n))
}

// Stats returns the counters of the Log.
func (l *Log) Stats() Stats {
	return Stats{
		Batches:     l.stats.batches.Load(),
		Changes:     l.stats.changes.Load(),
		Syncs:       l.stats.syncs.Load(),
		WriteErrors: l.stats.writeErrors.Load(),
		Compactions: l.stats.compactions.Load(),
	}
}

// Close writes the changes already appended, stops the writer, closes the
// file and releases the lock. Changes appended later fail with ErrClosed.
// It is safe to call more than once; later calls return the first result.
func (l *Log) Close() error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		close(l.quit)
		<-l.done
		l.closeErr = l.release()
	})
	return l.closeErr
}

// run is the writer goroutine: it writes one batch at a time until Close.
func (l *Log) run() {
	defer close(l.done)
	for {
		select {
		case <-l.wake:
			l.gather()
			l.flush()
		case <-l.quit:
			l.flush() // Close has refused new changes: this is the last batch
			return
		}
	}
}

// gather lets the batch being filled grow before it is written, when the
// last batch showed that changes arrive concurrently. It waits while
// changes keep coming: it stops when none has come for twice the mean gap
// between the changes of the last batch, or when it has waited as long as
// the last write and fsync took (at most maxGather). A lone client
// (batches of one) never waits; with many clients and a fast disk each
// fsync carries about twice the changes; with a slow disk, where every
// client is already waiting in the batch, it stops after one short gap.
func (l *Log) gather() {
	l.mu.Lock()
	empty := l.cur == nil
	l.mu.Unlock()
	if empty || l.lastBatch < 2 {
		return
	}
	deadline := time.NewTimer(min(l.lastCommit, maxGather))
	defer deadline.Stop()
	gap := 2 * l.lastCommit / time.Duration(l.lastBatch)
	idle := time.NewTimer(gap)
	defer idle.Stop()
	for {
		select {
		case <-l.wake:
			idle.Reset(gap)
		case <-idle.C:
			return
		case <-deadline.C:
			return
		case <-l.quit:
			return
		}
	}
}

// flush takes the batch being filled, writes and syncs it, and completes
// its Pending.
func (l *Log) flush() {
	l.mu.Lock()
	b, data, changes := l.cur, l.buf, l.changes
	if b == nil {
		l.mu.Unlock()
		return
	}
	l.cur, l.buf, l.changes = nil, l.spareBuf, l.spareChanges
	l.mu.Unlock()
	l.spareBuf, l.spareChanges = nil, nil
	began := time.Now()
	err := l.commit(data, changes)
	l.lastBatch, l.lastCommit = len(changes), time.Since(began)
	if err != nil {
		l.countWriteErrors(len(changes))
		b.err = journalError(err)
		l.log.Error("changes not written to the write-ahead log", slog.Int(logChanges, len(changes)),
			slog.Any(logError, err))
	}
	close(b.done)
	clear(changes) // drop the references to keys and sources
	if cap(data) <= maxSpare {
		l.spareBuf, l.spareChanges = data[:0], changes[:0]
	}
}

// commit writes and syncs data, the records of changes, after the
// commands carried from failed batches, and applies them to the mirror. A
// failed write leaves the file to be recovered and carries the batch on,
// unless the file holds the batch all the same (see afterWriteFailure).
func (l *Log) commit(data []byte, changes []mutex.Command) error {
	if len(l.carry) > 0 {
		var pre []byte
		for i := range l.carry {
			pre = appendRecord(pre, &l.carry[i])
		}
		data = append(pre, data...)
		changes = append(l.carry, changes...)
	}
	err := l.broken
	if err != nil {
		err = l.recover()
	}
	written := false
	if err == nil {
		if err = l.writeSync(data); err == nil {
			written = true
			applyAll(l.mirror, changes)
		} else {
			written, err = l.afterWriteFailure(changes, err)
		}
	}
	if !written {
		l.carry = slices.Clone(changes)
		return err
	}
	l.carry = nil
	if err != nil {
		return err
	}
	l.stats.batches.Add(1)
	l.stats.changes.Add(uint64(len(changes)))
	l.maybeCompact(l.minSize)
	return nil
}

// applyAll applies cmds to t, in order, and drops their events.
func applyAll(t *mutex.Table, cmds []mutex.Command) {
	for i := range cmds {
		t.Apply(&cmds[i])
		t.TakeEvents()
	}
}

// afterWriteFailure puts the file back into a known state after the write
// or fsync of a batch, whose commands are changes (carried ones first),
// failed with err. When err says the volume is full, it then rewrites the
// log from a copy of the mirror with changes applied: the snapshot of the
// table after the batch, the smallest file that holds it. It reports
// whether the file now holds the batch, and the batch's error: nil when
// the rewrite made it durable; the rewrite's error when the rewrite was
// renamed into place but its directory could not be synced (the Log is
// then broken, see Write failures); err otherwise.
func (l *Log) afterWriteFailure(changes []mutex.Command, err error) (bool, error) {
	l.broken = err
	if rerr := l.recover(); rerr != nil {
		l.log.Error("write-ahead log not recovered; changes fail until it is", slog.Any(logError, rerr))
		return false, err
	}
	if !isNoSpace(err) {
		return false, err
	}
	next := l.mirror.Clone()
	applyAll(next, changes)
	if cerr := l.compact(next, "to make room on a full volume"); cerr != nil {
		if l.mirror == next {
			return true, cerr
		}
		return false, err
	}
	return true, nil
}

// writeSync appends data at the end of the log and fsyncs it.
func (l *Log) writeSync(data []byte) error {
	if _, err := l.f.WriteAt(data, l.size); err != nil {
		return fmt.Errorf("store: write %s: %w", l.path, err)
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("store: fsync %s: %w", l.path, err)
	}
	l.stats.syncs.Add(1)
	l.size += int64(len(data))
	return nil
}

// recover puts the log back into a known state after a failed write: the
// synced prefix, by truncation, or else a rewrite of the held keys. It
// clears l.broken on success.
func (l *Log) recover() error {
	err := l.f.Truncate(l.size)
	if err == nil {
		err = l.f.Sync()
	}
	if err == nil && l.dirPending {
		err = l.syncDir()
	}
	if err == nil {
		l.stats.syncs.Add(1)
		l.broken, l.dirPending = nil, false
		l.log.Info("write-ahead log truncated back to its last synced batch", slog.Int64(logBytes, l.size))
		return nil
	}
	l.log.Warn("truncating the write-ahead log failed; rewriting it", slog.Any(logError, err))
	if err := l.rewrite(l.mirror); err != nil {
		return err
	}
	l.broken = nil
	return nil
}

// snapshotSize estimates the bytes a snapshot of the mirror would take.
func (l *Log) snapshotSize() int64 {
	return stateRecordSize + int64(l.mirror.Records()-1)*l.recordSize
}

// maybeCompact rewrites the log when it is at least twice the size a
// snapshot of its table would take and either has reached minSize or
// its volume runs low on space. A failed compaction leaves the old log in
// use. It is tried again once the log has grown by the minimum size; one
// that failed for lack of space, as soon as the volume has room for it.
func (l *Log) maybeCompact(minSize int64) {
	if l.size < 2*l.snapshotSize() || l.size < l.nextCompact || l.roomWait && !l.roomForRewrite() {
		return
	}
	if l.size < minSize && !l.lowOnSpace() {
		return
	}
	if err := l.compact(l.mirror, ""); err != nil {
		if l.roomWait = isNoSpace(err); !l.roomWait {
			l.nextCompact = l.size + l.minSize
		}
	}
}

// roomForRewrite reports whether the volume has room for a snapshot of
// the mirror, in whole blocks, or cannot tell.
func (l *Log) roomForRewrite() bool {
	free, err := l.fs.Free(l.dir)
	return err != nil || free >= (l.snapshotSize()+spareBlock-1)/spareBlock*spareBlock
}

// compact rewrites the log from t and logs the outcome, with why after
// what it did. A failed directory fsync after the rename breaks the Log
// (see Write failures).
func (l *Log) compact(t *mutex.Table, why string) error {
	before := l.size
	if err := l.rewrite(t); err != nil {
		if l.dirPending {
			l.broken = err
		}
		l.log.Warn(strings.TrimSpace("write-ahead log compaction failed "+why), slog.Any(logError, err))
		return err
	}
	l.log.Info(strings.TrimSpace("write-ahead log compacted "+why), slog.Int64(logFromBytes, before),
		slog.Int64(logBytes, l.size), slog.Int(logKeys, l.mirror.Len()))
	return nil
}

// lowOnSpace reports whether the volume of the log runs low on space: the
// log, from compactFloor on, takes more room than is left, or what is
// left would not hold two snapshots of its table and a block. Past either
// point the volume could fill up before the log reaches its threshold,
// and then no compaction could run, since a rewrite needs room for a
// snapshot beside the old log. The file system is asked only when the log
// may have crossed a point since the last answer: growing by a quarter of
// the room that answer left before the nearer one cannot (a snapshot
// grows by about a record when the log does, so the second point comes
// no more than three times as fast).
func (l *Log) lowOnSpace() bool {
	if l.size < l.spaceCheck {
		return false
	}
	free, err := l.fs.Free(l.dir)
	if err != nil {
		l.spaceCheck = l.size + l.minSize // the file system cannot tell now
		return false
	}
	room := free - 2*l.snapshotSize() - spareBlock
	if l.size >= compactFloor {
		room = min(room, free-l.size)
	}
	if room < 0 {
		return true
	}
	l.spaceCheck = l.size + max(room/4, 1)
	return false
}

// rewrite writes a snapshot of t to Path+".tmp", fsyncs it, renames it
// over the log and fsyncs the directory; the Log then appends to the new
// file, and t, which that file replays to, is its mirror. Before the
// rename a failure leaves the old log and the mirror in use. A failed
// directory fsync after it sets dirPending and returns the error.
func (l *Log) rewrite(t *mutex.Table) error {
	tmp := l.path + tmpSuffix
	f, err := l.fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, filePerm)
	if err != nil {
		return fmt.Errorf("store: compact: %w", err)
	}
	size, records, err := writeSnapshot(f, t)
	if err == nil {
		if err = f.Sync(); err == nil {
			l.stats.syncs.Add(1)
			err = l.fs.Rename(tmp, l.path)
		}
	}
	if err != nil {
		f.Close()
		l.fs.Remove(tmp)
		return fmt.Errorf("store: compact %s: %w", l.path, err)
	}
	old := l.f
	l.f, l.size, l.mirror, l.nextCompact, l.spaceCheck, l.roomWait = f, size, t, 0, 0, false
	if records > 1 {
		l.recordSize = max((size-stateRecordSize)/int64(records-1), 1)
	}
	if err := old.Close(); err != nil {
		l.log.Warn("closing the log replaced by compaction", slog.Any(logError, err))
	}
	l.compactions.Inc()
	l.stats.compactions.Add(1)
	if err := l.syncDir(); err != nil {
		l.dirPending = true
		return fmt.Errorf("store: compact %s: fsync directory: %w", l.path, err)
	}
	return nil
}

// writeSnapshot writes the state of t as snapshot records to f from
// offset 0 and returns the bytes and the records written.
func writeSnapshot(f File, t *mutex.Table) (int64, int, error) {
	buf := make([]byte, 0, maxSpare+4<<10)
	var off int64
	var werr error
	records := 0
	put := func() {
		if werr == nil {
			_, werr = f.WriteAt(buf, off)
		}
		off += int64(len(buf))
		buf = buf[:0]
	}
	t.Export(func(r *mutex.Record) {
		buf = appendStateRecord(buf, r)
		records++
		if len(buf) >= maxSpare {
			put()
		}
	})
	put()
	if werr != nil {
		return 0, 0, werr
	}
	return off, records, nil
}
