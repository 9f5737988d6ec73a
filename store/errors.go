package store

import (
	"errors"
	"fmt"
)

// Errors of the store. Match them with errors.Is; every Pending error also
// wraps mutex.ErrJournal.
var (
	// ErrCorrupt: a whole record fails its checks. Open returns it as a
	// *CorruptError, which names the file and the offset.
	ErrCorrupt = errors.New("store: corrupt record")
	// ErrLocked: another process has the log open.
	ErrLocked = errors.New("store: data path is in use by another process")
	// ErrNotRegular: the data path, after its symbolic links are resolved,
	// exists and is not a regular file (a device, a named pipe, a socket, a
	// directory). Open refuses it before creating anything.
	ErrNotRegular = errors.New("store: data path is not a regular file")
	// ErrClosed: a change appended after Close.
	ErrClosed = errors.New("store: log is closed")
	// ErrTooLarge: a change whose record would exceed MaxPayload bytes.
	ErrTooLarge = errors.New("store: change too large for one record")
)

// CorruptError is a whole record that fails its checks, found by replay.
// errors.Is(err, ErrCorrupt) holds for it.
type CorruptError struct {
	Path   string // the log file
	Offset int64  // byte offset of the record's first header byte
	Err    error  // the check that failed
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("store: %s: corrupt record at offset %d: %v; the file was left unchanged",
		e.Path, e.Offset, e.Err)
}

// Is reports whether target is ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// Unwrap returns the check that failed.
func (e *CorruptError) Unwrap() error { return e.Err }
