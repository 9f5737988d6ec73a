//go:build !unix

package store

import "errors"

// isNoSpace reports false: this platform's "volume full" errors are not
// told apart.
func isNoSpace(error) bool { return false }

func (osFS) Free(string) (int64, error) { return 0, errors.ErrUnsupported }
