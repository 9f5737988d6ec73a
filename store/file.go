package store

import (
	"io"
	"os"
)

// File is what a Log needs of an open file. *os.File implements it; tests
// wrap it to inject write and fsync failures.
type File interface {
	io.ReaderAt
	WriteAt(p []byte, off int64) (int, error)
	Sync() error
	Truncate(size int64) error
	Stat() (os.FileInfo, error)
	Close() error
}

// OpenFileFunc opens a file as os.OpenFile does.
type OpenFileFunc func(name string, flag int, perm os.FileMode) (File, error)

// osOpenFile is the OpenFileFunc of the operating system.
func osOpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// syncDir fsyncs the directory of the log, so that a file created or
// renamed in it is on disk.
func (l *Log) syncDir() error {
	d, err := l.open(l.dir, os.O_RDONLY, 0)
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
