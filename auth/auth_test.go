package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	deployToken = "deploy-token-0123456789abcdef"
	opsToken    = "ops-token-fedcba9876543210"
)

func tokensFile() string {
	return "# a comment\n\n" +
		"deployer client " + HashToken(deployToken) + " deploy/ jobs/\n" +
		"  ops   admin   " + opsToken + "  \n" +
		"reader client " + HashToken("reader-token-000000000000") + "\n"
}

func TestAuthenticate(t *testing.T) {
	toks, err := Parse(strings.NewReader(tokensFile()))
	if err != nil {
		t.Fatal(err)
	}
	if toks.Len() != 3 {
		t.Fatalf("%d principals, want 3", toks.Len())
	}
	for _, c := range []struct {
		token string
		name  string
		role  Role
	}{
		{deployToken, "deployer", Client},
		{opsToken, "ops", Admin},
		{"reader-token-000000000000", "reader", Client},
	} {
		p, err := toks.Authenticate([]byte(c.token))
		if err != nil || p.Name != c.name || p.Role != c.role {
			t.Errorf("token of %s: %+v, %v", c.name, p, err)
		}
	}
	for _, bad := range []string{"", "deploy-token-0123456789abcde", deployToken + "x", HashToken(deployToken),
		strings.Repeat("x", MaxTokenLen+1)} {
		if p, err := toks.Authenticate([]byte(bad)); !errors.Is(err, ErrUnauthenticated) || p != nil {
			t.Errorf("token %.20q: %+v, %v; want ErrUnauthenticated", bad, p, err)
		}
	}
	var none *Tokens
	if _, err := none.Authenticate([]byte(deployToken)); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("no tokens: %v", err)
	}
}

func TestPrefixesAndRoles(t *testing.T) {
	toks, err := Parse(strings.NewReader(tokensFile()))
	if err != nil {
		t.Fatal(err)
	}
	deployer, _ := toks.Authenticate([]byte(deployToken))
	ops, _ := toks.Authenticate([]byte(opsToken))
	reader, _ := toks.Authenticate([]byte("reader-token-000000000000"))
	for _, c := range []struct {
		p          *Principal
		key        string
		use, watch bool
	}{
		{deployer, "deploy/prod", true, true},
		{deployer, "jobs/nightly", true, true},
		{deployer, "deploy", false, false},
		{deployer, "billing/x", false, false},
		{deployer, "", false, false},
		{ops, "anything", true, true},
		{ops, "", true, true},
		{reader, "anything", true, true},
		{nil, "deploy/prod", false, false},
	} {
		if got := c.p.MayUse(c.key); got != c.use {
			t.Errorf("%+v MayUse(%q) = %v", c.p, c.key, got)
		}
		if got := c.p.MayWatch(c.key); got != c.watch {
			t.Errorf("%+v MayWatch(%q) = %v", c.p, c.key, got)
		}
	}
	if !ops.Admin() || deployer.Admin() || (*Principal)(nil).Admin() {
		t.Error("Admin() wrong")
	}
}

func TestParseErrorsNameTheLineNeverTheToken(t *testing.T) {
	secret := "a-secret-that-must-not-leak"
	for _, c := range []struct {
		file, want string
	}{
		{"x client\n", "line 1: want: name role token"},
		{"\n\nx root " + secret + "\n", `line 3: role "root"`},
		{"x client short\n", "shorter than 16"},
		{"x client sha256:abcd\n", "64 hex digits"},
		{"x client sha256:" + strings.Repeat("zz", 32) + "\n", "64 hex digits"},
		{"x client " + secret + "\nx admin " + secret + "2\n", `line 2: name "x" appears twice`},
		{"x client " + secret + "\ny client " + HashToken(secret) + "\n", `line 2: the token of "y" is another principal's`},
		{"x admin " + secret + " deploy/\n", "admin may use every key"},
		{strings.Repeat("n", 128) + " client " + secret + "\n", "name longer"},
		{"# only a comment\n", "no principal"},
		{"", "no principal"},
	} {
		_, err := Parse(strings.NewReader(c.file))
		if !errors.Is(err, ErrTokensFile) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", c.file, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("Parse(%q): the error %q shows the token", c.file, err)
		}
	}
}

func TestReloadKeepsTheTokensInForceOnABadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("a client " + deployToken + "\n")
	k, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := k.Authenticate([]byte(deployToken)); err != nil {
		t.Fatal(err)
	}
	write("b client " + opsToken + "\n")
	if err := k.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Authenticate([]byte(deployToken)); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("a token removed from the file still authenticates: %v", err)
	}
	if p, err := k.Authenticate([]byte(opsToken)); err != nil || p.Name != "b" {
		t.Errorf("the new token: %+v, %v", p, err)
	}
	write("b superuser " + opsToken + "\n")
	if err := k.Reload(); !errors.Is(err, ErrTokensFile) || !strings.Contains(err.Error(), path) {
		t.Errorf("bad file reload = %v, want ErrTokensFile naming the file", err)
	}
	if p, err := k.Authenticate([]byte(opsToken)); err != nil || p.Name != "b" {
		t.Errorf("after a bad reload the tokens in force changed: %+v, %v", p, err)
	}
	os.Remove(path)
	if err := k.Reload(); !errors.Is(err, ErrTokensFile) {
		t.Errorf("missing file reload = %v", err)
	}
	if k.Len() != 1 {
		t.Errorf("Len = %d after failed reloads, want 1", k.Len())
	}
	if _, err := Load(path); !errors.Is(err, ErrTokensFile) {
		t.Errorf("Load of a missing file = %v", err)
	}
}

func TestNewTokenIsAcceptedAndHashes(t *testing.T) {
	a, b := NewToken(), NewToken()
	if a == b || len(a) != 43 {
		t.Fatalf("NewToken gave %q and %q", a, b)
	}
	toks, err := Parse(strings.NewReader("x client " + HashToken(a) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := toks.Authenticate([]byte(a)); err != nil {
		t.Error(err)
	}
}

// FuzzParse: any file either parses into principals that authenticate
// with nothing but a token of theirs, or is refused with ErrTokensFile.
func FuzzParse(f *testing.F) {
	f.Add(tokensFile())
	f.Add("x client sha256:" + strings.Repeat("ab", 32) + " a/ b/\n")
	f.Add("x root y\n")
	f.Fuzz(func(t *testing.T, file string) {
		toks, err := Parse(strings.NewReader(file))
		if err != nil {
			if !errors.Is(err, ErrTokensFile) {
				t.Fatalf("error %v does not match ErrTokensFile", err)
			}
			return
		}
		if toks.Len() == 0 {
			t.Fatal("parsed with no principal")
		}
		if _, err := toks.Authenticate(nil); err == nil {
			t.Fatal("an empty token authenticated")
		}
	})
}
