package main

import (
	"strings"
	"testing"

	"github.com/locking-center/locking-center/auth"
)

func TestTokenPrintsATokenAndItsLine(t *testing.T) {
	r := runInProcess(t, nil, "token", "deployer", "deploy/", "jobs/")
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	if r.code != exitOK || len(lines) != 3 || strings.Count(r.stdout, "\n") != 1 || !strings.HasPrefix(lines[0], "#") ||
		!strings.HasPrefix(lines[1], "#") {
		t.Fatalf("token = %d %q %q, want the token alone on stdout, a comment and a line on stderr", r.code, r.stdout, r.stderr)
	}
	token, line := strings.TrimSuffix(r.stdout, "\n"), lines[2]
	if strings.Contains(line, token) || !strings.HasPrefix(line, "deployer client sha256:") ||
		!strings.HasSuffix(line, " deploy/ jobs/") {
		t.Fatalf("the file line %q (token %q)", line, token)
	}
	toks, err := auth.Parse(strings.NewReader(line + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := toks.Authenticate([]byte(token))
	if err != nil || p.Name != "deployer" || !p.MayUse("jobs/x") || p.MayUse("billing/x") {
		t.Fatalf("the token authenticates as %+v, %v", p, err)
	}
	if again := runInProcess(t, nil, "token", "deployer"); strings.Contains(again.stdout, token) {
		t.Error("two runs made the same token")
	}
	admin := runInProcess(t, nil, "token", "--role", "admin", "ops")
	if admin.code != exitOK || !strings.Contains(admin.stderr, "\nops admin sha256:") {
		t.Errorf("admin token: %d %q", admin.code, admin.stderr)
	}
	for _, args := range [][]string{{"token"}, {"token", "x", "--role", "root"}, {"token", "--role", "admin", "ops", "deploy/"},
		{"token", "a#b"}, {"token", "ops", "admin"}, {"token", "ops", "client", "jobs/"}} {
		r := runInProcess(t, nil, args...)
		if r.code != exitFailure || r.stdout != "" {
			t.Errorf("%q = %d %q, want a usage error", args, r.code, r.stdout)
		}
		oneLine(t, r.stderr, "token")
	}
}

func TestTokenReachesTheServer(t *testing.T) {
	toks, err := auth.Parse(strings.NewReader("ops admin ops-token-0123456789abcdef\n" +
		"deployer client deployer-token-0123456789 deploy/\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := startServerAuth(t, listen(t), listen(t), nil, toks)
	env := s.environ()
	if r := runInProcess(t, env, "keys"); r.code != exitFailure {
		t.Errorf("keys without a token = %d", r.code)
	}
	if r := runInProcess(t, append(env, "LC_TOKEN=ops-token-0123456789abcdef"), "keys"); r.code != exitOK {
		t.Errorf("keys with an admin's token = %d %q", r.code, r.stderr)
	}
	r := runInProcess(t, env, "lock", "deploy/prod", "--", "true")
	if r.code != exitFailure {
		t.Errorf("lock -- without a token = %d", r.code)
	}
	oneLine(t, r.stderr, "authentication failed")
	if n := strings.Count(r.stderr, "authentication failed"); n != 1 {
		t.Errorf("stderr %q says authentication failed %d times", r.stderr, n)
	}
	r = runInProcess(t, env, "--token", "deployer-token-0123456789", "lock", "deploy/prod", "--", "sh", "-c", `echo $LC_FENCING_TOKEN`)
	if r.code != exitOK || strings.TrimSpace(r.stdout) == "" {
		t.Errorf("lock -- with a client's token = %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = runInProcess(t, append(env, "LC_TOKEN=deployer-token-0123456789"), "lock", "billing/ledger", "--", "true")
	if r.code != exitFailure {
		t.Errorf("lock -- of a key outside the prefixes = %d", r.code)
	}
	oneLine(t, r.stderr, "not allowed")
}
