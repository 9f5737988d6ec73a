package store

import (
	"io"
	"os"
)

// File is what a Log needs of an open file. *os.File implements it; tests
// wrap it to inject write and fsync failures, or replace it with a file in
// memory.
type File interface {
	io.ReaderAt
	WriteAt(p []byte, off int64) (int, error)
	Sync() error
	Truncate(size int64) error
	Stat() (os.FileInfo, error)
	Close() error
}

// FS is the file system a Log keeps its files in: the log, its temp file
// and the directory that holds them. Every read, write, fsync, truncation,
// rename and removal of those goes through it; the resolution of
// Config.Path and the lock file (see the package documentation, One
// process per file) use the operating system directly. The default is the
// operating system's.
type FS interface {
	// OpenFile opens a file as os.OpenFile does. The Log also opens the
	// log's directory with os.O_RDONLY, to fsync it.
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// Rename renames oldpath to newpath as os.Rename does, replacing
	// newpath.
	Rename(oldpath, newpath string) error
	// Remove removes the file name as os.Remove does; a missing file is an
	// error for which errors.Is(err, os.ErrNotExist) holds.
	Remove(name string) error
	// Free returns the bytes that this process may still write to the
	// volume that holds the directory dir (statfs(2) or statvfs(2): the
	// blocks available to an unprivileged user, times their size), or an
	// error: errors.ErrUnsupported where the system cannot tell.
	Free(dir string) (int64, error)
}

// osFS is the FS of the operating system.
type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (osFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

func (osFS) Remove(name string) error { return os.Remove(name) }

// syncDir fsyncs the directory of the log, so that a file created or
// renamed in it is on disk.
func (l *Log) syncDir() error {
	d, err := l.fs.OpenFile(l.dir, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		l.stats.syncs.Add(1)
	}
	return err
}
