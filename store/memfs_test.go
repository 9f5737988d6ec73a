package store

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// memBlock is the block size of a memFS in bytes: a file takes its space
// in whole blocks, as a file on a tmpfs takes whole pages.
const memBlock = 4096

// sector is the unit a disk writes whole or not at all, in bytes: a power
// loss tears a write only at a multiple of it.
const sector = 512

// errPowerLost is what every file operation returns once the power of a
// memFS has been cut.
var errPowerLost = errors.New("power lost")

// memFS is an FS in memory: a few directories of files on one volume of a
// fixed capacity. A write that needs more blocks than the volume has left
// writes what fits and fails with ENOSPC, as write(2) does.
//
// It also remembers what a disk would have kept, for a simulated power
// loss: each file's bytes as of its last completed fsync and the writes
// and truncations since, and each directory's entries as of its last fsync
// and the creations, renames and removals since. The power is cut at the
// file operation numbered by cutAfter; afterPowerLoss then builds the file
// system that a disk could hold after it. It is safe for concurrent use.
type memFS struct {
	mu       sync.Mutex
	capacity int64                        // bytes; 0 means unlimited
	dirs     map[string]map[string]*inode // directory -> name -> file
	inodes   map[*inode]bool              // files that take space: linked or open

	synced  map[string]map[string]*inode // directory -> entries as of its last fsync
	pending map[string][]dirOp           // directory -> entry changes since, in order

	ops   int           // operations counted so far
	cutAt int           // the operation that the power fails in; 0: none
	cutOp string        // that operation, once it came
	lost  chan struct{} // closed when the power fails
}

// inode is a file of a memFS.
type inode struct {
	data    []byte   // what reads return
	synced  []byte   // the bytes as of the last completed fsync
	pending []fileOp // writes and truncations since, in order
	links   int      // names it has
	open    int      // handles open on it
}

// fileOp is a write of data at off, or a truncation to size.
type fileOp struct {
	off   int64
	data  []byte
	trunc bool
	size  int64
}

// dirOp is a change of one directory entry: name now names ino (nil:
// removed), and from, when set, no longer names anything (a rename).
type dirOp struct {
	name, from string
	ino        *inode
}

// newMemFS returns an empty memFS of capacity bytes (0: unlimited) with
// the directories dirs.
func newMemFS(capacity int64, dirs ...string) *memFS {
	m := &memFS{
		capacity: capacity,
		dirs:     make(map[string]map[string]*inode),
		inodes:   make(map[*inode]bool),
		synced:   make(map[string]map[string]*inode),
		pending:  make(map[string][]dirOp),
		lost:     make(chan struct{}),
	}
	for _, d := range dirs {
		m.dirs[d] = make(map[string]*inode)
		m.synced[d] = make(map[string]*inode)
	}
	return m
}

var _ FS = (*memFS)(nil)

func blocks(n int64) int64 { return (n + memBlock - 1) / memBlock * memBlock }

// cutAfter makes the power fail in the n-th file operation from now: an
// open, write, fsync, truncation, rename or removal (reads, stats and
// closes do not count). That operation takes effect as far as a power loss
// lets it (afterPowerLoss decides how far), then fails; every later one
// fails without effect.
func (m *memFS) cutAfter(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cutAt = m.ops + n
}

// powerLost is closed once the power has failed.
func (m *memFS) powerLost() <-chan struct{} { return m.lost }

// isLost reports whether the power has failed.
func (m *memFS) isLost() bool {
	select {
	case <-m.lost:
		return true
	default:
		return false
	}
}

// step counts an operation, what, before it starts; m.mu is held. It
// fails once the power is lost; last reports that the power fails in this
// one.
func (m *memFS) step(what string) (last bool, err error) {
	if m.isLost() {
		return false, errPowerLost
	}
	m.ops++
	if m.ops != m.cutAt {
		return false, nil
	}
	m.cutOp = what
	close(m.lost)
	return true, nil
}

// stepErr returns err, or errPowerLost when the power failed in this
// operation.
func stepErr(last bool, err error) error {
	if last {
		return errPowerLost
	}
	return err
}

// opName names an operation on path by its kind and the file's base name
// ("dir" for a directory), for the tally of where the power failed.
func (m *memFS) opName(op, path string) string {
	if _, ok := m.dirs[path]; ok {
		return op + " dir"
	}
	return op + " " + filepath.Base(path)
}

// fileOpName names an operation on the file of f by its kind and the
// name the file has now (a compacted log is opened as the temp file and
// renamed); m.mu is held.
func (m *memFS) fileOpName(op string, f *memFile) string {
	if f.ino != nil {
		for _, dir := range m.dirs {
			for name, ino := range dir {
				if ino == f.ino {
					return op + " " + name
				}
			}
		}
	}
	return m.opName(op, f.name)
}

// free returns the bytes left on the volume; m.mu is held.
func (m *memFS) free() int64 {
	if m.capacity == 0 {
		return 1 << 50
	}
	used := int64(0)
	for ino := range m.inodes {
		used += blocks(int64(len(ino.data)))
	}
	return m.capacity - used
}

// lookup splits name into its directory and base name; m.mu is held.
func (m *memFS) lookup(op, name string) (map[string]*inode, string, error) {
	dir, ok := m.dirs[filepath.Dir(name)]
	if !ok {
		return nil, "", &os.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
	}
	return dir, filepath.Base(name), nil
}

// setEntry makes name in dir name ino (nil: nothing), after from stops
// naming it (a rename), and records the change; m.mu is held.
func (m *memFS) setEntry(dirPath, name, from string, ino *inode) {
	dir := m.dirs[dirPath]
	if from != "" {
		delete(dir, from)
	}
	if old, ok := dir[name]; ok && old != ino {
		m.unlink(old)
		delete(dir, name)
	}
	if ino != nil {
		dir[name] = ino
	}
	m.pending[dirPath] = append(m.pending[dirPath], dirOp{name: name, from: from, ino: ino})
}

// unlink drops a name of ino; m.mu is held.
func (m *memFS) unlink(ino *inode) {
	ino.links--
	if ino.links == 0 && ino.open == 0 {
		delete(m.inodes, ino)
	}
}

func (m *memFS) Free(dir string) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.isLost() {
		return 0, errPowerLost
	}
	if _, ok := m.dirs[dir]; !ok {
		return 0, &os.PathError{Op: "statfs", Path: dir, Err: fs.ErrNotExist}
	}
	return m.free(), nil
}

func (m *memFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	last, err := m.step(m.opName("open", name))
	if err != nil {
		return nil, err
	}
	f, err := m.open(name, flag)
	if last {
		if f != nil {
			f.close()
		}
		return nil, errPowerLost
	}
	return f, err
}

// open is OpenFile once counted; m.mu is held.
func (m *memFS) open(name string, flag int) (*memFile, error) {
	if _, ok := m.dirs[name]; ok {
		return &memFile{m: m, name: name, dir: true}, nil
	}
	dir, base, err := m.lookup("open", name)
	if err != nil {
		return nil, err
	}
	ino, ok := dir[base]
	switch {
	case ok && flag&(os.O_CREATE|os.O_EXCL) == os.O_CREATE|os.O_EXCL:
		return nil, &os.PathError{Op: "open", Path: name, Err: fs.ErrExist}
	case !ok && flag&os.O_CREATE == 0:
		return nil, &os.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	case !ok:
		ino = &inode{links: 1}
		m.inodes[ino] = true
		m.setEntry(filepath.Dir(name), base, "", ino)
	case flag&os.O_TRUNC != 0:
		ino.data = nil
		ino.pending = append(ino.pending, fileOp{trunc: true})
	}
	ino.open++
	return &memFile{m: m, ino: ino, name: name}, nil
}

func (m *memFS) Rename(oldpath, newpath string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	last, err := m.step(m.opName("rename", oldpath))
	if err != nil {
		return err
	}
	return stepErr(last, m.rename(oldpath, newpath))
}

func (m *memFS) rename(oldpath, newpath string) error {
	dir, oldBase, err := m.lookup("rename", oldpath)
	if err != nil {
		return err
	}
	if filepath.Dir(oldpath) != filepath.Dir(newpath) {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: syscall.EXDEV}
	}
	ino, ok := dir[oldBase]
	if !ok {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: fs.ErrNotExist}
	}
	m.setEntry(filepath.Dir(newpath), filepath.Base(newpath), oldBase, ino)
	return nil
}

func (m *memFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	last, err := m.step(m.opName("remove", name))
	if err != nil {
		return err
	}
	return stepErr(last, m.remove(name))
}

func (m *memFS) remove(name string) error {
	dir, base, err := m.lookup("remove", name)
	if err != nil {
		return err
	}
	if _, ok := dir[base]; !ok {
		return &os.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	m.setEntry(filepath.Dir(name), base, "", nil)
	return nil
}

// memFile is an open file, or directory, of a memFS.
type memFile struct {
	m      *memFS
	ino    *inode // nil for a directory
	name   string
	dir    bool
	closed bool
}

// check fails a call on a closed file, or a file call on a directory;
// m.mu is held.
func (f *memFile) check(op string) error {
	if f.closed {
		return &os.PathError{Op: op, Path: f.name, Err: os.ErrClosed}
	}
	if f.dir && op != "sync" && op != "stat" {
		return &os.PathError{Op: op, Path: f.name, Err: syscall.EISDIR}
	}
	return nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.m.isLost() {
		return 0, errPowerLost
	}
	if err := f.check("read"); err != nil {
		return 0, err
	}
	if off >= int64(len(f.ino.data)) {
		return 0, io.EOF
	}
	n := copy(p, f.ino.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	last, err := f.m.step(f.m.fileOpName("write", f))
	if err != nil {
		return 0, err
	}
	if err := f.check("write"); err != nil {
		return 0, stepErr(last, err)
	}
	size := int64(len(f.ino.data))
	room := blocks(size) + f.m.free() // the file may grow up to this size
	n := int64(len(p))
	if off+n > room {
		n = max(room-off, 0)
	}
	if n > 0 {
		f.ino.data = writeAt(f.ino.data, p[:n], off)
		f.ino.pending = append(f.ino.pending, fileOp{off: off, data: slices.Clone(p[:n])})
	}
	if n < int64(len(p)) {
		return int(n), stepErr(last, &os.PathError{Op: "write", Path: f.name, Err: syscall.ENOSPC})
	}
	return int(n), stepErr(last, nil)
}

// writeAt returns data with p written at off, grown with zeros as needed.
func writeAt(data, p []byte, off int64) []byte {
	data = grow(data, off+int64(len(p)))
	copy(data[off:], p)
	return data
}

// grow returns data grown with zeros to at least size bytes.
func grow(data []byte, size int64) []byte {
	if size > int64(len(data)) {
		data = append(data, make([]byte, size-int64(len(data)))...)
	}
	return data
}

// Sync makes the file's bytes durable; on a directory, its entries.
func (f *memFile) Sync() error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	last, err := f.m.step(f.m.fileOpName("sync", f))
	if err != nil {
		return err
	}
	if err := f.check("sync"); err != nil || last {
		return stepErr(last, err) // an fsync the power cut did not complete
	}
	if f.dir {
		f.m.synced[f.name] = copyDir(f.m.dirs[f.name])
		f.m.pending[f.name] = nil
		return nil
	}
	f.ino.synced = slices.Clone(f.ino.data)
	f.ino.pending = nil
	return nil
}

// copyDir returns a copy of the entries of a directory.
func copyDir(dir map[string]*inode) map[string]*inode {
	out := make(map[string]*inode, len(dir))
	for k, v := range dir {
		out[k] = v
	}
	return out
}

func (f *memFile) Truncate(size int64) error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	last, err := f.m.step(f.m.fileOpName("truncate", f))
	if err != nil {
		return err
	}
	if err := f.check("truncate"); err != nil {
		return stepErr(last, err)
	}
	f.ino.data = truncated(f.ino.data, size)
	f.ino.pending = append(f.ino.pending, fileOp{trunc: true, size: size})
	return stepErr(last, nil)
}

// truncated returns data cut, or grown with zeros, to size bytes.
func truncated(data []byte, size int64) []byte {
	if size <= int64(len(data)) {
		return data[:size:size]
	}
	return grow(data, size)
}

func (f *memFile) Stat() (os.FileInfo, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.m.isLost() {
		return nil, errPowerLost
	}
	if err := f.check("stat"); err != nil {
		return nil, err
	}
	fi := memInfo{name: filepath.Base(f.name), mode: filePerm}
	if f.dir {
		fi.mode = fs.ModeDir | 0o700
	} else {
		fi.size = int64(len(f.ino.data))
	}
	return fi, nil
}

// Close closes the file, also after a power loss, so that its space is
// counted right.
func (f *memFile) Close() error {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if f.closed {
		return &os.PathError{Op: "close", Path: f.name, Err: os.ErrClosed}
	}
	f.close()
	return nil
}

// close closes f; m.mu is held.
func (f *memFile) close() {
	f.closed = true
	if f.ino != nil {
		f.ino.open--
		if f.ino.links == 0 && f.ino.open == 0 {
			delete(f.m.inodes, f.ino)
		}
	}
}

// memInfo is the os.FileInfo of a memFile.
type memInfo struct {
	name string
	size int64
	mode fs.FileMode
}

func (fi memInfo) Name() string       { return fi.name }
func (fi memInfo) Size() int64        { return fi.size }
func (fi memInfo) Mode() fs.FileMode  { return fi.mode }
func (fi memInfo) ModTime() time.Time { return time.Time{} }
func (fi memInfo) IsDir() bool        { return fi.mode.IsDir() }
func (fi memInfo) Sys() any           { return nil }

// afterPowerLoss cuts the power, if it has not failed yet, and returns the
// file system that the disk holds afterwards, with the power on and
// everything on it synced, and a description of what survived. seed
// decides every choice, per directory and per file by its name, so that a
// seed makes the same choices again when the load before the cut differs
// only in its timing.
//
// What survives of a directory is its entries as of its last fsync, then
// a prefix of the changes since: a file created, renamed or removed
// without a directory fsync after it may be lost. What survives of a file
// that those entries name is described at tornImage. Files that no entry
// names are gone.
func (m *memFS) afterPowerLoss(seed uint64) (*memFS, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.isLost() {
		m.cutOp = "(after the load)"
		close(m.lost)
	}
	img := newMemFS(m.capacity)
	var notes []string
	inodes := make(map[*inode]*inode)
	for _, dirPath := range sortedKeys(m.dirs) {
		names := copyDir(m.synced[dirPath])
		ops := m.pending[dirPath]
		r := choices(seed, dirPath)
		keep := int(share(r) * float64(len(ops)))
		for _, op := range ops[:keep] {
			if op.from != "" {
				delete(names, op.from)
			}
			if op.ino == nil {
				delete(names, op.name)
			} else {
				names[op.name] = op.ino
			}
		}
		if len(ops) > 0 {
			notes = append(notes, fmt.Sprintf("directory: %d of %d entry changes", keep, len(ops)))
		}
		dir := make(map[string]*inode)
		for _, name := range sortedKeys(names) {
			old := names[name]
			ino, ok := inodes[old]
			if !ok {
				data, note := tornImage(old.synced, old.pending, choices(seed, filepath.Join(dirPath, name)))
				ino = &inode{data: data, synced: slices.Clone(data)}
				inodes[old] = ino
				img.inodes[ino] = true
				if note != "" {
					notes = append(notes, name+": "+note)
				}
			}
			ino.links++
			dir[name] = ino
		}
		img.dirs[dirPath] = dir
		img.synced[dirPath] = copyDir(dir)
	}
	return img, strings.Join(notes, "; ")
}

// choices returns the random source of the choices about name.
func choices(seed uint64, name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// share draws the share of the unsynced changes that survive: none, all,
// or one in between, each about as often.
func share(r *rand.Rand) float64 {
	switch r.IntN(3) {
	case 0:
		return 0
	case 1:
		return 1
	}
	return r.Float64()
}

// Ways the sector at which a write is torn can be left.
const (
	tornShort    = iota // the file ends before it
	tornZeroed          // it holds zeros
	tornZeroTail        // it and the rest of the write hold zeros: the file's size got to the disk, its data did not
)

// tornImage returns the bytes of a file that a disk kept after a power
// loss, and a note of what was lost: every byte synced, then the writes
// and truncations since in order, up to a share of their bytes drawn from
// r. The write in which that share ends is torn at a sector boundary: its
// bytes before the boundary are kept, and the sector after it, where the
// file had no byte before, is left out, zeroed, or zeroed to the end of
// the write. Bytes the file had there before (synced ones, or ones of
// earlier writes) keep their old values.
func tornImage(synced []byte, ops []fileOp, r *rand.Rand) ([]byte, string) {
	img := slices.Clone(synced)
	if len(ops) == 0 {
		return img, ""
	}
	total := int64(0)
	for _, op := range ops {
		total += int64(len(op.data))
	}
	all := share(r)
	torn := r.IntN(3)
	keep := int64(all * float64(total))
	done := int64(0)
	for _, op := range ops {
		if op.trunc {
			if done < keep || all == 1 {
				img = truncated(img, op.size)
			}
			continue
		}
		n := int64(len(op.data))
		if done+n <= keep {
			img = writeAt(img, op.data, op.off)
			done += n
			continue
		}
		tear := max((op.off+keep-done)/sector*sector, op.off)
		img = writeAt(img, op.data[:tear-op.off], op.off)
		end := op.off + n
		switch torn {
		case tornZeroed:
			img = grow(img, min((tear/sector+1)*sector, end))
		case tornZeroTail:
			img = grow(img, end)
		}
		return img, fmt.Sprintf("%d of %d unsynced bytes, torn at %d (%s), %d bytes", done+tear-op.off, total, tear,
			[]string{"file ends there", "sector zeroed", "zeros to the end of the write"}[torn], len(img))
	}
	return img, fmt.Sprintf("all %d unsynced bytes, %d bytes", total, len(img))
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
