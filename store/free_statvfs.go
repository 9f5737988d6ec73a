//go:build netbsd || solaris

package store

import "golang.org/x/sys/unix"

// volumeSpace returns the blocks of dir's volume that an unprivileged
// process may still use, and their size in bytes (statvfs counts them in
// fragments).
func volumeSpace(dir string) (avail, blockSize int64, err error) {
	var st unix.Statvfs_t
	err = unix.Statvfs(dir, &st)
	return int64(st.Bavail), int64(st.Frsize), err
}
