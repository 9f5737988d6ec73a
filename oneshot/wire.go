package oneshot

import (
	"errors"

	"github.com/locking-center/locking-center/mutex"
)

// Action is the first byte of a mutex-port request.
type Action byte

// The five actions of the mutex port.
const (
	ActionLock        Action = 1
	ActionUnlock      Action = 2
	ActionResetKey    Action = 3
	ActionResetSource Action = 4
	ActionTryLock     Action = 5
)

// Answers on the wire, one byte each.
const (
	AnswerOK     byte = '+' // the operation succeeded
	AnswerFailed byte = '-' // malformed, rejected or withdrawn
	AnswerBusy   byte = '#' // a try-lock found the key held
)

const (
	maxStringLen  = mutex.MaxKeyLen
	maxRequestLen = 1 + 1 + maxStringLen + 1 + maxStringLen
)

// Errors of the v1 protocol.
var (
	// ErrMalformed: a request the wire format does not allow.
	ErrMalformed = errors.New("oneshot: malformed request")
	// ErrClosed: Serve after Close.
	ErrClosed = errors.New("oneshot: closed")
	// errIncomplete reports that a request is valid so far but needs more
	// bytes.
	errIncomplete = errors.New("oneshot: incomplete request")
)

// String returns the action's name, for logs.
func (a Action) String() string {
	switch a {
	case ActionLock:
		return "lock"
	case ActionUnlock:
		return "unlock"
	case ActionResetKey:
		return "reset"
	case ActionResetSource:
		return "reset-source"
	case ActionTryLock:
		return "trylock"
	}
	return "unknown"
}

// Request is one decoded mutex-port request. Key is empty for
// ActionResetSource; Source is empty for ActionUnlock and ActionResetKey.
type Request struct {
	Action Action
	Key    string
	Source string
}

// DecodeRequest decodes the request at the start of b and returns it with
// the number of bytes it used.
//
// Errors: ErrMalformed when b cannot start a valid request (unknown action,
// key length 0 or over MaxKeyLen, source length over MaxSourceLen), and
// errIncomplete when b is a valid prefix that needs more bytes. The caller
// decides what bytes after the request mean; the server refuses them.
func DecodeRequest(b []byte) (Request, int, error) {
	if len(b) == 0 {
		return Request{}, 0, errIncomplete
	}
	req := Request{Action: Action(b[0])}
	var withKey, withSource bool
	switch req.Action {
	case ActionLock, ActionTryLock:
		withKey, withSource = true, true
	case ActionUnlock, ActionResetKey:
		withKey = true
	case ActionResetSource:
		withSource = true
	default:
		return Request{}, 0, ErrMalformed
	}
	n := 1
	if withKey {
		key, used, err := decodeString(b[n:], 1)
		if err != nil {
			return Request{}, 0, err
		}
		req.Key, n = key, n+used
	}
	if withSource {
		src, used, err := decodeString(b[n:], 0)
		if err != nil {
			return Request{}, 0, err
		}
		req.Source, n = src, n+used
	}
	return req, n, nil
}

// decodeString reads one length-prefixed string of at least minLen bytes.
func decodeString(b []byte, minLen int) (string, int, error) {
	if len(b) == 0 {
		return "", 0, errIncomplete
	}
	size := int(b[0])
	if size < minLen || size > maxStringLen {
		return "", 0, ErrMalformed
	}
	if len(b) < 1+size {
		return "", 0, errIncomplete
	}
	return string(b[1 : 1+size]), 1 + size, nil
}

// AppendRequest appends the wire form of r to b. It does not validate r;
// call r.Validate first when r comes from outside.
func AppendRequest(b []byte, r Request) []byte {
	b = append(b, byte(r.Action))
	switch r.Action {
	case ActionLock, ActionTryLock:
		b = appendString(b, r.Key)
		b = appendString(b, r.Source)
	case ActionUnlock, ActionResetKey:
		b = appendString(b, r.Key)
	case ActionResetSource:
		b = appendString(b, r.Source)
	}
	return b
}

func appendString(b []byte, s string) []byte {
	b = append(b, byte(len(s)))
	return append(b, s...)
}

// Validate reports whether r can be encoded: a known action, a key of
// 1..mutex.MaxKeyLen bytes where the action has one, a source of at most
// mutex.MaxSourceLen bytes. Errors: ErrMalformed, mutex.ErrKeyEmpty,
// mutex.ErrKeyTooLong, mutex.ErrSourceTooLong.
func (r Request) Validate() error {
	switch r.Action {
	case ActionLock, ActionTryLock, ActionUnlock, ActionResetKey:
		if err := mutex.ValidateKey(r.Key); err != nil {
			return err
		}
	case ActionResetSource:
	default:
		return ErrMalformed
	}
	if len(r.Source) > mutex.MaxSourceLen {
		return mutex.ErrSourceTooLong
	}
	return nil
}
