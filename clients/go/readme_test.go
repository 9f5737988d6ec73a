package lockingcenter_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// readmeBlock returns the code block of README.md that follows the HTML
// comment <!-- name -->.
func readmeBlock(t *testing.T, readme []byte, name string) string {
	t.Helper()
	_, rest, ok := bytes.Cut(readme, []byte("<!-- "+name+" -->"))
	if !ok {
		t.Fatalf("README.md has no <!-- %s --> block", name)
	}
	_, rest, ok = bytes.Cut(rest, []byte("```"))
	if !ok {
		t.Fatalf("README.md: no code block after <!-- %s -->", name)
	}
	_, rest, _ = bytes.Cut(rest, []byte("\n")) // the fence's language tag
	body, _, ok := bytes.Cut(rest, []byte("```"))
	if !ok {
		t.Fatalf("README.md: the code block after <!-- %s --> is not closed", name)
	}
	return string(body)
}

// The README's Go programs (v1, session, election) each build as a module of
// their own, with the go.mod lines the README gives, against this
// checkout: a user who copies both files gets a program that compiles.
func TestReadmeProgramBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	gomod := readmeBlock(t, readme, "readme-go-mod")
	const placeholder = "=> ../locking-center"
	if !strings.Contains(gomod, placeholder) {
		t.Fatalf("the README's go.mod has no %q to point at a checkout:\n%s", placeholder, gomod)
	}
	for _, block := range []string{"readme-go-main", "readme-go-session", "readme-go-election"} {
		buildReadmeProgram(t, goBin, root, strings.Replace(gomod, placeholder, "=> "+root, 1), readmeBlock(t, readme, block))
	}
}

// buildReadmeProgram builds main in a module of its own with gomod.
func buildReadmeProgram(t *testing.T, goBin, root, gomod, main string) {
	t.Helper()
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", gomod)
	write("main.go", main)
	// The dependencies come from the module cache that building this
	// module filled; nothing is fetched.
	cmd := exec.Command(goBin, "build", "-mod=mod", "-o", filepath.Join(dir, "locker"), ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOSUMDB=off", "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build of the README's program: %v\n%s", err, out)
	}
}
