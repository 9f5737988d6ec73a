//go:build linux || darwin || freebsd || dragonfly || openbsd || netbsd || solaris

package store

import "os"

func (osFS) Free(dir string) (int64, error) {
	avail, blockSize, err := volumeSpace(dir)
	if err != nil {
		return 0, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	return avail * blockSize, nil
}
