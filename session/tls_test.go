package session

import (
	"crypto/tls"
	"fmt"
	"strings"
	"testing"

	"github.com/locking-center/locking-center/internal/testcerts"
	"github.com/locking-center/locking-center/mutex"
	"github.com/locking-center/locking-center/oneshot"
)

// helloWith opens a session over TLS presenting cert.
func (e *env) helloWith(t *testing.T, cert *testcerts.Cert, name string, fields ...func(*frameBuilder)) *client {
	t.Helper()
	cfg := e.tls.Clone()
	cfg.Certificates = nil
	if cert != nil {
		cfg.Certificates = append(cfg.Certificates, cert.TLS)
	}
	c := startClient(t, e.connectWith(t, cfg))
	c.send(TypeHello, append([]func(*frameBuilder){func(fb *frameBuilder) { fb.str(TagName, name) }}, fields...)...)
	return c
}

// resumeOf sends a RESUME of the session of c on a new connection with
// cert and fields besides, and returns that connection's first frame.
func (e *env) resumeOf(t *testing.T, c *client, cert *testcerts.Cert, fields ...func(*frameBuilder)) Frame {
	t.Helper()
	cfg := e.tls.Clone()
	cfg.Certificates = []tls.Certificate{cert.TLS}
	r := startClient(t, e.connectWith(t, cfg))
	r.send(TypeResume, append([]func(*frameBuilder){func(fb *frameBuilder) { fb.u64(TagSession, c.sid) },
		func(fb *frameBuilder) { fb.bytes(TagSecret, c.sec) }}, fields...)...)
	return r.read()
}

// With SourceFromCert a session is named after its client's certificate,
// whatever HELLO says, and charged to that name; only a client with a
// certificate of that name resumes it.
func TestTLSSessionNamedByCertificate(t *testing.T) {
	e := start(t, envOptions{tls: true, cfg: Config{SourceFromCert: true}})
	svc := e.ca.Client(t, "svc-a")
	a := e.helloWith(t, svc, "liar")
	w := a.expect(TypeWelcome)
	a.sid, _ = w.Uint(TagSession)
	sec, _ := w.Get(TagSecret)
	a.sec = append([]byte(nil), sec...)
	a.granted(a.acquire("k"))
	var got []string
	e.node.Export(func(r *mutex.Record) {
		switch r.Kind {
		case mutex.RecordSession:
			got = append(got, "session "+r.Name+" charged to "+r.Account)
		case mutex.RecordHolder:
			got = append(got, "holder "+r.Source)
		}
	})
	if want := "session svc-a charged to svc-a; holder svc-a"; strings.Join(got, "; ") != want {
		t.Fatalf("table: %q, want %q", strings.Join(got, "; "), want)
	}

	if f := e.resumeOf(t, a, e.ca.Client(t, "svc-b")); f.Type != TypeGoodbye {
		t.Fatalf("a resume with another certificate got frame %#02x", uint8(f.Type))
	} else if code, _ := f.Uint(TagCode); Code(code) != CodeUnknownSession {
		t.Fatalf("a resume with another certificate: code %v", Code(code))
	}
	if f := e.resumeOf(t, a, svc); f.Type != TypeWelcome {
		t.Fatalf("a resume with the session's certificate got frame %#02x", uint8(f.Type))
	}
}

// A session whose client reads nothing never holds up the goroutine that
// grants it a lock (here a v1 unlock's), though its TLS connection cannot
// take another byte; the connection is written to as the client reads.
func TestTLSStalledSessionHoldsUpNobody(t *testing.T) {
	e := start(t, envOptions{tls: true})
	if v1Answer(t, e.v1(t, oneshot.ActionLock, "hot", "v1")) != '+' {
		t.Fatal("v1 lock")
	}
	// Fill the stalled client's connection: answers to DESCRIBEs of a key
	// with many holders of long names, which it does not read.
	for i := range 64 {
		h := e.hello(t, fmt.Sprintf("%0120d", i))
		h.granted(h.acquire("wide", func(fb *frameBuilder) { fb.u8(TagMode, uint8(mutex.Shared)) }))
	}
	c := e.hello(t, "stalled")
	pid := c.acquire("hot")
	eventually(t, "parked", func() bool { return parked(e.node, "hot") == 1 })
	var burst []byte
	for range 1000 { // about 10 MB of answers
		c.id++
		burst = append(burst, frameOf(TypeDescribe, c.id, func(fb *frameBuilder) { fb.str(TagKey, "wide") })...)
	}
	c.write(burst)
	marker := c.acquire("marker") // answered after every DESCRIBE
	eventually(t, "every DESCRIBE answered", func() bool {
		h, ok := e.node.Holder("marker")
		return ok && h.Session == c.sid
	})
	if a := v1Answer(t, e.v1(t, oneshot.ActionUnlock, "hot", "")); a != '+' {
		t.Fatalf("v1 unlock: %q", a)
	}
	for i := uint64(0); i < 1000; i++ {
		if f := c.read(); f.Type != TypeInfo {
			t.Fatalf("frame %d: %#02x, want INFO", i, uint8(f.Type))
		}
	}
	c.granted(marker)
	c.granted(pid)
}

// A client without TLS on a TLS port is refused and changes nothing.
func TestTLSPlainSessionClientRefused(t *testing.T) {
	e := start(t, envOptions{tls: true})
	c := startClient(t, e.connectWith(t, nil))
	c.send(TypeHello, func(fb *frameBuilder) { fb.str(TagName, "plain") })
	if !c.closed() {
		t.Fatal("a plain HELLO on the TLS port was answered")
	}
	if n := len(e.node.Snapshot().Sessions); n != 0 {
		t.Fatalf("%d sessions after a plain HELLO", n)
	}
	e.hello(t, "tls")
}

// With tokens beside SourceFromCert, a session is named after its
// certificate and charged to its token's principal; a resume needs the
// principal's token and a certificate of the session's name.
func TestTLSSessionCertificateAndToken(t *testing.T) {
	e := start(t, envOptions{tls: true, cfg: Config{SourceFromCert: true, Tokens: tokens(t)}})
	svc := e.ca.Client(t, "svc-a")
	a := e.helloWith(t, svc, "liar", credential(deployerToken))
	w := a.expect(TypeWelcome)
	a.sid, _ = w.Uint(TagSession)
	sec, _ := w.Get(TagSecret)
	a.sec = append([]byte(nil), sec...)
	a.granted(a.acquire("deploy/x"))
	var got []string
	e.node.Export(func(r *mutex.Record) {
		if r.Kind == mutex.RecordSession {
			got = append(got, "session "+r.Name+" charged to "+r.Account)
		}
	})
	if want := "session svc-a charged to deployer"; strings.Join(got, "; ") != want {
		t.Fatalf("table: %q, want %q", strings.Join(got, "; "), want)
	}
	for _, tt := range []struct {
		name  string
		cert  *testcerts.Cert
		token string
		want  Code
	}{
		{"another certificate", e.ca.Client(t, "svc-b"), deployerToken, CodeUnknownSession},
		{"another principal", svc, opsToken, CodeUnauthenticated},
	} {
		if f := e.resumeOf(t, a, tt.cert, credential(tt.token)); f.Type != TypeGoodbye {
			t.Errorf("a resume with %s got frame %#02x", tt.name, uint8(f.Type))
		} else if code, _ := f.Uint(TagCode); Code(code) != tt.want {
			t.Errorf("a resume with %s: code %v, want %v", tt.name, Code(code), tt.want)
		}
	}
	if f := e.resumeOf(t, a, svc, credential(deployerToken)); f.Type != TypeWelcome {
		t.Fatalf("a resume with the session's certificate and token got frame %#02x", uint8(f.Type))
	}
}
