// Package auth authenticates clients of lcd by their tokens (API keys) and
// says what each may do.
//
// Tokens come from a file (the tokens file, see docs/security.md), one per
// line:
//
//	# name     role    token                                                                    prefixes...
//	deployer   client  sha256:7d1a54127b222502f5b79b5fb0803061152a44f92b37e23c6527baf665d4da9a  deploy/ jobs/
//	ops        admin   sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae
//
// A line names a principal, its role (client or admin), its token and,
// optionally, the key prefixes it may lock; none means every key. The token
// is written as "sha256:" and the hex SHA-256 of the token's bytes (what
// HashToken returns), or as the token itself, at least MinTokenLen bytes of
// printable ASCII. Either way only the digest is kept in memory, and a
// presented token is compared with every digest in constant time.
//
// Tokens are random strings of high entropy, not passwords, so one round of
// SHA-256 is the right digest: there is nothing for a slow, salted hash to
// protect against that the token's own entropy does not.
package auth

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
)

// Role is what a principal may do.
type Role uint8

const (
	// Client may take, release and renew locks in its own sessions, on the
	// keys its prefixes allow, and list and watch those keys.
	Client Role = iota + 1
	// Admin may do everything: every key, resets, the management port.
	Admin
)

// String returns "client" or "admin".
func (r Role) String() string {
	switch r {
	case Client:
		return "client"
	case Admin:
		return "admin"
	}
	return "unknown"
}

// ParseRole returns the role named s.
func ParseRole(s string) (Role, bool) {
	switch s {
	case "client":
		return Client, true
	case "admin":
		return Admin, true
	}
	return 0, false
}

// MinTokenLen is the shortest token the tokens file accepts written out in
// full: 16 bytes (128 bits when they are random bytes, fewer when they are
// characters; NewToken makes 32 random bytes).
const MinTokenLen = 16

// MaxTokenLen is the longest token a client may present: the session
// protocol's credential field holds at most 1,024 bytes.
const MaxTokenLen = 1024

// Errors of authentication and authorisation.
var (
	// ErrUnauthenticated: no token, or a token that names no principal.
	// The two are never told apart to the client.
	ErrUnauthenticated = errors.New("auth: authentication failed")
	// ErrForbidden: a known principal asked for what its role or its
	// prefixes do not allow.
	ErrForbidden = errors.New("auth: not allowed")
	// ErrTokensFile: the tokens file could not be read or parsed.
	ErrTokensFile = errors.New("auth: bad tokens file")
)

// Principal is who a token stands for.
type Principal struct {
	Name     string
	Role     Role
	Prefixes []string // keys it may lock; empty: every key
}

// Admin reports whether p has the admin role.
func (p *Principal) Admin() bool { return p != nil && p.Role == Admin }

// MayUse reports whether p may lock, list or watch key: an admin any key, a
// client a key that starts with one of its prefixes (any key when it has
// none).
func (p *Principal) MayUse(key string) bool {
	if p == nil {
		return false
	}
	if p.Role == Admin || len(p.Prefixes) == 0 {
		return true
	}
	for _, pre := range p.Prefixes {
		if strings.HasPrefix(key, pre) {
			return true
		}
	}
	return false
}

// MayWatch reports whether p may watch the keys under prefix: every key
// under it must be one p may use.
func (p *Principal) MayWatch(prefix string) bool {
	if p == nil {
		return false
	}
	if p.Role == Admin || len(p.Prefixes) == 0 {
		return true
	}
	for _, pre := range p.Prefixes {
		if strings.HasPrefix(prefix, pre) {
			return true
		}
	}
	return false
}

// entry is one line of the tokens file.
type entry struct {
	digest    [sha256.Size]byte
	principal *Principal
}

// Tokens is a parsed tokens file.
type Tokens struct {
	entries []entry
}

// Len returns the number of principals.
func (t *Tokens) Len() int { return len(t.entries) }

// Authenticate returns the principal of token, or ErrUnauthenticated. It
// compares the token's digest with every principal's, without stopping at
// a match, so its time does not depend on which one matches or on how much
// of a digest does.
func (t *Tokens) Authenticate(token []byte) (*Principal, error) {
	if len(token) == 0 || len(token) > MaxTokenLen || t == nil {
		return nil, ErrUnauthenticated
	}
	d := sha256.Sum256(token)
	var found *Principal
	for i := range t.entries {
		if subtle.ConstantTimeCompare(d[:], t.entries[i].digest[:]) == 1 {
			found = t.entries[i].principal
		}
	}
	if found == nil {
		return nil, ErrUnauthenticated
	}
	return found, nil
}

// Parse reads a tokens file. An error names the line and what is wrong
// with it, never the token; it matches ErrTokensFile.
func Parse(r io.Reader) (*Tokens, error) {
	t := &Tokens{}
	names := map[string]bool{}
	digests := map[[sha256.Size]byte]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64*1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		e, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrTokensFile, n, err)
		}
		if names[e.principal.Name] {
			return nil, fmt.Errorf("%w: line %d: name %q appears twice", ErrTokensFile, n, e.principal.Name)
		}
		if digests[e.digest] {
			return nil, fmt.Errorf("%w: line %d: the token of %q is another principal's too", ErrTokensFile, n, e.principal.Name)
		}
		names[e.principal.Name], digests[e.digest] = true, true
		t.entries = append(t.entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTokensFile, err)
	}
	if len(t.entries) == 0 {
		return nil, fmt.Errorf("%w: no principal in it: nobody could connect", ErrTokensFile)
	}
	return t, nil
}

// maxNameLen bounds a principal's name: it is a session's source.
const maxNameLen = 127

func parseLine(line string) (entry, error) {
	fields := strings.Fields(line)
	if len(fields) < 3 {
		return entry{}, errors.New("want: name role token [prefix...]")
	}
	name, roleName, token := fields[0], fields[1], fields[2]
	if len(name) > maxNameLen {
		return entry{}, fmt.Errorf("name longer than %d bytes", maxNameLen)
	}
	role, ok := ParseRole(roleName)
	if !ok {
		return entry{}, fmt.Errorf("role %q: want client or admin", roleName)
	}
	e := entry{principal: &Principal{Name: name, Role: role}}
	if hexDigest, ok := strings.CutPrefix(token, "sha256:"); ok {
		b, err := hex.DecodeString(hexDigest)
		if err != nil || len(b) != sha256.Size {
			return entry{}, fmt.Errorf("the token of %q: sha256: wants 64 hex digits", name)
		}
		copy(e.digest[:], b)
	} else {
		if len(token) < MinTokenLen {
			return entry{}, fmt.Errorf("the token of %q is shorter than %d bytes", name, MinTokenLen)
		}
		if len(token) > MaxTokenLen {
			return entry{}, fmt.Errorf("the token of %q is longer than %d bytes", name, MaxTokenLen)
		}
		e.digest = sha256.Sum256([]byte(token))
	}
	for _, p := range fields[3:] {
		if len(p) > 127 {
			return entry{}, fmt.Errorf("a prefix of %q is longer than a key may be", name)
		}
		e.principal.Prefixes = append(e.principal.Prefixes, p)
	}
	if role == Admin && len(e.principal.Prefixes) > 0 {
		return entry{}, fmt.Errorf("%q is an admin: an admin may use every key, so prefixes would mislead", name)
	}
	return e, nil
}

// HashToken returns the form of token for the tokens file:
// "sha256:" and 64 hex digits.
func HashToken(token string) string {
	d := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(d[:])
}

// NewToken returns a new random token: 32 bytes from crypto/rand in
// unpadded URL-safe base64 (43 characters).
func NewToken() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Keyring holds the tokens of a file and reloads them; it is safe for
// concurrent use. A Keyring with no file authenticates nobody.
type Keyring struct {
	path string
	cur  atomic.Pointer[Tokens]
}

// Load reads the tokens file at path.
func Load(path string) (*Keyring, error) {
	k := &Keyring{path: path}
	if err := k.Reload(); err != nil {
		return nil, err
	}
	return k, nil
}

// Reload reads the file again. On an error the tokens already loaded stay
// in force, and the error says why the file was not taken.
func (k *Keyring) Reload() error {
	b, err := os.ReadFile(k.path)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrTokensFile, err)
	}
	t, err := Parse(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("%s: %w", k.path, err)
	}
	k.cur.Store(t)
	return nil
}

// Path returns the file's path.
func (k *Keyring) Path() string { return k.path }

// Len returns the number of principals loaded.
func (k *Keyring) Len() int { return k.cur.Load().Len() }

// Authenticate returns the principal of token under the tokens in force.
func (k *Keyring) Authenticate(token []byte) (*Principal, error) {
	return k.cur.Load().Authenticate(token)
}
