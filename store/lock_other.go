//go:build !unix

package store

import (
	"errors"
	"os"
)

// lockFile fails: one process per log is enforced with flock(2), which this
// platform lacks.
func lockFile(path string) (*os.File, error) {
	return nil, errors.New("store: " + path + ": file locking is not supported on this platform")
}

func unlockFile(f *os.File) error { return f.Close() }

// LockFile fails on this platform; see lockFile.
func LockFile(path string) (release func() error, err error) {
	_, err = lockFile(path)
	return nil, err
}
