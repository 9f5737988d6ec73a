package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/locking-center/locking-center/internal/testcerts"
)

// A server that stops under a waiting lock says it closed the connection,
// never that the port may speak TLS.
func TestServerThatStopsUnderAWaitingLock(t *testing.T) {
	s := startServer(t, nil)
	s.hold(t, "held", "other")
	p := startInProcess(t, s.environ(), "lock", "held")
	s.waitWaiters(t, "held", 1)
	s.close()
	r := p.wait(t)
	if r.code != exitFailure {
		t.Fatalf("lock under a server that stopped = %d", r.code)
	}
	oneLine(t, r.stderr, "closed the connection")
	if strings.Contains(r.stderr, "TLS") {
		t.Errorf("stderr %q speaks of TLS to a plain server", r.stderr)
	}
}

// An HTTP port named as a mutex or management port is said to be one.
func TestHTTPPortIsNamed(t *testing.T) {
	web := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(web.Close)
	addr := strings.TrimPrefix(web.URL, "http://")
	env := []string{"LC_ADDRESS=" + addr, "LC_MANAGER_ADDRESS=" + addr, "LC_TIMEOUT=500ms"}
	failEachPort(t, env, "HTTP", "TLS")
}

// failEachPort runs a command of each port (v1, management, session) with
// env, and checks that each fails with one line that says want and not
// wrong.
func failEachPort(t *testing.T, env []string, want, wrong string) {
	t.Helper()
	for _, args := range [][]string{{"trylock", "k"}, {"keys"}, {"lock", "k", "--", "true"}} {
		r := runInProcess(t, env, args...)
		if r.code != exitFailure {
			t.Errorf("%q = %d, want 2", args, r.code)
		}
		oneLine(t, r.stderr, want)
		if strings.Contains(r.stderr, wrong) {
			t.Errorf("%q: stderr %q says %q", args, r.stderr, wrong)
		}
	}
}

// A client certificate of a CA the server does not take is sent all the
// same, and the failure says what is wrong with it.
func TestClientCertificateOfAnotherCA(t *testing.T) {
	s := startTLSServer(t)
	other := testcerts.NewCA(t, "another CA").Client(t, "stranger").Write(t, t.TempDir(), "stranger")
	env := append(s.environ(), "LC_CA_FILE="+s.caFile, "LC_CERT_FILE="+other.Cert, "LC_KEY_FILE="+other.Key)
	failEachPort(t, env, "no such CA signed --tls-cert", "certificate required")
}
