package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Codes of a failed answer (its "code" field): why, for programs. The
// "message" field says it in words.
const (
	codeBadRequest       = "bad_request"
	codeTooLarge         = "too_large"
	codeNotFound         = "not_found"
	codeMethodNotAllowed = "method_not_allowed"
	codeConflict         = "conflict"
	codeDeadlock         = "deadlock"
	codeTimeout          = "timeout"
	codeNotHeld          = "not_held"
	codeTokenMismatch    = "token_mismatch"
	codeAmbiguous        = "ambiguous"
	codeLimitMismatch    = "limit_mismatch"
	codeUpgrade          = "upgrade"
	codeWithdrawn        = "withdrawn"
	codeSessionExpired   = "session_expired"
	codeNotDurable       = "not_durable"
	codeShuttingDown     = "shutting_down"
	codeOverLimit        = "over_limit"
	codeNotLeader        = "not_leader"
)

// failure is the body of every answer that is not a success.
type failure struct {
	Status  string `json:"status"` // "failed"
	Message string `json:"message"`
	Code    string `json:"code"`
	Key     string `json:"key,omitempty"`
	// Conflicts: what holds the key.
	Mode        string `json:"mode,omitempty"`
	Holders     int    `json:"holders,omitempty"`
	QueueLength int    `json:"queue_length,omitempty"`
	LockDelayMS int64  `json:"lock_delay_ms,omitempty"`
	Limit       uint32 `json:"limit,omitempty"`
	// Token mismatches: the token of the owner's lock.
	FencingToken uint64 `json:"fencing_token,omitempty"`
	// A node of a cluster that is not the leader: the leader's mutex port
	// and its HTTP API.
	Leader     string `json:"leader,omitempty"`
	LeaderHTTP string `json:"leader_http,omitempty"`
}

// writeJSON answers code with v as JSON.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"status":"failed","message":"the answer could not be encoded","code":"internal"}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

// fail answers code with a failure.
func fail(w http.ResponseWriter, code int, f failure) {
	f.Status = "failed"
	writeJSON(w, code, &f)
}

// badRequest answers 400 with message.
func badRequest(w http.ResponseWriter, format string, args ...any) {
	fail(w, http.StatusBadRequest, failure{Code: codeBadRequest, Message: fmt.Sprintf(format, args...)})
}

// decode reads the request body, one JSON object, into v. Fields v does
// not have are refused. On failure it answers the request and returns
// false.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
	if err == nil && (!utf8.Valid(body) || hasLoneSurrogate(body)) {
		// encoding/json would put U+FFFD in their place, and two keys
		// that differ only there would be one key.
		badRequest(w, "the request body is not UTF-8 (keys, owners and notes are UTF-8 text)")
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err == nil {
		err = dec.Decode(v)
	}
	if err == nil {
		if dec.Decode(&struct{}{}) != io.EOF {
			badRequest(w, "the request body holds more than one JSON object")
			return false
		}
		return true
	}
	var tooLarge *http.MaxBytesError
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &tooLarge):
		fail(w, http.StatusRequestEntityTooLarge, failure{Code: codeTooLarge,
			Message: fmt.Sprintf("the request body is over %d bytes", tooLarge.Limit)})
	case errors.Is(err, io.EOF):
		badRequest(w, "the request body must be a JSON object")
	case errors.As(err, &syntax), errors.Is(err, io.ErrUnexpectedEOF):
		badRequest(w, "the request body is not valid JSON: %v", err)
	case errors.As(err, &typ) && typ.Field == "":
		badRequest(w, "the request body must be a JSON object, not a JSON %s", typ.Value)
	case errors.As(err, &typ):
		badRequest(w, "field %q must be %s, not a JSON %s", typ.Field, kindOf(typ), typ.Value)
	default:
		badRequest(w, "bad request body: %v", err)
	}
	return false
}

// hasLoneSurrogate reports whether b, JSON text, escapes half of a UTF-16
// surrogate pair without the other half (\ud800 alone), which is no
// character.
func hasLoneSurrogate(b []byte) bool {
	surrogate := func(i int) (rune, bool) { // the \uXXXX at b[i:], if it is one of a surrogate
		if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
			return 0, false
		}
		n, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 16)
		return rune(n), err == nil && utf16.IsSurrogate(rune(n))
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			continue
		}
		if b[i+1] != 'u' {
			i++ // an escape of one character, maybe \\ itself
			continue
		}
		r, ok := surrogate(i)
		if !ok {
			i += 5
			continue
		}
		next, pair := surrogate(i + 6)
		if r >= 0xDC00 || !pair || next < 0xDC00 {
			return true
		}
		i += 11
	}
	return false
}

// kindOf names the JSON value a field wants.
func kindOf(e *json.UnmarshalTypeError) string {
	t := e.Type
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Uint64:
		return "a non-negative integer, or a string of its digits"
	}
	return "an integer"
}

// fencingToken is a fencing token in a request: a JSON number, or a decimal
// string for clients whose numbers are doubles (tokens are above 2^53).
type fencingToken uint64

// UnmarshalJSON reads a number or a string of decimal digits.
func (t *fencingToken) UnmarshalJSON(b []byte) error {
	s := string(b)
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		s = s[1 : len(s)-1]
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return &json.UnmarshalTypeError{Value: "value " + string(b), Type: reflect.TypeFor[uint64](), Field: "fencing_token"}
	}
	*t = fencingToken(v)
	return nil
}
