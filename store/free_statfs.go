//go:build linux || darwin || freebsd || dragonfly

package store

import "golang.org/x/sys/unix"

// volumeSpace returns the blocks of dir's volume that an unprivileged
// process may still use, and their size in bytes.
func volumeSpace(dir string) (avail, blockSize int64, err error) {
	var st unix.Statfs_t
	err = unix.Statfs(dir, &st)
	return int64(st.Bavail), int64(st.Bsize), err
}
