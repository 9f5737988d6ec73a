//go:build !unix

package store

// isNoSpace reports false: this platform's "volume full" errors are not
// told apart.
func isNoSpace(error) bool { return false }
