//go:build unix

package store

import (
	"errors"

	"golang.org/x/sys/unix"
)

// isNoSpace reports whether err says the volume is full: no space left on
// the device, or the user's disk quota is used up.
func isNoSpace(err error) bool {
	return errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT)
}
