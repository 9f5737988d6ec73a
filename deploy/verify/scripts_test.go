package verify

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"debug/pe"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// Stamps the release test builds with.
const (
	testVersion = "v0.0.0-verify"
	testCommit  = "c0ffee1"
)

// script runs a shell script of the tree with sh, the environment of the
// test plus env, and returns its exit code, stdout and stderr.
func script(t *testing.T, path string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command("sh", append([]string{path}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), stdout.String(), stderr.String()
	}
	if err != nil {
		t.Fatalf("run %s: %v", path, err)
	}
	return 0, stdout.String(), stderr.String()
}

func TestShellcheck(t *testing.T) {
	sc := requireTool(t, "shellcheck")
	cmd := exec.Command(sc, "--shell=sh", "--external-sources",
		"deploy/docker/create_image.sh",
		"deploy/executable/create_release.sh",
		"deploy/version.sh",
		"deploy/test.sh",
	)
	cmd.Dir = repoRoot // where the scripts' `. "$root/deploy/version.sh"` resolves
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("shellcheck: %v\n%s", err, out)
	}
}

// release describes one archive create_release.sh must write.
type release struct {
	file, os, arch string
	binaries       []string
}

func expectedReleases() []release {
	var rs []release
	for _, os := range []string{"linux", "darwin"} {
		for _, arch := range []string{"amd64", "arm64"} {
			rs = append(rs, release{"locking-center_" + testVersion + "_" + os + "_" + arch + ".tar.gz", os, arch, []string{"lcd", "lc-cli"}})
		}
	}
	for _, arch := range []string{"amd64", "arm64"} {
		rs = append(rs, release{"lc-cli_" + testVersion + "_windows_" + arch + ".zip", "windows", arch, []string{"lc-cli.exe"}})
	}
	return rs
}

// TestReleaseScript builds every release target into a temporary directory
// and checks each archive: the binaries present, executable, built for the
// named platform (static where the format says so), the checksums, and the
// version and commit stamped into the binaries this host can run.
func TestReleaseScript(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles ten binaries")
	}
	requireTool(t, "zip")
	out := t.TempDir()
	code, stdout, stderr := script(t, repoFile("deploy/executable/create_release.sh"),
		[]string{"VERSION=" + testVersion, "COMMIT=" + testCommit}, out)
	if code != 0 {
		t.Fatalf("create_release.sh exited %d\n%s%s", code, stdout, stderr)
	}
	sums := readChecksums(t, filepath.Join(out, "locking-center_"+testVersion+"_checksums.txt"))
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(expectedReleases())+1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("output holds %q, want the %d archives and the checksums", names, len(expectedReleases()))
	}
	for _, r := range expectedReleases() {
		t.Run(r.os+"/"+r.arch, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(out, r.file))
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(data)
			if sums[r.file] != hex.EncodeToString(sum[:]) {
				t.Errorf("checksum of %s is %x, the checksums file says %q", r.file, sum, sums[r.file])
			}
			files := unpack(t, r.file, data)
			dir := strings.TrimSuffix(strings.TrimSuffix(r.file, ".tar.gz"), ".zip")
			for _, b := range r.binaries {
				f, ok := files[dir+"/"+b]
				if !ok {
					t.Fatalf("%s lacks %s/%s", r.file, dir, b)
				}
				if r.os != "windows" && f.mode&0o111 == 0 {
					t.Errorf("%s: %s is not executable (%v)", r.file, b, f.mode)
				}
				checkBinary(t, r, b, f.data)
				if r.os == runtime.GOOS && r.arch == runtime.GOARCH {
					checkStamp(t, b, f.data)
				}
			}
		})
	}
}

// archived is one file of an archive.
type archived struct {
	mode os.FileMode
	data []byte
}

func unpack(t *testing.T, name string, data []byte) map[string]archived {
	t.Helper()
	files := make(map[string]archived)
	if strings.HasSuffix(name, ".zip") {
		zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, f := range zr.File {
			rc, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				t.Fatalf("%s: %s: %v", name, f.Name, err)
			}
			files[f.Name] = archived{f.Mode(), b}
		}
		return files
	}
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("%s: %s: %v", name, h.Name, err)
		}
		files[strings.TrimSuffix(h.Name, "/")] = archived{h.FileInfo().Mode(), b}
	}
}

// checkBinary asserts that data is an executable for r's platform; an ELF
// must be static, with no interpreter to load it.
func checkBinary(t *testing.T, r release, name string, data []byte) {
	t.Helper()
	rd := bytes.NewReader(data)
	switch r.os {
	case "linux":
		f, err := elf.NewFile(rd)
		if err != nil {
			t.Fatalf("%s: not ELF: %v", name, err)
		}
		want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[r.arch]
		if f.Machine != want {
			t.Errorf("%s: machine %v, want %v", name, f.Machine, want)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s: has an ELF interpreter, want a static binary", name)
			}
		}
	case "darwin":
		f, err := macho.NewFile(rd)
		if err != nil {
			t.Fatalf("%s: not Mach-O: %v", name, err)
		}
		want := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}[r.arch]
		if f.Cpu != want {
			t.Errorf("%s: cpu %v, want %v", name, f.Cpu, want)
		}
	case "windows":
		f, err := pe.NewFile(rd)
		if err != nil {
			t.Fatalf("%s: not PE: %v", name, err)
		}
		want := map[string]uint16{"amd64": pe.IMAGE_FILE_MACHINE_AMD64, "arm64": pe.IMAGE_FILE_MACHINE_ARM64}[r.arch]
		if f.Machine != want {
			t.Errorf("%s: machine %#x, want %#x", name, f.Machine, want)
		}
	}
}

// checkStamp runs a binary built for this host and asserts that it reports
// the version and commit the release was built with.
func checkStamp(t *testing.T, name string, data []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o755); err != nil {
		t.Fatal(err)
	}
	arg := map[string]string{"lcd": "--version", "lc-cli": "version"}[name]
	out, err := exec.Command(path, arg).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, arg, err, out)
	}
	if !strings.Contains(string(out), testVersion) || !strings.Contains(string(out), testCommit) {
		t.Errorf("%s %s printed %q, want version %s and commit %s", name, arg, out, testVersion, testCommit)
	}
}

// readChecksums parses "<sha256>  <file>" lines.
func readChecksums(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sums := make(map[string]string)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		sum, file, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(sum) != 64 {
			t.Fatalf("checksums line %q is not \"<sha256>  <file>\"", sc.Text())
		}
		sums[file] = sum
	}
	return sums
}

// TestReleaseScriptRefuses checks the script's clear failures: a version
// unfit for file names, and a tree without lc-cli's sources.
func TestReleaseScriptRefuses(t *testing.T) {
	code, _, stderr := script(t, repoFile("deploy/executable/create_release.sh"),
		[]string{"VERSION=1.0 beta"}, t.TempDir())
	if code != 2 || !strings.Contains(stderr, "VERSION 1.0 beta") {
		t.Errorf("VERSION with a space: exit %d, stderr %q; want 2 and a message", code, stderr)
	}

	// A copy of the scripts in a tree that has lcd but no lc-cli yet.
	tree := t.TempDir()
	for _, f := range []string{"deploy/executable/create_release.sh", "deploy/version.sh", "cmd/lcd/main.go"} {
		dst := filepath.Join(tree, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, readRepoFile(t, f), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "dist")
	code, _, stderr = script(t, filepath.Join(tree, "deploy/executable/create_release.sh"),
		[]string{"VERSION=v1", "COMMIT=abc"}, out)
	if code == 0 || !strings.Contains(stderr, "cmd/lc-cli has no Go sources") {
		t.Errorf("tree without lc-cli: exit %d, stderr %q; want a failure naming cmd/lc-cli", code, stderr)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("the refused release left %s behind", out)
	}
}

// TestImageScript runs create_image.sh against a recording stand-in for
// the container engine (none exists here) and checks the commands it
// would run: tags, build arguments, platforms and --push.
func TestImageScript(t *testing.T) {
	dir := t.TempDir()
	record := filepath.Join(dir, "calls")
	engine := filepath.Join(dir, "engine")
	if err := os.WriteFile(engine, []byte("#!/bin/sh\nprintf '%s\\n' \"$@\" >> \""+record+"\"\nprintf '%s\\n' -- >> \""+record+"\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Empty means default to the script; a later entry overrides an earlier.
	base := []string{"DOCKER=" + engine, "VERSION=v1.2.3", "COMMIT=abc1234", "IMAGE_NAME=", "IMAGE_TAG=", "PLATFORMS="}
	common := func(tags ...string) []string {
		a := []string{"--file", repoFile("Dockerfile"), "--build-arg", "VERSION=v1.2.3", "--build-arg", "COMMIT=abc1234"}
		for _, tag := range tags {
			a = append(a, "--tag", tag)
		}
		return append(a, repoRoot)
	}
	tests := []struct {
		name string
		env  []string
		args []string
		want []string // the engine's arguments
	}{
		{"defaults", nil, nil,
			append([]string{"build"}, common("locking-center/locking-center:v1.2.3", "locking-center/locking-center:latest")...)},
		{"push", []string{"IMAGE_NAME=my-org/lc", "IMAGE_TAG=stable"}, []string{"--push"},
			append([]string{"buildx", "build", "--platform", "linux/amd64,linux/arm64", "--push"}, common("my-org/lc:v1.2.3", "my-org/lc:stable")...)},
		{"push one platform", []string{"PLATFORMS=linux/arm64"}, []string{"--push"},
			append([]string{"buildx", "build", "--platform", "linux/arm64", "--push"}, common("locking-center/locking-center:v1.2.3", "locking-center/locking-center:latest")...)},
		{"tag equals version", []string{"IMAGE_TAG=v1.2.3"}, nil,
			append([]string{"build"}, common("locking-center/locking-center:v1.2.3")...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			os.Remove(record)
			code, stdout, stderr := script(t, repoFile("deploy/docker/create_image.sh"), append(slices.Clone(base), tt.env...), tt.args...)
			if code != 0 {
				t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
			}
			b, err := os.ReadFile(record)
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Split(strings.TrimSuffix(string(b), "\n--\n"), "\n")
			if !slices.Equal(got, tt.want) {
				t.Errorf("engine called with\n  %q\nwant\n  %q", got, tt.want)
			}
		})
	}

	os.Remove(record)
	code, _, stderr := script(t, repoFile("deploy/docker/create_image.sh"), []string{"DOCKER=" + engine}, "--pushh")
	if code == 0 || !strings.Contains(stderr, "unknown argument --pushh") {
		t.Errorf("unknown argument: exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(record); !os.IsNotExist(err) {
		t.Error("the engine ran despite an unknown argument")
	}
}
