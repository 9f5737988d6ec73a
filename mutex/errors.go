package mutex

import "errors"

// Errors of the lock table and the mutex port. Callers match them with
// errors.Is; answerFor maps each to its wire answer.
var (
	// ErrMalformed: a request the wire format does not allow.
	ErrMalformed = errors.New("mutex: malformed request")
	// ErrKeyEmpty: a key of zero bytes.
	ErrKeyEmpty = errors.New("mutex: key is empty")
	// ErrKeyTooLong: a key longer than MaxKeyLen bytes.
	ErrKeyTooLong = errors.New("mutex: key too long")
	// ErrSourceTooLong: a source longer than MaxSourceLen bytes.
	ErrSourceTooLong = errors.New("mutex: source too long")
	// ErrBusy: a try-lock found the key held by another.
	ErrBusy = errors.New("mutex: key is held")
	// ErrWithdrawn: a parked request was withdrawn before its grant, by its
	// caller, by a departed peer or by a reset of its source.
	ErrWithdrawn = errors.New("mutex: request withdrawn")
	// ErrParked: Table.Result of a request that is still parked.
	ErrParked = errors.New("mutex: request still parked")
	// ErrJournal: the journal could not make a grant durable; the key was
	// released again.
	ErrJournal = errors.New("mutex: journal write failed")
	// ErrClosed: the table or server is shut down.
	ErrClosed = errors.New("mutex: closed")
)

// answerFor maps the outcome of a request to its one-byte answer.
func answerFor(err error) byte {
	switch {
	case err == nil:
		return AnswerOK
	case errors.Is(err, ErrBusy):
		return AnswerBusy
	default:
		return AnswerFailed
	}
}
