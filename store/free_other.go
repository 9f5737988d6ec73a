//go:build !(linux || darwin || freebsd || dragonfly || openbsd || netbsd || solaris)

package store

import "errors"

func (osFS) Free(string) (int64, error) { return 0, errors.ErrUnsupported }
