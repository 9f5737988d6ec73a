//go:build unix

package store

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

func (osFS) Free(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// isNoSpace reports whether err says the volume is full: no space left on
// the device, or the user's disk quota is used up.
func isNoSpace(err error) bool {
	return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT)
}
