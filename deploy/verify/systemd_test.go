package verify

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// unit is a systemd unit file: section -> key -> values in order.
type unit map[string]map[string][]string

// parseUnit reads a unit file; it fails t on a line that is neither a
// section, a comment nor key=value.
func parseUnit(t *testing.T, b []byte) unit {
	t.Helper()
	u := make(unit)
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			u[section] = make(map[string][]string)
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("unit line %d: %q is not key=value in a section", n, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

// value returns the last value of key in section, the one in force.
func (u unit) value(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

func TestSystemdUnit(t *testing.T) {
	u := parseUnit(t, readRepoFile(t, "deploy/systemd/lcd.service"))
	want := map[string]string{
		"ExecStart":               "/usr/local/bin/lcd",
		"EnvironmentFile":         "-/etc/locking-center/lcd.env",
		"DynamicUser":             "yes",
		"StateDirectory":          "locking-center",
		"KillSignal":              "SIGTERM",
		"ExecReload":              "/bin/kill -HUP $MAINPID",
		"NoNewPrivileges":         "yes",
		"ProtectSystem":           "strict",
		"ProtectHome":             "yes",
		"PrivateTmp":              "yes",
		"PrivateDevices":          "yes",
		"ProtectKernelTunables":   "yes",
		"ProtectKernelModules":    "yes",
		"ProtectControlGroups":    "yes",
		"RestrictSUIDSGID":        "yes",
		"CapabilityBoundingSet":   "",
		"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
	}
	for k, v := range want {
		if _, ok := u["Service"][k]; !ok {
			t.Errorf("[Service] has no %s", k)
		} else if got := u.value("Service", k); got != v {
			t.Errorf("%s=%s, want %s", k, got, v)
		}
	}
	if !slices.Contains(u["Service"]["Environment"], "DATA_PATH=%S/locking-center/locks.wal") {
		t.Errorf("Environment %q does not put DATA_PATH in the state directory", u["Service"]["Environment"])
	}
	stop, err := time.ParseDuration(u.value("Service", "TimeoutStopSec") + "s")
	if err != nil || stop <= shutdownTimeoutSeconds*time.Second {
		t.Errorf("TimeoutStopSec=%s, want above the %d s shutdown drain", u.value("Service", "TimeoutStopSec"), shutdownTimeoutSeconds)
	}
	if got := u.value("Install", "WantedBy"); got != "multi-user.target" {
		t.Errorf("WantedBy=%s", got)
	}
}

// TestSystemdVerify has systemd-analyze check every directive of the unit;
// ExecStart points at the freshly built lcd, which it checks exists.
func TestSystemdVerify(t *testing.T) {
	analyze := requireTool(t, "systemd-analyze")
	b := readRepoFile(t, "deploy/systemd/lcd.service")
	b = bytes.Replace(b, []byte("ExecStart=/usr/local/bin/lcd\n"), []byte("ExecStart="+lcdPath()+"\n"), 1)
	path := filepath.Join(t.TempDir(), "lcd.service")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", "--man=no", path).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestSystemdEnvFile checks that the environment file documents exactly
// the variables lcd reads, as lcd --help lists them.
func TestSystemdEnvFile(t *testing.T) {
	help, err := exec.Command(lcdPath(), "--help").Output()
	if err != nil {
		t.Fatalf("lcd --help: %v", err)
	}
	var vars []string
	for _, m := range regexp.MustCompile(`\[\$([A-Z_]+)\]`).FindAllSubmatch(help, -1) {
		vars = append(vars, string(m[1]))
	}
	if len(vars) < 3 {
		t.Fatalf("lcd --help names only %q", vars)
	}
	var documented []string
	for _, m := range regexp.MustCompile(`(?m)^#?([A-Z_]+)=`).FindAllSubmatch(readRepoFile(t, "deploy/systemd/lcd.env"), -1) {
		documented = append(documented, string(m[1]))
	}
	for _, v := range vars {
		if !slices.Contains(documented, v) {
			t.Errorf("lcd.env does not document %s", v)
		}
	}
	for _, v := range documented {
		if !slices.Contains(vars, v) {
			t.Errorf("lcd.env sets %s, which lcd does not read", v)
		}
	}
}
