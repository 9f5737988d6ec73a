package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// resolvePath returns the absolute path of the log file that path names,
// with every symbolic link resolved, so that the lock file and the
// compaction's temp file and rename are derived from the file itself and
// not from one of its names. When path does not exist yet, its directory is
// resolved and the file keeps its base name. It creates nothing. Errors:
// ErrNotRegular when path exists and is not a regular file (a device, a
// named pipe, a socket, a directory), or the error of resolving it (a
// missing directory, a symbolic link to a missing file); each names path.
func resolvePath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("store: data path %s: %w", path, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if errors.Is(err, fs.ErrNotExist) {
		if _, lerr := os.Lstat(abs); errors.Is(lerr, fs.ErrNotExist) {
			var dir string
			if dir, err = filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
				return filepath.Join(dir, filepath.Base(abs)), nil
			}
		}
	}
	if err != nil {
		return "", fmt.Errorf("store: data path %s: %w", path, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("store: data path %s: %w", path, err)
	}
	name := path
	if real != abs {
		name = path + " -> " + real
	}
	if err := checkRegular(name, fi); err != nil {
		return "", err
	}
	return real, nil
}

// checkRegular returns ErrNotRegular, naming name and what it is, unless fi
// is a regular file.
func checkRegular(name string, fi fs.FileInfo) error {
	if fi.Mode().IsRegular() {
		return nil
	}
	return fmt.Errorf("%w: %s is a %s", ErrNotRegular, name, fileKind(fi.Mode()))
}

// fileKind names the type of a file that is not regular.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeDir != 0:
		return "directory"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "socket"
	default:
		return "file of mode " + m.Type().String()
	}
}
