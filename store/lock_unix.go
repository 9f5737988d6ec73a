//go:build unix

package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockFile creates path if needed, takes an exclusive flock on it without
// waiting and writes the process id into it. Errors: ErrLocked when another
// open file holds the lock, or the error of open or flock.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, filePerm)
	if err != nil {
		return nil, fmt.Errorf("store: lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := holderPID(f)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked%s", ErrLocked, path, holder)
		}
		return nil, fmt.Errorf("store: lock %s: %w", path, err)
	}
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	if err := f.Truncate(0); err == nil {
		f.WriteAt(pid, 0) // informative only: the flock is the lock
	}
	return f, nil
}

// holderPID returns " by pid N" from a lock file, or "" when it holds no
// number.
func holderPID(f *os.File) string {
	b, err := io.ReadAll(io.LimitReader(f, 32))
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(b))
	if _, err := strconv.Atoi(s); err != nil {
		return ""
	}
	return " by pid " + s
}

// unlockFile releases the lock of f and closes it.
func unlockFile(f *os.File) error {
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return f.Close()
}

// LockFile takes an exclusive flock on path, creating it when missing,
// without waiting, and returns the function that releases it. Other
// packages use it to keep a directory to one process. Errors: ErrLocked
// when another open file holds the lock, or the error of open or flock.
func LockFile(path string) (release func() error, err error) {
	f, err := lockFile(path)
	if err != nil {
		return nil, err
	}
	return func() error { return unlockFile(f) }, nil
}
