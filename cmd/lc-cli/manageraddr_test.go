package main

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// listenAdjacent listens on two free 127.0.0.1 ports, the second one
// above the first, as lcd lays out its mutex and management ports.
func listenAdjacent(t *testing.T) (mutexLn, managerLn net.Listener) {
	t.Helper()
	for range 100 {
		mutexLn = listen(t)
		port := mutexLn.Addr().(*net.TCPAddr).Port
		if port < 65535 {
			next, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+1)))
			if err == nil {
				return mutexLn, next
			}
		}
		mutexLn.Close()
	}
	t.Fatal("found no two adjacent free ports on 127.0.0.1")
	return nil, nil
}

func TestManagerAddressFollowsTheMutexAddress(t *testing.T) {
	mutexLn, managerLn := listenAdjacent(t)
	s := startServerOn(t, mutexLn, managerLn, nil)
	s.hold(t, "derived", "x")
	for _, c := range []struct {
		name string
		env  []string
		args []string
	}{
		{"flag", nil, []string{"--address", s.addr, "keys"}},
		{"variable", []string{"LC_ADDRESS=" + s.addr}, []string{"keys"}},
		{"flag over variable", []string{"LC_ADDRESS=" + closedAddr(t)}, []string{"--address", s.addr, "keys"}},
	} {
		r := runInProcess(t, c.env, c.args...)
		if r.code != exitOK || r.stdout != "derived\n" {
			t.Errorf("%s: keys = %d %q %q, want the key from %s", c.name, r.code, r.stdout, r.stderr, s.managerAddr)
		}
	}
}

// A list of mutex addresses gives the list of their management
// addresses, and a node whose ports are closed is passed over, on both.
func TestAddressListsPassOverADeadNode(t *testing.T) {
	deadMutex, deadManager := listenAdjacent(t)
	dead := deadMutex.Addr().String()
	deadMutex.Close()
	deadManager.Close()
	mutexLn, managerLn := listenAdjacent(t)
	s := startServerOn(t, mutexLn, managerLn, nil)
	list := dead + "," + s.addr
	for _, args := range [][]string{{"trylock", "listed"}, {"keys"}, {"unlock", "listed"}} {
		r := runInProcess(t, []string{"LC_ADDRESS=" + list}, args...)
		if r.code != exitOK || args[0] == "keys" && r.stdout != "listed\n" {
			t.Errorf("%q at %s = %d %q %q", args, list, r.code, r.stdout, r.stderr)
		}
	}
	r := runInProcess(t, nil, "--address", " , ", "trylock", "k")
	if r.code != exitFailure {
		t.Errorf("--address of no address = %d", r.code)
	}
	oneLine(t, r.stderr, "--address")
}

func TestGivenManagerAddressWins(t *testing.T) {
	mutexLn, managerLn := listenAdjacent(t)
	s := startServerOn(t, mutexLn, managerLn, nil)
	bad := closedAddr(t)
	for _, c := range []struct {
		name string
		env  []string
		args []string
	}{
		{"flags", nil, []string{"--address", s.addr, "--manager-address", bad, "keys"}},
		{"variables", []string{"LC_ADDRESS=" + s.addr, "LC_MANAGER_ADDRESS=" + bad}, []string{"keys"}},
		{"manager variable, address flag", []string{"LC_MANAGER_ADDRESS=" + bad}, []string{"--address", s.addr, "reset", "k"}},
		{"manager flag, address variable", []string{"LC_ADDRESS=" + s.addr}, []string{"--manager-address", bad, "keys", "-d"}},
	} {
		r := runInProcess(t, c.env, c.args...)
		if r.code != exitFailure {
			t.Errorf("%s: %q = %d, want 2 from the unreachable %s", c.name, c.args, r.code, bad)
		}
		oneLine(t, r.stderr, bad, "refused")
	}
}

func TestManagerAddressThatCannotBeDerived(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:65535", "127.0.0.1:0", "127.0.0.1:http", "127.0.0.1"} {
		for _, args := range [][]string{{"--address", addr, "keys"}, {"--address", addr, "reset", "-s", "s"}} {
			r := runInProcess(t, nil, args...)
			if r.code != exitFailure {
				t.Errorf("%q = %d, want 2", args, r.code)
			}
			oneLine(t, r.stderr, strconv.Quote(addr), "--manager-address")
		}
		r := runInProcess(t, []string{"LC_ADDRESS=" + addr}, "keys")
		if r.code != exitFailure {
			t.Errorf("LC_ADDRESS=%s keys = %d, want 2", addr, r.code)
		}
		oneLine(t, r.stderr, strconv.Quote(addr), "$LC_MANAGER_ADDRESS")
	}
	// Commands of the mutex port do not need the management address.
	r := runInProcess(t, nil, "--address", "127.0.0.1:65535", "trylock", "k")
	if strings.Contains(r.stderr, "management address") {
		t.Errorf("trylock at port 65535 failed for the management address: %q", r.stderr)
	}
}

func TestManagerAddressOf(t *testing.T) {
	for in, want := range map[string]string{
		"localhost:22119": "localhost:22120",
		"127.0.0.1:34119": "127.0.0.1:34120",
		"[::1]:1":         "[::1]:2",
		":22119":          ":22120",
		"locks.lan:65534": "locks.lan:65535",
	} {
		if got, err := managerAddressOf(in); err != nil || got != want {
			t.Errorf("managerAddressOf(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
