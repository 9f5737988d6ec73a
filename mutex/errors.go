package mutex

import "errors"

// Errors of the lock table and its node. Callers match them with
// errors.Is.
var (
	// ErrKeyEmpty: a key of zero bytes.
	ErrKeyEmpty = errors.New("mutex: key is empty")
	// ErrKeyTooLong: a key longer than MaxKeyLen bytes.
	ErrKeyTooLong = errors.New("mutex: key too long")
	// ErrSourceTooLong: a source longer than MaxSourceLen bytes.
	ErrSourceTooLong = errors.New("mutex: source too long")
	// ErrBusy: a try found the key held by another.
	ErrBusy = errors.New("mutex: key is held")
	// ErrWithdrawn: a parked request was withdrawn before its grant, by its
	// caller, by a departed peer or by a reset of its source.
	ErrWithdrawn = errors.New("mutex: request withdrawn")
	// ErrJournal: the journal could not make a change durable.
	ErrJournal = errors.New("mutex: journal write failed")
	// ErrClosed: the node is shut down.
	ErrClosed = errors.New("mutex: closed")
	// ErrRefused: the table refused the command; the Status says why.
	ErrRefused = errors.New("mutex: refused")
)

// MaxKeyLen and MaxSourceLen bound keys and sources, in bytes, on every
// front end.
const (
	MaxKeyLen    = 127
	MaxSourceLen = 127
	// MaxNoteLen bounds a holder's note (Command.Note), in bytes.
	MaxNoteLen = 1024
)

// ValidateKey reports ErrKeyEmpty or ErrKeyTooLong for a key the table
// does not take, nil otherwise.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return ErrKeyEmpty
	case len(key) > MaxKeyLen:
		return ErrKeyTooLong
	}
	return nil
}
